"""A simulated call's answer: the aggregate, each request's metrics and each pass (``POST /api/scenarios``).

The aggregate is the run's summary (every request and every pass): p50 and p99 TTFT, p50 inter-token latency
(all the run's intervals pooled), p50 and p99 end-to-end latency, in ms, and output tokens per second over the
run. ``steps`` has one row per pass and rank; above ``MAX_STEPS`` rows they are sampled uniformly, the first
and the last kept, each with its original ``index``, and the answer says so.
"""

from __future__ import annotations

import math

import numpy as np

from simmodel.serve.workload import Arrival

MAX_STEPS = 5000
"""Pass rows an answer carries before they are sampled."""


def _number(value):
    """A JSON number: NaN (no value, e.g. a request without a second token) becomes null."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def aggregate(summary: dict) -> dict:
    return {"ttft_ms_p50": _number(summary["ttft_ms"]["p50"]), "ttft_ms_p99": _number(summary["ttft_ms"]["p99"]),
            "itl_ms_p50": _number(summary["itl_ms"]["p50"]),
            "e2e_ms_p50": _number(summary["e2e_latency_ms"]["p50"]),
            "e2e_ms_p99": _number(summary["e2e_latency_ms"]["p99"]),
            "output_tokens_per_s": _number(summary["output_throughput_tok_s"])}


def _later(value, start: float):
    """A simulated instant on the call's clock (the run starts at the call's first arrival, ``start``)."""
    value = _number(value)
    return None if value is None else value + start


def request_rows(requests, arrivals: list[Arrival], order: list[int], start: float = 0.0) -> list[dict]:
    """Each request's metrics under the id the call gave it (``order``: which call request each simulated id
    is), in the call's order, its instants on the call's clock (``start``: its first arrival)."""
    rows: list[dict | None] = [None] * len(arrivals)
    for row in requests.itertuples(index=False):
        k = order[int(row.request_id)]
        a = arrivals[k]
        rows[k] = {"id": a.id, "status": row.status, "arrival_s": a.arrival_s, "prompt_tokens": a.prompt_tokens,
                   "output_tokens": int(row.output_tokens), "ttft_ms": _number(row.ttft_ms),
                   "tpot_ms": _number(row.tpot_ms), "e2e_ms": _number(row.e2e_ms), "queue_ms": _number(row.queue_ms),
                   "first_token_s": _later(row.first_token_s, start), "finish_s": _later(row.finish_s, start),
                   "preemptions": int(row.preemptions), "cached_tokens": int(row.cached_tokens)}
    return [row for row in rows if row is not None]


def steps(passes, start: float = 0.0) -> dict:
    """The pass rows (all of them up to ``MAX_STEPS``, else a uniform sample keeping the first and last), their
    instants on the call's clock (``start``: its first arrival)."""
    total = len(passes)
    if total > MAX_STEPS:
        keep = np.unique(np.linspace(0, total - 1, MAX_STEPS).round().astype(np.int64))
    else:
        keep = np.arange(total)
    chosen = passes.iloc[keep]
    rows = [{"index": int(k), "role": r.role, "worker": int(r.worker), "dp_rank": int(r.dp_rank),
             "start_s": float(r.start_s) + start, "end_s": float(r.end_s) + start,
             "num_scheduled_tokens": int(r.num_scheduled_tokens),
             "num_prefill_seqs": int(r.num_prefill_seqs), "num_decode_seqs": int(r.num_decode_seqs),
             "kv_blocks_used": int(r.kv_blocks_used), "num_preempted": int(r.num_preempted),
             "provenance": r.provenance}
            for k, r in zip(keep.tolist(), chosen.itertuples(index=False))]
    return {"steps": rows, "steps_total": total, "steps_returned": len(rows), "steps_downsampled": total > MAX_STEPS,
            "steps_sampling": "uniform over the pass rows, first and last kept" if total > MAX_STEPS else "none"}


def scheduler_of(scenario) -> dict:
    """Each role's scheduler as the run used it."""
    return {name: {"max_num_seqs": role.scheduler.max_sequences,
                   "max_num_batched_tokens": role.scheduler.max_batched_tokens,
                   "async_scheduling": role.scheduler.async_scheduling, "block_size": role.kv_cache.block_size,
                   "prefix_caching": role.kv_cache.prefix_caching, "kv_blocks_per_rank": role.num_kv_blocks}
            for name, role in scenario.engine.workers.items()}


def assumptions(scenario) -> list[str]:
    """What the estimate takes for granted, said plainly."""
    engine = scenario.engine
    said = [f"backend {engine.backend}, mode {engine.mode}, model {engine.model} on {engine.hardware}",
            "requests have the exact prompt and output lengths given (output stops at its length, as ignore_eos)",
            "arrivals at the instants given; no client or network time beyond the scenario's request overhead"]
    for name, role in engine.workers.items():
        said.append(f"{name}: timing {role.timing.type}, {role.parallelism.gpus_per_worker} GPU(s) a worker, "
                    f"{role.parallelism.replicas} worker(s)")
    return said
