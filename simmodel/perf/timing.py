"""Pass timing models: one call prices one pass of every rank of a worker, from arrays.

A timing model is pure: a ``PassBatch`` (struct of arrays, one row per scheduled sequence, plus
per-rank KV occupancy) goes in, a ``PassCost`` with one time per rank comes out. The worker's pass
then lasts as long as its slowest rank. The GPU performance model plugs in behind the same call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True, slots=True)
class PassBatch:
    """Every sequence scheduled in one pass of one worker, and each rank's KV occupancy.

    ``rank``, ``num_new_tokens``, ``num_context_tokens`` (tokens already in KV), ``is_decode`` and
    ``samples`` (the chunk reaches the end of the sequence, so it samples a token) have one entry per
    scheduled sequence; ``kv_capacity_tokens`` (usable blocks × block size) has
    one per rank.
    """

    num_ranks: int
    rank: np.ndarray
    num_new_tokens: np.ndarray
    num_context_tokens: np.ndarray
    is_decode: np.ndarray
    samples: np.ndarray
    kv_capacity_tokens: np.ndarray


@dataclass(frozen=True, slots=True)
class PassCost:
    """Seconds each rank's forward takes, and the provenance labels of that price."""

    total_s: np.ndarray
    provenance: tuple[str, ...]


class PassTiming(Protocol):
    def price(self, batch: PassBatch) -> PassCost: ...


def price_passes(timing: PassTiming, batch: PassBatch, num_passes: int) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """Price ``num_passes`` passes of one worker at once (a coalesced decode run).

    ``batch`` holds every pass's rows with ``rank`` = pass × ranks + rank, sorted by it, and
    ``kv_capacity_tokens`` repeated per pass. Returns seconds of shape (passes, ranks) and each pass's
    provenance labels, exactly as ``price`` would give pass by pass. Models whose ranks are priced
    independently say so with ``ranks_independent`` and are priced in one call; others may offer
    ``price_passes``; the rest are called once per pass.
    """
    ranks = batch.num_ranks // num_passes
    own = getattr(timing, "price_passes", None)
    if own is not None:
        return own(batch, num_passes)
    if getattr(timing, "ranks_independent", False):
        cost = timing.price(batch)
        return cost.total_s.reshape(num_passes, ranks), [cost.provenance] * num_passes
    bounds = np.searchsorted(batch.rank, np.arange(num_passes + 1) * ranks)
    seconds, labels = [], []
    for k in range(num_passes):
        lo, hi = bounds[k], bounds[k + 1]
        cost = timing.price(PassBatch(ranks, batch.rank[lo:hi] - k * ranks, batch.num_new_tokens[lo:hi],
                                      batch.num_context_tokens[lo:hi], batch.is_decode[lo:hi],
                                      batch.samples[lo:hi], batch.kv_capacity_tokens[k * ranks:(k + 1) * ranks]))
        seconds.append(cost.total_s)
        labels.append(cost.provenance)
    return np.array(seconds).reshape(num_passes, ranks), labels


def _per_rank(batch: PassBatch, weights: np.ndarray) -> np.ndarray:
    return np.bincount(batch.rank, weights=weights, minlength=batch.num_ranks)


class FixedTiming:
    """A constant cost per pass kind: ``prefill_ms`` if the rank runs any prefill, plus ``decode_ms``
    if it runs any decode, so a mixed pass costs both (as vLLM-style mixed batches do in Dynamo's mocker).
    """

    ranks_independent = True

    def __init__(self, prefill_ms: float, decode_ms: float) -> None:
        self.prefill_s = prefill_ms / 1000.0
        self.decode_s = decode_ms / 1000.0

    def price(self, batch: PassBatch) -> PassCost:
        decode = batch.is_decode.astype(np.float64)
        has_decode = _per_rank(batch, decode) > 0
        has_prefill = _per_rank(batch, 1.0 - decode) > 0
        return PassCost(np.where(has_prefill, self.prefill_s, 0.0) + np.where(has_decode, self.decode_s, 0.0),
                        ("fixed",))


class PolynomialTiming:
    """Dynamo mocker's legacy polynomial curves (AISimulate ``engine/common/perf_model.rs``).

    Not calibrated to any GPU: use it for scheduler shape and speed, not for latency answers.
    Per rank, a pass costs P(T) if it prefills and D(u) if it decodes, both if mixed:

    - P(T) = 4.209989e-07·T² + 1.518344e-02·T + 16.50142 ms, where with n prefilling sequences
      T = n·(⌊Σ(context + chunk)/n⌋ − ⌊Σ context/n⌋) (Dynamo batches by floored means, so T can
      differ from the plain token sum by less than n);
    - D(u) = max(1, −25.74·u² + 54.01·u + 5.74) ms, u = min(1, Σ decode sequence lengths / KV
      capacity in tokens), a decoding sequence's length being its prompt plus every token sampled so far.
    """

    ranks_independent = True
    PREFILL = (4.209989e-07, 1.518344e-02, 1.650142e01)
    DECODE = (-25.74, 54.01, 5.74)

    def price(self, batch: PassBatch) -> PassCost:
        decode = batch.is_decode
        prefill = ~decode
        n = _per_rank(batch, prefill.astype(np.float64))
        ctx = batch.num_context_tokens.astype(np.float64)
        safe_n = np.maximum(n, 1.0)
        total = np.floor(_per_rank(batch, np.where(prefill, ctx + batch.num_new_tokens, 0.0)) / safe_n)
        prefix = np.floor(_per_rank(batch, np.where(prefill, ctx, 0.0)) / safe_n)
        tokens = n * (total - prefix)
        a, b, c = self.PREFILL
        prefill_ms = np.where(n > 0, (a * tokens + b) * tokens + c, 0.0)
        has_decode = _per_rank(batch, decode.astype(np.float64)) > 0
        u = np.minimum(1.0, _per_rank(batch, np.where(decode, ctx + batch.num_new_tokens, 0.0)) / batch.kv_capacity_tokens)
        d, e, f = self.DECODE
        decode_ms = np.where(has_decode, np.maximum(1.0, (d * u + e) * u + f), 0.0)
        return PassCost((prefill_ms + decode_ms) / 1000.0, ("polynomial",))

