"""``--events stream``: the event log written in row groups during the run is the in-memory log, row for
row, even where events are recorded out of time order (async scheduling, pass launch, P/D handoffs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from factories import make_scenario, make_sglang_scenario

from simmodel.config.load import parse_scenario
from simmodel.metrics import event_sink
from simmodel.metrics.event_sink import ParquetEventSink
from simmodel.paths import current_umask
from simmodel.sim import Simulation

pytest.importorskip("pyarrow")

ASYNC_LAUNCH = make_scenario(
    traffic={"source": {"input_tokens": {"distribution": "uniform", "min": 10, "max": 400},
                        "output_tokens": {"distribution": "uniform", "min": 1, "max": 30}},
             "load": {"type": "poisson", "requests_per_second": 80}, "stop": {"requests": 60}},
    engine={"workers": {"aggregated": {"scheduler": {"async_scheduling": True, "launch": {
        "decode_ms": 15, "piecewise_ms": 25, "eager_ms": 30, "max_cudagraph_capture_size": 64}}}}})
SGLANG_DISAGG = make_sglang_scenario(traffic={"load": {"type": "poisson", "requests_per_second": 50},
                                              "stop": {"requests": 40}})
SGLANG_DISAGG["engine"] |= {"mode": "disaggregated", "kv_transfer": {"latency_ms": 3}, "workers": {
    "prefill": {"host_loop": True, "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10},
                "kv_cache": {"capacity": {"type": "fixed", "blocks": 100_000}}},
    "decode": {"timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10},
               "kv_cache": {"capacity": {"type": "fixed", "blocks": 100_000}}}}}


@pytest.mark.parametrize("data", [ASYNC_LAUNCH, SGLANG_DISAGG], ids=["vllm-async-launch", "sglang-disagg"])
def test_streamed_log_equals_the_in_memory_log(data, tmp_path, monkeypatch):
    monkeypatch.setattr(event_sink, "ROW_GROUP", 7)  # many row groups, many out-of-order cuts
    memory = Simulation(parse_scenario(data, tmp_path)).run()
    sink = ParquetEventSink(tmp_path / "events.parquet")
    streamed = Simulation(parse_scenario(data, tmp_path), event_sink=sink).run()
    sink.close()
    log = pd.read_parquet(tmp_path / "events.parquet")
    assert sink.num_written == len(memory.events) > 50
    pd.testing.assert_frame_equal(log, memory.events)
    assert streamed.requests.equals(memory.requests) and streamed.events.empty


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_scenario()))
    return subprocess.run([sys.executable, "-m", "simmodel.cli", "run", "-c", str(path), *args],
                          capture_output=True, text=True)


def test_cli_events_modes(tmp_path):
    out = tmp_path / "out"
    assert run_cli(tmp_path, "--output-dir", str(out), "--events", "stream").returncode == 0
    assert sorted(p.name for p in out.iterdir()) == [".simmodel-output.json", "events.parquet", "passes.csv",
                                                     "requests.csv", "summary.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left behind
    off = tmp_path / "off"
    assert run_cli(tmp_path, "--output-dir", str(off), "--events", "off").returncode == 0
    assert sorted(p.name for p in off.iterdir()) == [".simmodel-output.json", "passes.csv", "requests.csv",
                                                     "summary.json"]
    bad = run_cli(tmp_path, "--events", "stream")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--events stream" in bad.stderr


def test_the_streamed_file_has_an_ordinary_files_permissions(tmp_path):
    # the stream is written to a mkstemp file (owner-only, 0o600); once moved into the output folder it has
    # the permissions of the folder's other new files, e.g. 0o644 under the usual umask 022
    out = tmp_path / "out"
    assert run_cli(tmp_path, "--output-dir", str(out), "--events", "stream").returncode == 0
    mode = (out / "events.parquet").stat().st_mode & 0o777
    assert mode == (out / "requests.csv").stat().st_mode & 0o777 == 0o666 & ~current_umask()
