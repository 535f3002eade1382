"""Bounds at validation (GPU counts, parallelism degrees) and duplicate YAML keys, in every file read."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from factories import make_scenario, scenario_error

from simmodel.config.calibration import read_calibration
from simmodel.config.importers.common import arguments
from simmodel.config.load import apply_overrides, load_scenario, parse_scenario
from simmodel.config.yaml_safe import safe_load
from simmodel.errors import ScenarioError

AGG = "engine.workers.aggregated"
RULE = "(replicas × tensor × pipeline × attention_data × prefill_context, summed over the roles)"


error_of = scenario_error


def parallelism(**fields) -> dict:
    return make_scenario(engine={"workers": {"aggregated": {"parallelism": fields}}})


def disaggregated(prefill: dict, decode: dict) -> dict:
    """1P1D vLLM with fixed timing; the two roles' ``parallelism`` given."""
    data = make_scenario()
    role = data["engine"]["workers"]["aggregated"]
    data["engine"].update({"mode": "disaggregated", "kv_transfer": {}, "workers": {
        "prefill": {**copy.deepcopy(role), "parallelism": prefill},
        "decode": {**copy.deepcopy(role), "parallelism": decode}}})
    return data


def test_a_billion_replicas_is_refused_with_the_gpu_count_and_the_rule():
    # 1,000,000,000 replicas × 1 GPU each = 1,000,000,000 GPUs, above 100,000 (once "ok, 1000000000 GPUs").
    assert error_of(parallelism(replicas=1_000_000_000)) == (
        f"{AGG}.parallelism.replicas: the deployment would use 1,000,000,000 GPUs; at most 100,000 {RULE}")


def test_the_gpu_count_multiplies_replicas_by_the_gpus_of_a_worker():
    # 50,001 replicas × tensor 2 = 100,002 GPUs: one worker too many; 50,000 × 2 = 100,000 is the limit itself.
    assert error_of(parallelism(replicas=50_001, tensor=2)).startswith(
        f"{AGG}.parallelism.replicas: the deployment would use 100,002 GPUs; at most 100,000")
    assert parse_scenario(parallelism(replicas=50_000, tensor=2), Path(".")).engine \
        .workers["aggregated"].parallelism.gpu_count == 100_000


def cached(replicas: int, blocks: int, prefix_caching: bool = True, **parallel) -> dict:
    return make_scenario(engine={"workers": {"aggregated": {
        "parallelism": {"replicas": replicas, **parallel},
        "kv_cache": {"prefix_caching": prefix_caching, "capacity": {"type": "fixed", "blocks": blocks}}}}})


def test_prefix_caching_blocks_of_the_deployment_are_bounded():
    # 10,001 replicas × 10,000 blocks = 100,010,000 blocks, above 100,000,000 (each kept in memory); 10,000
    # replicas is the limit itself; 5,001 × attention_data 2 × 10,000 = 100,020,000 counts every rank.
    assert error_of(cached(10_001, 10_000)) == (
        f"{AGG}.parallelism.replicas: the deployment's prefix-caching KV pools would hold 100,010,000 blocks "
        f"(replicas × attention_data × blocks per rank); simmodel keeps each block's state in memory (about "
        f"100 bytes), so at most 100,000,000 (about 10 GB): fewer replicas, a smaller kv_cache.capacity or a "
        f"larger kv_cache.block_size")
    assert parse_scenario(cached(10_000, 10_000), Path("."))
    assert "would hold 100,020,000 blocks" in error_of(cached(5_001, 10_000, attention_data=2))
    # Without prefix caching a pool only counts its blocks: nothing to bound.
    assert parse_scenario(cached(10_001, 10_000, prefix_caching=False), Path("."))
    # TensorRT-LLM's block pool is the same: the same bound.
    trtllm = cached(10_001, 10_000)
    trtllm["engine"]["backend"] = "trtllm"
    del trtllm["engine"]["workers"]["aggregated"]["scheduler"]["async_scheduling"]  # (vLLM's)
    assert "would hold 100,010,000 blocks" in error_of(trtllm)


def test_the_gpu_count_sums_the_roles_and_names_the_larger():
    # prefill 60,000 × 1 + decode 20,001 × tensor 2 = 60,000 + 40,002 = 100,002 GPUs; prefill holds more.
    message = error_of(disaggregated({"replicas": 60_000}, {"replicas": 20_001, "tensor": 2}))
    assert message.startswith("engine.workers.prefill.parallelism.replicas: the deployment would use 100,002 GPUs")


@pytest.mark.parametrize("field", ["tensor", "attention_data", "prefill_context", "decode_context", "pipeline"])
def test_a_parallelism_degree_above_1024_is_refused(field):
    assert error_of(parallelism(**{field: 1025})) == (
        f"{AGG}.parallelism.{field}: must be at most 1,024, got 1025")


def test_moe_degrees_are_bounded_by_the_deployment():
    assert error_of(parallelism(moe_expert=100_001)) == (
        f"{AGG}.parallelism.moe_expert: must be at most 100,000, got 100001")


def test_a_duplicate_key_names_the_key_and_its_lines(tmp_path):
    path = tmp_path / "s.yaml"
    # Line 1 opens traffic, line 2 is its source; line 3 writes traffic again at the top level.
    path.write_text("traffic:\n  source: {type: synthetic}\ntraffic: {}\nengine: {}\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value) == "s.yaml: line 3: not valid YAML (duplicate key 'traffic', first set on line 1)"


def test_a_duplicate_key_in_a_set_value_is_refused():
    with pytest.raises(ScenarioError, match=r"^--set engine.kv_transfer=\{a: 1, a: 2\}: the value is not valid "
                                            r"YAML \(line 1: duplicate key 'a', first set on line 1\)$"):
        apply_overrides({}, ["engine.kv_transfer={a: 1, a: 2}"])


def test_merge_keys_still_merge_and_an_own_key_overrides_a_merged_one():
    text = "base: &b {x: 1, y: 2}\nrole:\n  <<: *b\n  x: 3\n"
    assert safe_load(text) == {"base": {"x": 1, "y": 2}, "role": {"x": 3, "y": 2}}


def test_the_same_key_in_two_mappings_is_not_a_duplicate():
    assert safe_load("a: {k: 1}\nb: {k: 2}\n") == {"a": {"k": 1}, "b": {"k": 2}}


def test_a_duplicate_key_in_a_calibration_file(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text("calibration:\n  parameters:\n    compute_efficiency: 0.5\n    compute_efficiency: 0.6\n")
    with pytest.raises(ScenarioError) as info:
        read_calibration(path, "timing.calibration")
    assert str(info.value) == (f"timing.calibration: {path}: not YAML (line 4: duplicate key 'compute_efficiency', "
                               f"first set on line 3)")


def test_a_duplicate_key_in_an_imported_workload(tmp_path):
    path = tmp_path / "bench.yaml"
    path.write_text("rate: 2\nrate: 4\n")
    with pytest.raises(ScenarioError) as info:
        arguments(path.read_text(), path)
    assert str(info.value) == (f"traffic.source.path: {path}: not a YAML/JSON mapping (line 2: duplicate key "
                               f"'rate', first set on line 1)")


def test_a_duplicate_key_in_a_runs_file(tmp_path):
    from simmodel.calibrate.fit import load_runs

    path = tmp_path / "RUNS.yaml"
    path.write_text(yaml.safe_dump({"runs": []}) + "runs: []\n")
    with pytest.raises(ScenarioError, match=r"line 2: not valid YAML \(duplicate key 'runs', first set on line 1\)"):
        load_runs(path)
