"""The roofline performance model: each kernel group by hand on a toy model, then against the loop reference."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roofline_reference import price_pass_reference

from simmodel.perf.deployment import Deployment
from simmodel.perf.hardware import HARDWARE, HardwareSpec
from simmodel.perf.models import MODELS, ModelSpec
from simmodel.perf.roofline import (
    ALL_REDUCE,
    Efficiency,
    HostOverhead,
    RooflineTiming,
    all_reduce_seconds,
    collective,
)
from simmodel.perf.timing import PassBatch

REPO = Path(__file__).resolve().parents[2]

# A toy model and GPU with round numbers: 2 layers, hidden 64, 4 heads of 16, 2 KV heads, MLP 128,
# vocabulary 1000; 1e12 FLOP/s, 1e12 B/s HBM, 1e11 B/s link, 1 µs per collective step; efficiencies 1.
TOY = ModelSpec("toy", num_layers=2, hidden_size=64, num_attention_heads=4, num_kv_heads=2, head_dim=16,
                intermediate_size=128, vocab_size=1000, tie_word_embeddings=False, max_position_embeddings=4096)
GPU = HardwareSpec("toy_gpu", 1e12, 1e12, 2e12, 1e12, 1e11, 1e-6, 1e10, 1e10, 8)
ONE = Efficiency(1.0, 1.0, 1.0)
HOST = HostOverhead(prefill_ms=1.0, decode_ms=0.5, mixed_ms=1.5, per_layer_us=0.0)


def make_batch(seqs_by_rank: list[list[tuple]]) -> PassBatch:
    rank = [r for r, seqs in enumerate(seqs_by_rank) for _ in seqs]
    flat = [s for seqs in seqs_by_rank for s in seqs]
    col = lambda i, t: np.array([s[i] for s in flat], dtype=t)  # noqa: E731
    return PassBatch(len(seqs_by_rank), np.array(rank, dtype=np.int64), col(0, np.int64), col(1, np.int64),
                     col(2, bool), col(3, bool), np.full(len(seqs_by_rank), 1e6))


def groups(seqs, **deploy) -> dict[str, float]:
    timing = RooflineTiming(Deployment(TOY, GPU, **deploy), ONE, HOST)
    return {k: float(v[0]) for k, v in timing.breakdown(make_batch([seqs])).items()}


def test_prefill_of_ten_tokens_group_by_group():
    """One fresh 10-token prompt that samples, tensor 1.

    Linear params/layer: q,o 2·64·64 + k,v 2·64·32 = 12,288; MLP 3·64·128 = 24,576; ×2 layers = 73,728.
    linear: FLOPs 2·73,728·10 = 1,474,560 → 1.47456 µs; bytes 147,456 + 10·8·2·64·2 = 167,936 → compute-bound.
    attention: causal pairs 1+…+10 = 55; FLOPs/pair 2·2·4·(16+16) = 512 → 28,160 FLOPs = 28.16 ns;
      bytes 10·256 (KV: 2 layers·2·2 heads·16·2 B) + 10·512 (queries and outputs) = 7,680 → 7.68 ns.
    kv_write 10·256 B = 2.56 ns; lm_head max(128,000 FLOPs, 128,000 + 4,000 B) = 132 ns;
    sampler 3·1000·4 B = 12 ns; elementwise 10·16·2·64·2 B = 40.96 ns; no collectives; host 1 ms (prefill).
    """
    g = groups([(10, 0, False, True)])
    assert g["linear"] == pytest.approx(1.47456e-6)
    assert g["attention"] == pytest.approx(28.16e-9)
    assert g["kv_write"] == pytest.approx(2.56e-9)
    assert g["lm_head"] == pytest.approx(132e-9)
    assert g["sampler"] == pytest.approx(12e-9)
    assert g["elementwise"] == pytest.approx(40.96e-9)
    assert g["communication"] == 0.0 and g["host"] == pytest.approx(1e-3)
    assert g["layer_overhead"] == 0.0  # HOST sets no per-layer floor
    floored = RooflineTiming(Deployment(TOY, GPU), ONE, HostOverhead(1.0, 0.5, 1.5, per_layer_us=4.0))
    assert floored.breakdown(make_batch([[(10, 0, False, True)]]))["layer_overhead"][0] == pytest.approx(2 * 4e-6)


def test_decode_reads_weights_and_kv_and_tensor_parallel_adds_all_reduces():
    """Two decodes at context 100 and 300, tensor 2 (heads and weights halved, KV heads 2/2 = 1 per GPU).

    linear: bytes 73,728/2·2 + 2·8·2·64·2 = 73,728 + 4,096 = 77,824 → 77.824 ns (FLOPs 147,456 → 0.147 µs
      > bytes time? 2·36,864·2 = 147,456 FLOPs = 147.456 ns: compute-bound at this toy size).
    attention: pairs 101 + 301 = 402; FLOPs 2·2·2·32·402 = 102,912 → 102.912 ns; bytes (101+301)·128 + 2·256
      = 51,968 → 51.968 ns.
    communication: 2·2 all-reduces, each one link latency 1 µs + 2 tokens·64·2 B·(2·1/2) / 1e11 = 1 µs + 2.56 ns.
    host: 0.5 ms (decode only).
    """
    g = groups([(1, 100, True, True), (1, 300, True, True)], tensor=2)
    assert g["linear"] == pytest.approx(147.456e-9)
    assert g["attention"] == pytest.approx(102.912e-9)
    assert g["communication"] == pytest.approx(4 * (1e-6 + 2.56e-9))
    assert g["host"] == pytest.approx(0.5e-3)


def test_an_all_reduce_is_priced_as_its_gpu_system_measured_it_for_its_group_size():
    """The registry's H100: ALL_REDUCE gives 4 GPUs a 4.6 µs step and 0.66 of NVLink's 450 GB/s (297 GB/s),
    8 GPUs 5.0 µs and 0.80; 6 GPUs halfway, 4.8 µs and 0.73. 16 GPUs (two nodes): the NIC, 50 GB/s at 0.72,
    10 µs. L40S across two nodes: its NIC would give 0.72 · 25 GB/s = 18 GB/s, but the ring also crosses each
    node's PCIe, whose 8 GPUs reduce at 0.06 · 32 GB/s = 1.92 GB/s (9.9 µs a step): 1.92 GB/s and 10 µs. A
    scenario's link fraction and latency replace the measured ones; a system not measured (mi300x) and a
    system file, even one named h100_sxm with H100's very figures, take the registry latency and 0.72."""
    h100 = HARDWARE["h100_sxm"]
    unset = Efficiency()
    assert collective(h100, unset, 4) == pytest.approx((0.66 * 450e9, 4.6e-6))
    assert collective(h100, unset, 8) == pytest.approx((0.80 * 450e9, 5.0e-6))
    assert collective(h100, unset, 6) == pytest.approx((0.73 * 450e9, 4.8e-6))
    assert collective(h100, unset, 16) == pytest.approx((0.72 * 50e9, 10e-6))
    assert collective(h100, Efficiency(link=0.5), 4, latency_us=3.0) == pytest.approx((0.5 * 450e9, 3e-6))
    mi300x = HARDWARE["mi300x"]
    assert collective(mi300x, unset, 4) == pytest.approx((0.72 * mi300x.intra_node_bytes_per_s, 5e-6))
    assert collective(HARDWARE["l40s"], unset, 16) == pytest.approx((1.92e9, 10e-6))
    own = HardwareSpec("h100_sxm", 80e9, 989e12, 1979e12, 3.35e12, 900e9, 2e-6, 64e9, 50e9, 8)
    assert collective(own, unset, 4) == pytest.approx((0.72 * 900e9, 2e-6))
    copy = replace(h100, registry=False)  # a system file with the registry's figures
    assert collective(copy, unset, 4) == pytest.approx((0.72 * 450e9, 5e-6))


def test_an_all_reduce_runs_one_shot_for_small_messages_and_two_shot_for_large_ones():
    """H100, 4 GPUs (4.6 µs a step, 297 GB/s). 64 KiB: one-shot 4.6 + 3 · 65,536 / 297e9 = 4.6 + 0.66198
    = 5.26198 µs, two-shot 9.2 + 1.5 · 65,536 / 297e9 = 9.53099 µs: one-shot (AIC measured 5.2 µs). 1 MiB:
    one-shot 4.6 + 10.59168 = 15.19168 µs, two-shot 9.2 + 5.29584 = 14.49584 µs: two-shot (AIC 12.8 µs).
    2 GPUs (4.2 µs, 234 GB/s), 1 MiB: both move the whole message, so one-shot, 4.2 + 4.48109 = 8.68109 µs
    (AIC 8.3 µs). Over the NIC (16 GPUs, 10 µs, 36 GB/s): 10 + 2 · 15/16 · 1,048,576 / 36e9 = 64.6133 µs.
    Nothing to reduce, nothing to pay."""
    assert all_reduce_seconds(65_536, 4, 297e9, 4.6e-6) == pytest.approx(5.26198e-6, rel=1e-5)
    assert all_reduce_seconds(1_048_576, 4, 297e9, 4.6e-6) == pytest.approx(14.49584e-6, rel=1e-5)
    assert all_reduce_seconds(1_048_576, 2, 234e9, 4.2e-6) == pytest.approx(8.68109e-6, rel=1e-5)
    assert all_reduce_seconds(1_048_576, 16, 36e9, 10e-6, inside_node=False) == pytest.approx(64.6133e-6, rel=1e-5)
    assert all_reduce_seconds(np.array([0.0, 65_536.0]), 4, 297e9, 4.6e-6) == pytest.approx([0.0, 5.26198e-6],
                                                                                               rel=1e-5)


def test_a_decode_pass_pays_the_measured_all_reduce_of_its_tensor_parallel_group():
    """Llama-3.1-70B (80 layers, hidden 8192) at TP 4 on H100, 32 decodes: 2·80 = 160 all-reduces of
    32 · 8192 · 2 B = 524,288 B each, one-shot: 4.6 µs + 3 · 524,288 / 297e9 = 4.6 + 5.29584 = 9.89584 µs
    (two-shot: 9.2 + 2.64792 = 11.84792 µs); 160 · 9.89584 µs = 1.583334 ms."""
    llama = MODELS["meta-llama/Llama-3.1-70B-Instruct"]
    timing = RooflineTiming(Deployment(llama, HARDWARE["h100_sxm"], tensor=4))
    comm = timing.breakdown(make_batch([[(1, 500, True, True)] * 32]))["communication"][0]
    assert comm == pytest.approx(1.583334e-3, rel=1e-5)


def test_the_all_reduce_table_is_the_fit_on_the_measured_latencies():
    """ALL_REDUCE equals what benchmarks/allreduce_fit.py fitted on benchmarks/data/aic_allreduce.csv (its
    JSON), so the code's constants are the fitted ones, for every engine the CSV records: vLLM, SGLang and
    TensorRT-LLM."""
    fitted = json.loads((REPO / "benchmarks" / "data" / "aic_allreduce_fit.json").read_text())
    assert {e: {s: {int(n): tuple(v) for n, v in t.items()} for s, t in systems.items()}
            for e, systems in fitted.items()} == ALL_REDUCE
    assert set(ALL_REDUCE) == {"vllm", "sglang", "trtllm"}


def test_every_backend_a_scenario_can_name_has_a_measured_all_reduce():
    """collective refuses an engine without a table, so every backend the configuration accepts needs one."""
    from simmodel.config.backends import BACKEND_RULES

    assert set(BACKEND_RULES) <= set(ALL_REDUCE)


def test_an_sglang_worker_prices_its_all_reduces_with_sglangs_measured_figures():
    """SGLang's custom all-reduce on H100 among 4 GPUs: a 2.8 µs step and 0.69 of 450 GB/s (vLLM's: 4.6 µs,
    0.66). Llama-3.1-70B at TP 4, 32 decodes: 160 all-reduces of 524,288 B, one-shot 2.8 + 3 · 524,288 /
    310.5e9 = 2.8 + 5.06560 = 7.86560 µs (two-shot 5.6 + 2.53280 = 8.13280), 160 of them 1.258496 ms; the
    same scenario under vLLM pays 1.583334 ms. An engine without a measured table is refused. Across
    nodes, L40S's 8 GPUs reduce at 0.06 · 32 GB/s = 1.92 GB/s and 11.0 µs a step under SGLang (vLLM: 9.9 µs,
    below the NIC's 10 µs)."""
    h100 = HARDWARE["h100_sxm"]
    assert collective(h100, Efficiency(), 4, engine="sglang") == pytest.approx((0.69 * 450e9, 2.8e-6))
    with pytest.raises(ValueError, match="no measured all-reduce for engine 'another'"):
        collective(h100, Efficiency(), 4, engine="another")
    # across nodes the ring is as slow as a whole node's all-reduce under that engine: L40S, 11 µs a step
    assert collective(HARDWARE["l40s"], Efficiency(), 16, engine="sglang") == pytest.approx((1.92e9, 11e-6))
    llama = MODELS["meta-llama/Llama-3.1-70B-Instruct"]
    timing = RooflineTiming(Deployment(llama, h100, tensor=4), engine="sglang")
    comm = timing.breakdown(make_batch([[(1, 500, True, True)] * 32]))["communication"][0]
    assert comm == pytest.approx(1.258496e-3, rel=1e-5)


def test_a_trtllm_worker_prices_its_all_reduces_with_trtllms_measured_figures():
    """TensorRT-LLM's all-reduce on H100 among 4 GPUs: a 3.1 µs step and 0.64 of 450 GB/s = 288 GB/s.
    Llama-3.1-70B at TP 4, 32 decodes: 160 all-reduces of 524,288 B, one-shot 3.1 + 3 · 524,288 / 288e9 =
    3.1 + 5.461333 = 8.561333 µs (two-shot 6.2 + 1.5 · 524,288 / 288e9 = 6.2 + 2.730667 = 8.930667), 160 of
    them 1.369813 ms."""
    h100 = HARDWARE["h100_sxm"]
    assert collective(h100, Efficiency(), 4, engine="trtllm") == pytest.approx((288e9, 3.1e-6))
    llama = MODELS["meta-llama/Llama-3.1-70B-Instruct"]
    timing = RooflineTiming(Deployment(llama, h100, tensor=4), engine="trtllm")
    comm = timing.breakdown(make_batch([[(1, 500, True, True)] * 32]))["communication"][0]
    assert comm == pytest.approx(1.369813e-3, rel=1e-5)


def test_intermediate_prefill_chunk_pays_no_lm_head_or_sampler():
    g = groups([(10, 0, False, False)])
    assert g["lm_head"] == 0.0 and g["sampler"] == 0.0


def test_mixed_pass_uses_mixed_host_overhead_and_idle_rank_costs_nothing():
    timing = RooflineTiming(Deployment(TOY, GPU, attention_data=2), ONE, HOST)
    cost = timing.price(make_batch([[(5, 0, False, True), (1, 50, True, True)], []]))
    assert cost.total_s[1] == 0.0
    assert timing.breakdown(make_batch([[(5, 0, False, True), (1, 50, True, True)], []]))["host"][0] == 1.5e-3
    assert cost.provenance == ("extrapolated:roofline", "assumed-host")


def test_moe_touches_the_experts_the_batch_routes_to():
    """Mixtral-8x7B (8 experts, 2 per token): 1 token touches 8·(1 − 6/8) = 2 experts; 64 tokens nearly all 8
    (8·(1 − 0.75^64) = 7.99999...). The expert weight bytes read grow accordingly."""
    mixtral = MODELS["mistralai/Mixtral-8x7B-v0.1"]
    t = RooflineTiming(Deployment(mixtral, HARDWARE["h100_sxm"], tensor=2, moe_tensor=2))
    expert_bytes = mixtral.num_moe_layers * mixtral.expert_params / 2 * 2
    assert t.experts_per_gpu * -np.expm1(1 * np.log1p(-t.route_fraction)) == pytest.approx(2.0)
    one = t.breakdown(make_batch([[(1, 100, True, True)]]))["experts"][0]
    many = t.breakdown(make_batch([[(1, 100, True, True)] * 64]))["experts"][0]
    assert many - one == pytest.approx(6 * expert_bytes / t.hbm, rel=0.02)


def random_ranks(rng: np.random.Generator, num_ranks: int) -> list[list[tuple]]:
    ranks = []
    for _ in range(num_ranks):
        seqs = []
        for _ in range(int(rng.integers(0, 6))):
            decode = bool(rng.random() < 0.5)
            q = 1 if decode else int(rng.integers(1, 300))
            seqs.append((q, int(rng.integers(0, 2000)), decode, decode or bool(rng.random() < 0.5)))
        ranks.append(seqs)
    return ranks


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([
    ("meta-llama/Llama-3.1-8B-Instruct", dict(tensor=1)),
    ("meta-llama/Llama-3.1-70B-Instruct", dict(tensor=4, attention_data=2)),
    ("Qwen/Qwen3-30B-A3B", dict(tensor=2, attention_data=2, moe_expert=4)),
    ("deepseek-ai/DeepSeek-V3", dict(tensor=8, moe_expert=8, weight_bytes=1, kv_bytes=1)),
    ("facebook/opt-125m", dict(tensor=1, decode_context=1)),
    ("meta-llama/Llama-3.1-70B-Instruct", dict(tensor=6)),
    ("meta-llama/Llama-3.1-70B-Instruct", dict(tensor=16)),
]), st.sampled_from(["vllm", "sglang"]), st.sampled_from([0.7, None]))
def test_vectorized_equals_loop_reference(seed, case, engine, link):
    model_id, deploy = case
    d = Deployment(MODELS[model_id], HARDWARE["h200_sxm"], **deploy)
    ranks = random_ranks(np.random.default_rng(seed), d.attention_data)
    eff, host = Efficiency(0.6, 0.75, link, 0.4), HostOverhead(2.0, 1.0, 3.0, per_layer_us=7.0, moe_layer_us=12.0,
                                                                           block_fp8_gemm_us=9.0)
    got = RooflineTiming(d, eff, host, engine=engine).price(make_batch(ranks)).total_s
    assert got.tolist() == pytest.approx(price_pass_reference(d, eff, host, ranks, engine), rel=1e-9, abs=1e-15)


def test_more_tokens_never_cost_less():
    t = RooflineTiming(Deployment(MODELS["Qwen/Qwen3-8B"], HARDWARE["h100_sxm"]))
    prefill = [t.price(make_batch([[(n, 0, False, True)]])).total_s[0] for n in (1, 10, 100, 1000, 10000)]
    decode = [t.price(make_batch([[(1, 500, True, True)] * b])).total_s[0] for b in (1, 4, 16, 64, 256)]
    assert prefill == sorted(prefill) and decode == sorted(decode)


def test_moe_routing_every_token_to_every_expert_touches_them_all():
    """Mixtral with 8 of 8 experts per token: one token touches all 8 (the formula's (1 − 8/8)^1 = 0; once
    log1p(-1), a math domain error), 6 more than with 2 of 8 (above). A one-token decode is memory-bound,
    so its linear time grows by exactly those 6 experts' bytes."""
    from dataclasses import replace

    base = MODELS["mistralai/Mixtral-8x7B-v0.1"]
    every = replace(base, num_experts_per_token=8)
    seconds = [RooflineTiming(Deployment(m, HARDWARE["h100_sxm"], tensor=2, moe_tensor=2))
               .breakdown(make_batch([[(1, 100, True, True)]]))["experts"][0] for m in (base, every)]
    t = RooflineTiming(Deployment(base, HARDWARE["h100_sxm"], tensor=2, moe_tensor=2))
    expert_bytes = base.num_moe_layers * base.expert_params / 2 * 2
    assert seconds[1] - seconds[0] == pytest.approx(6 * expert_bytes / t.hbm, rel=1e-9)


# The toy model with 4 experts of intermediate 32 in both layers, one per token, no shared expert: an expert is
# 3·64·32 = 6,144 weights a layer, the router 64·4 = 256.
TOY_MOE = ModelSpec("toy-moe", num_layers=2, hidden_size=64, num_attention_heads=4, num_kv_heads=2, head_dim=16,
                    intermediate_size=128, vocab_size=1000, tie_word_embeddings=False, max_position_embeddings=4096,
                    num_experts=4, num_experts_per_token=1, moe_intermediate_size=32)


def test_experts_are_grouped_gemms_at_their_own_efficiency_with_a_floor_per_moe_layer():
    """Tensor 1, the routed experts' grouped GEMMs at half the BF16 peak (the router, a dense GEMM, at the full
    dense efficiency 1), 3 µs a MoE layer.

    One decode token: routed FLOPs 2·2 layers·6,144 = 24,576 → 49.152 ns at 0.5e12, router 2·2·256 = 1,024 →
    1.024 ns at 1e12: 50.176 ns; bytes: it hits 1 − 3/4 = 1/4 of each expert, 4·1/4 = 1 expert: 2·6,144·2 B =
    24,576 B, plus the router's 2·256·2 B = 1,024 → 25.6 ns; max 50.176 ns, plus 2 · 3 µs = 6.050176 µs.
    A 100-token prefill: 100 × 50.176 ns = 5.0176 µs (bytes: all 4 experts, 99,328 B → 99.3 ns), plus 6 µs."""
    timing = RooflineTiming(Deployment(TOY_MOE, GPU), Efficiency(1.0, 1.0, 1.0, expert=0.5),
                            HostOverhead(0.0, 0.0, 0.0, per_layer_us=0.0, moe_layer_us=3.0))
    decode = timing.breakdown(make_batch([[(1, 100, True, True)]]))
    assert decode["experts"][0] == pytest.approx(6.050176e-6)
    prefill = timing.breakdown(make_batch([[(100, 0, False, True)]]))
    assert prefill["experts"][0] == pytest.approx(11.0176e-6)
    assert decode["communication"][0] == 0.0


def test_expert_parallelism_without_attention_dp_waits_for_the_busiest_gpu_and_exchanges_nothing():
    """Tensor 2 with the experts expert-parallel (2 a GPU), no attention DP, one decode token, efficiencies 1.

    Each expert is hit with probability 1/4; a GPU's count is B(2, 1/4): F(0) = 0.5625, F(1) = 0.9375. The busiest
    of the two: E[max] = (1 − 0.5625²) + (1 − 0.9375²) = 0.68359375 + 0.12109375 = 0.8046875 experts (the mean
    would be 0.5). Bytes 0.8046875 · 2 layers · 6,144 · 2 B = 19,776, plus the router's 2·256 / 2 GPUs · 2 B = 512:
    20,288 B → 20.288 ns, above the FLOPs' 25,600 / 2 GPUs → 12.8 ns.
    Communication: the two all-reduces a layer only (every GPU holds the token; the second all-reduce sums the
    experts' outputs): 4 · (1 µs + 64·2 B·(2·1/2) / 1e11) = 4 · 1.00128 µs; no token exchange."""
    timing = RooflineTiming(Deployment(TOY_MOE, GPU, tensor=2, moe_expert=2), Efficiency(1.0, 1.0, 1.0, 1.0),
                            HostOverhead(0.0, 0.0, 0.0, per_layer_us=0.0, moe_layer_us=0.0))
    g = timing.breakdown(make_batch([[(1, 100, True, True)]]))
    assert g["experts"][0] == pytest.approx(20.288e-9)
    assert g["communication"][0] == pytest.approx(4 * 1.00128e-6)


def test_the_busiest_gpu_reads_what_the_mean_does_once_every_expert_is_hit():
    from simmodel.perf.roofline import busiest_touched

    assert busiest_touched(16, 1.0, 8) == 16.0  # every expert hit: every GPU reads all of its own
    assert busiest_touched(2, 0.25, 1) == 0.5  # one group (tensor-sharded experts): the mean
    assert busiest_touched(2, 0.25, 2) == pytest.approx(0.8046875)  # (above)
    assert busiest_touched(2, 0.0, 8) == 0.0


def test_block_scaled_fp8_runs_at_the_bf16_rate_with_a_floor_per_gemm():
    """The toy model's FP8 weights with 128 × 128 block scales, one decode token, efficiencies 1, 5 µs a GEMM.

    linear: FLOPs 2·73,728 = 147,456 at the BF16 rate 1e12 → 147.456 ns; bytes 73,728·1 B + 8·2·64·2 B = 75,776 →
    75.776 ns: 147.456 ns (with per-channel FP8 scales the FP8 rate 2e12 makes the FLOPs 73.728 ns, and the
    bytes' 75.776 ns set it). layer_overhead: 2 layers × (qkv, output, gate-up, down) = 8 GEMMs × 5 µs = 40 µs."""
    from dataclasses import replace

    host = HostOverhead(0.0, 0.0, 0.0, per_layer_us=0.0, block_fp8_gemm_us=5.0)
    block = RooflineTiming(Deployment(replace(TOY, weight_block_size=128), GPU, weight_bytes=1), ONE, host)
    g = block.breakdown(make_batch([[(1, 100, True, True)]]))
    assert g["linear"][0] == pytest.approx(147.456e-9)
    assert g["layer_overhead"][0] == pytest.approx(40e-6)
    channel = RooflineTiming(Deployment(TOY, GPU, weight_bytes=1), ONE, host).breakdown(make_batch([[(1, 100, True, True)]]))
    assert channel["linear"][0] == pytest.approx(75.776e-9) and channel["layer_overhead"][0] == 0.0
    # the checkpoint's block scales only exist at 1-byte weights: served at 2 bytes it is a plain BF16 model
    assert Deployment(replace(TOY, weight_block_size=128), GPU, weight_bytes=2).block_scaled is False


def test_timing_fields_for_parts_the_model_lacks_are_refused():
    from factories import make_scenario

    from simmodel.config.load import parse_scenario
    from simmodel.errors import ScenarioError

    for key, message in (("moe_layer_us", "only applies to mixture-of-experts models"),
                         ("expert_efficiency", "only applies to mixture-of-experts models"),
                         ("block_fp8_gemm_us", "only applies to block-scaled FP8 weights")):
        data = make_scenario(engine={"workers": {"aggregated": {"timing": {"type": "default", key: 0.5}}}})
        with pytest.raises(ScenarioError) as err:
            parse_scenario(data, None)
        assert str(err.value).startswith(f"engine.workers.aggregated.timing.{key}: {message}")
        assert str(err.value).endswith(("meta-llama/Llama-3.1-8B-Instruct has no experts",
                                        "meta-llama/Llama-3.1-8B-Instruct at 2-byte weights has none"))
    moe = make_scenario(engine={"model": "Qwen/Qwen3-30B-A3B", "workers": {"aggregated": {
        "timing": {"type": "default", "moe_layer_us": 7.0, "expert_efficiency": 0.3}}}})
    timing = parse_scenario(moe, None).engine.workers["aggregated"].timing
    assert (timing.host.moe_layer_us, timing.efficiency.expert) == (7.0, 0.3)
