"""YAML scenario → ``Scenario``: every rule, every default, one clear error per bad field.

Errors are ``ScenarioError("engine.workers.aggregated.kv_cache.block_size: must be a positive
integer, got 0")``: the dotted path of the field, then the rule.

This module ties the parts together; each part of a scenario has its own parser in ``simmodel.config``:

    files.py        the file → a mapping: bounded reads, safe YAML, ``--set PATH=VALUE`` overrides
    node.py         the node reader every parser uses (typed fields, unknown fields refused); bounds.py: ceilings
    traffic.py      ``traffic``: source, load, stop; importers/ (a benchmark tool's workload file), catalog.py
                    (the ``builtin:`` traces a path may name)
    engine.py       ``engine``: mode, model, backend, speculation, KV transfer, deployment-wide bounds
    backends.py     what differs per ``engine.backend``: its scheduler and host fields, KV unit, its own rules
    registries.py   ``engine.model`` and ``engine.hardware``: a registry id or a local file
    workers.py      ``engine.workers.<role>``: parallelism, KV cache and its capacity, the role's rules
    schedulers.py   ``….scheduler``: vLLM's and SGLang's scheduler knobs
    sglang_host.py  an SGLang worker's host loop, frontend, host profile, vision; the rules joining them to images
    timing.py       ``….timing``; calibration.py: the calibration file it may name
    limits.py       ``limits``; evaluation.py: ``evaluation.sla``
    router.py       ``router``: each pool's router and its knobs; planner.py: ``planner``, the replica planner
    schema.py       the frozen dataclasses all of these build; domains.py: search domains, refused here
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from simmodel.config.backends import BACKEND_RULES
from simmodel.config.domains import reject_search
from simmodel.config.engine import _engine
from simmodel.config.evaluation import parse_evaluation
from simmodel.config.files import apply_overrides, read_text_file, read_yaml
from simmodel.config.limits import _limits
from simmodel.config.node import _Node
from simmodel.config.planner import parse_planner
from simmodel.config.registries import _model
from simmodel.config.router import parse_routers
from simmodel.config.schema import Scenario
from simmodel.config.sglang_host import _check_images
from simmodel.config.traffic import _traffic
from simmodel.errors import ScenarioError

__all__ = ["_Node", "_model", "apply_overrides", "load_scenario", "parse_evaluation", "parse_scenario",
           "read_text_file", "read_yaml"]
"""The names other modules import from here: the entry points, and the node reader and model lookup that
search files (``simmodel.recommend``) and calibration runs (``simmodel.calibrate``) read with."""


def load_scenario(path: str | Path, overrides: Iterable[str] = ()) -> Scenario:
    """Read, override and validate a scenario file. Errors are prefixed with the file name; ``overrides``
    given as one string rather than a list is a ``TypeError`` (see ``apply_overrides``)."""
    path = Path(path)
    try:
        data = apply_overrides(read_yaml(path), overrides)
        return parse_scenario(data, base_dir=path.resolve().parent, path=path)
    except ScenarioError as exc:
        raise ScenarioError(f"{path.name}: {exc}", exc.category) from None


def parse_scenario(data: dict, base_dir: Path, path: Path | None = None) -> Scenario:
    """Validate a scenario mapping; relative trace paths resolve against ``base_dir``."""
    reject_search(data)
    root = _Node(data, "")
    engine = _engine(root.node("engine", required=True), base_dir)
    traffic = _traffic(root.node("traffic", required=True), base_dir)
    limits = _limits(root.node("limits"), traffic)
    sla, gpu_hour_price = parse_evaluation(root.node("evaluation"))
    routers = parse_routers(root.node("router"), engine, traffic)
    planner = parse_planner(root.node("planner"), engine)
    root.done()
    engine = _check_images(engine, traffic, base_dir, BACKEND_RULES[engine.backend])
    return Scenario(traffic, engine, path, limits, sla, routers, planner, gpu_hour_price)
