"""One worker's shape as the performance model sees it: model, GPU, parallelism and dtypes.

Where each byte lives: attention, dense MLPs, embeddings and the LM head are sharded over the rank's
``tensor`` GPUs (each attention-DP rank holds its own copy); routed and shared experts are partitioned
over the worker's ``moe_tensor × moe_expert`` GPUs. GQA KV heads are sharded over ``tensor`` (and
replicated when there are fewer KV heads than GPUs); MLA's latent KV is replicated on every GPU of the
rank, as vLLM stores it. Context parallelism splits tokens: ``decode_context`` over the replicas of
the KV heads, ``prefill_context`` over its own GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from simmodel.perf.hardware import HardwareSpec
from simmodel.perf.models import ModelSpec

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per value of the 8- and 16-bit formats (weights, KV, activations)."""


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """How weights of one ``engine.dtype`` are stored and multiplied."""

    bytes_per_weight: float
    """Stored bytes per weight, their scales included."""
    gemm: str
    """The tensor-core kind their GEMMs run on (``HardwareSpec.gemm_peak``): ``bf16``, ``fp8``, ``int8``, ``fp4``."""
    weight_only: bool = False
    """The weights are dequantized to BF16 inside the GEMM (activations stay 16-bit)."""


WEIGHT_FORMATS: dict[str, WeightFormat] = {
    "bf16": WeightFormat(2.0, "bf16"),
    "fp16": WeightFormat(2.0, "bf16"),
    "fp8": WeightFormat(1.0, "fp8"),
    "int8": WeightFormat(1.0, "int8"),
    "fp4": WeightFormat(0.5 + 1 / 16, "fp4"),
    "mxfp4": WeightFormat(0.5 + 1 / 32, "fp4"),
    "int4": WeightFormat(0.5 + 2.5 / 128, "bf16", weight_only=True),
}
"""``engine.dtype`` → its weights. ``int8``: W8A8 (SmoothQuant), INT8 weights and activations on INT8 tensor cores.
``fp4``: NVFP4, 4-bit E2M1 values with one FP8 scale per 16 (4.5 bits a weight); ``mxfp4``: OCP MXFP4, one E8M0
scale per 32 (4.25 bits; gpt-oss's experts); both on FP4 tensor cores where the GPU has them, else dequantized
to BF16 (vLLM's Marlin kernels). ``int4``: AWQ/GPTQ weight-only INT4 in groups of 128 with an FP16 scale and a
4-bit zero point each (4.16 bits), dequantized to BF16 in the GEMM."""


@dataclass(frozen=True, slots=True)
class Deployment:
    model: ModelSpec
    hardware: HardwareSpec
    tensor: int = 1
    attention_data: int = 1
    moe_tensor: int = 1
    moe_expert: int = 1
    prefill_context: int = 1
    decode_context: int = 1
    weight_bytes: float = 2
    """Bytes per weight (``engine.dtype``): 2 for BF16, 1 for FP8."""
    expert_weight_bytes: float | None = None
    """Bytes per weight of the experts when they differ (a checkpoint that quantizes only its experts);
    None: ``weight_bytes``."""
    kv_bytes: float = 2
    """Bytes per cached K/V value (``kv_cache.dtype``)."""
    activation_bytes: float = 2
    encoder_parallel: str = "tp"
    """Vision-language models: how the vision tower is laid out (``tp`` sharded, ``dp`` replicated)."""
    weight_format: str | None = None
    """The weights' ``engine.dtype`` (``WEIGHT_FORMATS``) when given; None: by ``weight_bytes`` (the checkpoint's
    own dtype, ``auto``: 1 byte FP8, else BF16)."""

    expert_weight_format: str | None = None
    """The experts' format (``WEIGHT_FORMATS``) when the checkpoint quantizes only them (gpt-oss's MXFP4) and
    ``weight_format`` is None; None: the experts are multiplied as ``expert_weight_bytes`` says."""

    @property
    def expert_kind(self) -> WeightFormat | None:
        """How the experts' weights are multiplied when they have a format of their own (else None)."""
        if self.weight_format is None and self.expert_weight_format is not None:
            return WEIGHT_FORMATS[self.expert_weight_format]
        return None

    @property
    def weight_kind(self) -> WeightFormat:
        """How the weights are multiplied (``WEIGHT_FORMATS``)."""
        if self.weight_format is not None:
            return WEIGHT_FORMATS[self.weight_format]
        return WEIGHT_FORMATS["fp8" if self.weight_bytes <= 1 else "bf16"]

    @property
    def embedding_bytes(self) -> float:
        """Bytes per embedding / LM-head weight: FP8 checkpoints keep these in 16 bits."""
        return max(self.weight_bytes, self.activation_bytes)

    @property
    def block_scaled(self) -> bool:
        """The GEMMs run on the checkpoint's block-scaled FP8 weights (DeepSeek-V3 at ``dtype: auto`` or
        ``fp8``); FP8 cast from a 16-bit checkpoint is scaled per tensor or channel."""
        return self.weight_kind.gemm == "fp8" and self.model.weight_block_size > 0

    @property
    def expert_bytes(self) -> float:
        """Bytes per weight of the routed and shared experts."""
        return self.weight_bytes if self.expert_weight_bytes is None else self.expert_weight_bytes

    @property
    def gpus_per_worker(self) -> int:
        return self.tensor * self.attention_data * self.prefill_context

    @property
    def dense_params_per_gpu(self) -> float:
        """Attention, dense MLPs, embeddings, LM head and norms of one GPU of a rank."""
        m = self.model
        lm_head = 0 if m.tie_word_embeddings else m.embedding_params
        dense = (m.mixer_params + m.num_dense_layers * m.dense_mlp_params
                 + m.embedding_params + lm_head)
        return dense / self.tensor + m.norm_params

    @property
    def expert_params_per_gpu(self) -> float:
        m = self.model
        return m.num_moe_layers * m.moe_layer_params / (self.moe_tensor * self.moe_expert)

    @property
    def weight_bytes_per_gpu(self) -> float:
        """The language model's weights on one GPU, plus a vision-language model's vision tower (16-bit,
        sharded over the tensor-parallel group, or whole on every GPU with ``encoder_parallel: dp``)."""
        m = self.model
        embeddings = (1 if m.tie_word_embeddings else 2) * m.embedding_params / self.tensor
        # (the experts' share scaled to the other weights' bytes: ×1.0, exactly, when they are alike)
        body = self.dense_params_per_gpu - embeddings + self.expert_params_per_gpu * (self.expert_bytes
                                                                                      / self.weight_bytes)
        total = body * self.weight_bytes + embeddings * self.embedding_bytes
        if m.vision is not None:
            from simmodel.perf.vision import tower_weight_bytes

            total += tower_weight_bytes(m.vision, self.tensor, self.encoder_parallel)
        return total

    @property
    def linear_state_bytes_per_gpu(self) -> float:
        """One sequence's state over every state layer (linear attention, Mamba-2) on one GPU
        (``linear_state_bytes``, without speculation); 0 for a model without them."""
        return self.linear_state_bytes()

    def linear_state_bytes(self, speculative_tokens: int = 0) -> float:
        """One sequence's state over every state layer on one GPU: the convolution window (wider by the
        ``speculative_tokens``) at the activations' width (vLLM's ``mamba_cache_dtype`` auto), the recurrent state at
        the model's ``state_dtype_bytes`` where it sets one (``mamba_ssm_cache_dtype``)."""
        m = self.model
        conv, recurrent = m.linear_state_shape(self.tensor, speculative_tokens)
        return m.num_linear_layers * (conv * self.activation_bytes
                                      + recurrent * (m.state_dtype_bytes or self.activation_bytes))

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """KV bytes one GPU stores for one token of context, all layers."""
        m = self.model
        if m.is_mla:
            per_gpu = m.kv_bytes_per_token(self.kv_bytes)
        else:
            heads = max(1.0, m.num_kv_heads * self.decode_context / self.tensor)
            per_gpu = m.num_attention_layers * 2 * heads * m.head_dim * self.kv_bytes
        return per_gpu / (self.decode_context * self.prefill_context)
