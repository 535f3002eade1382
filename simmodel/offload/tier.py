"""A host-memory KV tier: blocks kept by their content keys, evicted least recently used.

Follows vLLM 0.32's ``CPUOffloadingManager`` with its LRU policy: a block takes its slot when its store is
prepared and can be read only once the copy has landed (before that a lookup that reaches it is *pending*:
the request waits, it does not miss); a load pins the blocks it reads. Only a store evicts, and only blocks
that have landed and that no load reads; when it cannot free room for all of a request's new blocks it
stores none of them. Recency is set when a block is stored and again when a request that used it finishes
(``touch_reversed``: its prefix's head becomes the most recent, so a prefix is evicted from its tail);
lookups leave it alone.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from heapq import heappop, heappush
from itertools import islice

UNQUEUED = float("inf")
"""When a block lands whose copy is not queued yet (its slot is taken as the pass that computes it is planned)."""


class Copy:
    """The copy of one request's blocks to the tier: when it lands (``UNQUEUED`` until it is queued), and when its
    blocks can be evicted (when it lands, or when they have been written on to storage). Its blocks share it, so
    that queueing the copy sets their times at once."""

    __slots__ = ("at", "free_at")

    def __init__(self) -> None:
        self.at = self.free_at = UNQUEUED


class HostTier:
    """Up to ``capacity`` blocks, each under its content key with the instant its store lands."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.ready_at: OrderedDict[object, Copy] = OrderedDict()
        """Key: the copy that brings it (readable once that lands); least recently used first."""
        self.readers: dict[object, int] = {}
        """Key: loads reading it now (it cannot be evicted)."""
        self.num_failed = 0
        """Stores that could not take their blocks (no room could be freed: every block landing or being read)."""
        self.num_evicted = 0
        self._landing: list[tuple[int, int]] = []
        """(when it lands, how many blocks) of the stores not landed yet, as of ``_num_landed`` (a heap)."""
        self._num_landed = 0
        """Blocks here whose store has landed (the most a store could evict), as of the last ``_landed_by``."""
        self.never_fits = False
        """Whether the last store that took nothing asked for more blocks than the tier could ever give it (it will
        fail however often it is made again)."""
        self.version = 0
        """Changes whenever a block is added, evicted or starts being read (what a lookup that found no landing or
        read block depends on)."""

    def __len__(self) -> int:
        return len(self.ready_at)

    def lookup(self, keys: list, now: int) -> tuple[int, int | None]:
        """How many of ``keys``, from the first, can be loaded at ``now`` (a missing key ends the run), with None.
        If the run reaches a block still landing, or one another load reads, the request waits instead of
        missing: (−1, when that block lands), or (−1, None) for a block being read (its load's end wakes the
        rank) or one whose copy is not queued yet (the end of the pass that computes it does)."""
        if not keys or keys[0] not in self.ready_at:
            return 0, None  # (most lookups miss at once: no need to look at the rest of a long prompt)
        copies = list(map(self.ready_at.get, keys))
        n = copies.index(None) if None in copies else len(copies)
        if not n:
            return 0, None
        run = copies[:n] if n < len(copies) else copies
        if any(copy.at > now for copy in set(run)):
            t = next(copy.at for copy in run if copy.at > now)
            return -1, None if t == UNQUEUED else t
        if self.readers and not self.readers.keys().isdisjoint(keys[:n]):
            return -1, None
        return n, None

    def read(self, keys: list) -> None:
        """A load starts reading ``keys``: they stay until ``done_reading``."""
        readers = self.readers
        for key in keys:
            readers[key] = readers.get(key, 0) + 1
        self.version += 1  # (a lookup reaching these now waits)

    def done_reading(self, keys: list) -> None:
        readers = self.readers
        for key in keys:
            if readers[key] == 1:
                del readers[key]
            else:
                readers[key] -= 1

    def store(self, keys: list, now: int) -> tuple[list, Copy] | None:
        """Take slots for those of ``keys`` not here (landed or landing), evicting the least recently used blocks
        that have landed, are not read and are not among ``keys``; returns the keys taken and their ``Copy``
        (``landed`` says when it lands, once it is queued), or None, taking none, if not enough room can be
        freed."""
        ready_at = self.ready_at
        here = ready_at.keys() & keys
        new = [key for key in keys if key not in here] if here else keys
        copy = Copy()
        if not new:
            return new, copy
        over = len(ready_at) + len(new) - self.capacity
        if over > 0:
            fits = len(new) <= self.capacity - len(here)
            victims = self._victims(over, now, here) if fits and self._landed_by(now) >= over else None
            if victims is None:
                self.num_failed += 1
                self.never_fits = not fits
                return None
            self._evict(victims)
        self.version += 1
        ready_at.update(dict.fromkeys(new, copy))
        return new, copy

    def promote(self, keys: list, now: int) -> tuple[int, Copy]:
        """Take slots for ``keys`` (none of them here), to be read from storage: as many of them, from the first,
        as there is room for once the least recently used blocks that can go are evicted. vLLM's tiering manager
        takes them one at a time, each evicting the least recently used block that can go, until one finds none
        (``_initiate_promotion``); a slot taken is landing, so it never makes room for the next one, and one
        evicting scan does the same. Returns how many were taken and their ``Copy``."""
        ready_at = self.ready_at
        count, copy = len(keys), Copy()
        over = len(ready_at) + count - self.capacity
        if over > 0:
            victims = self._victims(over, now, frozenset(), partial=True) if self._landed_by(now) else []
            count -= over - len(victims)
            self._evict(victims)
        if count > 0:
            self.version += 1
            ready_at.update(dict.fromkeys(keys[:count], copy))
        return max(count, 0), copy

    def _evict(self, victims: list) -> None:
        """Drop ``victims`` (from ``_victims``: landed, so counted in ``_num_landed``)."""
        _consume(map(self.ready_at.__delitem__, victims))
        self.num_evicted += len(victims)
        self._num_landed -= len(victims)

    def landed(self, copy: Copy, count: int, at: int, pinned: bool = False) -> None:
        """The ``count`` blocks of ``copy`` (``store``) land at ``at``: readable from then on, and evictable too
        unless ``pinned`` (a write to storage will read them: evictable once released)."""
        copy.at = at
        if not pinned:
            self.release(copy, count, at)

    def release(self, copy: Copy, count: int, at: int) -> None:
        """The ``count`` blocks of ``copy`` may be evicted from ``at`` on."""
        copy.free_at = at
        heappush(self._landing, (at, count))

    def _landed_by(self, now: int) -> int:
        """How many blocks here have landed by ``now`` and are not being written to storage."""
        landing = self._landing
        while landing and landing[0][0] <= now:
            self._num_landed += heappop(landing)[1]
        return self._num_landed

    def touch_reversed(self, keys: list) -> None:
        """A request that used ``keys`` (a prefix, in order) finished: they become the most recently used, the
        first of them most of all."""
        ready_at = self.ready_at
        here = reversed(keys) if ready_at.keys() >= set(keys) else filter(ready_at.__contains__, reversed(keys))
        _consume(map(ready_at.move_to_end, here))

    def _victims(self, count: int, now: int, protected: set | frozenset, partial: bool = False) -> list | None:
        """The ``count`` least recently used blocks that can go (landed by ``now`` and written on to storage, no
        load reading them, not in ``protected``), or None if there are fewer (all there are if ``partial``)."""
        ready_at, readers = self.ready_at, self.readers
        first = list(islice(ready_at, count))
        if all(copy.free_at <= now for copy in set(map(ready_at.__getitem__, first))) and \
                readers.keys().isdisjoint(first) and protected.isdisjoint(first):
            return first  # (the least recent ``count`` can all go: mostly so)
        victims = []
        for key, copy in ready_at.items():
            if copy.free_at <= now and key not in readers and key not in protected:
                victims.append(key)
                if len(victims) == count:
                    return victims
        return victims if partial else None


def _consume(calls) -> None:
    """Run an iterator of calls to its end (in C: a loop of method calls without Python's per-step cost)."""
    deque(calls, maxlen=0)
