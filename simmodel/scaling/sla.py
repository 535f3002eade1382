"""The SLA planner's arithmetic: how many workers a pool needs for the load it saw, at latency targets.

NVIDIA Dynamo's SLA planner (``components/planner/src/dynamo/planner/utils/planner_core.py``) predicts the next
interval's request rate, prompt length (ISL) and output length (OSL), and divides the load by what one engine
serves at the targets: a prefill engine's token throughput at that ISL, a decode engine's at the largest batch
whose step time stays within the ITL target, at a context of ISL + OSL / 2. Dynamo reads those throughputs from
a profile made before deployment (its newer planner refits a regression on the engines' own passes). Here a
pool's capacity is fitted on its own passes of the last interval, one linear model per pass and rank:

    pass seconds = fixed + per_decode × decoding sequences + per_token × prefill tokens

(least squares, each coefficient at least 0). The prediction is Dynamo's ``constant`` predictor: the next
interval is the last one (the rate of the requests that arrived in it, their mean ISL, and the mean output of
the requests that finished in it).

- Decode: the largest batch B per rank with fixed + per_decode × B within ``itl_ms``, at most the rank's
  ``max_sequences`` and what its KV holds at a context of ISL + OSL / 2; a worker of R ranks then serves
  R × B / (OSL × (fixed + per_decode × B)) requests a second.
- Prefill: a request takes ISL × per_token seconds of a rank's passes; its first token comes no sooner than
  fixed + ISL × per_token, which must be within ``ttft_ms``.
- An aggregated worker does both: each request costs a rank ISL × per_token + OSL × step(B) / B seconds.

Replicas = ceil(rate × seconds per request / ranks), within the pool's bounds; a target no batch can meet asks
for the pool's most. When the requests of the interval saw a mean TTFT above the target (a backlog: the rate
of the interval alone does not show what waits), a prefill or aggregated pool asks for at least one worker
more than serve (Dynamo's newer planner likewise scales out on a missed TTFT prediction).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


class PassFit(NamedTuple):
    """Seconds a pass takes: ``fixed`` + ``per_decode`` × decoding sequences + ``per_token`` × prefill tokens."""

    fixed: float
    per_decode: float
    per_token: float


def fit_passes(decodes: np.ndarray, prefill_tokens: np.ndarray, seconds: np.ndarray) -> PassFit | None:
    """The least-squares fit of the pass rows given (one per pass and rank), coefficients clipped at 0. A column
    that never varies cannot be told from the fixed part: its coefficient is 0 (its time is in ``fixed``), unless
    no column varies, when the whole mean time goes to the work the passes did (per prefill token if they
    prefilled, else per decoding sequence: the throughput seen, which assumes the time grows with the work).
    None with too few rows, or passes that did nothing."""
    if not len(seconds):
        return None
    varies = [bool(np.ptp(decodes) > 0), bool(np.ptp(prefill_tokens) > 0)]
    if not any(varies):
        if prefill_tokens[0] > 0:
            return PassFit(0.0, 0.0, float(np.mean(seconds)) / float(prefill_tokens[0]))
        if decodes[0] > 0:
            return PassFit(0.0, float(np.mean(seconds)) / float(decodes[0]), 0.0)
        return None
    columns = [np.ones(len(seconds))] + [c.astype(np.float64) for c, v in zip((decodes, prefill_tokens), varies) if v]
    if len(seconds) <= len(columns):
        return None
    coefficients = iter(np.maximum(np.linalg.lstsq(np.stack(columns, axis=1), seconds.astype(np.float64),
                                                   rcond=None)[0], 0.0).tolist())
    fixed = next(coefficients)
    return PassFit(fixed, *(next(coefficients) if v else 0.0 for v in varies))


def seconds_per_request(kind: str, fit: PassFit, isl: float, osl: float, ttft_s: float, itl_s: float,
                        max_batch: int) -> float | None:
    """Seconds of one rank's passes one request takes in a pool of ``kind`` (aggregated, prefill or decode) at
    the targets; None if no batch meets them (``max_batch``: the most sequences a rank may decode at once)."""
    total = 0.0
    if kind != "decode":
        if fit.fixed + isl * fit.per_token > ttft_s:
            return None
        total += isl * fit.per_token
    if kind != "prefill":
        room = itl_s - fit.fixed
        if room <= 0:
            return None
        batch = max_batch if fit.per_decode <= 0 else min(max_batch, math.floor(room / fit.per_decode))
        if batch < 1:
            return None
        total += osl * (fit.fixed + fit.per_decode * batch) / batch
    return total


def replicas_needed(rate: float, seconds: float | None, ranks: int, bounds: tuple[int, int],
                    ttft_missed: int = 0) -> int:
    """Workers of ``ranks`` ranks for ``rate`` requests a second of ``seconds`` rank-seconds each, within
    ``bounds`` (min, max); the most when no batch meets the targets. ``ttft_missed``: the workers serving when
    the interval's mean TTFT missed its target: then at least one more than those (a backlog the rate alone
    does not show)."""
    low, high = bounds
    if seconds is None:
        return high
    need = math.ceil(rate * seconds / ranks - 1e-9)
    if ttft_missed:
        need = max(need, ttft_missed + 1)
    return min(high, max(low, need))
