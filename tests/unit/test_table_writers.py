"""The output tables are written from columns, without pandas, as pandas wrote them: the same bytes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from factories import make_scenario

from simmodel.export import write_csv, write_events
from simmodel.metrics.records import Event, EventKind, PassLog, PassRecord
from simmodel.metrics.summarize import (
    RequestTable,
    event_columns,
    event_order,
    events_frame,
    passes_frame,
    passes_table,
    recorded_columns,
)

NAN = float("nan")


def test_csv_cells_by_hand(tmp_path):
    # Written out by hand from the CSV rules pandas follows: floats as Python's repr, NaN and None as empty
    # cells, a cell holding a comma or a quote quoted, with its quote doubled; "\n" ends every line.
    write_csv(tmp_path / "t.csv", {"a": np.array([1.5, NAN, 2.0]), "b": ["x,y", 'q"', None],
                                   "c": np.array([3, -1, 0])})
    assert (tmp_path / "t.csv").read_bytes() == b'a,b,c\n1.5,"x,y",3\n,"q""",-1\n2.0,,0\n'


def test_csv_equals_pandas_on_awkward_values(tmp_path):
    # The reference is pandas' own to_csv of the same frame (what the files were written with before).
    floats = np.array([0.1 + 0.2, 1e16, 1e-5, 1e-4, -0.0, np.inf, -np.inf, NAN, 5e-324, 1.7976931348623157e308,
                       9999999999999998.0, 123.456, 2.0])
    columns = {"f": floats, "i": np.arange(len(floats), dtype=np.int64) * -(10**15),
               "s": ["plain", "a,b", 'say "hi"', "two\nlines", "cr\rhere", "", " space", "ünï", "x", "y", "z",
                     "w", "v"],
               "b": np.arange(len(floats)) % 3 == 0, "u": np.arange(len(floats), dtype=np.uint8) * 19,
               "j": np.arange(len(floats), dtype=np.int32) - 7}
    write_csv(tmp_path / "ours.csv", columns)
    pd.DataFrame(columns).to_csv(tmp_path / "pandas.csv", index=False)
    assert (tmp_path / "ours.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()


def test_an_empty_table_is_its_header(tmp_path):
    write_csv(tmp_path / "t.csv", {"a": np.zeros(0), "b": []})
    assert (tmp_path / "t.csv").read_text() == "a,b\n"


def test_request_columns_are_plain_only_when_pandas_would_agree():
    table = RequestTable([])
    table.add("session", ["s1"])
    assert table.plain_columns() is not None
    # ints with a gap: pandas makes the column float (1.0, NaN), so the columnar writer stands aside
    table.add("turn", [1, None])
    assert table.plain_columns() is None


def test_pass_table_column_order():
    # The order pandas' frame had (start_s and end_s inserted after dp_rank, rank_busy_ms moved last,
    # added columns after it), written out from passes_frame's former inserts.
    log = PassLog()
    log.append(PassRecord("aggregated", 0, 0, 0, 1_000, 3_500_000, 8, 8, 1, 0, 1, 2, 0, 2_499_000, 1_200_000, "fixed"))
    data = {name: log.column(name) for name in PassLog.INT_FIELDS} | {"role": log.role, "provenance": log.provenance}
    data["stage"] = np.array([0])
    table = passes_table(data)
    assert list(table) == ["role", "worker", "dp_rank", "start_s", "end_s", "pass_index", "num_scheduled_tokens",
                           "num_prefill_tokens", "num_prefill_seqs", "num_decode_seqs", "num_sampled",
                           "kv_blocks_used", "num_preempted", "provenance", "rank_busy_ms", "rank_work_ms", "stage"]
    assert table["start_s"].tolist() == [1e-6] and table["rank_busy_ms"].tolist() == [2.499]
    assert list(passes_frame(log).columns) == list(table)[:-1]


def events(times: list[int]) -> list[Event]:
    return [Event(t, EventKind.ARRIVAL, 0, 0, i, 10, "aggregated") for i, t in enumerate(times)]


def test_event_order_is_by_time_then_recording():
    # recorded at 5, 3, 5, 1 ns: by time 1 (row 3), 3 (row 1), then the two at 5 in recording order (0, 2)
    assert event_order(recorded_columns(events([5, 3, 5, 1]))).tolist() == [3, 1, 0, 2]
    columns = event_columns(events([5, 3, 5, 1]), upto_ns=4)
    assert columns["request_id"].tolist() == [3, 1] and columns["time_s"].tolist() == [1e-9, 3e-9]


def test_events_parquet_is_pandas_own_file(tmp_path):
    pytest.importorskip("pyarrow")
    log = events([5, 3, 5, 1]) + [Event(7, EventKind.PASS_BEGIN, 1, 2, -1, 64, "decode", 4)]
    assert write_events(event_columns(log), tmp_path) == "events.parquet"
    events_frame(log).to_parquet(tmp_path / "pandas.parquet", index=False)
    assert (tmp_path / "events.parquet").read_bytes() == (tmp_path / "pandas.parquet").read_bytes()
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "events.parquet"), events_frame(log))


def test_events_csv_without_pyarrow(tmp_path, monkeypatch):
    monkeypatch.setattr("simmodel.export.has_pyarrow", lambda: False)
    log = events([2, 1]) + [Event(1, EventKind.FINISH, 0, 0, 0, 3, "aggregated")]
    assert write_events(event_columns(log), tmp_path) == "events.csv"
    events_frame(log).to_csv(tmp_path / "pandas.csv", index=False)
    assert (tmp_path / "events.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()


def test_writing_the_outputs_does_not_import_pandas(tmp_path):
    # pandas takes a third of a second to import; the run command writes its tables from columns.
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_scenario()))
    code = ("import sys; from simmodel.cli import cli\n"
            f"try: cli(['run', '-c', {str(path)!r}, '--output-dir', {str(tmp_path / 'out')!r}, '--quiet'])\n"
            "except SystemExit as exc: assert not exc.code, exc.code\n"
            "assert 'pandas' not in sys.modules, 'pandas was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path.cwd())
    assert done.returncode == 0, done.stderr[-2000:]
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == [".simmodel-output.json", "events.parquet", "passes.csv", "requests.csv", "summary.json"]


def test_csv_in_chunks_is_the_same_file(tmp_path, monkeypatch):
    # 7 rows in chunks of 3 (3 + 3 + 1) must give the bytes of one chunk: the reference is pandas' to_csv.
    monkeypatch.setattr("simmodel.export.CSV_CHUNK_ROWS", 3)
    columns = {"f": np.array([0.5, NAN, 3.25, 1e-7, 2.0, -1.0, 7.0]), "s": ["a", "b,c", None, "d", "e", "f", "g"],
               "i": np.arange(7, dtype=np.int64)}
    write_csv(tmp_path / "ours.csv", columns)
    pd.DataFrame(columns).to_csv(tmp_path / "pandas.csv", index=False)
    assert (tmp_path / "ours.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()
