"""The model and hardware registries, the config.json reader and the system-file reader, against hand
arithmetic and the published sizes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from simmodel.errors import ScenarioError
from simmodel.perf.hardware import HARDWARE, HARDWARE_FIELDS, HardwareSpec, hardware_from_yaml
from simmodel.perf.hf_config import model_from_hf_config
from simmodel.perf.models import MODELS

# -- the model registry -----------------------------------------------------------------------------

# Base and instruct (chat) variants of one shape: both Hub ids must be present and equal but for the id.
VARIANTS = [
    ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct"),
    ("meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-70B-Instruct"),
    ("meta-llama/Llama-3.1-405B", "meta-llama/Llama-3.1-405B-Instruct"),
    ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-7b-chat-hf"),
    ("meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-70b-chat-hf"),
    ("mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x7B-Instruct-v0.1"),
    ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3-0324"),
    ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"),
]


@pytest.mark.parametrize(("base", "variant"), VARIANTS)
def test_variants_share_a_shape(base, variant):
    shape = {f: getattr(MODELS[base], f) for f in MODELS[base].__slots__ if f != "model_id"}
    assert {f: getattr(MODELS[variant], f) for f in shape} == shape
    assert MODELS[variant].model_id == variant


def test_qwen3_base_checkpoints_differ_only_in_context():
    """Qwen3-*-Base config.json: the same shape with max_position_embeddings 32768 (post-trained: 40960)."""
    for post, base in (("Qwen/Qwen3-8B", "Qwen/Qwen3-8B-Base"), ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-Base")):
        assert MODELS[post].num_parameters == MODELS[base].num_parameters
        assert (MODELS[post].max_position_embeddings, MODELS[base].max_position_embeddings) == (40960, 32768)


def test_every_issue_model_is_registered():
    for key in ("Qwen/Qwen3-32B", "Qwen/Qwen3-235B-A22B", "facebook/opt-125m", *(k for pair in VARIANTS for k in pair)):
        assert MODELS[key].model_id == key


def test_dense_parameter_counts():
    """Llama-3.1-8B: 32·(2·4096² + 2·4096·1024 + 3·4096·14336 + 2·4096) + 2·128256·4096 + 4096
    = 32·218,112,000 + 1,050,673,152 + 4096 = 8,030,261,248 (the published 8.03 B).
    Llama-3.1-70B: 80·(2·8192² + 2·8192·1024 + 3·8192·28672 + 2·8192) + 2·128256·8192 + 8192 = 70,553,706,496.
    Qwen3-8B: 36·(41,943,040 attention + 3·4096·12288 MLP) + 2·151936·4096 + 2·4096·36 + 4096 = 8,190,726,144;
    its safetensors hold 9,216 more (q_norm and k_norm, 2·128 per layer), which we leave out."""
    assert MODELS["meta-llama/Llama-3.1-8B"].num_parameters == 8_030_261_248
    assert MODELS["meta-llama/Llama-3.1-70B"].num_parameters == 70_553_706_496
    assert MODELS["Qwen/Qwen3-8B"].num_parameters == 8_190_726_144
    assert MODELS["Qwen/Qwen3-8B"].num_active_parameters == 8_190_726_144


def test_mixtral_total_and_active():
    """Per layer: attention 2·4096² + 2·4096·1024 = 41,943,040; expert 3·4096·14336 = 176,160,768; router 4096·8.
    Total: 32·(41,943,040 + 8·176,160,768 + 32,768) + 2·32000·4096 + 2·4096·32 + 4096 = 46,702,792,704 (46.7 B).
    Active (2 experts): 32·(41,943,040 + 2·176,160,768 + 32,768) + 262,144,000 + 266,240 = 12,879,925,248 (12.9 B)."""
    mixtral = MODELS["mistralai/Mixtral-8x7B-v0.1"]
    assert (mixtral.num_dense_layers, mixtral.num_moe_layers) == (0, 32)
    assert mixtral.num_parameters == 46_702_792_704
    assert mixtral.num_active_parameters == 12_879_925_248


def test_qwen3_30b_a3b_total_and_active():
    """Per layer: attention 2·2048·4096 + 2·2048·512 = 18,874,368; expert 3·2048·768 = 4,718,592; router 2048·128.
    Total: 48·(18,874,368 + 128·4,718,592 + 262,144) + 2·151936·2048 + 2·2048·48 + 2048 = 30,532,110,336 (30.5 B).
    Active (8 experts): 48·(18,874,368 + 8·4,718,592 + 262,144) + 622,329,856 + 198,656 = 3,353,020,416 (3.3 B)."""
    qwen = MODELS["Qwen/Qwen3-30B-A3B"]
    assert qwen.num_parameters == 30_532_110_336
    assert qwen.num_active_parameters == 3_353_020_416


def test_deepseek_v3_total_and_active():
    """MLA per layer: q 7168·1536 + 1536·128·192 = 48,758,784; kv 7168·576 + 512·128·256 = 20,905,984;
    o 128·128·7168 = 117,440,512 → 187,105,280. Dense MLP 3·7168·18432 = 396,361,728 (3 layers). Expert
    3·7168·2048 = 44,040,192; MoE layer (58 of them) 257 experts + router 7168·256 = 11,320,164,352.
    Total: 61·187,105,280 + 3·396,361,728 + 58·11,320,164,352 + 2·129280·7168 + 2·7168·61 + 7168
    = 671,026,279,424: the published 671 B main model. The Hub's 685 B adds the 14 B multi-token-prediction
    module (num_nextn_predict_layers 1), which serving without speculative decoding never runs; we also skip
    the latent norms (61·2048) and router biases (58·256).
    Active: 58·(9·44,040,192 + 1,835,008) replaces the MoE layers → 37,552,157,696 (the published 37 B)."""
    ds = MODELS["deepseek-ai/DeepSeek-V3"]
    assert ds.attention_params == 187_105_280
    assert ds.num_parameters == 671_026_279_424
    assert ds.num_active_parameters == 37_552_157_696
    assert ds.dtype_bytes == 1                    # block-scaled FP8 e4m3 weights as shipped


def test_opt_125m_counts_matrices_and_norm_weights_only():
    """12·(4·768² + 2·768·3072) + 50272·768 (tied LM head) + 2·768·12 + 768 = 123,562,752. The published
    125,239,296 adds what we leave out: learned positions 2050·768 = 1,574,400, linear biases
    12·(4·768 + 3072 + 768) = 82,944 and LayerNorm biases 19,200 (1.3% in all)."""
    opt = MODELS["facebook/opt-125m"]
    assert (opt.gated_mlp, opt.tie_word_embeddings, opt.head_dim) == (False, True, 64)
    assert opt.num_parameters == 123_562_752
    assert opt.num_parameters + 1_574_400 + 82_944 + 19_200 == 125_239_296
    assert opt.num_active_parameters == opt.num_parameters  # a tied LM head is one matrix, not two


@pytest.mark.parametrize(("key", "published_total", "published_active"), [
    ("meta-llama/Llama-3.1-405B", 405.85e9, None),
    ("meta-llama/Llama-2-7b-hf", 6.74e9, None),
    ("meta-llama/Llama-2-70b-hf", 68.98e9, None),
    ("Qwen/Qwen3-32B", 32.8e9, None),
    ("Qwen/Qwen3-235B-A22B", 235e9, 22e9),
])
def test_published_sizes(key, published_total, published_active):
    """Model cards: Llama-3.1-405B 405.85 B; Llama-2 6.74 B / 68.98 B; Qwen3-32B 32.8 B; Qwen3-235B-A22B 235 B / 22 B."""
    assert MODELS[key].num_parameters == pytest.approx(published_total, rel=0.01)
    if published_active:
        assert MODELS[key].num_active_parameters == pytest.approx(published_active, rel=0.02)


def test_the_accuracy_runs_dense_models():
    """The dense models of the measured vLLM runs (shared/accuracy), each a sum over its config.json by hand:
    Mistral-Nemo-Instruct-2407 (head_dim 128, so q is 5120·4096): per layer 2·5120·4096 + 2·5120·1024
    attention + 3·5120·14336 MLP = 272,629,760; 40 layers + 2·131072·5120 + 2·5120·40 + 5120 = 12,247,782,400
    (the card's 12 B). Qwen2.5-7B-Instruct: per layer 2·3584² + 2·3584·512 + 3·3584·18944 = 233,046,016;
    28 layers + 2·152064·3584 + 2·3584·28 + 3584 = 7,615,487,488, and with the q/k/v biases left out
    (28·(3584 + 2·512) = 129,024) the card's 7.61 B total, 6.53 B without the embedding and LM head. Yi-34B: per layer
    2·7168² + 2·7168·1024 + 3·7168·20480 = 557,842,432; 60 layers + 2·64000·7168 + 2·7168·60 + 7168
    = 34,388,917,248 (34.4 B). KV a token: 2·layers·KV heads·128·2 bytes = 163,840, 57,344 and 245,760."""
    nemo, qwen, yi = (MODELS[k] for k in ("mistralai/Mistral-Nemo-Instruct-2407", "Qwen/Qwen2.5-7B-Instruct",
                                          "01-ai/Yi-34B"))
    assert nemo.num_parameters == 12_247_782_400
    assert qwen.num_parameters == 7_615_487_488
    assert qwen.num_parameters + 129_024 == pytest.approx(7.61e9, rel=1e-3)  # (7,615,616,512)
    assert qwen.num_parameters + 129_024 - 2 * qwen.embedding_params == pytest.approx(6.53e9, rel=1e-3)
    assert yi.num_parameters == 34_388_917_248
    assert [m.kv_bytes_per_token() for m in (nemo, qwen, yi)] == [163_840, 57_344, 245_760]


def test_llama_4_scout_total_and_active():
    """48 layers, each attention 2·5120·5120 + 2·5120·1024 = 62,914,560 and MoE 17 experts (16 routed + 1
    shared) of 3·5120·8192 = 125,829,120 plus the router 5120·16 → 2,139,176,960. Total: 48·2,202,091,520 +
    2·202048·5120 + 2·5120·48 + 5120 = 107,769,861,120 (the card's 109 B also counts the vision tower, left
    out). Active (one routed expert and the shared one): 48·(62,914,560 + 2·125,829,120 + 81,920) +
    2,068,971,520 + 496,640 = 17,172,894,720 (the card's 17 B). KV: 2·48·8·128·2 = 196,608 B a token."""
    for key in ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"):
        scout = MODELS[key]
        assert (scout.num_dense_layers, scout.num_moe_layers) == (0, 48)
        assert scout.num_parameters == 107_769_861_120
        assert scout.num_active_parameters == 17_172_894_720
        assert scout.kv_bytes_per_token() == 196_608
    assert MODELS["RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"].expert_dtype_bytes == 1


def test_kv_bytes_per_token_mla_and_gqa():
    """MLA caches one latent per token and layer: 61·(512 + 64)·2 = 70,272 B in BF16, 35,136 in FP8 (the
    checkpoint's own dtype). GQA caches K and V per KV head: Llama-3.1-70B 2·80·8·128·2 = 327,680; Llama-2-7B
    (32 KV heads) 2·32·32·128·2 = 524,288."""
    ds = MODELS["deepseek-ai/DeepSeek-V3"]
    assert ds.kv_bytes_per_token(2) == 61 * (512 + 64) * 2 == 70_272
    assert ds.kv_bytes_per_token() == 35_136
    assert MODELS["meta-llama/Llama-3.1-70B"].kv_bytes_per_token() == 327_680
    assert MODELS["meta-llama/Llama-2-7b-hf"].kv_bytes_per_token() == 524_288


# -- config.json ------------------------------------------------------------------------------------

# The keys of each published config.json that the reader uses (plus a few it must ignore).
LLAMA_31_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
               "intermediate_size": 14336, "max_position_embeddings": 131072, "num_attention_heads": 32,
               "num_hidden_layers": 32, "num_key_value_heads": 8, "rope_theta": 500000.0,
               "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256}
QWEN3_30B_A3B = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "decoder_sparse_step": 1,
                 "head_dim": 128, "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
                 "mlp_only_layers": [], "moe_intermediate_size": 768, "num_attention_heads": 32, "num_experts": 128,
                 "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
                 "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 151936}
MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
           "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
           "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 32000}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "first_k_dense_replace": 3,
               "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
               "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_routed_experts": 256, "n_shared_experts": 1,
               "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
               "num_key_value_heads": 128, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
               "quantization_config": {"fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]},
               "tie_word_embeddings": False, "torch_dtype": "bfloat16", "v_head_dim": 128, "vocab_size": 129280}
OPT_125M = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "activation_function": "relu", "ffn_dim": 3072,
            "hidden_size": 768, "max_position_embeddings": 2048, "num_attention_heads": 12, "num_hidden_layers": 12,
            "torch_dtype": "float16", "vocab_size": 50272, "word_embed_proj_dim": 768}


def write_config(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder / "config.json"


@pytest.mark.parametrize(("key", "config"), [
    ("meta-llama/Llama-3.1-8B", LLAMA_31_8B),          # head_dim absent → 4096 / 32 = 128
    ("Qwen/Qwen3-30B-A3B", QWEN3_30B_A3B),             # num_experts, moe_intermediate_size
    ("mistralai/Mixtral-8x7B-v0.1", MIXTRAL),          # num_local_experts; the expert is intermediate_size wide
    ("deepseek-ai/DeepSeek-V3", DEEPSEEK_V3),          # n_routed_experts, MLA ranks, FP8 quantization_config
    ("facebook/opt-125m", OPT_125M),                   # ffn_dim, ungated, tied by default, no KV-head key
])
def test_config_json_reads_as_the_registry_entry(tmp_path, key, config):
    file = write_config(tmp_path / key, config)
    assert model_from_hf_config(file, key) == MODELS[key]
    assert model_from_hf_config(file.parent, key) == MODELS[key]     # the folder works too


def test_config_json_default_model_id_is_the_path(tmp_path):
    file = write_config(tmp_path, LLAMA_31_8B)
    assert model_from_hf_config(file).model_id == str(file)


@pytest.mark.parametrize(("change", "message"), [
    ({"num_hidden_layers": None}, "config.json: missing num_hidden_layers"),
    ({"hidden_size": "4096"}, 'config.json: hidden_size must be a positive integer, got "4096"'),
    ({"num_key_value_heads": 0}, "config.json: num_key_value_heads must be a positive integer, got 0"),
    ({"tie_word_embeddings": "no"}, 'config.json: tie_word_embeddings must be true or false, got "no"'),
    ({"torch_dtype": "int4"}, 'config.json: torch_dtype must be one of'),
    ({"model_type": "gpt2"}, "config.json: model_type 'gpt2' is not modeled; the families read here are llama"),
    ({"architectures": ["BertForMaskedLM"]}, "config.json: architectures ['BertForMaskedLM'] has no *ForCausalLM"),
    ({"quantization_config": {"quant_method": "awq"}}, 'config.json: quantization_config "awq" is not modeled'),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 64]}},
     "config.json: quantization_config.weight_block_size must be two equal positive integers, got [128, 64]"),
])
def test_bad_config_json_is_one_line_naming_file_and_key(tmp_path, change, message):
    config = {k: v for k, v in {**LLAMA_31_8B, **change}.items() if v is not None}
    file = write_config(tmp_path, config)
    with pytest.raises(ScenarioError) as err:
        model_from_hf_config(file)
    assert str(err.value).startswith(f"{tmp_path}/{message}")
    assert "\n" not in str(err.value)


def test_unrepresentable_moe_layouts_are_refused(tmp_path):
    for change, key in (({"moe_layer_freq": 2}, "moe_layer_freq 2"), ({"mlp_only_layers": [3]}, "mlp_only_layers")):
        with pytest.raises(ScenarioError, match=f"config.json: {key}"):
            model_from_hf_config(write_config(tmp_path, {**QWEN3_30B_A3B, **change}))


def test_moe_on_every_other_layer(tmp_path):
    """decoder_sparse_step 2 on Qwen3-30B-A3B's 48 layers: layers 1, 3, …, 47 are MoE (24), the others dense
    MLPs of intermediate_size 6144, so the model holds 24 × 3 × 2048 × 6144 dense weights in place of 24 layers of
    experts."""
    half = model_from_hf_config(write_config(tmp_path, {**QWEN3_30B_A3B, "decoder_sparse_step": 2}))
    full = model_from_hf_config(write_config(tmp_path, QWEN3_30B_A3B))
    assert half.num_moe_layers == 24 and half.num_dense_layers == 24
    assert full.num_parameters - half.num_parameters == 24 * (full.moe_layer_params - 3 * 2048 * 6144)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ScenarioError, match="no such config.json"):
        model_from_hf_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"config.json: not valid JSON \(line 1"):
        model_from_hf_config(tmp_path)


# -- hardware -------------------------------------------------------------------------------------------

def test_registry_figures_from_the_datasheets():
    """Dense peaks (half the sparse headline): B200 2.25 PF BF16 / 4.5 PF FP8, 180 GB at 7.7 TB/s; GB200 2.5 / 5 PF,
    186 GB at 8 TB/s; L40S 362 / 733 TF, 864 GB/s; MI300X 1307 / 2615 TF, 192 GB at 5.3 TB/s."""
    got = {k: (h.bf16_flops, h.fp8_flops, h.memory_bytes, h.hbm_bytes_per_s) for k, h in HARDWARE.items()}
    assert got["b200_sxm"] == (2.25e15, 4.5e15, 180e9, 7.7e12)
    assert got["gb200"] == (2.5e15, 5e15, 186e9, 8e12)
    assert got["l40s"] == (362e12, 733e12, 48e9, 864e9)
    assert got["mi300x"] == (1307e12, 2615e12, 192e9, 5.3e12)
    assert {"a100_sxm", "h100_sxm", "h200_sxm"} < set(HARDWARE)


H100_YAML = """\
memory_bytes: 80.0e+9
bf16_flops: 989e12            # YAML 1.1 reads this as text; accepted as a number
fp8_flops: 1979e12
hbm_bytes_per_s: 3.35e+12
intra_node_bytes_per_s: 450.0e+9
intra_node_latency_s: 5.0e-6
pcie_bytes_per_s: 64000000000
nic_bytes_per_s: 50000000000
gpus_per_node: 8
int8_ops: 1979e12
board_power_w: 700
idle_power_w: 121.7
"""


def test_system_file_reads_every_field(tmp_path):
    path = tmp_path / "my_h100.yaml"
    path.write_text(H100_YAML, encoding="utf-8")
    assert hardware_from_yaml(path) == HardwareSpec("my_h100", **{
        f: getattr(HARDWARE["h100_sxm"], f) for f in HARDWARE_FIELDS if f != "system_id"})
    assert not hardware_from_yaml(path).registry  # (a system file never takes the registry's measured figures)


def test_system_file_without_power_has_no_power(tmp_path):
    """Board and idle power may be left out together (the run then has no energy figures), not one alone."""
    path = tmp_path / "gpu.yaml"
    path.write_text(H100_YAML.replace("board_power_w: 700\nidle_power_w: 121.7\n", ""), encoding="utf-8")
    spec = hardware_from_yaml(path)
    assert spec.board_power_w is None and spec.idle_power_w is None


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace("gpus_per_node: 8\n", ""), "gpu.yaml: missing gpus_per_node"),
    (lambda t: t + "hbm_bw: 3\n", "gpu.yaml: unknown field hbm_bw (fields: system_id, memory_bytes"),
    (lambda t: t.replace("3.35e+12", "0"),
     "gpu.yaml: hbm_bytes_per_s must be a number from 1e+06 to 1e+15 (bytes/s, 1 MB/s to 1 PB/s), got 0"),
    (lambda t: t.replace("5.0e-6", "-1.0e-6"),
     "gpu.yaml: intra_node_latency_s must be a number from 1e-09 to 1 (seconds, 1 ns to 1 s), got -1e-06"),
    (lambda t: t.replace("80.0e+9", "lots"),
     "gpu.yaml: memory_bytes must be a number from 1e+06 to 1e+14 (bytes per GPU, 1 MB to 100 TB), got 'lots'"),
    (lambda t: t.replace("gpus_per_node: 8", "gpus_per_node: 8.5"),
     "gpu.yaml: gpus_per_node must be an integer from 1 to 100,000"),
    (lambda t: "- a list\n", "gpu.yaml: a system file must be a YAML mapping"),
    (lambda t: t.replace("idle_power_w: 121.7\n", ""),
     "gpu.yaml: board_power_w needs idle_power_w too (both, or neither: no energy figures)"),
    (lambda t: t.replace("idle_power_w: 121.7", "idle_power_w: 800"),
     "gpu.yaml: idle_power_w (800) must not exceed board_power_w (700)"),
    (lambda t: t.replace("board_power_w: 700", "board_power_w: 0"),
     "gpu.yaml: board_power_w must be a number from 1 to 100000 (W, 1 W to 100 kW), got 0"),
    (lambda t: "a: [\n", "gpu.yaml: not valid YAML (line 2: "),
    # The physical ceilings: 1e300 bytes (once an OverflowError in the KV sizing), a peak or a bandwidth
    # above its ceiling, a count of 10**6 GPUs in a node, and the numbers that are not finite.
    (lambda t: t.replace("80.0e+9", "1.0e+300"), "gpu.yaml: memory_bytes must be a number from 1e+06 to 1e+14"),
    (lambda t: t.replace("80.0e+9", "1.0e+15"), "gpu.yaml: memory_bytes must be a number from 1e+06 to 1e+14"),
    (lambda t: t.replace("1979e12", "2.0e+18"), "gpu.yaml: fp8_flops must be a number from 1e+09 to 1e+18"),
    (lambda t: t.replace("989e12", "1.0e+3"), "gpu.yaml: bf16_flops must be a number from 1e+09 to 1e+18"),
    (lambda t: t.replace("450.0e+9", "2.0e+15"), "gpu.yaml: intra_node_bytes_per_s must be a number from 1e+06"),
    (lambda t: t.replace("64000000000", ".inf"), "gpu.yaml: pcie_bytes_per_s must be a number from 1e+06"),
    (lambda t: t.replace("50000000000", ".nan"), "gpu.yaml: nic_bytes_per_s must be a number from 1e+06"),
    (lambda t: t.replace("5.0e-6", "2.0"), "gpu.yaml: intra_node_latency_s must be a number from 1e-09 to 1"),
    (lambda t: t.replace("gpus_per_node: 8", "gpus_per_node: 1000000"),
     "gpu.yaml: gpus_per_node must be an integer from 1 to 100,000 (GPUs in one GPU-link domain"),
    (lambda t: t + "gpus_per_node: 4\n", "gpu.yaml: not valid YAML (line 13: duplicate key 'gpus_per_node', "
                                          "first set on line 9)"),
])
def test_bad_system_file_is_one_line_naming_file_and_field(tmp_path, edit, message):
    path = tmp_path / "gpu.yaml"
    path.write_text(edit(H100_YAML), encoding="utf-8")
    with pytest.raises(ScenarioError) as err:
        hardware_from_yaml(path)
    assert str(err.value).startswith(f"{path.parent}/{message}")
    assert "\n" not in str(err.value)


def test_every_registry_system_passes_the_system_file_rules(tmp_path):
    """Each registry entry written out as a system file reads back with the same figures: the registry is
    within the same physical ranges a user's file must meet (the file is not the registry's own system)."""
    for system_id, spec in HARDWARE.items():
        path = tmp_path / f"{system_id}.yaml"
        path.write_text("".join(f"{f}: {getattr(spec, f)!r}\n" for f in HARDWARE_FIELDS
                                if getattr(spec, f) is not None), encoding="utf-8")  # (None: an optional field left out)
        assert hardware_from_yaml(path) == replace(spec, registry=False)


def test_missing_system_file(tmp_path):
    with pytest.raises(ScenarioError, match="nope.yaml: system file not found"):
        hardware_from_yaml(tmp_path / "nope.yaml")
