"""The search space of ``simmodel recommend``: a scenario whose fields may hold domains, expanded into
concrete candidate scenarios.

Domains are ``{choices: [...]}`` and ``{range: {...}}`` objects anywhere in the scenario
(``simmodel.config.domains``), plus what a search adds by default on each worker role (the workers
reference, "Recommend" column):

- ``parallelism.preset`` — absent or ``default``: the worker shapes of 1, 2, 4, 8 and 16 GPUs valid for
  the model (tensor dividing the attention heads and dividing or a multiple of the KV heads; for MoE
  models, experts tensor-sharded or spread by expert parallelism when the experts divide evenly); a list
  pins the shapes; ``false`` or ``{}`` searches only the parallelism fields as written;
- ``scheduler.max_batched_tokens`` — unset on aggregated and prefill roles: 8192, 16384, 32768;
- ``scheduler.max_sequences`` — unset: 1, 2, 4, … 256 on prefill roles, 256, 512, 1024 on the others.

``engine.mode: {choices: [aggregated, disaggregated]}`` searches each mode with its own roles.
"""

from __future__ import annotations

import copy
import random
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simmodel.config.domains import RECOMMEND_SECTIONS, domain_values, find_domains, is_domain
from simmodel.config.node import _show
from simmodel.errors import ScenarioError
from simmodel.perf.models import ModelSpec

PRESET_GPUS = (1, 2, 4, 8, 16)
SHAPE_FIELDS = ("tensor", "attention_data", "moe_tensor", "moe_expert")
MAX_BATCHED_TOKENS = (8192, 16384, 32768)
PREFILL_MAX_SEQUENCES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MAX_SEQUENCES = (256, 512, 1024)
ROLES = {"aggregated": ("aggregated",), "disaggregated": ("prefill", "decode")}
MAX_GRID = 10_000
"""Most candidates a grid search runs without ``max_trials``."""


@dataclass
class Dimension:
    """One searched field: its dotted path and the values it takes (a parallelism shape's value is a
    mapping merged into the role's parallelism)."""

    path: str
    values: list
    shape: bool = False


@dataclass
class Candidate:
    """One concrete scenario of the search, and the value each dimension took."""

    id: int
    config: dict
    choices: dict[str, Any] = field(default_factory=dict)
    number: int = 0
    """Its combination's number in the search space."""


def default_shapes(model: ModelSpec) -> list[dict]:
    """Worker shapes of 1–16 GPUs the model can take (pipeline 1)."""
    shapes = []
    for gpus in PRESET_GPUS:
        for tensor in (t for t in PRESET_GPUS if t <= gpus and gpus % t == 0):
            if model.num_attention_heads % tensor:
                continue
            if not model.is_mla and model.num_kv_heads % tensor and tensor % model.num_kv_heads:
                continue
            ranks = gpus // tensor
            if not model.is_moe:
                if ranks == 1:  # a dense model's data parallelism is more replicas
                    shapes.append({"tensor": tensor, "attention_data": 1})
                continue
            shapes.append({"tensor": tensor, "attention_data": ranks, "moe_tensor": gpus, "moe_expert": 1})
            if gpus > 1 and model.num_experts % gpus == 0:
                shapes.append({"tensor": tensor, "attention_data": ranks, "moe_tensor": 1, "moe_expert": gpus})
    return shapes


_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _keys(path: str) -> list:
    return [int(index) if index else name for name, index in _TOKEN.findall(path)]


def _walk(data: Any, keys: list) -> Any:
    for key in keys:
        data = data[key]
    return data


def _set(data: dict, path: str, value: Any) -> None:
    keys = _keys(path)
    _walk(data, keys[:-1])[keys[-1]] = value


def config_at(data: dict, path: str) -> Any:
    return _walk(data, _keys(path))


def _mapping(role: dict, key: str, at: str) -> dict:
    """The role's ``key`` mapping, created empty if unset."""
    value = role.get(key)
    if value is None:
        value = role[key] = {}
    if not isinstance(value, dict):
        raise ScenarioError(f"{at}.{key}: must be a mapping, got {_show(value)}")
    return value


def _role_defaults(base: dict, mode: str, model_of) -> list[Dimension]:
    """Add each role's default domains to ``base`` (in place); returns the parallelism-shape dimensions."""
    workers = base["engine"]["workers"]
    shapes: list[Dimension] = []
    for name in ROLES[mode]:
        role = workers.get(name)
        if not isinstance(role, dict):
            raise ScenarioError(f"engine.workers.{name}: required in {mode} mode")
        at = f"engine.workers.{name}"
        if mode == "aggregated" and "context_length" in role:
            raise ScenarioError(f"{at}.context_length: an aggregated search takes its limit from "
                                f"engine.context_length; set that instead")
        parallelism = _mapping(role, "parallelism", at)
        preset = parallelism.pop("preset", "default")
        if preset is None:
            preset = "default"
        if preset != "default" and preset is not False and preset != {} and not isinstance(preset, list):
            raise ScenarioError(f"{at}.parallelism.preset: must be default, a list of shapes, or false; got {preset!r}")
        if preset == "default" or isinstance(preset, list):
            pinned = [key for key in SHAPE_FIELDS if key in parallelism]
            if pinned:
                raise ScenarioError(f"{at}.parallelism.{pinned[0]}: set by the parallelism preset; remove it, or "
                                    f"set preset: false to search the fields as written")
            if preset == "default":
                values = default_shapes(model_of(mode))
            else:
                if not preset:
                    raise ScenarioError(f"{at}.parallelism.preset: a list of shapes must not be empty")
                for i, shape in enumerate(preset):
                    if (not isinstance(shape, dict) or not shape or set(shape) - set(SHAPE_FIELDS)
                            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                       for v in shape.values())):
                        raise ScenarioError(f"{at}.parallelism.preset[{i}]: must be a mapping of "
                                            f"{', '.join(SHAPE_FIELDS)} to positive integers, got {shape!r}")
                values = [dict(shape) for shape in preset]
            shapes.append(Dimension(f"{at}.parallelism", values, shape=True))
        scheduler = _mapping(role, "scheduler", at)
        if name != "decode" and scheduler.get("max_batched_tokens") is None:
            scheduler["max_batched_tokens"] = {"choices": list(MAX_BATCHED_TOKENS)}
        if scheduler.get("max_sequences") is None:
            scheduler["max_sequences"] = {"choices": list(PREFILL_MAX_SEQUENCES if name == "prefill"
                                                      else MAX_SEQUENCES)}
    for name in list(workers):
        if name not in ROLES[mode]:
            del workers[name]
    return shapes


class SearchSpace:
    """Every combination of a search's dimensions, numbered: the modes one after the other, and within a
    mode the first dimension (parallelism shapes first, then the domains in document order) varying
    slowest, as ``itertools.product`` would. Grid and random search pick numbers; Bayesian search picks a
    mode and one value index per dimension (``number_of``)."""

    def __init__(self, data: dict, model_of) -> None:
        base = {k: v for k, v in copy.deepcopy(data).items() if k not in RECOMMEND_SECTIONS}
        engine = base.get("engine")
        if not isinstance(engine, dict) or not isinstance(engine.get("workers"), dict):
            raise ScenarioError("engine.workers: required (a mapping of worker roles)")
        mode = engine.get("mode", "aggregated")
        self.modes = domain_values("engine.mode", mode) if is_domain(mode) else [mode]
        for value in self.modes:
            if not isinstance(value, str) or value not in ROLES:
                raise ScenarioError(f"engine.mode: must be one of aggregated, disaggregated, got {_show(value)}")
        self.grids: list[tuple[dict, list[Dimension]]] = []
        for value in self.modes:
            per_mode = copy.deepcopy(base)
            per_mode["engine"]["mode"] = value
            if value == "aggregated" and len(self.modes) > 1:
                per_mode["engine"].pop("kv_transfer", None)  # the disaggregated candidates' KV link
            shapes = _role_defaults(per_mode, value, model_of)
            dims = shapes + [Dimension(path, domain_values(path, domain)) for path, domain in find_domains(per_mode)]
            self.grids.append((per_mode, dims))
        self.sizes = [int(np.prod([len(d.values) for d in dims], dtype=object)) for _, dims in self.grids]
        self.size = sum(self.sizes)

    def number_of(self, mode_index: int, digits: list[int]) -> int:
        """The number of the combination that takes value ``digits[i]`` of dimension i in a mode."""
        number = 0
        for dim, digit in zip(self.grids[mode_index][1], digits):
            number = number * len(dim.values) + digit
        return sum(self.sizes[:mode_index]) + number

    def candidate(self, id: int, number: int) -> Candidate:
        """Combination ``number`` as a concrete scenario, with the value each dimension took."""
        g = 0
        while number >= self.sizes[g]:
            number -= self.sizes[g]
            g += 1
        per_mode, dims = self.grids[g]
        config, choices = copy.deepcopy(per_mode), {}
        if len(self.modes) > 1:
            choices["engine.mode"] = per_mode["engine"]["mode"]
        for dim, index in zip(dims, _unravel(number, [len(d.values) for d in dims])):
            value = copy.deepcopy(dim.values[index])
            if dim.shape:
                parallelism = dict(config_at(config, dim.path))
                parallelism.update(value)
                _set(config, dim.path, parallelism)
            else:
                _set(config, dim.path, value)
            choices[dim.path] = value
        return Candidate(id, config, choices, number)


def expand(space: SearchSpace, algorithm: str = "grid", max_trials: int | None = None,
           seed: int = 0) -> list[Candidate]:
    """The candidates of a grid or random search, in evaluation order. Grid: every combination in order
    (the first ``max_trials`` of them when set); random: ``max_trials`` distinct combinations drawn with
    ``seed``."""
    if algorithm == "random":
        count = min(max_trials or space.size, space.size)
        rng = random.Random(seed)
        if space.size <= 10**7:
            picks = rng.sample(range(space.size), count)
        else:  # spaces past what ``sample`` takes (even past 2**63): draw until ``count`` distinct
            picks, seen = [], set()
            while len(picks) < count:
                pick = rng.randrange(space.size)
                if pick not in seen:
                    seen.add(pick)
                    picks.append(pick)
    else:
        if not max_trials and space.size > MAX_GRID:
            raise ScenarioError(f"optimizer.max_trials: the grid has {space.size:,} candidates, more than "
                                f"{MAX_GRID:,}; set max_trials, or search it with random or bayesian")
        picks = list(range(min(space.size, max_trials) if max_trials else space.size))
    return [space.candidate(id, pick) for id, pick in enumerate(picks, start=1)]


def _unravel(index: int, sizes: list[int]) -> list[int]:
    """Mixed-radix digits of ``index``, the first size most significant (itertools.product order)."""
    digits = []
    for size in reversed(sizes):
        index, digit = divmod(index, size)
        digits.append(digit)
    return digits[::-1]
