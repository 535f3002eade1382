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
"""

from __future__ import annotations

from collections import OrderedDict, deque

from simmodel.offload.link import HostLink


class StorageTier:
    """Up to ``capacity`` blocks (None: unbounded) under their content keys, least recently used first, and the
    writes still on their way to it."""

    def __init__(self, capacity: int | None, reads: HostLink, writes: HostLink, block_bytes: float) -> None:
        self.capacity = capacity
        self.read_link, self.write_link = reads, writes
        self.block_bytes = block_bytes
        """KV bytes of one block over all of the rank's GPUs (what a read or write moves per block)."""
        self.blocks: OrderedDict[object, None] = OrderedDict()
        """Keys held (their write has ended), least recently written or read first."""
        self._writing: deque[tuple[int, list]] = deque()
        """(when it ends, keys) of the writes not applied yet, in the order they end (one queue; ``catch_up``)."""
        self.version = 0
        """Changes whenever a block is added or evicted (what a lookup's answer depends on)."""
        self.num_evicted = 0
        self.num_dropped = 0
        """Writes larger than the whole tier (not taken)."""
        self.blocks_written = 0
        self.blocks_read = 0
        self.num_reads = 0

    def __len__(self) -> int:
        return len(self.blocks)

    def write(self, keys: list, at: int) -> int:
        """Queue the write of ``keys`` at ``at`` (their host copy lands then); returns when it ends."""
        end = self.write_link.transfer(at, len(keys) * self.block_bytes)[1]
        self._writing.append((end, keys))
        self.blocks_written += len(keys)
        return end

    def catch_up(self, now: int) -> None:
        """Apply the writes ended by ``now``: their blocks are held from then on."""
        writing = self._writing
        while writing and writing[0][0] <= now:
            self._hold(writing.popleft()[1])

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

    def read(self, keys: list, at: int) -> int:
        """Start reading ``keys`` (held) into the host at ``at``; returns when the read ends. Reading refreshes them."""
        self.fetched(keys)
        return self.read_link.transfer(at, len(keys) * self.block_bytes)[1]

    def figures(self, end_ns: int, read_busy_ns: int) -> dict:
        """What the tier held at ``end_ns`` (the writes ended by then are held) and moved, and how long its queues were
        busy before then (reads: ``read_busy_ns``, as its reader timed them)."""
        self.catch_up(end_ns)
        return {"storage_capacity_blocks": self.capacity, "storage_blocks_held": len(self),
                "storage_reads": self.num_reads, "storage_blocks_read": self.blocks_read,
                "storage_blocks_written": self.blocks_written, "storage_blocks_evicted": self.num_evicted,
                "storage_writes_dropped": self.num_dropped,
                "storage_bytes_read": round(self.blocks_read * self.block_bytes),
                "storage_bytes_written": round(self.blocks_written * self.block_bytes),
                "storage_read_busy_ns": read_busy_ns, "storage_write_busy_ns": self.write_link.busy_until(end_ns)}

    def fetched(self, keys: list) -> None:
        """``keys`` were read (``read``, or a reader that times its reads itself: SGLang's prefetches): counted, and
        refreshed as the most recently used."""
        if not keys:
            return
        if self.capacity is not None:
            blocks = self.blocks
            for key in keys:
                if key in blocks:
                    blocks.move_to_end(key)
        self.num_reads += 1
        self.blocks_read += len(keys)

    def clear(self, at: int) -> None:
        """Empty the tier and forget the writes on their way (a worker left at ``at`` with its local disk: its
        queues stop there)."""
        self.blocks.clear()
        self._writing.clear()
        self.read_link.cut(at)
        self.write_link.cut(at)
        self.version += 1
