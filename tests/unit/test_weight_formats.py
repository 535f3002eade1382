"""Weight formats below 8 bits and INT8 (``engine.dtype``; ``perf.deployment.WEIGHT_FORMATS``): bytes per weight,
the tensor-core rate their GEMMs reach, and what they change in a run, by hand."""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_scenario, run_scenario, scenario_error

from simmodel.perf.deployment import WEIGHT_FORMATS, Deployment
from simmodel.perf.hardware import HARDWARE
from simmodel.perf.models import MODELS
from simmodel.perf.roofline import Efficiency, RooflineTiming
from simmodel.perf.timing import PassBatch

LLAMA = MODELS["meta-llama/Llama-3.1-8B-Instruct"]
# Llama-3.1-8B's attention projections and MLPs: 32 × (41,943,040 + 176,160,768) = 6,979,321,856 weights.
LINEAR_WEIGHTS = 6_979_321_856
EFF = Efficiency(compute=0.8, memory=0.8)


def linear_seconds(dtype: str, gpu: str, tokens: int) -> float:
    """The linear kernel group of one prefill chunk of ``tokens`` tokens (the roofline's ``linear`` column)."""
    d = Deployment(LLAMA, HARDWARE[gpu], weight_bytes=WEIGHT_FORMATS[dtype].bytes_per_weight, weight_format=dtype)
    batch = PassBatch(1, np.zeros(1, np.int64), np.array([tokens]), np.zeros(1, np.int64), np.zeros(1, bool),
                      np.ones(1, bool), np.array([1e6]))
    return float(RooflineTiming(d, EFF).breakdown(batch)["linear"][0])


def test_bytes_per_weight_include_the_scales():
    """NVFP4: 4 bits and an FP8 scale per 16 weights, 4.5 bits; MXFP4: an 8-bit scale per 32, 4.25 bits; INT4
    (AWQ/GPTQ, groups of 128): an FP16 scale and a 4-bit zero per group, 4 + 20 / 128 = 4.156 bits."""
    assert WEIGHT_FORMATS["fp4"].bytes_per_weight == 4.5 / 8
    assert WEIGHT_FORMATS["mxfp4"].bytes_per_weight == 4.25 / 8
    assert WEIGHT_FORMATS["int4"].bytes_per_weight == pytest.approx(4.15625 / 8)
    assert WEIGHT_FORMATS["int8"].bytes_per_weight == 1.0


def test_a_memory_bound_pass_reads_the_formats_bytes():
    """One decode token on L40S (864 GB/s at 0.8): the weights' bytes over the bandwidth, plus the token's 8
    activation passes (2.1 MB). INT4: 6,979,321,856 × 0.51953 B = 3.6260 GB → 5.2491 ms (BF16: 20.199 ms)."""
    act = 8 * 32 * 4096 * 2
    for dtype in ("int4", "bf16", "fp4"):
        expected = (LINEAR_WEIGHTS * WEIGHT_FORMATS[dtype].bytes_per_weight + act) / (0.8 * 864e9)
        assert linear_seconds(dtype, "l40s", 1) == pytest.approx(expected, rel=1e-12)
    assert linear_seconds("int4", "l40s", 1) * 1e3 == pytest.approx(5.2491, rel=1e-4)


def test_a_compute_bound_pass_runs_at_the_formats_tensor_rate():
    """A prefill of 8192 tokens: 2 × 6.979e9 × 8192 = 1.1435e14 FLOPs. On B200 (BF16 2.25, FP4 9 PFLOP/s at 0.8):
    BF16 63.53 ms; NVFP4 at FP4_COMPUTE 0.6 of the FP4 rate, 1.1435e14 / (0.6 × 0.8 × 9e15) = 26.47 ms. On H100,
    which has no FP4 units, NVFP4 is dequantized to BF16: 1.1435e14 / (0.92 × 0.8 × 989e12) = 157.1 ms. INT4 on
    L40S, weight-only: 1.1435e14 / (0.92 × 0.8 × 362e12) = 429.2 ms; W8A8 INT8 on A100 at 624 TOPS: 229.1 ms."""
    flops = 2 * LINEAR_WEIGHTS * 8192
    assert linear_seconds("bf16", "b200_sxm", 8192) == pytest.approx(flops / (0.8 * 2250e12), rel=1e-12)
    assert linear_seconds("fp4", "b200_sxm", 8192) == pytest.approx(flops / (0.6 * 0.8 * 9000e12), rel=1e-12)
    assert linear_seconds("fp4", "h100_sxm", 8192) == pytest.approx(flops / (0.92 * 0.8 * 989e12), rel=1e-12)
    assert linear_seconds("int4", "l40s", 8192) * 1e3 == pytest.approx(429.2, rel=1e-3)
    assert linear_seconds("int8", "a100_sxm", 8192) == pytest.approx(flops / (0.8 * 624e12), rel=1e-12)


def test_fp4_on_b200_and_int4_on_l40s_run_from_yaml():
    """NVFP4 Llama-3.1-8B on one B200 and AWQ INT4 on one L40S both run. INT4 leaves the L40S more KV: the
    linear weights' 6,979,321,856 × (2 − 0.51953) B = 10.333 GB saved (the embeddings and the LM head stay BF16),
    over 16 × 131,072 B a block: 4,927 more blocks."""
    base = {"workers": {"aggregated": {"kv_cache": {"capacity": {"type": "default"}}}}}
    fp4 = run_scenario(make_scenario(engine={"hardware": "b200_sxm", "dtype": "fp4", **base}))
    assert fp4.summary["completed_requests"] == 4
    bf16 = run_scenario(make_scenario(engine={"hardware": "l40s", **base}))
    int4 = run_scenario(make_scenario(engine={"hardware": "l40s", "dtype": "int4", **base}))
    assert int4.summary["completed_requests"] == 4
    saved = LINEAR_WEIGHTS * (2 - WEIGHT_FORMATS["int4"].bytes_per_weight)  # (embeddings and LM head stay BF16)
    more = int4.summary["kv_blocks_per_rank"] - bf16.summary["kv_blocks_per_rank"]
    assert more == pytest.approx(saved / (16 * 131072), abs=2) and more == pytest.approx(4927, abs=2)


def test_int8_needs_int8_units(tmp_path):
    h100 = HARDWARE["h100_sxm"]
    path = tmp_path / "gpu.yaml"
    path.write_text("".join(f"{f}: {getattr(h100, f)}\n" for f in ("memory_bytes", "bf16_flops", "fp8_flops",
                                                                  "hbm_bytes_per_s", "intra_node_bytes_per_s",
                                                                  "intra_node_latency_s", "pcie_bytes_per_s",
                                                                  "nic_bytes_per_s", "gpus_per_node")))
    message = scenario_error(make_scenario(engine={"hardware": str(path), "dtype": "int8"}))
    assert "engine.dtype: int8 (W8A8) runs on INT8 tensor cores, and gpu (the aggregated workers' GPU)" in message
    # A P/D role on its own GPU without INT8 units is refused too.
    data = make_scenario(engine={"dtype": "int8", "mode": "disaggregated"})
    role = data["engine"]["workers"].pop("aggregated")
    data["engine"]["workers"] = {"prefill": {**role, "hardware": str(path)}, "decode": role}
    assert "(the prefill workers' GPU) gives no int8_ops" in scenario_error(data)
    assert "engine.dtype: must be one of auto, bf16, fp16, fp8, int8, fp4, mxfp4, int4" in scenario_error(
        make_scenario(engine={"dtype": "int3"}))


LLAMA_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32,
                "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "float16"}


@pytest.mark.parametrize(("quant", "fmt"), [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}, "int4"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "int4"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "fp4"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True}}}}, "int8"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}, "ignore": ["lm_head"]},
     "int4"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}, "fp4"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "int"}, "input_activations": {"num_bits": 8, "type": "int"}}},
      "ignore": ["re:.*lm_head"]}, "int8"),
])
def test_a_quantized_checkpoint_is_served_in_its_format(tmp_path, quant, fmt):
    """engine.dtype auto serves a quantized config.json's weights in their format (bytes and tensor cores)."""
    import json

    from simmodel.perf.hf_config import model_from_hf_config

    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_CONFIG, "quantization_config": quant}))
    assert model_from_hf_config(tmp_path).weight_format == fmt
    scenario = make_scenario(engine={"model": str(tmp_path), "hardware": "b200_sxm"})
    from pathlib import Path

    from simmodel.config.load import parse_scenario
    d = parse_scenario(scenario, Path(".")).engine.workers["aggregated"].deployment
    assert d.weight_format == fmt and d.weight_bytes == WEIGHT_FORMATS[fmt].bytes_per_weight


@pytest.mark.parametrize("quant", [
    {"quant_method": "gptq", "bits": 8},
    {"quant_method": "awq", "bits": 4, "modules_to_not_convert": ["model.layers.0.self_attn"]},
    {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head", "model.layers.*.self_attn*"]},
    {"quant_method": "bitsandbytes", "load_in_4bit": True}])
def test_other_quantizations_are_refused(tmp_path, quant):
    import json

    from simmodel.errors import ScenarioError
    from simmodel.perf.hf_config import model_from_hf_config

    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_CONFIG, "quantization_config": quant}))
    with pytest.raises(ScenarioError, match="is not modeled"):
        model_from_hf_config(tmp_path)
