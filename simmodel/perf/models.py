"""Model shapes by Hugging Face id, from each model's published ``config.json``.

A ``ModelSpec`` describes what the model really computes and stores: gated (SwiGLU) or plain MLPs,
grouped-query or multi-head latent attention (MLA), dense or mixture-of-experts layers. Weight and KV
byte counts take the serving dtype as an argument, so one shape serves BF16 and FP8 deployments.

Parameter counts cover every matrix (embeddings, LM head unless tied, attention, MLPs, experts,
routers) and the RMSNorm weights. Small extras a few families add are left out: Qwen3's per-head q/k
norms (2 × head_dim per layer), Qwen2.5's q/k/v biases, MLA's two latent norms and DeepSeek's router bias,
and OPT's biases, LayerNorm biases and learned position table (1.3% of OPT-125m, far less elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class VisionTower:
    """The vision encoder (ViT) of a Qwen-VL-style model, from ``vision_config`` and the processor's pixel limits.

    A Conv3d patch embedding cuts the resized image into ``patch_size``² patches (each image is repeated over
    ``temporal_patch_size`` frames); ``depth`` pre-norm blocks follow, with full attention within each image and
    a plain two-projection GELU MLP (fc1, fc2); the patch merger folds ``spatial_merge_size``² neighbouring
    patches into one LLM token of ``out_hidden_size``. Qwen3-VL's DeepStack adds ``num_deepstack_mergers``
    more mergers on intermediate blocks, whose outputs travel with the token's embedding.
    """

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    patch_size: int
    spatial_merge_size: int
    temporal_patch_size: int
    out_hidden_size: int
    in_channels: int = 3
    num_position_embeddings: int = 0
    num_deepstack_mergers: int = 0
    min_pixels: int = 0
    """Smallest resized area (pixels): the processor's ``size.shortest_edge`` (Qwen2-VL: ``min_pixels``)."""
    max_pixels: int = 0
    """Largest resized area (pixels): the processor's ``size.longest_edge`` (Qwen2-VL: ``max_pixels``); 0: none."""


LAYER_KINDS = "M*-E"
"""``ModelSpec.layer_pattern``'s letters (Nemotron-H's): Mamba-2, attention, MLP, MoE."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The shape of a decoder-only transformer.

    Dense models leave the MoE fields at 0; MoE layers replace the dense MLP in all but the first
    ``first_dense_layers`` layers. MLA models (DeepSeek-V3) set ``kv_lora_rank`` and the MLA head dims;
    their KV cache stores one latent of ``kv_lora_rank + qk_rope_head_dim`` values per token and layer.
    """

    model_id: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    dtype_bytes: int = 2
    gated_mlp: bool = True
    # Mixture of experts
    num_experts: int = 0
    num_experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    """Width of each shared expert's MLP when it differs from a routed expert's (Nemotron-H's
    ``moe_shared_expert_intermediate_size``); 0: ``moe_intermediate_size``."""
    first_dense_layers: int = 0
    moe_layer_step: int = 1
    """After the ``first_dense_layers``, every ``moe_layer_step``-th layer is MoE and the others dense (Llama 4
    Maverick's ``interleave_moe_layer_step`` 2, Qwen2-MoE's ``decoder_sparse_step``); 1: every one."""
    expert_dtype_bytes: int = 0
    """Bytes per weight of the routed and shared experts when the checkpoint quantizes only those (RedHatAI's
    FP8-dynamic Llama 4 keeps attention, the router and the LM head in BF16; the routers, a few MB, are
    counted with the experts); 0: ``dtype_bytes``."""
    weight_format: str | None = None
    """A checkpoint quantized below 8 bits or to INT8 (``perf.deployment.WEIGHT_FORMATS``: ``int4`` for AWQ and
    GPTQ, ``fp4`` for NVFP4, ``int8`` for W8A8), which ``engine.dtype: auto`` serves; None: ``dtype_bytes``."""
    weight_block_size: int = 0
    """FP8 weights scaled per square block of this many weights a side (DeepSeek-V3's
    ``quantization_config.weight_block_size`` [128, 128]); 0: no block scales (per tensor or channel)."""
    expert_weight_format: str | None = None
    """The experts' format when the checkpoint quantizes only them below 8 bits (``perf.deployment.WEIGHT_FORMATS``:
    gpt-oss's ``mxfp4`` experts beside BF16 attention, embeddings and LM head), which ``engine.dtype: auto``
    serves; None: ``expert_dtype_bytes``."""
    sliding_window: int = 0
    """Tokens a sliding-window attention layer sees: itself and the ``sliding_window − 1`` before it (the config's
    ``sliding_window``, as vLLM reads it); 0: every layer attends to the whole context."""
    num_sliding_layers: int = 0
    """Layers that attend within ``sliding_window`` (gpt-oss: every even layer; Gemma 3: five of every six); the
    others attend to the whole context. vLLM's hybrid KV cache keeps only the window's KV blocks for them
    (``perf.kv_layout``)."""
    attention_output_gate: bool = False
    """The query projection also gives a sigmoid gate on the attention output (Qwen3-Next): twice its width."""
    # State layers — linear attention (Qwen3-Next's Gated DeltaNet) or Mamba-2 (Nemotron-H): these layers keep a
    # fixed-size state per sequence instead of KV (a convolution window and a matrix per head), read and written
    # each pass.
    num_linear_layers: int = 0
    """Layers that keep a fixed-size state instead of KV: Gated DeltaNet (Qwen3-Next) or Mamba-2 (Nemotron-H,
    where ``mamba_heads`` is set)."""
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    # Mamba-2 (Nemotron-H's "M" layers, vLLM's ``MambaMixer2``): ``mamba_heads`` heads of ``mamba_head_dim`` share
    # ``mamba_groups`` groups of B and C projections of ``mamba_state_size``; the state is a convolution window and
    # a head dim × state size matrix per head.
    mamba_heads: int = 0
    mamba_head_dim: int = 0
    mamba_groups: int = 0
    mamba_state_size: int = 0
    state_dtype_bytes: int = 0
    """Bytes per value of the recurrent state (vLLM's ``mamba_ssm_cache_dtype``: Nemotron-H's float32, 4); 0: the
    activations' (``auto``). The convolution window is kept at the activations' width either way."""
    layer_pattern: str = ""
    """One character per layer where layers are single blocks of one kind (Nemotron-H's
    ``hybrid_override_pattern``): ``M`` Mamba-2, ``*`` attention, ``-`` MLP, ``E`` MoE, each behind one norm; "":
    every layer is attention (or linear attention) followed by an MLP or MoE block, behind two norms."""
    attention_chunk_size: int = 0
    """Llama 4's chunked local attention (3 of every 4 layers attend within chunks of this many tokens): not
    modelled, so contexts are limited to one chunk, where it is full attention; 0: none."""
    # Multi-head latent attention
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek Sparse Attention (DeepSeek-V3.2): a lightning indexer of ``index_heads`` heads of ``index_head_dim``
    # scores every earlier token (in FP8, its keys cached in FP8 with a float32 scale), and MLA attends over the
    # ``index_topk`` it selects.
    index_topk: int = 0
    index_heads: int = 0
    index_head_dim: int = 0
    # Vision-language models: the vision encoder. Its weights are not in num_parameters (the language
    # model's); simmodel.perf.vision prices and sizes it.
    vision: VisionTower | None = None

    def __post_init__(self) -> None:
        pattern = self.layer_pattern
        if pattern and (len(pattern) != self.num_layers or set(pattern) - set(LAYER_KINDS) or "*" not in pattern
                        or pattern.count("M") != self.num_linear_layers):
            raise ValueError(f"{self.model_id}: layer_pattern must give one of {LAYER_KINDS} per layer "
                             f"({self.num_layers}), an attention layer (*) at least, its M the "
                             f"{self.num_linear_layers} state layers")

    # -- structure ------------------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_mamba(self) -> bool:
        """Whether the state layers are Mamba-2 mixers (else Gated DeltaNet, where there are any)."""
        return self.mamba_heads > 0

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer ``i`` (from 0) runs experts: its ``layer_pattern`` letter is ``E``, or every
        ``moe_layer_step``-th after the ``first_dense_layers`` (``num_moe_layers`` of them)."""
        if self.layer_pattern:
            return self.layer_pattern[i] == "E"
        return self.is_moe and i >= self.first_dense_layers and (i - self.first_dense_layers + 1) % self.moe_layer_step == 0

    @property
    def num_moe_layers(self) -> int:
        if self.layer_pattern:
            return self.layer_pattern.count("E")
        return (self.num_layers - self.first_dense_layers) // self.moe_layer_step if self.is_moe else 0

    @property
    def num_attention_layers(self) -> int:
        """Layers with softmax attention (and a KV cache): the ``*`` of a ``layer_pattern``, else all but the
        linear-attention ones."""
        if self.layer_pattern:
            return self.layer_pattern.count("*")
        return self.num_layers - self.num_linear_layers

    @property
    def num_full_attention_layers(self) -> int:
        """Layers attending to the whole context (the attention layers less the sliding-window ones)."""
        return self.num_attention_layers - (self.num_sliding_layers if self.sliding_window else 0)

    @property
    def mamba_inner_size(self) -> int:
        """Width of a Mamba-2 layer's inner stream (heads × head dim)."""
        return self.mamba_heads * self.mamba_head_dim

    def mamba_conv_dim(self, tensor: int = 1) -> int:
        """Channels of a Mamba-2 layer's causal convolution over all ``tensor`` GPUs: the inner stream and the B and C
        projections of its groups, the groups replicated up to ``tensor`` when they do not divide among the GPUs
        (vLLM's ``extra_groups_for_head_shards``)."""
        groups = self.mamba_groups if self.mamba_groups % tensor == 0 else max(self.mamba_groups, tensor)
        return self.mamba_inner_size + 2 * groups * self.mamba_state_size

    @property
    def linear_conv_dim(self) -> int:
        """Channels of a state layer's causal convolution: a Gated DeltaNet's queries, keys and values, or a Mamba-2
        layer's inner stream, B and C."""
        if self.is_mamba:
            return self.mamba_conv_dim()
        return 2 * self.linear_key_heads * self.linear_key_head_dim + self.linear_value_heads * self.linear_value_head_dim

    @property
    def linear_attention_params(self) -> int:
        """One state layer. Gated DeltaNet (vLLM's ``GatedDeltaNet``): the q/k/v/z and b/a input projections, the
        depthwise convolution, the per-head decay and step biases, the gated norm and the output projection.
        Mamba-2 (vLLM's ``MambaMixer2``): the input projection to the gate, the convolution's channels and a step
        per head; the depthwise convolution and its bias; A, D and the step bias per head; the gated norm; the output
        projection."""
        if not self.num_linear_layers:
            return 0
        h = self.hidden_size
        if self.is_mamba:
            inner, conv, heads = self.mamba_inner_size, self.linear_conv_dim, self.mamba_heads
            return h * (inner + conv + heads) + conv * (self.linear_conv_kernel + 1) + 3 * heads + inner + inner * h
        value_dim = self.linear_value_heads * self.linear_value_head_dim
        qkvz = h * (2 * self.linear_key_heads * self.linear_key_head_dim + 2 * value_dim)
        return (qkvz + h * 2 * self.linear_value_heads + self.linear_conv_dim * self.linear_conv_kernel
                + 2 * self.linear_value_heads + self.linear_value_head_dim + value_dim * h)

    def linear_state_shape(self, tensor: int = 1, speculative_tokens: int = 0) -> tuple[float, float]:
        """Values of one sequence's state in one state layer on one of ``tensor`` GPUs: the convolution window (its
        channels' last ``kernel − 1`` inputs, and one more per speculative token) and the recurrent state — a key
        dim × value dim matrix per Gated DeltaNet value head (vLLM's ``gated_delta_net_state_shape``), a head dim ×
        state size matrix per Mamba-2 head (``mamba2_state_shape``)."""
        taps = self.linear_conv_kernel - 1 + speculative_tokens
        if self.is_mamba:
            conv = self.mamba_conv_dim(tensor) * taps
            return conv / tensor, self.mamba_heads * self.mamba_head_dim * self.mamba_state_size / tensor
        conv = self.linear_conv_dim * taps
        return conv / tensor, self.linear_value_heads * self.linear_key_head_dim * self.linear_value_head_dim / tensor

    def linear_state_values(self, tensor: int = 1) -> float:
        """Values of one sequence's state in one state layer on one of ``tensor`` GPUs (``linear_state_shape``)."""
        return sum(self.linear_state_shape(tensor))

    def state_flops_per_token(self, tensor: int = 1) -> float:
        """FLOPs one token spends on the state of every state layer on one of ``tensor`` GPUs, however long the
        context. Gated DeltaNet: the state's decay, rank-one update and read-out, 4 × 2 FLOPs per state value.
        Mamba-2: per recurrent value its decay (1), the B·x outer-product accumulate (2) and the C read-out (2),
        and the depthwise convolution's ``kernel`` taps per channel (2 each)."""
        if self.is_mamba:
            conv = 2 * self.linear_conv_kernel * self.mamba_conv_dim(tensor) / tensor
            return self.num_linear_layers * (5 * self.linear_state_shape(tensor)[1] + conv)
        return 8 * self.num_linear_layers * self.linear_state_values(tensor)

    @property
    def mixer_params(self) -> int:
        """Token-mixing weights of every layer: attention projections, or a linear-attention layer's."""
        return self.num_attention_layers * self.attention_params + self.num_linear_layers * self.linear_attention_params

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense MLP: the ``-`` of a ``layer_pattern``, else all but the MoE ones."""
        if self.layer_pattern:
            return self.layer_pattern.count("-")
        return self.num_layers - self.num_moe_layers

    @property
    def is_sparse(self) -> bool:
        """DeepSeek Sparse Attention: attention over the ``index_topk`` tokens the indexer picks."""
        return self.index_topk > 0

    @property
    def indexer_params(self) -> int:
        """One layer's lightning indexer: its query up-projection from the q latent, its key projection and its
        per-head weights (and the key norm)."""
        if not self.is_sparse:
            return 0
        h, d, heads = self.hidden_size, self.index_head_dim, self.index_heads
        return self.q_lora_rank * heads * d + h * d + 2 * d + h * heads

    @property
    def indexer_kv_bytes(self) -> int:
        """One token's indexer key per layer: ``index_head_dim`` FP8 values and one float32 scale (vLLM's
        indexer cache)."""
        return self.index_head_dim + 4 if self.is_sparse else 0

    @property
    def qk_head_dim(self) -> int:
        """Width of one head's query·key dot product."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim if self.is_mla else self.head_dim

    # -- parameters per layer ------------------------------------------------------------------

    @property
    def attention_params(self) -> int:
        """q, k, v and output projections of one layer (MLA: its low-rank down/up projections)."""
        h, heads = self.hidden_size, self.num_attention_heads
        if self.is_mla:
            q = (h * self.q_lora_rank + self.q_lora_rank * heads * self.qk_head_dim if self.q_lora_rank
                 else h * heads * self.qk_head_dim)
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * heads * (
                self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + heads * self.v_head_dim * h + self.indexer_params
        q_dim, kv_dim = heads * self.head_dim, self.num_kv_heads * self.head_dim
        return (3 if self.attention_output_gate else 2) * h * q_dim + 2 * h * kv_dim

    @property
    def dense_mlp_params(self) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        """One routed expert (an MLP of ``moe_intermediate_size``, gated as the dense ones are)."""
        return (3 if self.gated_mlp else 2) * self.hidden_size * self.moe_intermediate_size

    @property
    def shared_expert_params(self) -> int:
        """The shared experts of one MoE layer (each ``shared_expert_intermediate_size`` wide, else a routed one's)."""
        width = self.shared_expert_intermediate_size or self.moe_intermediate_size
        return self.num_shared_experts * (3 if self.gated_mlp else 2) * self.hidden_size * width

    @property
    def router_params(self) -> int:
        return self.hidden_size * self.num_experts

    @property
    def moe_layer_params(self) -> int:
        """All routed experts, the shared experts and the router of one MoE layer."""
        return self.num_experts * self.expert_params + self.shared_expert_params + self.router_params

    @property
    def num_blocks(self) -> int:
        """Blocks behind a norm, each ending in an all-reduce under tensor parallelism: two a layer (its mixer and its
        MLP or MoE), one a ``layer_pattern`` layer."""
        return self.num_layers if self.layer_pattern else 2 * self.num_layers

    @property
    def norm_params(self) -> int:
        """The RMSNorm weights: one per block and the final one."""
        return self.hidden_size * (self.num_blocks + 1)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_parameters(self) -> int:
        """Every weight: embeddings, LM head unless tied, attention, MLPs or experts, norms."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_params
        return (self.mixer_params + self.num_dense_layers * self.dense_mlp_params
                + self.num_moe_layers * self.moe_layer_params + self.embedding_params + lm_head + self.norm_params)

    @property
    def num_active_parameters(self) -> int:
        """Parameters one token runs through (routed experts: only its ``num_experts_per_token``)."""
        active_moe = self.num_experts_per_token * self.expert_params + self.shared_expert_params + self.router_params
        lm_head = 0 if self.tie_word_embeddings else self.embedding_params
        return (self.mixer_params + self.num_dense_layers * self.dense_mlp_params
                + self.num_moe_layers * active_moe + self.embedding_params + lm_head + self.norm_params)

    def weight_bytes(self, dtype_bytes: float | None = None) -> float:
        return self.num_parameters * (self.dtype_bytes if dtype_bytes is None else dtype_bytes)

    # -- KV cache ----------------------------------------------------------------------------------

    @property
    def kv_values_per_token_per_layer(self) -> int:
        """Values one token stores per layer: K and V of every KV head, or MLA's one latent."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, dtype_bytes: float | None = None) -> float:
        """KV bytes of one token over all layers: 2 × layers × KV heads × head dim × bytes (GQA). DeepSeek
        Sparse Attention adds the indexer's key, and caches an FP8 latent in vLLM's ``fp8_ds_mla`` layout: the
        latent's FP8 values, a float32 scale per 128 of them and the rotary part in 16 bits (656 B)."""
        b = self.dtype_bytes if dtype_bytes is None else dtype_bytes
        if self.is_sparse and b <= 1:
            per_layer = self.kv_lora_rank * b + self.kv_lora_rank // 128 * 4 + self.qk_rope_head_dim * 2
            return self.num_layers * (per_layer + self.indexer_kv_bytes)
        return self.num_attention_layers * (self.kv_values_per_token_per_layer * b + self.indexer_kv_bytes)


# -- the registry ------------------------------------------------------------------------------
# One row per distinct config.json: the Hub ids that publish it (base and instruct variants share a
# shape), then the ModelSpec fields after model_id, positionally:
#   layers, hidden, heads, kv heads, head dim, intermediate, vocab, tied embeddings, max positions, dtype bytes
# and the MoE / MLA fields by keyword. head_dim is the config's, else hidden / heads. Every number is
# read off the config.json named in the row's comment; "aic" is the copy aiconfigurator-core ships in
# aiconfigurator_core/model_configs/<org>--<name>_config.json.
_L31 = "meta-llama/Llama-3.1"


def _nemotron_h(pattern: str, **fields: Any) -> dict[str, Any]:
    """A Nemotron-H row's keyword fields: its ``hybrid_override_pattern`` (the ``M`` layers its state layers), the
    squared-ReLU MLPs and experts (no gate), a 4-tap convolution and vLLM's float32 recurrent state (its
    ``NemotronHForCausalLMConfig`` default where the config names no ``mamba_ssm_cache_dtype``)."""
    return dict(layer_pattern=pattern, num_linear_layers=pattern.count("M"), gated_mlp=False, linear_conv_kernel=4,
                state_dtype_bytes=4, **fields)


_ROWS: tuple[tuple[tuple[str, ...], tuple[Any, ...], dict[str, Any]], ...] = (
    # meta-llama/Llama-3.1-8B config.json (aic meta-llama--Meta-Llama-3.1-8B); -Instruct has the same shape
    ((f"{_L31}-8B", f"{_L31}-8B-Instruct"), (32, 4096, 32, 8, 128, 14336, 128256, False, 131072, 2), {}),
    # meta-llama/Llama-3.1-70B config.json (aic meta-llama--Meta-Llama-3.1-70B)
    ((f"{_L31}-70B", f"{_L31}-70B-Instruct"), (80, 8192, 64, 8, 128, 28672, 128256, False, 131072, 2), {}),
    # meta-llama/Llama-3.1-405B config.json (aic meta-llama--Meta-Llama-3.1-405B)
    ((f"{_L31}-405B", f"{_L31}-405B-Instruct"), (126, 16384, 128, 8, 128, 53248, 128256, False, 131072, 2), {}),
    # meta-llama/Llama-2-7b-hf config.json (torch_dtype float16; MHA: 32 KV heads)
    (("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-7b-chat-hf"),
     (32, 4096, 32, 32, 128, 11008, 32000, False, 4096, 2), {}),
    # meta-llama/Llama-2-70b-hf config.json (torch_dtype float16; GQA: 8 KV heads)
    (("meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-70b-chat-hf"),
     (80, 8192, 64, 8, 128, 28672, 32000, False, 4096, 2), {}),
    # mistralai/Mistral-Nemo-Instruct-2407 config.json (a copy: inference-sim/inference-sim
    # model_configs/mistral-nemo-instruct-2407/config.json); head_dim 128 is set, not hidden / heads
    (("mistralai/Mistral-Nemo-Instruct-2407",), (40, 5120, 32, 8, 128, 14336, 131072, False, 131072, 2), {}),
    # Qwen/Qwen2.5-7B-Instruct config.json (a copy: inference-sim/inference-sim
    # model_configs/qwen2.5-7b-instruct/config.json); q, k and v projections carry biases (left out)
    (("Qwen/Qwen2.5-7B-Instruct",), (28, 3584, 28, 4, 128, 18944, 152064, False, 32768, 2), {}),
    # 01-ai/Yi-34B config.json (a copy: inference-sim/inference-sim model_configs/yi-34b/config.json)
    (("01-ai/Yi-34B",), (60, 7168, 56, 8, 128, 20480, 64000, False, 4096, 2), {}),
    # meta-llama/Llama-4-Scout-17B-16E-Instruct text_config (aic meta-llama--Llama-4-Scout-17B-16E-Instruct;
    # the same in inference-sim/inference-sim model_configs/llama-4-scout-17b-16e-instruct-fp8-dynamic):
    # interleave_moe_layer_step 1, so all 48 layers are MoE (intermediate_size_mlp 16384 serves dense layers,
    # of which Scout has none); 16 experts of intermediate_size 8192, top 1, plus one shared expert of the
    # same size per layer (transformers' Llama4TextMoe); qk norms carry no weights. The vision tower is left out.
    (("meta-llama/Llama-4-Scout-17B-16E-Instruct",),
     (48, 5120, 40, 8, 128, 16384, 202048, False, 10485760, 2), dict(
         num_experts=16, num_experts_per_token=1, moe_intermediate_size=8192, num_shared_experts=1,
         attention_chunk_size=8192)),
    # RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic: the same config; its quantization_config
    # (compressed-tensors, FP8 weights per channel, FP8 activations per token) ignores every attention
    # projection, the routers and the LM head, so only the experts' MLPs are FP8
    (("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",),
     (48, 5120, 40, 8, 128, 16384, 202048, False, 10485760, 2), dict(
         num_experts=16, num_experts_per_token=1, moe_intermediate_size=8192, num_shared_experts=1,
         attention_chunk_size=8192, expert_dtype_bytes=1)),
    # meta-llama/Llama-4-Maverick-17B-128E-Instruct text_config (aic meta-llama--Llama-4-Maverick-17B-128E-Instruct):
    # interleave_moe_layer_step 2, so 24 of the 48 layers are MoE (128 experts of intermediate_size 8192, top 1, and
    # one shared expert of that size) and 24 dense (intermediate_size_mlp 16384); qk norms carry no weights. The
    # model card's 400 B total and 17 B active parameters. The vision tower is left out.
    (("meta-llama/Llama-4-Maverick-17B-128E-Instruct",),
     (48, 5120, 40, 8, 128, 16384, 202048, False, 1048576, 2), dict(
         num_experts=128, num_experts_per_token=1, moe_intermediate_size=8192, num_shared_experts=1,
         moe_layer_step=2, attention_chunk_size=8192)),
    # microsoft/phi-4 config.json (https://huggingface.co/microsoft/phi-4/blob/main/config.json, as Lightning-AI/litgpt
    # litgpt/config.py transcribes it): Phi3ForCausalLM, fused qkv and gate-up projections (the same weights);
    # head_dim 5120 / 40 = 128. The model card's 14 B (14.66 B).
    (("microsoft/phi-4",), (40, 5120, 40, 10, 128, 17920, 100352, False, 16384, 2), {}),
    # zai-org/GLM-4.5-Air config.json (a copy: triple-mu/aiconfigurator src/aiconfigurator/model_configs/
    # zai-org--GLM-4.5-Air_config.json): 96 heads of 128 on hidden 4096, one dense layer then 45 MoE layers of 128
    # experts (top 8, one shared, moe_intermediate_size 1408); q/k/v biases and the next-token (MTP) layer are left
    # out. The model card's 106 B total.
    (("zai-org/GLM-4.5-Air",), (46, 4096, 96, 8, 128, 10944, 151552, False, 131072, 2),
     dict(num_experts=128, num_experts_per_token=8, moe_intermediate_size=1408, num_shared_experts=1,
          first_dense_layers=1)),
    # zai-org/GLM-4.5: the architecture table of the GLM-5 technical report ("GLM-5: from Vibe Coding to Agentic
    # Engineering", GLM-4.5's column; transcribed at glennklockwood.com/garden/GLM-5): 3 dense and 89 MoE layers
    # (dense intermediate 12288; 160 experts of 1536, 8 routed and 1 shared), hidden 5120, 96 attention heads of 128
    # and 8 KV heads, vocabulary 151552; 128K context (the GLM-4.5 README). Left out as for the Air: the q/k/v biases
    # and the MTP layer. The report's 355 B total, 32 B active.
    (("zai-org/GLM-4.5",), (92, 5120, 96, 8, 128, 12288, 151552, False, 131072, 2),
     dict(num_experts=160, num_experts_per_token=8, moe_intermediate_size=1536, num_shared_experts=1,
          first_dense_layers=3)),
    # openai/gpt-oss-120b config.json (aic openai--gpt-oss-120b): GptOssForCausalLM, every layer MoE (128 experts of
    # intermediate_size 2880, top 4, no shared expert), layer_types alternating sliding_attention (window 128, the
    # even layers) and full_attention; quantization_config mxfp4 with modules_to_not_convert the attention, the
    # routers, the embeddings and the LM head, so only the experts are MXFP4. Left out: the q/k/v/o and expert biases
    # (40 M: the model card's 116.83 B total) and the attention sinks (one learned logit per head: no KV, no bytes).
    (("openai/gpt-oss-120b",), (36, 2880, 64, 8, 64, 2880, 201088, False, 131072, 2),
     dict(num_experts=128, num_experts_per_token=4, moe_intermediate_size=2880, expert_weight_format="mxfp4",
          sliding_window=128, num_sliding_layers=18)),
    # openai/gpt-oss-20b config.json (aic openai--gpt-oss-20b): gpt-oss-120b's layer with 24 layers of 32 experts;
    # the model card's 20.91 B total (biases and sinks left out as above)
    (("openai/gpt-oss-20b",), (24, 2880, 64, 8, 64, 2880, 201088, False, 131072, 2),
     dict(num_experts=32, num_experts_per_token=4, moe_intermediate_size=2880, expert_weight_format="mxfp4",
          sliding_window=128, num_sliding_layers=12)),
    # google/gemma-3-27b-it text_config (NVIDIA/TensorRT-LLM's test GEMMA3_27B_CONFIG, transformers' Gemma3TextConfig
    # defaults): gated GeLU MLPs, 62 layers of which every sixth is global and the others slide over 1024 tokens
    # (sliding_window_pattern 6: 52 sliding, 10 full), tied embeddings. Left out: the SigLIP vision tower (417 M) and
    # Gemma's two extra norms per layer (the Gemma 3 report's 1,416 M embedding and 25,600 M non-embedding).
    (("google/gemma-3-27b-it", "google/gemma-3-27b-pt"), (62, 5376, 32, 16, 128, 21504, 262208, True, 131072, 2),
     dict(sliding_window=1024, num_sliding_layers=52)),
    # google/gemma-2-9b-it config.json (Gemma2ForCausalLM): 42 layers alternating a 4096-token window and global
    # attention (21 each), head_dim 256, tied embeddings; served in 16 bits. The Gemma 2 report's 917,504,000
    # embedding and 8,324,201,984 non-embedding parameters (the latter with two more norms per layer than counted).
    (("google/gemma-2-9b-it", "google/gemma-2-9b"), (42, 3584, 16, 8, 256, 14336, 256000, True, 8192, 2),
     dict(sliding_window=4096, num_sliding_layers=21)),
    # Qwen/Qwen3-8B config.json (aic Qwen--Qwen3-8B)
    (("Qwen/Qwen3-8B",), (36, 4096, 32, 8, 128, 12288, 151936, False, 40960, 2), {}),
    # Qwen/Qwen3-8B-Base config.json: the same shape, max_position_embeddings 32768
    (("Qwen/Qwen3-8B-Base",), (36, 4096, 32, 8, 128, 12288, 151936, False, 32768, 2), {}),
    # Qwen/Qwen3-32B config.json (aic Qwen--Qwen3-32B); no -Base on the Hub
    (("Qwen/Qwen3-32B",), (64, 5120, 64, 8, 128, 25600, 151936, False, 40960, 2), {}),
    # Qwen/Qwen3-30B-A3B config.json (aic Qwen--Qwen3-30B-A3B): decoder_sparse_step 1, no mlp_only_layers
    (("Qwen/Qwen3-30B-A3B",), (48, 2048, 32, 4, 128, 6144, 151936, False, 40960, 2),
     dict(num_experts=128, num_experts_per_token=8, moe_intermediate_size=768)),
    # Qwen/Qwen3-30B-A3B-Base config.json: the same shape, max_position_embeddings 32768
    (("Qwen/Qwen3-30B-A3B-Base",), (48, 2048, 32, 4, 128, 6144, 151936, False, 32768, 2),
     dict(num_experts=128, num_experts_per_token=8, moe_intermediate_size=768)),
    # Qwen/Qwen3-235B-A22B config.json (aic Qwen--Qwen3-235B-A22B); no -Base on the Hub
    (("Qwen/Qwen3-235B-A22B",), (94, 4096, 64, 4, 128, 12288, 151936, False, 40960, 2),
     dict(num_experts=128, num_experts_per_token=8, moe_intermediate_size=1536)),
    # Qwen/Qwen3-Next-80B-A3B-Thinking config.json (ai-dynamo/aiconfigurator src/aiconfigurator/model_configs @
    # 1b7cfb1; -Instruct shares the shape): full_attention_interval 4, so layers 3, 7, … (12) are gated attention
    # (16 heads and 2 KV heads of 256, the query projection twice as wide for the output gate) and the other 36
    # Gated DeltaNet (16 key heads and 32 value heads of 128, a 4-tap convolution); every layer MoE, 512 experts of
    # 512, top 10, and a shared expert of 512. The model card's 80 B total (79.68 B here, the MTP layer left out).
    (("Qwen/Qwen3-Next-80B-A3B-Instruct", "Qwen/Qwen3-Next-80B-A3B-Thinking"),
     (48, 2048, 16, 2, 256, 5120, 151936, False, 262144, 2),
     dict(num_experts=512, num_experts_per_token=10, moe_intermediate_size=512, num_shared_experts=1,
          attention_output_gate=True, num_linear_layers=36, linear_key_heads=16, linear_value_heads=32,
          linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel=4)),
    # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json (aic nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16):
    # NemotronHForCausalLM, 52 single-block layers — 23 Mamba-2 (64 heads of 64, 8 groups, state 128), 6 attention
    # (32 heads and 2 KV heads of 128), 23 MoE (128 squared-ReLU experts of 1856, top 6, one shared expert of 3712);
    # mamba_ssm_cache_dtype float32. The Nemotron 3 Nano report's 31.6 B total, 3.2 B active without the
    # embeddings. Left out: the router's score bias (128 a layer).
    (("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",), (52, 2688, 32, 2, 128, 1856, 131072, False, 262144, 2),
     _nemotron_h("MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", num_experts=128, num_experts_per_token=6,
                 moe_intermediate_size=1856, num_shared_experts=1, shared_expert_intermediate_size=3712,
                 mamba_heads=64, mamba_head_dim=64, mamba_groups=8, mamba_state_size=128)),
    # nvidia/Nemotron-H-56B-Base-8K config.json (aic nvidia--Nemotron-H-56B-Base-8K): 118 single-block layers —
    # 54 Mamba-2 (256 heads of 64, 8 groups, state 256), 10 attention (64 heads, 8 KV heads of 128), 54 squared-ReLU
    # MLPs of 32768; no mamba_ssm_cache_dtype, so vLLM keeps the state in float32. The Nemotron-H report's 56 B.
    (("nvidia/Nemotron-H-56B-Base-8K",), (118, 8192, 64, 8, 128, 32768, 131072, False, 8192, 2),
     _nemotron_h("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*"
                 "-M-M-M-M-M*-M-M-M-M-M-", mamba_heads=256, mamba_head_dim=64, mamba_groups=8, mamba_state_size=256)),
    # mistralai/Mixtral-8x7B-v0.1 config.json (aic mistralai--Mixtral-8x7B-v0.1): every layer is MoE and
    # its intermediate_size 14336 is the expert's
    (("mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x7B-Instruct-v0.1"),
     (32, 4096, 32, 8, 128, 14336, 32000, False, 32768, 2),
     dict(num_experts=8, num_experts_per_token=2, moe_intermediate_size=14336)),
    # mistralai/Mixtral-8x22B-v0.1 config.json (aic mistralai--Mixtral-8x22B-v0.1): every layer MoE, the expert
    # intermediate_size 16384; head_dim 6144 / 48 = 128. Mistral AI's announcement: 141 B total, 39 B active.
    (("mistralai/Mixtral-8x22B-v0.1",), (56, 6144, 48, 8, 128, 16384, 32000, False, 65536, 2),
     dict(num_experts=8, num_experts_per_token=2, moe_intermediate_size=16384)),
    # moonshotai/Kimi-K2-Instruct config.json (aic moonshotai--Kimi-K2-Instruct): DeepSeek-V3's architecture with
    # 64 heads, 384 experts (top 8, one shared), one dense layer first, vocabulary 163840; block-scaled FP8 weights.
    # The model card's 1 T total and 32 B activated parameters.
    (("moonshotai/Kimi-K2-Instruct",), (61, 7168, 64, 64, 112, 18432, 163840, False, 131072, 1),
     dict(num_experts=384, num_experts_per_token=8, moe_intermediate_size=2048, num_shared_experts=1,
          first_dense_layers=1, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
          v_head_dim=128, weight_block_size=128)),
    # deepseek-ai/DeepSeek-V3 config.json (aic deepseek-ai--DeepSeek-V3; -R1 identical): weights ship as
    # block-scaled FP8 e4m3 (quantization_config, weight_block_size [128, 128]), so 1 byte; head_dim 7168/128
    # = 56 is unused under MLA
    (("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3-Base", "deepseek-ai/DeepSeek-V3-0324",
      "deepseek-ai/DeepSeek-R1"), (61, 7168, 128, 128, 56, 18432, 129280, False, 163840, 1),
     dict(num_experts=256, num_experts_per_token=8, moe_intermediate_size=2048, num_shared_experts=1,
          first_dense_layers=3, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
          v_head_dim=128, weight_block_size=128)),
    # deepseek-ai/DeepSeek-V3.2 config.json (aic deepseek-ai--DeepSeek-V3.2): DeepSeek-V3's shape (block-scaled FP8
    # weights) with DeepSeek Sparse Attention, index_n_heads 64 of index_head_dim 128 picking index_topk 2048 tokens;
    # model_type deepseek_v32. The MTP layer is left out, as for DeepSeek-V3.
    (("deepseek-ai/DeepSeek-V3.2", "deepseek-ai/DeepSeek-V3.2-Exp"),
     (61, 7168, 128, 128, 56, 18432, 129280, False, 163840, 1),
     dict(num_experts=256, num_experts_per_token=8, moe_intermediate_size=2048, num_shared_experts=1,
          first_dense_layers=3, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
          v_head_dim=128, weight_block_size=128, index_topk=2048, index_heads=64, index_head_dim=128)),
    # facebook/opt-125m config.json (torch_dtype float16): ffn_dim 3072, ReLU two-projection MLP, lm_head
    # tied to the token embedding
    (("facebook/opt-125m",), (12, 768, 12, 12, 64, 3072, 50272, True, 2048, 2), dict(gated_mlp=False)),
    # Qwen/Qwen3-VL-8B-Instruct config.json: text_config is Qwen3-8B's shape with max_position_embeddings
    # 262144; vision_config depth 27, hidden 1152, intermediate 4304, 16 heads, patch 16, merge 2, temporal
    # patch 2, out_hidden 4096, 2304 position embeddings, deepstack_visual_indexes [8, 16, 24];
    # preprocessor_config.json size {shortest_edge: 65536, longest_edge: 16777216} (256², 4096² pixels).
    # 8,190,726,144 text + 576,388,336 vision parameters = the model card's 8.77 B.
    (("Qwen/Qwen3-VL-8B-Instruct",), (36, 4096, 32, 8, 128, 12288, 151936, False, 262144, 2),
     dict(vision=VisionTower(27, 1152, 4304, 16, 16, 2, 2, 4096, num_position_embeddings=2304,
                             num_deepstack_mergers=3, min_pixels=65536, max_pixels=16777216))),
)

MODELS: dict[str, ModelSpec] = {
    name: ModelSpec(name, *columns, **extra)
    for names, columns, extra in _ROWS
    for name in names
}
