"""YAML scenario → ``Scenario``: every rule, every default, one clear error per bad field.

Errors are ``ScenarioError("engine.workers.aggregated.kv_cache.block_size: must be a positive
integer, got 0")``: the dotted path of the field, then the rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from simmodel.config.schema import (
    CapacitySpec,
    Engine,
    KvCacheSpec,
    KvTransferSpec,
    LaunchSpec,
    LengthSpec,
    LoadSpec,
    Parallelism,
    Scenario,
    SchedulerSpec,
    SharedPrefix,
    SpeculationSpec,
    StopSpec,
    SyntheticSource,
    TimingSpec,
    TraceSource,
    Traffic,
    WorkerRole,
)
from simmodel.engine.kv_cache import cdiv
from simmodel.errors import ScenarioError
from simmodel.perf.capacity import default_kv_blocks
from simmodel.perf.deployment import DTYPE_BYTES, Deployment
from simmodel.perf.hardware import HARDWARE, HardwareSpec
from simmodel.perf.models import MODELS, ModelSpec
from simmodel.perf.roofline import Efficiency, HostOverhead
from simmodel.traffic.traces import FORMATS

_MISSING = object()
# Bounds that keep every count and every simulated time (integer nanoseconds) well inside int64.
MAX_INT = 1_000_000_000
MAX_NUMBER = 1e9


class _Node:
    """A YAML mapping at a dotted path; reads typed fields and rejects the ones nobody read."""

    def __init__(self, data: Any, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ScenarioError(f"{path}: must be a mapping, got {_show(data)}")
        self.data, self.path, self._read = data, path, set()

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        self._read.add(key)
        if key not in self.data or self.data[key] is None:
            if default is _MISSING:
                raise ScenarioError(f"{self.at(key)}: required field is missing")
            return default
        return self.data[key]

    def node(self, key: str, required: bool = False) -> _Node:
        return _Node(self.raw(key, _MISSING if required else None), self.at(key))

    def int(self, key: str, default: Any = _MISSING, *, minimum: int = 1, maximum: int = MAX_INT) -> int:
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            rule = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ScenarioError(f"{self.at(key)}: must be {rule}, got {_show(value)}")
        if value > maximum:
            raise ScenarioError(f"{self.at(key)}: must be at most {maximum:,}, got {_show(value)}")
        return value

    def number(self, key: str, default: Any = _MISSING, *, positive: bool = False,
               maximum: float | None = MAX_NUMBER, minimum: float | None = None) -> float:
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        ok = ok and (value > 0 if positive else value >= 0) and (maximum is None or value <= maximum)
        if ok and minimum is not None and value < minimum:
            raise ScenarioError(f"{self.at(key)}: must be at least {minimum:g}, got {_show(value)}")
        if not ok:
            rule = "a positive number" if positive else "a non-negative number"
            if maximum is not None:
                rule += f" at most {maximum:g}"
            raise ScenarioError(f"{self.at(key)}: must be {rule}, got {_show(value)}")
        return float(value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise ScenarioError(f"{self.at(key)}: must be true or false, got {_show(value)}")
        return value

    def choice(self, key: str, choices: Iterable[str], default: Any = _MISSING) -> str:
        value = self.raw(key, default)
        choices = tuple(choices)
        if value not in choices:
            raise ScenarioError(f"{self.at(key)}: must be one of {', '.join(choices)}, got {_show(value)}")
        return value

    def done(self) -> None:
        """Reject every field that no rule read."""
        for key in self.data:
            if key not in self._read:
                allowed = ", ".join(sorted(self._read)) or "none"
                raise ScenarioError(f"{self.at(str(key))}: unknown field (allowed here: {allowed})")


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip()
    text = text.removesuffix("\n...").strip()
    return text if len(text) <= 60 else text[:57] + "..."


# ----------------------------------------------------------------------------------------------
# Public entry points


def read_yaml(path: Path) -> dict:
    """Parse one YAML document safely (no object construction)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError("scenario file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"cannot read the scenario file ({exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{where}not valid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"the scenario must be a YAML mapping with traffic and engine, got {_show(data)}")
    return data


def apply_overrides(data: dict, overrides: Iterable[str]) -> dict:
    """Apply ``PATH=YAML_VALUE`` overrides left to right; returns a new mapping."""
    import copy

    data = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ScenarioError(f"--set {item}: expected PATH=VALUE")
        dotted, text = item.split("=", 1)
        keys = dotted.strip().split(".")
        if not all(keys):
            raise ScenarioError(f"--set {item}: PATH must be dotted field names like engine.seed")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ScenarioError(f"--set {item}: the value is not valid YAML") from None
        target = data
        for depth, key in enumerate(keys[:-1]):
            nxt = target.get(key)
            if nxt is None:
                nxt = target[key] = {}
            if not isinstance(nxt, dict):
                raise ScenarioError(f"--set {item}: {'.'.join(keys[:depth + 1])} is not a mapping")
            target = nxt
        target[keys[-1]] = value
    return data


def load_scenario(path: str | Path, overrides: Iterable[str] = ()) -> Scenario:
    """Read, override and validate a scenario file. Errors are prefixed with the file name."""
    path = Path(path)
    try:
        data = apply_overrides(read_yaml(path), overrides)
        return parse_scenario(data, base_dir=path.resolve().parent, path=path)
    except ScenarioError as exc:
        raise ScenarioError(f"{path.name}: {exc}") from None


def parse_scenario(data: dict, base_dir: Path, path: Path | None = None) -> Scenario:
    """Validate a scenario mapping; relative trace paths resolve against ``base_dir``."""
    root = _Node(data, "")
    engine = _engine(root.node("engine", required=True), base_dir)
    traffic = _traffic(root.node("traffic", required=True), base_dir)
    root.done()
    return Scenario(traffic, engine, path)


# ----------------------------------------------------------------------------------------------
# traffic


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
            if (not isinstance(weights, list) or len(weights) != len(values) or not all(
                    isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) and w >= 0
                    for w in weights) or sum(weights) <= 0):
                raise ScenarioError(f"{spec.at('weights')}: must be {len(values)} non-negative numbers "
                                    f"with a positive sum")
            weights = tuple(float(w) for w in weights)
        result = LengthSpec(kind, values=tuple(values), weights=weights)
    spec.done()
    return result


def _traffic(node: _Node, base_dir: Path) -> Traffic:
    src = node.node("source", required=True)
    kind = src.choice("type", ("synthetic", "trace"))
    if kind == "synthetic":
        shared = None
        if src.raw("shared_prefix", None) is not None:
            sp = src.node("shared_prefix")
            shared = SharedPrefix(sp.int("tokens"), sp.int("groups"))
            sp.done()
        source: SyntheticSource | TraceSource = SyntheticSource(_length(src, "input_tokens"),
                                                                _length(src, "output_tokens"), shared_prefix=shared)
    else:
        raw_path = src.raw("path")
        if not isinstance(raw_path, str) or not raw_path:
            raise ScenarioError(f"{src.at('path')}: must be a file path, got {_show(raw_path)}")
        path = Path(raw_path)
        fmt = src.choice("format", FORMATS)
        hash_block = src.int("block_size", 512)
        if fmt != "mooncake" and src.raw("block_size", None) is not None:
            raise ScenarioError(f"{src.at('block_size')}: only mooncake traces carry hash_ids")
        source = TraceSource(path if path.is_absolute() else base_dir / path, fmt, block_size=hash_block)
    src.done()

    loads = ("concurrency", "poisson", "constant_rate", "trace_timestamps")
    ld = node.node("load", required=kind == "synthetic")
    load_type = ld.choice("type", loads, "trace_timestamps" if kind == "trace" else _MISSING)
    if load_type == "concurrency":
        load = LoadSpec(load_type, concurrency=ld.int("concurrency"))
    elif load_type == "poisson":
        load = LoadSpec(load_type, requests_per_second=ld.number("requests_per_second", positive=True, minimum=1e-6),
                        seed=ld.int("seed", None, minimum=0, maximum=2**32 - 1))
    elif load_type == "constant_rate":
        load = LoadSpec(load_type, requests_per_second=ld.number("requests_per_second", positive=True, minimum=1e-6))
    else:
        if kind != "trace":
            raise ScenarioError(f"{ld.at('type')}: trace_timestamps needs traffic.source.type: trace")
        load = LoadSpec(load_type, speedup=ld.number("speedup", 1.0, positive=True, minimum=1e-6))
    ld.done()

    st = node.node("stop")
    stop = StopSpec(st.int("requests", None),
                    st.number("max_virtual_time_seconds", None, positive=True))
    st.done()
    if kind == "synthetic" and stop.requests is None and stop.max_virtual_time_seconds is None:
        raise ScenarioError(f"{st.path}: synthetic traffic needs requests or max_virtual_time_seconds")
    node.done()
    return Traffic(source, load, stop)


# ----------------------------------------------------------------------------------------------
# engine


def _not_yet(node: _Node, key: str, value: Any, default: Any, issue: str) -> None:
    if value != default:
        raise ScenarioError(f"{node.at(key)}: {_show(value)} is not yet supported ({issue}); "
                            f"only {_show(default)} is implemented")


def _model(node: _Node, base_dir: Path) -> tuple[str, ModelSpec]:
    """A registry id, or a local Hugging Face ``config.json`` (the file or its folder)."""
    value = node.raw("model")
    if isinstance(value, str) and value in MODELS:
        return value, MODELS[value]
    path = Path(value) if isinstance(value, str) else None
    if path is not None and not path.is_absolute():
        path = base_dir / path
    if path is not None and (path.suffix == ".json" or path.is_dir()) and path.exists():
        from simmodel.perf.hf_config import model_from_hf_config

        try:
            return value, model_from_hf_config(path)
        except ScenarioError as exc:
            raise ScenarioError(f"{node.at('model')}: {exc}") from None
    raise ScenarioError(f"{node.at('model')}: unknown model {_show(value)}: give a registry id "
                        f"({', '.join(sorted(MODELS))}) or the path of a local config.json")


def _hardware(node: _Node, base_dir: Path) -> tuple[str, HardwareSpec]:
    """A registry system id, or a YAML system file."""
    value = node.raw("hardware")
    if isinstance(value, str) and value in HARDWARE:
        return value, HARDWARE[value]
    if isinstance(value, str) and value.endswith((".yaml", ".yml")):
        from simmodel.perf.hardware import hardware_from_yaml

        path = Path(value) if Path(value).is_absolute() else base_dir / value
        try:
            return value, hardware_from_yaml(path)
        except ScenarioError as exc:
            raise ScenarioError(f"{node.at('hardware')}: {exc}") from None
    raise ScenarioError(f"{node.at('hardware')}: unknown system {_show(value)}: give a system id "
                        f"({', '.join(sorted(HARDWARE))}) or the path of a system .yaml file")


def _engine(node: _Node, base_dir: Path) -> Engine:
    mode = node.choice("mode", ("aggregated", "disaggregated"), "aggregated")
    model_id, model = _model(node, base_dir)
    hardware_id, hardware = _hardware(node, base_dir)
    backend = node.choice("backend", ("vllm", "sglang"), "vllm")
    _not_yet(node, "backend", backend, "vllm", "the SGLang backend is a later issue")
    dtype = node.choice("dtype", ("auto", *DTYPE_BYTES), "auto")
    context_length = _context_length(node, model, model.max_position_embeddings)
    chunked = node.bool("enable_chunked_prefill", True)
    seed = node.int("seed", 0, minimum=0, maximum=2**32 - 1)
    speculation = _speculation(node, seed)
    workers = node.node("workers", required=True)
    names = ("aggregated",) if mode == "aggregated" else ("prefill", "decode")
    roles = {}
    for name in names:
        role_node = workers.node(name, required=True)
        role_hardware = hardware
        if mode == "disaggregated" and role_node.raw("hardware", None) is not None:
            role_hardware = _role_hardware(role_node, base_dir)
        roles[name] = _worker(role_node, model, role_hardware, dtype, context_length, chunked, name, speculation)
    workers.done()
    if mode == "aggregated" and node.has("kv_transfer"):
        raise ScenarioError(f"{node.at('kv_transfer')}: only applies to engine.mode: disaggregated")
    transfer = _kv_transfer(node.node("kv_transfer")) if mode == "disaggregated" else None
    node.done()
    return Engine(mode, model_id, hardware_id, backend, roles[names[0]].context_length, chunked, seed, roles,
                  dtype, transfer, speculation)


def _speculation(node: _Node, seed: int) -> SpeculationSpec | None:
    """``engine.speculation`` (n-gram drafts) or ``engine.nextn`` / ``nextn_accepted`` (MTP/EAGLE heads)."""
    if node.raw("speculation", None) is not None and node.raw("nextn", None) is not None:
        raise ScenarioError(f"{node.at('nextn')}: cannot be combined with engine.speculation (one drafter at a time)")
    if node.raw("speculation", None) is not None:
        sp = node.node("speculation")
        sp.choice("kind", ("ngram",))
        k = sp.int("num_speculative_tokens")
        if k > 5:
            raise ScenarioError(f"{sp.at('num_speculative_tokens')}: must be from 1 to 5, got {k}")
        rates = sp.raw("acceptance_rates")
        if (not isinstance(rates, list) or len(rates) != k or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1 for x in rates)):
            raise ScenarioError(f"{sp.at('acceptance_rates')}: must be {k} numbers from 0 to 1 (draft i's chance "
                                f"of acceptance given drafts before it were accepted)")
        spec = SpeculationSpec("ngram", k, tuple(float(x) for x in rates), seed=sp.int("seed", seed, minimum=0, maximum=2**32 - 1))
        sp.done()
        return spec
    if node.raw("nextn", None) is None:
        if node.raw("nextn_accepted", None) is not None:
            raise ScenarioError(f"{node.at('nextn_accepted')}: needs engine.nextn")
        return None
    k = node.int("nextn")
    if k > 5:
        raise ScenarioError(f"{node.at('nextn')}: must be from 1 to 5, got {k}")
    mean = node.number("nextn_accepted")
    if mean > k:
        raise ScenarioError(f"{node.at('nextn_accepted')}: at most nextn ({k}) drafts can be accepted, got {mean:g}")
    return SpeculationSpec("mtp", k, mean_accepted=mean)


def _role_hardware(node: _Node, base_dir: Path) -> HardwareSpec:
    """A role's own ``hardware``: one concrete system (``auto`` is a search choice, not a system)."""
    if node.raw("hardware") == "auto":
        raise ScenarioError(f"{node.at('hardware')}: must name one concrete system; auto is not accepted")
    return _hardware(node, base_dir)[1]


def _kv_transfer(node: _Node) -> KvTransferSpec:
    bandwidth = node.number("bandwidth_gb_per_second", None, positive=True)
    latency = node.number("latency_ms", 0.0)
    per_token = node.raw("bytes_per_token", "auto")
    if per_token != "auto":
        per_token = node.number("bytes_per_token", positive=True)
    mode = node.choice("timing_mode", ("full_prompt", "destination_missing"), "full_prompt")
    contention = node.choice("contention", ("none", "shared_link"), "none")
    node.done()
    return KvTransferSpec(bandwidth, latency, None if per_token == "auto" else per_token, mode, contention)


def _context_length(node: _Node, model: ModelSpec, limit: int, default: int | None = None) -> int:
    """vLLM's ``max_model_len``: at most the model's ``max_position_embeddings``, as vLLM enforces."""
    value = node.int("context_length", limit if default is None else default, minimum=2)
    if value > limit:
        raise ScenarioError(f"{node.at('context_length')}: {model.model_id} supports at most {limit} tokens "
                            f"(max_position_embeddings), got {value}")
    return value


def _parallelism(node: _Node, model: ModelSpec) -> Parallelism:
    p = Parallelism(**{f: node.int(f, 1) for f in Parallelism.__dataclass_fields__})
    node.done()
    name = model.model_id
    if p.pipeline != 1:
        raise ScenarioError(f"{node.at('pipeline')}: engine replay requires pipeline 1, got {p.pipeline}")
    if model.num_attention_heads % p.tensor:
        raise ScenarioError(f"{node.at('tensor')}: must divide the {model.num_attention_heads} attention "
                            f"heads of {name}, got {p.tensor}")
    if not model.is_mla and model.num_kv_heads % p.tensor and p.tensor % model.num_kv_heads:
        raise ScenarioError(f"{node.at('tensor')}: must divide or be a multiple of the {model.num_kv_heads} "
                            f"KV heads of {name}, got {p.tensor}")
    if p.tensor % p.decode_context:
        raise ScenarioError(f"{node.at('decode_context')}: must divide tensor ({p.tensor}), "
                            f"got {p.decode_context}")
    if p.prefill_context > 1 and p.decode_context > 1:
        raise ScenarioError(f"{node.path}: at most one of prefill_context and decode_context may be above 1")
    if not model.is_moe:
        for key in ("moe_tensor", "moe_expert"):
            if getattr(p, key) != 1:
                raise ScenarioError(f"{node.at(key)}: {name} has no MoE experts; must be 1")
        return p
    # vLLM lays experts over the worker's tensor × attention_data GPUs; unset, they are tensor-sharded.
    gpus = p.tensor * p.attention_data
    if p.moe_tensor == 1 and p.moe_expert == 1:
        p = replace(p, moe_tensor=gpus)
    elif p.moe_tensor * p.moe_expert != gpus:
        raise ScenarioError(f"{node.path}: moe_tensor × moe_expert ({p.moe_tensor} × {p.moe_expert}) must equal "
                            f"tensor × attention_data ({gpus}), the GPUs the experts are spread over")
    if model.num_experts % p.moe_expert:
        raise ScenarioError(f"{node.at('moe_expert')}: must divide the {model.num_experts} experts of {name}, "
                            f"got {p.moe_expert}")
    return p


def _worker(node: _Node, model: ModelSpec, hardware: HardwareSpec, dtype: str, engine_context: int,
            chunked: bool, name: str = "aggregated", speculation: SpeculationSpec | None = None) -> WorkerRole:
    startup = node.number("startup_seconds", 0.0)
    if startup:
        raise ScenarioError(f"{node.at('startup_seconds')}: only delays workers added during a run, which "
                            f"this version does not model (worker counts are fixed); must be 0")
    context_length = _context_length(node, model, model.max_position_embeddings, engine_context)
    parallelism = _parallelism(node.node("parallelism"), model)
    scheduler = _scheduler(node.node("scheduler"), context_length, chunked,
                           max_sequences=1 if name == "prefill" else 256, speculation=speculation)
    p = parallelism
    if scheduler.launch is not None and not scheduler.async_scheduling:
        raise ScenarioError(f"{node.at('scheduler.launch')}: models vLLM's async engine loop; needs "
                            f"async_scheduling true")
    if scheduler.launch is not None and (name != "aggregated" or p.tensor * p.pipeline * p.attention_data
                                         * p.prefill_context != 1):
        raise ScenarioError(f"{node.at('scheduler.launch')}: only one-GPU aggregated workers launch passes inside "
                            f"vLLM's engine loop (tensor, pipeline, attention_data and prefill_context of 1)")
    if scheduler.prefill_schedule_interval > 1 and parallelism.attention_data == 1:
        raise ScenarioError(f"{node.at('scheduler.prefill_schedule_interval')}: balances prefills across "
                            f"attention-DP ranks, so it needs parallelism.attention_data > 1 (got 1)")
    kv_cache = _kv_cache(node.node("kv_cache"))
    timing = _timing(node.node("timing"))
    node.done()
    if timing.type == "default" and parallelism.prefill_context > 1:
        raise ScenarioError(f"{node.at('parallelism.prefill_context')}: prefill context parallelism is not "
                            f"modeled by the default timing; use timing fixed or polynomial, or set it to 1")
    p = parallelism
    # "auto" weights are the checkpoint's own dtype (FP8 for DeepSeek-V3; a float32 checkpoint is served
    # in 16 bits, as vLLM's dtype "auto" does); "auto" KV is the 16-bit activation dtype, as vLLM's
    # kv_cache_dtype "auto" is.
    deployment = Deployment(model, hardware, p.tensor, p.attention_data, p.moe_tensor, p.moe_expert,
                            p.prefill_context, p.decode_context,
                            weight_bytes=min(model.dtype_bytes, 2) if dtype == "auto" else DTYPE_BYTES[dtype],
                            kv_bytes=2 if kv_cache.dtype == "auto" else DTYPE_BYTES[kv_cache.dtype])
    blocks = _kv_blocks(node, kv_cache, deployment)
    needed = cdiv(context_length, kv_cache.block_size)
    if blocks < needed:
        raise ScenarioError(f"{node.at('kv_cache.capacity')}: a rank has {blocks} KV blocks of "
                            f"{kv_cache.block_size} tokens but one request at context_length {context_length} "
                            f"needs {needed}; lower context_length or give the rank more KV")
    return WorkerRole(parallelism, scheduler, kv_cache, timing, context_length, blocks, deployment, name)


def _scheduler(node: _Node, context_length: int, chunked: bool, max_sequences: int = 256,
               speculation: SpeculationSpec | None = None) -> SchedulerSpec:
    # vLLM turns async scheduling off with n-gram drafts; our async model does not verify drafts yet.
    asynchronous = node.bool("async_scheduling", speculation is None)
    if asynchronous and speculation is not None:
        reason = ("vLLM runs n-gram drafts synchronously" if speculation.kind == "ngram"
                  else "async scheduling with draft heads is not yet modeled")
        raise ScenarioError(f"{node.at('async_scheduling')}: true cannot be used with speculative decoding "
                            f"({reason}); leave it unset or false")
    spec = SchedulerSpec(
        max_batched_tokens=node.int("max_batched_tokens", 8192),
        max_sequences=node.int("max_sequences", max_sequences),
        long_prefill_token_threshold=node.int("long_prefill_token_threshold", 0, minimum=0),
        async_scheduling=asynchronous,
        reserve_full_isl=node.bool("reserve_full_isl", True),
        prefill_schedule_interval=node.int("prefill_schedule_interval", 1),
        launch=_launch(node) if node.raw("launch", None) is not None else None,
    )
    node.done()
    if spec.max_batched_tokens < spec.max_sequences:
        raise ScenarioError(f"{node.at('max_batched_tokens')}: must be >= max_sequences "
                            f"({spec.max_sequences}), as vLLM requires; got {spec.max_batched_tokens}")
    if not chunked and spec.max_batched_tokens < context_length:
        raise ScenarioError(f"{node.at('max_batched_tokens')}: with enable_chunked_prefill false a whole "
                            f"prompt must fit one pass, so vLLM requires it >= context_length "
                            f"({context_length}); got {spec.max_batched_tokens}")
    return spec


def _launch(node: _Node) -> LaunchSpec:
    ln = node.node("launch")
    spec = LaunchSpec(ln.number("decode_ms"), ln.number("piecewise_ms"), ln.number("eager_ms"),
                      ln.int("max_cudagraph_capture_size", 512), ln.number("eager_queue_fraction", 0.0, maximum=1.0))
    ln.done()
    return spec


def _kv_cache(node: _Node) -> KvCacheSpec:
    block_size = node.int("block_size", 16)
    prefix = node.bool("prefix_caching", True)
    dtype = node.choice("dtype", ("auto", *DTYPE_BYTES), "auto")
    cap = node.node("capacity")
    kind = cap.choice("type", ("default", "fixed"), "default")
    if kind == "default":
        capacity = CapacitySpec(kind, memory_fraction=cap.number("memory_fraction", 0.9, positive=True,
                                                                 maximum=1.0))
    else:
        capacity = CapacitySpec(kind, blocks=cap.int("blocks"))
    cap.done()
    node.done()
    return KvCacheSpec(block_size, prefix, capacity, dtype)


def _fraction(node: _Node, key: str, default: float) -> float:
    return node.number(key, default, positive=True, maximum=1.0)


def _timing(node: _Node) -> TimingSpec:
    kind = node.choice("type", ("default", "fixed", "polynomial", "measured"), "default")
    if kind == "fixed":
        spec = TimingSpec(kind, prefill_ms=node.number("prefill_ms"), decode_ms=node.number("decode_ms"))
    elif kind == "default":
        host = node.node("host_overhead_ms")
        base = HostOverhead()
        overhead = HostOverhead(host.number("prefill", base.prefill_ms), host.number("decode", base.decode_ms),
                                host.number("mixed", base.mixed_ms), node.number("per_layer_us", base.per_layer_us))
        host.done()
        eff = Efficiency()
        spec = TimingSpec(kind, efficiency=Efficiency(
            _fraction(node, "compute_efficiency", eff.compute), _fraction(node, "memory_efficiency", eff.memory),
            _fraction(node, "link_efficiency", eff.link)), host=overhead)
    elif kind == "measured":
        version = node.raw("backend_version", None)
        if version is not None and not isinstance(version, str):
            raise ScenarioError(f"{node.at('backend_version')}: must be a version string such as '0.24.0', "
                                f"got {_show(version)}")
        spec = TimingSpec(kind, backend_version=version)
    else:
        spec = TimingSpec(kind)
    node.done()
    return spec


def _kv_blocks(node: _Node, kv: KvCacheSpec, deployment: Deployment) -> int:
    if kv.capacity.type == "fixed":
        return kv.capacity.blocks
    blocks = default_kv_blocks(deployment, memory_fraction=kv.capacity.memory_fraction, block_size=kv.block_size)
    if blocks <= 0:
        d = deployment
        raise ScenarioError(
            f"{node.at('kv_cache.capacity')}: {d.model.model_id} needs {d.weight_bytes_per_gpu / 1e9:.1f} GB of "
            f"weights per GPU at tensor {d.tensor}, leaving no KV memory on {d.hardware.system_id} at "
            f"memory_fraction {kv.capacity.memory_fraction:g}; raise tensor or use a larger GPU")
    return blocks
