"""Stream the event log to a Parquet file in row groups while the run goes on (``--events stream``).

A run of 200,000 requests makes millions of events; kept in memory they dominate the footprint. The sink
writes them in row groups of about ``ROW_GROUP`` events instead. The file holds the same rows in the same
order as the table ``events_frame`` builds from the whole log: both order it by ``event_order`` (by time
first), and no event is ever recorded with a time before the *watermark* the simulation gives (the current
time, or the end of a pass still being finished, whose pass-end event comes when it is processed), so every
buffered event strictly earlier than the watermark can be written in order; later ones wait for the next
flush. Each row group is written from columns, as one Arrow table (``events_table``), without pandas.
"""

from __future__ import annotations

import errno
import importlib.metadata
import json
import os
import re
from pathlib import Path

import numpy as np

from simmodel.metrics.records import Event
from simmodel.metrics.summarize import EVENT_KINDS, event_columns, event_order, event_table, recorded_columns

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
            recorded = recorded_columns(buffer)
            order = event_order(recorded, self.by_worker)
            settled = int(np.searchsorted(recorded["time_ns"][order], self.watermark(), side="left"))
            if settled:
                self._write(event_table(recorded, order[:settled]))
                self._buffer = [buffer[i] for i in order[settled:].tolist()]

    def close(self) -> None:
        """Write what is left (the run is over: everything is settled) and close the file."""
        self._write(event_columns(self._buffer, by_worker=self.by_worker), final=True)
        self._buffer = []
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except OSError as exc:
                raise _write_error(exc, self.where or str(self.path)) from None

    def _write(self, columns: dict[str, np.ndarray], final: bool = False) -> None:
        import pyarrow.parquet as pq

        rows = len(columns["time_s"])
        if not rows and not (final and self._writer is None):
            return
        table = events_table(columns)
        try:
            if self._writer is None:
                self._writer = pq.ParquetWriter(self.path, table.schema)
            self._writer.write_table(table)
        except OSError as exc:  # a full disk: Arrow's message wraps the errno in its own words
            raise _write_error(exc, self.where or str(self.path)) from None
        self.num_written += rows


def events_table(columns: dict[str, np.ndarray]):
    """The event log's columns (``event_columns``) as the Arrow table pandas makes of its frame
    (``Table.from_pandas(events_frame(...), preserve_index=False)``), without pandas: ``kind`` a dictionary
    of the kind names (large strings, as pandas 3 makes them) with int8 codes, ``role`` large strings, and
    pandas' schema metadata, so that the file is the one ``to_parquet`` wrote and reads back as the same
    frame. The arrays are made from the columns' buffers: ``pyarrow.array`` would import pandas (a third of
    a second) to see whether it was given pandas objects."""
    import pyarrow as pa

    arrays = []
    for name, values in columns.items():
        if name == "kind":
            arrays.append(pa.DictionaryArray.from_arrays(_numbers(pa.int8(), values), _strings(EVENT_KINDS)))
        elif name == "role":
            arrays.append(_large_strings(values))
        else:
            arrays.append(_numbers(pa.float64() if values.dtype.kind == "f" else pa.int64(), values))
    schema = pa.schema([pa.field(name, array.type) for name, array in zip(columns, arrays)],
                       metadata={b"pandas": _pandas_metadata(list(columns), pa.__version__)})
    return pa.Table.from_arrays(arrays, schema=schema)


def _numbers(kind, values: np.ndarray):
    """An Arrow array of numbers over ``values``' memory (made contiguous if it is not)."""
    import pyarrow as pa

    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])


_CHUNK_ROWS = 1 << 20


def _large_strings(values) -> object:
    """An Arrow array of large strings from many rows of a few distinct strings (an event log's roles over
    millions of rows): each distinct one encoded once, and the rows' bytes and offsets laid out by numpy from
    their codes. Joining the rows' bytes in Python would hold 80 bytes of buffer bookkeeping a row, gigabytes
    for a long run; ``Array.take`` would import ``pyarrow.compute``, a tenth of a second."""
    import pyarrow as pa

    distinct = list(set(values))
    index = {value: i for i, value in enumerate(distinct)}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))
    encoded = [value.encode("utf-8") for value in distinct]
    lengths = np.array([len(e) for e in encoded], dtype=np.int64)
    width = int(lengths.max()) if len(encoded) else 0
    chars = np.zeros((len(encoded), width), dtype=np.uint8)
    for i, e in enumerate(encoded):
        chars[i, :len(e)] = np.frombuffer(e, dtype=np.uint8)
    row_lengths = lengths[codes]
    offsets = np.zeros(len(codes) + 1, dtype=np.int64)
    np.cumsum(row_lengths, out=offsets[1:])
    data = np.empty(int(offsets[-1]), dtype=np.uint8)
    within = np.arange(width)
    for lo in range(0, len(codes), _CHUNK_ROWS):  # (a chunk at a time: a row's padded bytes are held briefly)
        hi = min(lo + _CHUNK_ROWS, len(codes))
        data[offsets[lo]:offsets[hi]] = chars[codes[lo:hi]][within < row_lengths[lo:hi, None]]
    return pa.Array.from_buffers(pa.large_string(), len(codes), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _strings(values) -> object:
    """An Arrow array of a few large strings: their UTF-8 bytes end to end and the 64-bit offsets between them."""
    import pyarrow as pa

    encoded = [value.encode("utf-8") for value in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string(), len(encoded), [None, pa.py_buffer(offsets),
                                                                   pa.py_buffer(b"".join(encoded))])


def _pandas_metadata(names: list[str], arrow_version: str) -> bytes:
    """The ``pandas`` schema metadata pandas 3 writes for the events frame (a RangeIndex left out): each
    column's pandas and numpy type, the writer's versions."""
    try:
        pandas_version = importlib.metadata.version("pandas")
    except importlib.metadata.PackageNotFoundError:  # pandas is a core dependency; keep writing anyway
        pandas_version = "unknown"
    types = {"time_s": ("float64", "float64"), "kind": ("categorical", "int8"), "role": ("object", "str")}
    columns = []
    for name in names:
        pandas_type, numpy_type = types.get(name, ("int64", "int64"))
        categories = {"num_categories": len(EVENT_KINDS), "ordered": False} if name == "kind" else None
        columns.append({"name": name, "field_name": name, "pandas_type": pandas_type, "numpy_type": numpy_type,
                        "metadata": categories})
    metadata = {"index_columns": [], "column_indexes": [], "columns": columns, "attributes": {},
                "creator": {"library": "pyarrow", "version": arrow_version}, "pandas_version": pandas_version}
    return json.dumps(metadata).encode("utf8")


def _write_error(exc: OSError, where: str) -> OSError:
    """The OS error under an Arrow write error, naming ``where``: one line, and exit 1 for a full disk."""
    code = exc.errno
    if code is None:
        found = re.search(r"\[errno (\d+)\]", str(exc))
        code = int(found.group(1)) if found else errno.EIO
    return OSError(code, f"cannot write the event log: {os.strerror(code)}", where)
