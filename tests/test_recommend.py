"""``simmodel recommend``: domains, the search space, pre-simulation rejections, ranking, the ledger and
the saved scenarios, on a search whose answer is derived by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simmodel.config.domains import domain_values, find_domains
from simmodel.errors import ScenarioError
from simmodel.perf.models import MODELS
from simmodel.recommend.space import default_shapes

ROOT = Path(__file__).resolve().parents[1]


def simmodel(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simmodel.cli", *args], cwd=ROOT, capture_output=True, text=True)


def search(**changes) -> dict:
    """Four requests sent at once (closed loop of 4), 100-token prompts, 3 output tokens, fixed timing of
    10 ms a prefill pass and 10 ms a decode pass, synchronous scheduling; replicas × max_sequences searched.

    By hand, per candidate (mean e2e over the 4 requests):
    - 1 worker, 4 sequences: one prefill pass for all (0–10 ms, first tokens), two decode passes: 30 ms each;
    - 2 workers, 4 sequences: two requests each, the same: 30 ms (2 GPUs, so it ranks after the 1-GPU tie);
    - 2 workers, 1 sequence: each worker serves its two requests one after the other, 3 passes each: 30
      and 60 ms, mean 45;
    - 1 worker, 1 sequence: 30, 60, 90, 120 ms, mean 75.
    """
    data = {
        "engine": {"model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "h100_sxm", "workers": {"aggregated": {
            "parallelism": {"preset": False, "replicas": {"choices": [1, 2]}},
            "scheduler": {"max_batched_tokens": 8192, "max_sequences": {"choices": [1, 4]},
                          "async_scheduling": False},
            "timing": {"type": "fixed", "prefill_ms": 10, "decode_ms": 10}}}},
        "traffic": {"source": {"type": "synthetic", "input_tokens": 100, "output_tokens": 3},
                    "load": {"type": "concurrency", "concurrency": 4}, "stop": {"requests": 4}},
        "optimization": {"target": "e2e_latency"},
        "optimizer": {"parallelism": 1},
    }
    for key, value in changes.items():
        data[key] = value
    return data


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_best_candidate_is_the_one_derived_by_hand(tmp_path):
    out = tmp_path / "out"
    proc = simmodel("recommend", "-c", str(write(tmp_path, search())), "--output-dir", str(out), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    ledger = json.loads((out / "recommendation.json").read_text())
    by_id = {e["id"]: e for e in ledger["candidates"]}
    # grid order: replicas slowest, then max_sequences
    choices = [(e["choices"]["engine.workers.aggregated.parallelism.replicas"],
                e["choices"]["engine.workers.aggregated.scheduler.max_sequences"]) for e in ledger["candidates"]]
    assert choices == [(1, 1), (1, 4), (2, 1), (2, 4)]
    assert [by_id[i]["metrics"]["mean_e2e_ms"] for i in (1, 2, 3, 4)] == pytest.approx([75, 30, 45, 30])
    assert ledger["ranked"] == [2, 4, 3, 1]
    assert sorted(p.name for p in (out / "recommendations").iterdir()) == ["0001.yaml", "0002.yaml", "0003.yaml",
                                                                           "0004.yaml"]
    assert json.loads(proc.stdout)["ranked"][0]["id"] == 2
    assert proc.stderr == ""  # no progress bar when stderr is not a terminal


def test_the_saved_best_scenario_reruns_to_the_same_metrics(tmp_path):
    out = tmp_path / "out"
    assert simmodel("recommend", "-c", str(write(tmp_path, search())), "--output-dir", str(out)).returncode == 0
    best = json.loads((out / "recommendation.json").read_text())["candidates"][1]
    proc = simmodel("run", "-c", str(out / "recommendations" / "0001.yaml"), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["e2e_latency_ms"]["mean"] == pytest.approx(best["metrics"]["mean_e2e_ms"], abs=1e-9)
    assert summary["output_throughput_tok_s"] == best["metrics"]["output_throughput_tok_s"]
    assert summary["gpu_count"] == best["metrics"]["gpu_count"]


def test_a_saved_candidate_carries_the_searchs_sla_and_reports_its_goodput(tmp_path):
    """strict_sla with e2e_ms 40: the saved best (1 worker × 4 sequences, every request done at 30 ms, see
    ``search``) carries that bound with the attainment the search required (1, strict), and a run of it
    reports all 4 requests good over the 30 ms run: goodput 4 / 0.03 s = 133.3 req/s, attainment 1, met."""
    data = search(evaluation={"sla": {"e2e_ms": 40}}, optimization={"target": "e2e_latency", "strict_sla": True})
    out = tmp_path / "out"
    assert simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(out)).returncode == 0
    saved = yaml.safe_load((out / "recommendations" / "0001.yaml").read_text())
    assert saved["evaluation"] == {"sla": {"e2e_ms": 40, "attainment": 1.0}}
    assert "optimization" not in saved and "optimizer" not in saved
    proc = simmodel("run", "-c", str(out / "recommendations" / "0001.yaml"), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    sla = json.loads(proc.stdout)["sla"]
    assert sla["sla_attainment"] == 1.0 and sla["required_attainment"] == 1.0 and sla["sla_met"] is True
    assert sla["goodput_rps"] == pytest.approx(4 / 0.030)


def test_sla_and_gpu_budget_reject_candidates_with_their_reason(tmp_path):
    data = search(evaluation={"sla": {"e2e_ms": 40}},
                  optimization={"target": "e2e_latency", "strict_sla": True, "constraints": {"max_candidate_gpus": 1}})
    out = tmp_path / "out"
    assert simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(out)).returncode == 0
    entries = json.loads((out / "recommendation.json").read_text())["candidates"]
    # 1 worker × 1 sequence: requests at 60, 90, 120 ms miss 40 ms; 2 workers: 2 GPUs over the budget of 1
    assert [(e["status"], e["reason_category"]) for e in entries] == [
        ("infeasible", "sla"), ("feasible", None), ("infeasible", "gpu_budget"), ("infeasible", "gpu_budget")]
    assert entries[2]["metrics"] is None  # rejected before simulating
    assert [e["gpu_count"] for e in entries] == [1, 1, 2, 2]


@pytest.mark.parametrize("sla, expected", [
    # E2E ≤ 40 ms, by hand (search()): 1×1: 30, 60, 90, 120 → 25 % good; 1×4: all 30 → 100 %;
    # 2×1: 30, 60, 30, 60 → 50 %; 2×4: 100 %.
    ({"e2e_ms": 40}, ["sla", None, "sla", None]),                     # 0.9 required by default
    ({"e2e_ms": 40, "attainment": 0.5}, ["sla", None, None, None]),   # 50 % meets 0.5
])
def test_a_candidate_is_feasible_only_when_attainment_meets_the_required_fraction(tmp_path, sla, expected):
    data = search(evaluation={"sla": sla}, optimization={"target": "goodput_per_gpu"})
    out = tmp_path / "out"
    assert simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(out)).returncode == 0
    entries = json.loads((out / "recommendation.json").read_text())["candidates"]
    assert [e["reason_category"] for e in entries] == expected
    assert [e["metrics"]["sla_attainment"] for e in entries] == [0.25, 1.0, 0.5, 1.0]
    required = sla.get("attainment", 0.9)
    assert entries[0]["reason"] == (f"25.0% of completed requests met every SLA bound, below the {required:.1%} "
                                    f"required (evaluation.sla.attainment)")


def test_strict_sla_contradicting_attainment_is_refused(tmp_path):
    data = search(evaluation={"sla": {"e2e_ms": 40, "attainment": 0.9}},
                  optimization={"target": "e2e_latency", "strict_sla": True})
    proc = simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "optimization.strict_sla: asks every completed request to meet the SLA, but evaluation.sla.attainment " \
           "is 0.9; give one of them" in proc.stderr


def test_validate_checks_a_search_without_simulating(tmp_path):
    """search(): 2 replica counts × 2 sequence limits = 4 candidates; with at most 1 GPU the two 2-replica
    candidates are rejected before simulation (gpu_budget), as recommend rejects them."""
    proc = simmodel("validate", "-c", str(write(tmp_path, search())))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith(": ok, grid search of 4 candidates (0 rejected before simulation)")
    data = search(optimization={"target": "e2e_latency", "constraints": {"max_candidate_gpus": 1}})
    proc = simmodel("validate", "-c", str(write(tmp_path, data)))
    assert proc.stdout.strip().endswith("(2 rejected before simulation: 2 gpu_budget)"), proc.stderr


@pytest.mark.parametrize("field, choices, message", [
    ("max_sequences", [1, 0], "scheduler.max_sequences: choice 0: must be a positive integer, got 0"),
    ("max_batched_tokens", [8192, "lots"], "scheduler.max_batched_tokens: choice \"lots\": must be a positive "
                                           "integer, got 'lots'"),
])
def test_validate_refuses_a_bad_choice_with_one_line(tmp_path, field, choices, message):
    data = search()
    data["engine"]["workers"]["aggregated"]["scheduler"][field] = {"choices": choices}
    proc = simmodel("validate", "-c", str(write(tmp_path, data)))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"simmodel: search.yaml: engine.workers.aggregated.{message}\n"


def test_nothing_feasible_exits_1_and_still_writes_the_ledger(tmp_path):
    data = search(optimization={"target": "e2e_latency", "constraints": {"min_candidate_gpus": 8}})
    out = tmp_path / "out"
    proc = simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(out))
    assert proc.returncode == 1
    assert "0 feasible" in proc.stdout
    assert len(json.loads((out / "recommendation.json").read_text())["candidates"]) == 4


def test_run_rejects_search_fields_with_one_line(tmp_path):
    proc = simmodel("run", "-c", str(write(tmp_path, search())))
    assert proc.returncode == 2
    assert "optimization: read by `simmodel recommend` only" in proc.stderr
    data = search()
    del data["optimization"], data["optimizer"]
    data["engine"]["workers"]["aggregated"]["parallelism"] = {"replicas": {"choices": [1, 2]}}
    proc = simmodel("run", "-c", str(write(tmp_path, data)))
    assert proc.returncode == 2
    assert "engine.workers.aggregated.parallelism.replicas: a search domain" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_domain_values():
    assert domain_values("x", {"range": {"min": 1, "max": 10, "step": 3}}) == [1, 4, 7, 10]
    assert domain_values("x", {"range": {"min": 1, "max": 40, "scale": "log"}}) == [1, 2, 4, 8, 16, 32]
    assert domain_values("x", {"range": {"min": 0.5, "max": 1.0, "step": 0.25}}) == [0.5, 0.75, 1.0]
    assert domain_values("x", {"choices": [{"a": 1}, {"a": 2}]}) == [{"a": 1}, {"a": 2}]
    for bad, rule in (({"choices": []}, "non-empty"), ({"choices": [1, 1]}, "distinct"),
                      ({"range": {"min": 5, "max": 1}}, "at least min"), ({"range": {"min": 0, "max": 4, "scale": "log"}},
                                                                          "positive on a log scale"),
                      ({"range": {"min": 0.5, "max": 2}}, "step: required"),
                      # Numbers of more digits than Python turns into text are refused by name, not a ValueError.
                      ({"range": {"min": 16**5000, "max": 2}}, "min: must be a number, got a value too large"),
                      ({"range": {"min": 1, "max": 2, "scale": 16**5000}}, "scale: must be one of linear, log, got a"),
                      ({"range": {"min": 1, "max": 2, "step": 16**5000}}, "step: must be a positive number, got a")):
        with pytest.raises(ScenarioError, match=rule):
            domain_values("x", bad)
    assert find_domains({"a": {"b": [1, {"choices": [1]}]}, "c": {"range": {"min": 1, "max": 2}}}) == [
        ("a.b[1]", {"choices": [1]}), ("c", {"range": {"min": 1, "max": 2}})]


def test_default_shapes_follow_the_models_heads_and_experts():
    # Llama-3.1-8B: 32 heads, 8 KV heads: tensor 1–16 all valid (16 is a multiple of 8); dense, so DP 1.
    assert default_shapes(MODELS["meta-llama/Llama-3.1-8B-Instruct"]) == [
        {"tensor": t, "attention_data": 1} for t in (1, 2, 4, 8, 16)]
    # Qwen3-30B-A3B: 32 heads, 4 KV heads, 128 experts: every (tensor, DP) split of 1–16 GPUs, experts
    # tensor-sharded or spread over the GPUs by expert parallelism.
    moe = MODELS["Qwen/Qwen3-30B-A3B"]
    shapes = default_shapes(moe)
    assert {"tensor": 1, "attention_data": 1, "moe_tensor": 1, "moe_expert": 1} in shapes
    assert {"tensor": 2, "attention_data": 4, "moe_tensor": 1, "moe_expert": 8} in shapes
    assert {"tensor": 2, "attention_data": 4, "moe_tensor": 8, "moe_expert": 1} in shapes
    assert len(shapes) == 1 + 2 * (2 + 3 + 4 + 5)  # splits per GPU count: 1, 2, 3, 4, 5


@pytest.mark.parametrize(("change", "message"), [
    ({"model": {"choices": ["a", "b"]}}, "engine.model: one per search"),
    ({"workers": {"aggregated": {"parallelism": 5}}}, "engine.workers.aggregated.parallelism: must be a mapping"),
    ({"workers": {"aggregated": {"scheduler": [1]}}}, "engine.workers.aggregated.scheduler: must be a mapping"),
])
def test_bad_search_input_is_one_line_and_exit_2(tmp_path, change, message):
    data = search()
    data["engine"].update(change)
    proc = simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def ledger_of(out: Path) -> dict:
    return json.loads((out / "recommendation.json").read_text())


def choice_pairs(ledger: dict) -> list[tuple]:
    return [(e["choices"]["engine.workers.aggregated.parallelism.replicas"],
             e["choices"]["engine.workers.aggregated.scheduler.max_sequences"]) for e in ledger["candidates"]]


def test_pareto_front_by_hand():
    from simmodel.recommend.search import pareto_front, rank
    from simmodel.recommend.spec import parse_search

    # (per-GPU, per-user) throughput: a=(400, 50) b=(300, 80) c=(300, 60) (b beats it on per-user)
    # d=(100, 80) (b beats it on per-GPU) e=(400, 50) (a's twin: neither dominates the other).
    points = {1: (400, 50), 2: (300, 80), 3: (300, 60), 4: (100, 80), 5: (400, 50)}
    entries = [{"id": i, "status": "feasible", "metrics": {"gpu_count": 2 if i == 1 else 1},
                "objectives": {"output_throughput_per_gpu": g, "throughput_per_user": u}}
               for i, (g, u) in points.items()]
    spec = parse_search({"optimization": {"target": "pareto"}})
    assert [e["id"] for e in pareto_front(entries, spec.objectives)] == [1, 2, 5]
    # by per-GPU throughput, then fewer GPUs (5 before 1), then candidate order
    assert [e["id"] for e in rank(entries, spec)] == [5, 1, 2]


def test_pareto_search_saves_the_front(tmp_path):
    # Per candidate, 12 output tokens over the run's duration (the last finish, from the hand derivation in
    # search()): (1 worker, 1 seq) 12/0.120 s = 100 tok/s on 1 GPU; (1, 4) 12/0.030 = 400; (2, 1) 12/0.060/2
    # GPUs = 100; (2, 4) 12/0.030/2 = 200. Every decode pass is 10 ms alone, so every request's TPOT is 10
    # ms: 100 tok/s per user everywhere, and (1, 4) dominates the rest.
    out = tmp_path / "out"
    proc = simmodel("recommend", "-c", str(write(tmp_path, search(optimization={"target": "pareto"}))),
                    "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    ledger = ledger_of(out)
    assert [e["objectives"]["output_throughput_per_gpu"] for e in ledger["candidates"]] == pytest.approx(
        [100, 400, 100, 200])
    assert [e["objectives"]["throughput_per_user"] for e in ledger["candidates"]] == pytest.approx([100] * 4)
    assert ledger["ranked"] == [2]
    assert [p.name for p in (out / "recommendations").iterdir()] == ["0001.yaml"]
    assert "Pareto front" in proc.stdout


def bigger_search(**optimizer) -> dict:
    """A 3 × 4 × 2 space (replicas × max_sequences × decode cost) of the four-request search."""
    data = search(optimizer={"parallelism": 1, **optimizer})
    role = data["engine"]["workers"]["aggregated"]
    role["parallelism"]["replicas"] = {"range": {"min": 1, "max": 3}}
    role["scheduler"]["max_sequences"] = {"range": {"min": 1, "max": 8, "scale": "log"}}
    role["timing"]["decode_ms"] = {"choices": [10, 20]}
    return data


def test_bayesian_search_is_repeatable_and_covers_the_space_when_the_budget_allows(tmp_path):
    pytest.importorskip("optuna")
    from simmodel.recommend.executor import LocalExecutor
    from simmodel.recommend.search import load_search, rank, run_search

    path = write(tmp_path, bigger_search(algorithm="bayesian", max_trials=24, seed=3, parallelism=2))
    spec, space, base = load_search(path)
    one, interrupted = run_search(spec, space, base, LocalExecutor(1))
    two, _ = run_search(spec, space, base, LocalExecutor(2))
    assert not interrupted
    # the same seed and round size give the same candidates in the same order on 1 or 2 processes
    assert json.dumps(one) == json.dumps(two)
    # max_trials covers the whole space: every combination once, and the best by hand: 1 worker (fewest
    # GPUs) holding all 4 requests (max_sequences 4 or 8, which tie; 4 comes first) at 10 ms a decode pass:
    # e2e 30 ms, as in search().
    everything = {json.dumps(space.candidate(0, n).choices) for n in range(space.size)}
    assert len(one) == space.size == 24 and {json.dumps(e["choices"]) for e in one} == everything
    best = rank(one, spec)[0]
    assert best["metrics"]["mean_e2e_ms"] == pytest.approx(30)
    assert best["metrics"]["gpu_count"] == 1
    # a smaller budget: exactly max_trials distinct candidates
    spec, space, base = load_search(write(tmp_path, bigger_search(algorithm="bayesian", max_trials=5, seed=3)))
    few, _ = run_search(spec, space, base, LocalExecutor(1))
    assert len(few) == 5 and len({json.dumps(e["choices"]) for e in few}) == 5


def test_ctrl_c_keeps_the_ledger_of_what_finished(tmp_path):
    from simmodel.recommend.executor import LocalExecutor
    from simmodel.recommend.search import load_search, run_search

    spec, space, base = load_search(write(tmp_path, bigger_search()))
    seen = []

    def interrupt_after_two(entry):
        seen.append(entry["id"])
        if len(seen) == 2:
            raise KeyboardInterrupt

    entries, interrupted = run_search(spec, space, base, LocalExecutor(2), interrupt_after_two)
    assert interrupted
    assert sorted(e["id"] for e in entries) == sorted(seen)


def test_ctrl_c_on_the_command_line(tmp_path):
    import os
    import signal
    import time

    data = bigger_search(parallelism=2)
    # about 2.5 s a candidate here, 24 of them: far from done after 4 s even on a machine several times faster
    data["traffic"]["stop"] = {"requests": 20000}
    data["traffic"]["load"]["concurrency"] = 64
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "simmodel.cli", "recommend", "-c", str(write(tmp_path, data)),
                             "--output-dir", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    time.sleep(4)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted after" in stderr and len(stderr.strip().splitlines()) == 1
    ledger = ledger_of(out)
    assert ledger["interrupted"] is True
    assert len(ledger["candidates"]) < 24  # those that finished (maybe none on a slow machine)
    assert all(e["status"] == "feasible" for e in ledger["candidates"])


def test_failures_and_timeouts_are_recorded_and_the_search_goes_on(tmp_path):
    data = search(optimizer={"parallelism": 1, "candidate_timeout_seconds": 0.5})
    data["traffic"]["stop"] = {"requests": {"choices": [4, 400000]}}
    data["engine"]["workers"]["aggregated"]["parallelism"]["replicas"] = 1
    # a pass limit of 2 stops the run with an error (a four-request run needs 3 passes or more)
    data["limits"] = {"max_passes": {"choices": [100000, 2]}}
    out = tmp_path / "out"
    proc = simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    # grid order: the saved YAML's key order (limits before traffic), max_sequences varying slowest
    statuses = [(e["choices"]["limits.max_passes"], e["choices"]["traffic.stop.requests"], e["status"],
                 e["reason_category"]) for e in ledger_of(out)["candidates"]]
    assert statuses == [(100000, 4, "feasible", None), (100000, 400000, "timed_out", "timeout"),
                        (2, 4, "failed", "simulation"), (2, 400000, "failed", "simulation")] * 2


def test_local_and_ray_executors_write_identical_ledgers(tmp_path):
    pytest.importorskip("ray")
    outs = {}
    for executor in ("local", "ray"):
        outs[executor] = tmp_path / executor
        data = search(optimizer={"parallelism": 2})
        proc = simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(outs[executor]),
                        "--executor", executor)
        assert proc.returncode == 0, proc.stderr
    assert (outs["local"] / "recommendation.json").read_bytes() == (outs["ray"] / "recommendation.json").read_bytes()
    assert (outs["local"] / "recommendation.csv").read_bytes() == (outs["ray"] / "recommendation.csv").read_bytes()
    assert ledger_of(outs["ray"])["ranked"] == [2, 4, 3, 1]


def test_bad_executor_is_one_line(tmp_path):
    proc = simmodel("recommend", "-c", str(write(tmp_path, search())), "--output-dir", str(tmp_path / "o"),
                    "--executor", "spark")
    assert proc.returncode == 2
    assert "--executor: must be local, ray or ray=ADDRESS" in proc.stderr


def disaggregated_search(prefill_limit: dict | int, decode_limit: int) -> dict:
    """Prompts of 100–300 tokens and outputs of 3–20: the longest request needs 301 tokens of prefill
    context (prompt and first token) and 320 of decode context."""
    data = search()
    data["engine"] = {"mode": "disaggregated", "model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "h100_sxm",
                      "workers": {role: {"parallelism": {"preset": False}, "context_length": limit,
                                         "scheduler": {"max_batched_tokens": 8192, "max_sequences": 4},
                                         "timing": {"type": "fixed", "prefill_ms": 10, "decode_ms": 10}}
                                  for role, limit in (("prefill", prefill_limit), ("decode", decode_limit))}}
    data["traffic"]["source"] = {"type": "synthetic", "input_tokens": {"distribution": "uniform", "min": 100, "max": 300},
                                 "output_tokens": {"distribution": "uniform", "min": 3, "max": 20}}
    return data


def test_explicit_context_limits_must_hold_the_longest_synthetic_request(tmp_path):
    out = tmp_path / "out"
    data = disaggregated_search({"choices": [300, 301]}, 320)
    assert simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(out)).returncode == 0
    entries = ledger_of(out)["candidates"]
    assert [(e["status"], e["reason_category"]) for e in entries] == [("infeasible", "context_limit"),
                                                                      ("feasible", None)]
    assert "prefill.context_length: 300 is below the longest synthetic request's input + 1 (301)" in entries[0]["reason"]
    data = disaggregated_search(301, 319)
    assert simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(out),
                    "--overwrite").returncode == 1
    assert "decode.context_length: 319 is below the longest synthetic request's input + output (320)" in \
        ledger_of(out)["candidates"][0]["reason"]


def test_an_aggregated_search_takes_the_engines_context_length(tmp_path):
    data = search()
    data["engine"]["workers"]["aggregated"]["context_length"] = 4096
    proc = simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "engine.workers.aggregated.context_length: an aggregated search takes its limit from " \
           "engine.context_length" in proc.stderr


def test_nsga2_pareto_search_is_repeatable(tmp_path):
    pytest.importorskip("optuna")
    from simmodel.recommend.executor import LocalExecutor
    from simmodel.recommend.search import load_search, rank, run_search

    data = bigger_search(algorithm="bayesian", max_trials=10, seed=1)
    data["optimization"] = {"target": "pareto"}
    spec, space, base = load_search(write(tmp_path, data))
    first, _ = run_search(spec, space, base, LocalExecutor(1))
    again, _ = run_search(spec, space, base, LocalExecutor(2))
    assert json.dumps(first) == json.dumps(again)
    assert len({json.dumps(e["choices"]) for e in first}) == 10
    # the ranked front: feasible, none beaten by another feasible candidate, best throughput per GPU first
    ranked = rank(first, spec)
    feasible = [e for e in first if e["status"] == "feasible"]
    for e in ranked:
        g, u = (e["objectives"][k] for k in ("output_throughput_per_gpu", "throughput_per_user"))
        assert not any(f["objectives"]["output_throughput_per_gpu"] > g * (1 + 1e-9)
                       and f["objectives"]["throughput_per_user"] > u * (1 + 1e-9) for f in feasible)
    per_gpu = [e["objectives"]["output_throughput_per_gpu"] for e in ranked]
    assert ranked and per_gpu == sorted(per_gpu, reverse=True)


def test_the_progress_bar_counts_candidates_feasible_and_best():
    import io

    from simmodel.recommend.progress import SearchProgress
    from simmodel.recommend.spec import parse_search

    stream = io.StringIO()
    bar = SearchProgress(parse_search({"optimization": {"target": "e2e_latency"}}), total=3, stream=stream, tty=True)
    bar({"status": "feasible", "objectives": {"mean_e2e_ms": 75.0}})
    bar({"status": "infeasible", "objectives": None})
    bar({"status": "feasible", "objectives": {"mean_e2e_ms": 30.0}})  # lower is better for e2e latency
    bar.bar.refresh()
    text = stream.getvalue()
    assert "3/3" in text and "2 feasible, best mean_e2e_ms 30" in text
    bar.close()


def test_off_a_terminal_the_search_prints_a_heartbeat_every_ten_seconds():
    """Candidates finish at 4, 9, 12 and 25 s of (fake) wall time: lines at 12 s (the first 10 s past the
    start) and at 25 s (10 s past that line); none at 4 or 9 s."""
    import io

    from simmodel.recommend.progress import SearchProgress
    from simmodel.recommend.spec import parse_search

    stream, now = io.StringIO(), [0.0]
    beat = SearchProgress(parse_search({"optimization": {"target": "e2e_latency"}}), total=4, stream=stream,
                          tty=False, clock=lambda: now[0])
    for t, entry in ((4, {"status": "feasible", "objectives": {"mean_e2e_ms": 75.0}}),
                     (9, {"status": "infeasible", "objectives": None}),
                     (12, {"status": "feasible", "objectives": {"mean_e2e_ms": 30.0}}),
                     (25, {"status": "failed", "objectives": None})):
        now[0] = t
        beat(entry)
    beat.close()
    assert stream.getvalue().splitlines() == [
        "simmodel: 3/4 candidates done, 2 feasible, best mean_e2e_ms 30",
        "simmodel: 4/4 candidates done, 2 feasible, best mean_e2e_ms 30"]


def test_recommend_quiet_prints_no_progress(tmp_path):
    """A search that ends within 10 s prints nothing on stderr off a terminal, with or without --quiet
    (which also silences the terminal's bar: no progress object is made)."""
    for extra in ((), ("--quiet",)):
        out = tmp_path / f"out{len(extra)}"
        proc = simmodel("recommend", "-c", str(write(tmp_path, search())), "--output-dir", str(out), *extra)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_a_worker_that_dies_costs_only_its_candidate():
    from simmodel.recommend.executor import LocalExecutor

    executor = LocalExecutor(2, _exit_on_two)
    entries = sorted(executor.map([(i,) for i in range(1, 6)]), key=lambda e: e["id"])
    executor.close()
    assert [(e["id"], e["status"], e["reason_category"]) for e in entries] == [
        (1, "feasible", None), (2, "failed", "worker_died"), (3, "feasible", None), (4, "feasible", None),
        (5, "feasible", None)]
    assert "exit code 3" in entries[1]["reason"]


def _exit_on_two(task):
    import os

    if task[0] == 2:
        os._exit(3)  # what an out-of-memory kill looks like from here
    return {"id": task[0], "status": "feasible", "reason_category": None}


def test_an_unreachable_ray_cluster_is_one_line(tmp_path):
    pytest.importorskip("ray")
    proc = simmodel("recommend", "-c", str(write(tmp_path, search())), "--output-dir", str(tmp_path / "o"),
                    "--executor", "ray=127.0.0.1:1")
    assert proc.returncode == 2
    assert "--executor ray=127.0.0.1:1: cannot connect" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_saved_scenarios_name_their_files_absolutely(tmp_path):
    from simmodel.recommend.search import runnable

    config = {"traffic": {"source": {"type": "trace", "path": "t.csv", "format": "csv"}},
              "engine": {"model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "my-gpu.yaml",
                         "workers": {"prefill": {"hardware": "h100_sxm"}, "decode": {"hardware": "other.yml",
                                                                                   "host_profile": {"path": "p.csv"}}}}}
    saved = runnable(config, tmp_path)
    assert saved["traffic"]["source"]["path"] == str(tmp_path.resolve() / "t.csv")
    assert saved["engine"]["hardware"] == str(tmp_path.resolve() / "my-gpu.yaml")
    assert saved["engine"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"  # a registry id stays
    assert saved["engine"]["workers"]["prefill"]["hardware"] == "h100_sxm"
    assert saved["engine"]["workers"]["decode"]["hardware"] == str(tmp_path.resolve() / "other.yml")
    assert saved["engine"]["workers"]["decode"]["host_profile"]["path"] == str(tmp_path.resolve() / "p.csv")
    assert config["engine"]["hardware"] == "my-gpu.yaml"  # the candidate itself is untouched


def test_scores_equal_but_for_their_last_bits_tie_and_fewer_gpus_win():
    from simmodel.recommend.search import rank
    from simmodel.recommend.spec import parse_search

    spec = parse_search({"optimization": {"target": "throughput_per_user"}})
    a, b = 1000 / 7, 142.8571428571429  # the same number in exact arithmetic, different last bits
    assert a != b
    entries = [{"id": 1, "status": "feasible", "score": b, "metrics": {"gpu_count": 2}},
               {"id": 2, "status": "feasible", "score": a, "metrics": {"gpu_count": 1}}]
    assert [e["id"] for e in rank(entries, spec)] == [2, 1]


def test_gpu_count_of_candidates_that_are_not_scenarios():
    from simmodel.recommend.evaluate import raw_gpu_count

    config = {"engine": {"workers": {"prefill": {"parallelism": {"replicas": 2, "tensor": 3}},
                                     "decode": {"parallelism": {"tensor": 4, "attention_data": 2}}}}}
    assert raw_gpu_count(config) == 2 * 3 + 4 * 2
    config["engine"]["workers"]["decode"]["parallelism"]["tensor"] = "four"
    assert raw_gpu_count(config) is None


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["engine"].update(mode={"a": 1}), "engine.mode: must be one of aggregated, disaggregated"),
    (lambda d: d["traffic"].update(lod=3), "traffic.lod: unknown field"),
    (lambda d: d.update(optimizer={"parallelism": 1000}), "optimizer.parallelism: must be at most 256"),
    (lambda d: d["engine"]["workers"]["aggregated"]["parallelism"].update(
        preset=[{"tensor": {"choices": [1, 2]}}]), "parallelism.preset[0]: must be a mapping"),
])
def test_more_bad_search_input_is_one_line_and_exit_2(tmp_path, change, message):
    data = search()
    change(data)
    proc = simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_mode_of_more_digits_than_python_prints_is_one_line_and_exit_2(tmp_path):
    # YAML reads 0x and 5,000 f's as one integer, past the 4,300 digits Python turns into text: the message says
    # so instead of failing to print it (a ValueError that escaped before).
    path = write(tmp_path, search())
    path.write_text(path.read_text().replace("engine:\n", "engine:\n  mode: 0x" + "f" * 5000 + "\n", 1))
    proc = simmodel("recommend", "-c", str(path), "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.strip().endswith("engine.mode: must be one of aggregated, disaggregated, got a value too "
                                        "large to show")
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_huge_spaces_random_draws_and_grid_cap(tmp_path):
    from simmodel.recommend.search import load_search
    from simmodel.recommend.space import expand

    data = search()
    ten_thousand = {"range": {"min": 1, "max": 10_000}}
    data["engine"]["seed"] = {"range": {"min": 0, "max": 9_999}}
    data["limits"] = {"max_passes": ten_thousand, "max_requests": {"range": {"min": 10, "max": 10_009}}}
    data["traffic"]["load"]["concurrency"] = ten_thousand
    data["traffic"]["stop"]["requests"] = ten_thousand
    spec, space, _ = load_search(write(tmp_path, data))
    assert space.size == 2 * 2 * 10_000**5  # replicas × max_sequences × five fields of 10,000 values: past 2**63
    picks = expand(space, "random", 3, seed=5)
    assert len({c.number for c in picks}) == 3 and picks == expand(space, "random", 3, seed=5)
    with pytest.raises(ScenarioError, match="the grid has 400,000,000,000,000,000,000 candidates"):
        expand(space, "grid")
    assert len(expand(space, "grid", max_trials=4)) == 4


def test_a_search_over_routers_ranks_them_as_derived_by_hand(tmp_path):
    """Two workers of one sequence each, fixed 10 ms passes, three requests of 100 prompt tokens: R0 at 0 ms
    (10 outputs: done at 100 ms), R1 at 5 ms and R2 at 40 ms (3 outputs each: three passes).

    - round robin: R0 → 0, R1 → 1 (done at 35), R2 → 0, where it waits for R0 and runs 100–130: e2e 100, 30,
      90, mean 73.33 ms;
    - least_loaded: R2 at 40 finds worker 0 busy with R0 and worker 1 idle (R1 finished): 40–70, e2e 30:
      mean 53.33 ms, ranked first."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,100,10\n0.005,100,3\n0.04,100,3\n")
    data = search(router={"type": {"choices": ["round_robin", "least_loaded"]}},
                  traffic={"source": {"type": "trace", "format": "csv", "path": str(trace)},
                           "load": {"type": "trace_timestamps"}})
    data["engine"]["workers"]["aggregated"]["parallelism"]["replicas"] = 2
    data["engine"]["workers"]["aggregated"]["scheduler"]["max_sequences"] = 1
    out = tmp_path / "out"
    proc = simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(out), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    ledger = json.loads((out / "recommendation.json").read_text())
    by_router = {e["choices"]["router.type"]: e["metrics"]["mean_e2e_ms"] for e in ledger["candidates"]}
    assert by_router == pytest.approx({"round_robin": 220 / 3, "least_loaded": 160 / 3})
    assert ledger["candidates"][ledger["ranked"][0] - 1]["choices"]["router.type"] == "least_loaded"


def test_a_search_over_planner_bounds_counts_each_candidates_peak_gpus(tmp_path):
    """The planner's hand-derived step (tests/scenarios/test_planner.py): one worker of one sequence, five
    1,010 ms requests at 4.5 s after one at 0, samples every second, decisions every 4 s. With max_replicas 1 the
    pool never grows (1 GPU); with 2 a worker is added at 8 s (2 GPUs at the peak). The searched field reaches
    the candidate, and its GPUs are its peak."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,100,1\n" + "4.5,100,100\n" * 5)
    data = search(traffic={"source": {"type": "trace", "format": "csv", "path": str(trace)},
                           "load": {"type": "trace_timestamps"}},
                  planner={"mode": "load", "metric_interval_s": 1, "adjustment_interval_s": 4, "queue_scale_out": 0.5,
                           "pools": {"aggregated": {"max_replicas": {"choices": [1, 2]}}}})
    role = data["engine"]["workers"]["aggregated"]
    role["parallelism"]["replicas"] = 1
    role["scheduler"]["max_sequences"] = 1
    out = tmp_path / "out"
    proc = simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(out), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    ledger = json.loads((out / "recommendation.json").read_text())
    gpus = {e["choices"]["planner.pools.aggregated.max_replicas"]: e["metrics"]["gpu_count"] for e in ledger["candidates"]}
    assert gpus == {1: 1, 2: 2}


def test_the_serving_engine_can_be_searched(tmp_path):
    """``engine.backend`` searched over vLLM and TensorRT-LLM on ``search``'s one worker: vLLM's candidates give
    ``search``'s numbers by hand (1 sequence: 75 ms, 4: 30 ms); TensorRT-LLM's are unsupported, naming the vLLM-only
    ``async_scheduling`` the search sets. Without that field TensorRT-LLM's candidates (always synchronous, and with
    no KV pressure its passes are vLLM's synchronous ones) give the same 75 and 30 ms."""
    data = search()
    data["engine"]["backend"] = {"choices": ["vllm", "trtllm"]}
    data["engine"]["workers"]["aggregated"]["parallelism"]["replicas"] = 1
    out = tmp_path / "out"
    assert simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(out)).returncode == 0
    by_choice = {(e["choices"]["engine.backend"], e["choices"]["engine.workers.aggregated.scheduler.max_sequences"]): e
                 for e in json.loads((out / "recommendation.json").read_text())["candidates"]}
    assert {k: by_choice[("vllm", k[1])]["metrics"]["mean_e2e_ms"] for k in (("vllm", 1), ("vllm", 4))} == \
        pytest.approx({("vllm", 1): 75, ("vllm", 4): 30})
    for seqs in (1, 4):
        entry = by_choice[("trtllm", seqs)]
        assert entry["status"] == "unsupported"
        assert entry["reason"] == ("engine.workers.aggregated.scheduler.async_scheduling: vLLM only; "
                                   "engine.backend is trtllm")
    del data["engine"]["workers"]["aggregated"]["scheduler"]["async_scheduling"]
    data["engine"]["backend"] = {"choices": ["trtllm"]}
    out = tmp_path / "out2"
    assert simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(out)).returncode == 0
    ledger = json.loads((out / "recommendation.json").read_text())
    assert [e["metrics"]["mean_e2e_ms"] for e in ledger["candidates"]] == pytest.approx([75, 30])


def test_cost_and_energy_targets_by_hand(tmp_path):
    """``target: cost`` at 3.6 an hour (0.001 a GPU-second), 12 output tokens each: GPU-seconds (the workers'
    lifetimes, see ``search``) 1 × 0.120, 1 × 0.030, 2 × 0.060 and 2 × 0.030 give 0.120 / 1000 / 12e-6 = 10.0,
    2.5, 10.0 and 5.0 per million tokens; the tie goes to fewer GPUs. A saved candidate keeps the price.

    The same candidates ranked for ``tokens_per_joule``: the one worker that batches all four requests (30 ms,
    1 GPU) beats two workers of two requests each (30 ms, 2 GPUs): the second GPU adds at least its idle
    121.7 W × 30 ms and reads the weights in twice as many passes; its value is its run's 12 tokens over its run's
    energy. And a front of ``[tokens_per_joule, e2e_latency]`` (mean E2E 75, 30, 45, 30 ms): candidate 2 is
    best on both, so the front is candidate 2 alone."""
    from simmodel.recommend.search import rank
    from simmodel.recommend.spec import parse_search

    out = tmp_path / "out"
    data = search(optimization={"target": "cost"}, evaluation={"gpu_hour_price": 3.6})
    proc = simmodel("recommend", "-c", str(write(tmp_path, data)), "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    ledger = json.loads((out / "recommendation.json").read_text())
    costs = [e["metrics"]["cost_per_million_tokens"] for e in ledger["candidates"]]
    assert costs == pytest.approx([10.0, 2.5, 10.0, 5.0], rel=1e-9)
    assert ledger["ranked"] == [2, 4, 1, 3] and ledger["objectives"] == ["cost_per_million_tokens"]
    rerun = json.loads(simmodel("run", "-c", str(out / "recommendations" / "0001.yaml"), "--format", "json").stdout)
    assert rerun["cost_per_million_tokens"] == pytest.approx(2.5, rel=1e-9)
    by_id = {e["id"]: e["metrics"] for e in ledger["candidates"]}
    one, two = 12 / by_id[2]["output_tokens_per_joule"], 12 / by_id[4]["output_tokens_per_joule"]
    assert two - one > 121.7 * 0.030
    assert rerun["energy_kwh"] * 3.6e6 == pytest.approx(one, rel=1e-9)

    def ranked(optimization):
        spec = parse_search({"optimization": optimization, "evaluation": {"gpu_hour_price": 3.6}})
        (first, higher), *_ = spec.objectives
        entries = [{**e, "objectives": {m: e["metrics"][m] for m, _ in spec.objectives},
                    "score": e["metrics"][first] if higher else -e["metrics"][first]} for e in ledger["candidates"]]
        return [e["id"] for e in rank(entries, spec)]

    assert ranked({"target": "tokens_per_joule"})[0] == 2
    assert ranked({"target": "pareto", "pareto": ["tokens_per_joule", "e2e_latency"]}) == [2]


@pytest.mark.parametrize(("optimization", "evaluation", "message"), [
    ({"target": "cost"}, None, "evaluation.gpu_hour_price: needed by the cost target"),
    ({"target": "pareto", "pareto": ["cost", "ttft"]}, None, "evaluation.gpu_hour_price: needed by the cost target"),
    ({"target": "ttft", "pareto": ["cost", "ttft"]}, None, "optimization.pareto: only with target: pareto"),
    ({"target": "pareto", "pareto": ["ttft"]}, None, "optimization.pareto: must be a list of two different targets"),
    ({"target": "pareto", "pareto": ["ttft", "speed"]}, None, "optimization.pareto: unknown target 'speed'"),
])
def test_bad_energy_and_cost_targets_are_one_line(optimization, evaluation, message):
    from simmodel.recommend.spec import parse_search

    data = search(optimization=optimization, **({"evaluation": evaluation} if evaluation else {}))
    with pytest.raises(ScenarioError) as info:
        parse_search(data)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_pareto_order_follows_the_first_targets_direction():
    """The front sorted by a lower-is-better first objective puts its lowest value first."""
    from simmodel.recommend.search import rank
    from simmodel.recommend.spec import parse_search

    spec = parse_search({"optimization": {"target": "pareto", "pareto": ["cost", "throughput_per_user"]},
                         "evaluation": {"gpu_hour_price": 1.0}})
    entries = [{"id": i, "status": "feasible", "metrics": {"gpu_count": 1},
                "objectives": {"cost_per_million_tokens": c, "throughput_per_user": u}}
               for i, (c, u) in enumerate([(3.0, 30.0), (1.0, 10.0), (2.0, 20.0)], start=1)]
    assert [e["id"] for e in rank(entries, spec)] == [2, 3, 1]
