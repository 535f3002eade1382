"""KV blocks per attention-DP rank from GPU memory, per the reference's "Defaults and KV capacity".

    blocks = floor((GPU memory × memory_fraction − weight bytes per GPU − 1 GiB activation reserve)
                   / (block_size × KV bytes per token per GPU))

Weights and KV heads are sharded over ``tensor``. When there are fewer KV heads than tensor ranks vLLM
replicates them; decode context parallelism (``decode_context``) then spreads tokens over the replicas
instead, and prefill context parallelism (``prefill_context``) spreads them over its own GPUs.
"""

from __future__ import annotations

from simmodel.perf.hardware import HardwareSpec
from simmodel.perf.models import ModelSpec

ACTIVATION_RESERVE_BYTES = 1 << 30


def kv_bytes_per_token_per_gpu(model: ModelSpec, tensor: int, decode_context: int = 1,
                               prefill_context: int = 1) -> float:
    """KV bytes one GPU stores for one token of context."""
    heads_per_gpu = max(1.0, model.num_kv_heads * decode_context / tensor)
    per_head = 2 * model.num_layers * model.head_dim * model.dtype_bytes
    return heads_per_gpu * per_head / (decode_context * prefill_context)


def default_kv_blocks(model: ModelSpec, hw: HardwareSpec, *, memory_fraction: float, block_size: int,
                      tensor: int, decode_context: int = 1, prefill_context: int = 1) -> int:
    """Usable KV blocks of one rank; may be zero or negative when the weights do not fit."""
    free_bytes = hw.memory_bytes * memory_fraction - model.weight_bytes / tensor - ACTIVATION_RESERVE_BYTES
    per_block = block_size * kv_bytes_per_token_per_gpu(model, tensor, decode_context, prefill_context)
    return int(free_bytes // per_block)
