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

from simmodel.calibrate.fit import calibrate, load_runs, report, scenario_with
from simmodel.compare.definitions import samples, statistic
from simmodel.compare.table import simulated_scopes
from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError
from simmodel.sim import Simulation

pytest.importorskip("scipy")

ROOT = Path(__file__).resolve().parents[1]
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


def measure(scenario: Path, values: dict, out: Path) -> Path:
    """What vllm bench would have written for this run on a deployment whose true parameters are
    ``values``: the simulator's own run with them, in vllm bench's result format and definitions."""
    from simmodel.calibrate.fit import Run

    run = Run("x", scenario, [], None, ["aggregated"], [])
    sim = Simulation(scenario_with(run, values), keep_events=False)
    results = sim.run()
    scope = simulated_scopes(sim, results)[None]
    figures = {"duration": 1.0, "completed": len(results.requests),
               "request_throughput": scope.request_throughput, "output_throughput": scope.output_throughput}
    for metric, definition in (("ttft", "ttft"), ("tpot", "tpot_per_request"), ("itl", "itl_pooled"),
                               ("e2el", "e2e")):
        values_, weights = samples(definition, scope)
        for stat in ("mean", "median", "p99"):
            figures[f"{stat}_{metric}_ms"] = statistic(values_, weights, stat)
    out.write_text(json.dumps(figures))
    return out


def runs_file(tmp_path: Path, workloads: dict[str, dict], extra: dict | None = None, truth=TRUTH) -> Path:
    runs = []
    for name, data in workloads.items():
        scenario = tmp_path / f"{name}.yaml"
        scenario.write_text(yaml.safe_dump(data))
        runs.append({"name": name, "scenario": scenario.name,
                     "measured": measure(scenario, truth, tmp_path / f"{name}.json").name})
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
    values = calibrate(plan)
    for name, truth in TRUTH.items():
        assert values[name] == pytest.approx(truth, rel=0.01), name
    doc = report(plan, values)["calibration"]
    assert doc["mean_abs_error"]["fit"]["after_pct"] < 0.1 < doc["mean_abs_error"]["fit"]["before_pct"]
    assert doc["fitted_on"] == [{"model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "h100_sxm",
                                 "backend": "vllm", "tensor": 1, "attention_data": 1, "moe_tensor": 1,
                                 "moe_expert": 1, "pipeline": 1}]


def test_held_out_deployments_are_reported_and_a_calibration_does_not_travel(tmp_path):
    path = runs_file(tmp_path, {"tp1-long": workload(2000, 8, 2), "tp1-answers": workload(100, 200, 16),
                                "tp2-mixed": workload(1000, 50, 8, tensor=2)},
                     extra={"parameters": ["compute_efficiency", "memory_efficiency"], "holdout": ["tp2-mixed"]})
    out = tmp_path / "calibration.yaml"
    proc = subprocess.run([sys.executable, "-m", "simmodel.cli", "calibrate", "--runs", str(path), "--output",
                           str(out)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    cal = yaml.safe_load(out.read_text())["calibration"]
    assert cal["held_out_runs"] == ["tp2-mixed"] and cal["fit_runs"] == ["tp1-long", "tp1-answers"]
    assert [d["tensor"] for d in cal["fitted_on"]] == [1]  # held-out deployments are not fitted on
    assert cal["mean_abs_error"]["held_out"]["after_pct"] is not None
    assert "held-out runs:" in proc.stdout
    # using it: on the deployment it was fitted on, its passes say calibrated
    data = workload(500, 20, 4)
    data["engine"]["workers"]["aggregated"]["timing"] = {"type": "default", "calibration": str(out)}
    res = Simulation(parse_scenario(data, tmp_path)).run()
    assert set(res.passes.provenance) == {"calibrated:roofline"}
    assert res.summary["provenance_counts"] == {"calibrated:roofline": len(res.passes)}
    # on tensor 2 it is refused, unless allowed, and then marked transferred
    data["engine"]["workers"]["aggregated"]["parallelism"] = {"tensor": 2}
    with pytest.raises(ScenarioError, match="was fitted on meta-llama/Llama-3.1-8B-Instruct on h100_sxm .vllm, "
                                            "tensor 1.*not on this role's .*tensor 2.*allow_transfer"):
        parse_scenario(data, tmp_path)
    data["engine"]["workers"]["aggregated"]["timing"]["allow_transfer"] = True
    res = Simulation(parse_scenario(data, tmp_path)).run()
    assert set(res.passes.provenance) == {"calibrated:roofline+transferred"}
    # and on another model or GPU too
    data["engine"]["workers"]["aggregated"]["timing"]["allow_transfer"] = False
    data["engine"]["workers"]["aggregated"]["parallelism"] = {"tensor": 1}
    data["engine"]["hardware"] = "h200_sxm"
    with pytest.raises(ScenarioError, match="not on this role's meta-llama/Llama-3.1-8B-Instruct on h200_sxm"):
        parse_scenario(data, tmp_path)


def test_calibration_values_cannot_be_overridden_silently(tmp_path):
    cal = tmp_path / "cal.yaml"
    cal.write_text(yaml.safe_dump({"calibration": {"parameters": {"memory_efficiency": 0.5}, "fitted_on": [
        {"model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "h100_sxm", "backend": "vllm", "tensor": 1,
         "attention_data": 1, "moe_tensor": 1, "moe_expert": 1, "pipeline": 1}]}}))
    data = workload(100, 5, 1)
    data["engine"]["workers"]["aggregated"]["timing"] = {"type": "default", "calibration": "cal.yaml",
                                                         "memory_efficiency": 0.9}
    with pytest.raises(ScenarioError, match="timing.memory_efficiency: set by the calibration cal.yaml"):
        parse_scenario(data, tmp_path)
    del data["engine"]["workers"]["aggregated"]["timing"]["memory_efficiency"]
    data["engine"]["workers"]["aggregated"]["timing"]["compute_efficiency"] = 0.5  # not calibrated: allowed
    role = parse_scenario(data, tmp_path).engine.workers["aggregated"]
    assert role.timing.efficiency.memory == 0.5 and role.timing.efficiency.compute == 0.5
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
    # the registry's own latency (5 µs over NVLink) is the default
    assert decode_pass_ms(RooflineTiming(deployment), 8, 1000, 1e6) == pytest.approx(decode_pass_ms(five, 8, 1000, 1e6))


def test_calibration_recovers_a_collective_latency(tmp_path):
    truth = {"memory_efficiency": 0.7, "collective_latency_us": 12.0}
    path = runs_file(tmp_path, {"answers": workload(100, 120, 16, tensor=2), "prompts": workload(2000, 8, 2, tensor=2)},
                     extra={"parameters": list(truth)}, truth=truth)
    values = calibrate(load_runs(path))
    for name, value in truth.items():
        assert values[name] == pytest.approx(value, rel=0.01), name
