"""Open-loop arrival times. Pure: the RNG is passed in."""

from __future__ import annotations

import math

import numpy as np

from simmodel.config.schema import LoadSpec, LoadStage


def rate_gaps(kind: str, rate: float, burstiness: float, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` inter-arrival gaps in seconds at ``rate`` requests/s: exponential (``poisson``), gamma of shape
    ``burstiness`` and scale 1 / (rate × burstiness) (``gamma``: vLLM's ``--burstiness``; the mean gap
    stays 1 / rate, the squared coefficient of variation is 1 / burstiness), or constant."""
    if kind == "poisson":
        return rng.exponential(1.0 / rate, size=n)
    if kind == "gamma":
        return rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    return np.full(n, 1.0 / rate)


def gaps(load: LoadSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` inter-arrival gaps in seconds for a ``poisson``, ``gamma`` or ``constant_rate`` load (unclipped).
    The first request arrives at 0; request i at the sum of the first i gaps."""
    return rate_gaps(load.type, load.requests_per_second, load.burstiness, rng, n)


def stage_arrivals(stage: LoadStage, kind: str, burstiness: float, rng: np.random.Generator,
                   chunk: int = 1024) -> np.ndarray:
    """Arrival times (seconds from the run's start) of a rate stage: the first at the stage's start, then
    ``kind``-spaced gaps while the time stays before the stage's end. A ``constant`` stage of r req/s for
    d s sends ⌈r·d⌉ requests, at start + i / r."""
    start, end, rate = stage.start_s, stage.start_s + stage.duration_s, stage.requests_per_second
    assert rate is not None
    if kind == "constant":
        count = max(1, math.ceil(rate * stage.duration_s - 1e-9))
        return start + np.arange(count) / rate
    times = [np.array([start])]
    last = start
    while True:
        steps = last + np.cumsum(rate_gaps(kind, rate, burstiness, rng, chunk))
        inside = steps[steps < end]
        times.append(inside)
        if len(inside) < chunk:
            return np.concatenate(times)
        last = steps[-1]
