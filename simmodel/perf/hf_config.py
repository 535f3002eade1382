"""Read a model's shape from a local Hugging Face ``config.json``; nothing is ever downloaded.

Reads the keys the Llama, Mistral, Qwen2, Qwen3, Qwen2-MoE, Qwen3-MoE, Mixtral, DeepSeek-V2/V3 (and
Kimi-K2), Phi-3/Phi-4, GLM-4.5, gpt-oss, Gemma 2, Qwen3-Next, Nemotron-H and OPT configs use, and the ``text_config`` of Llama 4
(``_llama4``) and Gemma 3 (``transformers``' names, with its defaults where a key is absent):

- every family: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``vocab_size``,
  ``max_position_embeddings``, ``intermediate_size`` (OPT: ``ffn_dim``); ``num_key_value_heads``
  (default: the attention heads), ``head_dim`` (default: hidden / heads), ``tie_word_embeddings``
  (default false, OPT true), ``torch_dtype`` or ``dtype`` (default bf16) — FP8 checkpoints
  (``quantization_config.quant_method: fp8``, DeepSeek-V3) weigh 1 byte;
- MoE: the expert count (``num_local_experts`` / ``num_experts`` / ``n_routed_experts``),
  ``num_experts_per_tok``, ``moe_intermediate_size`` (Mixtral: its ``intermediate_size``), shared
  experts (``n_shared_experts``, or Qwen2-MoE's ``shared_expert_intermediate_size`` as that many
  expert widths), ``first_k_dense_replace``, Qwen2-MoE's ``decoder_sparse_step`` (MoE on every k-th layer);
- MLA: ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``; DeepSeek-V3.2's
  sparse attention: ``index_topk``, ``index_n_heads``, ``index_head_dim``;
- sliding-window layers: ``sliding_window`` with ``layer_types`` or the family's pattern (``_sliding``);
- state layers (``_linear``): Qwen3-Next's Gated DeltaNet (``linear_*``, ``full_attention_interval``), Nemotron-H's
  ``hybrid_override_pattern`` of Mamba-2 (``mamba_num_heads``, ``mamba_head_dim``, ``n_groups``, ``ssm_state_size``,
  ``conv_kernel``, ``mamba_ssm_cache_dtype``), attention, MLP and MoE layers.

Other ``model_type``s are refused, even when they carry these keys: other hybrid and multimodal families
(Jamba's Mamba layers, vision towers) would parse into a wrong shape without a word. So are layouts
a ``ModelSpec`` cannot express (DeepSeek's ``moe_layer_freq`` above 1, a list of dense layers between MoE
ones, OPT's projected embeddings) and quantizations other than FP8, 4-bit AWQ/GPTQ, NVFP4 and INT8 W8A8 of every linear layer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simmodel.config.json_safe import parse_json
from simmodel.errors import ScenarioError
from simmodel.perf.models import LAYER_KINDS, ModelSpec

# model_type values read here; Kimi-K2 ships a DeepSeek-V3 architecture under its own name.
FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mixtral", "deepseek_v2",
            "deepseek_v3", "deepseek_v32", "kimi_k2", "qwen3_next", "nemotron_h", "phi3", "glm4_moe", "gpt_oss", "gemma2",
            "gemma3_text", "opt")
_GEMMA = ("gemma2", "gemma3_text")
# Gemma ties its LM head to the embeddings unless the config says otherwise.
_TIED_FAMILIES = ("opt", *_GEMMA)
# Two-projection MLP (fc1, fc2; Nemotron-H's up, down with squared ReLU) instead of gate/up/down.
_UNGATED = ("opt", "nemotron_h")
# transformers' OPTConfig and Gemma configs keep tie_word_embeddings=True; the others default to False.
_TIED_BY_DEFAULT = _TIED_FAMILIES
_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8_e4m3fn": 1,
                "float8_e5m2": 1}
_FP8_METHODS = ("fp8", "fbgemm_fp8")
_MISSING = object()
MAX_DIMENSION = 1_000_000_000
"""The largest count or size a config.json may give (the largest real ones: ~260k vocabulary, 10M
positions): larger ones would overflow the model's float arithmetic (a 10**200 hidden_size)."""


def model_from_hf_config(path: Path, model_id: str | None = None) -> ModelSpec:
    """Build a ``ModelSpec`` from a local ``config.json`` (the file, or the folder holding it).

    Args:
        path: the ``config.json`` file or its folder; read from disk only.
        model_id: the name the spec carries; default: ``path`` as given.

    Raises:
        ScenarioError: one line naming the file and the key at fault, e.g.
            ``models/x/config.json: missing num_hidden_layers``.
    """
    file = path / "config.json" if path.is_dir() else path
    cfg = _Config(_read(file), str(file))
    if cfg.family == "llama4":
        return _llama4(cfg, str(path) if model_id is None else model_id)
    if cfg.family == "gemma3":  # Gemma3ForConditionalGeneration: its text_config, the vision tower left out
        cfg = _text_config(cfg, "gemma3_text")
    family = cfg.family
    if family not in FAMILIES:
        shown = "missing model_type" if not family else f"model_type {family!r} is not modeled"
        cfg.fail(f"{shown}; the families read here are {', '.join(FAMILIES)}")
    layers, hidden, heads = cfg.int("num_hidden_layers"), cfg.int("hidden_size"), cfg.int("num_attention_heads")
    kv_heads = cfg.int("num_key_value_heads", heads)
    if heads % kv_heads:
        cfg.fail(f"num_key_value_heads {kv_heads} must divide num_attention_heads {heads}")
    if family == "opt" and cfg.int("word_embed_proj_dim", hidden) != hidden:
        cfg.fail("word_embed_proj_dim differs from hidden_size (projected embeddings are not modeled)")
    intermediate = cfg.int("ffn_dim" if family == "opt" else "intermediate_size")
    return ModelSpec(
        model_id=str(path) if model_id is None else model_id,
        num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_kv_heads=kv_heads, head_dim=_head_dim(cfg, hidden, heads), intermediate_size=intermediate,
        vocab_size=cfg.int("vocab_size"),
        tie_word_embeddings=cfg.bool("tie_word_embeddings", family in _TIED_BY_DEFAULT),
        max_position_embeddings=cfg.int("max_position_embeddings"), dtype_bytes=_dtype_bytes(cfg),
        gated_mlp=family not in _UNGATED, weight_block_size=_block_size(cfg), **_formats(cfg),
        **_moe(cfg, intermediate), **_mla(cfg), **_sliding(cfg, layers), **_linear(cfg, layers))


def _linear(cfg: _Config, layers: int) -> dict[str, Any]:
    """Qwen3-Next's layers: every ``full_attention_interval``-th gated attention (its query projection doubled for
    the output gate), the others Gated DeltaNet with ``linear_*`` heads and a ``linear_conv_kernel_dim`` tap
    convolution. Nemotron-H's: ``_nemotron_h``."""
    if cfg.family == "nemotron_h":
        return _nemotron_h(cfg, layers)
    if cfg.family != "qwen3_next":
        return {}
    attention = layers // cfg.int("full_attention_interval", 4)
    return dict(attention_output_gate=True, num_linear_layers=layers - attention,
                linear_key_heads=cfg.int("linear_num_key_heads"), linear_value_heads=cfg.int("linear_num_value_heads"),
                linear_key_head_dim=cfg.int("linear_key_head_dim"),
                linear_value_head_dim=cfg.int("linear_value_head_dim"),
                linear_conv_kernel=cfg.int("linear_conv_kernel_dim"))


_MAMBA_STATE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 0}
"""``mamba_ssm_cache_dtype`` → the recurrent state's bytes per value; ``auto``: the activations' (0)."""


def _nemotron_h(cfg: _Config, layers: int) -> dict[str, Any]:
    """Nemotron-H's single-block layers (``hybrid_override_pattern``, ``ModelSpec.layer_pattern``), its Mamba-2
    mixers, its shared expert's own width, and the recurrent state's dtype (``mamba_ssm_cache_dtype``, else vLLM's
    float32 for the family). Refused: Nemotron 3 Super's latent MoE (``moe_latent_size``)."""
    pattern = cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != layers or set(pattern) - set(LAYER_KINDS):
        cfg.fail(f"hybrid_override_pattern must be a string of {layers} letters from {LAYER_KINDS} (one per "
                 f"layer: Mamba-2, attention, MLP, MoE), got {_shown(pattern)}")
    if "*" not in pattern or "M" not in pattern:
        cfg.fail("hybrid_override_pattern must have attention (*) and Mamba-2 (M) layers: a model without either is "
                 "not a Nemotron-H hybrid vLLM's hybrid KV cache serves as modelled here")
    if "E" in pattern and not cfg.get("n_routed_experts"):
        cfg.fail("hybrid_override_pattern has MoE layers (E) but n_routed_experts is missing")
    if cfg.get("moe_latent_size") is not None:
        cfg.fail("moe_latent_size (experts in a latent space, Nemotron 3 Super) is not modeled")
    dtype = cfg.get("mamba_ssm_cache_dtype")
    if dtype is not None and dtype not in _MAMBA_STATE_BYTES:
        cfg.fail(f"mamba_ssm_cache_dtype must be one of {', '.join(_MAMBA_STATE_BYTES)}, got {_shown(dtype)}")
    heads, groups = cfg.int("mamba_num_heads"), cfg.int("n_groups")
    if heads % groups:
        cfg.fail(f"n_groups {groups} must divide mamba_num_heads {heads} (each group's B and C serve whole heads)")
    shared = cfg.int("moe_shared_expert_intermediate_size", 0, minimum=0) if "E" in pattern else 0
    return dict(layer_pattern=pattern, num_linear_layers=pattern.count("M"), mamba_heads=heads,
                mamba_head_dim=cfg.int("mamba_head_dim"), mamba_groups=groups,
                mamba_state_size=cfg.int("ssm_state_size"), linear_conv_kernel=cfg.int("conv_kernel"),
                state_dtype_bytes=_MAMBA_STATE_BYTES[dtype or "float32"], shared_expert_intermediate_size=shared)


def _text_config(root: _Config, family: str) -> _Config:
    """A multimodal config's ``text_config`` read as a ``family`` config, with the dtype and quantization the root
    gives it."""
    text = root.get("text_config")
    if not isinstance(text, dict):
        root.fail("text_config must be a JSON object")
    inherited = {k: root.get(k) for k in ("torch_dtype", "quantization_config", "tie_word_embeddings")
                 if text.get(k) is None and root.get(k) is not None}
    return _Config({**text, **inherited, "model_type": family}, f"{root.where}: text_config")


def _sliding(cfg: _Config, layers: int) -> dict[str, int]:
    """Sliding-window layers: ``layer_types`` (``sliding_attention`` or ``full_attention`` per layer) where given,
    else the family's pattern (Gemma 2: every even layer; Gemma 3: all but every ``sliding_window_pattern``-th);
    other families with a ``sliding_window`` (Mistral 7B v0.1) slide on every layer unless ``use_sliding_window``
    is false (Qwen2's)."""
    gemma = cfg.family in _GEMMA
    if (cfg.get("sliding_window") is None and not gemma) or cfg.get("use_sliding_window") is False:
        return {}
    window = cfg.int("sliding_window", 4096)  # (transformers' Gemma 2 and Gemma 3 default)
    types = cfg.get("layer_types")
    if types is not None:
        if not (isinstance(types, list) and len(types) == layers
                and all(t in ("sliding_attention", "full_attention") for t in types)):
            cfg.fail(f"layer_types must list sliding_attention or full_attention for each of the {layers} layers")
        sliding = types.count("sliding_attention")
    elif cfg.family == "gemma2":
        sliding = (layers + 1) // 2
    elif cfg.family == "gemma3_text":
        sliding = layers - layers // cfg.int("sliding_window_pattern", 6)
    else:
        sliding = layers
    return dict(sliding_window=window, num_sliding_layers=sliding) if sliding else {}


def _llama4(root: _Config, model_id: str) -> ModelSpec:
    """Llama 4 (``model_type: llama4``, ``Llama4ForConditionalGeneration``): its ``text_config``, the vision tower
    left out (text-only serving). Every layer's routed experts have ``intermediate_size`` with one shared expert
    of that size (transformers' ``Llama4TextMoe``), on every ``interleave_moe_layer_step``-th layer; the others are
    dense MLPs of ``intermediate_size_mlp``; ``attention_chunk_size`` bounds the served context."""
    cfg = _text_config(root, "llama4")
    layers, hidden, heads = cfg.int("num_hidden_layers"), cfg.int("hidden_size"), cfg.int("num_attention_heads")
    kv_heads = cfg.int("num_key_value_heads", heads)
    if heads % kv_heads:
        cfg.fail(f"num_key_value_heads {kv_heads} must divide num_attention_heads {heads}")
    experts, per_token = cfg.int("num_local_experts"), cfg.int("num_experts_per_tok")
    if per_token > experts:
        cfg.fail(f"num_experts_per_tok {per_token} exceeds the {experts} experts (num_local_experts)")
    return ModelSpec(
        model_id=model_id, num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_kv_heads=kv_heads,
        head_dim=_head_dim(cfg, hidden, heads), intermediate_size=cfg.int("intermediate_size_mlp"),
        vocab_size=cfg.int("vocab_size"), tie_word_embeddings=cfg.bool("tie_word_embeddings", False),
        max_position_embeddings=cfg.int("max_position_embeddings"), dtype_bytes=_dtype_bytes(cfg),
        weight_format=_weight_format(cfg), num_experts=experts, num_experts_per_token=per_token,
        moe_intermediate_size=cfg.int("intermediate_size"), num_shared_experts=1,
        moe_layer_step=cfg.int("interleave_moe_layer_step", 1),
        attention_chunk_size=cfg.int("attention_chunk_size", 0, minimum=0))


class _Config:
    """A parsed config.json and the file name every error names."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        self.data, self.where = data, where
        model_type = data.get("model_type")
        self.family = model_type if isinstance(model_type, str) else ""

    def fail(self, message: str) -> None:
        raise ScenarioError(f"{self.where}: {message}")

    def get(self, key: str) -> Any:
        """The value, or ``None`` where absent (a JSON ``null`` reads as absent, as in transformers)."""
        return self.data.get(key)

    def int(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> int:
        value = self.get(key)
        if value is None:
            if default is _MISSING:
                self.fail(f"missing {key}")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer ≥ {minimum}"
            self.fail(f"{key} must be {kind}, got {_shown(value)}")
        if value > MAX_DIMENSION:
            self.fail(f"{key} must be at most {MAX_DIMENSION:,}, got {_shown(value)}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(f"{key} must be true or false, got {json.dumps(value)}")
        return value


def _shown(value: Any) -> str:
    """A JSON value for a message, cut short (a 400-digit integer is not printed whole)."""
    try:
        text = json.dumps(value)
    except ValueError:  # an int above Python's 4,300-digit str limit
        return "a value too large to show"
    return text if len(text) <= 60 else text[:57] + "..."


def _read(file: Path) -> dict[str, Any]:
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{file}: no such config.json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{file}: cannot read ({exc})") from None
    data = parse_json(text, str(file))
    if not isinstance(data, dict):
        raise ScenarioError(f"{file}: a config.json must be a JSON object")
    architectures = data.get("architectures")
    if data.get("model_type") not in ("llama4", "gemma3") and isinstance(architectures, list) and architectures and not any(
            isinstance(a, str) and a.endswith("ForCausalLM") for a in architectures):
        raise ScenarioError(f"{file}: architectures {architectures} has no *ForCausalLM decoder")
    return data


def _head_dim(cfg: _Config, hidden: int, heads: int) -> int:
    if cfg.family == "nemotron_h" and cfg.get("head_dim") is None:  # (the Nemotron-H 8K bases' name for it)
        return cfg.int("attention_head_dim", hidden // heads)
    if cfg.get("head_dim") is None and hidden % heads and cfg.family not in _GEMMA:
        cfg.fail(f"missing head_dim, and hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
    return cfg.int("head_dim", 256 if cfg.family in _GEMMA else hidden // heads)  # (Gemma's default head_dim)


def _formats(cfg: _Config) -> dict[str, str]:
    """``weight_format`` (``_weight_format``), or gpt-oss's ``expert_weight_format``: ``quant_method: mxfp4`` with
    ``modules_to_not_convert`` naming the attention, routers, embeddings and LM head quantizes the experts only."""
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method") == "mxfp4":
        kept = quant.get("modules_to_not_convert") or []
        if cfg.family != "gpt_oss" or not isinstance(kept, list) or any(
                not isinstance(m, str) or "expert" in m or m.endswith("mlp") for m in kept):
            cfg.fail("quantization_config mxfp4 is modeled as gpt-oss ships it (the experts only)")
        return dict(expert_weight_format="mxfp4")
    fmt = _weight_format(cfg)
    return {} if fmt is None else dict(weight_format=fmt)


def _weight_format(cfg: _Config) -> str | None:
    """The format of a checkpoint quantized below 8 bits or to INT8 W8A8 (``WEIGHT_FORMATS``), None otherwise:
    AWQ and GPTQ 4-bit (``quant_method`` awq or gptq, ``bits``/``w_bit`` 4), ModelOpt NVFP4 (``quant_algo``
    NVFP4), compressed-tensors groups of 4-bit integer weights (weight-only) or of 8-bit integer weights and
    activations (W8A8). FP8 is read by ``_dtype_bytes``; other quantizations are refused."""
    quant = cfg.get("quantization_config")
    if quant is None or _is_fp8(quant):
        return None
    method = quant.get("quant_method", quant.get("quant_algo")) if isinstance(quant, dict) else quant
    if isinstance(quant, dict):
        bits = quant.get("bits", quant.get("w_bit"))
        whole = all(_lm_head_only(quant.get(key)) for key in ("modules_to_not_convert", "exclude_modules", "ignore"))
        if method in ("awq", "gptq") and bits == 4 and whole:
            return "int4"
        if quant.get("quant_algo") == "NVFP4" and whole:
            return "fp4"
        groups = quant.get("config_groups")
        if isinstance(groups, dict) and groups and whole:
            weights = [g.get("weights") or {} for g in groups.values()]
            inputs = [g.get("input_activations") or {} for g in groups.values()]
            if all(w.get("num_bits") == 4 and w.get("type") == "int" for w in weights) and not any(inputs):
                return "int4"
            if all(w.get("num_bits") == 8 and w.get("type") == "int" for w in weights) and all(
                    a.get("num_bits") == 8 and a.get("type") == "int" for a in inputs):
                return "int8"
    cfg.fail(f"quantization_config {json.dumps(method)} is not modeled (FP8, 4-bit AWQ/GPTQ, NVFP4 and INT8 W8A8 "
             f"of every linear layer are); point at the unquantized config and set engine.dtype")
    return None


def _lm_head_only(modules: Any) -> bool:
    """Whether a list of modules left unquantized names at most the LM head (which is priced 16-bit anyway), as
    nearly every quantized checkpoint's ``ignore`` does (``lm_head``, ``re:.*lm_head``)."""
    if not modules:
        return True
    return isinstance(modules, list) and all(isinstance(m, str) and m.split(":")[-1].lstrip(".*").endswith("lm_head")
                                             for m in modules)


def _dtype_bytes(cfg: _Config) -> int:
    """Bytes per weight: 1 for an FP8 checkpoint, else from torch_dtype (bf16 where absent; a checkpoint quantized
    otherwise takes its format's, ``_weight_format``)."""
    quant = cfg.get("quantization_config")
    if quant is not None and _is_fp8(quant):
        return 1
    key = "torch_dtype" if cfg.get("torch_dtype") is not None else "dtype"
    name = cfg.get(key)
    if name is None:
        return 2
    if name not in _DTYPE_BYTES:
        cfg.fail(f"{key} must be one of {', '.join(_DTYPE_BYTES)}, got {json.dumps(name)}")
    return _DTYPE_BYTES[name]


def _block_size(cfg: _Config) -> int:
    """The side of the FP8 weights' scale blocks (``quantization_config.weight_block_size``, [128, 128] in
    DeepSeek-V3), 0 without block scales."""
    quant = cfg.get("quantization_config")
    block = quant.get("weight_block_size") if isinstance(quant, dict) and _is_fp8(quant) else None
    if block is None:
        return 0
    if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and not isinstance(b, bool)
                                                                and b > 0 for b in block) and block[0] == block[1]):
        cfg.fail(f"quantization_config.weight_block_size must be two equal positive integers, got {json.dumps(block)}")
    return block[0]


def _is_fp8(quant: Any) -> bool:
    """FP8 weights: ``quant_method: fp8`` (DeepSeek-V3, Qwen3-*-FP8), ModelOpt's ``quant_algo: FP8``, or
    compressed-tensors groups whose weights are all 8-bit floats."""
    if not isinstance(quant, dict):
        return False
    if quant.get("quant_method") in _FP8_METHODS or quant.get("quant_algo") == "FP8":
        return True
    groups = quant.get("config_groups")
    weights = [g.get("weights") for g in groups.values()] if isinstance(groups, dict) and groups else [None]
    return all(isinstance(w, dict) and w.get("num_bits") == 8 and w.get("type") == "float" for w in weights)


def _moe(cfg: _Config, intermediate: int) -> dict[str, int]:
    """The MoE fields, or none for a dense model."""
    key = next((k for k in ("num_local_experts", "num_experts", "n_routed_experts") if cfg.get(k) is not None),
               "num_experts")
    num_experts = cfg.int(key, 0, minimum=0)
    if num_experts == 0:
        return {}
    # Qwen2-MoE's decoder_sparse_step k makes layer i MoE when (i + 1) % k == 0 (``moe_layer_step``); DeepSeek's
    # moe_layer_freq counts from the first MoE layer instead, which no published model sets above 1.
    if cfg.int("moe_layer_freq", 1) != 1:
        cfg.fail(f"moe_layer_freq {cfg.get('moe_layer_freq')} (MoE on every n-th layer) is not modeled; only 1")
    step = cfg.int("decoder_sparse_step", 1)
    first_dense = cfg.int("first_k_dense_replace", 0, minimum=0)
    if step > 1 and first_dense:
        cfg.fail("decoder_sparse_step above 1 with first_k_dense_replace is not modeled")
    if cfg.get("mlp_only_layers"):
        cfg.fail("mlp_only_layers (dense layers between MoE layers) is not modeled; only first_k_dense_replace")
    per_token = cfg.int("num_experts_per_tok")
    if per_token > num_experts:
        cfg.fail(f"num_experts_per_tok {per_token} exceeds the {num_experts} experts ({key})")
    expert = cfg.int("moe_intermediate_size", intermediate)
    return dict(num_experts=num_experts, num_experts_per_token=per_token, moe_intermediate_size=expert,
                num_shared_experts=_shared_experts(cfg, expert), first_dense_layers=first_dense, moe_layer_step=step)


def _shared_experts(cfg: _Config, expert: int) -> int:
    """DeepSeek counts shared experts; Qwen2-MoE gives one shared MLP k expert widths wide (same weights)."""
    if cfg.get("n_shared_experts") is not None:
        return cfg.int("n_shared_experts", 0, minimum=0)
    width = cfg.int("shared_expert_intermediate_size", 0, minimum=0)
    if width % expert:
        cfg.fail(f"shared_expert_intermediate_size {width} is not a multiple of moe_intermediate_size {expert}")
    return width // expert


def _mla(cfg: _Config) -> dict[str, int]:
    """The multi-head latent attention fields, or none for GQA/MHA."""
    if cfg.get("kv_lora_rank") is None:
        return {}
    # A null q_lora_rank (DeepSeek-V2-Lite) means queries are projected without a low-rank step.
    fields = dict(q_lora_rank=cfg.int("q_lora_rank", 0, minimum=0), kv_lora_rank=cfg.int("kv_lora_rank"),
                  qk_nope_head_dim=cfg.int("qk_nope_head_dim"), qk_rope_head_dim=cfg.int("qk_rope_head_dim"),
                  v_head_dim=cfg.int("v_head_dim"))
    if cfg.family == "deepseek_v32":  # DeepSeek Sparse Attention's lightning indexer
        fields.update(index_topk=cfg.int("index_topk"), index_heads=cfg.int("index_n_heads"),
                      index_head_dim=cfg.int("index_head_dim"))
    return fields
