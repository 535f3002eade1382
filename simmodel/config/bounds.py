"""The ceilings of a scenario's counts: every count and every simulated time (integer nanoseconds) stays
well inside int64, and a typo of a few zeros fails at load instead of in memory. The node reader
(``simmodel.config.node``) applies ``MAX_INT`` and ``MAX_NUMBER`` to every integer and number it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simmodel.config.schema import WorkerRole

# Bounds that keep every count and every simulated time (integer nanoseconds) well inside int64.
MAX_INT = 1_000_000_000
MAX_NUMBER = 1e9
MAX_GPUS = 100_000
"""GPUs in one deployment (summed over roles): several times the largest inference fleets serving one
model; every GPU's worker and KV pool is simulated, so a typo of 10**9 replicas fails here, not in memory."""
MAX_CACHED_BLOCKS = 100_000_000
"""KV blocks of vLLM prefix-caching pools in one deployment (summed over its ranks): each such block's
state (reference count, content key, free-queue links) is a Python object of about 100 bytes, so this
keeps a run's pools under about 10 GB. A pool without prefix caching only counts its blocks, and SGLang's
radix cache holds only what requests use: neither is bounded here."""
MAX_PARALLEL = {"tensor": 1024, "pipeline": 1024, "attention_data": 1024, "prefill_context": 1024,
                "decode_context": 1024, "moe_tensor": MAX_GPUS, "moe_expert": MAX_GPUS}
"""Each parallelism degree's ceiling: a tensor, pipeline, context or attention-DP group of a worker spans
at most 1024 GPUs (the largest NVLink domain announced, NVL576, is 576; no registry model has more than
128 attention heads to shard); the MoE degrees multiply to tensor × attention_data, so they are bounded by
the deployment. ``replicas`` is bounded by the deployment's GPU count (``MAX_GPUS``)."""


def deployment_total(roles: dict[str, WorkerRole], count: Callable[[WorkerRole], int]) -> tuple[int, str]:
    """``count`` summed over the roles, and the role that holds the most (the one a message names)."""
    counts = {name: count(role) for name, role in roles.items()}
    return sum(counts.values()), max(counts, key=counts.__getitem__)
