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
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush

import numpy as np

UNQUEUED = float("inf")
"""When a block lands whose copy is not queued yet (its slot is taken as the pass that computes it is planned)."""

_FREE = -1
"""The stamp of a slot that holds no block."""

_NONE = np.zeros(0, np.int64)
"""No slots."""


class Copy:
    """The copy of one request's blocks to the tier: when it lands (``UNQUEUED`` until it is queued), and when its
    blocks can be evicted (when it lands, or when they have been written on to storage). Its blocks share it, so
    that queueing the copy sets their times at once; ``slots`` are the tier's slots its blocks took."""

    __slots__ = ("at", "free_at", "slots", "tier")

    def __init__(self, tier: HostTier | None = None, slots: np.ndarray | None = None) -> None:
        self.at = self.free_at = UNQUEUED
        self.tier, self.slots = tier, slots


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
    """Up to ``capacity`` blocks, each under its content key with the instant its store lands."""

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
        self._slot: dict[object, int] = {}
        """Key → its slot."""
        self._free: list[int] = []
        """Slots holding no block."""
        size = 0
        self._key = np.empty(size, object)
        """Slot → its key."""
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
        self._looked: tuple = (-1, [], ())
        """(``version``, keys, their slots) of the last lookup that found a run: the load that follows it reads
        them without looking them up again."""
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
        return len(self._slot)

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def keys(self) -> list:
        """The keys held, least recently used first."""
        live = self._live(self._head, self._tail)
        return self._key[live].tolist()

    def lands_at(self, key: object) -> float:
        """When the copy that brings ``key`` lands (``UNQUEUED`` while it is not queued)."""
        return _instant(self._at[self._slot[key]])

    def scan(self, keys: list, now: int) -> tuple[int, int, float | None, bool]:
        """The run of ``keys`` held here from the first: its length; how many keys after it are not here, up to the
        next one that is (or the end); the earliest instant one of its blocks lands after ``now`` (None if all
        have landed; ``UNQUEUED`` if the only ones not landed are not queued yet); and whether a load reads one
        of them."""
        slots, run = self._run(keys)
        n = len(run)
        late, read = None, False
        if n:
            at = self._at[run]
            later = at[at > now]
            if len(later):
                late = _instant(later.min())
            read = bool(self._num_reads) and bool(self._reads[run].any())
        gap = next((i for i in range(n + 1, len(slots)) if slots[i] is not None), len(slots)) - n
        return n, gap, late, read

    def lookup(self, keys: list, now: int) -> tuple[int, int | None]:
        """How many of ``keys``, from the first, can be loaded at ``now`` (a missing key ends the run), with None.
        If the run reaches a block still landing, or one another load reads, the request waits instead of
        missing: (−1, when that block lands), or (−1, None) for a block being read (its load's end wakes the
        rank) or one whose copy is not queued yet (the end of the pass that computes it does)."""
        if not keys or keys[0] not in self._slot:
            return 0, None  # (most lookups miss at once: no need to look at the rest of a long prompt)
        _, run = self._run(keys)
        at = self._at[run]
        late = np.flatnonzero(at > now)
        if len(late):
            t = _instant(at[late[0]])  # (the first such block, in prompt order)
            return -1, None if t == UNQUEUED else t
        if self._num_reads and self._reads[run].any():
            return -1, None
        self._looked = (self.version, keys, run)
        return len(run), None

    def read(self, keys: list) -> Held:
        """A load starts reading ``keys``: they stay until ``done_reading`` (given what this returns)."""
        version, looked, run = self._looked
        if version == self.version and len(keys) <= len(run) and looked[:len(keys)] == keys:
            slots = run[:len(keys)]  # (the lookup just made found them: nothing has moved since)
        else:
            slots = self._slots_of(keys)
        self._reads[slots] += 1  # (a load's keys are distinct)
        self._num_reads += len(keys)
        self.version += 1  # (a lookup reaching these now waits)
        return self._held(slots)

    def done_reading(self, held: Held) -> None:
        """A load that ``read`` blocks has ended (they cannot have moved while read)."""
        self._reads[held.slots] -= 1
        self._num_reads -= len(held.slots)

    def store(self, keys: list, now: int) -> tuple[list, Copy, Held] | None:
        """Take slots for those of ``keys`` not here (landed or landing), evicting the least recently used blocks
        that have landed, are not read and are not among ``keys``; returns the keys taken, their ``Copy``
        (``landed`` says when it lands, once it is queued) and where all of ``keys`` are held, or None, taking
        none, if not enough room can be freed."""
        slots = list(map(self._slot.get, keys))
        num_here = len(slots) - slots.count(None)
        new = [key for key, slot in zip(keys, slots) if slot is None] if num_here else keys
        if not new:
            return new, Copy(), self._held(np.array(slots, np.int64))
        over = len(self._slot) + len(new) - self.capacity
        if over > 0:
            fits = len(new) <= self.capacity - num_here
            here = np.array([slot for slot in slots if slot is not None], np.int64) if num_here else None
            victims = self._victims(over, now, here) if fits and self._landed_by(now) >= over else None
            if victims is None:
                self.num_failed += 1
                self.never_fits = not fits
                return None
            self._evict(victims)
        self.version += 1
        copy = self._add(new)
        if num_here:
            every = np.array([-1 if slot is None else slot for slot in slots], np.int64)
            every[every < 0] = copy.slots
        else:
            every = copy.slots
        return new, copy, self._held(every)

    def promote(self, keys: list, now: int) -> tuple[int, Copy]:
        """Take slots for ``keys`` (none of them here), to be read from storage: as many of them, from the first,
        as there is room for once the least recently used blocks that can go are evicted. vLLM's tiering manager
        takes them one at a time, each evicting the least recently used block that can go, until one finds none
        (``_initiate_promotion``); a slot taken is landing, so it never makes room for the next one, and one
        evicting scan does the same. Returns how many were taken and their ``Copy``."""
        count = len(keys)
        over = len(self._slot) + count - self.capacity
        if over > 0:
            victims = self._victims(over, now, None, partial=True) if self._landed_by(now) else _NONE
            count -= over - len(victims)
            self._evict(victims)
        if count <= 0:
            return 0, Copy()
        self.version += 1
        return count, self._add(keys[:count])

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

    def touch_reversed(self, keys: list, held: list[Held] | None = None) -> None:
        """A request that used ``keys`` (a prefix, in order) finished: they become the most recently used, the
        first of them most of all. ``held``: where they were found or put, in order (each key's slot is then
        looked up only if it has been emptied since)."""
        if held and all(h.tier is self for h in held) and sum(map(len, held)) == len(keys):
            slots = held[0].slots if len(held) == 1 else np.concatenate([h.slots for h in held])
            gens = held[0].gens if len(held) == 1 else np.concatenate([h.gens for h in held])
            moved = np.flatnonzero(self._gen[slots] != gens)
            if len(moved):
                slots = slots.copy()
                now_at = [self._slot.get(keys[i]) for i in moved.tolist()]
                slots[moved] = [-1 if slot is None else slot for slot in now_at]
                slots = slots[slots >= 0]
            slots = slots[::-1]
        else:
            found = list(map(self._slot.get, reversed(keys)))
            if None in found:
                found = [slot for slot in found if slot is not None]
            slots = np.array(found, np.int64)
        if len(slots):
            self._stamp_log(slots)

    # -- slots and the LRU log ------------------------------------------------------------------------

    def _slots_of(self, keys: list) -> np.ndarray:
        return np.fromiter(map(self._slot.__getitem__, keys), np.int64, len(keys))

    def _run(self, keys: list) -> tuple[list, np.ndarray]:
        """Each key's slot (None where it is not here), and the slots of the run held from the first key."""
        slots = list(map(self._slot.get, keys))
        n = slots.index(None) if None in slots else len(slots)
        return slots, np.array(slots[:n] if n < len(slots) else slots, np.int64)

    def _held(self, slots: np.ndarray) -> Held:
        return Held(self, slots, self._gen[slots])

    def _add(self, keys: list) -> Copy:
        """Give ``keys`` (none here) free slots, as the most recent blocks, in order; returns their ``Copy``."""
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
        taken = np.array(slots, np.int64)
        self._key[taken] = np.fromiter(keys, object, k)
        self._at[taken] = self._free_at[taken] = UNQUEUED
        self._stamp_log(taken)
        return Copy(self, taken)

    def _grow(self, more: int) -> None:
        """At least ``more`` slots more (never past ``capacity``: a full tier evicts before it adds)."""
        old = len(self._stamp)
        size = min(max(2 * old, old + more, 1024), max(self.capacity, old + more))
        grow = size - old
        self._key = np.concatenate([self._key, np.empty(grow, object)])
        self._stamp = np.concatenate([self._stamp, np.full(grow, _FREE, np.int64)])
        self._at = np.concatenate([self._at, np.full(grow, UNQUEUED)])
        self._free_at = np.concatenate([self._free_at, np.full(grow, UNQUEUED)])
        self._reads = np.concatenate([self._reads, np.zeros(grow, np.int64)])
        self._gen = np.concatenate([self._gen, np.zeros(grow, np.int64)])
        self._kept = np.concatenate([self._kept, np.zeros(grow, bool)])
        self._free[:0] = range(size - 1, old - 1, -1)  # (popped from the end: lowest first)

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
        """Drop the log's stale entries, making room for ``more`` (the array grows if live entries fill half)."""
        lo, hi = self._head, self._tail
        keep = self._fresh(lo, hi)
        slots, stamps = self._log_slot[lo:hi][keep], self._log_stamp[lo:hi][keep]
        n = len(slots)
        size = len(self._log_slot)
        while 2 * (n + more) > size:
            size *= 2
        if size != len(self._log_slot):
            self._log_slot, self._log_stamp = np.zeros(size, np.int64), np.zeros(size, np.int64)
        self._log_slot[:n], self._log_stamp[:n] = slots, stamps
        self._head, self._tail = 0, n

    def _victims(self, count: int, now: int, protected: np.ndarray | None, partial: bool = False) -> np.ndarray | None:
        """The slots of the ``count`` least recently used blocks that can go (landed by ``now`` and written on to
        storage, no load reading them, not in ``protected``), or None if there are fewer (all there are if
        ``partial``)."""
        kept = self._kept
        if protected is not None:
            kept[protected] = True
        try:
            found, need = self._scan_victims(count, now, protected is not None)
        finally:
            if protected is not None:
                kept[protected] = False
        if need and not partial:
            return None
        return np.concatenate(found) if found else _NONE

    def _scan_victims(self, need: int, now: int, protect: bool) -> tuple[list[np.ndarray], int]:
        """Read the log from its head for up to ``need`` blocks that can go (``_victims``; with ``protect``, not
        flagged in ``_kept``): their slots, in chunks, and how many were not found."""
        found: list[np.ndarray] = []
        lo, tail, kept = self._head, self._tail, self._kept
        while need and lo < tail:
            hi = min(tail, lo + max(2 * need, 256))
            live = self._live(lo, hi)
            if len(live):
                can = self._free_at[live] <= now
                if self._num_reads:
                    can &= self._reads[live] == 0
                if protect:
                    can &= ~kept[live]
                if not can.all():
                    live = live[can]
                live = live[:need]
                found.append(live)
                need -= len(live)
            lo = hi
        return found, need

    def _evict(self, victims: np.ndarray) -> None:
        """Drop the blocks in slots ``victims`` (from ``_victims``: landed, so counted in ``_num_landed``)."""
        if not len(victims):
            return
        _consume(map(self._slot.__delitem__, self._key[victims].tolist()))
        self._stamp[victims] = _FREE
        self._gen[victims] += 1
        self._key[victims] = None
        self._free.extend(victims.tolist())
        self.num_evicted += len(victims)
        self._num_landed -= len(victims)
        self.version += 1
        lo, tail = self._head, self._tail  # (the log's head moves past its stale entries: the victims' mostly)
        step = 2 * len(victims) + 256
        while lo < tail:
            hi = min(tail, lo + step)
            live = np.flatnonzero(self._fresh(lo, hi))
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


def _instant(at: float) -> float:
    """A time from the float arrays as the simulation keeps it: integer nanoseconds, or ``UNQUEUED``."""
    return UNQUEUED if at == UNQUEUED else int(at)


def _consume(calls) -> None:
    """Run an iterator of calls to its end (in C: a loop of method calls without Python's per-step cost)."""
    deque(calls, maxlen=0)
