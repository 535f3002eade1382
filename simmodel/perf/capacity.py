"""KV blocks per attention-DP rank from GPU memory, per the reference's "Defaults and KV capacity".

    blocks = floor((GPU memory × memory_fraction − weight bytes per GPU − 1 GiB activation reserve)
                   / (block_size × KV bytes per token per GPU))

Weights and KV are counted per GPU as ``Deployment`` lays them out (tensor, expert and context
parallelism, serving dtypes). Fragmentation is ignored.
"""

from __future__ import annotations

from simmodel.perf.deployment import Deployment

ACTIVATION_RESERVE_BYTES = 1 << 30


def cdiv(a: int, b: int) -> int:
    """Ceiling division for non-negative integers."""
    return -(-a // b)


def free_kv_bytes_per_gpu(deployment: Deployment, memory_fraction: float) -> float:
    return (deployment.hardware.memory_bytes * memory_fraction - deployment.weight_bytes_per_gpu
            - ACTIVATION_RESERVE_BYTES)


def default_kv_blocks(deployment: Deployment, *, memory_fraction: float, block_size: int,
                      block_fraction: float = 1.0) -> int:
    """Usable KV blocks of one rank; zero or negative when the weights do not fit. ``block_fraction``: the layers a
    block holds, as a fraction of all (vLLM's KV cache groups, ``perf.kv_layout``)."""
    per_block = block_size * deployment.kv_bytes_per_token_per_gpu * block_fraction
    return int(free_kv_bytes_per_gpu(deployment, memory_fraction) // per_block)
