"""Python's cyclic garbage collector, paused while a simulation runs.

A run keeps what it records: every row of the event log is a small tuple that lives to the end, hundreds of
thousands of them. CPython's collector counts allocations and, each time the long-lived objects have grown by a
quarter, scans all of them again for reference cycles; on a 10,000-request run those full scans took about an
eighth of the run (six of them, ~0.3 s, measured with ``gc.callbacks``), and found nothing. The simulation makes
no reference cycles: what it frees, it frees by reference counting (``tests/unit/test_collector.py`` runs every
kind of deployment with the collector off and finds no cyclic garbage afterwards). So a run pauses the
collector and restores it as it was when it returns; a cycle made meanwhile (a user's callback may make one) is
collected at the collector's next pass after the run.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block (if it is on), and turn it back on after it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
