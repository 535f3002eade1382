"""Simulated time is an integer count of nanoseconds.

Integer time makes equal instants compare equal (an arrival "exactly at a pass end" is decided by
``==``, not by float rounding of summed pass times) and keeps runs byte-reproducible. Dynamo's mocker
also rounds every pass to whole nanoseconds. Outputs are converted to seconds and milliseconds.
"""

import numpy as np

NS_PER_S = 1_000_000_000

MAX_NS = 2**62
"""Instants and durations stay below this many nanoseconds (sums of a few stay within int64)."""


def fits_clock(seconds):
    """Whether each duration in seconds (an array) is one the clock can hold: not negative, finite and below
    ``MAX_NS`` (NaN fails both comparisons, infinities one)."""
    return _fits(seconds, seconds * NS_PER_S)


def _fits(seconds, ns):
    return (ns < MAX_NS) & (seconds >= 0)


_FEW = 8
"""Float64 durations ``clock_ns`` converts one by one as Python floats (the same float64 operations, without the
arrays' fixed cost: a pass of a few ranks)."""


def clock_ns(seconds):
    """Durations in seconds (an array) as integer nanoseconds, or None if one does not fit the clock
    (``fits_clock``). A few float64 durations are converted one by one, any others as arrays (an array of
    another type is multiplied in its own type, as it always was): the same nanoseconds either way."""
    if seconds.size <= _FEW and seconds.dtype == np.float64:
        values = seconds.ravel().tolist()
        if not all(0 <= s and s * NS_PER_S < MAX_NS for s in values):  # (NaN fails both comparisons)
            return None
        return np.array([round(s * NS_PER_S) for s in values], np.int64).reshape(seconds.shape)  # (ties to even)
    ns = np.asarray(seconds * NS_PER_S, dtype=np.float64)  # (its own array: rounded in place)
    # ``fits_clock`` of every duration, from the extremes (a NaN makes both extremes NaN, failing both):
    if ns.size and not (ns.max() < MAX_NS and seconds.min() >= 0):
        return None
    return np.rint(ns, out=ns).astype(np.int64)


def to_ns(seconds: float) -> int:
    """Round a duration or instant in seconds to the nearest nanosecond."""
    return int(round(seconds * NS_PER_S))
