"""``simmodel compare``: each tool's result file read in its own format and units, the simulated side
computed under that tool's definitions, by hand on a run whose every latency is known."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from factories import make_scenario

from simmodel.compare.definitions import SimulatedScope, samples, statistic
from simmodel.compare.measured import read_measured
from simmodel.errors import ScenarioError

ROOT = Path(__file__).resolve().parents[1]


def simmodel(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simmodel.cli", *args], cwd=ROOT, capture_output=True, text=True)


def scenario(tmp_path: Path, **changes) -> Path:
    """Four requests one after the other (one client), 100 → 5 tokens, fixed 20 ms prefill and 10 ms decode
    passes. By hand, every request: TTFT 20 ms, four 10 ms gaps (TPOT and ITL 10 ms), E2E 60 ms; the run
    lasts 240 ms: 4 / 0.24 = 16.67 requests/s and 20 / 0.24 = 83.33 output tokens/s."""
    data = make_scenario(**changes)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def rows_of(out: Path) -> dict[tuple[str, str, str], dict]:
    report = json.loads((out / "compare.json").read_text())
    return {(r["scope"], r["metric"], r["stat"]): r for r in report["rows"]}


def test_vllm_bench_result_by_hand(tmp_path):
    measured = write(tmp_path / "vllm.json", {
        "backend": "vllm", "num_prompts": 4, "request_rate": "inf", "duration": 0.25, "completed": 4,
        "request_throughput": 16.0, "output_throughput": 80.0, "mean_ttft_ms": 25.0, "p99_ttft_ms": 30.0,
        "mean_tpot_ms": 10.0, "median_itl_ms": 8.0, "mean_e2el_ms": 60.0})
    out = tmp_path / "out"
    proc = simmodel("compare", "-c", str(scenario(tmp_path)), "--measured", str(measured), "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = rows_of(out)
    assert rows["run", "ttft", "mean"]["simulated"] == pytest.approx(20.0)
    assert rows["run", "ttft", "mean"]["error"] == pytest.approx(-5.0)
    assert rows["run", "ttft", "mean"]["error_pct"] == pytest.approx(-20.0)
    assert rows["run", "ttft", "p99"]["simulated"] == pytest.approx(20.0)
    assert rows["run", "tpot", "mean"]["simulated"] == pytest.approx(10.0)
    assert rows["run", "itl", "median"]["simulated"] == pytest.approx(10.0)
    assert rows["run", "e2el", "mean"]["simulated"] == pytest.approx(60.0)
    assert rows["run", "request_throughput", "value"]["simulated"] == pytest.approx(4 / 0.24)
    assert rows["run", "output_throughput", "value"]["simulated"] == pytest.approx(20 / 0.24)
    assert "[run]" in proc.stdout and "ttft" in proc.stdout
    assert "note:" not in proc.stdout  # 4 completed requests measured, 4 simulated
    assert (out / "compare.csv").read_text().startswith("scope,metric,stat,definition,measured,simulated")
    assert json.loads((out / "compare.json").read_text())["definitions"]["itl_pooled"].startswith("every gap")


def test_inference_perf_seconds_and_stage_files(tmp_path):
    def lifecycle(ttft_s):
        return {"load_summary": {"count": 4}, "successes": {
            "latency": {"time_to_first_token": {"mean": ttft_s, "median": ttft_s, "p90": ttft_s},
                        "normalized_time_per_output_token": {"mean": 0.012},
                        "time_per_output_token": {"mean": 0.01}, "inter_token_latency": {"p99": 0.01},
                        "request_latency": {"max": 0.07}},
            "throughput": {"requests_per_sec": 16.0, "output_tokens_per_sec": 80.0}}}
    folder = tmp_path / "report"
    folder.mkdir()
    measured = write(folder / "summary_lifecycle_metrics.json", lifecycle(0.02))
    write(folder / "stage_0_lifecycle_metrics.json", lifecycle(0.03))
    m = read_measured(measured)
    assert m.tool == "inference-perf" and [s.name for s in m.scopes] == ["run", "stage 0"]
    ttft = [f for f in m.scopes[0].figures if f.metric == "time_to_first_token" and f.stat == "mean"][0]
    assert ttft.value == pytest.approx(20.0)  # seconds → ms
    out = tmp_path / "out"
    # a scenario without stages compares the whole run and says why the stage is not compared
    proc = simmodel("compare", "-c", str(scenario(tmp_path)), "--measured", str(measured), "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = rows_of(out)
    assert rows["run", "time_to_first_token", "mean"]["simulated"] == pytest.approx(20.0)
    assert rows["run", "normalized_time_per_output_token", "mean"]["simulated"] == pytest.approx(60 / 5)
    assert rows["run", "request_latency", "max"]["error"] == pytest.approx(60 - 70)
    assert "stage 0: not compared" in proc.stdout
    # with one stage (a client for 1 s: the same four requests, then the stage ends), stage 0 is compared
    staged = make_scenario(traffic={"load": {"type": "stages", "stages": [{"concurrency": 1, "duration_s": 0.2}]}})
    path = tmp_path / "staged.yaml"
    path.write_text(yaml.safe_dump(staged))
    out2 = tmp_path / "out2"
    proc = simmodel("compare", "-c", str(path), "--measured", str(measured), "--output-dir", str(out2))
    assert proc.returncode == 0, proc.stderr
    assert rows_of(out2)["stage 0", "time_to_first_token", "mean"]["error"] == pytest.approx(20.0 - 30.0)


def test_inference_perf_chunk_timed_figures_give_way_to_the_derived_decode_step(tmp_path):
    """The server sent two chunks per token, so inference-perf's chunk-timed TPOT and ITL read 5 ms for a
    10 ms decode step. By hand: measured (62 − 22) / (5 − 1) = 10 ms; simulated (60 − 20) / (5 − 1) = 10 ms
    (scenario()). The headline then averages TTFT (20 vs 22: 9.09 %), E2E (60 vs 62: 3.23 %) and the decode
    step (0 %): 4.1 % over 3 figures; the chunk-timed ones are in a note, not in the rows."""
    measured = write(tmp_path / "summary_lifecycle_metrics.json", {"load_summary": {"count": 4}, "successes": {
        "latency": {"time_to_first_token": {"mean": 0.022}, "request_latency": {"mean": 0.062},
                    "time_per_output_token": {"mean": 0.005}, "inter_token_latency": {"mean": 0.005, "p99": 0.01}},
        "output_len": {"mean": 5.0}}})
    out = tmp_path / "out"
    proc = simmodel("compare", "-c", str(scenario(tmp_path)), "--measured", str(measured), "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = rows_of(out)
    derived = rows["run", "derived_time_per_output_token", "mean"]
    assert (derived["measured"], derived["simulated"]) == (pytest.approx(10.0), pytest.approx(10.0))
    assert {metric for (_, metric, _) in rows} == {"time_to_first_token", "request_latency",
                                                   "derived_time_per_output_token"}
    assert "mean absolute error: 4.1 % over 3 figures" in proc.stdout
    assert "note: run: time_per_output_token and inter_token_latency not compared" in proc.stdout


def test_the_derived_decode_step_divides_both_sides_by_the_tools_own_count(tmp_path):
    """inference-perf counted 4 output tokens where the server generated 5 (it re-tokenizes the streamed text):
    measured (62 − 22) / (4 − 1) = 13.33 ms; the simulated side divides its own E2E − TTFT by the same
    count, (60 − 20) / (4 − 1) = 13.33 ms, not by its 5 tokens (which would give 10 ms, 25 % off for
    a run whose E2E is within 3.2 %)."""
    measured = write(tmp_path / "summary_lifecycle_metrics.json", {"load_summary": {"count": 4}, "successes": {
        "latency": {"time_to_first_token": {"mean": 0.022}, "request_latency": {"mean": 0.062},
                    "time_per_output_token": {"mean": 0.005}},
        "output_len": {"mean": 4.0}}})
    out = tmp_path / "out"
    proc = simmodel("compare", "-c", str(scenario(tmp_path)), "--measured", str(measured), "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    derived = rows_of(out)["run", "derived_time_per_output_token", "mean"]
    assert (derived["measured"], derived["simulated"]) == (pytest.approx(40 / 3), pytest.approx(40 / 3))


def test_inference_perf_without_output_len_says_what_the_decode_step_needs(tmp_path):
    m = read_measured(write(tmp_path / "summary_lifecycle_metrics.json", {"load_summary": {"count": 4}, "successes": {
        "latency": {"request_latency": {"mean": 0.06}, "inter_token_latency": {"mean": 0.005}}}}))
    assert [f.metric for f in m.scopes[0].figures] == ["request_latency"]
    assert m.scopes[0].notes == [
        "run: inter_token_latency not compared: inference-perf times them from the streamed chunks, shorter than "
        "the decode step when the server sends several chunks per token; derived_time_per_output_token needs the "
        "means of request_latency, time_to_first_token and output_len (> 1)"]


def test_guidellm_units_percentile_names_and_benchmarks(tmp_path):
    def bench(ttft):
        return {"metrics": {
            "time_to_first_token_ms": {"successful": {"mean": ttft, "median": ttft, "std_dev": 0.0,
                                                      "percentiles": {"p001": 1.0, "p01": 2.0, "p05": 3.0, "p99": 4.0,
                                                                      "p999": 5.0}}},
            "inter_token_latency_ms": {"successful": {"mean": 10.0}},
            "time_per_output_token_ms": {"successful": {"mean": 12.0}},
            "request_latency": {"successful": {"mean": 0.06}},
            "requests_per_second": {"successful": {"mean": 16.0, "median": 15.0}}}}
    m = read_measured(write(tmp_path / "benchmarks.json", {"metadata": {}, "benchmarks": [bench(20.0)]}))
    figures = {(f.metric, f.stat): f.value for f in m.scopes[0].figures}
    assert m.tool == "guidellm" and m.scopes[0].stage is None
    assert {s for (metric, s) in figures if metric == "time_to_first_token_ms"} >= {"p0.1", "p1", "p5", "p99", "p99.9"}
    assert figures["request_latency", "mean"] == pytest.approx(60.0)  # seconds → ms
    # a rate is compared by its mean only (GuideLLM's rate distributions are time-weighted)
    assert figures["requests_per_second", "value"] == 16.0 and ("requests_per_second", "median") not in figures
    two = read_measured(write(tmp_path / "two.json", {"benchmarks": [bench(20.0), bench(30.0)]}))
    assert [s.stage for s in two.scopes] == [0, 1]  # one benchmark per rate: stages of the scenario


def test_aiperf_export(tmp_path):
    m = read_measured(write(tmp_path / "profile_export_aiperf.json", {
        "time_to_first_token": {"unit": "ms", "avg": 20.0, "p50": 19.0, "adj_p99": 99.0, "p99": 30.0},
        "inter_token_latency": {"unit": "ms", "avg": 10.0},
        "inter_chunk_latency": {"unit": "ms", "p90": 11.0},
        "request_latency": {"unit": "ms", "avg": 60.0},
        "request_throughput": {"unit": "requests/sec", "avg": 16.0}}))
    figures = {(f.metric, f.stat): f for f in m.scopes[0].figures}
    assert m.tool == "aiperf"
    assert ("time_to_first_token", "median") in figures and ("time_to_first_token", "adj_p99") not in figures
    assert figures["inter_token_latency", "mean"].definition == "tpot_per_request"  # AIPerf's ITL is per request
    assert figures["inter_chunk_latency", "p90"].definition == "itl_pooled"
    assert figures["request_throughput", "value"].value == 16.0


def test_per_request_weighting_and_nearest_rank_by_hand():
    """Two completed requests: A with 2 tokens at 10 ms a gap, B with 11 tokens at 20 ms. Every request
    weighing the same (vLLM TPOT, AIPerf ITL): mean 15, linear median 15. GuideLLM's ITL weighs each by its
    gaps (1 and 10): mean (10 + 200) / 11 = 19.09; nearest rank: half the weight (5.5) is reached at B's
    20 ms."""
    frame = pd.DataFrame({"status": ["completed", "completed"], "output_tokens": [2, 11], "tpot_ms": [10.0, 20.0],
                          "ttft_ms": [5.0, 5.0], "e2e_ms": [15.0, 205.0]})
    scope = SimulatedScope(frame, np.array([]), np.array([], dtype=np.int64), None, None)
    values, weights = samples("tpot_per_request", scope)
    assert statistic(values, weights, "mean") == pytest.approx(15.0)
    assert statistic(values, weights, "median") == pytest.approx(15.0)
    values, weights = samples("itl_per_request_weighted", scope)
    assert statistic(values, weights, "mean", nearest_rank=True) == pytest.approx(210 / 11)
    assert statistic(values, weights, "median", nearest_rank=True) == pytest.approx(20.0)
    # GuideLLM's TPOT: (last token − send) / tokens = E2E / n, weighted by n: 7.5 (×2) and 18.64 (×11)
    values, weights = samples("tpot_guidellm", scope)
    assert statistic(values, weights, "mean") == pytest.approx((15.0 + 205.0) / 13)
    # pooled gaps: the multiset {1 × 10, 10 × 20}: numpy's linear p50 of the expanded values is 20
    assert statistic(np.array([10.0, 20.0]), np.array([1, 10]), "p50") == pytest.approx(
        np.percentile([10.0] + [20.0] * 10, 50))


@pytest.mark.parametrize(("content", "args", "message"), [
    ("{not json", (), "not valid JSON (line 1: Expecting property name enclosed in double quotes)"),
    ("{\"duration\": " + "9" * 5000 + "}", (), "not valid JSON (a number of over 4,300 digits)"),
    ("[" * 20_000 + "]" * 20_000, (), "not valid JSON (nested too deeply)"),
    (json.dumps({"hello": 1}), (), "not a result file of vllm-bench, inference-perf, guidellm, aiperf; give --tool"),
    (json.dumps({"benchmarks": []}), ("--tool", "vllm-bench"), "looks like a guidellm result, not vllm-bench"),
    (json.dumps({"duration": 1, "completed": 1}), (), "no metric this comparison knows"),
], ids=["syntax", "digits", "nesting", "unknown", "wrong-tool", "no-metric"])
def test_bad_measured_files_are_one_line(tmp_path, content, args, message):
    measured = tmp_path / "m.json"
    measured.write_text(content)
    proc = simmodel("compare", "-c", str(scenario(tmp_path)), "--measured", str(measured), *args)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_missing_file_is_one_line():
    with pytest.raises(ScenarioError, match="cannot read"):
        read_measured(Path("/nonexistent/result.json"))


@pytest.mark.parametrize(("name", "content", "args", "message"), [
    ("m.json", json.dumps({"hello": 1}), ("--tool", "guidellm"), "not a guidellm result file (no benchmarks list)"),
    ("m.json", json.dumps([1, 2]), ("--tool", "vllm-bench"), "not a vllm-bench result file (not a JSON object)"),
])
def test_more_bad_measured_files_are_one_line(tmp_path, name, content, args, message):
    measured = tmp_path / name
    measured.write_text(content)
    proc = simmodel("compare", "-c", str(scenario(tmp_path)), "--measured", str(measured), *args)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_unknown_statistics_and_non_numbers_are_not_compared(tmp_path):
    folder = tmp_path / "r"
    folder.mkdir()
    measured = write(folder / "summary_lifecycle_metrics.json", {"load_summary": {}, "successes": {"latency": {
        "time_to_first_token": {"mean": 0.02, "count": 4, "p150": 1.0, "median": float("nan")}}}})
    (folder / "stage_x_lifecycle_metrics.json").write_text("{}")  # not a stage file's name: not read
    m = read_measured(measured)
    assert [(f.metric, f.stat) for s in m.scopes for f in s.figures] == [("time_to_first_token", "mean")]
    (folder / "stage_0_lifecycle_metrics.json").write_text("[1]")
    with pytest.raises(ScenarioError, match="not a stage file"):
        read_measured(measured)


def test_a_measured_run_of_another_size_is_noted(tmp_path):
    measured = write(tmp_path / "vllm.json", {"duration": 1.0, "completed": 90, "failed": 10, "mean_ttft_ms": 25.0})
    proc = simmodel("compare", "-c", str(scenario(tmp_path)), "--measured", str(measured))
    assert proc.returncode == 0, proc.stderr
    assert "note: the measured run sent 100 requests, the scenario 4" in proc.stdout
