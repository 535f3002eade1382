"""SGLang's radix cache with a host tier behind it (HiCache, ``--enable-hierarchical-cache``), for one rank.

A node of the tree may hold its KV on the GPU, in host memory, or both (SGLang 0.5.23's ``UnifiedRadixCache``
with its HiCache controller; the rules, with their sources, are in ``docs/research/sglang-hicache.md``):

- **backup** (GPU to host): an insertion counts a hit on every GPU node it walks or makes past what the same
  request inserted before; a node not on the host whose hits reach the write policy's threshold (1 for
  ``write_through``, 2 for ``write_through_selective``) is copied to the host with its ancestors that are not
  there yet, at once (its host pages taken now) and its path is locked on the GPU until the copy's
  acknowledgement is reaped (``backups`` hands the copies to the rank's host tier, which unlocks them). So
  a node on the host has its parent there too. Under ``write_back`` insertions back up nothing: a node alone
  is copied when it is evicted from the GPU, and the scheduler waits for the copy (``synced`` counts those
  pages).
- **GPU eviction**: least recently used unlocked nodes none of whose children are on the GPU; one on the host
  is *demoted* (its GPU pages freed, the node stays, matchable, host-only), one that is not is deleted.
- **host eviction**, only when a backup needs host pages: least recently used host-only nodes with no
  children at all and no lock; they leave the tree.
- **match** walks through GPU and host-only nodes alike; ``device_part`` splits a match into its GPU prefix and
  the host pages after it, which the scheduler loads back at admission (``load_back``).
- an insertion over a host-only node puts the request's fresh copy back on the GPU (SGLang's
  ``_unevict_node_on_insert``).

- **storage** (``offload.sglang_storage``, with ``--hicache-storage-backend``): every copy to the host is written
  on to storage, its nodes *pinned* on the host (``pin_host``: not evicted from the host) until that write ends;
  ``copied`` keeps the spans each copy wrote. Pages read back from storage take host pages first
  (``host_reserved``) and join the tree as host-only nodes (``insert_host``).

Units are the base cache's (pages). ``cached_tokens`` and ``evictable_tokens`` count GPU pages only;
``host_tokens`` counts pages held on the host, at most ``host_capacity`` with the pages reserved for reads
from storage (``host_reserved``).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence

from simmodel.config.schema import HICACHE_WRITE_POLICIES as WRITE_POLICIES
from simmodel.engine.radix_cache import RadixCache, RadixNode, compacted

WRITE_THROUGH_THRESHOLD = {"write_through": 1, "write_through_selective": 2}
"""Hits that back a node up under each insert-time policy (SGLang's ``write_through_threshold``)."""


class HiRadixCache(RadixCache):
    """A rank's radix tree whose nodes may also, or only, live in a host pool of ``host_capacity`` pages."""

    def __init__(self, capacity: int, host_capacity: int, write_policy: str) -> None:
        super().__init__(capacity)
        if write_policy not in WRITE_POLICIES:
            raise ValueError(f"unknown write_policy {write_policy!r}")
        self.host_capacity = host_capacity
        self.write_policy = write_policy
        self.threshold = WRITE_THROUGH_THRESHOLD.get(write_policy)
        """Hits that back a node up at insertion; None: never (``write_back``)."""
        self.host_tokens = 0
        """Pages held on the host (host-only nodes, and nodes on both tiers)."""
        self.backups: list[tuple[RadixNode, int]] = []
        """Insert-time backups not yet handed to the host link: (node whose path they lock, pages copied)."""
        self.synced = 0
        """Pages ``write_back`` copied while evicting, not yet handed over (the scheduler waits for them)."""
        self.num_demoted = self.num_deleted = self.num_host_evicted = self.num_backup_failed = 0
        """Pages demoted to host-only, pages that left the tree from the GPU, host pages freed (host-only nodes
        evicted or dropped, host copies of GPU nodes reclaimed); backups skipped for want of host room."""
        self.num_written_back = 0
        """Pages ``write_back`` copied while evicting."""
        self._host_heap: list[tuple[int, int, RadixNode]] = []
        """Candidates for host eviction (host-only nodes without children), as the base's ``_heap``."""
        self._host_compact_at = 1024
        self._duplicates: dict[RadixNode, None] = {}
        """``write_back``: nodes on both tiers whose host copy host pressure frees first, in the order they became
        so (SGLang's ``full_host_duplicates``), each keyed by the tail of one of SGLang's nodes (the part that keeps
        SGLang's node id when it splits): registered when a write-back copy is acknowledged (just before the
        node's demotion: the entry goes stale but keeps its place if the node comes back), when a load is
        acknowledged (deepest node first), when an insertion puts a node back on the GPU, and when such a node
        splits (the new prefix part); stale entries are dropped when a reclaim meets them."""
        self._loading: dict[RadixNode, int] = {}
        """Nodes a load brought back to the GPU, not acknowledged yet, and the load's number."""
        self._num_loads = 0
        self._counted_from = 0
        self._revived = 0
        self._pending: list[RadixNode] = []
        self._on_insert = self._inserted
        self.copied: dict[str, list] | None = None
        """With a storage tier: the copies to the host made since they were taken, as (nodes, their spans
        ``(block, start, end)`` when copied), under ``"backup"`` (insert-time backups, copied after the pass) and
        ``"synced"`` (``write_back``'s copies while evicting, waited for before the pass); None: not kept."""
        self.host_pins: dict[RadixNode, int] = {}
        """Nodes pinned on the host (a storage write reads them, or a read from storage hangs under them), and how
        many times: host eviction passes them by (SGLang's ``host_ref_counter``)."""
        self.host_reserved = 0
        """Host pages taken by reads from storage, not in the tree yet."""

    # -- states ---------------------------------------------------------------------------------
    @property
    def host_free(self) -> int:
        return self.host_capacity - self.host_tokens - self.host_reserved

    @property
    def num_host_candidates(self) -> int:
        """Entries kept for host eviction, stale ones included (bounded: ``_offer`` drops the stale ones)."""
        return len(self._host_heap)

    @staticmethod
    def _is_device_leaf(node: RadixNode) -> bool:
        if node.evicted:
            return False
        for child in node.children.values():
            if not child.evicted:
                return False
        return True

    def device_part(self, node: RadixNode) -> tuple[RadixNode, int]:
        """Of a match ending at ``node``: the deepest node on the GPU, and the host-only pages below it."""
        host = 0
        while node.evicted:
            host += node.length
            node = node.parent
        return node, host

    # -- eviction candidates --------------------------------------------------------------------
    def _offer(self, node: RadixNode) -> None:
        if node.lock_ref or node is self.root:
            return
        if node.evicted:
            if not node.children:
                self._offered += 1
                heapq.heappush(self._host_heap, (node.last_access, self._offered, node))
                if len(self._host_heap) > self._host_compact_at:  # (a waiting request's match offers at every plan)
                    self._host_heap = compacted(self._host_heap, self._host_live)
                    self._host_compact_at = max(1024, 2 * len(self._host_heap))
            return
        if self._is_device_leaf(node):
            self._push(node)

    def _live(self, entry: tuple[int, int, RadixNode]) -> bool:
        last, _, node = entry
        parent = node.parent
        return (node.lock_ref == 0 and node.last_access == last and self._is_device_leaf(node)
                and parent.children.get((node.block, node.start)) is node)

    def _host_live(self, entry: tuple[int, int, RadixNode]) -> bool:
        last, _, node = entry
        parent = node.parent
        return (node.evicted and node.lock_ref == 0 and not node.children and node.last_access == last
                and parent.children.get((node.block, node.start)) is node and node not in self.host_pins)

    def _touch(self, node: RadixNode) -> None:
        super()._touch(node)
        if node.evicted:  # the deepest GPU node of the path was used too
            self._offer(self.device_part(node)[0])

    def _split(self, node: RadixNode, at: int) -> RadixNode:
        upper = super()._split(node, at)
        upper.host, upper.evicted, upper.hits = node.host, node.evicted, node.hits
        upper.sealed = node.host
        load = self._loading.get(node)
        if load is not None:
            self._loading[upper] = load
        elif self.threshold is None and node.host and not node.evicted:
            self._duplicates[upper] = None  # (a new node of SGLang's: its prefix)
        return upper

    def _unjoin(self, node: RadixNode) -> None:
        if self.threshold is not None:  # (only ``write_back`` tracks duplicates)
            super()._unjoin(node)
            return
        joined = not self._is_tail(node)
        super()._unjoin(node)
        if joined and node.host and not node.evicted and node not in self._loading:
            self._duplicates.setdefault(node)  # (SGLang's split makes the part ending at ``node`` a new node)

    @staticmethod
    def _is_tail(node: RadixNode) -> bool:
        """``node`` ends one of SGLang's nodes (no child is joined to it): ``_duplicates`` keys SGLang's node by
        its tail, the part that keeps SGLang's node id when it splits."""
        for child in node.children.values():
            if child.joined:
                return False
        return True

    # -- locks: a host-only node's lock keeps it on the host (it holds no GPU pages) ----------------
    def lock(self, node: RadixNode) -> None:
        while node is not self.root:
            if node.lock_ref == 0 and not node.evicted:
                self.evictable_tokens -= node.length
            node.lock_ref += 1
            node = node.parent

    def _unlock_path(self, node: RadixNode) -> None:
        while node is not self.root:
            node.lock_ref -= 1
            if node.lock_ref == 0 and not node.evicted:
                self.evictable_tokens += node.length
            node = node.parent

    # -- GPU eviction ---------------------------------------------------------------------------
    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` GPU pages from least recently used unlocked GPU leaves: demote those on
        the host, back up then demote (``write_back``), or delete the rest."""
        freed = 0
        while freed < num_tokens and self._heap:
            entry = heapq.heappop(self._heap)
            if not self._live(entry):
                continue
            leaf = entry[2]
            chain = [leaf]  # the leaf, and the nodes it is joined to (one node of SGLang's)
            while True:
                n, parent = chain[-1], chain[-1].parent
                if not (n.joined and parent is not self.root and parent.lock_ref == 0
                        and all(c is n or c.evicted for c in parent.children.values())):
                    break
                chain.append(parent)
            if self.threshold is None and not all(n.host for n in chain):
                backed = self._back_up(leaf, [n for n in chain if not n.host])
                self.synced += backed
                self.num_written_back += backed
                if backed:  # (a duplicate at the copy's acknowledgement, before its demotion: its slot stays)
                    self._duplicates.setdefault(leaf)
            for leaf in chain:
                parent = leaf.parent
                freed += leaf.length
                self.cached_tokens -= leaf.length
                self.evictable_tokens -= leaf.length
                if leaf.host:
                    leaf.evicted = True
                    self.num_demoted += leaf.length
                    self._offer(leaf)
                else:
                    self.num_deleted += leaf.length
                    self._drop(leaf)
            self._offer(parent)
        return freed

    def _drop(self, node: RadixNode) -> None:
        """``node`` leaves the tree with what is below it (host-only nodes: SGLang's ``drop_subtree_no_host``)."""
        del node.parent.children[(node.block, node.start)]
        self._duplicates.pop(node, None)
        stack = list(node.children.values())
        while stack:
            n = stack.pop()
            if n.host:
                self.host_tokens -= n.length
                self.num_host_evicted += n.length
            self._duplicates.pop(n, None)
            stack.extend(n.children.values())

    # -- host eviction and backups --------------------------------------------------------------
    def evict_host(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` host pages from least recently used unlocked host-only nodes without
        children; they leave the tree."""
        freed = self._reclaim_duplicates(num_tokens) if self._duplicates else 0
        heap = self._host_heap
        while freed < num_tokens and heap:
            entry = heapq.heappop(heap)
            if not self._host_live(entry):
                continue
            leaf = entry[2]
            while True:
                parent = leaf.parent
                del parent.children[(leaf.block, leaf.start)]
                self._duplicates.pop(leaf, None)
                freed += leaf.length
                self.host_tokens -= leaf.length
                self.num_host_evicted += leaf.length
                if not (leaf.joined and parent is not self.root and parent.evicted and parent.lock_ref == 0
                        and not parent.children and parent not in self.host_pins):
                    break
                leaf = parent
            self._offer(parent)
            heap = self._host_heap  # (an offer may have compacted it)
        return freed

    def _reclaim_duplicates(self, num_tokens: int) -> int:
        """``write_back`` under host pressure: free the host copies of nodes also on the GPU, in the order they
        became duplicates, first sparing the GPU leaves eviction would demote next, then not (SGLang's
        ``_reclaim_full_host_duplicates``); a node a load is bringing in keeps its copy."""
        freed = 0
        dups = self._duplicates
        for spare in (True, False):
            for node in list(dups):
                if freed >= num_tokens:
                    return freed
                if node.evicted or not node.host or node.parent.children.get((node.block, node.start)) is not node:
                    del dups[node]  # (stale)
                    continue
                chain = [node]  # (the tail of one of SGLang's nodes, and the nodes it is joined to)
                while chain[-1].joined and chain[-1].parent is not self.root:
                    chain.append(chain[-1].parent)
                if (any(n in self._loading or n in self.host_pins for n in chain)
                        or spare and node.lock_ref == 0 and self._is_device_leaf(node)):
                    continue
                for n in chain:
                    if n.host:
                        n.host = False
                        self.host_tokens -= n.length
                        self.num_host_evicted += n.length
                        freed += n.length
                del dups[node]
        return freed

    def _back_up(self, node: RadixNode, chain: list[RadixNode] | None = None) -> int:
        """Copy ``node`` to the host, with its ancestors not there yet under the write-through policies
        (``write_back`` copies the evicted node alone), if room can be made: returns the pages copied (0: no
        room, nothing copied)."""
        chain = chain or [node]
        if self.threshold is not None:
            n = node.parent
            while n is not self.root and not n.host:
                chain.append(n)
                n = n.parent
        need = sum(n.length for n in chain)
        if need > self.host_free:
            self.evict_host(need - self.host_free)
            if need > self.host_free:
                self.num_backup_failed += need
                return 0
        for n in chain:
            n.host = True
            n.sealed = True  # (later tokens go in a node of their own, as SGLang's insertion makes one)
        self.host_tokens += need
        if self.copied is not None:  # (written on to storage once the copy is acknowledged: pinned till then)
            for n in chain:
                self.pin_host(n)
            self.copied["backup" if self.threshold is not None else "synced"].append(
                (chain, [(n.block, n.start, n.end) for n in chain]))
        return need

    # -- storage: host pins, reads into the host ------------------------------------------------
    def pin_host(self, node: RadixNode) -> None:
        self.host_pins[node] = self.host_pins.get(node, 0) + 1

    def unpin_host(self, node: RadixNode) -> None:
        left = self.host_pins.get(node, 0) - 1
        if left > 0:
            self.host_pins[node] = left
            return
        self.host_pins.pop(node, None)
        if node.parent is not None and node.parent.children.get((node.block, node.start)) is node:
            self._offer(node)  # (a host eviction candidate again)

    def reserve_host(self, pages: int, least: int) -> int:
        """Take up to ``pages`` host pages for a read from storage: without room for them all, host-only leaves
        are evicted for ``pages`` more (SGLang's ``allocate_storage_hit`` evicts the whole hit's worth, where a
        backup evicts only what it lacks); the pages taken, or 0 if fewer than ``least`` can be (nothing taken)."""
        if pages > self.host_free:
            self.evict_host(pages)
        taken = min(pages, self.host_free)
        if taken < least:
            return 0
        self.host_reserved += taken
        return taken

    def insert_host(self, segments: Sequence[tuple[Hashable, int]], start: int, end: int, reserved: int) -> int:
        """Pages ``start``..``end`` of the sequence were read from storage into ``reserved`` host pages: those the
        tree lacks join it as host-only nodes below what it has (one of SGLang's nodes), the rest of the pages go
        back. Nothing joins below a node that is not on the host (a host-only node's parent is on the host), nor
        where the tree lacks pages before ``start``. Returns the pages that joined."""
        self.host_reserved -= reserved
        matched, node = self._walk(segments, end, split=True)
        if matched >= end or matched < start or not (node is self.root or node.host):
            return 0
        first, added, base = None, 0, 0
        for block, seg_len in segments:
            lo, hi = max(matched - base, 0), min(seg_len, end - base)
            base += seg_len
            if lo >= hi:
                if base >= end:
                    break
                continue
            new = RadixNode(block, lo, hi, node)
            new.host = new.evicted = new.sealed = True
            new.joined = first is not None
            node.children[(block, lo)] = new
            first = first or new
            added += hi - lo
            node = new
        self.host_tokens += added
        self._touch(node)
        return added

    # -- insertion ------------------------------------------------------------------------------
    def insert(self, segments: Sequence[tuple[Hashable, int]], num_tokens: int | None = None,
               counted_from: int = 0) -> tuple[int, RadixNode]:
        """The base insertion; nodes it walks past ``counted_from`` pages (what the same request inserted
        before) count a hit, and a host-only node it walks comes back to the GPU with the request's copy.
        Backups it triggers go to ``backups``."""
        self._counted_from, self._revived = counted_from, 0
        added, node = super().insert(segments, num_tokens)
        pending = self._pending
        if pending:
            for n in pending:
                if not n.host:
                    copied = self._back_up(n)
                    if copied:
                        self.lock(n)
                        self.backups.append((n, copied))
            pending.clear()
        return added + self._revived, node

    def _inserted(self, node: RadixNode, end: int, new: bool) -> None:
        if node.evicted:  # (the request computed it again: its copy is the node's GPU KV now)
            node.evicted = False
            self.cached_tokens += node.length
            self._revived += node.length
            if node.lock_ref == 0:
                self.evictable_tokens += node.length
            if self.threshold is None and self._is_tail(node):
                self._duplicates.setdefault(node)
        threshold = self.threshold
        if threshold is None or end <= self._counted_from:
            return
        node.hits += 1
        if not node.host and node.hits >= threshold:
            self._pending.append(node)

    # -- load-back --------------------------------------------------------------------------------
    def load_back(self, node: RadixNode, pages: int) -> int:
        """Bring the host-only ``pages`` ending at ``node`` (locked by the caller) back to the GPU, evicting for
        room: the load's number (``load_acked``), or 0 if room cannot be made (nothing changes)."""
        if pages > self.num_free:
            self.evict(pages - self.num_free)
            if pages > self.num_free:
                return 0
        self._num_loads += 1
        while node.evicted:
            node.evicted = False
            self.cached_tokens += node.length  # (locked: not evictable)
            self._loading[node] = self._num_loads
            node = node.parent
        return self._num_loads

    def load_acked(self, load: int) -> None:
        """A load's copy was acknowledged: its nodes, on both tiers now, are settled (``write_back`` tracks them
        as duplicates, root first)."""
        nodes = [n for n, k in self._loading.items() if k == load]
        for n in nodes:
            del self._loading[n]
        if self.threshold is None:
            nodes.sort(key=self._depth, reverse=True)  # (SGLang's ack walks from the load's last node up)
            for n in nodes:
                if not n.evicted and n.host and self._is_tail(n):
                    self._duplicates.setdefault(n)

    def _depth(self, node: RadixNode) -> int:
        depth = 0
        while node is not self.root:
            node = node.parent
            depth += 1
        return depth

    def clear(self) -> None:
        """Everything leaves the tree and the host pool (a worker restarted cold); nothing may be locked or held."""
        assert self.allocated_tokens == 0 and self.evictable_tokens == self.cached_tokens, "KV still in use"
        self.root.children.clear()
        self.cached_tokens = self.evictable_tokens = self.host_tokens = self.synced = 0
        self._heap.clear()
        self._host_heap.clear()
        self._duplicates.clear()
        self._loading.clear()
        self.backups.clear()
        self.host_pins.clear()
        self.host_reserved = 0
        if self.copied is not None:
            self.copied = {"backup": [], "synced": []}

    def take_synced(self) -> int:
        pages, self.synced = self.synced, 0
        return pages

    def check(self) -> None:
        """Recount GPU, evictable and host pages; every host-only node's ancestors are on the host, and the GPU
        nodes are closed under parents (tests)."""
        cached = evictable = host = 0
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            if not node.evicted:
                cached += node.length
                evictable += node.length if node.lock_ref == 0 else 0
                assert node.parent is self.root or not node.parent.evicted, node
            else:
                assert node.host, node
            if node.host:
                host += node.length
                assert node.parent is self.root or node.parent.host or self.threshold is None, node
            stack.extend(node.children.values())
        assert cached == self.cached_tokens, (cached, self.cached_tokens)
        assert evictable == self.evictable_tokens, (evictable, self.evictable_tokens)
        assert host == self.host_tokens, (host, self.host_tokens)
        assert self.num_free >= 0 and self.host_tokens + self.host_reserved <= self.host_capacity
