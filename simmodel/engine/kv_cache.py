"""The KV block pool of one attention-DP rank."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simmodel.perf.capacity import cdiv as cdiv  # re-exported: the schedulers count blocks with it

if TYPE_CHECKING:
    import numpy as np

    from simmodel.perf.kv_layout import KvLayout


class BlockPool:
    """Usable KV blocks of one rank, counted, not addressed.

    Mirrors vLLM's ``BlockPool`` without prefix caching: a request holds
    ``cdiv(num_computed_tokens, block_size)`` blocks, taken as its context crosses block
    boundaries and all returned when it finishes or is preempted. vLLM's reserved null block
    is not part of ``num_blocks``. With sliding-window groups (``layout``, vLLM's hybrid KV cache
    manager) a request holds ``layout.blocks`` over its groups, and its sliding groups give back the
    blocks behind their window as it goes (``slide``).
    """

    __slots__ = ("num_blocks", "num_free_blocks", "block_size", "layout", "sliding", "position_blocks",
                 "fixed_blocks")
    caching = False
    states = False
    """(State groups that cache prefixes: ``engine.state_kv_cache``.)"""

    def __init__(self, num_blocks: int, block_size: int, layout: KvLayout | None = None) -> None:
        self.num_blocks = num_blocks
        self.num_free_blocks = num_blocks
        self.block_size = block_size
        self.layout = layout
        self.sliding = layout is not None and layout.sliding_groups > 0
        """Whether requests free blocks behind a sliding window (``slide``)."""
        self.position_blocks = 1 if layout is None else layout.position_blocks
        """Blocks a request takes for each ``block_size`` tokens of its sequence (``KvLayout.position_blocks``)."""
        self.fixed_blocks = 0 if layout is None else layout.fixed_blocks
        """Blocks a request holds whatever its length (``KvLayout.fixed_blocks``: its states)."""

    def blocks_for(self, tokens: int, computed: int) -> int:
        """Blocks a request holds with slots for ``tokens`` tokens once ``computed`` are computed (vLLM's
        ``get_num_blocks_to_allocate`` plus what it holds)."""
        if self.layout is None:
            return cdiv(tokens, self.block_size)
        return self.layout.blocks(tokens, computed, self.block_size)

    def slide(self, request, computed: int) -> None:
        """Free the request's sliding-window blocks wholly behind the window once ``computed`` tokens are computed,
        as vLLM's ``remove_skipped_blocks`` does at the start of ``allocate_slots`` (before the capacity check, so
        even a request then preempted or left unscheduled has given them back)."""
        layout = self.layout
        skipped = layout.skipped(computed, self.block_size)
        gone = skipped - request.num_skipped_blocks
        if gone > 0:
            self.free(gone * layout.sliding_groups)
            request.num_blocks -= gone * layout.sliding_groups
            request.num_skipped_blocks = skipped

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= self.num_free_blocks

    def allocate(self, num_blocks: int) -> None:
        if num_blocks > self.num_free_blocks:
            raise RuntimeError(f"allocating {num_blocks} blocks with {self.num_free_blocks} free")
        self.num_free_blocks -= num_blocks

    def take_for_run(self, num_blocks: int) -> None:
        """The blocks a run of passes takes (``engine.planner``), in one step before the frees of
        the requests finishing inside it are applied: the free count may dip below zero until they are (the
        run is never short of blocks at any of its own passes)."""
        self.num_free_blocks -= num_blocks

    def free(self, num_blocks: int) -> None:
        self.num_free_blocks += num_blocks
        if self.num_free_blocks > self.num_blocks:
            raise RuntimeError("freed more KV blocks than the pool holds")


class FreeBlockQueue:
    """Free block ids in eviction order, as a doubly linked list over arrays: O(1) to take the first,
    append, prepend or remove any block (vLLM's ``FreeKVCacheBlockQueue``)."""

    def __init__(self, num_blocks: int) -> None:
        head, tail = num_blocks, num_blocks + 1  # sentinels
        self.head, self.tail = head, tail
        self.next = list(range(1, num_blocks + 1)) + [0, -1]
        self.prev = [head] + list(range(num_blocks - 1)) + [-1, 0]
        self.next[head] = 0 if num_blocks else tail
        self.prev[tail] = num_blocks - 1 if num_blocks else head
        if num_blocks:
            self.next[num_blocks - 1] = tail
        self.inside = [True] * num_blocks
        self.size = num_blocks

    def __len__(self) -> int:
        return self.size

    def remove(self, b: int) -> None:
        p, n = self.prev[b], self.next[b]
        self.next[p], self.prev[n] = n, p
        self.inside[b] = False
        self.size -= 1

    def prepend_all(self, blocks: list[int]) -> None:
        """Put ``blocks`` at the front, keeping their order."""
        self._splice(self.head, blocks)

    def extend(self, blocks: list[int]) -> None:
        """Append ``blocks`` at the back, in order."""
        self._splice(self.prev[self.tail], blocks)

    def _splice(self, p: int, blocks: list[int]) -> None:
        """Insert ``blocks``, in order, right after ``p``."""
        nxt, prev, inside = self.next, self.prev, self.inside
        after = nxt[p]
        for b in blocks:
            nxt[p], prev[b] = b, p
            inside[b] = True
            p = b
        nxt[p], prev[after] = after, p
        self.size += len(blocks)


class PrefixCachingBlockPool:
    """Usable KV blocks of one rank with vLLM's automatic prefix caching (``enable_prefix_caching``).

    Mirrors vLLM 0.32's ``BlockPool`` for one full-attention group: blocks have ids and reference counts;
    a full block of a request is cached under the chained key of its content when it is allocated; a
    later request reuses the longest run of cached blocks that starts its prompt. Free blocks wait in an
    LRU queue: a freed request's blocks enter it tail-first (so its last blocks are evicted first),
    uncached ones at the front; allocation takes from the front and evicts the cached key of the block
    it takes. Cached blocks with no reference still count as free.

    ``blocks_by_key`` maps a cached key to the block that holds it, or to the blocks (a dict, in the order they were
    cached) once several do: most keys have one holder all their life, and a dict for each would cost a fifth of a
    long-prompt run's time (a subclass may keep dicts only; every reader here takes either). A key goes with its
    last holder: no dict here is ever empty.
    """

    caching = True
    sliding = False
    states = False
    layout = None
    """(One group: ``HybridPrefixCachingPool`` holds several.)"""
    position_blocks, fixed_blocks = 1, 0  # (as ``BlockPool``'s without groups)

    def __init__(self, num_blocks: int, block_size: int, eagle: bool = False) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.eagle = eagle
        """MTP/EAGLE drafts (vLLM's ``use_eagle_block_drop``): a hit gives up its last block, whose last token's hidden
        state the drafter needs computed again."""
        self.ref_cnt = [0] * num_blocks
        self.key_of: list[object | None] = [None] * num_blocks
        self.blocks_by_key: dict[object, int | dict[int, None]] = {}
        self.free_queue = FreeBlockQueue(num_blocks)
        self.num_queries = 0
        self.num_hits = 0
        self._prompt_keys: dict = {}
        """Per request ``first_free_holder`` was asked about: (blocks its cached prefix may span, their keys as a set),
        so that a request none of whose keys a free block there holds is passed over without a walk. (A request's
        keys follow from its content, fixed when it is placed; only how many blocks they span changes.) Pruned to
        the requests asked about once it holds more than twice as many, plus 64."""
        self.allocated: set[int] | None = None
        """When a set (a vLLM host tier watching for its flushes): the block ids taken for requests since it was
        last emptied, allocated from the free queue or hit in the cache (vLLM's blocks new to a request)."""
        self.listener = None
        """Called as ``listener(keys, stored)`` with the keys one call made cached (their first block) or evicted
        (their last block taken), in order: the KV block events vLLM publishes and a KV-aware router follows;
        None: nobody listens."""

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def blocks_for(self, tokens: int, computed: int) -> int:
        """Blocks a request holds with slots for ``tokens`` tokens (``BlockPool.blocks_for``, one group)."""
        return cdiv(tokens, self.block_size)

    def hit_units(self, hits: list[int]) -> int:
        """Block ids a hit makes the request hold: one per hit block (one group)."""
        return len(hits)

    def take(self, request, num_blocks: int) -> None:
        """Give the request ``num_blocks`` more blocks, taken from the front of the free queue."""
        request.block_ids.extend(self.allocate_ids(num_blocks))
        request.num_blocks = len(request.block_ids)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    def _cached_prefix(self, request) -> list[int | dict]:
        """The holders (``blocks_by_key``'s block, or blocks by id) of each block of the request's longest cached
        prefix, at most ``num_tokens − 1`` tokens (the last token is always recomputed to get its logits)."""
        prefix: list[int | dict] = []
        n = (request.num_tokens - 1) // self.block_size
        if not n or not self.blocks_by_key:
            return prefix
        keys, by_key = request.block_keys.upto(n), self.blocks_by_key
        for j in range(n):
            holders = by_key.get(keys[j])
            if holders is None:
                break
            prefix.append(holders)
        return prefix

    def find_hits(self, request) -> list[int]:
        """Cached blocks for the longest prefix of the request's tokens (``_cached_prefix``): one per block, less the
        last with MTP/EAGLE drafts (``eagle``)."""
        hits = [holders if holders.__class__ is int else next(iter(holders))
                for holders in self._cached_prefix(request)]
        return hits[:-1] if self.eagle else hits

    def _free_front(self, limit: int) -> list[int]:
        """The first ``limit`` blocks of the free queue (fewer if it is shorter), the next one an allocation takes
        first."""
        queue = self.free_queue
        nxt, tail = queue.next, queue.tail
        front = []
        b = nxt[queue.head]
        while b != tail and len(front) < limit:
            front.append(b)
            b = nxt[b]
        return front

    def free_position(self, blocks: set[int], limit: int) -> int | None:
        """Where the first of ``blocks`` sits in the free queue (0: the next block an allocation takes), if among
        the first ``limit``; else None."""
        return next((i for i, b in enumerate(self._free_front(limit)) if b in blocks), None)

    def first_free_holder(self, requests, limit: int) -> int | None:
        """Where the first free block that holds a block of one of the requests' cached prefixes (``find_hits``'
        blocks, or any other holder of theirs) sits in the free queue (0: the next block an allocation takes), if
        among the first ``limit``; else None. (A run that takes it changes what the request finds.)"""
        key_of = self.key_of
        # The cached blocks among the first ``limit`` free ones, by their positions.
        position = {b: i for i, b in enumerate(self._free_front(limit)) if key_of[b] is not None}
        if not position:
            return None
        earliest = next(iter(position.values()))
        keys_here = {key_of[b] for b in position}
        found = limit
        get = position.get
        known = self._prompt_keys
        if len(known) > 2 * len(requests) + 64:  # (most of those it knows have left the queue)
            known = self._prompt_keys = {request: known[request] for request in requests if request in known}
        for request in requests:
            n = (request.num_tokens - 1) // self.block_size
            entry = known.get(request)
            if entry is None or entry[0] != n:
                entry = known[request] = (n, set(request.block_keys.upto(n)[:n]))
            if entry[1].isdisjoint(keys_here):
                continue  # (none of its blocks is one of those here)
            for holders in self._cached_prefix(request):
                at = get(holders, limit) if holders.__class__ is int else min(get(b, limit) for b in holders)
                if at < found:
                    found = at
            if found == earliest:
                break  # (none can come sooner)
        return found if found < limit else None

    def num_evictable(self, block_ids: list[int]) -> int:
        """Hit blocks that sit in the free queue: touching them takes them out of the free count."""
        return sum(1 for b in block_ids if self.ref_cnt[b] == 0)

    def watch_allocations(self) -> set[int]:
        """Start recording the blocks taken for requests (``allocated``); returns the set they are added to."""
        self.allocated = set()
        return self.allocated

    def touch(self, block_ids: list[int]) -> None:
        if self.allocated is not None:
            self.allocated.update(block_ids)
        for b in block_ids:
            if self.ref_cnt[b] == 0:
                self.free_queue.remove(b)
            self.ref_cnt[b] += 1

    def count_lookup(self, request, cached_tokens: int) -> None:
        """A request's first lookup (not after a preemption): its tokens queried, ``cached_tokens`` of them found
        (``prefix_cache_hit_ratio``; the request's ``cached_tokens``)."""
        self.num_queries += request.num_tokens
        self.num_hits += cached_tokens
        request.num_cached_tokens = cached_tokens

    def take_hits(self, request, hits: list[int]) -> None:
        """A request starting from its cached prefix (``find_hits``' blocks) holds those blocks from now."""
        self.touch(hits)
        request.block_ids = list(hits)
        request.num_blocks = request.num_cached_blocks = len(hits)

    def allocate_ids(self, num_blocks: int) -> list[int]:
        queue = self.free_queue
        if num_blocks > queue.size:
            raise RuntimeError(f"allocating {num_blocks} blocks with {queue.size} free")
        # Take the first num_blocks of the free queue at once (the linked list's front).
        nxt, prev, inside = queue.next, queue.prev, queue.inside
        taken = []
        b = nxt[queue.head]
        key_of, ref_cnt, by_key = self.key_of, self.ref_cnt, self.blocks_by_key
        evicted = [] if self.listener is not None else None
        for _ in range(num_blocks):
            taken.append(b)
            inside[b] = False
            key = key_of[b]
            if key is not None:  # evict its cached content
                holders = by_key[key]
                if holders.__class__ is int or len(holders) == 1:  # (b alone holds it)
                    del by_key[key]
                    if evicted is not None:
                        evicted.append(key)
                else:
                    del holders[b]
                key_of[b] = None
            ref_cnt[b] = 1
            b = nxt[b]
        nxt[queue.head], prev[b] = b, queue.head
        queue.size -= num_blocks
        if self.allocated is not None:
            self.allocated.update(taken)
        if evicted:
            self.listener(evicted, False)
        return taken

    def allocate_one(self) -> int:
        """``allocate_ids(1)``'s block, for the per-block loop of a coalesced decode run."""
        queue = self.free_queue
        if not queue.size:
            raise RuntimeError("allocating 1 block with 0 free")
        b = queue.next[queue.head]
        queue.remove(b)
        key = self.key_of[b]
        if key is not None:  # evict its cached content
            holders = self.blocks_by_key[key]
            if holders.__class__ is int or len(holders) == 1:  # (b alone holds it)
                del self.blocks_by_key[key]
                if self.listener is not None:
                    self.listener((key,), False)
            else:
                del holders[b]
            self.key_of[b] = None
        self.ref_cnt[b] = 1
        if self.allocated is not None:
            self.allocated.add(b)
        return b

    def cache_full_blocks(self, request, num_tokens: int) -> None:
        """Cache the request's blocks that ``num_tokens`` known tokens fill (from where it left off)."""
        full = min(num_tokens // self.block_size, len(request.block_ids))
        if full <= request.num_cached_blocks:
            return
        keys = request.block_keys.upto(full)
        key_of, by_key, block_ids = self.key_of, self.blocks_by_key, request.block_ids
        stored = [] if self.listener is not None else None
        for j in range(request.num_cached_blocks, full):
            b = block_ids[j]
            if key_of[b] is None:
                key = keys[j]
                key_of[b] = key
                holders = by_key.get(key)
                if holders is None:
                    by_key[key] = b
                    if stored is not None:
                        stored.append(key)
                elif holders.__class__ is int:
                    by_key[key] = {holders: None, b: None}
                else:
                    holders[b] = None
        if stored:
            self.listener(stored, True)
        request.num_cached_blocks = max(request.num_cached_blocks, full)

    def reset_prefix_cache(self) -> None:
        """Forget every cached key (vLLM's ``reset_prefix_cache``), telling the listener; only with no block
        held: a worker that left its pool comes back, if ever, with an empty cache."""
        if self.num_used_blocks:
            raise RuntimeError("resetting the prefix cache while blocks are in use")
        keys = list(self.blocks_by_key)
        self.blocks_by_key.clear()
        self.key_of = [None] * self.num_blocks
        if keys and self.listener is not None:
            self.listener(keys, False)

    def free_request(self, request) -> None:
        """Drop the request's references; blocks reaching zero rejoin the free queue (see class doc)."""
        first, last = [], []
        ref_cnt, key_of = self.ref_cnt, self.key_of
        for b in reversed(request.block_ids):
            ref_cnt[b] -= 1
            if ref_cnt[b] == 0:
                (first if key_of[b] is None else last).append(b)
        queue = self.free_queue
        if first:
            queue.prepend_all(first)
        if last:
            queue.extend(last)
        request.block_ids = []
        request.num_cached_blocks = 0
        request.num_blocks = 0


def take_blocks(pool: BlockPool | PrefixCachingBlockPool, request, num_blocks: int) -> None:
    """Give the request ``num_blocks`` more blocks of ``pool``: ids taken from its free queue with prefix caching,
    else counted."""
    if pool.caching:
        pool.take(request, num_blocks)
    else:
        pool.allocate(num_blocks)
        request.num_blocks += num_blocks


def free_blocks(pool: BlockPool | PrefixCachingBlockPool, request) -> None:
    """Return every block the request holds to ``pool`` (it finished, was preempted or handed off)."""
    if pool.caching:
        pool.free_request(request)
    else:
        pool.free(request.num_blocks)
        request.num_blocks = 0
        request.num_skipped_blocks = 0


class BlockKeys:
    """The content key of each KV block of one request, chained like vLLM's block hashes.

    Block j's key hashes block j−1's key with what the block holds, so equal keys mean equal prefixes.
    ``content(j)`` says what block j holds: exact token ids, trace hash ids, or a shared prefix; tokens
    past what is known are unique to the request. Keys are computed on first use and kept; a ``TraceBlocks``
    content chains them itself (``TraceBlocks.chain``: the same keys, without a call per block).
    """

    __slots__ = ("content", "_keys", "_chain")

    def __init__(self, content) -> None:
        self.content = content
        self._keys: list[int] = []
        self._chain = content.chain if isinstance(content, TraceBlocks) else None

    def __call__(self, j: int) -> int:
        keys = self._keys
        if len(keys) <= j:
            self._extend(j + 1)
        return keys[j]

    def upto(self, n: int) -> list[int]:
        """The keys of blocks 0..n−1 (the list itself, possibly longer: read, do not change)."""
        if len(self._keys) < n:
            self._extend(n)
        return self._keys

    def run(self, start: int, stop: int) -> BlockRun:
        """Blocks ``start`` … ``stop`` − 1, as a tier keyed by groups of blocks is asked about them."""
        grouped = self._chain is not None and self.content.per > 1
        return BlockRun(self.upto(stop), start, stop, self.content if grouped else None)

    def _extend(self, n: int) -> None:
        keys, content = self._keys, self.content
        if self._chain is not None:
            self._chain(keys, n)
            return
        parent = keys[-1] if keys else 0
        for j in range(len(keys), n):
            parent = hash((parent, content(j)))
            keys.append(parent)


class BlockRun:
    """Blocks ``start`` … ``stop`` − 1 of one request: its chained keys from block 0 (``keys``, possibly longer), and
    how they fall into the trace's blocks. Blocks 0 … ``known`` − 1 lie ``per`` to a trace block (``TraceBlocks``),
    so block j's key follows from the key of block ``(j // per) × per`` and from j alone: equal keys there mean
    equal trace blocks up to j, and the KV blocks of one trace block hold its tokens in order. A host tier keys
    such a group of blocks once (``HostTier``). ``trace``: what the blocks hold, if they group (else ``per`` 1:
    no groups)."""

    __slots__ = ("keys", "start", "stop", "trace", "per", "known")

    def __init__(self, keys: list, start: int, stop: int, trace: TraceBlocks | None = None) -> None:
        self.keys, self.start, self.stop, self.trace = keys, start, stop, trace
        self.per, self.known = (trace.per, trace.known) if trace is not None else (1, 0)

    def __len__(self) -> int:
        return self.stop - self.start

    def list(self) -> list:
        """The run's keys."""
        return self.keys[self.start:self.stop]

    def pick(self, where: np.ndarray) -> list:
        """The keys of the run's blocks at ``where`` (indices in the run, ascending): a slice if they are a row."""
        a, b = self.start + int(where[0]), self.start + int(where[-1]) + 1
        return self.keys[a:b] if b - a == len(where) else [self.keys[self.start + i] for i in where.tolist()]

    def sub(self, start: int, stop: int) -> BlockRun:
        """Blocks ``start`` … ``stop`` − 1 of the same request."""
        return BlockRun(self.keys, start, stop, self.trace)


class TraceBlocks:
    """What each KV block of a request holds when it lies inside one of the trace's blocks (the KV block size divides
    the trace's: Mooncake's 512-token blocks, or the same size): tokens ``lo``..``hi`` of trace block ``t``, given as
    ``((hash id, lo, hi),)`` (``trace_block_content``'s one segment); a block past the tokens the trace knows
    belongs to the request alone (``unique``). A long prompt has thousands of blocks: ``chain`` makes their keys in
    one loop, as ``BlockKeys`` would from ``__call__`` one block at a time."""

    __slots__ = ("hash_ids", "per", "block_size", "known", "unique")

    def __init__(self, hash_ids: tuple[int, ...], per: int, block_size: int, known: int, unique: object) -> None:
        self.hash_ids, self.per, self.block_size, self.unique = hash_ids, per, block_size, unique
        self.known = known // block_size
        """Blocks wholly inside the tokens the trace knows (block j is iff (j + 1) × block_size ≤ its tokens)."""

    def __call__(self, j: int) -> object:
        if j >= self.known:
            return (self.unique, j)
        t, part = divmod(j, self.per)
        lo = part * self.block_size
        return ((self.hash_ids[t], lo, lo + self.block_size),)

    def chain(self, keys: list[int], n: int) -> None:
        """Append the keys of blocks ``len(keys)``..n − 1 to ``keys`` (chained from its last)."""
        bs, per, hash_ids, append = self.block_size, self.per, self.hash_ids, keys.append
        parent = keys[-1] if keys else 0
        j = len(keys)
        known = min(n, self.known)
        if per == 1:  # (one KV block per trace block)
            for h in hash_ids[j:known]:
                parent = hash((parent, ((h, 0, bs),)))
                append(parent)
            j = max(j, known)
        while j < known:  # trace block by trace block
            t, part = divmod(j, per)
            stop = min(known, (t + 1) * per)
            keys += trace_block_keys(parent, hash_ids[t], part * bs, (part + stop - j) * bs, bs)
            parent = keys[-1]
            j = stop
        unique = self.unique
        for k in range(j, n):
            parent = hash((parent, (unique, k)))
            append(parent)


def trace_block_keys(parent: int, hash_id: int, lo: int, hi: int, block_size: int) -> list[int]:
    """The keys of the KV blocks holding tokens ``lo`` … ``hi`` − 1 of trace block ``hash_id``, chained from
    ``parent`` (the key of the block before them): ``TraceBlocks``' content, one block at a time."""
    keys = []
    for start in range(lo, hi, block_size):
        parent = hash((parent, ((hash_id, start, start + block_size),)))
        keys.append(parent)
    return keys


def token_block_content(token_ids: list[int], block_size: int, unique: object) -> object:
    """Content of block j from exact prompt token ids; blocks past the prompt belong to ``unique``."""
    def content(j: int) -> object:
        lo, hi = j * block_size, (j + 1) * block_size
        if hi <= len(token_ids):
            return tuple(token_ids[lo:hi])
        return (unique, j)
    return content


def trace_block_content(hash_ids: tuple[int, ...], trace_block_size: int, num_prompt_tokens: int,
                        block_size: int, unique: object) -> object:
    """Content of block j from a trace's per-block hash ids (e.g. Mooncake's 512-token blocks)."""
    known = min(num_prompt_tokens, len(hash_ids) * trace_block_size)
    if trace_block_size % block_size == 0:  # each KV block inside one trace block (Mooncake's 512, or the same size)
        return TraceBlocks(hash_ids, trace_block_size // block_size, block_size, known, unique)

    def content(j: int) -> object:
        lo, hi = j * block_size, (j + 1) * block_size
        if hi > num_prompt_tokens or hi > len(hash_ids) * trace_block_size:
            return (unique, j)
        first, last = lo // trace_block_size, (hi - 1) // trace_block_size
        return tuple((hash_ids[t], max(lo, t * trace_block_size) - t * trace_block_size,
                      min(hi, (t + 1) * trace_block_size) - t * trace_block_size) for t in range(first, last + 1))
    return content
