"""Simulated time is an integer count of nanoseconds.

Integer time makes equal instants compare equal (an arrival "exactly at a pass end" is decided by
``==``, not by float rounding of summed pass times) and keeps runs byte-reproducible. Dynamo's mocker
also rounds every pass to whole nanoseconds. Outputs are converted to seconds and milliseconds.
"""

NS_PER_S = 1_000_000_000


def to_ns(seconds: float) -> int:
    """Round a duration or instant in seconds to the nearest nanosecond."""
    return int(round(seconds * NS_PER_S))
