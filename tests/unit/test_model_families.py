"""The registry's newer model families (issue 27): parameter counts and KV bytes per token derived by hand from
each published config.json, against the model cards' totals."""

from __future__ import annotations

import pytest

from simmodel.perf.models import MODELS


def test_mixtral_8x22b():
    """56 layers of hidden 6144, 48 heads and 8 KV heads of 128: attention 2·6144·6144 + 2·6144·1024 = 88.08 M a
    layer; 8 experts of 3·6144·16384 = 302.0 M and a 6144 × 8 router: 2416.0 M. Embeddings and LM head 2 × 32000
    × 6144 = 393.2 M, norms 0.69 M: 140.62 B (Mistral AI: 141 B). Active, 2 experts: 39.15 B (39 B).
    KV: 56 × 2 × 8 × 128 × 2 B = 229,376 B a token."""
    m = MODELS["mistralai/Mixtral-8x22B-v0.1"]
    assert m.num_parameters == 56 * (88_080_384 + 8 * 301_989_888 + 6144 * 8) + 2 * 32000 * 6144 + 2 * 6144 * 56 + 6144
    assert m.num_parameters / 1e9 == pytest.approx(140.62, abs=0.01)
    assert m.num_active_parameters / 1e9 == pytest.approx(39.15, abs=0.01)
    assert m.kv_bytes_per_token(2) == 229_376


def test_kimi_k2():
    """DeepSeek-V3's MLA with 64 heads: q 7168·1536 + 1536·64·192 = 29.88 M, kv 7168·576 + 512·64·256 = 12.52 M,
    output 64·128·7168 = 58.72 M: 101.12 M a layer × 61. One dense layer 3·7168·18432 = 396.4 M; 60 MoE layers of
    385 experts of 3·7168·2048 = 44.04 M and a 7168 × 384 router: 16,958.6 M each. Embeddings and LM head 2 ×
    163840 × 7168 = 2348.8 M: 1026.4 B (the card: 1 T). Active, 8 routed + 1 shared: 32.86 B (the card: 32 B).
    KV: 61 layers × one latent of 512 + 64 values × 2 B = 70,272 B a token."""
    m = MODELS["moonshotai/Kimi-K2-Instruct"]
    attention = 7168 * 1536 + 1536 * 64 * 192 + 7168 * 576 + 512 * 64 * 256 + 64 * 128 * 7168
    expert = 3 * 7168 * 2048
    total = (61 * attention + 3 * 7168 * 18432 + 60 * (385 * expert + 7168 * 384) + 2 * 163840 * 7168
             + 2 * 7168 * 61 + 7168)
    assert m.num_parameters == total
    assert m.num_parameters / 1e9 == pytest.approx(1026.4, abs=0.1)
    assert m.num_active_parameters / 1e9 == pytest.approx(32.86, abs=0.01)
    assert m.kv_bytes_per_token(2) == 70_272
    assert m.num_moe_layers == 60 and m.num_dense_layers == 1


def test_llama4_maverick_interleaves_moe_layers():
    """interleave_moe_layer_step 2: 24 MoE layers (128 experts + 1 shared of 3·5120·8192 = 125.8 M, router 5120 ×
    128) and 24 dense layers (3·5120·16384 = 251.7 M). Attention 2·5120·5120 + 2·5120·1024 = 62.9 M × 48;
    embeddings and LM head 2 × 202048 × 5120: 400.7 B (the card: 400 B). Active, 1 routed + 1 shared: 17.18 B
    (17 B). KV: 48 × 2 × 8 × 128 × 2 B = 196,608 B a token."""
    m = MODELS["meta-llama/Llama-4-Maverick-17B-128E-Instruct"]
    assert m.num_moe_layers == 24 and m.num_dense_layers == 24
    expert = 3 * 5120 * 8192
    total = (48 * (2 * 5120 * 5120 + 2 * 5120 * 1024) + 24 * 3 * 5120 * 16384 + 24 * (129 * expert + 5120 * 128)
             + 2 * 202048 * 5120 + 2 * 5120 * 48 + 5120)
    assert m.num_parameters == total
    assert m.num_parameters / 1e9 == pytest.approx(400.7, abs=0.1)
    assert m.num_active_parameters / 1e9 == pytest.approx(17.18, abs=0.01)
    assert m.kv_bytes_per_token(2) == 196_608


def test_phi_4():
    """40 layers of hidden 5120, 40 heads and 10 KV heads of 128: attention 2·5120·5120 + 2·5120·1280 = 65.5 M,
    MLP 3·5120·17920 = 275.3 M a layer; embeddings and LM head 2 × 100352 × 5120: 14.66 B (the card: 14 B).
    KV: 40 × 2 × 10 × 128 × 2 B = 204,800 B a token."""
    m = MODELS["microsoft/phi-4"]
    assert m.num_parameters == (40 * (2 * 5120 * 5120 + 2 * 5120 * 1280 + 3 * 5120 * 17920) + 2 * 100352 * 5120
                                + 2 * 5120 * 40 + 5120)
    assert m.num_parameters / 1e9 == pytest.approx(14.66, abs=0.01)
    assert m.kv_bytes_per_token(2) == 204_800


def test_glm_45_air():
    """96 query heads of 128 on hidden 4096 (q and output 4096 × 12288 each), 8 KV heads: 109.1 M of attention a
    layer × 46; one dense layer 3·4096·10944 = 134.5 M; 45 MoE layers of 129 experts of 3·4096·1408 = 17.3 M and a
    4096 × 128 router: 2232.5 M each; embeddings and LM head 2 × 151552 × 4096 = 1241.5 M: 106.86 B (the card:
    106 B). Active, 8 routed + 1 shared: 13.42 B with the embeddings (the card's 12 B leaves them out: 12.18 B).
    KV: 46 × 2 × 8 × 128 × 2 B = 188,416 B a token."""
    m = MODELS["zai-org/GLM-4.5-Air"]
    expert = 3 * 4096 * 1408
    assert m.num_parameters == (46 * (2 * 4096 * 12288 + 2 * 4096 * 1024) + 3 * 4096 * 10944
                                + 45 * (129 * expert + 4096 * 128) + 2 * 151552 * 4096 + 2 * 4096 * 46 + 4096)
    assert m.num_parameters / 1e9 == pytest.approx(106.86, abs=0.01)
    assert m.num_active_parameters / 1e9 == pytest.approx(13.42, abs=0.01)
    assert (m.num_active_parameters - 2 * 151552 * 4096) / 1e9 == pytest.approx(12.18, abs=0.01)
    assert m.kv_bytes_per_token(2) == 188_416


def test_glm_45():
    """96 query heads of 128 on hidden 5120 (q and output 5120 × 12288 each), 8 KV heads: 136.3 M of attention a layer
    × 92 = 12.54 B; three dense layers of 3·5120·12288 = 188.7 M; 89 MoE layers of 161 experts of 3·5120·1536 = 23.6 M
    and a 5120 × 160 router: 3798.6 M each, 338.07 B; embeddings and LM head 2 × 151552 × 5120 = 1552.0 M: 352.80 B
    (the report's 355 B also counts the MTP layer and the biases). Active, 8 routed + 1 shared: 33.63 B, 32.08 B
    without the embeddings (the report's 32 B). KV: 92 × 2 × 8 × 128 × 2 B = 376,832 B a token."""
    m = MODELS["zai-org/GLM-4.5"]
    expert = 3 * 5120 * 1536
    assert m.num_parameters == (92 * (2 * 5120 * 12288 + 2 * 5120 * 1024) + 3 * 3 * 5120 * 12288
                                + 89 * (161 * expert + 5120 * 160) + 2 * 151552 * 5120 + 2 * 5120 * 92 + 5120)
    assert m.num_parameters / 1e9 == pytest.approx(352.80, abs=0.01)
    assert (m.num_active_parameters - 2 * 151552 * 5120) / 1e9 == pytest.approx(32.08, abs=0.01)
    assert m.kv_bytes_per_token(2) == 376_832


PHI_4 = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "num_hidden_layers": 40, "hidden_size": 5120,
         "num_attention_heads": 40, "num_key_value_heads": 10, "intermediate_size": 17920, "vocab_size": 100352,
         "tie_word_embeddings": False, "max_position_embeddings": 16384, "torch_dtype": "bfloat16"}
GLM_45_AIR = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "num_hidden_layers": 46,
              "hidden_size": 4096, "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
              "intermediate_size": 10944, "vocab_size": 151552, "tie_word_embeddings": False,
              "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "n_routed_experts": 128,
              "num_experts_per_tok": 8, "moe_intermediate_size": 1408, "n_shared_experts": 1,
              "first_k_dense_replace": 1, "partial_rotary_factor": 0.5, "attention_bias": True}


@pytest.mark.parametrize(("config", "model_id"), [(PHI_4, "microsoft/phi-4"), (GLM_45_AIR, "zai-org/GLM-4.5-Air")])
def test_a_local_config_json_reads_as_the_registry_row(tmp_path, config, model_id):
    """The published config.json's keys (those the shape reads) give the registry's spec."""
    import json

    from simmodel.perf.hf_config import model_from_hf_config

    (tmp_path / "config.json").write_text(json.dumps(config))
    assert model_from_hf_config(tmp_path, model_id) == MODELS[model_id]


LLAMA4_TEXT = {"num_hidden_layers": 48, "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 8,
               "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384, "vocab_size": 202048,
               "num_experts_per_tok": 1, "attention_chunk_size": 8192, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize(("model_id", "text"), [
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct",
     {"num_local_experts": 16, "interleave_moe_layer_step": 1, "max_position_embeddings": 10485760}),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct",
     {"num_local_experts": 128, "interleave_moe_layer_step": 2, "max_position_embeddings": 1048576}),
])
def test_a_local_llama4_config_reads_its_text_config(tmp_path, model_id, text):
    """Llama 4's published config.json (``Llama4ForConditionalGeneration``): its text_config gives the registry's
    row (the vision tower left out), the experts' width from intermediate_size and the dense MLPs' from
    intermediate_size_mlp, MoE on every interleave_moe_layer_step-th layer."""
    import json

    from simmodel.perf.hf_config import model_from_hf_config

    config = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "torch_dtype": "bfloat16",
              "text_config": {**LLAMA4_TEXT, **text, "model_type": "llama4_text"}, "vision_config": {"hidden_size": 1408}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert model_from_hf_config(tmp_path, model_id) == MODELS[model_id]


def test_a_llama4_config_without_text_config_is_one_line(tmp_path):
    import json

    from simmodel.errors import ScenarioError
    from simmodel.perf.hf_config import model_from_hf_config

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama4", "text_config": 3}))
    with pytest.raises(ScenarioError, match="config.json: text_config must be a JSON object"):
        model_from_hf_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama4", "text_config": {**LLAMA4_TEXT}}))
    with pytest.raises(ScenarioError, match="config.json: text_config: missing num_local_experts"):
        model_from_hf_config(tmp_path)


def test_gpt_oss():
    """gpt-oss-120b: 36 layers of hidden 2880, 64 heads and 8 KV heads of 64: attention 2·2880·4096 + 2·2880·512 =
    26.54 M a layer; 128 experts of 3·2880·2880 = 24.88 M and a 2880 × 128 router: 3185.4 M. Embeddings and LM head
    2 × 201088 × 2880 = 1158.3 M, norms 0.21 M: 116.789 B; with the biases left out (an expert's 2·2880 + 2880,
    × 128 × 36 = 39.8 M) the model card's 116.83 B. Active (4 experts), the input embedding not counted as the card
    does: 5.13 B. gpt-oss-20b, 24 layers of 32 experts: 20.908 B (+6.6 M of biases: the card's 20.91 B).
    KV: 36 × 2 × 8 × 64 × 2 B = 73,728 B a token; half the layers slide over 128 tokens."""
    m = MODELS["openai/gpt-oss-120b"]
    attention, expert = 2 * 2880 * 4096 + 2 * 2880 * 512, 3 * 2880 * 2880
    total = 36 * (attention + 128 * expert + 2880 * 128) + 2 * 201088 * 2880 + 2 * 2880 * 36 + 2880
    assert m.num_parameters == total
    assert (m.num_parameters + 3 * 2880 * 128 * 36) / 1e9 == pytest.approx(116.83, abs=0.005)
    assert (m.num_active_parameters - 201088 * 2880) / 1e9 == pytest.approx(5.13, abs=0.005)
    assert m.kv_bytes_per_token(2) == 73_728
    assert (m.sliding_window, m.num_sliding_layers, m.num_full_attention_layers) == (128, 18, 18)
    small = MODELS["openai/gpt-oss-20b"]
    assert (small.num_parameters + 3 * 2880 * 32 * 24) / 1e9 == pytest.approx(20.91, abs=0.005)


def test_gemma():
    """Gemma 2 9B: 42 layers of hidden 3584, 16 heads and 8 KV heads of 256: attention 2·3584·4096 + 2·3584·2048 =
    44.04 M, gated MLP 3·3584·14336 = 154.14 M a layer; tied embeddings 256000 × 3584 = 917,504,000 (the Gemma 2
    report's); the report's 8,324,201,984 non-embedding parameters count four norms a layer where two are counted
    here (2 × 3584 × 42 = 301,056 fewer). Gemma 3 27B: 62 layers, attention 2·5376·4096 + 2·5376·2048 = 66.06 M,
    MLP 3·5376·21504 = 346.8 M: 25,598.4 M of layers (the Gemma 3 report's 25,600 M non-embedding)."""
    g2 = MODELS["google/gemma-2-9b-it"]
    assert g2.embedding_params == 917_504_000
    assert g2.num_parameters - g2.embedding_params == 8_324_201_984 - 2 * 3584 * 42
    assert g2.kv_bytes_per_token(2) == 42 * 2 * 8 * 256 * 2
    g3 = MODELS["google/gemma-3-27b-it"]
    layers = 62 * (2 * 5376 * 4096 + 2 * 5376 * 2048 + 3 * 5376 * 21504)
    assert g3.num_parameters - g3.embedding_params == layers + 2 * 5376 * 62 + 5376
    assert (g3.num_parameters - g3.embedding_params) / 1e6 == pytest.approx(25_600, abs=5)
    assert (g3.num_sliding_layers, g3.num_full_attention_layers, g3.sliding_window) == (52, 10, 1024)


def test_deepseek_v32_sparse_attention():
    """DeepSeek-V3.2 is DeepSeek-V3 plus a lightning indexer per layer: 1536·64·128 (q up-projection) + 7168·128
    (key) + 2·128 (its norm) + 7168·64 (head weights) = 13.96 M, × 61 = 0.85 B more (671.88 B; the card's 685 B
    adds the 14 B MTP layer, left out as for V3). KV a token and layer: the 512 + 64 latent, 1152 B in BF16 or
    vLLM's fp8_ds_mla 512 + 4·4 + 64·2 = 656 B, plus the indexer's 128 FP8 values and a float32 scale (132 B):
    61 × 1284 = 78,324 B and 61 × 788 = 48,068 B."""
    v3, v32 = MODELS["deepseek-ai/DeepSeek-V3"], MODELS["deepseek-ai/DeepSeek-V3.2"]
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert v32.num_parameters == v3.num_parameters + 61 * indexer
    assert v32.kv_bytes_per_token(2) == 61 * (576 * 2 + 132) == 78_324
    assert v32.kv_bytes_per_token(1) == 61 * (656 + 132) == 48_068


def test_deepseek_v32_attends_over_the_top_k():
    """A decode of 4 sequences at 9999 tokens of context on TP 8, at datasheet peaks: MLA reads the 2048 latents the
    indexer picked (61 × 1152 B each, replicated on every GPU) and the indexer reads all 10,000 tokens' keys (61 ×
    132 B); memory-bound (≈ 47 µs a sequence against ≈ 10 µs of FLOPs)."""
    import numpy as np

    from simmodel.perf.deployment import Deployment
    from simmodel.perf.hardware import HARDWARE
    from simmodel.perf.roofline import Efficiency, RooflineTiming
    from simmodel.perf.timing import PassBatch

    hw = HARDWARE["h200_sxm"]
    timing = RooflineTiming(Deployment(MODELS["deepseek-ai/DeepSeek-V3.2"], hw, tensor=8, weight_bytes=1),
                            Efficiency(1.0, 1.0, expert=1.0))
    n = 4
    batch = PassBatch(1, np.zeros(n, np.int64), np.ones(n, np.int64), np.full(n, 9999), np.ones(n, bool),
                      np.ones(n, bool), np.array([1e6]))
    expected = n * (2048 * 61 * 1152 + 10_000 * 61 * 132 + timing.query_bytes_per_token) / hw.hbm_bytes_per_s
    assert timing.breakdown(batch)["attention"][0] == pytest.approx(expected, rel=1e-12)


def test_deepseek_v32_config_json(tmp_path):
    """deepseek-ai/DeepSeek-V3.2's config.json (the keys read, as aiconfigurator-core's copy gives them) parses to
    the registry row."""
    import json

    from simmodel.perf.hf_config import model_from_hf_config

    cfg = {"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "num_hidden_layers": 61,
           "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
           "vocab_size": 129280, "max_position_embeddings": 163840, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16", "first_k_dense_replace": 3, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
           "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "q_lora_rank": 1536,
           "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "index_topk": 2048, "index_n_heads": 64, "index_head_dim": 128,
           "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert model_from_hf_config(path, "deepseek-ai/DeepSeek-V3.2") == MODELS["deepseek-ai/DeepSeek-V3.2"]
