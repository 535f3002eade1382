"""The ``simmodel`` command as a user runs it: outputs, exit codes, one-line errors, determinism."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from factories import make_scenario

ROOT = Path(__file__).resolve().parents[1]


def simmodel(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simmodel.cli", *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def scenario(tmp_path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_scenario(traffic={"load": {"concurrency": 2}, "stop": {"requests": 6}})))
    return path


def test_run_writes_the_four_outputs(scenario, tmp_path):
    out = tmp_path / "out"
    proc = simmodel("run", "-c", str(scenario), "--output-dir", str(out), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert json.loads((out / "summary.json").read_text()) == summary
    for key in ("num_requests", "completed_requests", "incomplete_requests", "total_output_tokens", "duration_s",
                "wall_time_s", "request_throughput_rps", "output_throughput_tok_s",
                "mean_output_token_throughput_per_user", "gpu_count", "gpu_hours", "num_passes", "num_preemptions"):
        assert key in summary
    for key in ("ttft_ms", "ttst_ms", "tpot_ms", "itl_ms", "e2e_latency_ms", "queue_ms"):
        assert set(summary[key]) == {"mean", "min", "max", "p50", "p75", "p90", "p95", "p99", "p99.9", "std"}
    requests = pd.read_csv(out / "requests.csv")
    assert len(requests) == 6 and (requests.status == "completed").all()
    passes = pd.read_csv(out / "passes.csv")
    assert {"worker", "dp_rank", "pass_index", "start_s", "end_s", "num_scheduled_tokens", "num_prefill_seqs",
            "num_decode_seqs", "kv_blocks_used", "num_preempted"} <= set(passes.columns)
    events = pd.read_parquet(out / "events.parquet")
    # 6 requests × (arrival, placement, admission, first token, finish) + 2 rows per pass, no token rows
    assert len(events) == 6 * 5 + 2 * summary["num_passes"]


def test_same_seed_same_bytes(scenario, tmp_path):
    """Two runs of one scenario give identical files (summary.json apart from its wall time)."""
    for name in ("a", "b"):
        assert simmodel("run", "-c", str(scenario), "--output-dir", str(tmp_path / name),
                        "--set", "traffic.load={type: poisson, requests_per_second: 30}").returncode == 0
    for name in ("requests.csv", "passes.csv", "events.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    a, b = (json.loads((tmp_path / n / "summary.json").read_text()) for n in "ab")
    a.pop("wall_time_s"), b.pop("wall_time_s")
    assert a == b


def test_non_empty_output_dir_is_refused(scenario, tmp_path):
    """An earlier output is replaced only with --overwrite; a folder simmodel did not write, never
    (tests/test_outputs.py has every case)."""
    out = tmp_path / "out"
    assert simmodel("run", "-c", str(scenario), "--output-dir", str(out)).returncode == 0
    proc = simmodel("run", "-c", str(scenario), "--output-dir", str(out))
    assert proc.returncode == 2 and "folder is not empty: it holds simmodel's earlier output (use --overwrite" \
        in proc.stderr
    assert simmodel("run", "-c", str(scenario), "--output-dir", str(out), "--overwrite").returncode == 0
    assert sorted(p.name for p in out.iterdir()) == [".simmodel-output.json", "events.parquet", "passes.csv",
                                                     "requests.csv", "summary.json"]


@pytest.mark.parametrize("args, message", [
    (["--set", "engine.workers.aggregated.kv_cache.block_size=0"],
     "s.yaml: engine.workers.aggregated.kv_cache.block_size: must be a positive integer, got 0"),
    (["--set", "traffic.source={type: trace, path: nope.csv, format: csv}",
      "--set", "traffic.load={type: trace_timestamps}"], "traffic.source.path:"),
    (["--format", "xml"], "Invalid value for '--format'"),
    (["--bogus"], "No such option '--bogus'"),
])
def test_bad_input_is_one_line_and_exit_2(scenario, tmp_path, args, message):
    out = tmp_path / "out"
    proc = simmodel("run", "-c", str(scenario), "--output-dir", str(out), *args)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not out.exists()


def test_validate(scenario):
    ok = simmodel("validate", "-c", str(scenario))
    assert ok.returncode == 0 and "ok" in ok.stdout
    bad = simmodel("validate", "-c", str(scenario), "--set", "engine.seed=-1")
    assert bad.returncode == 2 and "engine.seed: must be an integer >= 0, got -1" in bad.stderr
    missing = simmodel("validate", "-c", "nope.yaml")
    assert missing.returncode == 2 and "nope.yaml: scenario file not found" in missing.stderr


def test_quickstart_table():
    proc = simmodel("run", "-c", "scenarios/quickstart.yaml", "--set", "traffic.stop.requests=40")
    assert proc.returncode == 0, proc.stderr
    assert "Time to first token (ms)" in proc.stdout and "Completed requests" in proc.stdout


def test_measured_timing_without_its_extra_is_one_clear_line(scenario):
    pytest.importorskip("simmodel")  # keeps the import order stable
    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("aiconfigurator-core is installed here")
    proc = simmodel("validate", "-c", str(scenario), "--set", "engine.workers.aggregated.timing={type: measured}")
    assert proc.returncode == 2
    assert "timing.type measured needs the optional extra: pip install 'simmodel[measured]'" in proc.stderr


def test_an_output_dir_that_cannot_be_written_is_one_line_before_the_run(tmp_path):
    import subprocess
    import sys

    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = subprocess.run([sys.executable, "-m", "simmodel.cli", "run", "-c", "scenarios/quickstart.yaml",
                           "--output-dir", str(blocker / "out")], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"--output-dir {blocker / 'out'}: cannot write there" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, says", [
    (["validate", "-c", "{scenario}", "--set", "traffic.source={{type: trace, format: mooncake, path: {long}}}"],
     "trace file not found"),
    (["run", "-c", "{scenario}", "--output-dir", "{tmp}/{long}"], "cannot write there"),
    (["calibrate", "--runs", "{tmp}/{long}", "--output", "{tmp}/c.yaml"], "no such file"),
    (["calibrate", "--runs", "{tmp}/r.yaml", "--output", "{tmp}/{long}"], "File name too long"),
])
def test_a_file_name_the_os_refuses_is_one_line_exit_2(scenario, tmp_path, args, says):
    """A name longer than the file system allows (255 bytes a component) is an OSError, not a missing file:
    it is still bad input, reported in one line."""
    long = "x" * 300
    proc = simmodel(*(a.format(scenario=scenario, tmp=tmp_path, long=long) for a in args))
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_an_sglang_host_pool_no_larger_than_the_gpu_pool_is_warned_of():
    """ratio 0.5 of a 140,000-token GPU pool (pages of one token): int(0.5 × 140,000) = 70,000 tokens, plus
    SGLang's padding page, 70,001 ≤ 140,000; the ready scenario's 1,000 GiB pool draws no warning."""
    proc = simmodel("validate", "-c", "scenarios/mooncake-hicache-sglang.yaml",
                    "--set", "engine.workers.aggregated.kv_cache={block_size: 1, capacity: {type: fixed, blocks: "
                             "140000}, host_offload: {ratio: 0.5}}")
    assert proc.returncode == 0, proc.stderr
    assert ("simmodel: warning: engine.workers.aggregated.kv_cache.host_offload: the host pool holds 70001 tokens "
            "per GPU, no more than the GPU pool's 140000") in proc.stderr
    quiet = simmodel("validate", "-c", "scenarios/mooncake-hicache-sglang.yaml")
    assert quiet.returncode == 0 and "warning" not in quiet.stderr


def test_the_table_shows_tensorrt_llms_pauses():
    """A TensorRT-LLM worker under max_utilization with 300 blocks of 32 tokens pauses requests: the table's Pauses
    row is the summary's num_pauses, and equals its preemptions (each pause is one)."""
    sets = ["engine.workers.aggregated.scheduler.capacity_policy=max_utilization", "engine.context_length=8192",
            "engine.workers.aggregated.kv_cache.capacity={type: fixed, blocks: 300}", "traffic.stop.requests=120"]
    args = ["run", "-c", "scenarios/trtllm-llama8b-h100.yaml", *(x for s in sets for x in ("--set", s))]
    summary = json.loads(simmodel(*args, "--format", "json").stdout)
    table = simmodel(*args).stdout
    assert summary["num_pauses"] == summary["num_preemptions"] > 0
    assert re.search(rf"^Pauses \(TensorRT-LLM max_utilization\) +{summary['num_pauses']}$", table, re.M)


_AT_EXIT = """
import atexit, gc, sys
from simmodel.cli import main
atexit.register(lambda: print("collector", gc.isenabled(), "frozen", gc.get_freeze_count() > 0, "status-seen"))
sys.argv = ["simmodel", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize(("command", "collector"), [("run", False), ("validate", True)])
def test_the_command_leaves_its_objects_to_the_operating_system(scenario, command, collector):
    """As its own process (``main``), the command freezes every object on its way out, so that Python's shutdown
    neither scans nor frees them; ``run`` keeps the collector off throughout (its passes would find nothing),
    another command does not. Python's own exit still runs: ``atexit`` hooks see it, and the status is kept."""
    proc = subprocess.run([sys.executable, "-c", _AT_EXIT, command, "-c", str(scenario), *(
        ["--quiet", "--format", "json"] if command == "run" else [])], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"collector {collector} frozen True status-seen" in proc.stdout
    bad = subprocess.run([sys.executable, "-c", _AT_EXIT, command, "-c", str(scenario.with_name("missing.yaml"))],
                         cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "frozen True status-seen" in bad.stdout
