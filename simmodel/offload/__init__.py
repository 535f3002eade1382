"""KV offload tiers: host memory behind each rank's GPU KV cache (``kv_cache.host_offload``).

A tier is attached to a rank's scheduler, which asks it at admission for the blocks of a prompt it holds
and loads them instead of recomputing them; the rank hands it the blocks each pass computed, to store.
``OFFLOADS`` picks the connector by backend: vLLM's offloading connector (``vllm_connector``), SGLang's
HiCache (``sglang_hicache``, its host pages kept in the radix tree, ``engine.hiradix_cache``); ``attach`` makes
one rank's from its role and puts it behind the rank. ``docs/kv-offload.md`` describes the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from simmodel.offload.link import HostLink
from simmodel.offload.protocol import Offload
from simmodel.offload.sglang_hicache import SglangHiCache
from simmodel.offload.sglang_storage import SglangStorage
from simmodel.offload.storage import StorageTier, StoredBlocks, storage_queue
from simmodel.offload.tier import HostTier
from simmodel.offload.vllm_connector import VllmCpuOffload

if TYPE_CHECKING:
    import simpy

    from simmodel.config.schema import WorkerRole
    from simmodel.engine.rank import Rank

GIB = 1 << 30

def host_blocks(role: WorkerRole) -> tuple[int, float, float]:
    """A rank's host tier from its role's ``kv_cache.host_offload``: (blocks it holds, bytes of a block over the
    rank's GPUs, one GPU's share of them).

    A block's bytes are the block's tokens times the KV bytes one GPU holds per token, over the rank's
    tensor-parallel GPUs. vLLM: the capacity (``capacity_gib``, summed over those GPUs) holds as many whole
    blocks as fit. SGLang (``write_policy`` set; its blocks are pages): each GPU's host pool holds
    ``int(ratio × the rank's GPU KV tokens)`` tokens, or with ``capacity_gib`` as many tokens as its share of
    the bytes holds, in whole pages plus one (``HostKVCache.__init__``: ``size // page_size + 1``)."""
    spec = role.kv_cache.host_offload
    assert spec is not None
    d = role.deployment
    page = role.kv_cache.block_size
    gpu_block_bytes = page * d.kv_bytes_per_token_per_gpu
    block_bytes = gpu_block_bytes * d.tensor
    if spec.write_policy is None:
        assert spec.capacity_gib is not None
        return int(spec.capacity_gib * GIB // block_bytes), block_bytes, gpu_block_bytes
    if spec.capacity_gib is not None:
        tokens = int(spec.capacity_gib * GIB / d.tensor // d.kv_bytes_per_token_per_gpu)
    else:
        assert spec.ratio is not None
        tokens = int(role.kv_tokens_per_rank * spec.ratio)
    return tokens // page + 1, block_bytes, gpu_block_bytes


def _links(role: WorkerRole) -> tuple[HostLink, HostLink]:
    """A rank's host link, one queue each way. Each GPU copies its share of a block over its own link, all at
    once, so a transfer takes one GPU's share over one link."""
    spec = role.kv_cache.host_offload
    assert spec is not None
    bandwidth = role.deployment.hardware.pcie_bytes_per_s if spec.link_gb_per_s is None else spec.link_gb_per_s * 1e9
    latency_ns = int(round(spec.latency_us * 1e3))
    return HostLink(bandwidth, latency_ns), HostLink(bandwidth, latency_ns)


def storage_blocks(role: WorkerRole) -> int | None:
    """The blocks a rank's storage tier holds: as many whole blocks (over all the rank's GPUs) as its
    ``capacity_gib`` holds, or None (unbounded)."""
    host = role.kv_cache.host_offload
    assert host is not None and host.storage is not None
    capacity = host.storage.capacity_gib
    return None if capacity is None else int(capacity * GIB // host_blocks(role)[1])


def _storage(role: WorkerRole, block_bytes: float, stores: dict[str, StoredBlocks]) -> StorageTier | None:
    """A rank's storage tier behind its host tier, if its role has one (``storage_blocks``), with a read queue and
    a write queue at the tier's own figures, over a store of its own or the role's shared one (kept in ``stores``
    by role)."""
    host = role.kv_cache.host_offload
    assert host is not None
    spec = host.storage
    if spec is None:
        return None
    if spec.shared:
        store = stores.get(role.name)
        if store is None:
            store = stores[role.name] = StoredBlocks(storage_blocks(role), shared=True)
    else:
        store = StoredBlocks(storage_blocks(role))
    return StorageTier(store, storage_queue(spec.read_gb_per_s, spec.latency_us),
                       storage_queue(spec.write_gb_per_s, spec.latency_us), block_bytes)


def _vllm(env: simpy.Environment, role: WorkerRole, scheduler, stores: dict) -> VllmCpuOffload:
    capacity, block_bytes, gpu_block_bytes = host_blocks(role)
    return VllmCpuOffload(env, HostTier(capacity), *_links(role), role.kv_cache.block_size, block_bytes,
                          gpu_block_bytes, _storage(role, block_bytes, stores), scheduler.pool)


def _sglang(env: simpy.Environment, role: WorkerRole, scheduler, stores: dict) -> SglangHiCache:
    _, block_bytes, gpu_block_bytes = host_blocks(role)  # (the tree holds the pool, sized with the scheduler)
    page = role.kv_cache.block_size
    storage = _storage(role, block_bytes, stores)
    l3 = None
    if storage is not None:
        spec = role.kv_cache.host_offload.storage
        assert spec.prefetch_policy is not None
        l3 = SglangStorage(scheduler.cache, storage, storage.read_link.latency_ns, page, spec.prefetch_policy,
                           spec.prefetch_threshold,
                           int(round(spec.prefetch_timeout_base_s * 1e9)),
                           spec.prefetch_timeout_per_ki_token_s * 1e9 * page / 1024)
    return SglangHiCache(env, scheduler.cache, *_links(role), page, block_bytes, gpu_block_bytes, l3)


OFFLOADS: dict[str, Callable[..., Offload]] = {"vllm": _vllm, "sglang": _sglang}
"""How each backend's ranks offload KV: vLLM's offloading connector, SGLang's HiCache (``protocol.Offload``)."""


def attach(backend: str, rank: Rank, role: WorkerRole, stores: dict[str, StoredBlocks]) -> None:
    """Put the role's host tier, if it has one, behind ``rank`` (built for its scheduler, by ``backend``). A
    shared storage tier is the role's entry in ``stores`` (the simulation's: made by the role's first rank)."""
    if role.kv_cache.host_offload is not None:
        rank.attach_offload(OFFLOADS[backend](rank.env, role, rank.scheduler, stores))


def offload_summary(ranks: list, duration_ns: int) -> dict:
    """The summary's ``kv_offload``: per role with a tier, what its ranks (``(role, rank)`` pairs) looked up,
    found and moved. Hit ratios are of the prompt tokens looked up at first admission: found in the GPU cache,
    loaded from the host, and both. ``load_link_utilization``, ``store_link_utilization``: the fraction of the
    run each rank's host link was busy that way, averaged over the ranks."""
    by_role: dict[str, list] = {}
    for role, rank in ranks:
        by_role.setdefault(role, []).append(rank)
    summary = {}
    for role, members in by_role.items():
        tiers = [rank.offload for rank in members]
        figures = [t.figures(duration_ns) for t in tiers]
        total = {key: sum(f[key] for f in figures) for key in figures[0] if key != "capacity_blocks"}
        queried = sum(rank.pool.num_queries for rank in members)
        gpu = sum(rank.pool.num_hits for rank in members)
        stored = sum(t.num_storage_hit_tokens for t in tiers)
        host = sum(t.num_hit_tokens for t in tiers) - stored
        loads_busy, stores_busy = total.pop("load_link_busy_ns"), total.pop("store_link_busy_ns")
        entry = summary[role] = {
            "ranks": len(members), "capacity_blocks_per_rank": figures[0]["capacity_blocks"],
            "block_bytes": round(tiers[0].block_bytes), "queried_tokens": queried, "gpu_hit_tokens": gpu,
            "host_hit_tokens": host,
            "gpu_hit_ratio": gpu / queried if queried else None,
            "host_hit_ratio": host / queried if queried else None,
            "hit_ratio": (gpu + host + stored) / queried if queried else None,
            **total,
            "load_link_utilization": loads_busy / (len(members) * duration_ns) if duration_ns else None,
            "store_link_utilization": stores_busy / (len(members) * duration_ns) if duration_ns else None,
        }
        if tiers[0].storage is not None:
            entry.update(_storage_summary([t.storage_figures(duration_ns) for t in tiers], stored, queried,
                                          duration_ns, tiers[0].storage.store))
    return summary


def _storage_summary(figures: list[dict], hit_tokens: int, queried: int, duration_ns: int,
                     store: StoredBlocks) -> dict:
    """The storage tier's part of a role's ``kv_offload``: prompt tokens read from storage (into the host, then
    loaded as host hits) at first admission and their ratio, what it held and moved, and how busy each of its
    queues was (averaged over the ranks). A shared store is counted once (``storage_capacity_blocks``: its
    size), each rank's own summed (``storage_capacity_blocks_per_rank``)."""
    total = {key: sum(f[key] for f in figures) for key in figures[0] if key != "storage_capacity_blocks"}
    reads_busy, writes_busy = total.pop("storage_read_busy_ns"), total.pop("storage_write_busy_ns")
    span = len(figures) * duration_ns
    if store.shared:
        size = {"storage_shared": True, "storage_capacity_blocks": store.capacity}
        total |= store.figures(duration_ns)
    else:
        size = {"storage_shared": False, "storage_capacity_blocks_per_rank": figures[0]["storage_capacity_blocks"]}
    return {**size, "storage_hit_tokens": hit_tokens, "storage_hit_ratio": hit_tokens / queried if queried else None,
            **total,
            "storage_read_utilization": reads_busy / span if span else None,
            "storage_write_utilization": writes_busy / span if span else None}


__all__ = ["OFFLOADS", "HostLink", "HostTier", "Offload", "SglangHiCache", "StorageTier", "StoredBlocks", "VllmCpuOffload", "attach",
           "host_blocks", "offload_summary", "storage_blocks"]
