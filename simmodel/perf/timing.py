"""Pass timing models: one call prices one pass of every rank of a worker, from arrays.

A timing model is pure: a ``PassBatch`` (struct of arrays, one row per scheduled sequence, plus
per-rank KV occupancy) goes in, a ``PassCost`` with one time per rank comes out. The worker's pass
then lasts as long as its slowest rank. The GPU performance model plugs in behind the same call.
"""

from __future__ import annotations

import math
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


class PassSums:
    """What a timing model prices a rank's pass from: per-rank totals of its scheduled sequences.

    ``table`` has one row per rank of each pass (row = pass × ranks + rank) and ten columns, five
    for the prefill sequences then the same five for the decode sequences (``SUM_COLUMNS``): how many,
    their new (query) tokens, their context tokens (already in KV), their causal query·key pairs
    (q·c + q(q+1)/2 for q new tokens on c context tokens, summed per sequence) and how many sample.
    Whole numbers stored as float64 — exact below 2**53, so the totals do not depend on the order the
    sequences are added in, and a coalesced decode run may build them from closed forms and get the
    bits that pricing pass by pass gets.
    """

    __slots__ = ("table", "kv_capacity_tokens", "num_passes")

    def __init__(self, table: np.ndarray, kv_capacity_tokens: np.ndarray, num_passes: int = 1) -> None:
        self.table = table
        self.kv_capacity_tokens = kv_capacity_tokens
        """Usable KV tokens of each row's rank."""
        self.num_passes = num_passes

    def kinds(self) -> tuple[np.ndarray, np.ndarray]:
        """The prefill and the decode columns, each (rows, 5), indexed by ``SEQUENCES`` … ``SAMPLED``."""
        return self.table[:, PREFILL:PREFILL + 5], self.table[:, DECODE:DECODE + 5]


SUM_COLUMNS = tuple(f"{kind}_{name}" for kind in ("prefill", "decode")
                    for name in ("sequences", "new_tokens", "context_tokens", "pairs", "sampled"))
PREFILL, DECODE = 0, 5
"""Where each kind's five columns start in ``PassSums.table``."""
SEQUENCES, NEW_TOKENS, CONTEXT_TOKENS, PAIRS, SAMPLED = range(5)
"""A column's place among its kind's five."""


_FEW_SEQUENCES = 16
"""A batch of at most this many sequences is summed in Python (a prefill pass, mostly): whole numbers, so the
same totals as the arrays' weighted counts, without their fixed cost."""


def pass_sums(batch: PassBatch, num_passes: int = 1) -> PassSums:
    """The per-rank totals of a batch (``batch.num_ranks`` rows; ``num_passes`` passes stacked)."""
    if batch.rank.size <= _FEW_SEQUENCES:
        sums = [[0] * 10 for _ in range(batch.num_ranks)]
        for r, q, c, decode, sampled in zip(batch.rank.tolist(), batch.num_new_tokens.tolist(),
                                            batch.num_context_tokens.tolist(), batch.is_decode.tolist(),
                                            batch.samples.tolist()):
            row, o = sums[r], DECODE if decode else PREFILL
            row[o] += 1
            row[o + 1] += q
            row[o + 2] += c
            row[o + 3] += q * c + q * (q + 1) // 2
            row[o + 4] += sampled
        return PassSums(np.array(sums, dtype=np.float64), np.asarray(batch.kv_capacity_tokens, dtype=np.float64),
                        num_passes)
    q = batch.num_new_tokens.astype(np.float64)
    c = batch.num_context_tokens.astype(np.float64)
    # One row per (rank, kind), each column a weighted count of its group's sequences (float64 sums of whole
    # numbers: exact, see above).
    group, m = 2 * batch.rank + batch.is_decode, 2 * batch.num_ranks
    table = np.empty((m, 5))
    table[:, SEQUENCES] = np.bincount(group, minlength=m)
    table[:, NEW_TOKENS] = np.bincount(group, q, m)
    table[:, CONTEXT_TOKENS] = np.bincount(group, c, m)
    table[:, PAIRS] = np.bincount(group, q * c + q * (q + 1) / 2, m)
    table[:, SAMPLED] = np.bincount(group, batch.samples, m)
    return PassSums(table.reshape(batch.num_ranks, 10), np.asarray(batch.kv_capacity_tokens, dtype=np.float64),
                    num_passes)


class PassTiming(Protocol):
    def price(self, batch: PassBatch) -> PassCost: ...


def price_passes(timing: PassTiming, batch: PassBatch | PassSums,
                 num_passes: int) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """Price ``num_passes`` passes of one worker at once (a coalesced decode run).

    ``batch`` holds every pass's rows with ``rank`` = pass × ranks + rank, sorted by it, and
    ``kv_capacity_tokens`` repeated per pass — or their ``PassSums``. Returns seconds of shape
    (passes, ranks) and each pass's provenance labels, exactly as ``price`` would give pass by pass.
    Models that price from ``PassSums`` (``price_sums``) are priced in one call; others are called
    once per pass.
    """
    own = getattr(timing, "price_sums", None)
    if own is not None:
        return own(batch if isinstance(batch, PassSums) else pass_sums(batch, num_passes))
    if isinstance(batch, PassSums):
        raise TypeError(f"{type(timing).__name__} prices batches, not PassSums")
    ranks = batch.num_ranks // num_passes
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


class SumsTiming:
    """A timing model that prices every rank from its ``PassSums`` (``_seconds``); ``price`` and
    ``price_sums`` share it, so one pass and a run of passes get the same bits."""

    provenance: tuple[str, ...] = ()

    def _seconds(self, sums: PassSums) -> tuple[np.ndarray, list[tuple[str, ...]] | None]:
        """Seconds per row, and per pass its labels (None: ``provenance`` for every pass)."""
        raise NotImplementedError

    def price(self, batch: PassBatch) -> PassCost:
        seconds, labels = self._seconds(pass_sums(batch))
        return PassCost(seconds, self.provenance if labels is None else labels[0])

    def price_sums(self, sums: PassSums) -> tuple[np.ndarray, list[tuple[str, ...]]]:
        seconds, labels = self._seconds(sums)
        n = sums.num_passes
        return seconds.reshape(n, -1), [self.provenance] * n if labels is None else labels


class FixedTiming(SumsTiming):
    """A constant cost per pass kind: ``prefill_ms`` if the rank runs any prefill, plus ``decode_ms``
    if it runs any decode, so a mixed pass costs both (as vLLM-style mixed batches do in Dynamo's mocker).
    """

    provenance = ("fixed",)

    def __init__(self, prefill_ms: float, decode_ms: float) -> None:
        self.prefill_s = prefill_ms / 1000.0
        self.decode_s = decode_ms / 1000.0

    def _seconds(self, sums: PassSums) -> tuple[np.ndarray, None]:
        pre, dec = sums.kinds()
        return np.where(pre[:, SEQUENCES] > 0, self.prefill_s, 0.0) + np.where(dec[:, SEQUENCES] > 0, self.decode_s, 0.0), None


class PolynomialTiming(SumsTiming):
    """Dynamo mocker's legacy polynomial curves (AISimulate ``engine/common/perf_model.rs``).

    Not calibrated to any GPU: use it for scheduler shape and speed, not for latency answers.
    Per rank, a pass costs P(T) if it prefills and D(u) if it decodes, both if mixed:

    - P(T) = 4.209989e-07·T² + 1.518344e-02·T + 16.50142 ms, where with n prefilling sequences
      T = n·(⌊Σ(context + chunk)/n⌋ − ⌊Σ context/n⌋) (Dynamo batches by floored means, so T can
      differ from the plain token sum by less than n);
    - D(u) = max(1, −25.74·u² + 54.01·u + 5.74) ms, u = min(1, Σ decode sequence lengths / KV
      capacity in tokens), a decoding sequence's length being its prompt plus every token sampled so far.
    """

    provenance = ("polynomial",)
    PREFILL = (4.209989e-07, 1.518344e-02, 1.650142e01)
    DECODE = (-25.74, 54.01, 5.74)

    def _seconds(self, sums: PassSums) -> tuple[np.ndarray, None]:
        table = sums.table  # (the curves' float64 operations in their order, in place: the same bits, fewer arrays)
        if len(table) == 1:  # one rank's pass: the same float64 operations, as scalars
            return np.array([self._one_row(table[0].tolist(), float(sums.kv_capacity_tokens[0]))]), None
        u = table[:, DECODE + CONTEXT_TOKENS] + table[:, DECODE + NEW_TOKENS]
        u /= sums.kv_capacity_tokens
        np.minimum(u, 1.0, out=u)
        d, e, f = self.DECODE
        ms = u * d
        ms += e
        ms *= u
        ms += f
        np.maximum(ms, 1.0, out=ms)
        ms[table[:, DECODE + SEQUENCES] <= 0] = 0.0  # D(u) only where the rank decodes
        prefilling = table[:, PREFILL + SEQUENCES].nonzero()[0]
        a, b, c = self.PREFILL
        if prefilling.size > 2:  # the prefill curve, on the rows that prefill (most of a decode run's have none)
            pre = table[prefilling, PREFILL:PREFILL + 3]
            n, new, ctx = pre[:, SEQUENCES], pre[:, NEW_TOKENS], pre[:, CONTEXT_TOKENS]
            tokens = n * (np.floor((ctx + new) / n) - np.floor(ctx / n))
            ms[prefilling] += (a * tokens + b) * tokens + c
        else:  # one or two rows (a run's admitting row): the same float64 operations, as scalars
            for i in prefilling.tolist():
                ms[i] += self._prefill_ms(*table[i, PREFILL:PREFILL + 3].tolist())
        ms /= 1000.0
        return ms, None

    def _one_row(self, row: list[float], capacity: float) -> float:
        """``_seconds`` of one row (its ten sums) as Python floats: each operation the arrays make, in order."""
        ms = 0.0
        if row[DECODE + SEQUENCES] > 0:
            u = min((row[DECODE + CONTEXT_TOKENS] + row[DECODE + NEW_TOKENS]) / capacity, 1.0)  # (NaN stays NaN)
            d, e, f = self.DECODE
            ms = max((u * d + e) * u + f, 1.0)
        if row[PREFILL + SEQUENCES]:
            ms += self._prefill_ms(row[PREFILL + SEQUENCES], row[PREFILL + NEW_TOKENS], row[PREFILL + CONTEXT_TOKENS])
        return ms / 1000.0

    def _prefill_ms(self, n: float, new: float, ctx: float) -> float:
        """P(T) of one rank's n prefilling sequences, as scalars (the floored means of the class doc)."""
        a, b, c = self.PREFILL
        tokens = n * float(math.floor((ctx + new) / n) - math.floor(ctx / n))
        return (a * tokens + b) * tokens + c
