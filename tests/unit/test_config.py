"""Scenario validation: every rule ends in one ScenarioError naming the dotted path."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_scenario, scenario_error

from simmodel.config.load import apply_overrides, load_scenario, parse_scenario
from simmodel.config.node import finite_number
from simmodel.errors import ScenarioError
from simmodel.perf.roofline import Efficiency, HostOverhead

AGG = "engine.workers.aggregated"


error_of = scenario_error


def worker(**fields) -> dict:
    return {"engine": {"workers": {"aggregated": fields}}}


@pytest.mark.parametrize("data, expected", [
    (worker(kv_cache={"block_size": 0}), f"{AGG}.kv_cache.block_size: must be a positive integer, got 0"),
    (worker(kv_cache={"block_sise": 16}), f"{AGG}.kv_cache.block_sise: unknown field"),
    ({"engine": {"modle": "x"}}, "engine.modle: unknown field"),
    ({"extra": 1}, "extra: unknown field"),
    (worker(parallelism={"pipeline": 40}), f"{AGG}.parallelism.pipeline: each stage holds at least one of"),
    (worker(parallelism={"tensor": 4, "decode_context": 3}), f"{AGG}.parallelism.decode_context: must divide tensor"),
    (worker(parallelism={"tensor": 3}), f"{AGG}.parallelism.tensor: must divide the 32 attention heads"),
    (worker(parallelism={"moe_expert": 2}), f"{AGG}.parallelism.moe_expert: meta-llama/Llama-3.1-8B-Instruct has no MoE"),
    (worker(parallelism={"tensor": 2, "prefill_context": 2, "decode_context": 2}), "at most one of prefill_context"),
    (worker(scheduler={"max_batched_tokens": 100, "max_sequences": 256}),
     f"{AGG}.scheduler.max_batched_tokens: must be >= max_sequences (256)"),
    (worker(scheduler={"async_scheduling": 1}), f"{AGG}.scheduler.async_scheduling: must be true or false, got 1"),
    (worker(kv_cache={"prefix_caching": "yes"}), f"{AGG}.kv_cache.prefix_caching: must be true or false"),
    (worker(kv_cache={"capacity": {"type": "fixed", "blocks": 10}}),
     f"{AGG}.kv_cache.capacity: a rank has 10 KV blocks of 16 tokens but one request at context_length 4096 needs 256"),
    (worker(kv_cache={"capacity": {"type": "default", "memory_fraction": 1.5}}),
     f"{AGG}.kv_cache.capacity.memory_fraction: must be a positive number at most 1"),
    (worker(timing={"type": "fixed", "prefill_ms": -1, "decode_ms": 1}),
     f"{AGG}.timing.prefill_ms: must be a non-negative number at most 1e+09, got -1"),
    (worker(timing={"type": "roofline"}), f"{AGG}.timing.type: must be one of default, fixed, polynomial"),
    # An integer past float range (YAML reads 0x followed by 400 f's as one): refused, not an OverflowError.
    (worker(timing={"type": "fixed", "prefill_ms": 1, "decode_ms": int("f" * 400, 16)}),
     f"{AGG}.timing.decode_ms: must be a non-negative number at most 1e+09, got 4446241647709404462"),
    (worker(startup_seconds=5), f"{AGG}.startup_seconds: only delays workers a planner adds (planner.pools.aggregated)"),
    (worker(scheduler={"max_sequences": True}), f"{AGG}.scheduler.max_sequences: must be a positive integer, got true"),
    ({"engine": {"context_length": 200000}},
     "engine.context_length: meta-llama/Llama-3.1-8B-Instruct supports at most 131072 tokens"),
    ({"engine": {"model": "acme/unknown"}}, "engine.model: unknown model 'acme/unknown'"),
    ({"engine": {"hardware": "h900"}}, "engine.hardware: unknown system 'h900'"),
    (worker(scheduler={"prefill_decode_interval": 2}), f"{AGG}.scheduler.prefill_decode_interval: SGLang only; engine.backend is vllm"),
    ({"engine": {"mode": "disaggregated"}}, "engine.workers.prefill: required field is missing"),
    ({"engine": {"kv_transfer": {"latency_ms": 1}}}, "engine.kv_transfer: only applies to engine.mode: disaggregated"),
    (worker(hardware="h200_sxm"), f"{AGG}.hardware: unknown field"),
    ({"engine": {"enable_chunked_prefill": False, "context_length": 16384}},
     f"{AGG}.scheduler.max_batched_tokens: with enable_chunked_prefill false a whole prompt must fit one pass"),
    ({"traffic": {"source": {"input_tokens": 0}}}, "traffic.source.input_tokens: must be a positive integer, got 0"),
    ({"traffic": {"source": {"input_tokens": {"distribution": "uniform", "min": 10, "max": 5}}}},
     "traffic.source.input_tokens.max: must be >= min (10), got 5"),
    ({"traffic": {"source": {"output_tokens": {"distribution": "zipf"}}}},
     "traffic.source.output_tokens.distribution: must be one of uniform, normal, lognormal, choice"),
    ({"traffic": {"source": {"output_tokens": {"distribution": "choice", "values": [1, 2], "weights": [1]}}}},
     "traffic.source.output_tokens.weights: must be 2 non-negative numbers"),
    ({"traffic": {"load": {"type": "poisson", "requests_per_second": 0}}},
     "traffic.load.requests_per_second: must be a positive number at most 1e+09, got 0"),
    ({"traffic": {"load": {"type": "trace_timestamps"}}}, "traffic.load.type: trace_timestamps needs traffic.source.type: trace"),
    ({"traffic": {"stop": {"requests": None}}}, "traffic.stop: synthetic traffic needs requests or max_virtual_time_seconds"),
])
def test_bad_fields_name_path_and_rule(data, expected):
    assert expected in error_of(make_scenario(**data))


def test_seventy_b_on_one_h100_has_no_room_for_kv():
    """70B in BF16 is 141 GB of weights: more than one 80 GB H100 holds."""
    message = error_of(make_scenario(engine={"model": "meta-llama/Llama-3.1-70B-Instruct", "workers": {
        "aggregated": {"kv_cache": {"capacity": {"type": "default"}}}}}))
    assert "needs 141.1 GB of weights per GPU at tensor 1" in message


def test_llama_4_scout_serves_at_most_one_attention_chunk():
    """Llama 4 attends within 8192-token chunks on 3 of every 4 layers, which is not modelled: up to one chunk
    every layer attends to the whole context, so 8192 is the longest context served, and the default."""
    scout = {"model": "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", "context_length": 16384,
             "workers": {"aggregated": {"parallelism": {"tensor": 2}}}}
    assert ("engine.context_length: RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic attends within chunks of "
            "8192 tokens on 3 of every 4 layers") in error_of(make_scenario(engine=scout))
    data = make_scenario(engine=scout)
    del data["engine"]["context_length"]
    scenario = parse_scenario(data, Path("."))
    assert scenario.engine.context_length == 8192
    deployment = scenario.engine.workers["aggregated"].deployment
    assert (deployment.weight_bytes, deployment.expert_bytes) == (2, 1)  # dtype auto: the checkpoint's own


def test_defaults_are_the_documented_ones():
    data = make_scenario()
    del data["engine"]["context_length"]
    data["engine"]["workers"]["aggregated"] = {}
    scenario = parse_scenario(data, Path("."))
    role = scenario.engine.workers["aggregated"]
    assert scenario.engine.context_length == 131072  # Llama-3.1's max_position_embeddings
    assert (role.scheduler.max_batched_tokens, role.scheduler.max_sequences) == (8192, 256)
    assert (role.kv_cache.block_size, role.kv_cache.capacity.memory_fraction) == (16, 0.9)
    assert role.timing.type == "default" and role.parallelism.gpu_count == 1
    assert role.timing.efficiency == Efficiency() and role.timing.host == HostOverhead()
    assert scenario.engine.enable_chunked_prefill and role.scheduler.reserve_full_isl
    assert role.scheduler.async_scheduling and role.kv_cache.prefix_caching  # vLLM's defaults


def test_overrides_apply_left_to_right_and_are_validated(tmp_path):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_scenario()))
    scenario = load_scenario(path, [f"{AGG}.scheduler.max_sequences=8", f"{AGG}.scheduler.max_sequences=16"])
    assert scenario.engine.workers["aggregated"].scheduler.max_sequences == 16
    with pytest.raises(ScenarioError, match=r"^s.yaml: engine.workers.aggregated.kv_cache.block_size: must be a"):
        load_scenario(path, [f"{AGG}.kv_cache.block_size=0"])
    with pytest.raises(ScenarioError, match="expected PATH=VALUE"):
        apply_overrides({}, ["engine.seed"])
    with pytest.raises(ScenarioError, match="engine.seed is not a mapping"):
        apply_overrides({"engine": {"seed": 1}}, ["engine.seed.x=1"])


def test_yaml_errors_are_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("traffic: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"^bad.yaml: line \d+: not valid YAML"):
        load_scenario(path)
    path.write_text("!!python/object:os.system {}\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(path)
    with pytest.raises(ScenarioError, match="scenario file not found"):
        load_scenario(tmp_path / "missing.yaml")


def test_relative_trace_path_resolves_against_the_scenario_folder(tmp_path):
    import yaml

    (tmp_path / "sub").mkdir()
    data = make_scenario(traffic={"source": {"type": "trace", "path": "t.csv", "format": "csv"},
                                  "load": {"type": "trace_timestamps"}})
    (tmp_path / "sub" / "s.yaml").write_text(yaml.safe_dump(data))
    scenario = load_scenario(tmp_path / "sub" / "s.yaml")
    assert scenario.traffic.source.path == (tmp_path / "sub" / "t.csv").resolve()


def test_finite_number_is_a_number_a_float_can_hold():
    # Every number check of the configuration goes through it: bools, strings, NaN, infinities and integers past
    # float range (10**400 > 1.8e308) are not numbers; ints and floats within range are.
    assert [finite_number(v) for v in (3, 2.5, 0, -1.0, 10**300)] == [True] * 5
    assert [finite_number(v) for v in (True, "1", None, float("nan"), float("inf"), 10**400)] == [False] * 6
