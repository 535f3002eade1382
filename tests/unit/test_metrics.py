"""Statistics helpers: the weighted form must equal numpy on the expanded sample."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmodel.metrics.summarize import stats, weighted_stats


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 30))
def test_weighted_equals_expanded(seed, n):
    rng = np.random.default_rng(seed)
    values = rng.choice([1.0, 2.5, 10.0, rng.random() * 100], size=n)
    counts = rng.integers(0, 5, size=n)
    if counts.sum() == 0:
        counts[0] = 1
    expanded = np.repeat(values, counts)
    got = weighted_stats(values, counts)
    assert got["mean"] == pytest.approx(expanded.mean())
    assert got["std"] == pytest.approx(expanded.std(), abs=1e-9)
    assert (got["min"], got["max"]) == (expanded.min(), expanded.max())
    for q in (50, 75, 90, 99):
        assert got[f"p{q}"] == pytest.approx(np.percentile(expanded, q))


def test_hand_example():
    """[1, 2, 3, 4]: p50 = 2.5, p75 = 3.25 (linear), p90 = 3.7, p99 = 3.97, population std √1.25."""
    s = stats(np.array([4.0, 1.0, 3.0, 2.0, np.nan]))
    assert (s["mean"], s["p50"], s["p75"]) == (2.5, 2.5, 3.25)
    assert s["p90"] == pytest.approx(3.7) and s["p99"] == pytest.approx(3.97)
    assert s["std"] == pytest.approx(1.25 ** 0.5)
    assert stats(np.array([]))["mean"] is None
