"""How a handoff's KV gets from the prefill rank to the decode rank (``engine.kv_transfer.via``).

- ``link`` (``LinkRoute``): over the network between the pools, as NIXL moves it: one transfer from the
  decode rank's reservation, ``latency + tokens × bytes per token / bandwidth``, queued on one link out of each
  prefill worker and one into each decode worker with ``contention: shared_link``. The prefill rank keeps the
  KV until the transfer is over.
- ``storage`` (``StoreRoute``): through the prefill role's shared storage tier, as a connector that hands KV
  off through a store deploys it (LMCache or a Mooncake store between the pools, Dynamo's KVBM on shared
  storage): the prefill rank writes the whole prompt's KV to the store as its pass ends, and the decode rank
  reads it once it has reserved its blocks and the write has ended. The prefill rank frees its blocks once its
  write is over, whatever the decode pool does meanwhile.

``ROUTES`` picks one by name; ``KvTransfer`` (``kv_transfer``) drives it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import simpy

from simmodel.engine.clock import NS_PER_S
from simmodel.offload.link import HostLink
from simmodel.offload.storage import storage_queue

if TYPE_CHECKING:
    from simmodel.config.schema import KvTransferSpec, StorageSpec
    from simmodel.engine.rank import Rank
    from simmodel.engine.request import Request
    from simmodel.engine.worker import Worker


class LinkRoute:
    """The network link between the pools (NIXL): the transfer starts at the decode rank's reservation."""

    releases_at_put = False
    """The prefill rank frees the KV when the transfer is over (``KvTransfer``)."""

    def __init__(self, env: simpy.Environment, spec: KvTransferSpec, bytes_per_token: float,
                 prefill_workers: list[Worker], decode_workers: list[Worker], store: StorageSpec | None) -> None:
        self.env, self.spec, self.bytes_per_token = env, spec, bytes_per_token
        shared = spec.contention == "shared_link"
        self.out_links = {id(w): simpy.Resource(env, 1) for w in prefill_workers} if shared else {}
        self.in_links = {id(w): simpy.Resource(env, 1) for w in decode_workers} if shared else {}

    def duration_ns(self, num_tokens: int) -> int:
        """Link latency plus the tokens' KV bytes over the bandwidth (no bandwidth: no transfer time)."""
        seconds = self.spec.latency_ms / 1000.0
        if self.spec.bandwidth_gb_per_second is not None:
            seconds += num_tokens * self.bytes_per_token / (self.spec.bandwidth_gb_per_second * 1e9)
        return int(round(seconds * NS_PER_S))

    def put(self, source: Rank, client: Request, started: Callable[[], None],
            written: Callable[[], None]) -> None:
        """The prompt is done on ``source``: nothing moves before the decode rank has reserved."""

    def figures(self, end_ns: int) -> dict:
        """(The link's transfers are in the requests' transfer columns: nothing more to report.)"""
        return {}

    def move(self, source: Rank | None, target: Rank, client: Request, tokens: int,
             started: Callable[[], None]) -> Generator[simpy.Event, Any, None]:
        """Carry ``tokens`` of KV from ``source`` to ``target`` (a SimPy process's body): queue for the links
        (``shared_link``), call ``started`` as the transfer starts, and end when it lands."""
        links = []
        assert source is not None  # (the prefill rank keeps the KV until this transfer is over)
        if self.out_links:
            for link in (self.out_links[id(source.worker)], self.in_links[id(target.worker)]):
                request = link.request()
                yield request
                links.append((link, request))
        started()
        yield self.env.timeout(self.duration_ns(tokens))
        for link, request in links:
            link.release(request)


class StoreRoute:
    """Through the prefill role's shared store: a write by the prefill rank, then a read by the decode rank.

    Each prefill rank writes on a queue of its own (the connector's transfer engine, beside the storage tier's
    write-through queue), the whole prompt as one job from the end of the pass that completed it; each decode
    rank reads on a queue of its own, the tokens it lacks (``timing_mode``) as one job from the later of its
    reservation and the write's end. Both at the storage tier's figures (``latency_us`` a job, then the bytes
    over ``write_gb_per_s`` or ``read_gb_per_s``), a block's bytes over all the prefill rank's GPUs (each writes
    its own shard). The handed-off KV is the request's own object in the store, held only until it is read: it is
    not among the blocks the prefill workers' lookups find, nor counted against the store's ``capacity_gib``."""

    releases_at_put = True
    """The prefill rank frees the KV once its write to the store is over (``KvTransfer``)."""

    def __init__(self, env: simpy.Environment, spec: KvTransferSpec, bytes_per_token: float,
                 prefill_workers: list[Worker], decode_workers: list[Worker], store: StorageSpec | None) -> None:
        assert store is not None
        self.env, self.bytes_per_token = env, bytes_per_token
        """KV bytes of one token over all of a prefill rank's GPUs."""
        self.store = store
        self.writes: dict[Rank, HostLink] = {}
        """Each prefill rank's queue of handoff writes (made as the rank first hands off)."""
        self.reads: dict[Rank, HostLink] = {}
        """Each decode rank's queue of handoff reads."""
        self.written_at: dict[Request, int] = {}
        """When each handed-off request's write to the store ends (until its read is queued)."""
        self.bytes_written = 0.0
        self.bytes_read = 0.0

    def figures(self, end_ns: int) -> dict:
        """The summary's ``kv_transfer_storage``: bytes the handoffs wrote and read, and how busy the ranks' handoff
        queues were up to ``end_ns`` (averaged over the ranks that used them)."""
        def busy(links: dict) -> float | None:
            span = len(links) * end_ns
            return sum(link.busy_until(end_ns) for link in links.values()) / span if span else None

        return {"kv_transfer_storage": {"bytes_written": round(self.bytes_written), "bytes_read": round(self.bytes_read),
                                        "write_utilization": busy(self.writes), "read_utilization": busy(self.reads),
                                        "writing_ranks": len(self.writes), "reading_ranks": len(self.reads)}}

    def put(self, source: Rank, client: Request, started: Callable[[], None],
            written: Callable[[], None]) -> None:
        """The prompt is done on ``source``: its whole KV is written to the store from now (``started`` now),
        and ``written`` is called once the write is over."""
        link = self.writes.get(source)
        if link is None:
            link = self.writes[source] = storage_queue(self.store.write_gb_per_s, self.store.latency_us)
        size = client.num_prompt_tokens * self.bytes_per_token
        end = link.transfer(self.env.now, size)[1]
        self.bytes_written += size
        self.written_at[client] = end
        started()
        self.env.timeout(end - self.env.now).callbacks.append(lambda _: written())

    def move(self, source: Rank | None, target: Rank, client: Request, tokens: int,
             started: Callable[[], None]) -> Generator[simpy.Event, Any, None]:
        """The decode rank has reserved: it reads ``tokens`` of KV from the store once the write has ended."""
        link = self.reads.get(target)
        if link is None:
            link = self.reads[target] = storage_queue(self.store.read_gb_per_s, self.store.latency_us)
        at = max(self.env.now, self.written_at.pop(client))
        end = link.transfer(at, tokens * self.bytes_per_token)[1]
        self.bytes_read += tokens * self.bytes_per_token
        yield self.env.timeout(end - self.env.now)


ROUTES: dict[str, type[LinkRoute] | type[StoreRoute]] = {"link": LinkRoute, "storage": StoreRoute}
"""The handoff's route by ``engine.kv_transfer.via``."""
