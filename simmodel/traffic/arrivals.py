"""Open-loop arrival times. Pure: the RNG is passed in."""

from __future__ import annotations

import math
from collections.abc import Iterator

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


def stage_arrivals(stage: LoadStage, start_s: float, kind: str, burstiness: float,
                   rng: np.random.Generator, chunk: int = 1024) -> Iterator[float]:
    """Arrival times (seconds) of a rate stage starting at ``start_s``, in order, while before the stage's
    end (if it has a duration) and at most ``stage.requests``:

    - ``constant``: start + i / r (a stage of r req/s for d s sends ⌈r·d⌉);
    - ``poisson`` / ``gamma``: the first at the start, then exponential or gamma gaps;
    - ``fixed_count``: ⌊r·d⌋ requests whose exponential gaps (the first before request 0 included) are
      scaled to sum to d, so the last arrives at the stage's end (inference-perf's constant load: a Poisson
      process conditioned on its count).
    """
    rate, cap = stage.requests_per_second, stage.requests
    end = None if stage.duration_s is None else start_s + stage.duration_s
    assert rate is not None
    if kind == "fixed_count":
        assert stage.duration_s is not None
        count = int(rate * stage.duration_s + 1e-9)
        gaps = rng.exponential(1.0, size=count)
        times = start_s + np.cumsum(gaps) * (stage.duration_s / gaps.sum()) if count else np.zeros(0)
        yield from times[:cap].tolist()
        return
    sent = 0
    if kind == "constant":
        count = math.ceil(rate * stage.duration_s - 1e-9) if stage.duration_s is not None else None
        i = 0
        while (count is None or i < count) and (cap is None or i < cap):
            yield start_s + i / rate
            i += 1
        return
    last = start_s
    times = np.array([start_s])
    while True:
        for t in times.tolist():
            if (end is not None and t >= end) or (cap is not None and sent >= cap):
                return
            yield t
            sent += 1
        times = last + np.cumsum(rate_gaps(kind, rate, burstiness, rng, chunk))
        last = float(times[-1])


def rescaled_arrivals(load: LoadSpec, rng: np.random.Generator, count: int) -> np.ndarray:
    """``vllm bench serve``'s schedule: ``count`` gaps (the first one too) summed, then scaled so the last
    request arrives at count / rate."""
    times = np.cumsum(rate_gaps(load.type, load.requests_per_second, load.burstiness, rng, count))
    return times * ((count / load.requests_per_second) / times[-1]) if count and times[-1] > 0 else times
