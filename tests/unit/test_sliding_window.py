"""Sliding-window layers (issue 27): vLLM's hybrid KV cache groups, the blocks a request holds as its window
slides, what that does to a rank's capacity, and the attention a sliding layer prices. Expected numbers are
derived by hand from vLLM's rules (docs/research/vllm-hybrid-kv.md) and the models' published configs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simmodel.config.load import parse_scenario
from simmodel.engine.kv_cache import BlockPool
from simmodel.engine.request import Request
from simmodel.engine.scheduler.vllm import VllmScheduler, VllmSchedulerConfig
from simmodel.errors import ScenarioError
from simmodel.perf.deployment import Deployment
from simmodel.perf.hardware import HARDWARE
from simmodel.perf.kv_layout import kv_layout
from simmodel.perf.models import MODELS
from simmodel.perf.roofline import Efficiency, RooflineTiming
from simmodel.perf.timing import PassBatch
from tests.factories import make_scenario

OSS = MODELS["openai/gpt-oss-120b"]


def test_groups_follow_vllms_group_size_rule():
    """gpt-oss-120b: 18 sliding and 18 full layers, 18 < 1.5 × 18, so groups of 18: one of each. Gemma 3 27B: 52
    sliding, 10 full, 52 ≥ 15, so groups of 10: cdiv(10, 10) = 1 full and cdiv(52, 10) = 6 sliding. With the
    manager off, one group of every layer; a model without sliding layers, one group."""
    oss = kv_layout(OSS)
    assert (oss.group_size, oss.full_groups, oss.sliding_groups, oss.window) == (18, 1, 1, 128)
    gemma = kv_layout(MODELS["google/gemma-3-27b-it"])
    assert (gemma.group_size, gemma.full_groups, gemma.sliding_groups, gemma.window) == (10, 1, 6, 1024)
    assert (kv_layout(OSS, hybrid=False).group_size, kv_layout(OSS, hybrid=False).hybrid) == (36, False)
    llama = kv_layout(MODELS["meta-llama/Llama-3.1-8B-Instruct"])
    assert (llama.group_size, llama.num_groups, llama.hybrid) == (32, 1, False)


def test_blocks_held_as_the_window_slides():
    """gpt-oss, 16-token blocks, window 128. A 1000-token prompt in one chunk: cdiv(1000, 16) = 63 blocks in each
    group, 126. At the first decode (1000 computed) the sliding group has skipped (1000 − 127) // 16 = 54 blocks:
    2 × 63 − 54 = 72. Chunked 512 + 488: the second chunk starts with (512 − 127) // 16 = 24 skipped, so the
    sliding group peaks at 63 − 24 = 39 blocks: 102 in all."""
    layout = kv_layout(OSS)
    assert layout.blocks(1000, 0, 16) == 126
    assert layout.blocks(1001, 1000, 16) == 72
    assert layout.blocks(1000, 512, 16) == 102
    # One request at context 32768 with 8192-token chunks: 2048 full blocks, and the window's
    # cdiv(min(127 + 8192, 32768), 16) + 1 = 521 sliding ones (vLLM's startup check).
    assert layout.max_blocks(32768, 16, 8192) == 2048 + 521


def test_capacity_doubles_for_gpt_oss():
    """A block of one 18-layer group of gpt-oss-120b at TP 1, BF16 KV: 16 tokens × 18 layers × 2 × 8 heads × 64 ×
    2 B = 589,824 B, half a 36-layer block, so a rank has twice the blocks; vLLM reports 40 GiB as
    72,817 blocks // 2 groups × 16 = 582,528 tokens."""
    d = Deployment(OSS, HARDWARE["h200_sxm"])
    layout = kv_layout(OSS)
    assert 16 * d.kv_bytes_per_token_per_gpu * layout.block_fraction == 589_824
    assert (40 << 30) // 589_824 == 72_817
    assert layout.capacity_tokens(72_817, 16) == 582_528


def _scheduler(blocks: int, budget: int = 8192) -> tuple[VllmScheduler, BlockPool]:
    pool = BlockPool(blocks, 16, kv_layout(OSS))
    return VllmScheduler(VllmSchedulerConfig(max_num_batched_tokens=budget, max_model_len=4096), pool), pool


def _step(s: VllmScheduler):
    out = s.schedule()
    s.update_from_output(out)
    return out


def test_scheduler_frees_blocks_behind_the_window():
    """One 1000-token prompt, 512-token budget: pass 1 computes 512 (32 blocks a group: 64); pass 2 first frees
    the 24 sliding blocks behind the window, then takes 2 × 63 − 24 − 40 = 62 (102 held); the first decode frees
    (1000 − 127) // 16 − 24 = 30 and needs no new one (72 held); at 1008 computed the decode needs a 64th block in
    each group while the 55th sliding block falls behind: 73."""
    s, pool = _scheduler(1000, budget=512)
    r = Request(0, 0, 1000, 100)
    s.add_request(r)
    _step(s)
    assert (r.num_blocks, pool.num_used_blocks) == (64, 64)
    _step(s)
    assert (r.num_blocks, pool.num_used_blocks, r.num_skipped_blocks) == (102, 102, 24)
    _step(s)  # the first decode, 1000 computed
    assert (r.num_blocks, pool.num_used_blocks, r.num_skipped_blocks) == (72, 72, 54)
    while r.num_computed_tokens < 1008:
        _step(s)
    _step(s)  # the decode at 1008 computed: slots for 1009 tokens
    assert (r.num_blocks, pool.num_used_blocks, r.num_skipped_blocks) == (73, 73, 55)


def test_async_frees_only_behind_the_tokens_processed():
    """vLLM frees a sliding group's blocks on the tokens processed (``remove_skipped_blocks`` at computed − in
    flight): under async scheduling the pass in flight's tokens may yet be rolled back. gpt-oss (window 128,
    16-token blocks), a 208-token prompt: its prefill holds 13 blocks a group (26). The decode planned while the
    prefill runs has 0 tokens processed: it frees nothing, and its slot 209 needs a 14th block in each group
    (28). The next plan, with the prefill's output in and 208 processed, frees (208 − 127) // 16 = 5 sliding
    blocks and needs none (23)."""
    pool = BlockPool(1000, 16, kv_layout(MODELS["openai/gpt-oss-120b"]))
    s = VllmScheduler(VllmSchedulerConfig(max_num_batched_tokens=8192, max_model_len=4096, async_scheduling=True),
                      pool)
    r = Request(0, 0, 208, 10)
    s.add_request(r)
    first = s.schedule()
    assert r.num_blocks == 26
    s.schedule()
    assert (r.num_blocks, r.num_skipped_blocks) == (28, 0)
    s.update_from_output(first)
    s.schedule()
    assert (r.num_blocks, r.num_skipped_blocks, pool.num_used_blocks) == (23, 5, 23)


def test_admission_cap_and_tokens_in_flight():
    """vLLM's ``max_admission_blocks_per_request`` for gpt-oss (window 128, 16-token blocks, context 32768, budget
    8192): cdiv(127 + tokens in flight, 16) + 1, the tokens in flight one budget synchronous (8192: cdiv(8319, 16) +
    1 = 521) and two under async scheduling (16384: cdiv(16511, 16) + 1 = 1033), P budgets with P stages. A 2000-token
    sequence checked whole holds 125 full-group blocks and at most 10 sliding ones when capped at 10: 135; with 320
    tokens cached (20 blocks, 12 of them behind the window) the sliding group counts its 20 positions less the 12:
    125 + 20 − 12 = 133."""
    from simmodel.perf.kv_layout import in_flight_tokens

    assert (in_flight_tokens(8192, False), in_flight_tokens(8192, True), in_flight_tokens(8192, False, 3)) == (
        8192, 16384, 3 * 8192)
    layout = kv_layout(MODELS["openai/gpt-oss-120b"])
    assert layout.sliding_cap(32768, 16, 8192) == 521 and layout.sliding_cap(32768, 16, 16384) == 1033
    assert layout.max_blocks(32768, 16, 16384) == 2048 + 1033
    assert layout.blocks(2000, 0, 16, cap=10) == 135 and layout.blocks(2000, 320, 16, cap=10) == 133
    assert layout.blocks(2000, 0, 16) == 250  # (uncapped: every position in both groups)


def test_a_sliding_pool_admits_what_a_full_one_cannot():
    """Two 1000-token prompts with 200 blocks of 18 layers. Each reserves 126 at admission (every group's whole
    prompt), so the second waits; after the first's prompt the sliding group frees 54 blocks (72 held), leaving
    128 ≥ 126: the second is admitted at the first decode pass. With every layer in one group a prompt takes 63
    blocks of 36 layers (the same bytes) and 200 half-size blocks are 100 of them: the second never fits."""
    s, pool = _scheduler(200)
    a, b = Request(0, 0, 1000, 10), Request(1, 0, 1000, 10)
    s.add_request(a)
    s.add_request(b)
    out = _step(s)
    assert out.requests == [a]
    out = _step(s)
    assert out.requests == [a, b] and pool.num_used_blocks == 72 + 126


def _yaml(**worker) -> dict:
    return make_scenario(engine={"model": "openai/gpt-oss-120b", "hardware": "h200_sxm", "context_length": 8192,
                                 "workers": {"aggregated": worker}})


def test_scenario_refusals():
    """A host tier (a KV connector), another engine or hybrid on a model without sliding layers: one line naming
    the field."""
    with pytest.raises(ScenarioError, match=r"kv_cache.hybrid: vLLM.s hybrid KV cache manager .*with kv_cache.host_offload"):
        parse_scenario(_yaml(kv_cache={"host_offload": {"capacity_gib": 10}}), Path("."))
    with pytest.raises(ScenarioError, match=r"engine.backend: openai/gpt-oss-120b has sliding-window layers"):
        parse_scenario(make_scenario(engine={"model": "openai/gpt-oss-120b", "hardware": "h200_sxm",
                                             "backend": "sglang", "context_length": 8192, "workers": {
                                                 "aggregated": {"scheduler": None, "kv_cache": {
                                                     "block_size": 1, "capacity": {"type": "fixed",
                                                                                   "blocks": 100000}}}}}), Path("."))
    with pytest.raises(ScenarioError, match=r"kv_cache.hybrid: only applies to models with sliding-window layers"):
        parse_scenario(make_scenario(engine={"workers": {"aggregated": {"kv_cache": {"hybrid": False}}}}), Path("."))


def test_default_capacity_counts_group_blocks():
    """gpt-oss-120b on one H200 at memory_fraction 0.9: weights 116.79 B parameters less the 114.68 B of experts at
    2 B, experts at MXFP4's 0.53125 B: 65.15 GB. The blocks then hold half the layers each (589,824 B), twice what
    kv_cache.hybrid false gives (1,179,648 B), to within the floor."""
    def blocks(**kv):
        role = parse_scenario(_yaml(kv_cache={"prefix_caching": False, "capacity": {"type": "default"}, **kv}),
                              Path(".")).engine.workers["aggregated"]
        return role
    on, off = blocks(), blocks(hybrid=False)
    d = on.deployment
    assert d.weight_bytes_per_gpu / 1e9 == pytest.approx(65.15, abs=0.01)
    free = HARDWARE["h200_sxm"].memory_bytes * 0.9 - d.weight_bytes_per_gpu - (1 << 30)
    assert on.num_kv_blocks == int(free // 589_824) and off.num_kv_blocks == int(free // 1_179_648)
    assert on.kv_tokens_per_rank == on.num_kv_blocks // 2 * 16


def test_sliding_layers_read_only_the_window():
    """A decode pass of 10 sequences at 999 tokens of context (1000 query·key pairs each): the 18 full layers read
    1000 tokens' KV, the 18 sliding ones 128, so the attention group reads 10 × (1000 + 128) / 2 = 5640 tokens of
    every layer's KV (73,728 B a token) plus the queries; at batch 10 it is memory-bound."""
    d = Deployment(OSS, HARDWARE["h200_sxm"])
    timing = RooflineTiming(d, Efficiency(1.0, 1.0, expert=1.0))
    n = 10
    batch = PassBatch(1, np.zeros(n, np.int64), np.ones(n, np.int64), np.full(n, 999), np.ones(n, bool),
                      np.ones(n, bool), np.array([1e6]))
    attention = timing.breakdown(batch)["attention"][0]
    expected = (5640 * 73_728 + n * timing.query_bytes_per_token) / HARDWARE["h200_sxm"].hbm_bytes_per_s
    assert attention == pytest.approx(expected, rel=1e-12)


def test_gpt_oss_120b_runs_on_one_h200():
    """The scenario shipped for it runs to the end with the hybrid groups in the pool."""
    from simmodel.sim import Simulation

    scenario = parse_scenario(_yaml(kv_cache={"prefix_caching": False, "capacity": {"type": "default"}},
                                    timing={"type": "default"}), Path("."))
    results = Simulation(scenario).run()
    assert results.summary["completed_requests"] == 4


def test_config_json_of_sliding_models(tmp_path):
    """gpt-oss-120b's published config.json (the keys read; layer_types alternate from sliding_attention) parses to
    the registry row, MXFP4 experts included. Gemma 3's text_config with sliding_window_pattern 6 over 62 layers
    slides on 62 − 62 // 6 = 52; Gemma 2 without head_dim takes transformers' 256 and slides on the 21 even layers
    of 42; Qwen2.5's sliding_window with use_sliding_window false slides on none."""
    import json

    from simmodel.perf.hf_config import model_from_hf_config

    oss = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 36,
           "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
           "intermediate_size": 2880, "vocab_size": 201088, "tie_word_embeddings": False,
           "max_position_embeddings": 131072, "num_local_experts": 128, "num_experts_per_tok": 4,
           "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18,
           "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
               "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}
    path = tmp_path / "oss.json"
    path.write_text(json.dumps(oss))
    assert model_from_hf_config(path, "openai/gpt-oss-120b") == OSS
    gemma3 = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "torch_dtype": "bfloat16",
              "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 62, "hidden_size": 5376,
                              "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
                              "intermediate_size": 21504, "vocab_size": 262208, "max_position_embeddings": 131072,
                              "sliding_window": 1024, "sliding_window_pattern": 6}}
    path.write_text(json.dumps(gemma3))
    assert model_from_hf_config(path, "google/gemma-3-27b-it") == MODELS["google/gemma-3-27b-it"]
    gemma2 = {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "num_hidden_layers": 42,
              "hidden_size": 3584, "num_attention_heads": 16, "num_key_value_heads": 8, "intermediate_size": 14336,
              "vocab_size": 256000, "max_position_embeddings": 8192, "sliding_window": 4096,
              "torch_dtype": "float32"}
    path.write_text(json.dumps(gemma2))
    g2 = model_from_hf_config(path)
    assert (g2.head_dim, g2.num_sliding_layers, g2.tie_word_embeddings) == (256, 21, True)
    qwen = {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
            "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
            "max_position_embeddings": 32768, "sliding_window": 131072, "use_sliding_window": False}
    path.write_text(json.dumps(qwen))
    assert model_from_hf_config(path).sliding_window == 0


def test_gpt_oss_experts_are_mxfp4_beside_bf16():
    """engine.dtype auto serves gpt-oss as it ships: attention, embeddings and LM head in BF16 (2 B), the experts
    in MXFP4 (4 bits + an E8M0 scale per 32: 0.53125 B), multiplied on FP4 tensor cores where the GPU has them
    (B200: its FP4 peak × FP4_COMPUTE) and dequantized to BF16 where it does not (H200: BF16 × WEIGHT_ONLY_COMPUTE);
    the other GEMMs at BF16's peak."""
    from simmodel.config.workers import weight_fields
    from simmodel.perf.roofline import FP4_COMPUTE, WEIGHT_ONLY_COMPUTE, weight_gemm_peak

    fields = weight_fields(OSS, "auto")
    assert fields == dict(weight_bytes=2, expert_weight_format="mxfp4", expert_weight_bytes=0.53125)
    h200, b200 = HARDWARE["h200_sxm"], HARDWARE["b200_sxm"]
    d = Deployment(OSS, h200, **fields)
    assert weight_gemm_peak(d, experts=True) == h200.bf16_flops * WEIGHT_ONLY_COMPUTE
    assert weight_gemm_peak(d) == h200.bf16_flops
    d = Deployment(OSS, b200, **fields)
    assert weight_gemm_peak(d, experts=True) == b200.gemm_peak("fp4") * FP4_COMPUTE
    # engine.dtype fp8 requantizes every weight, the experts included
    assert Deployment(OSS, h200, **weight_fields(OSS, "fp8")).expert_kind is None


def _hybrid_pool(blocks: int = 1000):
    from simmodel.engine.hybrid_kv_cache import HybridPrefixCachingPool

    return HybridPrefixCachingPool(blocks, 16, kv_layout(OSS))


def _keyed(tokens: int, rid: int = 0) -> Request:
    from simmodel.engine.kv_cache import BlockKeys, token_block_content

    r = Request(rid, 0, tokens, 1)
    r.block_keys = BlockKeys(token_block_content(list(range(tokens)), 16, (-1, rid)))
    return r


@pytest.mark.parametrize("full, sliding_missing, expected", [
    (62, (58, 59), 58),  # the last run of 8 (= cdiv(127, 16)) cached sliding blocks ends at block 58
    (10, (), 10),  # the run of 8 ends where the full-attention hit ends
    (12, (5,), 5),  # no run of 8 within the first 12: only the run from block 0 (blocks 0–4)
])
def test_hybrid_hit_needs_a_window_of_sliding_blocks(full, sliding_missing, expected):
    """vLLM's hybrid hit: the full group's run from the start (``full`` blocks cached), then the sliding group
    scans back from there for cdiv(W − 1, 16) = 8 contiguous cached blocks; the hit ends where that run ends.
    The sliding blocks before the window are nulls: a hit of 58 blocks (928 tokens) holds sliding blocks from
    (928 − 127) // 16 = 50 on."""
    pool, r = _hybrid_pool(), _keyed(1010)
    keys = r.block_keys.upto(62)
    for j in range(full):
        pool.blocks_by_key[(0, keys[j])] = {j: None}
        if j not in sliding_missing:
            pool.blocks_by_key[(1, keys[j])] = {500 + j: None}
    hits = pool.find_hits(r)
    assert len(hits) == expected
    skipped = max(expected * 16 - 127, 0) // 16
    assert hits.per_group[1] == [-1] * skipped + [500 + j for j in range(skipped, expected)]


def test_hybrid_prefix_caching_end_to_end():
    """A (1000 tokens, one output) prefills in one pass and caches its 62 whole blocks in both groups, then frees
    them (still cached). B, the same 1000 tokens and 100 more: the full group hits blocks 0–61; scanning back, the
    sliding group's last 8 blocks (54–61) are cached: a hit of 62 blocks, 992 tokens. B then holds 62 full blocks
    and the 8 sliding ones in the window ((992 − 127) // 16 = 54 skipped) before taking its prompt's other
    cdiv(1100, 16) − 62 = 7 positions in both groups: 62 + 8 + 14 = 84 blocks in use."""
    pool = _hybrid_pool()
    s = VllmScheduler(VllmSchedulerConfig(max_num_batched_tokens=8192, max_model_len=4096,
                                          enable_prefix_caching=True), pool)
    a = _keyed(1000, 0)
    s.add_request(a)
    _step(s)
    assert pool.num_used_blocks == 0 and a.status.name == "FINISHED"
    b = _keyed(1100, 1)
    s.add_request(b)
    s.schedule()
    assert b.num_cached_tokens == 992 and pool.num_used_blocks == 84 == b.num_blocks


def test_every_layer_sliding(tmp_path):
    """A Mistral-7B-v0.1-style config.json (sliding_window 4096, no layer types): every layer slides, one sliding
    group whatever kv_cache.hybrid says (so setting it is refused); a host tier and pipeline stages are refused with
    it."""
    import json

    cfg = {"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
           "max_position_embeddings": 32768, "sliding_window": 4096}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    layout = kv_layout(__import__("simmodel.perf.hf_config", fromlist=["x"]).model_from_hf_config(path))
    assert (layout.full_groups, layout.sliding_groups, layout.window) == (0, 1, 4096)
    data = make_scenario(engine={"model": str(path), "workers": {"aggregated": {
        "kv_cache": {"host_offload": {"capacity_gib": 10}}}}})
    with pytest.raises(ScenarioError, match="kv_cache.host_offload: every layer of .* attends within a 4096-token"):
        parse_scenario(data, Path("."))
    data = make_scenario(engine={"model": str(path), "workers": {"aggregated": {"parallelism": {"pipeline": 2}}}})
    with pytest.raises(ScenarioError, match="pipeline: of a model whose every layer attends within a window"):
        parse_scenario(data, Path("."))
    data = make_scenario(engine={"model": str(path), "workers": {"aggregated": {"kv_cache": {"hybrid": False}}}})
    with pytest.raises(ScenarioError, match="kv_cache.hybrid: every layer of .* one group of one kind"):
        parse_scenario(data, Path("."))


def test_one_request_must_fit_its_admission():
    """With reserve_full_isl (the default) a request reserves its whole prompt in both groups at admission: at
    context_length 8192 that is 2 × 512 = 1024 blocks, so 1000 blocks are refused at validation; without it vLLM's
    startup check holds: 512 full blocks + cdiv(min(127 + 8192, 8192), 16) + 1 = 513 window blocks = 1025, still
    refused; 2000 blocks pass both."""
    def parse(blocks, reserve=True):
        return parse_scenario(_yaml(kv_cache={"prefix_caching": False, "capacity": {"type": "fixed", "blocks": blocks}},
                                    scheduler={"async_scheduling": False, "reserve_full_isl": reserve}), Path("."))
    with pytest.raises(ScenarioError, match="needs 1024"):
        parse(1000)
    with pytest.raises(ScenarioError, match="needs 1025"):
        parse(1000, reserve=False)
    assert parse(2000).engine.workers["aggregated"].num_kv_blocks == 2000
