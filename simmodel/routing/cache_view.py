"""A router's view of which KV blocks each rank of its pool caches.

Dynamo's KV router indexes the blocks each worker holds in a radix tree fed by the workers' KV events: vLLM
publishes a block as stored when its scheduler caches it (at the plan of the pass that computes it, so the
router sees it before it is computed) and as removed when the block is evicted. The router then scores a
prompt per worker and rank by the longest run of its leading blocks that one holds. ``CacheView`` keeps that
index from the ranks' pools (``PrefixCachingBlockPool.listener``), the events reaching it ``lag_ns`` late;
or, approximate (Dynamo's mode without KV events), from the router's own decisions: the prompt blocks it
sent to a rank count as cached there for ``ttl_ns``, refreshed when routed there again.

Blocks are keyed by the chained content keys the pools cache under (``kv_cache.BlockKeys``), so a prefix
means the same blocks to the router and to the rank. Each key maps to the set of ranks holding it, as bits
of one integer, so matching a prompt is one walk over its block keys.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import simpy

    from simmodel.engine.rank import Rank


class CacheView:
    """Blocks held per rank (``ranks``: the pool's, in order), as the router knows them now."""

    def __init__(self, env: simpy.Environment, ranks: list[Rank], lag_ns: int = 0, approximate: bool = False,
                 ttl_ns: int = 0) -> None:
        self.env, self.lag_ns, self.approximate, self.ttl_ns = env, lag_ns, approximate, ttl_ns
        self.num_ranks = len(ranks)
        self.holders: dict[object, int] = {}
        """Block key → bits of the ranks holding it."""
        self._due: deque = deque()
        """Precise with a lag: (instant the router sees them, rank bit, keys, stored) in event order. Approximate:
        (expiry, rank bit, key) in routing order."""
        self._expiry: dict[tuple[int, object], int] = {}
        """Approximate: (rank bit, key) → its latest expiry (an older entry in ``_due`` is then stale)."""
        if not approximate:
            for c, rank in enumerate(ranks):
                rank.pool.listener = self._listener(1 << c)

    def _listener(self, bit: int):
        """The rank's KV event handler (``keys`` stored or removed): applied now, or queued to be seen ``lag_ns``
        later."""
        if self.lag_ns:
            due, env, lag = self._due, self.env, self.lag_ns

            def later(keys: list, stored: bool) -> None:
                due.append((env.now + lag, bit, keys, stored))
            return later

        def now(keys: list, stored: bool) -> None:
            self._apply(bit, keys, stored)
        return now

    def _apply(self, bit: int, keys: list, stored: bool) -> None:
        holders = self.holders
        if stored:
            for key in keys:
                holders[key] = holders.get(key, 0) | bit
            return
        for key in keys:
            left = holders.get(key, 0) & ~bit
            if left:
                holders[key] = left
            else:
                holders.pop(key, None)

    def _catch_up(self) -> None:
        """Apply what reached the router by now: lagged events due, expired approximate entries dropped."""
        due, now = self._due, self.env.now
        if self.approximate:
            expiry = self._expiry
            while due and due[0][0] <= now:
                t, bit, key = due.popleft()
                if expiry.get((bit, key)) == t:
                    del expiry[(bit, key)]
                    self._apply(bit, (key,), False)
            return
        while due and due[0][0] <= now:
            _, bit, key, stored = due.popleft()
            self._apply(bit, key, stored)

    def overlaps(self, keys: list, n: int) -> list[int]:
        """Per rank, how many of the prompt's first ``n`` blocks (``keys``) lead what it holds."""
        if self._due:
            self._catch_up()
        depth = [0] * self.num_ranks
        alive = (1 << self.num_ranks) - 1  # the ranks holding every block so far
        holders = self.holders
        for j in range(n):
            held = holders.get(keys[j], 0) & alive
            if held != alive:
                _set(depth, alive & ~held, j)
                alive = held
                if not alive:
                    return depth
        _set(depth, alive, n)
        return depth

    def remember(self, c: int, keys: list) -> None:
        """Approximate: the blocks ``keys`` were routed to rank ``c`` now; held there for ``ttl_ns``."""
        bit, t = 1 << c, self.env.now + self.ttl_ns
        holders, expiry, due = self.holders, self._expiry, self._due
        for key in keys:
            holders[key] = holders.get(key, 0) | bit
            expiry[(bit, key)] = t
            due.append((t, bit, key))


def _set(depth: list[int], bits: int, value: int) -> None:
    """``depth[c] = value`` for every rank c whose bit is set in ``bits``."""
    while bits:
        low = bits & -bits
        depth[low.bit_length() - 1] = value
        bits ^= low
