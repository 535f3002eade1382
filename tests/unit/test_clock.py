"""``clock_ns``: pass times in seconds become whole nanoseconds of the simulated clock, or None when one of
them is not a duration the clock can hold (``fits_clock``). Expected values are worked by hand, and hold whether
the durations are converted one by one (a few of them) or as arrays."""

from __future__ import annotations

import numpy as np
import pytest

import simmodel.engine.clock as clock_module
from simmodel.engine.clock import MAX_NS, clock_ns, fits_clock


@pytest.fixture(autouse=True, params=[8, -1], ids=["one by one", "as arrays"])
def conversion(request, monkeypatch):
    monkeypatch.setattr(clock_module, "_FEW", request.param)


def test_durations_round_to_the_nearest_nanosecond_keeping_their_shape():
    # 1.4 ns → 1, 1.6 ns → 2, 1.5 ms → 1,500,000 ns, 4.6e9 s (below 2**62 ns ≈ 4.61e18 ns) → 4.6e18 ns.
    seconds = np.array([[0.0, 1.4e-9], [1.6e-9, 0.0015], [4.6e9, 2.0]])
    ns = clock_ns(seconds)
    assert ns.dtype == np.int64 and ns.shape == (3, 2)
    assert ns.tolist() == [[0, 1], [2, 1_500_000], [4_600_000_000_000_000_000, 2_000_000_000]]


def test_a_duration_halfway_between_two_nanoseconds_rounds_to_the_even_one():
    # 0.5, 1.5, 2.5 and 12.5 ns (each exactly a half in float64 once multiplied by 1e9) → 0, 2, 2, 12.
    assert clock_ns(np.array([0.5e-9, 1.5e-9, 2.5e-9, 12.5e-9])).tolist() == [0, 2, 2, 12]


def test_single_precision_durations_are_multiplied_in_single_precision():
    # float32 0.1 is 0.100000001490116…; 0.1 × 1e9 rounded to float32 is exactly 1e8 (the float64 product would be
    # 100,000,001.49…, rounding to 100,000,001).
    assert clock_ns(np.array([0.1], np.float32)).tolist() == [100_000_000]


def test_one_duration_the_clock_cannot_hold_refuses_them_all():
    # Negative, NaN, infinite, and 2**62 ns itself (the first instant past MAX_NS's range) do not fit.
    for bad in (-1e-9, np.nan, np.inf, MAX_NS / 1e9):
        seconds = np.array([0.001, bad])
        assert clock_ns(seconds) is None
        assert fits_clock(seconds).tolist() == [True, False]


def test_whole_seconds_given_as_integers_convert_too():
    # A timing model may price in whole seconds: 2 s → 2e9 ns.
    assert clock_ns(np.array([2, 0])).tolist() == [2_000_000_000, 0]
