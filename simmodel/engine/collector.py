"""Python's cyclic garbage collector, paused while a simulation runs.

A run keeps what it records: every row of the event log is a small tuple that lives to the end, hundreds of
thousands of them. CPython's collector counts allocations and, each time the long-lived objects have grown by a
quarter, scans all of them again for reference cycles; on a 10,000-request run those full scans took about an
eighth of the run (six of them, ~0.3 s, measured with ``gc.callbacks``), and found nothing. A run makes no
reference cycles: what it frees, it frees by reference counting (``tests/unit/test_collector.py`` runs every
ready scenario but the searches with the collector off and finds no cyclic garbage afterwards). So a run pauses
the collector; a cycle made meanwhile (a user's callback may make one) is collected at the collector's next pass
after the run. The simulation itself is a cycle (its processes point back to its environment): dropped, it is
freed by the collector, as any other.

The collector is the process's, not the run's: while any run is in progress, every thread runs without it (``simmodel
serve`` runs simulations in worker threads). Pauses nest, across threads too: the collector comes back on when
the last of them ends, if it was on when the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Pauses:
    """The pauses in progress in this process, and whether the collector was on before the first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.was_on = False


_PAUSES = _Pauses()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block; it comes back on when the last pause in progress
    ends, if it was on when the first began."""
    pauses = _PAUSES
    with pauses.lock:
        if not pauses.count:
            pauses.was_on = gc.isenabled()
            gc.disable()
        pauses.count += 1
    try:
        yield
    finally:
        with pauses.lock:
            pauses.count -= 1
            if not pauses.count and pauses.was_on:
                gc.enable()
