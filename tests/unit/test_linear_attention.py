"""Linear-attention layers (issue 27): Qwen3-Next's Gated DeltaNet layers as vLLM's hybrid KV cache manager keeps
their state, sized and priced. Expected numbers are derived by hand from the published config and vLLM's rules
(``gated_delta_net_state_shape``, ``HybridAttentionMambaModelConfig``; docs/research/vllm-hybrid-kv.md)."""

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
from simmodel.perf.kv_layout import kv_layout, state_block_size
from simmodel.perf.models import MODELS
from simmodel.perf.roofline import Efficiency, RooflineTiming
from simmodel.perf.timing import PassBatch
from tests.factories import make_scenario

QN = MODELS["Qwen/Qwen3-Next-80B-A3B-Instruct"]


def test_qwen3_next_parameters_and_state():
    """12 gated attention layers: q 2048 × (16 × 256) × 2 (the output gate), k and v 2048 × 512, o 4096 × 2048:
    27.26 M. 36 Gated DeltaNet layers: q/k/v/z 2048 × (2·16·128 + 2·32·128), b/a 2048 × 64, a depthwise
    convolution of 8192 channels × 4, 32 + 32 decay and step biases, a 128-wide norm, out 4096 × 2048: 33.72 M.
    48 MoE layers of 512 + 1 experts of 3·2048·512 and a 2048 × 512 router; embeddings and LM head 2 × 151936 ×
    2048: 79.67 B (the card's 80 B). KV: 12 layers × 2 × 2 heads × 256 × 2 B = 24,576 B a token. State of one
    sequence in one linear layer at TP 1: 8192 × 3 convolution inputs + 32 × 128 × 128 = 548,864 values, 1,097,728
    B in BF16; over 36 layers 39.5 MB, whatever the context."""
    attention = 2048 * 4096 * 3 + 2 * 2048 * 512
    linear = 2048 * (4096 + 8192) + 2048 * 64 + 8192 * 4 + 64 + 128 + 4096 * 2048
    moe = 513 * 3 * 2048 * 512 + 2048 * 512
    assert (QN.attention_params, QN.linear_attention_params) == (attention, linear)
    total = 12 * attention + 36 * linear + 48 * moe + 2 * 151936 * 2048 + 2 * 2048 * 48 + 2048
    assert QN.num_parameters == total and total / 1e9 == pytest.approx(79.67, abs=0.01)
    assert QN.kv_bytes_per_token(2) == 24_576
    assert QN.linear_state_values() == 548_864
    d = Deployment(QN, HARDWARE["h200_sxm"])
    assert d.linear_state_bytes_per_gpu == 36 * 1_097_728


def test_block_size_and_groups():
    """vLLM raises the block size to 16 × cdiv(1,097,728, 16 × 2048) = 16 × 34 = 544 tokens, so that one attention
    layer's block (544 × 2048 B) holds one layer's state. Groups of min(12, 36) = 12 layers (36 ≥ 1.5 × 12): one
    attention group and three state groups. A request of 1000 tokens holds cdiv(1000, 544) = 2 attention blocks and
    one block per state group: 5; the block is 12 layers × 544 × 2048 B = 13,369,344 B."""
    assert state_block_size(2048, 1_097_728) == 544
    layout = kv_layout(QN)
    assert (layout.group_size, layout.full_groups, layout.sliding_groups, layout.state_groups) == (12, 1, 0, 3)
    assert layout.blocks(1000, 0, 544) == 5 and layout.max_blocks(32768, 544, 8192) == 61 + 3
    assert 544 * QN.kv_bytes_per_token(2) * layout.block_fraction == 13_369_344


def test_scheduler_holds_one_state_block_per_group():
    """A 1000-token prompt admitted alone takes 5 blocks; decoding to 1088 tokens keeps 5 (two attention blocks of
    544 hold them); the decode at 1088 computed needs a third attention block: 6."""
    pool = BlockPool(100, 544, kv_layout(QN))
    s = VllmScheduler(VllmSchedulerConfig(max_num_batched_tokens=8192, max_model_len=4096), pool)
    r = Request(0, 0, 1000, 200)
    s.add_request(r)
    s.update_from_output(s.schedule())
    assert pool.num_used_blocks == 5
    while r.num_computed_tokens < 1088:
        s.update_from_output(s.schedule())
    assert pool.num_used_blocks == 5
    s.update_from_output(s.schedule())
    assert pool.num_used_blocks == 6


def test_decode_reads_and_writes_the_state():
    """A decode of 4 sequences at 999 tokens of context, at datasheet peaks: the 12 attention layers read 1000
    tokens' KV each (24,576 B a token) and the queries, and every linear layer's state is read and written back
    (2 × 39.5 MB a sequence): memory-bound."""
    hw = HARDWARE["h200_sxm"]
    timing = RooflineTiming(Deployment(QN, hw), Efficiency(1.0, 1.0, expert=1.0))
    n = 4
    batch = PassBatch(1, np.zeros(n, np.int64), np.ones(n, np.int64), np.full(n, 999), np.ones(n, bool),
                      np.ones(n, bool), np.array([1e6]))
    expected = n * (1000 * 24_576 + timing.query_bytes_per_token + 2 * 36 * 1_097_728) / hw.hbm_bytes_per_s
    assert timing.breakdown(batch)["attention"][0] == pytest.approx(expected, rel=1e-12)


def _yaml(**kv) -> dict:
    data = make_scenario(engine={"model": "Qwen/Qwen3-Next-80B-A3B-Instruct", "hardware": "h200_sxm",
                                 "context_length": 8192, "workers": {"aggregated": {
                                     "parallelism": {"tensor": 2}, "kv_cache": {"prefix_caching": False, **kv}}}})
    cache = data["engine"]["workers"]["aggregated"]["kv_cache"]
    if "block_size" not in kv:
        del cache["block_size"]  # (the factory's 16: vLLM's default would be raised)
    return data


def test_from_yaml():
    """The block size defaults to vLLM's 544 (at TP 2 both the KV heads and the state halve); a run completes."""
    from simmodel.sim import Simulation

    data = _yaml(capacity={"type": "default"})
    data["engine"]["workers"]["aggregated"]["timing"] = {"type": "default"}
    role = parse_scenario(data, Path(".")).engine.workers["aggregated"]
    assert role.kv_cache.block_size == 544
    assert Simulation(parse_scenario(data, Path("."))).run().summary["completed_requests"] == 4


def test_prefix_caching_splits_at_the_replay_boundary():
    """With prefix caching (vLLM's mamba_cache_mode align) a gated DeltaNet cannot write a state inside a pass: the
    pool has no checkpoint, so prompts are cut at their replay boundary (``StatePrefixCachingPool``)."""
    from simmodel.sim import Simulation

    sim = Simulation(parse_scenario(_yaml(prefix_caching=True), Path(".")))
    pool = sim.workers[0].ranks[0].scheduler.pool
    assert pool.states and not pool.checkpoint
    res = sim.run()
    # 100-token prompts, blocks of 544: no block boundary before the last token, so no cut (one prefill pass each).
    assert res.summary["completed_requests"] == 4 and res.passes.num_prefill_tokens.tolist().count(100) == 4


@pytest.mark.parametrize("kv, message", [
    ({"block_size": 256}, "kv_cache.block_size: Qwen/Qwen3-Next-80B-A3B-Instruct has 36 linear-attention layers; "
                          "vLLM raises the block size to 544"),
    ({"hybrid": False}, "kv_cache.hybrid: Qwen/Qwen3-Next-80B-A3B-Instruct has 36 linear-attention layers: vLLM "
                        "cannot serve them without"),
])
def test_refusals(kv, message):
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_yaml(**kv), Path("."))
    assert message in str(info.value)


def test_config_json(tmp_path):
    """Qwen3-Next-80B-A3B-Thinking's config.json (the keys read): full_attention_interval 4 makes 48 // 4 = 12
    attention layers and 36 linear ones; it parses to the registry row."""
    import json

    from simmodel.perf.hf_config import model_from_hf_config

    cfg = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "decoder_sparse_step": 1,
           "full_attention_interval": 4, "head_dim": 256, "hidden_size": 2048, "intermediate_size": 5120,
           "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
           "linear_num_value_heads": 32, "linear_value_head_dim": 128, "max_position_embeddings": 262144,
           "mlp_only_layers": [], "moe_intermediate_size": 512, "num_attention_heads": 16, "num_experts": 512,
           "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2,
           "shared_expert_intermediate_size": 512, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
           "use_sliding_window": False, "vocab_size": 151936}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert model_from_hf_config(path, "Qwen/Qwen3-Next-80B-A3B-Thinking") == MODELS["Qwen/Qwen3-Next-80B-A3B-Thinking"]
