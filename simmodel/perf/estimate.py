"""Price one request alone, or one pass of a given shape, with a worker's timing model.

These are the numbers ``simmodel estimate`` prints. ``request_estimate`` reproduces exactly the passes
the simulator runs for a single request arriving at an idle worker: prefill chunks of at most the
token budget (the last one samples the first token), then one decode pass per further output token.
All passes are priced in one vectorized call, each as its own "rank" of a batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simmodel.perf.timing import PassBatch, PassTiming


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
                     max_model_len: int, capacity_tokens: float) -> RequestEstimate:
    """TTFT, mean inter-token latency and E2E of one request served alone (vLLM chunking and limits)."""
    starts = np.arange(0, input_tokens, max_batched_tokens)
    chunks = np.minimum(max_batched_tokens, input_tokens - starts)
    num_out = min(output_tokens, max_model_len - input_tokens)
    ctx_decode = input_tokens + np.arange(num_out - 1)  # decode k reads prompt + k earlier outputs
    new = np.concatenate([chunks, np.ones(len(ctx_decode), dtype=np.int64)])
    ctx = np.concatenate([starts, ctx_decode])
    decode = np.concatenate([np.zeros(len(chunks), bool), np.ones(len(ctx_decode), bool)])
    samples = np.concatenate([starts + chunks >= input_tokens, np.ones(len(ctx_decode), bool)])
    times = pass_times_ms(timing, _batch(new, ctx, decode, samples, capacity_tokens))
    ttft = float(times[: len(chunks)].sum())
    itl = float(times[len(chunks):].mean()) if len(ctx_decode) else None
    return RequestEstimate(ttft, itl, float(times.sum()))


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
