"""vLLM's prefix caching over KV cache groups with sliding windows (the hybrid KV cache manager).

One pool of block ids serves every group (``perf.kv_layout``): full-attention groups first, then sliding-window
ones. A request holds a list of block ids per group, one per ``block_size`` tokens of its sequence; a sliding
group's blocks behind the window are given back (``slide``) and leave a null (−1) in its list. Every group caches
its own blocks under (group, content key) as they fill, and they stay reusable in the shared free queue after
being freed, until an allocation takes them (notes and sources: docs/research/vllm-hybrid-kv.md).

A prompt's cache hit (``find_hits``), as vLLM's ``HybridKVCacheCoordinator`` finds it:

- the full-attention groups: the longest run of cached blocks from the start (in every full group), at most
  ``(tokens − 1) // block_size`` blocks;
- then the sliding groups, within that: scanning from its end towards the start, the last run of
  ``cdiv(window − 1, block_size)`` contiguous blocks cached in every sliding group; the hit ends where that run
  ends. Without such a run, only a run from block 0 counts;
- every group then takes the common length: full groups their blocks, sliding groups the blocks inside the window
  (the ones before are nulls); where the full groups' hit ran deeper, its end is the request's junction.

With vLLM's default ``prefix_cache_retention_interval`` 0, a sliding group caches only the window's blocks that end at
a prompt's replay boundary (its last block boundary before its last token) or at its junction, the only places a later
hit can end (``cache_full_blocks``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simmodel.engine.kv_cache import PrefixCachingBlockPool
from simmodel.perf.capacity import cdiv

if TYPE_CHECKING:
    from simmodel.perf.kv_layout import KvLayout

NULL = -1


class HybridHits:
    """A prompt's cache hit: per group, the hit block ids (``NULL`` for a sliding group's positions behind the
    window). Its length is the hit in blocks (positions), as a one-group hit's list of ids is (the scheduler reads
    ``len`` and truth of either). ``junction``: where the full-attention groups' hit ran deeper than the hit, in
    tokens (vLLM's ``shared_prefix_boundary``), else 0."""

    __slots__ = ("per_group", "positions", "junction")

    def __init__(self, per_group: list[list[int]], positions: int, junction: int = 0) -> None:
        self.per_group = per_group
        self.positions = positions
        self.junction = junction

    def __len__(self) -> int:
        return self.positions

    @property
    def ids(self) -> list[int]:
        return [b for blocks in self.per_group for b in blocks if b != NULL]


class HybridPrefixCachingPool(PrefixCachingBlockPool):
    """Usable KV blocks of one rank shared by vLLM's KV cache groups, with prefix caching (see the module
    docstring): ``PrefixCachingBlockPool``'s ids, reference counts and free queue, its cached keys qualified by
    group. Requests hold ``block_ids`` as one list per group; ``num_blocks`` counts their real ids. Its
    ``listener`` is told of the full-attention group's cached and evicted keys (what a KV-aware router follows)."""

    sliding = True

    def __init__(self, num_blocks: int, block_size: int, layout: KvLayout, eagle: bool = False) -> None:
        super().__init__(num_blocks, block_size, eagle)
        self.layout = layout
        self.full, self.groups = layout.full_groups, layout.num_groups
        self.need = cdiv(layout.window - 1, block_size) + eagle
        """Contiguous cached blocks a sliding group needs for a hit (vLLM's ``sliding_window_contiguous_blocks``: one
        more with EAGLE, whose last is then dropped)."""

    def blocks_for(self, tokens: int, computed: int) -> int:
        return self.layout.blocks(tokens, computed, self.block_size)

    def _lists(self, request) -> list[list[int]]:
        if not request.block_ids:
            request.block_ids = [[] for _ in range(self.groups)]
        return request.block_ids

    # -- lookups -------------------------------------------------------------------------------------------

    def _cached(self, g: int, key) -> int | None:
        holders = self.blocks_by_key.get((g, key))
        return next(iter(holders)) if holders else None

    def full_groups_hit(self, request) -> tuple[list, int]:
        """The keys of the request's blocks a hit may reach, and the full groups' hit in blocks: the longest run cached in
        every full group from the start, at most ``(tokens − 1) // block_size`` blocks; with EAGLE a block further
        (within the request's full blocks), then one less. ``([], 0)`` when nothing can hit."""
        tokens = request.num_tokens
        n = (tokens - 1) // self.block_size
        if self.eagle:
            n = min(n + 1, tokens // self.block_size)
        if not n or not self.blocks_by_key:
            return [], 0
        keys = request.block_keys.upto(n)
        full = 0
        while full < n and all(self._cached(g, keys[full]) is not None for g in range(self.full)):
            full += 1
        return keys, full - 1 if self.eagle and full else full

    def find_hits(self, request) -> HybridHits:
        per_group: list[list[int]] = [[] for _ in range(self.groups)]
        keys, full = self.full_groups_hit(request)
        if not keys:
            return HybridHits(per_group, 0)
        eagle = self.eagle  # (the sliding groups look a block past the full groups' hit too, and drop one)
        scan = min(full + 1, request.num_tokens // self.block_size) if eagle else full
        run = 0
        for i in range(scan - 1, -1, -1):  # (the sliding groups: the last long-enough run, scanning back)
            if all(self._cached(g, keys[i]) is not None for g in range(self.full, self.groups)):
                run += 1
                if run >= self.need:
                    length = i + run
                    break
            else:
                run = 0
        else:
            length = run  # no long-enough run: only the one from block 0 (the scan ended inside it, or 0)
        if eagle and length:
            length -= 1
        for g in range(self.full):
            per_group[g] = [self._cached(g, keys[j]) for j in range(length)]
        skipped = self.layout.skipped(length * self.block_size, self.block_size)
        for g in range(self.full, self.groups):
            per_group[g] = [NULL] * skipped + [self._cached(g, keys[j]) for j in range(skipped, length)]
        return HybridHits(per_group, length, full * self.block_size if full > length else 0)

    def hit_units(self, hits: HybridHits) -> int:
        """Block ids a hit makes the request hold."""
        return len(hits.ids)

    def num_evictable(self, hits: HybridHits) -> int:
        return super().num_evictable(hits.ids)

    # -- holding blocks -------------------------------------------------------------------------------------

    def take_hits(self, request, hits: HybridHits) -> None:
        self.touch(hits.ids)
        request.block_ids = [list(blocks) for blocks in hits.per_group]
        request.num_blocks = len(hits.ids)
        request.num_cached_blocks = len(hits)
        request.num_skipped_blocks = self.layout.skipped(len(hits) * self.block_size, self.block_size)

    def take(self, request, num_blocks: int) -> None:
        """Give the request ``num_blocks`` more ids: the same number of new positions in every group (the blocks
        behind the window having been given back first, ``slide``), taken group by group from the free queue."""
        lists = self._lists(request)
        per_group = num_blocks // self.groups
        for g in range(self.groups):
            lists[g].extend(self._allocate(g, per_group))
        request.num_blocks += num_blocks

    def _allocate(self, g: int, n: int) -> list[int]:
        queue = self.free_queue
        if n > queue.size:
            raise RuntimeError(f"allocating {n} blocks with {queue.size} free")
        taken = []
        for _ in range(n):
            b = queue.next[queue.head]
            queue.remove(b)
            key = self.key_of[b]
            if key is not None:  # evict its cached content
                holders = self.blocks_by_key[key]
                del holders[b]
                if not holders:
                    del self.blocks_by_key[key]
                    if self.listener is not None and key[0] == 0:
                        self.listener((key[1],), False)
                self.key_of[b] = None
            self.ref_cnt[b] = 1
            taken.append(b)
        return taken

    def skipped_blocks(self, computed: int) -> int:
        """Blocks of a sliding group wholly behind the window once ``computed`` tokens are computed."""
        return self.layout.skipped(computed, self.block_size)

    def slide(self, request, computed: int) -> None:
        """Give back each sliding (or state) group's blocks it no longer needs once ``computed`` tokens are computed
        (vLLM's ``remove_skipped_blocks``, ``skipped_blocks``), the last first: cached ones to the free queue's end,
        others to its front."""
        skipped = self.skipped_blocks(computed)
        start = request.num_skipped_blocks
        if skipped <= start or not request.block_ids:
            return
        freed = 0
        for g in range(self.full, self.groups):
            blocks = request.block_ids[g]
            gone = []
            for j in range(start, min(skipped, len(blocks))):
                if blocks[j] != NULL:
                    gone.append(blocks[j])
                    blocks[j] = NULL
            self._release(reversed(gone))
            freed += len(gone)
        request.num_blocks -= freed
        request.num_skipped_blocks = skipped

    def _release(self, blocks) -> None:
        first, last = [], []
        for b in blocks:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                (first if self.key_of[b] is None else last).append(b)
        if first:
            self.free_queue.prepend_all(first)
        if last:
            self.free_queue.extend(last)

    def cache_full_blocks(self, request, num_tokens: int) -> None:
        """Cache the request's blocks that ``num_tokens`` known tokens fill: in every full group all of them; in a
        sliding group only the window's blocks before the prompt's replay boundary (its last block boundary before its
        last token) and before its junction, the ones a later hit can end on (vLLM's default
        ``prefix_cache_retention_interval`` 0, ``SlidingWindowManager.reachable_block_mask``)."""
        lists = request.block_ids
        if not lists:
            return
        bs = self.block_size
        full = min(num_tokens // bs, len(lists[0]))
        if full <= request.num_cached_blocks:
            return
        keys = request.block_keys.upto(full)
        stored = []
        kept: set[int] = set()
        for boundary in self.replay_boundaries(request):
            end = boundary // bs + self.eagle  # (with EAGLE the run ends a block past the boundary)
            kept.update(range(max(end - self.need, 0), end))
        for g in range(self.groups):
            blocks = lists[g]
            sliding = g >= self.full
            for j in range(request.num_cached_blocks, full):
                if (not sliding or j in kept) and self._store(g, blocks[j], keys[j]) and g == 0:
                    stored.append(keys[j])
        if stored and self.listener is not None:
            self.listener(stored, True)
        request.num_cached_blocks = full

    def replay_boundaries(self, request) -> tuple[int, ...]:
        """Where a later request can resume from this one's prompt (vLLM's ``replay_boundaries``: a resend's reach,
        the last block boundary before the last token; with EAGLE the block boundary below it and below an
        extension's), and the request's junction if it has one."""
        bs, prompt = self.block_size, request.num_prompt_tokens
        boundaries = ((max((prompt - 1) // bs * bs - bs, 0), max(prompt // bs * bs - bs, 0)) if self.eagle
                      else (prompt - 1,))
        if request.shared_prefix_boundary:
            boundaries += (request.shared_prefix_boundary,)
        return boundaries

    def _store(self, g: int, b: int, key) -> bool:
        """Cache block ``b`` of group ``g`` under ``key`` unless it is a null or cached already; whether the key is new
        to the cache (no other block held it)."""
        if b == NULL or self.key_of[b] is not None:
            return False
        key = (g, key)
        self.key_of[b] = key
        holders = self.blocks_by_key.get(key)
        if holders is None:
            self.blocks_by_key[key] = {b: None}
            return True
        holders[b] = None
        return False

    def free_request(self, request) -> None:
        """Drop the request's references, group by group, each group's blocks last first (vLLM's order)."""
        for blocks in request.block_ids:
            self._release(b for b in reversed(blocks) if b != NULL)
        request.block_ids = []
        request.num_cached_blocks = 0
        request.num_blocks = 0
        request.num_skipped_blocks = 0

    def reset_prefix_cache(self) -> None:
        if self.num_used_blocks:
            raise RuntimeError("resetting the prefix cache while blocks are in use")
        keys = [key[1] for key in self.blocks_by_key if key[0] == 0]
        self.blocks_by_key.clear()
        self.key_of = [None] * self.num_blocks
        if keys and self.listener is not None:
            self.listener(keys, False)
