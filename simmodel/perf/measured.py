"""Pass timing from measured GPU kernel tables: NVIDIA AIConfigurator (``timing: {type: measured}``).

AIConfigurator (``aiconfigurator-core``, the optional extra ``simmodel[measured]``) composes a forward
pass from per-kernel latencies measured on real GPUs (GEMMs, context and generation attention, MoE,
all-reduce, ...) for one model, system, serving framework and framework version. Its forward-pass model
(``RustForwardPassPerfModel``, what Dynamo's mocker uses) prices one rank's pass from five aggregates,
the ``scheduled_requests`` of a forward-pass metric::

    num_prefill_requests, sum_prefill_tokens, sum_prefill_kv_tokens, num_decode_requests, sum_decode_kv_tokens

(``*_kv_tokens``: tokens already in the KV cache, i.e. vLLM's ``num_computed_tokens``). It splits the sums
into per-request means (prefill: P requests of T/P new tokens over K/P cached ones; decode: D requests at
context S/D) and prices a mixed pass as one non-attention pass over all T + D tokens plus the prefill's
context attention plus the decodes' generation attention.

We ask it once per scenario, on a grid of pass shapes, and interpolate during the run:

- ``prefill_ms[P, t, k]``: P prefill requests of t new tokens each over k cached tokens each;
- ``decode_ms[D, c]``: D decode requests at mean context c;
- ``mixed_extra_ms[T, D, c]``: what D decodes at context c add to a pass that prefills T tokens —
  AIC's mixed pass minus its prefill-only pass, both for one request of T tokens without prefix.
  A mixed pass costs ``prefill_ms[P, T/P, K/P] + mixed_extra_ms[T, D, S/D]``. For GQA models (dense
  and MoE) AIC's own mixed composition is additive in exactly this way, so this reproduces it (checked
  to 0.2% for Qwen3-8B and Qwen3-30B-A3B on H200). For MLA models (DeepSeek) AIC prices a mixed pass's
  attention as one sequence of all T + D tokens, whatever P; we keep the per-request prefill price and
  add the increment measured at P = 1, which departs from AIC's own mixed answer when P > 1.

Interpolation is multilinear in the natural coordinates (requests, tokens, context) between grid points
spaced geometrically (2–4 per octave, every decode batch up to 16, 0 on the prefix axis, and 2^i + 1
after each power of two on the token and batch axes, where AIC's latency jumps with the kernels' tiling).
Latency is close to affine in each coordinate between neighbouring points, so linear weights beat
log-axis weights here. Outside the grid the edge cell is extended linearly (not clamped). The grid is
sized from the scheduler's limits (``max_batched_tokens``, ``max_sequences``, ``context_length``), so
every pass the scheduler can form lies inside it. Against AIC's direct answers at random in-limit shapes
(Qwen3-8B, H200, vLLM), prices are within a median 0.2% (prefill), 0.01% (decode), 0.5% (mixed); the
worst few percent, up to ~6%, sit where AIC's own latency jumps between grid points.

Provenance, one label per pass (the worst over its busy ranks): ``measured`` — every lookup hit a grid
point, so the price is AIC's own answer for that shape; ``interpolated`` — inside the grid;
``extrapolated:measured`` — some coordinate beyond the grid. AIC's answers are GPU time only; no host
overhead is added (so no ``assumed-host`` label).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simmodel.errors import ScenarioError
from simmodel.perf.deployment import Deployment
from simmodel.perf.timing import (
    CONTEXT_TOKENS,
    NEW_TOKENS,
    SEQUENCES,
    PassSums,
    SumsTiming,
)

QueryFn = Callable[[int, int, int, int, int], float]
"""``(num_prefill_requests, sum_prefill_tokens, sum_prefill_kv_tokens, num_decode_requests,
sum_decode_kv_tokens) -> milliseconds`` for one rank's forward pass, as AIC's forward-pass model takes it."""

MISSING_EXTRA = "timing.type measured needs the optional extra: pip install 'simmodel[measured]'"
AIC_REQUIREMENT = "aiconfigurator-core==0.12.0"

LABELS = ("measured", "interpolated", "extrapolated:measured")
MEASURED, INTERPOLATED, EXTRAPOLATED = range(3)

# Our registry's Hugging Face ids -> the model names aiconfigurator-core 0.12 ships configs for (same
# config.json shape; see simmodel/perf/models.py). Anything else AIC would fetch from the Hub.
AIC_MODELS: dict[str, str] = {
    "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B": "meta-llama/Meta-Llama-3.1-405B",
    "meta-llama/Llama-3.1-405B-Instruct": "meta-llama/Meta-Llama-3.1-405B",
    "Qwen/Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen/Qwen3-8B-Base": "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
    "Qwen/Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-30B-A3B-Base": "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B": "Qwen/Qwen3-235B-A22B",
    "deepseek-ai/DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-V3-Base": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-V3-0324": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-R1",
}
BACKENDS = ("vllm", "sglang", "trtllm")


# -- the grid ---------------------------------------------------------------------------------------

def geometric_axis(high: int, *, low: int = 1, per_octave: int = 4, zero: bool = False, dense_to: int = 0,
                   steps: bool = False) -> np.ndarray:
    """Grid points from ``low`` to ``high``: the integers ``m·2^i`` (m = 1, 1.25, 1.5, 1.75 for 4 per
    octave), every integer up to ``dense_to``, ``2^i + 1`` for 2^i ≥ 16 if ``steps`` (GEMM and attention
    kernels change tiling there, so AIC's latency jumps between 2^i and 2^i + 1), ``high`` itself (the
    scheduler's limit is a grid point) and 0 first if ``zero``."""
    if high < low:
        raise ValueError(f"axis high {high} < low {low}")
    octaves = 2 ** np.arange(int(np.ceil(np.log2(max(high, 2)))) + 1)
    mantissas = 1.0 + np.arange(per_octave) / per_octave
    parts = [np.rint(np.outer(octaves, mantissas)).ravel(), np.arange(1, dense_to + 1), [high]]
    if steps:
        parts.append(octaves[octaves >= 16] + 1)
    if zero:
        parts.append([0])
    points = np.unique(np.concatenate(parts).astype(np.int64))
    keep = ((points >= low) & (points <= high)) | ((points == 0) & zero)
    return points[keep].astype(np.float64)


@dataclass(frozen=True, slots=True)
class MeasuredGrid:
    """The pass shapes to tabulate (each axis ascending, at least two points)."""

    prefill_requests: np.ndarray
    prefill_tokens: np.ndarray
    """New tokens per prefill request."""
    prefill_context: np.ndarray
    """Cached (prefix / earlier-chunk) tokens per prefill request."""
    decode_requests: np.ndarray
    decode_context: np.ndarray
    """Mean KV tokens of the decoding requests."""
    mixed_prefill_tokens: np.ndarray
    """All new prefill tokens of a mixed pass."""
    mixed_decode_requests: np.ndarray
    mixed_decode_context: np.ndarray

    @classmethod
    def for_limits(cls, context_length: int, max_batched_tokens: int, max_sequences: int) -> MeasuredGrid:
        """Every pass the scheduler can form: at most ``max_batched_tokens`` new tokens and
        ``max_sequences`` sequences, contexts up to ``context_length``: about 2.4·10⁴ shapes for a
        40,960 context, 8,192 tokens and 256 sequences. The mixed pass's decode increment is a small
        term, so its axes are coarser."""
        tokens = max(2, min(max_batched_tokens, context_length))
        batch = max(2, min(max_sequences, max_batched_tokens))
        context = max(2, context_length)
        return cls(
            prefill_requests=geometric_axis(batch, per_octave=2),
            prefill_tokens=geometric_axis(tokens, steps=True),
            prefill_context=geometric_axis(max(16, context), low=16, per_octave=1, zero=True),
            decode_requests=geometric_axis(batch, dense_to=16, steps=True),
            decode_context=geometric_axis(context),
            mixed_prefill_tokens=geometric_axis(max(2, max_batched_tokens), per_octave=2, steps=True),
            mixed_decode_requests=geometric_axis(batch, per_octave=2),
            mixed_decode_context=geometric_axis(context, per_octave=1),
        )

    @property
    def num_queries(self) -> int:
        mixed = self.mixed_decode_requests.size * self.mixed_decode_context.size + 1  # + the prefill alone
        return (self.prefill_requests.size * self.prefill_tokens.size * self.prefill_context.size
                + self.decode_requests.size * self.decode_context.size + self.mixed_prefill_tokens.size * mixed)


@dataclass(frozen=True, slots=True)
class MeasuredTables:
    """Forward-pass milliseconds of one rank on a ``MeasuredGrid`` (see the module docstring)."""

    grid: MeasuredGrid
    prefill_ms: np.ndarray
    """[prefill_requests, prefill_tokens, prefill_context]"""
    decode_ms: np.ndarray
    """[decode_requests, decode_context]"""
    mixed_extra_ms: np.ndarray
    """[mixed_prefill_tokens, mixed_decode_requests, mixed_decode_context]"""
    source: str = ""
    """What answered the queries (model, system, backend, version, parallelism)."""
    build_seconds: float = 0.0


def build_tables(query: QueryFn, grid: MeasuredGrid, source: str = "") -> MeasuredTables:
    """Ask ``query`` for every grid shape, one call each (AIC answers in about 20 µs)."""
    start = time.perf_counter()
    g = grid
    prefill = np.empty((g.prefill_requests.size, g.prefill_tokens.size, g.prefill_context.size))
    for (i, p), (j, t), (k, c) in itertools.product(enumerate(g.prefill_requests), enumerate(g.prefill_tokens),
                                                    enumerate(g.prefill_context)):
        prefill[i, j, k] = query(int(p), int(p * t), int(p * c), 0, 0)
    decode = np.empty((g.decode_requests.size, g.decode_context.size))
    for (i, d), (j, c) in itertools.product(enumerate(g.decode_requests), enumerate(g.decode_context)):
        decode[i, j] = query(0, 0, 0, int(d), int(d * c))
    extra = np.empty((g.mixed_prefill_tokens.size, g.mixed_decode_requests.size, g.mixed_decode_context.size))
    for m, t in enumerate(g.mixed_prefill_tokens):
        alone = query(1, int(t), 0, 0, 0)
        for (i, d), (j, c) in itertools.product(enumerate(g.mixed_decode_requests),
                                                enumerate(g.mixed_decode_context)):
            extra[m, i, j] = query(1, int(t), 0, int(d), int(d * c)) - alone
    return MeasuredTables(g, prefill, decode, extra, source, time.perf_counter() - start)


# -- interpolation ----------------------------------------------------------------------------------

class GridTable:
    """Multilinear interpolation of one table on a rectilinear grid, vectorized over query points.

    Weights are linear in the axis coordinates; outside the grid the edge cell is extended linearly.
    Each point also gets a provenance code: ``MEASURED`` if every coordinate is a grid point,
    ``EXTRAPOLATED`` if any lies outside its axis, else ``INTERPOLATED``."""

    def __init__(self, table: np.ndarray, axes: tuple[np.ndarray, ...]) -> None:
        if table.shape != tuple(np.size(a) for a in axes) or min(table.shape) < 2:
            raise ValueError(f"table shape {table.shape} does not match axes of sizes "
                             f"{[np.size(a) for a in axes]} (each needs at least 2 points)")
        self.axes = tuple(np.asarray(a, dtype=np.float64) for a in axes)
        if any((np.diff(a) <= 0).any() for a in self.axes):
            raise ValueError("grid axes must be strictly increasing")
        self.table = np.asarray(table, dtype=np.float64)
        self.flat = np.ascontiguousarray(self.table).ravel()
        # searchsorted over an axis's interior points gives the cell directly, clamped to the edge cells
        self.interior = tuple(a[1:-1] for a in self.axes)
        self.points = np.concatenate(self.axes)
        self.axis_start = np.cumsum([0, *table.shape[:-1]])[:, None]
        strides = np.cumprod((*table.shape[1:], 1)[::-1])[::-1]
        self.strides = strides.astype(np.int64)
        corners = np.array(list(itertools.product((0, 1), repeat=len(axes))), dtype=np.int64)
        self.corners = corners[:, :, None].astype(bool)
        self.corner_offsets = (corners @ self.strides)[:, None]

    def __call__(self, *coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = np.array(coords, dtype=np.float64).reshape(len(coords), -1)
        cell = np.array([inner.searchsorted(c, side="right") for inner, c in zip(self.interior, x)])
        at = cell + self.axis_start
        lo = self.points[at]
        w = (x - lo) / (self.points[at + 1] - lo)
        rest = 1.0 - w
        corner_weight = np.where(self.corners, w, rest).prod(axis=1)
        terms = corner_weight * self.flat[self.strides @ cell + self.corner_offsets]
        # Corner by corner, in order: a sum over axis 0 would add one column pairwise but many in
        # sequence, so a pass's price would depend on how many ranks or passes are priced with it.
        value = terms[0].copy()
        for term in terms[1:]:
            value += term
        spread = w * rest  # 0 on a grid point, negative outside the axis
        outside = (spread < 0.0).any(axis=0)
        return value, np.where(outside, EXTRAPOLATED, INTERPOLATED - (spread == 0.0).all(axis=0))


def interpolate(table: np.ndarray, axes: tuple[np.ndarray, ...],
                coords: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """One-off ``GridTable(table, axes)(*coords)``: values and provenance codes."""
    return GridTable(table, axes)(*coords)


class MeasuredTiming(SumsTiming):
    """Prices each rank's pass from AIConfigurator's measured tables (see the module docstring).

    ``MeasuredTiming(deployment, backend)`` queries aiconfigurator-core once per scenario (a few
    seconds); ``MeasuredTiming.from_tables(tables)`` prices from tables already built. Pass the
    scheduler's limits so the grid covers every pass it can form (defaults: the model's context, a
    whole context's worth of tokens, 256 sequences); ``query`` replaces AIC (tests).
    """

    def __init__(self, deployment: Deployment, backend: str = "vllm", *, backend_version: str | None = None,
                 context_length: int | None = None, max_batched_tokens: int | None = None,
                 max_sequences: int | None = None, query: QueryFn | None = None) -> None:
        context = context_length or deployment.model.max_position_embeddings
        grid = MeasuredGrid.for_limits(context, max_batched_tokens or context, max_sequences or 256)
        source = "query"
        if query is None:
            query, source = aic_query(deployment, backend, backend_version)
        self._init(build_tables(query, grid, source))

    @classmethod
    def from_tables(cls, tables: MeasuredTables) -> MeasuredTiming:
        timing = cls.__new__(cls)
        timing._init(tables)
        return timing

    def _init(self, tables: MeasuredTables) -> None:
        self.tables = tables
        g = tables.grid
        self.prefill = GridTable(tables.prefill_ms, (g.prefill_requests, g.prefill_tokens, g.prefill_context))
        self.decode = GridTable(tables.decode_ms, (g.decode_requests, g.decode_context))
        self.mixed_extra = GridTable(tables.mixed_extra_ms,
                                     (g.mixed_prefill_tokens, g.mixed_decode_requests, g.mixed_decode_context))

    def forward_ms(self, num_prefill: np.ndarray, prefill_tokens: np.ndarray, prefill_kv: np.ndarray,
                   num_decode: np.ndarray, decode_kv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Milliseconds and provenance code per rank from AIC's five ``scheduled_requests`` aggregates
        (one float array entry per rank). A rank with no work costs 0 and gets code -1."""
        has_prefill = prefill_tokens > 0
        has_decode = num_decode > 0
        any_prefill, any_decode = has_prefill.any(), has_decode.any()
        ms = np.zeros(np.shape(prefill_tokens))
        code = np.full(ms.shape, -1)
        if any_prefill:
            requests = np.maximum(num_prefill, 1.0)
            value, c = self.prefill(requests, np.maximum(prefill_tokens, 1.0) / requests, prefill_kv / requests)
            ms = np.where(has_prefill, value, 0.0)
            code = np.where(has_prefill, c, -1)
        if any_decode:
            requests = np.maximum(num_decode, 1.0)
            context = decode_kv / requests
            alone = has_decode & ~has_prefill
            if alone.any():
                value, c = self.decode(requests, context)
                ms = np.where(alone, value, ms)
                code = np.where(alone, c, code)
            if any_prefill:
                mixed = has_decode & has_prefill
                value, c = self.mixed_extra(np.maximum(prefill_tokens, 1.0), requests, context)
                ms = np.where(mixed, ms + value, ms)
                code = np.where(mixed, np.maximum(code, c), code)
        return np.maximum(ms, 0.0), code

    def _seconds(self, sums: PassSums) -> tuple[np.ndarray, list[tuple[str, ...]]]:
        """Every rank interpolated on its own; each pass labelled by its least certain rank."""
        pre, dec = sums.kinds()
        ms, code = self.forward_ms(pre[:, SEQUENCES], pre[:, NEW_TOKENS], pre[:, CONTEXT_TOKENS], dec[:, SEQUENCES],
                                   dec[:, CONTEXT_TOKENS])
        worst = code.reshape(sums.num_passes, -1).max(axis=1).tolist()
        return ms / 1000.0, [(LABELS[c],) if c >= 0 else () for c in worst]


# -- aiconfigurator-core ----------------------------------------------------------------------------

def aic_model_name(deployment: Deployment) -> str:
    model_id = deployment.model.model_id
    name = AIC_MODELS.get(model_id)
    if name is None:
        raise ScenarioError(f"timing.type measured: aiconfigurator-core has no tables for model {model_id} "
                            f"(supported: {', '.join(sorted(AIC_MODELS))})")
    return name


def check_parallelism(deployment: Deployment) -> None:
    d = deployment
    if d.prefill_context != 1 or d.decode_context != 1:
        raise ScenarioError(f"timing.type measured: context parallelism (prefill_context {d.prefill_context}, "
                            f"decode_context {d.decode_context}) is not supported; set both to 1")


def check_system(system_id: str, backend: str, supported: dict[str, dict[str, list[str]]],
                 backend_version: str | None = None) -> None:
    """``supported``: aiconfigurator-core's ``get_supported_databases()`` (system -> backend -> versions)."""
    if backend not in BACKENDS:
        raise ScenarioError(f"timing.type measured: aiconfigurator-core has no backend {backend!r} "
                            f"(it has {', '.join(BACKENDS)})")
    versions = supported.get(system_id, {}).get(backend, [])
    if not versions:
        systems = sorted(s for s, b in supported.items() if b.get(backend))
        raise ScenarioError(f"timing.type measured: aiconfigurator-core has no {backend} data for system "
                            f"{system_id} (it has {', '.join(systems)})")
    if backend_version is not None and backend_version not in versions:
        raise ScenarioError(f"timing.type measured: aiconfigurator-core has no {backend} {backend_version} data "
                            f"for {system_id} (it has {', '.join(versions)})")


def _weight_dtype(deployment: Deployment) -> str | None:
    """AIC's GEMM dtype for ``engine.dtype``; None keeps the checkpoint's own (DeepSeek's FP8 blocks)."""
    if deployment.weight_bytes == deployment.model.dtype_bytes:
        return None
    return "fp8" if deployment.weight_bytes <= 1 else "bfloat16"


def aic_config(deployment: Deployment, backend: str = "vllm", backend_version: str | None = None) -> dict:
    """The ``EngineConfig`` that AIC's forward-pass model compiles for this worker's ranks.

    Dense models: each attention-DP rank is a replica, priced at ``tensor`` GPUs. MoE models: AIC gets
    the whole layout (``attention_dp_size``, ``moe_tp_size``, ``moe_ep_size``) and prices one rank."""
    d, m = deployment, deployment.model
    weights = _weight_dtype(d)
    config = {
        "schema_version": 1,
        "model_name": aic_model_name(d),
        "system_name": d.hardware.system_id,
        "backend": backend,
        "tp_size": d.tensor,
        "pp_size": 1,
        "weight_dtype": weights,
        "kv_cache_dtype": "fp8" if d.kv_bytes <= 1 else "bfloat16",
    }
    if backend_version is not None:
        config["backend_version"] = backend_version
    if m.is_moe:
        config.update(attention_dp_size=d.attention_data, moe_tp_size=d.moe_tensor, moe_ep_size=d.moe_expert,
                      moe_dtype=weights)
    return config


def aic_query(deployment: Deployment, backend: str = "vllm",
              backend_version: str | None = None) -> tuple[QueryFn, str]:
    """Compile AIC's forward-pass model for this worker; returns the query function and a source line.

    Refuses (``ScenarioError``, one line) a model, parallelism, system or backend AIC cannot price, and
    says how to install the extra when aiconfigurator-core is missing."""
    check_parallelism(deployment)
    config = aic_config(deployment, backend, backend_version)
    try:
        from aiconfigurator_core.sdk.perf_database import get_supported_databases, resolve_query_version
        from aiconfigurator_core.sdk.rust_engine_step import RustForwardPassPerfModel
    except ImportError as exc:
        raise ScenarioError(MISSING_EXTRA) from exc
    layout = f"tensor {deployment.tensor}"
    if deployment.model.is_moe:
        layout += (f", attention_data {deployment.attention_data}, moe_tensor {deployment.moe_tensor}, "
                   f"moe_expert {deployment.moe_expert}")
    what = f"{config['model_name']} on {config['system_name']} ({layout})"
    aic_logger = logging.getLogger("aiconfigurator_core")
    level = aic_logger.level
    aic_logger.setLevel(logging.ERROR)  # its perf database logs data back-fill notes at WARNING
    try:
        check_system(deployment.hardware.system_id, backend, get_supported_databases(), backend_version)
        version = resolve_query_version(config["system_name"], backend, backend_version or "current")
        model = RustForwardPassPerfModel.from_native(config)
    except ScenarioError:
        raise
    except Exception as exc:  # AIC raises ValueError / RuntimeError / AssertionError with its reason
        raise ScenarioError(f"timing.type measured: aiconfigurator-core cannot price {what} with {backend}: "
                            f"{' '.join(str(exc).split())}") from exc
    finally:
        aic_logger.setLevel(level)

    def query(num_prefill: int, prefill_tokens: int, prefill_kv: int, num_decode: int, decode_kv: int) -> float:
        scheduled = {"num_prefill_requests": num_prefill, "sum_prefill_tokens": prefill_tokens,
                     "sum_prefill_kv_tokens": prefill_kv, "num_decode_requests": num_decode,
                     "sum_decode_kv_tokens": decode_kv}
        try:
            value = model.estimate_forward_pass_time_ms({"scheduled_requests": scheduled})
        except Exception as exc:
            raise ScenarioError(f"timing.type measured: aiconfigurator-core cannot price {what} at {scheduled}: "
                                f"{' '.join(str(exc).split())}") from exc
        if value is None:
            raise ScenarioError(f"timing.type measured: aiconfigurator-core gave no estimate for {scheduled}")
        return float(value)

    source = f"aiconfigurator-core {_aic_version()}: {what}, {backend} {version}"
    return query, source


def _aic_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aiconfigurator-core")
    except PackageNotFoundError:
        return "?"


__all__ = ["AIC_MODELS", "AIC_REQUIREMENT", "LABELS", "MeasuredGrid", "MeasuredTables", "MeasuredTiming",
           "QueryFn", "aic_config", "aic_query", "build_tables", "check_system", "geometric_axis",
           "interpolate"]
