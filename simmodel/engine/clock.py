"""Simulated time is an integer count of nanoseconds.

Integer time makes equal instants compare equal (an arrival "exactly at a pass end" is decided by
``==``, not by float rounding of summed pass times) and keeps runs byte-reproducible. Dynamo's mocker
also rounds every pass to whole nanoseconds. Outputs are converted to seconds and milliseconds.
"""

NS_PER_S = 1_000_000_000

MAX_NS = 2**62
"""Instants and durations stay below this many nanoseconds (sums of a few stay within int64)."""


def fits_clock(seconds):
    """Whether each duration in seconds (an array) is one the clock can hold: not negative, finite and below
    ``MAX_NS`` (NaN fails both comparisons, infinities one)."""
    return (seconds * NS_PER_S < MAX_NS) & (seconds >= 0)


def to_ns(seconds: float) -> int:
    """Round a duration or instant in seconds to the nearest nanosecond."""
    return int(round(seconds * NS_PER_S))
