"""What the engine records while it runs, and the recorder it records through.

The rows (``Event``, ``PassRecord``) and the event kinds are the engine's own vocabulary: ranks and
workers write them, ``simmodel.metrics`` keeps and summarizes them. The engine records through the
``Recorder`` protocol below and never imports the metrics package; ``simmodel.metrics.records.Recorder``
is the recorder a simulation passes in (it re-exports these rows for the readers of the results).
"""

from __future__ import annotations

from array import array
from enum import IntEnum
from typing import Any, NamedTuple, Protocol, runtime_checkable


class EventKind(IntEnum):
    """Request lifecycle milestones and pass boundaries, in the event log's ``kind`` column."""

    ARRIVAL = 0
    PLACEMENT = 1
    REJECTION = 2
    ADMISSION = 3
    PREEMPTION = 4
    RESUME = 5
    FIRST_TOKEN = 6
    FINISH = 7
    PASS_BEGIN = 8
    PASS_END = 9
    PREFILL_DONE = 10
    TRANSFER_START = 11
    TRANSFER_END = 12
    SOURCE_RELEASED = 13
    HOST_LOAD_START = 14
    HOST_LOAD_END = 15
    HOST_STORE = 16
    STORAGE_STORE = 17
    STORAGE_LOAD_START = 18
    STORAGE_LOAD_END = 19



class Event(NamedTuple):
    """One row of the event log. ``request_id`` is -1 on pass rows; ``num_tokens`` is the tokens the
    event concerns (prompt at arrival, scheduled chunk at admission/resume, output at finish,
    scheduled tokens of the rank's pass). ``pass_index`` is the rank's pass a ``pass_begin`` or
    ``pass_end`` row belongs to (``PassRecord.pass_index``: a begin and its end share it), -1 on other rows."""

    time_ns: int
    kind: EventKind
    worker: int
    dp_rank: int
    request_id: int
    num_tokens: int
    role: str
    pass_index: int = -1



class PassRecord(NamedTuple):
    """One rank's share of one worker pass."""

    role: str
    worker: int
    dp_rank: int
    pass_index: int
    start_ns: int
    end_ns: int
    num_scheduled_tokens: int
    num_prefill_tokens: int
    num_prefill_seqs: int
    num_decode_seqs: int
    num_sampled: int
    kv_blocks_used: int
    num_preempted: int
    rank_busy_ns: int
    rank_work_ns: int
    """The rank's pass at datasheet peaks: its FLOPs' time plus its bytes' time (``perf.energy``), which sets
    its dynamic power."""
    provenance: str
    """Where the pass time came from, labels joined by "+" (e.g. ``extrapolated:roofline+assumed-host``)."""


class PassEnd(NamedTuple):
    """One rank's pass as its end is recorded (``Rank.record_pass_end``), by the pass-by-pass loop or by a run
    applied as its passes end: its pass row, the inter-token intervals its tokens close
    (``(gap ns, tokens, stage)``), the requests whose first token it delivers, and those it finishes with their
    output tokens, in pass order."""

    row: PassRecord
    delivered_ns: int
    """When its tokens reach the clients (its first-token and finish events): the pass end, or the async
    loop's decision that processes its outputs."""
    intervals: list[tuple[int, int, int]]
    first_tokens: list[Any]
    finished: list[tuple[Any, int]]


PASS_INT_FIELDS = tuple(f for f in PassRecord._fields if f not in ("role", "provenance"))
"""A pass row's integer fields in order: the columns a run of passes is recorded as (``PassRows.extend``)."""


class PassRows(Protocol):
    """The pass log a recorder keeps: one ``PassRecord`` at a time, or a coalesced run's rows at once."""

    def append(self, record: PassRecord) -> None: ...

    def extend(self, role: str, provenance: list[str], fields: tuple, max_end: int,
               head: dict[int, list[int]] | None = None) -> None:
        """Many rows: per field of ``PASS_INT_FIELDS`` an int64 array (one value per row) or one int for all;
        ``head`` the first rows' values where they differ; ``max_end`` the latest ``end_ns``."""


@runtime_checkable
class Recorder(Protocol):
    """What ranks and workers call to record events, passes and inter-token intervals.

    The attributes are what the pass planner's runs (``engine.planner``) write directly
    today: the interval arrays, the count of finished requests, and whether events are kept at all.
    """

    @property
    def passes(self) -> PassRows: ...

    staged: bool
    """A staged load: every interval entry also records the stage of the requests it counts."""
    keep_events: bool
    sink: Any
    """Where events go instead of ``keep_events``'s in-memory list, or None."""
    itl_values: array
    itl_counts: array
    itl_stages: array
    num_done: int

    def event(self, time_ns: int, kind: EventKind, worker: int, dp_rank: int, request_id: int,
              num_tokens: int, role: str = "aggregated", pass_index: int = -1) -> None: ...

    def add_events(self, rows: list[Event]) -> None: ...

    def intervals(self, value_ns: int, count: int, stage: int = 0) -> None: ...
