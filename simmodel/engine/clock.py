"""Simulated time is an integer count of nanoseconds.

Integer time makes equal instants compare equal (an arrival "exactly at a pass end" is decided by
``==``, not by float rounding of summed pass times) and keeps runs byte-reproducible. Dynamo's mocker
also rounds every pass to whole nanoseconds. Outputs are converted to seconds and milliseconds.
"""

from collections.abc import Iterator
from contextlib import contextmanager

NS_PER_S = 1_000_000_000


def to_ns(seconds: float) -> int:
    """Round a duration or instant in seconds to the nearest nanosecond."""
    return int(round(seconds * NS_PER_S))


@contextmanager
def as_of(env, instant: int) -> Iterator[None]:
    """Read and record as at ``instant`` (SimPy's clock set there, then restored): for bookkeeping a carried
    decode run does ahead of the clock (creating arrivals, planning the pass after it). Only for work that
    schedules no SimPy event, which would be timed from the wrong instant."""
    now = env._now
    env._now = instant
    try:
        yield
    finally:
        env._now = now
