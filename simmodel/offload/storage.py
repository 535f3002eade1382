"""A storage KV tier behind a rank's host tier: blocks on local disk or a network store, by their content keys.

Follows vLLM 0.32's ``TieringOffloadingSpec`` with one secondary tier (its ``fs`` or ``example`` tier): the host
(CPU) tier is the gateway, storage never touches GPU memory.

- **writes** (vLLM's "cascade"): every copy that lands on the host is written through to storage, on the
  rank's storage write queue, starting when the host copy lands. The host blocks it reads stay on the host
  (they cannot be evicted) until the write ends. A block is written again each time it lands on the host,
  whether storage holds it or not (``fs`` overwrites its file). Storage holds a block once its write ends.
- **reads** ("promotion", ``simmodel.offload.vllm_connector``): a block a lookup finds neither landed nor
  landing on the host but on storage takes a host slot at once (evicting the host's least recently used
  block, or the lookup misses there) and is read into it on the storage read queue; the request waits in the
  queue until it lands, then is loaded from the host as any host hit.
- **capacity**: vLLM's tiers have none (``fs`` never deletes a file): ``capacity`` None. With one, a write that
  lands evicts the least recently written or read blocks to make room, and is dropped if it is larger than
  the whole tier.

Each queue is one first-come-first-served line with a fixed latency per job (``link.HostLink``), its bandwidth
the rank's share of the device's (all its tensor-parallel GPUs' shards of a block move over it).

What the tier holds (``StoredBlocks``) is the rank's own (a node's local disk), or, with ``storage.shared``, one
store for every rank of every worker of the role (a shared file system, a Mooncake store, LMCache's remote
tier): each rank still reads and writes it over its own queues, and a block any of them wrote is found by all
from the instant its write ends. That holds because every rank that looks the store up does so at the
simulation's clock (its workers plan no pass ahead of it: ``Simulation._route_ahead``), and every write is
queued when the plan of the pass that computes its blocks is made, before it can end.
"""

from __future__ import annotations

from collections import OrderedDict
from heapq import heapify, heappop, heappush

from simmodel.offload.link import HostLink


def storage_queue(gb_per_s: float, latency_us: float) -> HostLink:
    """One of a rank's queues to a storage tier at the tier's figures (``StorageSpec``): a job costs ``latency_us``,
    then its bytes at ``gb_per_s``."""
    return HostLink(gb_per_s * 1e9, int(round(latency_us * 1e3)))


class StoredBlocks:
    """The blocks a storage tier holds, by their content keys: up to ``capacity`` (None: unbounded), least
    recently written or read first, and the writes on their way to it (from one rank's queue, or several
    ranks' when ``shared``)."""

    def __init__(self, capacity: int | None, shared: bool = False) -> None:
        self.capacity, self.shared = capacity, shared
        self.blocks: OrderedDict[object, None] = OrderedDict()
        """Keys held (their write has ended), least recently written or read first."""
        self._writing: list[tuple[int, int, object, list]] = []
        """(when it ends, order queued, the tier that queued it, keys) of the writes not applied yet (a heap:
        several ranks' queues end out of each other's order; ``catch_up``)."""
        self._queued = 0
        self.version = 0
        """Changes whenever a block is added or evicted (what a lookup's answer depends on)."""
        self.num_evicted = 0
        self.num_dropped = 0
        """Writes larger than the whole tier (not taken)."""

    def __len__(self) -> int:
        return len(self.blocks)

    def add(self, end: int, keys: list, writer: object) -> None:
        """A write of ``keys`` by ``writer`` ends at ``end``: they are held from then on."""
        heappush(self._writing, (end, self._queued, writer, keys))
        self._queued += 1

    def ended_by(self, now: int) -> bool:
        """Whether a write not applied yet has ended by ``now`` (a lookup then would find its blocks)."""
        return bool(self._writing) and self._writing[0][0] <= now

    def catch_up(self, now: int) -> None:
        """Apply the writes ended by ``now``, in the order they end (and were queued, at one instant)."""
        writing = self._writing
        while writing and writing[0][0] <= now:
            self._hold(heappop(writing)[3])

    def _hold(self, keys: list) -> None:
        blocks = self.blocks
        if self.capacity is None:  # (nothing is ever evicted: recency does not matter)
            before = len(blocks)
            blocks.update(dict.fromkeys(keys))
            if len(blocks) > before:
                self.version += 1
            return
        new = [key for key in keys if key not in blocks]
        for key in keys:
            if key in blocks:
                blocks.move_to_end(key)
        if not new:
            return
        if len(new) > self.capacity:
            self.num_dropped += 1
            return
        over = max(len(blocks) + len(new) - self.capacity, 0)
        for _ in range(over):
            blocks.popitem(last=False)
        self.num_evicted += over
        blocks.update(dict.fromkeys(new))
        self.version += 1

    def refresh(self, keys: list) -> None:
        """``keys`` were read: the most recently used now."""
        if self.capacity is not None:
            blocks = self.blocks
            for key in keys:
                if key in blocks:
                    blocks.move_to_end(key)

    def forget(self, writer: object, at: int) -> None:
        """``writer``'s queues stop at ``at`` (its worker left): its writes ending after ``at`` never land. A tier
        of its own goes with it, whole."""
        if not self.shared:
            self.blocks.clear()
            self._writing.clear()
            self.version += 1
            return
        kept = [w for w in self._writing if w[2] is not writer or w[0] <= at]
        if len(kept) < len(self._writing):
            heapify(kept)
            self._writing = kept

    def figures(self, end_ns: int) -> dict:
        """What it held at ``end_ns`` (the writes ended by then are held), evicted and dropped."""
        self.catch_up(end_ns)
        return {"storage_blocks_held": len(self), "storage_blocks_evicted": self.num_evicted,
                "storage_writes_dropped": self.num_dropped}


class StorageTier:
    """One rank's storage tier: what it holds (``store``: its own, or shared), and its read and write queues."""

    def __init__(self, store: StoredBlocks, reads: HostLink, writes: HostLink, block_bytes: float) -> None:
        self.store = store
        self.read_link, self.write_link = reads, writes
        self.block_bytes = block_bytes
        """KV bytes of one block over all of the rank's GPUs (what a read or write moves per block)."""
        self.blocks_written = 0
        self.blocks_read = 0
        self.num_reads = 0

    def __len__(self) -> int:
        return len(self.store)

    @property
    def capacity(self) -> int | None:
        return self.store.capacity

    @property
    def blocks(self) -> OrderedDict:
        """Keys held (their write has ended), least recently written or read first (the store's)."""
        return self.store.blocks

    @property
    def version(self) -> int:
        """Changes whenever the store gains or loses a block (what a lookup's answer depends on)."""
        return self.store.version

    def write(self, keys: list, at: int) -> int:
        """Queue the write of ``keys`` at ``at`` (their host copy lands then); returns when it ends."""
        end = self.write_link.transfer(at, len(keys) * self.block_bytes)[1]
        self.store.add(end, keys, self)
        self.blocks_written += len(keys)
        return end

    def catch_up(self, now: int) -> None:
        """Apply the writes ended by ``now`` (any rank's, if the store is shared): held from then on."""
        self.store.catch_up(now)

    def read(self, keys: list, at: int) -> int:
        """Start reading ``keys`` (held) into the host at ``at``; returns when the read ends. Reading refreshes them."""
        self.fetched(keys)
        return self.read_link.transfer(at, len(keys) * self.block_bytes)[1]

    def figures(self, end_ns: int, read_busy_ns: int) -> dict:
        """What the rank read and wrote, and how long its queues were busy before ``end_ns`` (reads:
        ``read_busy_ns``, as its reader timed them); with the store's figures if it is its own (a shared store's
        are the role's: ``offload_summary``)."""
        own = {} if self.store.shared else self.store.figures(end_ns)
        return {"storage_capacity_blocks": self.capacity, **own,
                "storage_reads": self.num_reads, "storage_blocks_read": self.blocks_read,
                "storage_blocks_written": self.blocks_written,
                "storage_bytes_read": round(self.blocks_read * self.block_bytes),
                "storage_bytes_written": round(self.blocks_written * self.block_bytes),
                "storage_read_busy_ns": read_busy_ns, "storage_write_busy_ns": self.write_link.busy_until(end_ns)}

    def fetched(self, keys: list) -> None:
        """``keys`` were read (``read``, or a reader that times its reads itself: SGLang's prefetches): counted, and
        refreshed as the most recently used."""
        if not keys:
            return
        self.store.refresh(keys)
        self.num_reads += 1
        self.blocks_read += len(keys)

    def clear(self, at: int) -> None:
        """The rank's worker left at ``at``: its queues stop there, the writes still on their way are lost, and a
        store of its own (a node's local disk) goes with it."""
        self.store.forget(self, at)
        self.read_link.cut(at)
        self.write_link.cut(at)
