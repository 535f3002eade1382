"""A host-memory KV tier: blocks kept by their content keys, evicted least recently used.

Follows vLLM 0.32's ``CPUOffloadingManager`` with its LRU policy: a block takes its slot when its store is
prepared and can be read only once the copy has landed (before that a lookup that reaches it is *pending*:
the request waits, it does not miss); a load pins the blocks it reads. Only a store evicts, and only blocks
that have landed and that no load reads; when it cannot free room for all of a request's new blocks it
stores none of them. Recency is set when a block is stored and again when a request that used it finishes
(``touch_reversed``: its prefix's head becomes the most recent, so a prefix is evicted from its tail);
lookups leave it alone.

How it is kept: a tier holds hundreds of thousands of blocks and a request stores, touches and evicts
hundreds at a time, so each block has a *slot* (a key → slot dict), and what the rules ask of a block
(its recency, when it lands, from when it may go, the loads reading it) lives in arrays over slots, changed
a request's blocks at a time. Recency is a stamp from a counter that every store and touch advances, and a
log of (slot, stamp), appended to in stamp order, is the LRU order: an entry whose slot has been stamped again
since, or freed, is stale and skipped (and dropped when the log fills). Eviction reads the log from its head.

The key → slot dict is most of a busy tier's cost (a block stored is looked up, added and, later, dropped), so
while every request it is asked about lies in the trace's blocks (``BlockRun``: ``per`` KV blocks to a trace
block, Mooncake's), it keys *groups*: the dict maps the key of a trace block's first KV block to a group of
``per`` slots, and block j of a request is slot ``per × group + j mod per`` of the group its block
``(j // per) × per`` names. That is exact because the keys are chained: two requests whose blocks there have the
same key hold the same trace blocks up to it, so their KV blocks of that trace block are the same blocks in the
same order. A request's blocks past what the trace knows are groups of one. No key is kept per block: those of a
group's blocks after its first follow from its key and its trace block's hash id (``trace_block_keys``), and are
made only when asked for (``keys``, ``in``, ``lands_at``) or when the first request asked about that does not
group so (a prompt of other content, another ``per`` or block size) turns the tier back into a dict of blocks,
slots kept, for good.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from itertools import repeat

import numpy as np

from simmodel.engine.kv_cache import BlockRun, trace_block_keys

UNQUEUED = float("inf")
"""When a block lands whose copy is not queued yet (its slot is taken as the pass that computes it is planned)."""

_FREE = -1
"""The stamp of a slot that holds no block."""

_NONE = np.zeros(0, np.int64)
"""No slots."""


class Copy:
    """The copy of one request's blocks to the tier: when it lands (``UNQUEUED`` until it is queued), and when its
    blocks can be evicted (when it lands, or when they have been written on to storage). Its blocks share it, so
    that queueing the copy sets their times at once; ``slots`` are the tier's slots its blocks took, ``taken``
    which of the blocks a store was given they are (their indices among them; None: all)."""

    __slots__ = ("at", "free_at", "slots", "tier", "taken")

    def __init__(self, tier: HostTier | None = None, slots: np.ndarray | None = None) -> None:
        self.at = self.free_at = UNQUEUED
        self.tier, self.slots, self.taken = tier, slots, None


class Held:
    """Where a run of blocks was found or put (their slots, as of each slot's ``_gen``), so that a later touch or
    the end of a load need not look their keys up again: a slot whose generation has moved on was emptied
    since, and only its key is looked up."""

    __slots__ = ("slots", "gens", "tier")

    def __init__(self, tier: HostTier, slots: np.ndarray, gens: np.ndarray) -> None:
        self.tier, self.slots, self.gens = tier, slots, gens

    def __len__(self) -> int:
        return len(self.slots)


class HostTier:
    """Up to ``capacity`` blocks, each under its content key with the instant its store lands.

    Its calls take the blocks they act on as a ``BlockRun`` or as a plain list of keys (a run that does not group:
    asked so, the tier keys blocks, not groups)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.num_failed = 0
        """Stores that could not take their blocks (no room could be freed: every block landing or being read)."""
        self.num_evicted = 0
        self.never_fits = False
        """Whether the last store that took nothing asked for more blocks than the tier could ever give it (it will
        fail however often it is made again)."""
        self.version = 0
        """Changes whenever a block is added, evicted or starts being read (what a lookup that found no landing or
        read block depends on)."""
        self._per = 0
        """Slots to a group: the ``per`` of the runs it has been asked about while they all group alike; 1 once one
        did not (a dict of blocks), 0 while it has been asked about none."""
        self._slot: dict[object, int] = {}
        """Key → its slot (``_per`` 1), or the key of a group's first block → the group (``_per`` > 1)."""
        self._free: list[int] = []
        """Slots holding no block (``_per`` 1), or groups holding none."""
        self._count = 0
        """Blocks held (``_per`` > 1; the dict's length otherwise)."""
        self._group_key: list = []
        """Group → the key it is under (``_per`` > 1; group 0 is never taken, so that a key not here can name it)."""
        self._group_count: list[int] = []
        """Group → blocks it holds (``_per`` > 1)."""
        self._group_hash: list = []
        """Group → the hash id of the trace block its blocks hold (None: a group of one), from which the keys of its
        blocks after the first follow (``trace_block_keys``; ``_per`` > 1: no key is kept per block)."""
        self._block_size = 0
        """Tokens to a KV block (``_per`` > 1)."""
        self._div = self._mod = _NONE
        """0, 1, 2, … divided by ``_per``, and the remainders (``_per`` > 1; as long as the longest run yet)."""
        size = 0
        self._key = np.empty(size, object)
        """Slot → its key (``_per`` 1)."""
        self._stamp = np.full(size, _FREE, np.int64)
        """Slot → its recency (larger: more recent), ``_FREE`` for a free slot."""
        self._at = np.full(size, UNQUEUED)
        """Slot → when its block's copy lands (readable from then)."""
        self._free_at = np.full(size, UNQUEUED)
        """Slot → from when its block may be evicted (landed, and written on to storage if it is)."""
        self._reads = np.zeros(size, np.int64)
        """Slot → loads reading its block now (it cannot be evicted)."""
        self._gen = np.zeros(size, np.int64)
        """Slot → how many blocks it has held and dropped (``Held``)."""
        self._kept = np.zeros(size, bool)
        """Slot → whether the eviction being chosen must leave its block (``_victims``' ``protected``; all False
        between calls)."""
        self._looked: tuple = (-1, None, 0, 0, _NONE)
        """(``version``, keys, start, stop, their slots) of the last lookup that found a run: the load that follows
        it reads them without looking them up again."""
        self._num_reads = 0
        self._clock = 0
        """The next stamp."""
        self._log_slot = np.zeros(1024, np.int64)
        self._log_stamp = np.zeros(1024, np.int64)
        """The LRU log: (slot, stamp) of every store and touch in stamp order, ``_head`` … ``_tail`` − 1 kept."""
        self._head = self._tail = 0
        self._landing: list[tuple[int, int]] = []
        """(when it lands, how many blocks) of the stores not landed yet, as of ``_num_landed`` (a heap)."""
        self._num_landed = 0
        """Blocks here whose store has landed (the most a store could evict), as of the last ``_landed_by``."""

    def __len__(self) -> int:
        return self._count if self._per > 1 else len(self._slot)

    @property
    def keys_groups(self) -> bool:
        """Whether it keys groups of blocks (every request asked about so far lies in trace blocks alike)."""
        return self._per > 1

    def __contains__(self, key: object) -> bool:
        return self._where(key) is not None

    def keys(self) -> list:
        """The keys held, least recently used first."""
        return self._keys_of(self._live(self._head, self._tail))

    def lands_at(self, key: object) -> float:
        """When the copy that brings ``key`` lands (``UNQUEUED`` while it is not queued)."""
        slot = self._where(key)
        if slot is None:
            raise KeyError(key)
        return _instant(self._at[slot])

    def scan(self, keys: BlockRun | list, now: int) -> tuple[int, int, float | None, bool]:
        """The run of ``keys`` held here from the first: its length; how many keys after it are not here, up to the
        next one that is (or the end); the earliest instant one of its blocks lands after ``now`` (None if all
        have landed; ``UNQUEUED`` if the only ones not landed are not queued yet); and whether a load reads one
        of them."""
        slots = self._find(_as_run(keys))
        missing = (slots < 0).nonzero()[0]
        n = int(missing[0]) if len(missing) else len(slots)
        late, read = None, False
        if n:
            run = slots[:n]
            at = self._at[run]
            later = at[at > now]
            if len(later):
                late = _instant(later.min())
            read = bool(self._num_reads) and bool(self._reads[run].any())
        after = (slots[n + 1:] >= 0).nonzero()[0]
        gap = (int(after[0]) + 1 if len(after) else len(slots) - n) if n < len(slots) else 0
        return n, gap, late, read

    def lookup(self, keys: BlockRun | list, now: int) -> tuple[int, int | None]:
        """How many of ``keys``, from the first, can be loaded at ``now`` (a missing key ends the run), with None.
        If the run reaches a block still landing, or one another load reads, the request waits instead of
        missing: (−1, when that block lands), or (−1, None) for a block being read (its load's end wakes the
        rank) or one whose copy is not queued yet (the end of the pass that computes it does)."""
        run = _as_run(keys)
        per, start = self._per, run.start
        if not len(run):
            return 0, None
        if per <= 1 or per == run.per:  # (most lookups miss at once: its first block's key, or its group's, is not here)
            first = run.keys[start - start % per if per > 1 and start < run.known else start]
            if first not in self._slot:
                return 0, None
        slots = self._find(run)
        missing = (slots < 0).nonzero()[0]
        if len(missing):
            slots = slots[:missing[0]]
        at = self._at[slots]
        late = (at > now).nonzero()[0]
        if len(late):
            t = _instant(at[late[0]])  # (the first such block, in prompt order)
            return -1, None if t == UNQUEUED else t
        if self._num_reads and self._reads[slots].any():
            return -1, None
        if len(slots):
            self._looked = (self.version, run.keys, run.start, run.start + len(slots), slots)
        return len(slots), None

    def read(self, keys: BlockRun | list) -> Held:
        """A load starts reading ``keys``: they stay until ``done_reading`` (given what this returns)."""
        run = _as_run(keys)
        version, looked, start, stop, found = self._looked
        if version == self.version and start == run.start and run.stop <= stop and (
                looked is run.keys or looked[start:run.stop] == run.list()):
            slots = found[:len(run)]  # (the lookup just made found them: nothing has moved since)
        else:
            slots = self._find(run)
            if (slots < 0).any():
                raise KeyError("host tier: a load reads a block it does not hold")
        self._reads[slots] += 1  # (a load's keys are distinct)
        self._num_reads += len(slots)
        self.version += 1  # (a lookup reaching these now waits)
        return self._held(slots)

    def done_reading(self, held: Held) -> None:
        """A load that ``read`` blocks has ended (they cannot have moved while read)."""
        self._reads[held.slots] -= 1
        self._num_reads -= len(held.slots)

    def store(self, keys: BlockRun | list, now: int) -> tuple[list, Copy, Held] | None:
        """Take slots for those of ``keys`` not here (landed or landing), evicting the least recently used blocks
        that have landed, are not read and are not among ``keys``; returns the keys taken, their ``Copy``
        (``landed`` says when it lands, once it is queued) and where all of ``keys`` are held, or None, taking
        none, if not enough room can be freed."""
        run = _as_run(keys)
        slots = self._find(run)
        absent = slots < 0
        num_new = int(np.count_nonzero(absent))
        if not num_new:
            return [], Copy(), self._held(slots)
        num_here = len(slots) - num_new
        over = len(self) + num_new - self.capacity
        if over > 0:
            fits = num_new <= self.capacity - num_here
            here = slots[~absent] if num_here else None
            chosen = self._victims(over, now, here) if fits and self._landed_by(now) >= over else None
            if chosen is None:
                self.num_failed += 1
                self.never_fits = not fits
                return None
            self._evict(*chosen)  # (never a block of ``keys``: the slots found stay theirs)
        self.version += 1
        if num_here:
            where = absent.nonzero()[0]
            copy = self._add(run, where)
            copy.taken = where
            slots[where] = copy.slots
            new = run.pick(where)
        else:
            copy = self._add(run, None)
            slots = copy.slots
            new = run.list()
        return new, copy, self._held(slots)

    def promote(self, keys: BlockRun | list, now: int) -> tuple[int, Copy]:
        """Take slots for ``keys`` (none of them here), to be read from storage: as many of them, from the first,
        as there is room for once the least recently used blocks that can go are evicted. vLLM's tiering manager
        takes them one at a time, each evicting the least recently used block that can go, until one finds none
        (``_initiate_promotion``); a slot taken is landing, so it never makes room for the next one, and one
        evicting scan does the same. Returns how many were taken and their ``Copy``."""
        run = _as_run(keys)
        count = len(run)
        over = len(self) + count - self.capacity
        if over > 0:
            victims, end = self._victims(over, now, None, partial=True) if self._landed_by(now) else (_NONE, None)
            count -= over - len(victims)
            self._evict(victims, end)
        if count <= 0:
            return 0, Copy()
        self.version += 1
        return count, self._add(run.sub(run.start, run.start + count), None)

    def landed(self, copy: Copy, count: int, at: int, pinned: bool = False) -> None:
        """The ``count`` blocks of ``copy`` (``store``) land at ``at``: readable from then on, and evictable too
        unless ``pinned`` (a write to storage will read them: evictable once released)."""
        if copy.tier is self and copy.at == UNQUEUED:  # (a copy lands once; its slots may be reused after)
            self._at[copy.slots] = at
        copy.at = at
        if not pinned:
            self.release(copy, count, at)

    def release(self, copy: Copy, count: int, at: int) -> None:
        """The ``count`` blocks of ``copy`` may be evicted from ``at`` on."""
        if copy.tier is self and copy.free_at == UNQUEUED:  # (released once; its slots may be reused after)
            self._free_at[copy.slots] = at
        copy.free_at = at
        heappush(self._landing, (at, count))

    def touch_reversed(self, keys: BlockRun | list, held: list[Held] | None = None) -> None:
        """A request that used ``keys`` (a prefix, in order) finished: they become the most recently used, the
        first of them most of all. ``held``: where they were found or put, in order (each key's slot is then
        looked up only if it has been emptied since)."""
        run = _as_run(keys)
        self._settle(run)
        if held and all(h.tier is self for h in held) and sum(map(len, held)) == len(run):
            slots = held[0].slots if len(held) == 1 else np.concatenate([h.slots for h in held])
            gens = held[0].gens if len(held) == 1 else np.concatenate([h.gens for h in held])
            if (self._gen[slots] != gens).any():  # (some were emptied since: where are they now?)
                slots = self._find(run)
        else:
            slots = self._find(run)
        slots = slots[slots >= 0][::-1]
        if len(slots):
            self._stamp_log(slots)

    # -- keys and slots -------------------------------------------------------------------------------

    def _settle(self, run: BlockRun) -> None:
        """Key the tier by groups for a first run that groups (``per`` > 1), or by blocks for one that does not
        group as the tier does (``_flatten``: another ``per``, or another block size, whose keys would not follow
        from a group's key as its blocks' do)."""
        per = self._per
        if per == 1 or per == run.per and run.trace.block_size == self._block_size:
            return
        if per == 0:  # (nothing held yet)
            self._per = run.per
            if run.per > 1:
                self._block_size = run.trace.block_size
                self._grow_groups(0)
        else:
            self._flatten()

    def _flatten(self) -> None:
        """Key each block held under its own key from now on, in the slot it has (a run that does not group as the
        tier's groups do could otherwise miss a block held in one)."""
        live = np.flatnonzero(self._stamp != _FREE)
        keys = self._keys_of(live)
        self._key = np.empty(len(self._stamp), object)
        self._key[live] = np.fromiter(keys, object, len(keys))
        self._slot = dict(zip(keys, live.tolist()))
        self._free = np.flatnonzero(self._stamp == _FREE)[::-1].tolist()
        self._per = 1
        self._group_key, self._group_hash, self._group_count = [], [], []
        self._div = self._mod = _NONE

    def _keys_of(self, slots: np.ndarray) -> list:
        """The keys of the blocks in ``slots``."""
        per = self._per
        if per <= 1:
            return self._key[slots].tolist()
        heads, made = self._group_key, {}
        keys = []
        for group, j in zip((slots // per).tolist(), (slots % per).tolist()):
            if not j:
                keys.append(heads[group])
                continue
            block = made.get(group)
            if block is None:
                bs = self._block_size
                block = made[group] = [heads[group]] + trace_block_keys(heads[group], self._group_hash[group], bs,
                                                                         per * bs, bs)
            keys.append(block[j])
        return keys

    def _where(self, key: object) -> int | None:
        """The slot of ``key``, or None (for inspection: a search of every slot while the tier keys groups)."""
        if self._per <= 1:
            return self._slot.get(key)
        live = np.flatnonzero(self._stamp != _FREE)
        found = [slot for slot, k in zip(live.tolist(), self._keys_of(live)) if k == key]
        return found[0] if found else None

    def _find(self, run: BlockRun) -> np.ndarray:
        """The slot of each block of ``run``, −1 where it is not here."""
        self._settle(run)
        keys, start, stop = run.keys, run.start, run.stop
        per = self._per
        if per <= 1:
            found = list(map(self._slot.get, keys[start:stop]))
            if None in found:
                found = [-1 if slot is None else slot for slot in found]
            return np.array(found, np.int64)
        grouped = min(stop, run.known)
        lone = max(start, grouped)  # (blocks past the trace's: a group of one each)
        get = self._slot.get  # (a key not here names group 0, never taken: its slots hold no block)
        found = _NONE
        if start < grouped:  # (blocks in trace blocks: one key per group)
            first = start // per * per
            heads = keys[first:grouped:per]
            groups = np.fromiter(map(get, heads, repeat(0, len(heads))), np.int64, len(heads))
            div, mod = self._div_mod(grouped - first)
            groups *= per
            found = groups[div[start - first:grouped - first]] + mod[start - first:grouped - first]
        if lone < stop:
            alone = np.fromiter(map(get, keys[lone:stop], repeat(0, stop - lone)), np.int64, stop - lone) * per
            found = np.concatenate([found, alone]) if len(found) else alone
        if not len(found):
            return np.zeros(0, np.int64)
        found[self._stamp[found] == _FREE] = -1  # (a new array: the lookups above made it)
        return found

    def _div_mod(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``_div`` and ``_mod``, at least ``n`` long."""
        if len(self._div) < n:
            every = np.arange(max(n, 2 * len(self._div)), dtype=np.int64)
            self._div, self._mod = every // self._per, every % self._per
        return self._div, self._mod

    def _add(self, run: BlockRun, where: np.ndarray | None) -> Copy:
        """Give the blocks of ``run`` (those at ``where``, if given), none of them here, slots as the most recent
        blocks, in order; returns their ``Copy``."""
        self._settle(run)
        if self._per <= 1:
            keys = run.list() if where is None else run.pick(where)
            taken = self._add_blocks(keys)
            self._key[taken] = np.fromiter(keys, object, len(keys))
        else:
            taken = self._add_grouped(run, where)
        self._at[taken] = self._free_at[taken] = UNQUEUED
        self._stamp_log(taken)
        return Copy(self, taken)

    def _add_blocks(self, keys: list) -> np.ndarray:
        """Free slots for ``keys``, each under its own key."""
        k, free = len(keys), self._free
        if len(free) < k:
            self._grow(k - len(free))
        slots = free[-k:]
        del free[-k:]
        slots.reverse()  # (the lowest free slots first: a tier that never evicts fills 0, 1, 2, …)
        before = len(self._slot)
        self._slot.update(zip(keys, slots))
        if len(self._slot) != before + k:  # (block keys are chained hashes: never so in the engine)
            _consume(map(self._slot.__delitem__, dict.fromkeys(keys)))
            free.extend(reversed(slots))
            raise ValueError("host tier: the keys of one store must be distinct and new")
        return np.array(slots, np.int64)

    def _add_grouped(self, run: BlockRun, where: np.ndarray | None) -> np.ndarray:
        """The slots of the blocks of ``run`` (at ``where``) in their groups, taking a group for each that has
        none (``_find``'s rule)."""
        per, keys, start, known = self._per, run.keys, run.start, run.known
        at = np.arange(start, run.stop) if where is None else where + start
        inside = len(at) if run.stop <= known else int(np.searchsorted(at, known))
        slots = np.empty(len(at), np.int64)
        count, hash_ids = self._group_count, run.trace.hash_ids
        if inside:  # (blocks in trace blocks)
            first = int(at[0]) // per * per
            div, mod = self._div_mod(int(at[inside - 1]) + 1 - first)
            if where is None:
                of, offset = div[start - first:start - first + inside], mod[start - first:start - first + inside]
            else:
                local = at[:inside] - first
                of, offset = div[local], mod[local]
            counts = np.bincount(of)
            groups = []
            slot_of, free, group_key, group_hash = self._slot, self._free, self._group_key, self._group_hash
            get = slot_of.get
            for head, n in zip(range(first, first + len(counts) * per, per), counts.tolist()):
                if not n:
                    groups.append(0)
                    continue
                key = keys[head]
                group = get(key)
                if group is None:  # (``_group``, inline: a store takes a group for most of its trace blocks)
                    if not free:
                        self._grow_groups(1)  # (grows the lists in place)
                    group = slot_of[key] = free.pop()
                    group_key[group], group_hash[group], count[group] = key, hash_ids[head // per], n
                else:
                    count[group] += n
                groups.append(group)
            slots[:inside] = (np.array(groups, np.int64) * per)[of] + offset
        for i, j in enumerate(at[inside:].tolist(), inside):  # (blocks past the trace's: a group each)
            group = self._group(keys[j], None)
            count[group] = 1
            slots[i] = group * per
        self._count += len(at)
        return slots

    def _group(self, key: int, hash_id: int | None) -> int:
        """The group under ``key`` (of a block that starts trace block ``hash_id``, or of a block of its own: None),
        taken if there is none."""
        group = self._slot.get(key)
        if group is None:
            if not self._free:
                self._grow_groups(1)
            group = self._slot[key] = self._free.pop()
            self._group_key[group], self._group_hash[group], self._group_count[group] = key, hash_id, 0
        return group

    def _evict_keys(self, victims: np.ndarray) -> None:
        """Drop the keys of the blocks in slots ``victims`` (or of the groups they empty)."""
        per = self._per
        if per <= 1:
            _consume(map(self._slot.__delitem__, self._key[victims].tolist()))
            self._key[victims] = None
            self._free.extend(victims.tolist())
            return
        groups = victims // per  # (in runs: the log holds a store's blocks, or a touched prefix, in a row)
        cuts = ((groups[1:] != groups[:-1]).nonzero()[0] + 1).tolist()
        count, empty = self._group_count, []
        for group, a, b in zip(groups[[0] + cuts].tolist(), [0] + cuts, cuts + [len(groups)]):
            left = count[group] = count[group] - (b - a)
            if not left:
                empty.append(group)
        _consume(map(self._slot.__delitem__, map(self._group_key.__getitem__, empty)))
        self._free.extend(empty)  # (their keys stay in the columns until the groups are taken again)
        self._count -= len(victims)

    def _held(self, slots: np.ndarray) -> Held:
        return Held(self, slots, self._gen[slots])

    def _grow(self, more: int) -> None:
        """At least ``more`` slots more (never past ``capacity`` while each block is keyed: a full tier evicts
        before it adds)."""
        old = len(self._stamp)
        size = min(max(2 * old, old + more, 1024), max(self.capacity, old + more))
        self._grow_slots(size)
        self._free[:0] = range(size - 1, old - 1, -1)  # (popped from the end: lowest first)

    def _grow_groups(self, more: int) -> None:
        """At least ``more`` groups more (``_per`` slots each)."""
        old = len(self._group_count)
        size = max(2 * old, old + more, 1024 // self._per + 1)
        for column, fill in ((self._group_key, None), (self._group_hash, None), (self._group_count, 0)):
            column.extend([fill] * (size - old))
        self._grow_slots(size * self._per)
        self._free[:0] = range(size - 1, max(old, 1) - 1, -1)  # (group 0 is never taken)

    def _grow_slots(self, size: int) -> None:
        grow = size - len(self._stamp)
        if self._per <= 1:  # (groups know their blocks' keys)
            self._key = np.concatenate([self._key, np.empty(grow, object)])
        self._stamp = np.concatenate([self._stamp, np.full(grow, _FREE, np.int64)])
        self._at = np.concatenate([self._at, np.full(grow, UNQUEUED)])
        self._free_at = np.concatenate([self._free_at, np.full(grow, UNQUEUED)])
        self._reads = np.concatenate([self._reads, np.zeros(grow, np.int64)])
        self._gen = np.concatenate([self._gen, np.zeros(grow, np.int64)])
        self._kept = np.concatenate([self._kept, np.zeros(grow, bool)])

    # -- the LRU log ----------------------------------------------------------------------------------

    def _stamp_log(self, slots: np.ndarray) -> None:
        """Make ``slots`` the most recent, in order (the last most of all)."""
        k = len(slots)
        if self._tail + k > len(self._log_slot):
            self._compact(k)
        stamps = np.arange(self._clock, self._clock + k, dtype=np.int64)
        self._clock += k
        self._stamp[slots] = stamps
        self._log_slot[self._tail:self._tail + k] = slots
        self._log_stamp[self._tail:self._tail + k] = stamps
        self._tail += k

    def _fresh(self, lo: int, hi: int) -> np.ndarray:
        """Which of the log's entries ``lo`` … ``hi`` − 1 are not stale (their slot's stamp is still theirs)."""
        return self._stamp[self._log_slot[lo:hi]] == self._log_stamp[lo:hi]

    def _live(self, lo: int, hi: int) -> np.ndarray:
        """The slots of the log's entries ``lo`` … ``hi`` − 1 that are not stale, in LRU order."""
        return self._log_slot[lo:hi][self._fresh(lo, hi)]

    def _compact(self, more: int) -> None:
        """Drop the log's stale entries, making room for ``more`` (the array grows while live entries would fill a
        quarter of it: a busy tier's log turns over its blocks many times, and each compaction reads it whole)."""
        lo, hi = self._head, self._tail
        keep = self._fresh(lo, hi)
        slots, stamps = self._log_slot[lo:hi][keep], self._log_stamp[lo:hi][keep]
        n = len(slots)
        size = len(self._log_slot)
        while 4 * (n + more) > size:
            size *= 2
        if size != len(self._log_slot):
            self._log_slot, self._log_stamp = np.zeros(size, np.int64), np.zeros(size, np.int64)
        self._log_slot[:n], self._log_stamp[:n] = slots, stamps
        self._head, self._tail = 0, n

    def _victims(self, count: int, now: int, protected: np.ndarray | None,
                 partial: bool = False) -> tuple[np.ndarray, int | None] | None:
        """The slots of the ``count`` least recently used blocks that can go (landed by ``now`` and written on to
        storage, no load reading them, not in ``protected``), or None if there are fewer (all there are if
        ``partial``); with where the log's head may move to once they are evicted (``_scan_victims``)."""
        kept = self._kept
        if protected is not None:
            kept[protected] = True
        try:
            found, need, end = self._scan_victims(count, now, protected is not None)
        finally:
            if protected is not None:
                kept[protected] = False
        if need and not partial:
            return None
        return (np.concatenate(found) if found else _NONE), end

    def _scan_victims(self, need: int, now: int, protect: bool) -> tuple[list[np.ndarray], int, int | None]:
        """Read the log from its head for up to ``need`` blocks that can go (``_victims``; with ``protect``, not
        flagged in ``_kept``): their slots, in chunks; how many were not found; and, if every block it read could
        go, the log's index after the last one it found (every entry before it is stale once they are evicted),
        else None."""
        found: list[np.ndarray] = []
        lo, tail, kept = self._head, self._tail, self._kept
        end: int | None = lo
        while need and lo < tail:
            hi = min(tail, lo + max(2 * need, 256))
            fresh = self._fresh(lo, hi)
            live = self._log_slot[lo:hi][fresh]
            if len(live):
                can = self._free_at[live] <= now
                if self._num_reads:
                    can &= self._reads[live] == 0
                if protect:
                    can &= ~kept[live]
                if not can.all():
                    live, end = live[can], None
                if end is not None:
                    end = hi if len(live) <= need else lo + int(fresh.nonzero()[0][need - 1]) + 1
                live = live[:need]
                found.append(live)
                need -= len(live)
            elif end is not None:
                end = hi
            lo = hi
        return found, need, end

    def _evict(self, victims: np.ndarray, end: int | None) -> None:
        """Drop the blocks in slots ``victims`` (from ``_victims``: landed, so counted in ``_num_landed``; ``end``:
        where the log's head may move to, or None)."""
        if not len(victims):
            return
        self._evict_keys(victims)
        self._stamp[victims] = _FREE
        self._gen[victims] += 1
        self.num_evicted += len(victims)
        self._num_landed -= len(victims)
        self.version += 1
        lo, tail = self._head, self._tail  # (the log's head moves past its stale entries: the victims' mostly)
        step = 2 * len(victims) + 256
        if end is not None:  # (every entry before it is stale: the next is most likely not)
            lo, step = end, 64
        while lo < tail:
            hi = min(tail, lo + step)
            live = self._fresh(lo, hi).nonzero()[0]
            if len(live):
                lo += int(live[0])
                break
            lo, step = hi, 2 * step
        self._head = lo

    def _landed_by(self, now: int) -> int:
        """How many blocks here have landed by ``now`` and are not being written to storage."""
        landing = self._landing
        while landing and landing[0][0] <= now:
            self._num_landed += heappop(landing)[1]
        return self._num_landed


def _as_run(keys: BlockRun | list) -> BlockRun:
    """A plain list of keys as a run that does not group."""
    return keys if isinstance(keys, BlockRun) else BlockRun(keys, 0, len(keys))


def _instant(at: float) -> float:
    """A time from the float arrays as the simulation keeps it: integer nanoseconds, or ``UNQUEUED``."""
    return UNQUEUED if at == UNQUEUED else int(at)


def _consume(calls) -> None:
    """Run an iterator of calls to its end (in C: a loop of method calls without Python's per-step cost)."""
    deque(calls, maxlen=0)
