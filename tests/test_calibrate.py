"""``simmodel calibrate``: recovering known parameter values from runs the simulator itself "measured"
with them, the held-out report, and calibrations that refuse to travel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from factories import make_scenario

from simmodel.calibrate.fit import Run, calibrate, load_runs, report, scenario_with
from simmodel.compare.definitions import samples, statistic
from simmodel.compare.table import simulated_scopes
from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError
from simmodel.sim import Simulation

pytest.importorskip("scipy")

ROOT = Path(__file__).resolve().parents[1]
IDENTITY = {"role": "aggregated", "model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "h100_sxm",
            "backend": "vllm", "weight_bytes": 2.0, "kv_bytes": 2.0, "tensor": 1, "attention_data": 1,
            "moe_tensor": 1, "moe_expert": 1, "pipeline": 1}
TRUTH = {"compute_efficiency": 0.55, "memory_efficiency": 0.7, "host_prefill_ms": 1.5, "host_decode_ms": 0.4}


def workload(prompt: int, output: int, clients: int, tensor: int = 1) -> dict:
    """Closed-loop clients on one vLLM worker of Llama-3.1-8B (H100) with the default timing; synchronous
    scheduling, so which requests share a pass never depends on how long passes take."""
    data = make_scenario(traffic={"source": {"type": "synthetic", "input_tokens": prompt, "output_tokens": output},
                                  "load": {"type": "concurrency", "concurrency": clients}, "stop": {"requests": 24}})
    role = data["engine"]["workers"]["aggregated"]
    role["timing"] = {"type": "default"}
    role["kv_cache"]["capacity"]["blocks"] = 4000
    role["parallelism"] = {"tensor": tensor}
    return data


# each parameter's field in a scenario's timing, written out here by hand (not with the code under test)
FIELDS = {"compute_efficiency": ("compute_efficiency",), "memory_efficiency": ("memory_efficiency",),
          "host_prefill_ms": ("host_overhead_ms", "prefill"), "host_decode_ms": ("host_overhead_ms", "decode"),
          "collective_latency_us": ("collective_latency_us",), "request_overhead_ms": ("request_overhead_ms",)}


def measure(scenario: Path, values: dict, out: Path) -> Path:
    """What vllm bench would have written for this run on a deployment whose true parameters are
    ``values``: the simulator's own run with them, in vllm bench's result format and definitions (the
    spreads too, which calibration must not fit)."""
    data = yaml.safe_load(scenario.read_text())
    timing = data["engine"]["workers"]["aggregated"]["timing"]
    for name, value in values.items():
        *outer, last = FIELDS[name]
        target = timing
        for key in outer:
            target = target.setdefault(key, {})
        target[last] = value
    sim = Simulation(parse_scenario(data, scenario.parent), keep_events=False)
    results = sim.run()
    scope = simulated_scopes(sim, results)[None]
    figures = {"duration": 1.0, "completed": len(results.requests), "failed": 0,
               "request_throughput": scope.request_throughput, "output_throughput": scope.output_throughput}
    for metric, definition in (("ttft", "ttft"), ("tpot", "tpot_per_request"), ("itl", "itl_pooled"),
                               ("e2el", "e2e")):
        values_, weights = samples(definition, scope)
        for stat in ("mean", "median", "p99", "std"):
            figures[f"{stat}_{metric}_ms"] = statistic(values_, weights, stat)
    out.write_text(json.dumps(figures))
    return out


def runs_file(tmp_path: Path, workloads: dict[str, dict], extra: dict | None = None, truth=TRUTH,
              truths: dict | None = None) -> Path:
    runs = []
    for name, data in workloads.items():
        scenario = tmp_path / f"{name}.yaml"
        scenario.write_text(yaml.safe_dump(data))
        run_truth = (truths or {}).get(name, truth)
        runs.append({"name": name, "scenario": scenario.name,
                     "measured": measure(scenario, run_truth, tmp_path / f"{name}.json").name})
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": runs, **(extra or {})}))
    return path


def test_calibration_recovers_known_parameters_within_one_percent(tmp_path):
    # prefill-heavy, decode-heavy and mixed runs separate compute from memory efficiency and the pass
    # overheads from both
    path = runs_file(tmp_path, {"long-prompts": workload(2000, 8, 2), "long-answers": workload(100, 200, 16),
                                "mixed": workload(1000, 50, 8)})
    plan = load_runs(path)
    assert [r.held_out for r in plan.runs] == [False, False, False]  # one deployment: nothing held out
    values = calibrate(plan, jobs=2)  # (two worker processes: the same values, test_worker_processes_change_...)
    for name, truth in TRUTH.items():
        assert values[name] == pytest.approx(truth, rel=0.01), name
    doc = report(plan, values)["calibration"]
    assert doc["mean_abs_error"]["fit"]["after_pct"] < 0.1 < doc["mean_abs_error"]["fit"]["before_pct"]
    assert doc["fitted_on"] == [{"role": "aggregated", "model": "meta-llama/Llama-3.1-8B-Instruct",
                                 "hardware": "h100_sxm", "backend": "vllm", "weight_bytes": 2.0, "kv_bytes": 2.0,
                                 "tensor": 1, "attention_data": 1, "moe_tensor": 1, "moe_expert": 1, "pipeline": 1}]
    assert doc["notes"] == []


def open_loop(prompt: int, output: int, rate: float) -> dict:
    """40 requests arriving at a constant rate (as inference-perf's constant load stages send them) on the same
    worker as ``workload``: which requests share a pass now depends on how long the passes take."""
    data = workload(prompt, output, 1)
    data["traffic"]["load"] = {"type": "constant_rate", "requests_per_second": rate}
    data["traffic"]["stop"] = {"requests": 40}
    return data


def test_calibration_on_open_loop_runs_recovers_the_passes_they_are_made_of(tmp_path):
    # Open loop, a figure steps each time a pass boundary crosses an arrival; a fit that measured its
    # derivatives over 0.01 % of each parameter stopped at a prefill host time of 14 ms and a compute
    # efficiency of 0.76 on these runs (true: 1.5 ms and 0.55), 8 % off the figures.
    path = runs_file(tmp_path, {"long-prompts": open_loop(2000, 8, 4), "long-answers": open_loop(100, 200, 4),
                                "mixed": open_loop(1000, 50, 4)})
    plan = load_runs(path)
    values = calibrate(plan, jobs=2)
    doc = report(plan, values)["calibration"]
    assert doc["mean_abs_error"]["fit"]["after_pct"] < 0.5 and doc["mean_abs_error"]["fit"]["before_pct"] > 10
    # What these runs pin down is the time of the passes they are made of, not each term on its own (a
    # host time per prefill pass matters little when most prompts share a pass with decodes, which
    # pays the mixed pass's host time): those passes, priced with the fitted and the true values, agree.
    from simmodel.perf.estimate import decode_pass_ms, prefill_pass_ms

    run = plan.runs[0]
    fitted_timing, true_timing = (Simulation(scenario_with(run, v)).pools["aggregated"][0].timing
                                  for v in (values, TRUTH))
    for tokens in (1000, 2000):
        assert prefill_pass_ms(fitted_timing, tokens, 1e6) == pytest.approx(prefill_pass_ms(true_timing, tokens, 1e6),
                                                                           rel=0.02), tokens
    for batch, context in ((1, 1050), (8, 200)):
        assert decode_pass_ms(fitted_timing, batch, context, 1e6) == pytest.approx(
            decode_pass_ms(true_timing, batch, context, 1e6), rel=0.01), (batch, context)
    assert values["compute_efficiency"] == pytest.approx(TRUTH["compute_efficiency"], rel=0.03)


def test_worker_processes_change_nothing_but_the_time(tmp_path):
    # every run is simulated on its own whichever process does it, and the rows come back in run order
    truth = {"memory_efficiency": 0.7}
    path = runs_file(tmp_path, {"answers": workload(100, 40, 8), "prompts": workload(1000, 8, 2),
                                "mixed": workload(500, 20, 4)}, extra={"parameters": list(truth)}, truth=truth)
    serial, parallel = load_runs(path), load_runs(path)
    assert calibrate(serial, jobs=1) == calibrate(parallel, jobs=2)
    assert [r.after for r in serial.runs] == [r.after for r in parallel.runs]


def test_run_pool_simulates_in_worker_processes_and_raises_their_errors_as_they_are(monkeypatch):
    import os

    from simmodel.calibrate import fit

    def fake(run, values):  # (the workers are forked after this is in place)
        if run == "bad":
            raise ScenarioError("runs[1]: bad input")
        return [{"pid": os.getpid(), "run": run, **values}]
    monkeypatch.setattr(fit, "simulate", fake)
    pool = fit.RunPool(["a", "b", "c"], jobs=2)
    try:
        rows = pool.rows({"x": 1.0})
    finally:
        pool.close()
    assert [r[0]["run"] for r in rows] == ["a", "b", "c"] and all(r[0]["x"] == 1.0 for r in rows)
    assert os.getpid() not in {r[0]["pid"] for r in rows}
    pool = fit.RunPool(["a", "bad"], jobs=2)
    try:
        with pytest.raises(ScenarioError, match=r"^runs\[1\]: bad input$"):  # (not another class: the same exit code)
            pool.rows({"x": 1.0})
    finally:
        pool.close()


def test_differences_step_from_the_value_or_its_floor_and_stop_at_a_bound():
    """f(x) = 2·x₀ + 3·x₁ at x = (0 ms, 0.5): x₀'s step is 0.1 × its floor of 1 ms = 0.1, one-sided since
    0 is its bound (points 0.1 and 0 itself); x₁'s is 0.1 × 0.5 = 0.05 each way (0.55 and 0.45). The
    Jacobian of a linear f is its coefficients, whatever the steps."""
    import numpy as np

    from simmodel.calibrate.fit import _Differences

    seen = []

    def f(x):
        seen.append(tuple(round(v, 12) for v in x))
        return np.array([2 * x[0] + 3 * x[1]])
    x0 = np.array([0.0, 0.5])
    diff = _Differences(f, x0, f(x0), np.array([1.0, 0.1]), np.array([0.0, 0.01]), np.array([100.0, 1.0]), 20)
    diff.step = 0.1
    assert diff.jacobian(x0) == pytest.approx(np.array([[2.0, 3.0]]))
    assert seen == [(0.0, 0.5), (0.1, 0.5), (0.0, 0.55), (0.0, 0.45)]


def test_a_fit_that_spends_its_budget_says_so(tmp_path, monkeypatch):
    from simmodel.calibrate import fit

    monkeypatch.setattr(fit, "EVALUATIONS_PER_PARAMETER", 3)  # the start, one Jacobian (2), then no more
    path = runs_file(tmp_path, {"answers": workload(100, 40, 8), "prompts": workload(1000, 8, 2)},
                     extra={"parameters": ["memory_efficiency"]}, truth={"memory_efficiency": 0.7})
    plan = load_runs(path)
    calibrate(plan)
    assert plan.notes[0] == "the fit used its 3 simulations of the fit runs (3 a parameter); the values are the best found"


def test_jobs_must_be_a_positive_count(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "simmodel.cli", "calibrate", "--runs", str(tmp_path / "r.yaml"),
                           "--output", str(tmp_path / "c.yaml"), "--jobs", "0"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip() == ("simmodel: Invalid value for '--jobs': 0 is not in the "
                                                            "range 1<=x<=256.")


def test_held_out_deployments_are_reported_and_a_calibration_does_not_travel(tmp_path):
    # the held-out run's deployment is slower (other true values): if it leaked into the fit, the fitted
    # values would move off the fit runs' truth
    fit_truth = {"compute_efficiency": 0.6, "memory_efficiency": 0.75}
    path = runs_file(tmp_path, {"tp1-long": workload(2000, 8, 2), "tp1-answers": workload(100, 200, 16),
                                "tp2-mixed": workload(1000, 50, 8, tensor=2)},
                     extra={"parameters": ["compute_efficiency", "memory_efficiency"], "holdout": ["tp2-mixed"]},
                     truth=fit_truth, truths={"tp2-mixed": {"compute_efficiency": 0.3, "memory_efficiency": 0.4}})
    out = tmp_path / "calibration.yaml"
    proc = subprocess.run([sys.executable, "-m", "simmodel.cli", "calibrate", "--runs", str(path), "--output",
                           str(out)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    cal = yaml.safe_load(out.read_text())["calibration"]
    assert cal["held_out_runs"] == ["tp2-mixed"] and cal["fit_runs"] == ["tp1-long", "tp1-answers"]
    for name, value in fit_truth.items():
        assert cal["parameters"][name] == pytest.approx(value, rel=0.01)
    assert cal["mean_abs_error"]["held_out"]["after_pct"] > 20  # that deployment really differs
    assert "far above the fit runs'" in cal["warning"] and "simmodel: warning:" in proc.stderr
    assert [d["tensor"] for d in cal["fitted_on"]] == [1]  # held-out deployments are not fitted on
    assert cal["mean_abs_error"]["held_out"]["after_pct"] is not None
    assert "held-out runs:" in proc.stdout
    # using it: on the deployment it was fitted on, its passes say calibrated
    data = workload(500, 20, 4)
    data["engine"]["workers"]["aggregated"]["timing"] = {"type": "default", "calibration": str(out)}
    res = Simulation(parse_scenario(data, tmp_path)).run()
    # only efficiencies were calibrated: the fixed time per pass is still the model's assumption
    assert set(res.passes.provenance) == {"calibrated:roofline+assumed-host"}
    assert res.summary["provenance_counts"] == {"assumed-host": len(res.passes), "calibrated:roofline": len(res.passes)}
    # on tensor 2 it is refused, unless allowed, and then marked transferred
    data["engine"]["workers"]["aggregated"]["parallelism"] = {"tensor": 2}
    with pytest.raises(ScenarioError, match="was fitted on the aggregated role of meta-llama/Llama-3.1-8B-Instruct "
                                            "on h100_sxm .vllm, .*tensor 1.*not on this one: .*tensor 2.*allow_transfer"):
        parse_scenario(data, tmp_path)
    data["engine"]["workers"]["aggregated"]["timing"]["allow_transfer"] = True
    res = Simulation(parse_scenario(data, tmp_path)).run()
    assert set(res.passes.provenance) == {"calibrated:roofline+assumed-host+transferred"}
    # and on another model or GPU too
    data["engine"]["workers"]["aggregated"]["timing"]["allow_transfer"] = False
    data["engine"]["workers"]["aggregated"]["parallelism"] = {"tensor": 1}
    data["engine"]["hardware"] = "h200_sxm"
    with pytest.raises(ScenarioError, match="not on this one: the aggregated role of "
                                            "meta-llama/Llama-3.1-8B-Instruct on h200_sxm"):
        parse_scenario(data, tmp_path)


def test_calibration_values_cannot_be_overridden_silently(tmp_path):
    cal = tmp_path / "cal.yaml"
    cal.write_text(yaml.safe_dump({"calibration": {"parameters": {"memory_efficiency": 0.5}, "fitted_on": [
        IDENTITY]}}))
    data = workload(100, 5, 1)
    data["engine"]["workers"]["aggregated"]["timing"] = {"type": "default", "calibration": "cal.yaml",
                                                         "memory_efficiency": 0.9}
    with pytest.raises(ScenarioError, match="timing.memory_efficiency: set by the calibration cal.yaml"):
        parse_scenario(data, tmp_path)
    del data["engine"]["workers"]["aggregated"]["timing"]["memory_efficiency"]
    data["engine"]["workers"]["aggregated"]["timing"]["compute_efficiency"] = 0.5  # not calibrated: allowed
    role = parse_scenario(data, tmp_path).engine.workers["aggregated"]
    assert role.timing.efficiency.memory == 0.5 and role.timing.efficiency.compute == 0.5
    # a calibrated frontend time per request is the engine's, and is not set again engine-wide
    cal.write_text(yaml.safe_dump({"calibration": {"parameters": {"request_overhead_ms": 6.5}, "fitted_on": [
        IDENTITY]}}))
    assert parse_scenario(data, tmp_path).engine.request_overhead_ms == 6.5
    data["engine"]["request_overhead_ms"] = 2.0
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data, tmp_path)
    assert str(err.value) == ("engine.request_overhead_ms: also set by engine.workers.aggregated.timing.calibration "
                              "(cal.yaml); set it in one place")
    cal.write_text("calibration: {parameters: {memory_efficiency: 7}, fitted_on: []}")
    with pytest.raises(ScenarioError, match="not a calibration file"):
        parse_scenario(data, tmp_path)


@pytest.mark.parametrize(("content", "message"), [
    ({"runs": []}, "runs: must be a non-empty list"),
    ({"runs": [{"scenario": "nope.yaml", "measured": "m.json"}]}, "runs[0].scenario: "),
    ({"runs": [{"scenario": "s.yaml", "measured": "m.json"}], "parameters": ["speed"]}, "parameters: must be"),
    ({"runs": [{"scenario": "s.yaml", "measured": "m.json"}], "holdout": ["s"]}, "holdout: leaves no run to fit"),
])
def test_bad_runs_files_are_one_line(tmp_path, content, message):
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(workload(100, 5, 1)))
    (tmp_path / "m.json").write_text(json.dumps({"duration": 1, "completed": 1, "mean_ttft_ms": 10.0}))
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(content))
    proc = subprocess.run([sys.executable, "-m", "simmodel.cli", "calibrate", "--runs", str(path), "--output",
                           str(tmp_path / "c.yaml")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "c.yaml").exists()


def test_collective_latency_is_a_named_parameter():
    """Tensor parallel 2 on Llama-3.1-8B: two all-reduces per layer, 32 layers, 64 a pass; raising each
    collective's latency from 5 to 15 µs adds 64 × 10 µs = 0.64 ms to a pass."""
    from simmodel.perf.estimate import decode_pass_ms
    from simmodel.perf.roofline import HostOverhead, RooflineTiming

    data = workload(100, 5, 1, tensor=2)
    deployment = parse_scenario(data, None).engine.workers["aggregated"].deployment
    five, fifteen = (RooflineTiming(deployment, host=HostOverhead(collective_us=us)) for us in (5.0, 15.0))
    assert decode_pass_ms(fifteen, 8, 1000, 1e6) - decode_pass_ms(five, 8, 1000, 1e6) == pytest.approx(0.64)
    # the default is H100's all-reduce as measured among 2 GPUs (ALL_REDUCE: 4.2 µs)
    assert deployment.hardware.system_id == "h100_sxm"
    measured = RooflineTiming(deployment, host=HostOverhead(collective_us=4.2))
    assert decode_pass_ms(RooflineTiming(deployment), 8, 1000, 1e6) == pytest.approx(decode_pass_ms(measured, 8, 1000, 1e6))


def test_calibration_recovers_a_collective_latency(tmp_path):
    truth = {"memory_efficiency": 0.7, "collective_latency_us": 12.0}
    path = runs_file(tmp_path, {"answers": workload(100, 120, 16, tensor=2), "prompts": workload(2000, 8, 2, tensor=2)},
                     extra={"parameters": list(truth)}, truth=truth)
    values = calibrate(load_runs(path))
    for name, value in truth.items():
        assert values[name] == pytest.approx(value, rel=0.01), name


def test_calibration_recovers_the_frontend_time_per_request(tmp_path):
    # open loop, a frontend time per request delays each request's arrival at the engine: every TTFT and E2E
    # is that much longer and nothing else moves, so the fit finds it whatever the passes
    truth = {"request_overhead_ms": 6.0}
    path = runs_file(tmp_path, {"mixed": open_loop(1000, 50, 4), "answers": open_loop(100, 120, 8)},
                     extra={"parameters": list(truth)}, truth=truth)
    plan = load_runs(path)
    values = calibrate(plan)
    assert values["request_overhead_ms"] == pytest.approx(6.0, rel=0.01)
    run = plan.runs[0]
    assert scenario_with(run, values).engine.request_overhead_ms == values["request_overhead_ms"]


def test_the_frontend_time_is_fitted_on_the_role_requests_reach_first(tmp_path):
    """P/D: the fitted value goes to the prefill role's timing (the decode role never receives a request),
    and an engine-wide value in the run's scenario gives way to it."""
    data = workload(100, 5, 1)
    data["engine"].update({"mode": "disaggregated", "kv_transfer": {"bandwidth_gb_per_second": 50},
                           "request_overhead_ms": 9.0,
                           "workers": {"prefill": {"timing": {"type": "default"}},
                                       "decode": {"timing": {"type": "default"}}}})
    scenario = tmp_path / "pd.yaml"
    scenario.write_text(yaml.safe_dump(data))
    run = Run("pd", scenario, [], None, ["prefill", "decode"], [])
    engine = scenario_with(run, {"request_overhead_ms": 4.0, "memory_efficiency": 0.7}).engine
    assert engine.request_overhead_ms == 4.0
    assert engine.workers["decode"].timing.efficiency.memory == 0.7 == engine.workers["prefill"].timing.efficiency.memory
    assert scenario_with(run, {"memory_efficiency": 0.7}).engine.request_overhead_ms == 9.0  # not fitted: its own


def test_a_prefill_role_priced_otherwise_keeps_the_runs_own_frontend_time(tmp_path):
    """P/D with the prefill role on fixed timing: the frontend time is the engine's own (9 ms) and no fitted
    value can replace it, so the run need not fit it and the fit leaves it in place."""
    from simmodel.calibrate.fit import _explicit_timing

    data = workload(100, 5, 1)
    data["engine"].update({"mode": "disaggregated", "kv_transfer": {"bandwidth_gb_per_second": 50},
                           "request_overhead_ms": 9.0,
                           "workers": {"prefill": {"timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}},
                                       "decode": {"timing": {"type": "default"}}}})
    scenario = tmp_path / "pd.yaml"
    scenario.write_text(yaml.safe_dump(data))
    assert _explicit_timing(data, ["decode"]) == []
    run = Run("pd", scenario, [], None, ["decode"], [])
    assert scenario_with(run, {"request_overhead_ms": 4.0, "memory_efficiency": 0.7}).engine.request_overhead_ms == 9.0


def test_parameters_of_parts_a_model_lacks_are_left_out_of_its_runs(tmp_path):
    """A dense run in a fit of moe_layer_us: its timing never gets the value (it would be refused there), and
    the fit says no run depends on it."""
    path = runs_file(tmp_path, {"dense": workload(100, 5, 1)},
                     extra={"parameters": ["memory_efficiency", "moe_layer_us"]}, truth={"memory_efficiency": 0.7})
    plan = load_runs(path)
    run = plan.runs[0]
    assert run.inapplicable == {"aggregated": ("expert_efficiency", "moe_layer_us", "block_fp8_gemm_us")}
    timing = scenario_with(run, {"memory_efficiency": 0.7, "moe_layer_us": 30.0}).engine.workers["aggregated"].timing
    from simmodel.perf.roofline import HostOverhead

    assert timing.efficiency.memory == 0.7
    assert timing.host.moe_layer_us == HostOverhead().moe_layer_us  # (the default, not 30)
    values = calibrate(plan)
    assert "moe_layer_us" not in values and values["memory_efficiency"] == pytest.approx(0.7, rel=0.01)
    assert "moe_layer_us: no fit run depends on it (left out of the calibration)" in plan.notes


def test_another_role_or_dtype_is_another_deployment(tmp_path):
    cal = tmp_path / "cal.yaml"
    cal.write_text(yaml.safe_dump({"calibration": {"parameters": {"memory_efficiency": 0.5}, "fitted_on": [IDENTITY]}}))
    data = workload(100, 5, 1)
    data["engine"]["workers"]["aggregated"]["timing"] = {"type": "default", "calibration": "cal.yaml"}
    data["engine"]["dtype"] = "fp8"
    with pytest.raises(ScenarioError, match="1-byte weights"):
        parse_scenario(data, tmp_path)
    data["engine"]["dtype"] = "auto"
    role = data["engine"]["workers"].pop("aggregated")
    data["engine"]["mode"] = "disaggregated"
    data["engine"]["workers"] = {"prefill": role, "decode": dict(role)}
    with pytest.raises(ScenarioError, match="not on this one: the prefill role"):
        parse_scenario(data, tmp_path)


def test_spreads_mismatched_runs_and_parameters_without_effect(tmp_path):
    workloads = {"long": workload(2000, 8, 2), "answers": workload(100, 200, 16)}
    # link efficiency and the collective latency do nothing on one GPU: left out, and said so
    path = runs_file(tmp_path, workloads, extra={"parameters": ["memory_efficiency", "link_efficiency"]},
                     truth={"memory_efficiency": 0.7})
    plan = load_runs(path)
    values = calibrate(plan)
    assert list(values) == ["memory_efficiency"] and values["memory_efficiency"] == pytest.approx(0.7, rel=0.01)
    assert plan.notes == ["link_efficiency: no fit run depends on it (left out of the calibration)"]
    # a measured file of another number of requests is not this scenario's run
    measured = json.loads((tmp_path / "long.json").read_text())
    (tmp_path / "long.json").write_text(json.dumps({**measured, "completed": 500}))
    with pytest.raises(ScenarioError, match="run long: the measured run sent 500 requests, the scenario 24"):
        calibrate(load_runs(path))


def test_cli_holdout_wins_over_the_file_and_bad_lists_are_refused(tmp_path):
    workloads = {"a": workload(2000, 8, 2), "b": workload(100, 200, 16), "c": workload(1000, 50, 8)}
    path = runs_file(tmp_path, workloads, extra={"holdout": ["a"], "parameters": ["memory_efficiency"]},
                     truth={"memory_efficiency": 0.7})
    assert [r.held_out for r in load_runs(path, "c").runs] == [False, False, True]
    assert [r.held_out for r in load_runs(path).runs] == [True, False, False]
    data = yaml.safe_load(path.read_text())
    data["holdout"] = [{"x": 1}]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError, match="holdout: a list of run names"):
        load_runs(path)
    data["holdout"], data["parameters"] = None, [["compute_efficiency"]]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError, match="parameters: must be a list of distinct names"):
        load_runs(path)


def test_a_run_that_fixes_a_parameter_it_does_not_fit_is_refused(tmp_path):
    data = workload(100, 5, 1)
    data["engine"]["workers"]["aggregated"]["timing"]["per_layer_us"] = 0
    path = runs_file(tmp_path, {"x": data}, extra={"parameters": ["memory_efficiency"]},
                     truth={"memory_efficiency": 0.7})
    with pytest.raises(ScenarioError, match="run x: per_layer_us is set in its scenario but not fitted"):
        load_runs(path)


def test_a_hand_edited_calibration_file_is_checked(tmp_path):
    cal = tmp_path / "cal.yaml"
    cal.write_text(yaml.safe_dump({"calibration": {"parameters": {"memory_efficiency": 0.5},
                                                   "fitted_on": [{**IDENTITY, "weight_bytes": "two"}]}}))
    data = workload(100, 5, 1)
    data["engine"]["workers"]["aggregated"]["timing"] = {"type": "default", "calibration": "cal.yaml"}
    with pytest.raises(ScenarioError, match=r"calibration.fitted_on\[0\].weight_bytes: must be a positive number"):
        parse_scenario(data, tmp_path)


def test_the_calibration_file_is_an_ordinary_file(tmp_path):
    import os
    import stat

    from simmodel.calibrate.fit import write_calibration

    out = tmp_path / "c.yaml"
    old = os.umask(0o022)
    try:
        write_calibration(out, {"calibration": {}})
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
