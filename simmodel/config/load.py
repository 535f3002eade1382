"""YAML scenario → ``Scenario``: every rule, every default, one clear error per bad field.

Errors are ``ScenarioError("engine.workers.aggregated.kv_cache.block_size: must be a positive
integer, got 0")``: the dotted path of the field, then the rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from simmodel.config.calibration import identity_of
from simmodel.config.catalog import resolve_trace_path
from simmodel.config.domains import reject_search
from simmodel.config.schema import (
    DEFAULT_ATTAINMENT,
    TRACE_FORMATS,
    CapacitySpec,
    Engine,
    FrontendSpec,
    HostProfileSpec,
    ImageSpec,
    KvCacheSpec,
    KvTransferSpec,
    LaunchSpec,
    LengthSpec,
    LimitsSpec,
    LoadSpec,
    LoadStage,
    Parallelism,
    Scenario,
    SchedulerSpec,
    SessionsSource,
    SglangSchedulerSpec,
    SharedPrefix,
    SharedPrefixSource,
    Sla,
    SpeculationSpec,
    StopSpec,
    SyntheticSource,
    TimingSpec,
    TraceSource,
    Traffic,
    VisionSpec,
    WorkerRole,
)
from simmodel.config.yaml_safe import problem_line, safe_load
from simmodel.errors import ScenarioError
from simmodel.frontend.stages import StageSpec
from simmodel.perf.capacity import cdiv, default_kv_blocks
from simmodel.perf.deployment import DTYPE_BYTES, Deployment
from simmodel.perf.hardware import HARDWARE, HardwareSpec
from simmodel.perf.models import MODELS, ModelSpec
from simmodel.perf.roofline import Efficiency, HostOverhead

_MISSING = object()
# Bounds that keep every count and every simulated time (integer nanoseconds) well inside int64.
MAX_INT = 1_000_000_000
MAX_NUMBER = 1e9
MAX_GPUS = 100_000
"""GPUs in one deployment (summed over roles): several times the largest inference fleets serving one
model; every GPU's worker and KV pool is simulated, so a typo of 10**9 replicas fails here, not in memory."""
MAX_CACHED_BLOCKS = 100_000_000
"""KV blocks of vLLM prefix-caching pools in one deployment (summed over its ranks): each such block's
state (reference count, content key, free-queue links) is a Python object of about 100 bytes, so this
keeps a run's pools under about 10 GB. A pool without prefix caching only counts its blocks, and SGLang's
radix cache holds only what requests use: neither is bounded here."""
MAX_PARALLEL = {"tensor": 1024, "pipeline": 1024, "attention_data": 1024, "prefill_context": 1024,
                "decode_context": 1024, "moe_tensor": MAX_GPUS, "moe_expert": MAX_GPUS}
"""Each parallelism degree's ceiling: a tensor, pipeline, context or attention-DP group of a worker spans
at most 1024 GPUs (the largest NVLink domain announced, NVL576, is 576; no registry model has more than
128 attention heads to shard); the MoE degrees multiply to tensor × attention_data, so they are bounded by
the deployment. ``replicas`` is bounded by the deployment's GPU count (``MAX_GPUS``)."""


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


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _show(value: Any) -> str:
    try:
        text = repr(value) if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip()
    except (ValueError, RecursionError):  # an int of over 4,300 digits, or nesting too deep to write out
        text = "a value too large to show"
    text = text.removesuffix("\n...").strip()
    return text if len(text) <= 60 else text[:57] + "..."


# ----------------------------------------------------------------------------------------------
# Public entry points


def read_text_file(path: Path, where: str) -> str:
    """A UTF-8 text file's contents; a file that cannot be read, or is not text, is one line naming
    ``where`` (the field or option that named it)."""
    try:
        return _read_bounded(path)
    except OSError as exc:
        raise ScenarioError(f"{where}: {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{where}: {path}: not a text file (UTF-8)") from None


MAX_TEXT_BYTES = 256 * 2**20
"""The largest scenario, result or workload file read whole (256 MiB): a device such as /dev/zero, or a
file given by mistake, is refused instead of read without end."""


def _read_bounded(path: Path) -> str:
    """A UTF-8 file's text, at most ``MAX_TEXT_BYTES``; more is an ``OSError`` saying so (EFBIG)."""
    import errno

    with path.open("rb") as f:
        data = f.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise OSError(errno.EFBIG, f"larger than {MAX_TEXT_BYTES // 2**20} MiB: not a file simmodel reads whole")
    return data.decode("utf-8")


def read_yaml(path: Path) -> dict:
    """Parse one YAML document safely (no object construction)."""
    try:
        text = _read_bounded(path)
    except FileNotFoundError:
        raise ScenarioError("scenario file not found") from None
    except OSError as exc:
        raise ScenarioError(f"cannot read the scenario file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"cannot read the scenario file ({exc})") from None
    try:
        data = safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{where}not valid YAML ({problem})") from None
    except Exception as exc:  # PyYAML's constructors: `!!int x`, `2001-13-45`, 5,000 digits, nesting too deep
        raise ScenarioError(f"not valid YAML ({_first_line(exc)})") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"the scenario must be a YAML mapping with traffic and engine, got {_show(data)}")
    return data


def apply_overrides(data: dict, overrides: Iterable[str]) -> dict:
    """Apply ``PATH=YAML_VALUE`` overrides left to right; returns a new mapping.

    Raises:
        TypeError: ``overrides`` is one string rather than a list of them (it would be read letter by
            letter), a mapping, or holds something other than strings.
    """
    import copy

    if isinstance(overrides, (str, bytes)):
        raise TypeError(f"overrides must be a list of 'PATH=VALUE' strings, got the single string {overrides!r}; "
                        f"write [{overrides!r}]")
    if isinstance(overrides, Mapping):  # iterating it would give its keys alone, values lost
        raise TypeError(f"overrides must be a list of 'PATH=VALUE' strings, got a mapping; write "
                        f"{[f'{k}={v}' for k, v in overrides.items()]!r}")
    data = copy.deepcopy(data)
    for item in overrides:
        if not isinstance(item, str):
            raise TypeError(f"overrides must be 'PATH=VALUE' strings, got {item!r}")
        if "=" not in item:
            raise ScenarioError(f"--set {item}: expected PATH=VALUE")
        dotted, text = item.split("=", 1)
        keys = dotted.strip().split(".")
        if not all(keys):
            raise ScenarioError(f"--set {item}: PATH must be dotted field names like engine.seed")
        try:
            value = safe_load(text)
        except yaml.YAMLError as exc:  # a duplicate key in a mapping value says which
            raise ScenarioError(f"--set {item}: the value is not valid YAML ({problem_line(exc)})") from None
        except Exception:  # PyYAML's constructors (`!!int x`, 5,000 digits, nesting too deep)
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
    sla = parse_evaluation(root.node("evaluation"))
    root.done()
    engine = _check_images(engine, traffic, base_dir)
    return Scenario(traffic, engine, path, limits, sla)


def parse_evaluation(node: _Node, attainment: float = DEFAULT_ATTAINMENT) -> Sla | None:
    """``evaluation``: the SLA a run is measured against (``run``'s goodput, a search's feasibility), or
    None when there is no ``evaluation.sla``. ``attainment``: the default required fraction."""
    sla = parse_sla(node.node("sla"), attainment) if node.has("sla") else None
    node.done()
    return sla


def parse_sla(node: _Node, attainment: float = DEFAULT_ATTAINMENT) -> Sla:
    """``evaluation.sla``: ``ttft_ms``, ``tpot_ms`` (``itl_ms``, its earlier name, is accepted), ``e2e_ms``
    and ``attainment`` (0 < a ≤ 1); at least one bound."""
    tpot, itl = (node.number(k, None, positive=True) for k in ("tpot_ms", "itl_ms"))
    if tpot is not None and itl is not None:
        raise ScenarioError(f"{node.at('itl_ms')}: the earlier name of tpot_ms (the bound on a request's mean "
                            f"time per output token); give one of them")
    sla = Sla(node.number("ttft_ms", None, positive=True), itl if tpot is None else tpot,
              node.number("e2e_ms", None, positive=True),
              node.number("attainment", attainment, positive=True, maximum=1.0))
    node.done()
    if not sla.bounded:
        raise ScenarioError(f"{node.path}: give at least one bound of ttft_ms, tpot_ms, e2e_ms")
    return sla


def _limits(node: _Node, traffic: Traffic) -> LimitsSpec:
    base = LimitsSpec()
    spec = LimitsSpec(node.int("max_passes", base.max_passes, maximum=10**15),
                      node.int("max_requests", base.max_requests),
                      node.number("max_virtual_time_seconds", base.max_virtual_time_seconds, positive=True))
    node.done()
    stop = traffic.stop
    if stop.requests is not None and stop.requests > spec.max_requests:
        raise ScenarioError(f"traffic.stop.requests: {stop.requests:,} is above limits.max_requests "
                            f"({spec.max_requests:,}); raise the limit to run that many")
    if stop.max_virtual_time_seconds is not None and stop.max_virtual_time_seconds > spec.max_virtual_time_seconds:
        raise ScenarioError(f"traffic.stop.max_virtual_time_seconds: {stop.max_virtual_time_seconds:g} is above "
                            f"limits.max_virtual_time_seconds ({spec.max_virtual_time_seconds:g}); raise the limit")
    return spec


def _check_images(engine: Engine, traffic: Traffic, base_dir: Path) -> Engine:
    """Rules that join the traffic's images and the SGLang worker that takes them; resolves host profiles."""
    images = getattr(traffic.source, "images", None)
    front = "prefill" if engine.mode == "disaggregated" else "aggregated"
    role = engine.workers[front]
    where = f"engine.workers.{front}"
    if images is not None and engine.backend != "sglang":
        raise ScenarioError("traffic.source.images: images are encoded by SGLang workers only; set engine.backend: "
                            "sglang")
    if images is None and role.vision is not None:
        raise ScenarioError(f"{where}.vision: sizes the image embedding cache and encoder; needs "
                            f"traffic.source.images")
    if images is not None and role.timing.type != "default":
        raise ScenarioError(f"{where}.timing.type: images encoded on the worker are priced by the default "
                            f"timing (the vision tower's roofline); got {role.timing.type}")
    if images is not None and role.deployment.model.vision is None:
        raise ScenarioError(f"engine.model: {role.deployment.model.model_id} has no vision tower in the registry; "
                            f"images need a vision-language model such as Qwen/Qwen3-VL-8B-Instruct")
    if images is not None:
        from simmodel.perf.vision import image_tokens

        try:
            tokens = image_tokens(role.deployment, images)
        except ValueError as exc:  # the model's image processor refuses the shape (e.g. aspect ratio)
            raise ScenarioError(f"traffic.source.images: {exc}") from None
        if tokens + 1 >= role.context_length:
            raise ScenarioError(f"traffic.source.images: {images.count} image(s) of {images.height}x{images.width} "
                                f"are {tokens} visual tokens per request, leaving no room under {front} "
                                f"context_length {role.context_length}")
    sg = role.scheduler
    if (engine.backend == "sglang" and (role.host_loop or images is not None) and sg.sglang is not None
            and sg.sglang.chunked_prefill_size != 8192):
        raise ScenarioError(f"{where}.scheduler.chunked_prefill_size: with host_loop or images encoded on the "
                            f"worker, max_batched_tokens is the worker's chunked_prefill_size; set that instead")
    if (engine.backend == "sglang" and sg.max_batched_tokens != 8192 and not role.host_loop and images is None):
        raise ScenarioError(f"{where}.scheduler.max_batched_tokens: SGLang takes its prefill budget from "
                            f"scheduler.chunked_prefill_size unless host_loop is on or images are encoded on "
                            f"the worker; set chunked_prefill_size instead")
    for name, other in engine.workers.items():
        if name != front and engine.backend == "sglang" and other.scheduler.max_batched_tokens != 8192:
            raise ScenarioError(f"engine.workers.{name}.scheduler.max_batched_tokens: has no effect on an "
                                f"SGLang {name} worker; remove it")
    profile = role.host_profile
    if profile is not None:
        from simmodel.frontend.host_profile import ImageKey, load_host_profile

        path = Path(profile.path)
        key = None if images is None else ImageKey(images.height, images.width, images.count, images.encoding)
        try:
            stages, transport = load_host_profile(path if path.is_absolute() else base_dir / path,
                                                  model=engine.model, frontend=profile.frontend, image=key,
                                                  transport=profile.transport)
        except ScenarioError as exc:
            raise ScenarioError(f"{where}.host_profile: {exc}") from None
        measured = {"model": engine.model, "frontend": profile.frontend, "transport": transport,
                    "image": None if key is None else str(key)}
        frontend = FrontendSpec(tuple(stages), measured, f"host_profile:{path}")
        engine = replace(engine, workers={**engine.workers, front: replace(role, frontend=frontend)})
    return engine


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
    """``source: {type: import, tool, path}``: the workload a benchmark tool's own file describes
    (``simmodel.config.importers``); it sets the load and stop too."""
    from simmodel.config.importers import TOOLS, import_workload

    src = node.node("source")
    src.choice("type", ("import",))
    tool = src.choice("tool", TOOLS)
    raw_path = src.raw("path")
    if not isinstance(raw_path, str) or not raw_path:
        raise ScenarioError(f"{src.at('path')}: must be a file path, got {_show(raw_path)}")
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
    return replace(traffic, warnings=tuple(warnings))


def _traffic(node: _Node, base_dir: Path) -> Traffic:
    raw_source = node.raw("source", None)
    if isinstance(raw_source, dict) and raw_source.get("type") == "import":
        return _imported(node, base_dir)
    src = node.node("source", required=True)
    kind = src.choice("type", ("synthetic", "shared_prefix", "sessions", "trace", "import"))
    if kind == "sessions":
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
        raw_path = src.raw("path")
        if not isinstance(raw_path, str) or not raw_path:
            raise ScenarioError(f"{src.at('path')}: must be a file path, got {_show(raw_path)}")
        try:
            path = resolve_trace_path(raw_path, base_dir)
        except ScenarioError as exc:
            raise ScenarioError(f"{src.at('path')}: {exc}") from None
        fmt = src.choice("format", TRACE_FORMATS)
        hash_block = src.int("block_size", 512)
        if fmt != "mooncake" and src.raw("block_size", None) is not None:
            raise ScenarioError(f"{src.at('block_size')}: only mooncake traces carry hash_ids")
        source = TraceSource(path, fmt, block_size=hash_block)
    src.done()

    loads = ("concurrency", "poisson", "gamma", "constant_rate", "trace_timestamps", "stages")
    ld = node.node("load", required=kind != "trace")
    load_type = ld.choice("type", loads, "trace_timestamps" if kind == "trace" else _MISSING)
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
        if kind != "trace":
            raise ScenarioError(f"{ld.at('type')}: trace_timestamps needs traffic.source.type: trace")
        load = LoadSpec(load_type, speedup=ld.number("speedup", 1.0, positive=True, minimum=1e-6))
    if load_type in ("poisson", "gamma", "constant_rate", "trace_timestamps"):
        load = replace(load, max_concurrency=ld.int("max_concurrency", None))
    if load_type in ("poisson", "gamma"):
        load = replace(load, rescale_to_rate=ld.bool("rescale_to_rate", False))
    if kind == "sessions" and load.max_concurrency is not None:
        raise ScenarioError(f"{ld.at('max_concurrency')}: not with sessions (a session's turns are "
                            f"its own closed loop); use type: concurrency for a number of sessions")
    ld.done()

    st = node.node("stop")
    stop = StopSpec(st.int("requests", None),
                    st.number("max_virtual_time_seconds", None, positive=True))
    st.done()
    if load.rescale_to_rate and stop.requests is None:
        raise ScenarioError(f"{ld.at('rescale_to_rate')}: needs traffic.stop.requests (the N requests spread "
                            f"over N / requests_per_second)")
    if (kind != "trace" and load_type != "stages" and stop.requests is None
            and stop.max_virtual_time_seconds is None):
        raise ScenarioError(f"{st.path}: synthetic traffic needs requests or max_virtual_time_seconds")
    node.done()
    return Traffic(source, load, stop)


# ----------------------------------------------------------------------------------------------
# engine


def _model(node: _Node, base_dir: Path) -> tuple[str, ModelSpec]:
    """A registry id, or a local Hugging Face ``config.json`` (the file or its folder)."""
    value = node.raw("model")
    if isinstance(value, str) and value in MODELS:
        return value, MODELS[value]
    path = Path(value) if isinstance(value, str) else None
    if path is not None and not path.is_absolute():
        path = base_dir / path
    if path is not None and _local(path):
        from simmodel.perf.hf_config import model_from_hf_config

        try:
            return value, model_from_hf_config(path)
        except ScenarioError as exc:
            raise ScenarioError(f"{node.at('model')}: {exc}") from None
    raise ScenarioError(f"{node.at('model')}: unknown model {_show(value)}: give a registry id "
                        f"({', '.join(sorted(MODELS))}) or the path of a local config.json")


def _local(path: Path) -> bool:
    """A config.json file or a folder here; a name the OS refuses (too long, say) is none."""
    try:
        return (path.suffix == ".json" or path.is_dir()) and path.exists()
    except (OSError, ValueError):
        return False


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
    dtype = node.choice("dtype", ("auto", *DTYPE_BYTES), "auto")
    context_length = _context_length(node, model, model.max_position_embeddings)
    chunked = node.bool("enable_chunked_prefill", True)
    if backend == "sglang" and not chunked:
        raise ScenarioError(f"{node.at('enable_chunked_prefill')}: SGLang always chunks long prompts "
                            f"(chunked_prefill_size); false is only accepted with backend vllm")
    seed = node.int("seed", 0, minimum=0, maximum=2**32 - 1)
    speculation = _speculation(node, seed)
    if backend == "sglang" and speculation is not None:
        key = "speculation" if speculation.kind == "ngram" else "nextn"
        raise ScenarioError(f"{node.at(key)}: speculative decoding is not yet modeled for backend sglang")
    workers = node.node("workers", required=True)
    names = ("aggregated",) if mode == "aggregated" else ("prefill", "decode")
    roles = {}
    for name in names:
        role_node = workers.node(name, required=True)
        role_hardware = hardware
        if mode == "disaggregated" and role_node.raw("hardware", None) is not None:
            role_hardware = _role_hardware(role_node, base_dir)
        roles[name] = _worker(role_node, model, role_hardware, dtype, context_length, chunked, name, speculation,
                              backend, mode, base_dir)
    _check_gpu_count(workers, roles)
    if backend == "vllm":
        _check_cached_blocks(workers, roles)
    workers.done()
    if backend == "sglang" and mode == "disaggregated":
        dec = roles["decode"]
        longest = min(role.context_length for role in roles.values()) - 1
        if dec.num_kv_blocks < longest + 512:
            raise ScenarioError(f"engine.workers.decode.kv_cache.capacity: an SGLang decode rank reserves a prompt's "
                                f"KV plus 512 tokens for its decoding (SGLANG_NUM_RESERVED_DECODE_TOKENS), so it needs "
                                f"at least {longest + 512} tokens for a {longest}-token prompt; it has "
                                f"{dec.num_kv_blocks}")
    if mode == "aggregated" and node.has("kv_transfer"):
        raise ScenarioError(f"{node.at('kv_transfer')}: only applies to engine.mode: disaggregated")
    transfer = _kv_transfer(node.node("kv_transfer")) if mode == "disaggregated" else None
    node.done()
    return Engine(mode, model_id, hardware_id, backend, roles[names[0]].context_length, chunked, seed, roles,
                  dtype, transfer, speculation)


def _deployment_total(roles: dict[str, WorkerRole], count) -> tuple[int, str]:
    """``count`` summed over the roles, and the role that holds the most (the one a message names)."""
    counts = {name: count(role) for name, role in roles.items()}
    return sum(counts.values()), max(counts, key=counts.__getitem__)


def _check_gpu_count(workers: _Node, roles: dict[str, WorkerRole]) -> None:
    """The deployment's GPUs (every role's replicas × GPUs per worker) are at most ``MAX_GPUS``; the
    message names the replicas of the role with the most GPUs, the knob that multiplies them."""
    total, largest = _deployment_total(roles, lambda role: role.parallelism.gpu_count)
    if total <= MAX_GPUS:
        return
    raise ScenarioError(f"{workers.at(largest)}.parallelism.replicas: the deployment would use {total:,} GPUs; "
                        f"at most {MAX_GPUS:,} (replicas × tensor × pipeline × attention_data × prefill_context, "
                        f"summed over the roles)")


def _check_cached_blocks(workers: _Node, roles: dict[str, WorkerRole]) -> None:
    """The deployment's prefix-caching KV blocks (replicas × attention_data × blocks per rank, summed over
    the roles that cache) are at most ``MAX_CACHED_BLOCKS``: a run that would hold more is refused here
    instead of running out of memory."""
    def blocks(role: WorkerRole) -> int:
        p = role.parallelism
        return p.replicas * p.attention_data * role.num_kv_blocks if role.kv_cache.prefix_caching else 0

    total, largest = _deployment_total(roles, blocks)
    if total <= MAX_CACHED_BLOCKS:
        return
    raise ScenarioError(f"{workers.at(largest)}.parallelism.replicas: the deployment's prefix-caching KV pools "
                        f"would hold {total:,} blocks (replicas × attention_data × blocks per rank); simmodel keeps "
                        f"each block's state in memory (about 100 bytes), so at most {MAX_CACHED_BLOCKS:,} (about "
                        f"10 GB): fewer replicas, a smaller kv_cache.capacity or a larger kv_cache.block_size")


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
    p = Parallelism(**{f: node.int(f, 1, maximum=MAX_PARALLEL.get(f, MAX_INT))
                       for f in Parallelism.__dataclass_fields__})
    node.done()
    name = model.model_id
    if p.pipeline != 1:
        raise ScenarioError(f"{node.at('pipeline')}: engine replay requires pipeline 1, got {p.pipeline}",
                            category="invalid_shape")
    if model.num_attention_heads % p.tensor:
        raise ScenarioError(f"{node.at('tensor')}: must divide the {model.num_attention_heads} attention "
                            f"heads of {name}, got {p.tensor}", category="invalid_shape")
    if not model.is_mla and model.num_kv_heads % p.tensor and p.tensor % model.num_kv_heads:
        raise ScenarioError(f"{node.at('tensor')}: must divide or be a multiple of the {model.num_kv_heads} "
                            f"KV heads of {name}, got {p.tensor}", category="invalid_shape")
    if p.tensor % p.decode_context:
        raise ScenarioError(f"{node.at('decode_context')}: must divide tensor ({p.tensor}), "
                            f"got {p.decode_context}")
    if p.prefill_context > 1 and p.decode_context > 1:
        raise ScenarioError(f"{node.path}: at most one of prefill_context and decode_context may be above 1")
    if not model.is_moe:
        for key in ("moe_tensor", "moe_expert"):
            if getattr(p, key) != 1:
                raise ScenarioError(f"{node.at(key)}: {name} has no MoE experts; must be 1", category="invalid_shape")
        return p
    # vLLM lays experts over the worker's tensor × attention_data GPUs; unset, they are tensor-sharded.
    gpus = p.tensor * p.attention_data
    if p.moe_tensor == 1 and p.moe_expert == 1:
        p = replace(p, moe_tensor=gpus)
    elif p.moe_tensor * p.moe_expert != gpus:
        raise ScenarioError(f"{node.path}: moe_tensor × moe_expert ({p.moe_tensor} × {p.moe_expert}) must equal "
                            f"tensor × attention_data ({gpus}), the GPUs the experts are spread over",
                            category="invalid_shape")
    if model.num_experts % p.moe_expert:
        raise ScenarioError(f"{node.at('moe_expert')}: must divide the {model.num_experts} experts of {name}, "
                            f"got {p.moe_expert}", category="invalid_shape")
    return p


def _worker(node: _Node, model: ModelSpec, hardware: HardwareSpec, dtype: str, engine_context: int,
            chunked: bool, name: str = "aggregated", speculation: SpeculationSpec | None = None,
            backend: str = "vllm", mode: str = "aggregated", base_dir: Path | None = None) -> WorkerRole:
    startup = node.number("startup_seconds", 0.0)
    if startup:
        raise ScenarioError(f"{node.at('startup_seconds')}: only delays workers added during a run, which "
                            f"this version does not model (worker counts are fixed); must be 0")
    context_length = _context_length(node, model, model.max_position_embeddings, engine_context)
    parallelism = _parallelism(node.node("parallelism"), model)
    scheduler = _scheduler(node.node("scheduler"), context_length, chunked,
                           max_sequences=1 if name == "prefill" else 256, speculation=speculation, backend=backend)
    sg = scheduler.sglang
    if sg is not None and sg.prefill_decode_interval and name != "aggregated":
        raise ScenarioError(f"{node.at('scheduler.prefill_decode_interval')}: spaces prefills between decode "
                            f"rounds, so it only applies to aggregated workers (a {name} worker never mixes them)")
    if sg is not None and name == "decode":
        base = SglangSchedulerSpec()
        for key in ("chunked_prefill_size", "max_prefill_tokens", "schedule_policy"):
            if getattr(sg, key) != getattr(base, key):
                raise ScenarioError(f"{node.at('scheduler.' + key)}: a decode worker never prefills (its requests "
                                    f"arrive with their KV); remove it")
    if sg is not None and sg.chunked_prefill_size < parallelism.attention_data:
        raise ScenarioError(f"{node.at('scheduler.chunked_prefill_size')}: is divided over the "
                            f"{parallelism.attention_data} attention-DP ranks, so it must be at least that; got "
                            f"{sg.chunked_prefill_size}")
    host_loop, frontend, profile, vision = _sglang_host(node, backend, name, mode, parallelism)
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
    kv_cache = _kv_cache(node.node("kv_cache"), backend)
    timing = _timing(node.node("timing"), base_dir)
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
                            kv_bytes=2 if kv_cache.dtype == "auto" else DTYPE_BYTES[kv_cache.dtype],
                            encoder_parallel="tp" if vision is None else vision.encoder_parallel)
    if timing.calibration is not None:
        timing = _check_calibration(node, timing, identity_of(name, deployment, backend, p))
    blocks = _kv_blocks(node, kv_cache, deployment)
    needed = cdiv(context_length, kv_cache.block_size)
    if blocks < needed:
        held = (f"{blocks} KV tokens (page size 1)" if backend == "sglang"
                else f"{blocks} KV blocks of {kv_cache.block_size} tokens")
        raise ScenarioError(f"{node.at('kv_cache.capacity')}: a rank has {held} but one request at "
                            f"context_length {context_length} needs {needed}; lower context_length or give the "
                            f"rank more KV", category="kv_capacity")
    return WorkerRole(parallelism, scheduler, kv_cache, timing, context_length, blocks, deployment, name,
                      host_loop, frontend, profile, vision)


_SGLANG_SCHEDULER = ("chunked_prefill_size", "max_prefill_tokens", "schedule_policy", "schedule_conservativeness", "new_token_ratio",
                     "clip_max_new_tokens", "prefill_decode_interval")
_VLLM_SCHEDULER = ("long_prefill_token_threshold", "async_scheduling", "reserve_full_isl",
                   "prefill_schedule_interval", "launch")
_SGLANG_HOST = ("host_loop", "frontend", "host_profile", "vision")


def _backend_only(node: _Node, keys: Iterable[str], backend: str, owner: str) -> None:
    """A field of one backend's scheduler set on the other backend fails (it could have no effect)."""
    for key in keys:  # not marked as read: an unknown-field message lists only this backend's fields
        if node.data.get(key) is not None:
            raise ScenarioError(f"{node.at(key)}: {owner} only; engine.backend is {backend}")


def _sglang_scheduler(node: _Node) -> SglangSchedulerSpec:
    ratio = node.node("new_token_ratio")
    base = SglangSchedulerSpec()
    spec = SglangSchedulerSpec(
        chunked_prefill_size=node.int("chunked_prefill_size", base.chunked_prefill_size),
        max_prefill_tokens=node.int("max_prefill_tokens", base.max_prefill_tokens),
        schedule_policy=node.choice("schedule_policy", ("fcfs", "lpm"), base.schedule_policy),
        schedule_conservativeness=node.number("schedule_conservativeness", base.schedule_conservativeness,
                                              positive=True, maximum=100.0),
        init_new_token_ratio=ratio.number("init", base.init_new_token_ratio, maximum=1.0),
        min_new_token_ratio_factor=ratio.number("min_factor", base.min_new_token_ratio_factor, maximum=1.0),
        new_token_ratio_decay_steps=ratio.int("decay_steps", base.new_token_ratio_decay_steps),
        clip_max_new_tokens=node.int("clip_max_new_tokens", base.clip_max_new_tokens),
        prefill_decode_interval=node.int("prefill_decode_interval", 0, minimum=0),
    )
    ratio.done()
    return spec


def _sglang_host(node: _Node, backend: str, name: str, mode: str, p: Parallelism):
    """``host_loop``, ``frontend``, ``host_profile`` and ``vision`` of an SGLang aggregated or prefill worker.

    A ``host_profile``'s row depends on the traffic's images: it is read once the traffic is known
    (``_check_images``), which fills in ``frontend``."""
    if backend != "sglang":
        _backend_only(node, _SGLANG_HOST, backend, "SGLang")
        return False, None, None, None
    if name == "decode":
        for key in _SGLANG_HOST:
            if node.raw(key, None) is not None:
                raise ScenarioError(f"{node.at(key)}: goes on workers.prefill in disaggregated mode (the decode "
                                    f"worker stays a plain worker)")
        return False, None, None, None
    frontend = profile = None
    if node.raw("frontend", None) is not None and node.raw("host_profile", None) is not None:
        raise ScenarioError(f"{node.at('host_profile')}: cannot be combined with frontend (both describe the "
                            f"frontend stages); give one")
    if node.raw("frontend", None) is not None:
        frontend = _frontend(node.node("frontend"))
    elif node.raw("host_profile", None) is not None:
        hp = node.node("host_profile")
        raw_path = hp.raw("path")
        if not isinstance(raw_path, str) or not raw_path:
            raise ScenarioError(f"{hp.at('path')}: must be a file path, got {_show(raw_path)}")
        kind = hp.choice("frontend", ("python", "rust"))
        transport = hp.raw("transport", None)
        if transport is not None and not isinstance(transport, str):
            raise ScenarioError(f"{hp.at('transport')}: must be a transport name, got {_show(transport)}")
        hp.done()
        for key in ("attention_data", "prefill_context", "decode_context"):
            if getattr(p, key) != 1:
                raise ScenarioError(f"{hp.path}: host profiles are measured on workers with pipeline, "
                                    f"attention_data and context parallelism of 1; parallelism.{key} is "
                                    f"{getattr(p, key)}")
        profile = HostProfileSpec(raw_path, kind, transport)
    host_loop = node.bool("host_loop", frontend is not None or profile is not None)
    if (frontend is not None or profile is not None) and not host_loop:
        raise ScenarioError(f"{node.at('host_loop')}: a frontend feeds SGLang's host loop; it cannot be false "
                            f"with frontend or host_profile set")
    vision = None
    if node.raw("vision", None) is not None:
        vn = node.node("vision")
        vision = VisionSpec(vn.number("cache_mib", 100.0, maximum=1e6),
                            vn.choice("encoder_parallel", ("tp", "dp"), "tp"))
        vn.done()
    return host_loop, frontend, profile, vision


def _frontend(node: _Node) -> FrontendSpec:
    stages_raw = node.raw("stages")
    if not isinstance(stages_raw, list) or not stages_raw:
        raise ScenarioError(f"{node.at('stages')}: must be a non-empty list of "
                            f"{{workers, service_ms, concurrency_scale}}")
    stages = []
    for i, raw in enumerate(stages_raw):
        st = _Node(raw, f"{node.at('stages')}[{i}]")
        name = st.raw("name", f"stage{i}")
        if not isinstance(name, str) or not name:
            raise ScenarioError(f"{st.at('name')}: must be a non-empty string, got {_show(name)}")
        workers = st.int("workers", 1, maximum=100_000)
        service = st.number("service_ms")
        scale = st.raw("concurrency_scale", None)
        if scale is None:
            scale = [1.0] * workers
        elif isinstance(scale, (int, float)) and not isinstance(scale, bool):
            if not (math.isfinite(scale) and scale >= 0 and 1.0 + scale * (workers - 1) <= 1e6):
                raise ScenarioError(f"{st.at('concurrency_scale')}: one number s means a factor 1 + s×(busy − 1), "
                                    f"so it must be a non-negative number, got {_show(scale)}")
            scale = [1.0 + float(scale) * k for k in range(workers)]
        if (not isinstance(scale, list) or len(scale) != workers or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and 0 < x <= 1e6
                for x in scale)):
            raise ScenarioError(f"{st.at('concurrency_scale')}: must be a list of {workers} positive numbers (one "
                                f"per worker: entry k is the service-time factor with k+1 busy), or one number "
                                f"s meaning 1 + s×(busy − 1); got {_show(scale)}")
        st.done()
        stages.append(StageSpec(name, workers, service, tuple(float(x) for x in scale)))
    measured = node.raw("measured_for", None)
    if measured is not None and not isinstance(measured, dict):
        raise ScenarioError(f"{node.at('measured_for')}: must be a mapping (model, frontend, transport, image)")
    node.done()
    return FrontendSpec(tuple(stages), measured, "frontend")


def _scheduler(node: _Node, context_length: int, chunked: bool, max_sequences: int = 256,
               speculation: SpeculationSpec | None = None, backend: str = "vllm") -> SchedulerSpec:
    if backend == "sglang":
        _backend_only(node, _VLLM_SCHEDULER, backend, "vLLM")
        spec = SchedulerSpec(max_batched_tokens=node.int("max_batched_tokens", 8192),
                             max_sequences=node.int("max_sequences", max_sequences), async_scheduling=False,
                             sglang=_sglang_scheduler(node))
        node.done()
        return spec
    _backend_only(node, _SGLANG_SCHEDULER, backend, "SGLang")
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


def _kv_cache(node: _Node, backend: str = "vllm") -> KvCacheSpec:
    block_size = node.int("block_size", 1 if backend == "sglang" else 16)
    prefix = node.bool("prefix_caching", True)
    if backend == "sglang" and block_size != 1:
        raise ScenarioError(f"{node.at('block_size')}: SGLang's radix cache has page size 1 (capacity blocks "
                            f"are tokens); must be 1, got {block_size}")
    if backend == "sglang" and not prefix:
        raise ScenarioError(f"{node.at('prefix_caching')}: SGLang's radix prefix cache cannot be turned off "
                            f"here; false is only accepted with backend vllm")
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


def _timing(node: _Node, base_dir: Path | None = None) -> TimingSpec:
    kind = node.choice("type", ("default", "fixed", "polynomial", "measured"), "default")
    if kind == "fixed":
        spec = TimingSpec(kind, prefill_ms=node.number("prefill_ms"), decode_ms=node.number("decode_ms"))
    elif kind == "default":
        host = node.node("host_overhead_ms")
        base = HostOverhead()
        overhead = HostOverhead(host.number("prefill", base.prefill_ms), host.number("decode", base.decode_ms),
                                host.number("mixed", base.mixed_ms), node.number("per_layer_us", base.per_layer_us),
                                node.number("collective_latency_us", None, maximum=1000.0))
        host.done()
        eff = Efficiency()
        efficiency = Efficiency(_fraction(node, "compute_efficiency", eff.compute),
                                _fraction(node, "memory_efficiency", eff.memory),
                                _fraction(node, "link_efficiency", eff.link))
        calibration, transfer, host_assumed = None, node.bool("allow_transfer", False), True
        if node.raw("calibration", None) is not None:
            from simmodel.config.calibration import HOST, apply, read_calibration, timing_fields

            raw = node.raw("calibration")
            if not isinstance(raw, str) or not raw:
                raise ScenarioError(f"{node.at('calibration')}: must be a calibration file's path, got {_show(raw)}")
            calibration = Path(raw) if Path(raw).is_absolute() else (base_dir or Path(".")) / raw
            cal = read_calibration(calibration, node.at("calibration"))
            fields = timing_fields(cal.values)
            for key, value in fields.items():
                clash = [f"{key}.{k}" for k in value if k in (node.raw(key, None) or {})] if isinstance(value, dict) \
                    else ([key] if node.raw(key, None) is not None else [])
                if clash:
                    raise ScenarioError(f"{node.at(clash[0])}: set by the calibration {calibration.name}; remove it")
            efficiency, overhead = apply(cal.values, efficiency, overhead)
            host_assumed = not all(name in cal.values for name in HOST)
        elif transfer:
            raise ScenarioError(f"{node.at('allow_transfer')}: only applies with a calibration")
        spec = TimingSpec(kind, efficiency=efficiency, host=overhead, calibration=calibration, transferred=transfer,
                          host_assumed=host_assumed)
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


def _check_calibration(node: _Node, timing: TimingSpec, identity: dict) -> TimingSpec:
    """A calibration applies to the roles and deployments it was fitted on; elsewhere only with
    ``allow_transfer`` (then marked transferred)."""
    from simmodel.config.calibration import describe, read_calibration

    cal = read_calibration(timing.calibration, node.at("timing.calibration"))
    if cal.matches(identity):
        return replace(timing, transferred=False)
    if not timing.transferred:
        raise ScenarioError(f"{node.at('timing.calibration')}: {cal.path.name} was fitted on "
                            f"{'; '.join(describe(d) for d in cal.fitted_on)}, not on this one: "
                            f"{describe(identity)}; set timing.allow_transfer: true to use it anyway (its passes "
                            f"are then marked transferred)")
    return timing


def _kv_blocks(node: _Node, kv: KvCacheSpec, deployment: Deployment) -> int:
    if kv.capacity.type == "fixed":
        return kv.capacity.blocks
    blocks = default_kv_blocks(deployment, memory_fraction=kv.capacity.memory_fraction, block_size=kv.block_size)
    if blocks <= 0:
        d = deployment
        raise ScenarioError(
            f"{node.at('kv_cache.capacity')}: {d.model.model_id} needs {d.weight_bytes_per_gpu / 1e9:.1f} GB of "
            f"weights per GPU at tensor {d.tensor}, leaving no KV memory on {d.hardware.system_id} at "
            f"memory_fraction {kv.capacity.memory_fraction:g}; raise tensor or use a larger GPU",
            category="kv_capacity")
    return blocks
