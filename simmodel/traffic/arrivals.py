"""Open-loop arrival times. Pure: the RNG is passed in."""

from __future__ import annotations

import numpy as np

from simmodel.config.schema import LoadSpec


def gaps(load: LoadSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` inter-arrival gaps in seconds: exponential for ``poisson`` (unclipped), constant for
    ``constant_rate``. The first request arrives at 0; request i at the sum of the first i gaps."""
    if load.type == "poisson":
        return rng.exponential(1.0 / load.requests_per_second, size=n)
    return np.full(n, 1.0 / load.requests_per_second)
