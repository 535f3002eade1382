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
    for q in (50, 75, 90, 95, 99, 99.9):
        assert got[f"p{q:g}"] == pytest.approx(np.percentile(expanded, q))


def test_hand_example():
    """[1, 2, 3, 4]: p50 = 2.5, p75 = 3.25 (linear), p90 = 3.7, p99 = 3.97, population std √1.25."""
    s = stats(np.array([4.0, 1.0, 3.0, 2.0, np.nan]))
    assert (s["mean"], s["p50"], s["p75"]) == (2.5, 2.5, 3.25)
    assert s["p90"] == pytest.approx(3.7) and s["p99"] == pytest.approx(3.97)
    assert s["std"] == pytest.approx(1.25 ** 0.5)
    assert stats(np.array([]))["mean"] is None


def test_p95_and_p99_9_interpolate_as_the_others():
    """1..100 ms: p95 at position 0.95 × 99 = 94.05, between the 95th and 96th values: 95 + 0.05 = 95.05;
    p99.9 at 0.999 × 99 = 98.901, between 99 and 100: 99.901. p90 (89.1 → 90.1) and p99 (98.01 → 99.01) as before."""
    s = stats(np.arange(1.0, 101.0))
    assert s["p95"] == pytest.approx(95.05) and s["p99.9"] == pytest.approx(99.901)
    assert s["p90"] == pytest.approx(90.1) and s["p99"] == pytest.approx(99.01)
    assert list(s) == ["mean", "min", "max", "p50", "p75", "p90", "p95", "p99", "p99.9", "std"]
