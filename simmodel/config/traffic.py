"""``traffic``: what arrives. The source of requests (synthetic lengths, shared-prefix groups, multi-turn
sessions, a trace file, or a benchmark tool's workload file to import), the load that sends them
(closed-loop concurrency, Poisson, gamma, constant rate, the trace's timestamps, or stages), and the stop.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from simmodel.config.catalog import resolve_trace_path
from simmodel.config.importers import TOOLS, import_workload
from simmodel.config.node import _MISSING, _Node, _show, finite_number
from simmodel.config.schema import (
    AGENT_FORMATS,
    TRACE_FORMATS,
    AgenticSource,
    ImageSpec,
    LengthSpec,
    LoadSpec,
    LoadStage,
    SessionsSource,
    SharedPrefix,
    SharedPrefixSource,
    StopSpec,
    SyntheticSource,
    TraceSource,
    Traffic,
)
from simmodel.errors import ScenarioError


def _length(node: _Node, key: str) -> LengthSpec:
    value = node.raw(key)
    if not isinstance(value, dict):
        return LengthSpec("fixed", value=node.int(key))
    spec = _Node(value, node.at(key))
    kind = spec.choice("distribution", ("uniform", "normal", "lognormal", "choice"))
    if kind == "uniform":
        low, high = spec.int("min"), spec.int("max")
        if high < low:
            raise ScenarioError(f"{spec.at('max')}: must be >= min ({low}), got {high}")
        result = LengthSpec(kind, min=low, max=high)
    elif kind in ("normal", "lognormal"):
        mean, std = spec.number("mean", positive=True), spec.number("std")
        low, high = spec.int("min", 1), spec.int("max", None)
        if high is not None and high < low:
            raise ScenarioError(f"{spec.at('max')}: must be >= min ({low}), got {high}")
        result = LengthSpec(kind, mean=mean, std=std, min=low, max=high)
    else:
        values = spec.raw("values")
        if not isinstance(values, list) or not values or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
            raise ScenarioError(f"{spec.at('values')}: must be a non-empty list of positive integers")
        weights = spec.raw("weights", None)
        if weights is not None:
            if (not isinstance(weights, list) or len(weights) != len(values)
                    or not all(finite_number(w) and w >= 0 for w in weights) or sum(weights) <= 0):
                raise ScenarioError(f"{spec.at('weights')}: must be {len(values)} non-negative numbers "
                                    f"with a positive sum")
            weights = tuple(float(w) for w in weights)
        result = LengthSpec(kind, values=tuple(values), weights=weights)
    spec.done()
    return result


MAX_STAGES = 1000


def _burstiness(ld: _Node) -> float:
    return ld.number("burstiness", 1.0, positive=True, minimum=1e-3)


def _stages(ld: _Node) -> tuple[LoadStage, ...]:
    """The stages in order: each sends for ``duration_s`` and/or until it sent ``requests``."""
    raw = ld.raw("stages")
    if not isinstance(raw, list) or not raw or len(raw) > MAX_STAGES:
        raise ScenarioError(f"{ld.at('stages')}: must be a list of 1 to {MAX_STAGES} stages, each "
                            f"{{requests_per_second | concurrency, duration_s and/or requests}}, got {_show(raw)}")
    stages = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ScenarioError(f"{ld.at('stages')}[{i}]: must be a mapping, got {_show(item)}")
        node = _Node(item, f"{ld.at('stages')}[{i}]")
        if ("requests_per_second" in item) == ("concurrency" in item):
            raise ScenarioError(f"{node.path}: give exactly one of requests_per_second and concurrency")
        if "duration_s" not in item and "requests" not in item:
            raise ScenarioError(f"{node.path}: give duration_s, requests, or both (the stage ends at the first)")
        duration = node.number("duration_s", None, positive=True, minimum=1e-6)
        requests = node.int("requests", None)
        if "concurrency" in item:
            stage = LoadStage(duration, requests, concurrency=node.int("concurrency"))
        else:
            stage = LoadStage(duration, requests,
                              requests_per_second=node.number("requests_per_second", positive=True, minimum=1e-6))
        node.done()
        stages.append(stage)
    return tuple(stages)


def _imported(node: _Node, base_dir: Path) -> Traffic:
    """``source: {type: import, tool, path, prompt_overhead_tokens}``: the workload a benchmark tool's own file
    describes (``simmodel.config.importers``); it sets the load and stop too."""
    src = node.node("source")
    src.choice("type", ("import",))
    tool = src.choice("tool", TOOLS)
    raw_path = src.raw("path")
    if not isinstance(raw_path, str) or not raw_path:
        raise ScenarioError(f"{src.at('path')}: must be a file path, got {_show(raw_path)}")
    overhead = src.int("prompt_overhead_tokens", 0, minimum=0)
    src.done()
    for key in ("load", "stop"):
        if node.raw(key, None) is not None:
            raise ScenarioError(f"{node.at(key)}: set by the imported {tool} workload; remove it")
    node.done()
    path = Path(raw_path) if Path(raw_path).is_absolute() else base_dir / raw_path
    mapping, warnings = import_workload(tool, path)
    try:
        traffic = _traffic(_Node(mapping, "traffic"), base_dir)
    except ScenarioError as exc:
        raise ScenarioError(f"traffic.source.path: {path.name}: the {tool} workload it describes is refused: "
                            f"{exc}") from None
    return replace(traffic, warnings=tuple(warnings), prompt_overhead_tokens=overhead)


def _trace_path(src: _Node, base_dir: Path) -> Path:
    raw_path = src.raw("path")
    if not isinstance(raw_path, str) or not raw_path:
        raise ScenarioError(f"{src.at('path')}: must be a file path, got {_show(raw_path)}")
    try:
        return resolve_trace_path(raw_path, base_dir)
    except ScenarioError as exc:
        raise ScenarioError(f"{src.at('path')}: {exc}") from None


def _traffic(node: _Node, base_dir: Path) -> Traffic:
    raw_source = node.raw("source", None)
    if isinstance(raw_source, dict) and raw_source.get("type") == "import":
        return _imported(node, base_dir)
    src = node.node("source", required=True)
    kind = src.choice("type", ("synthetic", "shared_prefix", "sessions", "trace", "agentic", "import"))
    if kind == "agentic":
        fmt = src.choice("format", AGENT_FORMATS, "simmodel")
        if fmt != "mooncake" and src.raw("block_size", None) is not None:
            raise ScenarioError(f"{src.at('block_size')}: only mooncake traces carry hash_ids")
        source = AgenticSource(_trace_path(src, base_dir), fmt,
                               _length(src, "tool_latency_ms") if src.raw("tool_latency_ms", None) is not None
                               else None, src.int("block_size", 512))
    elif kind == "sessions":
        source = SessionsSource(_length(src, "turns"), _length(src, "new_input_tokens_per_turn"),
                                _length(src, "output_tokens_per_turn"),
                                src.number("inter_turn_delay_ms", 0.0), src.number("shared_prefix_ratio", 0.0,
                                                                                   maximum=1.0))
        if source.turns.max is None and source.turns.distribution in ("normal", "lognormal"):
            raise ScenarioError(f"{src.at('turns')}.max: required (a session needs a bounded number of turns)")
    elif kind == "shared_prefix":
        source = SharedPrefixSource(src.int("num_groups", maximum=1_000_000),
                                    src.int("prompts_per_group", maximum=1_000_000),
                                    _length(src, "system_prompt_tokens"), _length(src, "question_tokens"),
                                    _length(src, "output_tokens"))
        if source.num_groups * source.prompts_per_group > 10_000_000:
            raise ScenarioError(f"{src.path}: num_groups × prompts_per_group must be at most 10,000,000")
    elif kind == "synthetic":
        shared = None
        if src.raw("shared_prefix", None) is not None:
            sp = src.node("shared_prefix")
            shared = SharedPrefix(sp.int("tokens"), sp.int("groups"))
            sp.done()
        images = None
        if src.raw("images", None) is not None:
            im = src.node("images")
            images = ImageSpec(im.int("height", maximum=65_536), im.int("width", maximum=65_536),
                               im.int("count", 1, maximum=64), im.choice("encoding", ("png", "jpeg"), "png"),
                               im.choice("identity", ("unique", "shared"), "unique"))
            im.done()
        source: SyntheticSource | TraceSource = SyntheticSource(_length(src, "input_tokens"),
                                                                _length(src, "output_tokens"), shared_prefix=shared,
                                                                images=images)
    else:
        path = _trace_path(src, base_dir)
        fmt = src.choice("format", TRACE_FORMATS)
        hash_block = src.int("block_size", 512)
        if fmt != "mooncake" and src.raw("block_size", None) is not None:
            raise ScenarioError(f"{src.at('block_size')}: only mooncake traces carry hash_ids")
        source = TraceSource(path, fmt, block_size=hash_block)
    src.done()

    loads = ("concurrency", "poisson", "gamma", "constant_rate", "trace_timestamps", "stages")
    timed = kind in ("trace", "agentic")
    ld = node.node("load", required=not timed)
    load_type = ld.choice("type", loads, "trace_timestamps" if timed else _MISSING)
    if load_type == "concurrency":
        load = LoadSpec(load_type, concurrency=ld.int("concurrency"))
    elif load_type == "poisson":
        load = LoadSpec(load_type, requests_per_second=ld.number("requests_per_second", positive=True, minimum=1e-6),
                        seed=ld.int("seed", None, minimum=0, maximum=2**32 - 1))
    elif load_type == "gamma":
        load = LoadSpec(load_type, requests_per_second=ld.number("requests_per_second", positive=True, minimum=1e-6),
                        seed=ld.int("seed", None, minimum=0, maximum=2**32 - 1), burstiness=_burstiness(ld))
    elif load_type == "stages":
        arrivals = ld.choice("arrivals", ("constant", "poisson", "gamma", "fixed_count"), "poisson")
        if arrivals != "gamma" and ld.raw("burstiness", None) is not None:
            raise ScenarioError(f"{ld.at('burstiness')}: only applies to arrivals: gamma")
        load = LoadSpec(load_type, seed=ld.int("seed", None, minimum=0, maximum=2**32 - 1), arrivals=arrivals,
                        burstiness=_burstiness(ld) if arrivals == "gamma" else 1.0, stages=_stages(ld),
                        drain=ld.bool("drain", False), pause_s=ld.number("pause_s", 0.0))
        random_stages = [st for st in load.stages if st.requests_per_second is not None and arrivals != "constant"]
        if load.seed is not None and not random_stages:
            raise ScenarioError(f"{ld.at('seed')}: no stage draws random arrivals (constant arrivals or "
                                f"concurrency stages only); remove it")
        if len(load.stages) == 1 and (load.drain or load.pause_s):
            raise ScenarioError(f"{ld.at('drain' if load.drain else 'pause_s')}: applies between stages; "
                                f"there is one stage")
        if arrivals == "fixed_count":
            for i, stage in enumerate(load.stages):
                if stage.requests_per_second is not None and stage.duration_s is None:
                    raise ScenarioError(f"{ld.at('stages')}[{i}].duration_s: required by arrivals: fixed_count "
                                        f"(⌊rate × duration⌋ requests spread over the stage)")
    elif load_type == "constant_rate":
        load = LoadSpec(load_type, requests_per_second=ld.number("requests_per_second", positive=True, minimum=1e-6))
    else:
        if not timed:
            raise ScenarioError(f"{ld.at('type')}: trace_timestamps needs traffic.source.type: trace or agentic")
        load = LoadSpec(load_type, speedup=ld.number("speedup", 1.0, positive=True, minimum=1e-6))
    if load_type in ("poisson", "gamma", "constant_rate", "trace_timestamps"):
        load = replace(load, max_concurrency=ld.int("max_concurrency", None))
    if load_type in ("poisson", "gamma"):
        load = replace(load, rescale_to_rate=ld.bool("rescale_to_rate", False))
    if kind in ("sessions", "agentic") and load.max_concurrency is not None:
        raise ScenarioError(f"{ld.at('max_concurrency')}: not with {kind} sessions (a session's calls are "
                            f"its own closed loop); use type: concurrency for a number of sessions")
    if kind == "agentic" and load.rescale_to_rate:
        raise ScenarioError(f"{ld.at('rescale_to_rate')}: spreads N requests over N / rate, and an agentic load's "
                            f"unit is a session of several calls; remove it")
    if kind == "agentic" and load_type == "stages":
        raise ScenarioError(f"{ld.at('type')}: stages of agentic sessions are not modelled; use trace_timestamps, "
                            f"concurrency or a session rate")
    ld.done()

    st = node.node("stop")
    stop = StopSpec(st.int("requests", None),
                    st.number("max_virtual_time_seconds", None, positive=True))
    st.done()
    if load.rescale_to_rate and stop.requests is None:
        raise ScenarioError(f"{ld.at('rescale_to_rate')}: needs traffic.stop.requests (the N requests spread "
                            f"over N / requests_per_second)")
    if (not timed and load_type != "stages" and stop.requests is None
            and stop.max_virtual_time_seconds is None):
        raise ScenarioError(f"{st.path}: synthetic traffic needs requests or max_virtual_time_seconds")
    node.done()
    return Traffic(source, load, stop)
