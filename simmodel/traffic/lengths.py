"""Request lengths drawn from a ``LengthSpec``. Pure: the RNG is passed in."""

from __future__ import annotations

import math

import numpy as np

from simmodel.config.schema import LengthSpec
from simmodel.config.schema import smallest_length as smallest_length  # re-exported: it lives with LengthSpec


def sample_lengths(spec: LengthSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """Draw ``n`` token counts (int64, each at least ``spec.min`` and at most ``spec.max`` if set)."""
    kind = spec.distribution
    if kind == "fixed":
        return np.full(n, spec.value, dtype=np.int64)
    if kind == "uniform":
        return rng.integers(spec.min, spec.max + 1, size=n, dtype=np.int64)
    if kind == "choice":
        p = None if spec.weights is None else np.asarray(spec.weights) / sum(spec.weights)
        return rng.choice(np.asarray(spec.values, dtype=np.int64), size=n, p=p)
    if kind == "normal":
        raw = rng.normal(spec.mean, spec.std, size=n)
    else:  # lognormal with the given mean and std of the lengths themselves
        sigma2 = math.log1p((spec.std / spec.mean) ** 2)
        raw = rng.lognormal(math.log(spec.mean) - sigma2 / 2, math.sqrt(sigma2), size=n)
    high = spec.max if spec.max is not None else np.iinfo(np.int64).max // 4
    return np.clip(np.rint(raw), spec.min, high).astype(np.int64)
