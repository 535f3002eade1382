"""Price one request alone, or one pass of a given shape, with a worker's timing model.

These are the numbers ``simmodel estimate`` prints. ``request_estimate`` reproduces exactly the passes
the simulator runs for a single request arriving at an idle worker: prefill chunks of at most the
token budget (the last one samples the first token), then one decode pass per further output token, and
the engine's time per request outside the passes (``engine.request_overhead_ms``, the default timing's
frontend cost) on top of TTFT and E2E.
All passes are priced in one vectorized call, each as its own "rank" of a batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simmodel.perf.timing import PassBatch, PassTiming, price_passes


@dataclass(frozen=True, slots=True)
class RequestEstimate:
    ttft_ms: float
    mean_itl_ms: float | None
    e2e_ms: float


def _batch(new: np.ndarray, ctx: np.ndarray, decode: np.ndarray, samples: np.ndarray, capacity_tokens: float,
           rank: np.ndarray | None = None, num_ranks: int | None = None) -> PassBatch:
    rank = np.arange(len(new)) if rank is None else rank
    n = len(new) if num_ranks is None else num_ranks
    return PassBatch(n, rank, new.astype(np.int64), ctx.astype(np.int64), decode, samples, np.full(n, capacity_tokens))


def pass_times_ms(timing: PassTiming, batch: PassBatch) -> np.ndarray:
    """Each "rank" of ``batch`` priced, in milliseconds, rounded to whole nanoseconds as the simulator does."""
    return np.rint(timing.price(batch).total_s * 1e9) / 1e6


def request_estimate(timing: PassTiming, input_tokens: int, output_tokens: int, *, max_batched_tokens: int,
                     max_model_len: int, capacity_tokens: float, request_overhead_ms: float = 0.0) -> RequestEstimate:
    """TTFT, mean inter-token latency and E2E of one request served alone (vLLM chunking and limits);
    ``request_overhead_ms`` (the engine's time per request outside the passes) adds to TTFT and E2E."""
    starts = np.arange(0, input_tokens, max_batched_tokens)
    chunks = np.minimum(max_batched_tokens, input_tokens - starts)
    num_out = min(output_tokens, max_model_len - input_tokens)
    ctx_decode = input_tokens + np.arange(num_out - 1)  # decode k reads prompt + k earlier outputs
    new = np.concatenate([chunks, np.ones(len(ctx_decode), dtype=np.int64)])
    ctx = np.concatenate([starts, ctx_decode])
    decode = np.concatenate([np.zeros(len(chunks), bool), np.ones(len(ctx_decode), bool)])
    samples = np.concatenate([starts + chunks >= input_tokens, np.ones(len(ctx_decode), bool)])
    # each pass priced on its own (as one run of passes), not as ranks of one worker: an MoE worker's ranks
    # share their experts' load, a request's successive passes do not
    seconds, _ = price_passes(timing, _batch(new, ctx, decode, samples, capacity_tokens), len(new))
    ns = np.rint(seconds[:, 0] * 1e9).astype(np.int64)  # (the simulator's clock: whole nanoseconds)
    overhead_ns = round(request_overhead_ms * 1e6)
    ttft = int(ns[: len(chunks)].sum() + overhead_ns) / 1e6
    itl = float(ns[len(chunks):].mean()) / 1e6 if len(ctx_decode) else None
    return RequestEstimate(ttft, itl, int(ns.sum() + overhead_ns) / 1e6)


def decode_pass_ms(timing: PassTiming, batch_size: int, context: int, capacity_tokens: float) -> float:
    """One decode pass of ``batch_size`` sequences, each with ``context`` tokens already in KV."""
    new = np.ones(batch_size, dtype=np.int64)
    batch = _batch(new, np.full(batch_size, context), np.ones(batch_size, bool), np.ones(batch_size, bool),
                   capacity_tokens, rank=np.zeros(batch_size, dtype=np.int64), num_ranks=1)
    return float(pass_times_ms(timing, batch)[0])


def prefill_pass_ms(timing: PassTiming, tokens: int, capacity_tokens: float, batch_size: int = 1) -> float:
    """One prefill pass of ``batch_size`` fresh prompts of ``tokens`` tokens each (all sample)."""
    batch = _batch(np.full(batch_size, tokens), np.zeros(batch_size), np.zeros(batch_size, bool),
                   np.ones(batch_size, bool), capacity_tokens, rank=np.zeros(batch_size, dtype=np.int64), num_ranks=1)
    return float(pass_times_ms(timing, batch)[0])


def estimate_from_options(*, model: str, hardware: str, tensor: int, backend: str, dtype: str,
                          context_length: int | None, max_batched_tokens: int, input_tokens: int | None,
                          output_tokens: int | None, decode_batch: int | None, context: int | None,
                          prefill_tokens: int | None) -> dict[str, float | None]:
    """What ``simmodel estimate`` prints: a one-worker scenario validated like any other, then priced."""
    from pathlib import Path

    from simmodel.config.load import parse_scenario
    from simmodel.errors import ScenarioError
    from simmodel.perf.timings import make_timing

    engine: dict = {"model": model, "hardware": hardware, "backend": backend, "dtype": dtype, "workers": {
        "aggregated": {"parallelism": {"tensor": tensor},
                       "scheduler": {"max_batched_tokens": max_batched_tokens,
                                     "max_sequences": min(256, max_batched_tokens)},
                       # (passes are priced alone: no cache to hit, and sliding-window models keep their KV groups)
                       "kv_cache": {"prefix_caching": False}}}}
    if context_length is not None:
        engine["context_length"] = context_length
    data = {"engine": engine, "traffic": {"source": {"type": "synthetic", "input_tokens": 1, "output_tokens": 1},
                                          "load": {"type": "concurrency", "concurrency": 1}, "stop": {"requests": 1}}}
    scenario = parse_scenario(data, Path.cwd())
    role = scenario.engine.workers["aggregated"]
    timing = make_timing(role, scenario.engine.backend)
    capacity = float(role.kv_tokens_per_rank)
    limit = role.context_length
    if input_tokens is not None and output_tokens is not None:
        if input_tokens >= limit:
            raise ScenarioError(f"--input-tokens: {input_tokens} is at or above context_length {limit}; "
                                f"vLLM would reject the request")
        est = request_estimate(timing, input_tokens, output_tokens, max_batched_tokens=max_batched_tokens,
                               max_model_len=limit, capacity_tokens=capacity,
                               request_overhead_ms=scenario.engine.request_overhead_ms)
        return {"ttft_ms": est.ttft_ms, "mean_itl_ms": est.mean_itl_ms, "e2e_ms": est.e2e_ms}
    if decode_batch is not None and context is not None:
        max_seqs = role.scheduler.max_sequences
        if decode_batch > max_seqs:
            raise ScenarioError(f"--decode-batch: {decode_batch} sequences exceed max_sequences {max_seqs}")
        if context + 1 >= limit:
            raise ScenarioError(f"--context: {context} + 1 decoded token reaches context_length {limit}")
        blocks = role.kv_layout.blocks(context + 1, context, role.kv_cache.block_size)
        if decode_batch * blocks > role.num_kv_blocks:
            raise ScenarioError(f"--decode-batch/--context: {decode_batch} sequences × {blocks} KV blocks exceed "
                                f"the rank's {role.num_kv_blocks} blocks (the rank's KV capacity)")
        return {"pass_ms": decode_pass_ms(timing, decode_batch, context, capacity)}
    assert prefill_tokens is not None
    if prefill_tokens > max_batched_tokens or prefill_tokens >= limit:
        raise ScenarioError(f"--prefill-tokens: one pass holds at most {min(max_batched_tokens, limit - 1)} "
                            f"prompt tokens (max_batched_tokens {max_batched_tokens}, context_length {limit})")
    return {"pass_ms": prefill_pass_ms(timing, prefill_tokens, capacity)}
