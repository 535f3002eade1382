"""The charts of a run (``simmodel.plots``) and ``simmodel plot``, on a run written out by hand.

The run: fixed timing (a rank costs 20 ms if it prefills, plus 10 ms if it decodes), synchronous scheduling, no
request overhead; A (100 → 3) arrives at 0, B (100 → 2) at 5 ms. A prefills 0–20 ms alone (B arrived during that
pass); the pass 20–50 ms decodes A and prefills B (20 + 10 ms); the pass 50–60 ms decodes both, and both
finish.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from factories import make_scenario, run_scenario, trace_scenario, write_csv_trace

pytest.importorskip("plotly")
from simmodel.cli import cli  # noqa: E402
from simmodel.plots.charts import batch_timeline, kv_timeline, latency_cdfs, queue_depth, run_charts  # noqa: E402


@pytest.fixture
def run(tmp_path):
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 3), (0.005, 100, 2)])
    return run_scenario(trace_scenario(trace))


def test_queue_depth_counts_arrivals_up_and_admissions_down(run):
    """A arrives and is admitted at 0 (1, then 0); B arrives at 5 ms (1) and is admitted at 20 ms (0)."""
    trace = queue_depth(run.requests).data[0]
    assert list(trace.x) == pytest.approx([0, 0, 0.005, 0.02])
    assert list(trace.y) == [1, 0, 1, 0]


def test_the_batch_timeline_is_each_pass_s_sequences(run):
    """Passes start at 0, 20 and 50 ms with 1, 2 and 2 sequences."""
    trace = batch_timeline(run.passes).data[0]
    assert list(trace.x) == pytest.approx([0, 0.02, 0.05]) and list(trace.y) == [1, 2, 2]
    assert trace.name == "aggregated w0 r0"


def test_latency_cdfs_are_the_requests_fractions(run):
    """TTFT: A 20 ms, B 45 ms (arrived at 5, first token at 50): 0.5 at 20, 1 at 45."""
    ttft = latency_cdfs(run.requests).data[0]
    assert list(ttft.x) == pytest.approx([20, 45]) and list(ttft.y) == pytest.approx([0.5, 1.0])


def test_kv_timeline_marks_the_passes_that_preempted():
    """A KV pool of 12 blocks of 16 tokens, two 80 → 60 requests at once: both fit at first (5 + 5 blocks, the
    first pass's plan), then their decodes outgrow the pool (9 blocks each at the end) and the later one is
    preempted; the marker trace holds exactly the passes whose ``num_preempted`` is positive."""
    data = make_scenario(engine={"context_length": 160, "workers": {"aggregated": {"kv_cache": {
        "capacity": {"type": "fixed", "blocks": 12}}}}})
    data["traffic"] = {"source": {"type": "synthetic", "input_tokens": 80, "output_tokens": 60},
                       "load": {"type": "concurrency", "concurrency": 2}, "stop": {"requests": 2}}
    res = run_scenario(data)
    preempting = res.passes[res.passes.num_preempted > 0]
    assert len(preempting) > 0
    fig = kv_timeline(res.passes)
    marks = [t for t in fig.data if t.name.endswith("preemptions")][0]
    assert list(marks.x) == pytest.approx(preempting.start_s.tolist())


def test_simmodel_plot_writes_one_self_contained_report(run, tmp_path):
    out = tmp_path / "out"
    assert CliRunner().invoke(cli, ["run", "-c", str(_yaml(tmp_path)), "--output-dir", str(out),
                                    "--quiet"]).exit_code == 0
    result = CliRunner().invoke(cli, ["plot", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text()
    for title in ("Latency CDFs", "Latency by arrival time", "Queue depth", "Batch size per pass",
                  "Scheduled tokens per pass", "KV blocks used"):
        assert title in page
    assert '<script src="http' not in page and "plotly.js v" in page  # (its JavaScript inside: opens offline)
    assert len(run_charts(run.requests, run.passes)) == 6


def test_simmodel_plot_refuses_a_folder_that_is_not_a_run(tmp_path):
    result = CliRunner().invoke(cli, ["plot", str(tmp_path)])
    assert result.exit_code == 2
    assert "not a run folder (no summary.json, requests.csv, passes.csv" in result.output
    assert not (tmp_path / "report.html").exists()


def _yaml(tmp_path):
    import yaml

    trace = write_csv_trace(tmp_path / "t2.csv", [(0.0, 100, 3), (0.005, 100, 2)])
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(trace_scenario(trace)))
    return path


def test_the_pareto_chart_marks_the_front_and_the_ranked_candidates():
    """Three feasible candidates at (10, 5), (8, 8) and (7, 4) tokens/s per GPU and per user, and an infeasible
    one: (7, 4) is beaten on both by (8, 8), so the front joins (8, 8) and (10, 5) by throughput per GPU; the
    ranked ones are numbered in their saved order."""
    from simmodel.plots.charts import pareto_chart

    def entry(i, x, y, status="feasible"):
        return {"id": i, "status": status, "choices": {"tensor": i},
                "metrics": {"output_throughput_per_gpu": x, "throughput_per_user": y}}

    a, b, c, bad = entry(0, 10, 5), entry(1, 8, 8), entry(2, 7, 4), entry(3, 20, 20, "infeasible")
    fig = pareto_chart([a, b, c, bad], [a, b])
    traces = {t.name: t for t in fig.data}
    assert list(traces["feasible"].x) == [10, 8, 7] and list(traces["infeasible"].x) == [20]
    assert list(traces["front"].x) == [8, 10] and list(traces["front"].y) == [8, 5]
    assert list(traces["ranked (saved)"].text) == ["#1", "#2"] and list(traces["ranked (saved)"].x) == [10, 8]


def test_the_compare_chart_sets_measured_beside_simulated_per_metric():
    """Two metrics, three rows: one panel per metric, a measured and a simulated bar per scope and statistic."""
    from simmodel.plots.charts import compare_chart

    rows = [{"scope": "run", "metric": "ttft_ms", "stat": "mean", "measured": 25.0, "simulated": 20.0,
             "error_pct": -20.0},
            {"scope": "run", "metric": "ttft_ms", "stat": "p99", "measured": 50.0, "simulated": 55.0, "error_pct": 10.0},
            {"scope": "run", "metric": "output_throughput", "stat": "value", "measured": 100.0, "simulated": 90.0,
             "error_pct": -10.0}]
    fig = compare_chart(rows, "vllm-bench")
    bars = [(t.name, list(t.x), list(t.y)) for t in fig.data]
    assert bars == [("measured (vllm-bench)", ["run mean", "run p99"], [25.0, 50.0]),
                    ("simulated", ["run mean", "run p99"], [20.0, 55.0]),
                    ("measured (vllm-bench)", ["run value"], [100.0]), ("simulated", ["run value"], [90.0])]
    assert list(fig.data[1].hovertext) == ["error -20.0 %", "error +10.0 %"]


def test_a_plotted_run_folder_is_still_simmodel_s_to_overwrite(tmp_path):
    """The report (and images) ``simmodel plot`` writes into a run folder join its manifest: ``simmodel run
    --overwrite`` into it replaces it whole instead of refusing a file it did not write."""
    out = tmp_path / "out"
    scenario = str(_yaml(tmp_path))
    assert CliRunner().invoke(cli, ["run", "-c", scenario, "--output-dir", str(out), "--quiet"]).exit_code == 0
    assert CliRunner().invoke(cli, ["plot", str(out)]).exit_code == 0
    again = CliRunner().invoke(cli, ["run", "-c", scenario, "--output-dir", str(out), "--quiet", "--overwrite"])
    assert again.exit_code == 0, again.output
    assert not (out / "report.html").exists()


@pytest.mark.skipif(__import__("shutil").which("chromium") is None, reason="no chromium (.ci/run installs it)")
def test_plot_png_writes_one_image_per_chart(run, tmp_path):
    pytest.importorskip("kaleido")
    out = tmp_path / "out"
    assert CliRunner().invoke(cli, ["run", "-c", str(_yaml(tmp_path)), "--output-dir", str(out),
                                    "--quiet"]).exit_code == 0
    result = CliRunner().invoke(cli, ["plot", str(out), "--png", str(tmp_path / "png")])
    assert result.exit_code == 0, result.output
    images = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert images == ["00-latency-cdfs.png", "01-latency-by-arrival-time.png", "02-queue-depth.png",
                      "03-batch-size-per-pass.png", "04-scheduled-tokens-per-pass.png", "05-kv-blocks-used.png"]
    assert all((tmp_path / "png" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in images)


@pytest.mark.parametrize("spoil, message", [
    (lambda d: (d / "summary.json").write_text("{x"), "summary.json: not a summary simmodel wrote"),
    (lambda d: (d / "requests.csv").write_text(""), "requests.csv: not a table simmodel wrote"),
    (lambda d: (d / "passes.csv").write_text("a,b\n1,2\n"), "passes.csv: not a table simmodel wrote (no column role"),
])
def test_a_spoilt_run_folder_is_one_line(tmp_path, spoil, message):
    out = tmp_path / "out"
    assert CliRunner().invoke(cli, ["run", "-c", str(_yaml(tmp_path)), "--output-dir", str(out),
                                    "--quiet"]).exit_code == 0
    spoil(out)
    result = CliRunner().invoke(cli, ["plot", str(out)])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert not (out / "report.html").exists()


def test_a_bad_output_path_is_one_line_and_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    assert CliRunner().invoke(cli, ["run", "-c", str(_yaml(tmp_path)), "--output-dir", str(out),
                                    "--quiet"]).exit_code == 0
    folder = CliRunner().invoke(cli, ["plot", str(out), "--output", str(tmp_path)])
    assert folder.exit_code == 2 and "is a folder" in folder.output
    missing = CliRunner().invoke(cli, ["plot", str(out), "--output", str(tmp_path / "no" / "r.html")])
    assert missing.exit_code == 2 and "its folder does not exist" in missing.output
    assert not list(tmp_path.glob("*.partial")) and not (tmp_path / "no").exists()
    gone = CliRunner().invoke(cli, ["plot", str(tmp_path / "nothere")])
    assert gone.exit_code == 2 and "no such folder" in gone.output
