"""``planner``: the replica planner that adds and removes workers of a pool during the run, and the rule that
only a scaled pool's workers may take time to start (``engine.workers.<role>.startup_seconds``)."""

from __future__ import annotations

from simmodel.config.bounds import MAX_CACHED_BLOCKS, MAX_GPUS
from simmodel.config.node import _Node
from simmodel.config.schema import PLANNER_MODES, Engine, PlannerSpec, PoolBounds
from simmodel.errors import ScenarioError

LOAD_KNOBS = ("queue_scale_out", "queue_scale_in", "kv_scale_out", "kv_scale_in")
MODE_KNOBS = {"load": LOAD_KNOBS, "sla": ("ttft_ms", "itl_ms")}
"""The knobs each mode reads (besides ``pools`` and the intervals)."""
MAX_INTERVAL_S = 1e6
MIN_INTERVAL_S = 0.1
"""The shortest sample or decision interval: a real planner polls metrics every few seconds, and every sample
is an event that bounds the workers' runs of passes."""


def parse_planner(node: _Node, engine: Engine) -> PlannerSpec | None:
    """``planner``, or None when the section is absent (then no worker may take time to start)."""
    if not node.data:
        node.done()
        _check_startup(engine, None)
        return None
    if engine.mode == "afd":
        raise ScenarioError(f"{node.path}: not modeled with engine.mode: afd (the FFN workers are shared by a fixed "
                            f"number of attention workers)")
    mode = node.choice("mode", PLANNER_MODES)
    for key, value in node.data.items():
        owner = next((m for m, knobs in MODE_KNOBS.items() if key in knobs), None)
        if owner is not None and owner != mode and value is not None:
            raise ScenarioError(f"{node.at(key)}: read in mode {owner} only (mode is {mode})")
    base = PlannerSpec(mode, {})
    interval = node.number("adjustment_interval_s", base.adjustment_interval_s, minimum=MIN_INTERVAL_S,
                           maximum=MAX_INTERVAL_S)
    metric = node.number("metric_interval_s", base.metric_interval_s, minimum=MIN_INTERVAL_S, maximum=MAX_INTERVAL_S)
    if metric > interval:
        raise ScenarioError(f"{node.at('metric_interval_s')}: must be at most adjustment_interval_s ({interval:g}), "
                            f"got {metric:g}")
    thresholds = [node.number(k, getattr(base, k), maximum=1.0 if k.startswith("kv_") else 1e9) for k in LOAD_KNOBS]
    queue_out, queue_in, kv_out, kv_in = thresholds
    if queue_in >= queue_out:
        raise ScenarioError(f"{node.at('queue_scale_in')}: must be below queue_scale_out ({queue_out:g}), got "
                            f"{queue_in:g}")
    if kv_in >= kv_out:
        raise ScenarioError(f"{node.at('kv_scale_in')}: must be below kv_scale_out ({kv_out:g}), got {kv_in:g}")
    ttft = node.number("ttft_ms", base.ttft_ms, positive=True)
    itl = node.number("itl_ms", base.itl_ms, positive=True)
    pools = _pools(node.node("pools", required=True), engine)
    node.done()
    spec = PlannerSpec(mode, pools, interval, metric, queue_out, queue_in, kv_out, kv_in, ttft, itl)
    _check_startup(engine, spec)
    return spec


def _pools(node: _Node, engine: Engine) -> dict[str, PoolBounds]:
    pools = {}
    for key in node.data:
        if key not in engine.roles:
            raise ScenarioError(f"{node.at(str(key))}: not a pool of this deployment (pools: {', '.join(engine.roles)})")
    for role in engine.roles:
        if not node.has(role):
            continue
        bounds = node.node(role)
        low = bounds.int("min_replicas", 1)
        high = bounds.int("max_replicas")
        bounds.done()
        if high < low:
            raise ScenarioError(f"{bounds.at('max_replicas')}: must be at least min_replicas ({low}), got {high}")
        replicas = engine.workers[role].parallelism.replicas
        if not low <= replicas <= high:
            raise ScenarioError(f"{bounds.path}: engine.workers.{role}.parallelism.replicas ({replicas}), the workers "
                                f"the run starts with, must lie within min_replicas and max_replicas ({low}–{high})")
        pools[role] = PoolBounds(low, high)
    if not pools:
        raise ScenarioError(f"{node.path}: name at least one pool to scale ({', '.join(engine.roles)})")
    _check_size(node, engine, pools)
    return pools


def _check_size(node: _Node, engine: Engine, pools: dict[str, PoolBounds]) -> None:
    """A scaled pool is built at its ``max_replicas`` workers, so the deployment's bounds (GPUs, vLLM's
    prefix-caching blocks held in memory) hold at those counts, as they hold for ``parallelism.replicas``."""
    def count(role: str) -> int:
        return pools[role].max_replicas if role in pools else engine.workers[role].parallelism.replicas

    gpus = sum(count(r) * w.parallelism.gpus_per_worker for r, w in engine.workers.items())
    largest = max(pools, key=lambda r: pools[r].max_replicas * engine.workers[r].parallelism.gpus_per_worker)
    if gpus > MAX_GPUS:
        raise ScenarioError(f"{node.at(largest)}.max_replicas: the deployment could grow to {gpus:,} GPUs; at most "
                            f"{MAX_GPUS:,}")
    blocks = sum(count(r) * w.parallelism.attention_data * w.num_kv_blocks for r, w in engine.workers.items()
                 if w.kv_cache.prefix_caching and engine.backend == "vllm")
    if blocks > MAX_CACHED_BLOCKS:
        raise ScenarioError(f"{node.at(largest)}.max_replicas: at that many workers the prefix-caching KV pools would "
                            f"hold {blocks:,} blocks; simmodel keeps each block's state in memory (about 100 bytes), "
                            f"so at most {MAX_CACHED_BLOCKS:,}: a smaller max_replicas or kv_cache.capacity")


def _check_startup(engine: Engine, planner: PlannerSpec | None) -> None:
    for role, worker in engine.workers.items():
        if worker.startup_seconds and (planner is None or role not in planner.pools):
            raise ScenarioError(f"engine.workers.{role}.startup_seconds: only delays workers a planner adds "
                                f"(planner.pools.{role}); this pool's workers are all there from the start")
        if worker.startup_seconds and planner.pools[role].max_replicas == worker.parallelism.replicas:
            raise ScenarioError(f"engine.workers.{role}.startup_seconds: the planner can add no worker to this pool "
                                f"(planner.pools.{role}.max_replicas is its {worker.parallelism.replicas} replicas)")
