"""Stream the event log to a Parquet file in row groups while the run goes on (``--events stream``).

A run of 200,000 requests makes millions of events; kept in memory they dominate the footprint. The sink
writes them in row groups of about ``ROW_GROUP`` events instead. The file holds the same rows in the same
order as the table ``events_frame`` builds from the whole log: that log is ordered by time (stably), and no
event is ever recorded with a time before the *watermark* the simulation gives (the current time, or the
end of a pass still being finished, whose pass-end event comes when it is processed), so every buffered
event strictly earlier than the watermark can be written in order; later ones wait for the next flush.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from simmodel.metrics.records import Event

ROW_GROUP = 65_536


class ParquetEventSink:
    """Receives events as they are recorded and writes the settled ones to ``path``."""

    def __init__(self, path: Path, watermark=None, where: str = "") -> None:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise RuntimeError("streaming events needs pyarrow (pip install pyarrow)") from None
        self.path = path
        self.watermark = watermark
        """Returns the earliest time a future event may carry (set by the simulation)."""
        self.where = where
        """What the file is written for (``--output-dir runs/x``), named by a write error."""
        self.num_written = 0
        self.by_worker = False
        """Order each instant's events by worker too (``summarize.event_order``), as the simulation says."""
        self._writer = None
        self._buffer: list[Event] = []

    def add(self, event: Event) -> None:
        buffer = self._buffer
        buffer.append(event)
        if len(buffer) >= ROW_GROUP:
            mark = self.watermark()
            buffer.sort(key=self._key())  # stable: recording order among ties, as the in-memory log
            settled = 0
            while settled < len(buffer) and buffer[settled].time_ns < mark:
                settled += 1
            if settled:
                self._write(buffer[:settled])
                del buffer[:settled]

    def _key(self):
        """The sort key of ``summarize.event_order``."""
        return _time_and_worker if self.by_worker else _time

    def close(self) -> None:
        """Write what is left (the run is over: everything is settled) and close the file."""
        self._buffer.sort(key=self._key())
        self._write(self._buffer, final=True)
        self._buffer = []
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except OSError as exc:
                raise _write_error(exc, self.where or str(self.path)) from None

    def _write(self, events: list[Event], final: bool = False) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from simmodel.metrics.summarize import events_frame

        if not events and not (final and self._writer is None):
            return
        table = pa.Table.from_pandas(events_frame(events, by_worker=self.by_worker), preserve_index=False)
        try:
            if self._writer is None:
                self._writer = pq.ParquetWriter(self.path, table.schema)
            self._writer.write_table(table)
        except OSError as exc:  # a full disk: Arrow's message wraps the errno in its own words
            raise _write_error(exc, self.where or str(self.path)) from None
        self.num_written += len(events)


def _write_error(exc: OSError, where: str) -> OSError:
    """The OS error under an Arrow write error, naming ``where``: one line, and exit 1 for a full disk."""
    code = exc.errno
    if code is None:
        found = re.search(r"\[errno (\d+)\]", str(exc))
        code = int(found.group(1)) if found else errno.EIO
    return OSError(code, f"cannot write the event log: {os.strerror(code)}", where)


def _time(event: Event) -> int:
    return event.time_ns


def _time_and_worker(event: Event) -> tuple[int, int, int]:
    """``summarize.event_order`` with ``by_worker``."""
    return event.time_ns, event.worker, event.request_id if event.worker == -1 else -1
