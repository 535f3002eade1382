"""Scenario fields of the performance model: dtypes, model and system files, MoE layout, timing knobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import make_scenario

from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError
from simmodel.perf.roofline import ACHIEVED, Efficiency, HostOverhead, collective
from simmodel.perf.timings import make_timing

AGG = "engine.workers.aggregated"


def role_of(data: dict, base: Path = Path(".")):
    return parse_scenario(data, base).engine.workers["aggregated"]


def default_capacity(**engine):
    workers = engine.pop("workers", {})
    agg = {"kv_cache": {"capacity": {"type": "default"}}}
    agg.update(workers)
    return make_scenario(engine={**engine, "workers": {"aggregated": agg}})


def test_fp8_kv_doubles_the_blocks_and_fp8_weights_free_memory():
    """Llama-3.1-8B on H100 at 0.9. BF16: 26,162 blocks (see test_perf). FP8 KV: 65,536 B/token, so
    54,865,735,680 / (16·65,536) = 52,324.7 → 52,324. FP8 weights too (embeddings and LM head stay
    16-bit): 2·128,256·4,096 = 1,050,673,152 of them at 2 B and 6,979,588,096 other weights at 1 B =
    9,080,934,400 B; (72e9 − 9,080,934,400 − 2^30) / 1,048,576 = 61,845,323,776 / 1,048,576 = 58,980.3
    → 58,980."""
    assert role_of(default_capacity()).num_kv_blocks == 26162
    assert role_of(default_capacity(workers={"kv_cache": {"dtype": "fp8", "capacity": {"type": "default"}}})
                   ).num_kv_blocks == 52324
    assert role_of(default_capacity(dtype="fp8", workers={
        "kv_cache": {"dtype": "fp8", "capacity": {"type": "default"}}})).num_kv_blocks == 58980


def test_moe_experts_default_to_tensor_sharding_and_must_cover_the_gpus():
    data = make_scenario(engine={"model": "Qwen/Qwen3-30B-A3B", "workers": {"aggregated": {
        "parallelism": {"tensor": 2, "attention_data": 2}}}})
    p = role_of(data).parallelism
    assert (p.moe_tensor, p.moe_expert) == (4, 1)
    data["engine"]["workers"]["aggregated"]["parallelism"]["moe_expert"] = 2
    with pytest.raises(ScenarioError, match=r"moe_tensor × moe_expert \(1 × 2\) must equal tensor × attention_data \(4\)"):
        role_of(data)
    data["engine"]["workers"]["aggregated"]["parallelism"]["moe_expert"] = 4
    assert role_of(data).deployment.moe_expert == 4


def test_prefill_context_is_not_modeled_by_the_default_timing():
    data = make_scenario(engine={"workers": {"aggregated": {"parallelism": {"prefill_context": 2},
                                                            "timing": {"type": "default"}}}})
    with pytest.raises(ScenarioError, match="prefill context parallelism is not modeled by the default timing"):
        role_of(data)


def test_timing_knobs_reach_the_model():
    data = make_scenario(engine={"workers": {"aggregated": {"timing": {
        "type": "default", "compute_efficiency": 0.5, "host_overhead_ms": {"decode": 0.25}, "per_layer_us": 10}}}})
    timing = role_of(data).timing
    assert timing.host.per_layer_us == 10
    assert timing.efficiency.compute == 0.5 and timing.efficiency.memory == Efficiency().memory
    assert (timing.host.decode_ms, timing.host.prefill_ms) == (0.25, HostOverhead().prefill_ms)
    bad = make_scenario(engine={"workers": {"aggregated": {"timing": {"type": "default", "memory_efficiency": 0}}}})
    with pytest.raises(ScenarioError, match=f"{AGG}.timing.memory_efficiency: must be a positive number at most 1"):
        role_of(bad)
    bad = make_scenario(engine={"workers": {"aggregated": {"timing": {"type": "fixed", "prefill_ms": 1,
                                                                      "decode_ms": 1, "compute_efficiency": 1}}}})
    with pytest.raises(ScenarioError, match=f"{AGG}.timing.compute_efficiency: unknown field"):
        role_of(bad)


def test_a_gpu_with_measured_fractions_brings_its_own_unless_the_scenario_sets_them(tmp_path):
    """A100: the fractions its measured kernels reach (ACHIEVED) replace H100's, and its link fraction stays
    unset (its measured all-reduce's, ALL_REDUCE); a scenario's own compute fraction wins and the others stay
    the GPU's; a calibration's too; H100 keeps the defaults."""
    compute, memory = ACHIEVED["a100_sxm"]
    assert (compute, memory) != (Efficiency().compute, Efficiency().memory)
    def efficiency(hardware, **timing):
        return role_of(make_scenario(engine={"hardware": hardware, "workers": {"aggregated": {
            "timing": {"type": "default", **timing}}}}), tmp_path).timing.efficiency

    assert (efficiency("a100_sxm").compute, efficiency("a100_sxm").memory, efficiency("a100_sxm").link) == (
        compute, memory, None)
    assert efficiency("a100_sxm", link_efficiency=0.3).link == 0.3
    assert (efficiency("a100_sxm", compute_efficiency=0.5).compute, efficiency("a100_sxm", compute_efficiency=0.5)
            .memory) == (0.5, memory)
    assert (efficiency("h100_sxm").compute, efficiency("h100_sxm").memory) == (Efficiency().compute,
                                                                               Efficiency().memory)
    identity = {"role": "aggregated", "model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "a100_sxm",
                "backend": "vllm", "weight_bytes": 2.0, "kv_bytes": 2.0, "tensor": 1, "attention_data": 1,
                "moe_tensor": 1, "moe_expert": 1, "pipeline": 1}
    (tmp_path / "cal.yaml").write_text(json.dumps({"calibration": {"parameters": {"memory_efficiency": 0.6},
                                                                   "fitted_on": [identity]}}))
    calibrated = efficiency("a100_sxm", calibration="cal.yaml")
    assert (calibrated.compute, calibrated.memory) == (compute, 0.6)


def test_the_default_timing_prices_collectives_with_its_engines_measured_all_reduce(tmp_path):
    """Llama-3.1-70B at TP 4 on H100, default timing: under vLLM each all-reduce step takes 4.6 µs at 0.66 of
    NVLink's 450 GB/s (ALL_REDUCE["vllm"]), under SGLang 2.8 µs at 0.69 (ALL_REDUCE["sglang"]): the timing is
    built with the scenario's backend."""
    for backend, fraction, latency in (("vllm", 0.66, 4.6e-6), ("sglang", 0.69, 2.8e-6)):
        data = make_scenario(engine={"model": "meta-llama/Llama-3.1-70B-Instruct", "backend": backend, "workers": {
            "aggregated": {"parallelism": {"tensor": 4}, "timing": {"type": "default"}}}})
        data["engine"]["workers"]["aggregated"].pop("scheduler")  # (SGLang takes no async_scheduling)
        scenario = parse_scenario(data, tmp_path)
        timing = make_timing(scenario.engine.workers["aggregated"], scenario.engine.backend)
        assert (timing.all_reduce_link, timing.all_reduce_latency_s) == pytest.approx((fraction * 450e9, latency))


def test_a_system_file_named_like_a_measured_gpu_takes_the_defaults(tmp_path):
    """A system file l40s.yaml (its system_id is the file's stem, l40s) is not the registry's L40S, whose
    kernels were measured: it takes the H100-fitted fractions, not ACHIEVED["l40s"], and its collectives the
    file's own latency and 0.72 of its link, not L40S's measured all-reduce."""
    (tmp_path / "l40s.yaml").write_text(
        "memory_bytes: 48e9\nbf16_flops: 362e12\nfp8_flops: 733e12\nhbm_bytes_per_s: 0.864e12\n"
        "intra_node_bytes_per_s: 32e9\nintra_node_latency_s: 1e-5\npcie_bytes_per_s: 32e9\n"
        "nic_bytes_per_s: 25e9\ngpus_per_node: 8\n")
    role = role_of(make_scenario(engine={"hardware": "l40s.yaml"}), tmp_path)
    assert role.deployment.hardware.system_id == "l40s" and not role.deployment.hardware.registry
    assert (role.timing.efficiency.compute, role.timing.efficiency.memory) == (Efficiency().compute,
                                                                               Efficiency().memory)
    assert collective(role.deployment.hardware, role.timing.efficiency, 4) == pytest.approx((0.72 * 32e9, 1e-5))


def test_model_from_a_local_config_and_system_from_a_yaml_file(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}))
    (tmp_path / "gpu.yaml").write_text(
        "memory_bytes: 80e9\nbf16_flops: 989e12\nfp8_flops: 1979e12\nhbm_bytes_per_s: 3.35e12\n"
        "intra_node_bytes_per_s: 450e9\nintra_node_latency_s: 3e-6\npcie_bytes_per_s: 64e9\n"
        "nic_bytes_per_s: 50e9\ngpus_per_node: 8\n")
    role = role_of(default_capacity(model="m", hardware="gpu.yaml"), tmp_path)
    assert role.num_kv_blocks == 26162  # the same shape and GPU as the registry's Llama-3.1-8B on H100
    with pytest.raises(ScenarioError, match="engine.hardware: .*missing.yaml"):
        role_of(default_capacity(hardware="missing.yaml"), tmp_path)
    with pytest.raises(ScenarioError, match="engine.model: unknown model 'nowhere'"):
        role_of(default_capacity(model="nowhere"), tmp_path)


def test_auto_dtype_is_the_checkpoints():
    """DeepSeek-V3 ships FP8 weights: auto sizes them at 1 byte; Llama at 2."""
    ds = make_scenario(engine={"model": "deepseek-ai/DeepSeek-V3", "hardware": "h200_sxm", "workers": {
        "aggregated": {"parallelism": {"tensor": 8}, "kv_cache": {"capacity": {"type": "default"}}}}})
    assert role_of(ds).deployment.weight_bytes == 1
    assert role_of(make_scenario()).deployment.weight_bytes == 2
