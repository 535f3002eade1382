"""The recorder a simulation runs with: the event rows (or their sink), the pass log as columns, and the
inter-token intervals. It is the engine's ``Recorder`` (``simmodel.engine.recorder``, whose rows it
re-exports for the readers of the results); no pandas here (it is imported while the simulation runs)."""

from __future__ import annotations

from array import array

import numpy as np

from simmodel.engine.recorder import PASS_INT_FIELDS, Event, EventKind, PassRecord


class PassLog:
    """The pass rows as columns: 64-bit integers per numeric field of ``PassRecord`` and a list of (shared)
    strings for ``role`` and ``provenance``. A long run has millions of passes; as tuples they would take
    several hundred bytes each, as columns about 120.

    Rows come one by one (``append``, a pass planned on its own) into growing arrays, or many at a time
    (``extend``, a coalesced run) as the run's own per-field arrays, kept as they are; ``column`` joins
    them in order the first time a column is read after new rows (most runs never read them: their
    summary needs only the latest pass end, kept as rows come).
    """

    INT_FIELDS = PASS_INT_FIELDS

    def __init__(self) -> None:
        self.role: list[str] = []
        self.provenance: list[str] = []
        self._blocks: list[np.ndarray | tuple[int, tuple, dict | None]] = []
        """Rows in order: joined blocks, shape (fields, rows), and blocks not joined yet, (rows, per-field values,
        first rows' values): coalesced runs, and rows appended one by one."""
        self._open = array("q")
        """The integer fields of the rows appended one by one since the last block, row after row (a block of
        columns at the next ``extend`` or read)."""
        self._max_end: int | None = None
        self._num_runs = 0
        """Blocks not joined yet (the last ones of ``_blocks``, from ``_first_run`` on)."""
        self._first_run = 0

    def _close_open_block(self) -> None:
        """Keep the rows appended one by one as a block of their own (their columns as arrays, like a run's:
        the async loop closes one after every pass it plans alone)."""
        if self._open:
            if not self._num_runs:
                self._first_run = len(self._blocks)
            rows = np.frombuffer(self._open, dtype=np.int64).reshape(-1, len(self.INT_FIELDS))
            self._blocks.append((len(rows), tuple(rows.T), None))  # (views of the rows: no copy)
            self._num_runs += 1
            self._open = array("q")

    def append(self, record: PassRecord) -> None:
        self.role.append(record.role)
        self.provenance.append(record.provenance)
        self._open.extend(record[1:-1])
        if self._max_end is None or record.end_ns > self._max_end:
            self._max_end = record.end_ns

    def extend(self, role: str, provenance: list[str], fields: tuple, max_end: int,
               head: dict[int, list[int]] | None = None) -> None:
        """Many rows at once: ``fields`` gives, per field of ``INT_FIELDS``, an int64 array with one value per
        row or one int for every row (kept as they are: do not change them afterwards), and ``head``, by
        field index, the values of the first rows where they differ (a run's planned first pass);
        ``max_end`` is the latest of their ``end_ns``."""
        self._close_open_block()
        self.role.extend([role] * len(provenance))
        self.provenance.extend(provenance)
        if not self._num_runs:
            self._first_run = len(self._blocks)
        self._blocks.append((len(provenance), fields, head))
        if self._max_end is None or max_end > self._max_end:
            self._max_end = max_end
        self._num_runs += 1
        if self._num_runs >= self.MAX_RUN_BLOCKS:
            self._join(self._first_run)

    MAX_RUN_BLOCKS = 4096
    """Blocks kept as their own arrays before they are joined into one (a run's arrays take about 2 KB,
    its joined rows about 100 bytes a pass)."""

    def column(self, name: str) -> np.ndarray:
        """All rows' values of one integer field, in row order."""
        self._close_open_block()
        if len(self._blocks) > 1 or self._num_runs:  # join once, keep the joined block
            self._join(0)
        if not self._blocks:
            return np.zeros(0, dtype=np.int64)
        return self._blocks[0][self.INT_FIELDS.index(name)]

    def _join(self, first: int) -> None:
        """Join the blocks from number ``first`` on into one (those before it stay as they are)."""
        self._close_open_block()
        blocks = self._blocks[first:]
        joined = np.array([np.concatenate([_field(b, f) for b in blocks]) for f in range(len(self.INT_FIELDS))])
        self._blocks[first:] = [joined]
        self._num_runs = 0

    def __len__(self) -> int:
        return len(self.role)

    def __iter__(self):
        columns = [self.column(f).tolist() for f in self.INT_FIELDS]
        for i, role in enumerate(self.role):
            yield PassRecord(role, *(c[i] for c in columns), self.provenance[i])

    def max_end_ns(self, default: int = 0) -> int:
        return default if self._max_end is None else self._max_end

    def chunks(self, names: tuple[str, ...]):
        """The rows' values of some integer fields, block by block in row order: (first row, arrays), without
        joining the log (a summary reads a few fields of what may be millions of rows)."""
        self._close_open_block()
        fields = [self.INT_FIELDS.index(name) for name in names]
        first = 0
        for block in self._blocks:
            arrays = [_field(block, f) for f in fields]
            yield first, arrays
            first += len(arrays[0])


def _field(block: np.ndarray | tuple[int, tuple, dict | None], f: int) -> np.ndarray:
    """Field ``f`` of a block's rows."""
    if isinstance(block, np.ndarray):
        return block[f]
    rows, fields, head = block
    value = fields[f]
    first = head.get(f) if head else None
    if isinstance(value, int):
        value = np.full(rows, value, dtype=np.int64)
    elif first is not None:
        value = value.copy()
    if first is not None:
        value[:len(first)] = first
    return value


class Recorder:
    """Collects event rows, pass rows and inter-token intervals.

    Inter-token latency is kept compactly: for each rank pass, the interval every request that also
    sampled in the previous pass of that rank saw (one value, a count), plus the few other intervals
    (after a preemption or a skipped pass) one by one.
    """

    def __init__(self, keep_events: bool = True, sink=None) -> None:
        self.keep_events = keep_events and sink is None
        self.sink = sink
        """A ``ParquetEventSink`` that takes every event instead of the in-memory list, or None."""
        self.events: list[Event] = []
        self.passes = PassLog()
        self.itl_values = array("q")
        self.itl_counts = array("q")
        """Inter-token intervals (ns) and how many tokens saw each: 8 bytes an entry, not a Python int's 36."""
        self.staged = False
        """A staged load: every interval entry also records the stage of the requests it counts."""
        self.itl_stages = array("q")
        self.num_done = 0
        """Requests that finished or were rejected so far (for progress reports)."""

    def event(self, time_ns: int, kind: EventKind, worker: int, dp_rank: int, request_id: int,
              num_tokens: int, role: str = "aggregated", pass_index: int = -1) -> None:
        if kind is EventKind.FINISH or kind is EventKind.REJECTION:
            self.num_done += 1
        if self.keep_events:
            self.events.append(Event(time_ns, kind, worker, dp_rank, request_id, num_tokens, role, pass_index))
        elif self.sink is not None:
            self.sink.add(Event(time_ns, kind, worker, dp_rank, request_id, num_tokens, role, pass_index))

    def add_events(self, rows: list[Event]) -> None:
        """Record many events at once, in order (as ``event`` one by one)."""
        self.num_done += sum(1 for e in rows if e.kind is EventKind.FINISH or e.kind is EventKind.REJECTION)
        if self.keep_events:
            self.events.extend(rows)
        elif self.sink is not None:
            for row in rows:
                self.sink.add(row)

    def intervals(self, value_ns: int, count: int, stage: int = 0) -> None:
        if count:
            self.itl_values.append(value_ns)
            self.itl_counts.append(count)
            if self.staged:
                self.itl_stages.append(stage)
