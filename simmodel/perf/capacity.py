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


def default_kv_blocks(deployment: Deployment, *, memory_fraction: float, block_size: int,
                      block_fraction: float = 1.0, pipeline: int = 1) -> int:
    """Usable KV blocks of one rank; zero or negative when the weights do not fit. ``block_fraction``: the layers a
    block holds, as a fraction of all (vLLM's KV cache groups, ``perf.kv_layout``). ``pipeline`` stages: each
    stage's GPUs hold its layers' weights and KV, and the rank has the fewest blocks of any stage (vLLM's
    ``get_kv_cache_configs``)."""
    from simmodel.perf.pipeline import stage_memory

    budget = deployment.hardware.memory_bytes * memory_fraction - ACTIVATION_RESERVE_BYTES
    return min(int((budget - weights) // (block_size * kv * block_fraction))
               for weights, kv in stage_memory(deployment, pipeline))
