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
                      ({"range": {"min": 0.5, "max": 2}}, "step: required")):
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
