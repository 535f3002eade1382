"""Nemotron-H (issue 27): single-block layers of Mamba-2, attention, MLP and MoE (``hybrid_override_pattern``), the
Mamba-2 state as vLLM's hybrid KV cache manager keeps it, sized and priced. Expected numbers are derived by hand
from the published configs (aiconfigurator-core's copies, named in the registry rows) and vLLM's rules
(``MambaMixer2``, ``mamba2_state_shape``, ``NemotronHForCausalLMConfig``'s float32 state, the block size raised to
hold a layer's state, ``MambaSpec.num_speculative_blocks``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from simmodel.config.load import parse_scenario
from simmodel.engine.kv_cache import BlockPool
from simmodel.engine.request import Request
from simmodel.engine.scheduler.vllm import VllmScheduler, VllmSchedulerConfig
from simmodel.errors import ScenarioError
from simmodel.perf.deployment import Deployment
from simmodel.perf.drafting import draft_model
from simmodel.perf.hardware import HARDWARE
from simmodel.perf.hf_config import model_from_hf_config
from simmodel.perf.kv_layout import kv_layout, state_block_size
from simmodel.perf.models import MODELS
from simmodel.perf.roofline import Efficiency, RooflineTiming
from simmodel.perf.timing import PassBatch
from tests.factories import make_scenario

NANO = MODELS["nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"]
H56 = MODELS["nvidia/Nemotron-H-56B-Base-8K"]
NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"


def test_nano_layers_and_parameters():
    """52 layers: 23 M, 6 *, 23 E. A Mamba-2 layer at hidden 2688: inner 64 × 64 = 4096, convolution channels 4096 +
    2 × 8 × 128 = 6144; in_proj 2688 × (4096 + 6144 + 64), conv 6144 × 4 and its bias 6144, A, D and the step bias
    3 × 64, the gated norm 4096, out_proj 4096 × 2688: 38,742,208. Attention: q and o 2 × 2688 × 32 × 128, k and v
    2 × 2688 × 2 × 128: 23,396,352. MoE: 128 squared-ReLU experts of 2 × 2688 × 1856, a shared one of 2 × 2688 ×
    3712, a 2688 × 128 router: 1,297,465,344. Embeddings and LM head 2 × 131072 × 2688; one norm per layer and the
    final one. 31,577,937,344: the report's 31.6 B. Active: 6 experts, the shared one and the router per MoE layer;
    3.58 B with both embeddings (the report's 3.6 B), 3.23 B without the input embedding (its 3.2 B)."""
    assert (NANO.num_layers, NANO.num_linear_layers, NANO.num_attention_layers, NANO.num_moe_layers,
            NANO.num_dense_layers) == (52, 23, 6, 23, 0)
    mamba = 2688 * (4096 + 6144 + 64) + 6144 * 4 + 6144 + 3 * 64 + 4096 + 4096 * 2688
    attention = 2 * 2688 * 4096 + 2 * 2688 * 256
    expert, shared, router = 2 * 2688 * 1856, 2 * 2688 * 3712, 2688 * 128
    assert (NANO.linear_attention_params, NANO.attention_params) == (mamba, attention) == (38_742_208, 23_396_352)
    assert NANO.moe_layer_params == 128 * expert + shared + router == 1_297_465_344
    embeddings, norms = 131072 * 2688, 2688 * 53
    total = 23 * mamba + 6 * attention + 23 * (128 * expert + shared + router) + 2 * embeddings + norms
    assert NANO.num_parameters == total == 31_577_937_344
    active = 23 * mamba + 6 * attention + 23 * (6 * expert + shared + router) + 2 * embeddings + norms
    assert NANO.num_active_parameters == active
    assert active / 1e9 == pytest.approx(3.6, abs=0.05) and (active - embeddings) / 1e9 == pytest.approx(3.2, abs=0.05)


def test_56b_layers_and_parameters():
    """118 layers: 54 M, 10 *, 54 - (squared-ReLU MLPs of 32768). Mamba-2 at hidden 8192: inner 256 × 64 = 16384,
    channels 16384 + 2 × 8 × 256 = 20480; in_proj 8192 × (16384 + 20480 + 256), conv 20480 × 5, 3 × 256, norm 16384,
    out_proj 16384 × 8192: 438,424,320. Attention 2 × 8192 × 8192 + 2 × 8192 × 1024; MLP 2 × 8192 × 32768.
    56,324,350,464: the Nemotron-H report's 56 B."""
    assert (H56.num_linear_layers, H56.num_attention_layers, H56.num_dense_layers, H56.num_moe_layers) == (54, 10, 54, 0)
    mamba = 8192 * (16384 + 20480 + 256) + 20480 * 5 + 3 * 256 + 16384 + 16384 * 8192
    assert mamba == H56.linear_attention_params == 438_424_320
    total = (54 * mamba + 10 * (2 * 8192 * 8192 + 2 * 8192 * 1024) + 54 * 2 * 8192 * 32768 + 2 * 131072 * 8192
             + 8192 * 119)
    assert H56.num_parameters == total == 56_324_350_464


def test_kv_and_state_bytes():
    """KV: only the attention layers, 2 × KV heads × 128 × 2 B: Nano 6 × 1024 = 6,144 B a token, the 56B 10 × 4096 =
    40,960. The Nano's state at TP 1, per layer: the convolution's 3 last inputs of 6144 channels in BF16 (36,864 B)
    and 64 heads × 64 × 128 in float32 (2,097,152 B): 2,134,016 B; 23 layers 49,082,368 B a sequence."""
    assert (NANO.kv_bytes_per_token(2), H56.kv_bytes_per_token(2)) == (6_144, 40_960)
    assert NANO.linear_state_shape() == (3 * 6144, 64 * 64 * 128)
    d = Deployment(NANO, HARDWARE["h200_sxm"])
    assert d.linear_state_bytes_per_gpu == 23 * (3 * 6144 * 2 + 64 * 64 * 128 * 4) == 49_082_368


def test_block_size_and_groups():
    """vLLM raises the block size to 16 × cdiv(2,134,016, 16 × 1024) = 16 × 131 = 2096 tokens. Groups of min(6, 23)
    = 6 layers (23 ≥ 1.5 × 6): one attention group and cdiv(23, 6) = 4 state groups; a request of 1000 tokens holds
    one attention block and one per state group: 5."""
    assert state_block_size(1024, 2_134_016) == 2096
    layout = kv_layout(NANO)
    assert (layout.group_size, layout.full_groups, layout.state_groups, layout.state_blocks) == (6, 1, 4, 1)
    assert layout.blocks(1000, 0, 2096) == 5


def test_state_under_tensor_parallelism():
    """Heads and groups split over the GPUs: at TP 8 the Nano's convolution keeps (4096 + 2 × 8 × 128) / 8 = 768
    channels × 3 and 8 heads × 64 × 128 of state. A model with a single group (Mamba-2's default) replicates it on
    every GPU (vLLM's extra_groups_for_head_shards): at TP 4 the channels are (4096 + 2 × 4 × 128) / 4 = 1280."""
    assert NANO.linear_state_shape(8) == (768 * 3, 8 * 64 * 128)
    single = replace(NANO, mamba_groups=1)
    assert single.linear_state_shape(4) == (1280 * 3, 16 * 64 * 128)
    assert single.mamba_conv_dim() == 4096 + 2 * 128


def test_state_flops_per_token():
    """Per token and Mamba-2 layer at TP 1: 5 FLOPs per recurrent value (decay, B·x accumulate, C read-out) over 64 ×
    64 × 128 values, and 2 × 4 taps over 6144 channels: 23 × (2,621,440 + 49,152) = 61,423,616."""
    assert NANO.state_flops_per_token() == 23 * (5 * 64 * 64 * 128 + 2 * 4 * 6144) == 61_423_616


def test_one_all_reduce_and_one_norm_per_block():
    """A Nemotron-H layer is one block behind one norm, ending in one all-reduce under TP: the Nano's 52 blocks
    make 52 all-reduces a pass at TP 2 (a transformer layer has two: Llama-3.1-8B's 32 layers make 64), and its
    norms are 52 + 1 final, 53 × 2688 weights."""
    hw = HARDWARE["h200_sxm"]
    assert RooflineTiming(Deployment(NANO, hw, tensor=2), Efficiency(1.0, 1.0)).num_all_reduces == 52
    llama = MODELS["meta-llama/Llama-3.1-8B-Instruct"]
    assert RooflineTiming(Deployment(llama, hw, tensor=2), Efficiency(1.0, 1.0)).num_all_reduces == 64
    assert NANO.norm_params == 53 * 2688


def test_decode_reads_and_writes_the_state():
    """A decode of 4 sequences at 999 tokens of context, at datasheet peaks: the 6 attention layers read 1000 tokens'
    KV (6,144 B a token) and the queries, and every Mamba-2 layer's state is read and written back (2 × 49,082,368 B
    a sequence): memory-bound."""
    hw = HARDWARE["h200_sxm"]
    timing = RooflineTiming(Deployment(NANO, hw), Efficiency(1.0, 1.0, expert=1.0))
    n = 4
    batch = PassBatch(1, np.zeros(n, np.int64), np.ones(n, np.int64), np.full(n, 999), np.ones(n, bool),
                      np.ones(n, bool), np.array([1e6]))
    expected = n * (1000 * 6_144 + timing.query_bytes_per_token + 2 * 49_082_368) / hw.hbm_bytes_per_s
    assert timing.breakdown(batch)["attention"][0] == pytest.approx(expected, rel=1e-12)


def test_scheduler_holds_state_blocks_per_draft():
    """With 2 speculative tokens vLLM keeps 1 + 2 state blocks per state group (``num_speculative_blocks``): a
    1000-token prompt admitted alone takes 1 attention block + 4 groups × 3 = 13."""
    layout = kv_layout(NANO, speculative_tokens=2)
    assert layout.state_blocks == 3 and layout.blocks(1000, 0, 2112) == 13
    pool = BlockPool(100, 2112, layout)
    s = VllmScheduler(VllmSchedulerConfig(max_num_batched_tokens=8192, max_model_len=4096), pool)
    s.add_request(Request(0, 0, 1000, 20))
    s.update_from_output(s.schedule())
    assert pool.num_used_blocks == 13


def _yaml(engine: dict | None = None, **kv) -> dict:
    data = make_scenario(engine={"model": NANO.model_id, "hardware": "h200_sxm", "context_length": 8192,
                                 **(engine or {}), "workers": {"aggregated": {
                                     "kv_cache": {"prefix_caching": False, "capacity": {"type": "default"}, **kv},
                                     "timing": {"type": "default"}}}})
    cache = data["engine"]["workers"]["aggregated"]["kv_cache"]
    if "block_size" not in kv:
        del cache["block_size"]  # (the factory's 16: vLLM's default would be raised)
    return data


def test_from_yaml():
    """The block size defaults to vLLM's 2096; with nextn 2 the convolution keeps 3 + 2 inputs (61,440 B), a layer's
    state 2,158,592 B, and the block size is 16 × cdiv(2,158,592, 16,384) = 16 × 132 = 2112. Runs complete."""
    from simmodel.sim import Simulation

    role = parse_scenario(_yaml(), Path(".")).engine.workers["aggregated"]
    assert role.kv_cache.block_size == 2096 and role.kv_layout.state_blocks == 1
    drafted = parse_scenario(_yaml({"nextn": 2, "nextn_accepted": 1.5}), Path("."))
    role = drafted.engine.workers["aggregated"]
    assert role.kv_cache.block_size == 2112 and role.kv_layout.state_blocks == 3
    assert Simulation(drafted).run().summary["completed_requests"] == 4
    assert Simulation(parse_scenario(_yaml(), Path("."))).run().summary["completed_requests"] == 4


def test_tensor_must_split_heads_and_groups():
    """vLLM's MambaMixer2 asserts that the TP size divides the heads, and the groups unless there is one: TP 16
    divides the 32 attention heads and the 64 Mamba heads but not the 8 groups."""
    data = _yaml()
    data["engine"]["workers"]["aggregated"]["parallelism"] = {"tensor": 16}
    with pytest.raises(ScenarioError, match="parallelism.tensor: must divide the 64 Mamba-2 heads of nvidia/NVIDIA-"
                                            "Nemotron-3-Nano-30B-A3B-BF16 and its 8 groups"):
        parse_scenario(data, Path("."))


def test_prefix_caching_of_the_states():
    """Prefix caching is vLLM's mamba_cache_mode align (``engine.state_kv_cache``): accepted, and the rank's pool caches
    states, with Mamba-2's in-pass checkpoint, and with MTP drafts their speculative state blocks and EAGLE's block
    drop; refused with n-gram drafts and without chunked prefill."""
    from simmodel.sim import Simulation

    sim = Simulation(parse_scenario(_yaml(prefix_caching=True), Path(".")))
    pool = sim.workers[0].ranks[0].scheduler.pool
    assert pool.states and pool.checkpoint and pool.layout.state_groups == 4 and not pool.eagle
    assert sim.run().summary["completed_requests"] == 4
    sim = Simulation(parse_scenario(_yaml({"nextn": 2, "nextn_accepted": 1.0}, prefix_caching=True), Path(".")))
    pool = sim.workers[0].ranks[0].scheduler.pool
    assert pool.eagle and pool.spec == 2
    assert sim.run().summary["completed_requests"] == 4
    ngram = {"speculation": {"kind": "ngram", "num_speculative_tokens": 2, "acceptance_rates": [0.5, 0.5]}}
    with pytest.raises(ScenarioError, match="kv_cache.prefix_caching: nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 has "
                                            "23 Mamba-2 layers: prefix caching of their states with n-gram drafts"):
        parse_scenario(_yaml(ngram, prefix_caching=True), Path("."))
    with pytest.raises(ScenarioError, match="kv_cache.prefix_caching: .* only with chunked prefill"):
        parse_scenario(_yaml({"enable_chunked_prefill": False}, prefix_caching=True), Path("."))


def test_drafter_is_attention_and_moe():
    """The MTP/EAGLE drafter of a model of single-block layers is an attention block and an MoE block (Nemotron 3
    Super's mtp_hybrid_override_pattern ``*E``); of Qwen3-Next and gpt-oss, one full-attention layer."""
    d = draft_model(NANO)
    assert (d.layer_pattern, d.num_attention_layers, d.num_moe_layers, d.num_linear_layers) == ("*E", 1, 1, 0)
    assert draft_model(H56).layer_pattern == "*-"
    for name in ("Qwen/Qwen3-Next-80B-A3B-Instruct", "openai/gpt-oss-120b"):
        d = draft_model(MODELS[name])
        assert (d.num_attention_layers, d.num_full_attention_layers, d.num_linear_layers) == (1, 1, 0)


NANO_CONFIG = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "chunk_size": 128, "conv_kernel": 4,
    "expand": 2, "head_dim": 128, "hidden_size": 2688, "hybrid_override_pattern": NANO_PATTERN,
    "intermediate_size": 1856, "mamba_head_dim": 64, "mamba_num_heads": 64, "mamba_ssm_cache_dtype": "float32",
    "max_position_embeddings": 262144, "mlp_hidden_act": "relu2", "moe_intermediate_size": 1856,
    "moe_shared_expert_intermediate_size": 3712, "n_group": 1, "n_groups": 8, "n_routed_experts": 128,
    "n_shared_experts": 1, "num_attention_heads": 32, "num_experts_per_tok": 6, "num_hidden_layers": 52,
    "num_key_value_heads": 2, "sliding_window": None, "ssm_state_size": 128, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 131072}


def test_config_json_state_dtype_auto(tmp_path):
    """``mamba_ssm_cache_dtype: auto`` keeps the state at the activations' width: 3 × 6144 + 64 × 64 × 128 values
    of 2 B a layer."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**NANO_CONFIG, "mamba_ssm_cache_dtype": "auto"}))
    model = model_from_hf_config(path)
    assert Deployment(model, HARDWARE["h200_sxm"]).linear_state_bytes_per_gpu == 23 * 2 * (3 * 6144 + 64 * 64 * 128)


def test_config_json(tmp_path):
    """The Nano's config.json (the keys read) parses to its registry row; the 56B's names its head size
    attention_head_dim and gives no mamba_ssm_cache_dtype (float32, vLLM's default for the family)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(NANO_CONFIG))
    assert model_from_hf_config(path, NANO.model_id) == NANO
    h56 = {"model_type": "nemotron_h", "attention_head_dim": 128, "conv_kernel": 4, "hidden_size": 8192,
           "hybrid_override_pattern": H56.layer_pattern, "intermediate_size": 32768, "mamba_head_dim": 64,
           "mamba_num_heads": 256, "max_position_embeddings": 8192, "n_groups": 8, "num_attention_heads": 64,
           "num_hidden_layers": 118, "num_key_value_heads": 8, "ssm_state_size": 256, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16", "vocab_size": 131072}
    path.write_text(json.dumps(h56))
    assert model_from_hf_config(path, H56.model_id) == H56


@pytest.mark.parametrize("change, message", [
    ({"hybrid_override_pattern": NANO_PATTERN[:-1]}, "hybrid_override_pattern must be a string of 52 letters"),
    ({"hybrid_override_pattern": NANO_PATTERN[:-1] + "X"}, "hybrid_override_pattern must be a string of 52 letters"),
    ({"moe_latent_size": 1024}, "moe_latent_size (experts in a latent space, Nemotron 3 Super) is not modeled"),
    ({"mamba_ssm_cache_dtype": "float8"}, "mamba_ssm_cache_dtype must be one of float32, bfloat16, float16, auto"),
    ({"hybrid_override_pattern": NANO_PATTERN.replace("*", "M")}, "must have attention (*) and Mamba-2 (M) layers"),
    ({"hybrid_override_pattern": "E" * 52}, "must have attention (*) and Mamba-2 (M) layers"),
    ({"n_groups": 3}, "n_groups 3 must divide mamba_num_heads 64"),
])
def test_config_json_refusals(tmp_path, change, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**NANO_CONFIG, **change}))
    with pytest.raises(ScenarioError) as info:
        model_from_hf_config(path)
    assert message in str(info.value)
