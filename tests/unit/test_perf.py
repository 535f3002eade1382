"""KV capacity and the two simple timing models, against hand arithmetic and Dynamo's measured points."""

from __future__ import annotations

import numpy as np
import pytest

from simmodel.perf.capacity import default_kv_blocks as _blocks
from simmodel.perf.deployment import Deployment
from simmodel.perf.hardware import HARDWARE
from simmodel.perf.models import MODELS
from simmodel.perf.timing import FixedTiming, PassBatch, PolynomialTiming

LLAMA8 = MODELS["meta-llama/Llama-3.1-8B-Instruct"]
LLAMA70 = MODELS["meta-llama/Llama-3.1-70B-Instruct"]


def default_kv_blocks(model, hw, *, memory_fraction, block_size, **parallel):
    return _blocks(Deployment(model, hw, **parallel), memory_fraction=memory_fraction, block_size=block_size)


def test_llama_8b_parameters_and_kv_bytes():
    """Published size 8.03 B: 2·128256·4096 (untied embeddings) + 32·(2·4096² + 2·4096·1024
    + 3·4096·14336 + 2·4096) + 4096 = 8,030,261,248. KV: 2·32·8·128·2 = 131,072 B/token."""
    assert LLAMA8.num_parameters == 8_030_261_248
    assert LLAMA8.kv_bytes_per_token() == 131_072


def test_kv_blocks_llama_8b_one_h100_at_0_9():
    """(80e9·0.9 − 16,060,522,496 − 2^30) / (16·131072) = 54,865,735,680 / 2,097,152 = 26,162.2 → 26,162."""
    assert default_kv_blocks(LLAMA8, HARDWARE["h100_sxm"], memory_fraction=0.9, block_size=16, tensor=1) == 26162


def test_kv_blocks_llama_70b_tensor_4_h200():
    """70B: 70,553,706,496 params, of which the 2·8192·80 + 8192 = 1,318,912 norm weights are replicated
    on every GPU and the rest split over 4: 17,638,096,896 + 1,318,912 = 17,639,415,808 params =
    35,278,831,616 B per GPU. KV per GPU: 2·80·(8/4)·128·2 = 81,920 B/token.
    (141e9·0.9 − 35,278,831,616 − 2^30) / (16·81,920) = 90,547,426,560 / 1,310,720 = 69,082.2 → 69,082."""
    assert LLAMA70.num_parameters == 70_553_706_496
    assert default_kv_blocks(LLAMA70, HARDWARE["h200_sxm"], memory_fraction=0.9, block_size=16, tensor=4) == 69082


def test_kv_heads_replicate_beyond_tensor_and_decode_context_spreads_them():
    """8 KV heads on tensor 16: each GPU still holds one head, so per-GPU KV/token is 2·80·1·128·2 = 40,960;
    decode_context 2 splits tokens over the replicas: 40,960 / 2 = 20,480 (twice the blocks, minus rounding)."""
    h200 = HARDWARE["h200_sxm"]
    plain = default_kv_blocks(LLAMA70, h200, memory_fraction=0.9, block_size=16, tensor=16)
    dcp = default_kv_blocks(LLAMA70, h200, memory_fraction=0.9, block_size=16, tensor=16, decode_context=2)
    norms = 1_318_912
    free = 141e9 * 0.9 - ((70_553_706_496 - norms) / 16 + norms) * 2 - 2**30
    assert plain == int(free // (16 * 40_960)) and dcp == int(free // (16 * 20_480))


SCOUT = MODELS["meta-llama/Llama-4-Scout-17B-16E-Instruct"]
SCOUT_FP8 = MODELS["RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"]


def test_scout_fp8_dynamic_quantizes_only_its_experts():
    """Tensor 2 (experts sharded over both GPUs) on H100. Per GPU: attention 48·62,914,560 / 2 params × 2 B
    = 3,019,898,880; norms 2·5120·48 + 5120 = 496,640 × 2 B = 993,280 (replicated); experts and routers
    48·2,139,176,960 / 2 = 51,340,247,040 params × 1 B (FP8; the routers, 48·5120·16 = 3,932,160 weights, are
    BF16 in the checkpoint but counted with the experts, as the docs say); embedding and LM head 2·202048·5120 / 2 ×
    2 B = 2,068,971,520. Total 56,430,110,720 B. In BF16 the experts take twice that: 107,770,357,760 B,
    over the 80 GB of an H100 (the reason the FP8 checkpoint is served on two)."""
    h100 = HARDWARE["h100_sxm"]
    fp8 = Deployment(SCOUT_FP8, h100, tensor=2, moe_tensor=2, weight_bytes=2, expert_weight_bytes=1)
    bf16 = Deployment(SCOUT, h100, tensor=2, moe_tensor=2, weight_bytes=2)
    assert fp8.weight_bytes_per_gpu == 56_430_110_720
    assert bf16.weight_bytes_per_gpu == 56_430_110_720 + 51_340_247_040 > 80e9


def test_scout_fp8_experts_run_at_the_fp8_peak_and_read_half_the_bytes():
    """The FP8-dynamic experts (FP8 weights and activations) run at H100's FP8 peak, 1979 TFLOPS, twice the
    BF16 989 the attention projections run at; a routed or shared expert reads 3·5120·8192 = 125,829,120
    B per layer instead of twice that. Attention stays BF16: its weight bytes do not change."""
    from simmodel.perf.roofline import RooflineTiming

    h100 = HARDWARE["h100_sxm"]
    fp8 = RooflineTiming(Deployment(SCOUT_FP8, h100, tensor=2, moe_tensor=2, weight_bytes=2, expert_weight_bytes=1))
    bf16 = RooflineTiming(Deployment(SCOUT, h100, tensor=2, moe_tensor=2, weight_bytes=2))
    assert fp8.dense_weight_bytes == bf16.dense_weight_bytes == 48 * 62_914_560 / 2 * 2
    assert fp8.expert_bytes_per_gpu == 48 * 125_829_120 / 2 == bf16.expert_bytes_per_gpu / 2
    # the same FLOPs, at the experts' own dtype peak: FP8 work takes 989 / 1979 of the time BF16 work does
    assert fp8.moe_flops_per_token == bf16.moe_flops_per_token
    assert fp8.moe_seconds_per_token == pytest.approx(bf16.moe_seconds_per_token * 989 / 1979, rel=1e-12)


def batch(rank, new, ctx, decode, num_ranks=1, capacity=1600.0) -> PassBatch:
    return PassBatch(num_ranks, np.array(rank), np.array(new), np.array(ctx), np.array(decode, dtype=bool),
                     np.ones(len(rank), dtype=bool), np.full(num_ranks, capacity))


def test_fixed_timing_adds_prefill_and_decode_per_rank():
    """Rank 0 mixed (20 + 10 ms), rank 1 decode only (10 ms), rank 2 idle (0)."""
    cost = FixedTiming(20, 10).price(batch([0, 0, 1], [100, 1, 1], [0, 50, 70], [False, True, True], num_ranks=3))
    assert cost.total_s.tolist() == pytest.approx([0.030, 0.010, 0.0])


@pytest.mark.parametrize("isl, ms", [(1, 16.516604), (100, 18.023974), (1000, 32.105859), (8192, 169.136918)])
def test_polynomial_prefill_matches_dynamo(isl, ms):
    """TTFT of one lone request in Dynamo mocker 1.6.1 (``ai-dynamo`` offline replay, measured by the developers)."""
    cost = PolynomialTiming().price(batch([0], [isl], [0], [False]))
    assert cost.total_s[0] * 1e3 == pytest.approx(ms, abs=1e-5)


def test_polynomial_prefill_uses_floored_means():
    """Three prompts of 1000, 1000, 1001: T = 3·⌊3001/3⌋ = 3000, measured 65.840730 ms."""
    cost = PolynomialTiming().price(batch([0, 0, 0], [1000, 1000, 1001], [0, 0, 0], [False] * 3))
    assert cost.total_s[0] * 1e3 == pytest.approx(65.840730, abs=1e-5)


def test_polynomial_decode_depends_on_kv_occupancy():
    """First decode after a 1000-token prefill: length 1001 of capacity 1600, D(1001/1600) = 29.455199 ms,
    measured in Dynamo mocker 1.6.1 (a 1000→2 request ends at 32.105859 + 29.455199 = 61.561058)."""
    cost = PolynomialTiming().price(batch([0], [1], [1000], [True]))
    assert cost.total_s[0] * 1e3 == pytest.approx(29.455199, abs=1e-5)
    full = PolynomialTiming().price(batch([0], [1], [5000], [True]))  # u clamps at 1: 34.01 ms
    assert full.total_s[0] * 1e3 == pytest.approx(34.01)
