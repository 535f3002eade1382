"""vLLM's offloading connector on one rank: a CPU tier behind the GPU prefix cache.

What it does, following vLLM 0.32's ``OffloadingConnector`` with its native CPU backend (one GPU block per
offloaded chunk, ``offload_prompt_only`` on, the LRU policy):

- **stores**: when a pass is planned, each request offers the tier the full prompt blocks that pass
  computes, from where its last successful offer ended (a request that loaded from the host starts past what
  it loaded; one that did not offers its GPU cache hits too, which the tier stores if it lacks them). The copy
  is queued on the rank's store link when the pass ends (it runs behind the pass on its own stream) and the
  blocks can be found once it lands. Blocks the tier already has, landed or landing, are not copied again. An
  offer the tier cannot make room for is dropped whole and made again at the request's next pass or finish.
  When a request finishes, the blocks it used become the tier's most recent, its prefix's head most of all.
- **loads**: when the scheduler admits a fresh (or preempted) request, it takes the longest cached prefix
  on the GPU, then looks up the blocks that follow on the host (up to the whole prompt). If the run reaches a
  block still landing, or one another load reads, the request waits in the queue (skipped, not blocking it)
  and is looked up again at a later plan. If at least one block is found, the scheduler takes GPU blocks for
  them, the request leaves the queue to wait for its KV (vLLM's ``WAITING_FOR_REMOTE_KVS``: no sequence slot,
  no token budget), and the copy is queued on the rank's load link. When it lands the blocks are cached on
  the GPU and the request is admitted at the rank's next plan, ahead of waiting work, with all but its last
  prompt token computed at most. The copy starts when the pass planned with it ends (vLLM's load stream
  waits for it), at once if that plan runs no pass. The load is on the request's critical path; stores never
  are.

A copy reads its request's GPU blocks until it lands. A finished (or preempted) request's blocks are freed at
once; a pass whose plan takes one a copy still reads waits for that copy first (vLLM's flush: ``_flushes``).

With a storage tier behind the host (``storage.StorageTier``, vLLM's ``TieringOffloadingSpec``): each copy that
lands on the host is written through to storage and keeps its host blocks until vLLM's manager polls the write
done; a lookup goes on past the host into storage, taking host slots for what storage holds and reading it in
when the plan is made (the request waits meanwhile, skipped), after which those blocks are host hits.

Each direction of the link is its own queue (``link.HostLink``): vLLM copies each way on its own stream, one
copy after another. A store or load counts as done when its copy lands (vLLM learns of it at the end of the
pass in flight then: up to a pass later).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush
from typing import TYPE_CHECKING

from simmodel.engine.recorder import EventKind
from simmodel.offload.link import HostLink
from simmodel.offload.protocol import PassBytes
from simmodel.offload.storage import StorageTier
from simmodel.offload.tier import UNQUEUED, Held, HostTier

if TYPE_CHECKING:
    import simpy

    from simmodel.engine.kv_cache import BlockRun
    from simmodel.engine.recorder import Recorder
    from simmodel.engine.request import Request
    from simmodel.engine.scheduler.base import SchedulerOutput


class Offered:
    """What one request has offered the tier so far: blocks ``first`` … ``next − 1`` are the ones it used there
    (loaded, or stored or found stored), ``keys`` its block keys, ``hopeless`` the end of the largest offer that
    could never fit (vLLM makes it again each pass, to no effect), ``lands_at`` when its last copy to the tier
    lands (``UNQUEUED`` while not queued)."""

    __slots__ = ("first", "next", "keys", "request", "hopeless", "lands_at", "block_ids", "copies", "held")

    def __init__(self, request: Request, first: int = 0) -> None:
        self.first = self.next = first
        self.keys, self.request = request.block_keys, request
        self.hopeless = 0
        self.lands_at: float = 0
        self.block_ids: list[int] = request.block_ids
        """The request's GPU blocks as of its last pass (the list stays as it was once the pool frees them)."""
        self.copies: list[tuple[int, list[int]]] = []
        """(when it lands, the GPU blocks it reads) of its copies to the tier queued so far (landed ones pruned)."""
        self.held: list[Held] = []
        """Where blocks ``first`` … ``next − 1`` are in the tier (``HostTier.touch_reversed`` at its finish)."""


class VllmCpuOffload:
    """The host tier of one rank, its links, and the loads and stores between them and the GPU pool."""

    def __init__(self, env: simpy.Environment, tier: HostTier, loads: HostLink, stores: HostLink,
                 block_size: int, block_bytes: float, gpu_block_bytes: float,
                 storage: StorageTier | None = None, pool=None) -> None:
        self.env, self.tier, self.load_link, self.store_link = env, tier, loads, stores
        self._allocated: set[int] | None = pool.watch_allocations() if pool is not None else None
        """The blocks the rank's GPU pool took for requests since the last plan (``_flushes`` empties it); None
        without a pool to watch (no flushes modeled)."""
        self._fenced: dict[int, int] = {}
        """GPU block → when the copy reading it lands, for copies of finished requests still on their way: a plan
        that takes such a block waits for that copy (vLLM's flush)."""
        self.storage = storage
        """A storage tier behind the host (``storage.StorageTier``): written through, read back into the host."""
        self.promoted: dict[Request, set] = {}
        """Per request, the keys read from storage into the host for it (its loads count them as storage hits)."""
        self._read_last_plan = False
        """Whether the last plan's lookups started reads from storage (``retrying``)."""
        self._early_stores: list = []
        """Stores that finished requests' offers made at a lookup, for the plan being made (``planned``)."""
        self.promoting: list[tuple[Request, list, list]] = []
        """Reads from storage the plan being made asked for: (request, keys, [(their host slots' copy, how many)])."""
        self._writes: deque[tuple[int, object, int]] = deque()
        """(when it ends, the host copy it reads, how many blocks) of the writes to storage not yet known done, in
        the order they end (one queue)."""
        self._poll_open = True
        """Whether the next call into vLLM's tiering manager polls its tiers for finished jobs (it polls at most
        once between the end of one step's schedule and the next: ``_maybe_process_finished_jobs``)."""
        self.block_size = block_size
        self.block_bytes = block_bytes
        """KV bytes of one block over all of the rank's GPUs (what the tier holds)."""
        self.gpu_block_bytes = gpu_block_bytes
        """The share of a block one GPU copies over its own link."""
        self.on_loaded: Callable[[Request, int], None] | None = None
        """The rank's scheduler taking a request whose load landed, with its computed tokens."""
        self.on_wake: Callable[[], None] | None = None
        """The rank planning again (a request waits for a block landing on the host)."""
        self.recorder: Recorder | None = None
        self.where: tuple[int, int, str] = (-1, -1, "")
        """The rank's worker, attention-DP rank and role, for its events."""
        self.offered: dict[Request, Offered] = {}
        """Per request with blocks to offer or used, what it offered so far."""
        self.finishing: deque[tuple[int, Offered]] = deque()
        """(when, what it offered) of the requests finished since the last plan, oldest first (``planned``)."""
        self.queued: list = []
        """Loads the scheduler made in the plan being made: (request, keys, tokens computed once landed)."""
        self._retrying: set[Request] = set()
        """Requests whose last offer the tier could not take: each of their passes offers it again (so their
        passes are planned one by one, ``planner.drive``)."""
        self.plan_at: int | None = None
        """The instant of the plan being made when it is not now (a worker planning at the end of a run applied
        ahead: ``Rank.plan``'s ``at``); None: now."""
        self._landing: list[int] = []
        """When the loads in flight land (a heap)."""
        self._last_lookup: tuple = (None, 0)
        """The last lookup that found no landing or read block, and what it found: still true while the tier
        has neither gained nor lost a block."""
        self._wakes: set[int] = set()
        """Instants at which the rank plans again for a request waiting on a landing block."""
        self.num_hit_tokens = 0
        """Prompt tokens loaded from the host at first admission (the scheduler counts them, as the GPU's hits)."""
        self.num_storage_hit_tokens = 0
        """Of those, the tokens read from storage into the host for the request first."""
        self.num_loads = 0
        self.blocks_loaded = 0
        self.blocks_stored = 0
        self.pass_bytes = PassBytes()

    @property
    def retrying(self) -> bool:
        """Whether the rank's next passes must be planned one by one: a request's offer to the tier must be made
        again at every pass, or the last plan's lookups started reads from storage (their host slots evicted
        blocks, so the next plan's lookups may read again: every plan that looks a request up is made)."""
        return bool(self._retrying) or self._read_last_plan

    def fenced_blocks(self, now: int) -> set[int]:
        """The GPU blocks a copy of a finished request still reads after ``now`` (a pass that takes one waits for
        it: runs end before one, ``Run._flush_check``)."""
        return {block for block, until in self._fenced.items() if until > now} if self._fenced else set()

    def storage_mark(self, now: int) -> tuple:
        """The store's version once the writes ended by ``now`` are applied (any rank's, if it is shared), and how
        many of the rank's own writes had ended by then (the next lookup's poll releases their host blocks)."""
        storage = self.storage
        if storage is None:
            return ()
        storage.catch_up(now)
        ended = 0
        for end, _, _ in self._writes:  # (in the order they end)
            if end > now:
                break
            ended += 1
        return storage.version, ended

    @property
    def waking(self) -> bool:
        """Whether the rank will plan again for a request waiting on a block landing on the host."""
        return bool(self._wakes)

    def next_event_ns(self, waiting: bool = False, at: int = 0) -> float:
        """The next instant at which the tier acts on its rank (a load landing, a waiting request woken), or
        infinity: no run of the rank's passes may be applied past it. With requests ``waiting`` at ``at`` and
        storage behind the host, also the end of the rank's next write to storage after ``at``: the first plan
        from then on looks them up again and may read what it wrote, or take the host slots its poll frees (a
        run's decisions look nothing up). A run applied as its passes end checks the same at each pass end instead,
        where any rank's write to a shared store counts too (``Worker._storage_moved``)."""
        next_at = min(self._landing[0] if self._landing else float("inf"), min(self._wakes, default=float("inf")))
        if waiting and self.storage is not None:
            for end, _, _ in self._writes:  # (in the order they end)
                if end > at:
                    return min(next_at, end)
        return next_at

    # -- at admission (inside the scheduler's plan) ---------------------------------------------

    def lookup(self, request: Request, start: int) -> int:
        """Blocks of the request found on the host right after its first ``start`` (found on the GPU), up to its
        last full block; −1 if the request must wait (a block it reaches is landing or being read)."""
        now = self.env.now if self.plan_at is None else self.plan_at
        offered = self.offered.get(request)
        if offered is not None and offered.lands_at > now:
            # (a preempted request whose own copy to the tier has not landed: vLLM does not look it up yet)
            self._wake_at(offered.lands_at)
            return -1
        limit = request.num_tokens // self.block_size - start
        storage = self.storage
        if storage is not None:
            storage.catch_up(now)
            if self._poll_open:
                self._poll(now)
            if self.finishing and self.finishing[0][0] < now:  # (as their own plans would have, before it evicts)
                self._finish_before(now, self._early_stores)
        if limit <= 0 or not (len(self.tier) or storage is not None and len(storage)):
            return 0
        seen = (request, start, limit, self.tier.version, storage is not None and storage.version)
        if self._last_lookup[0] == seen:  # (a request left waiting is looked up again at every plan)
            return self._last_lookup[1]
        keys = request.block_keys.run(start, start + limit)
        if storage is None or not len(storage):
            found, wake = self.tier.lookup(keys, now)
            cacheable = found >= 0
        else:
            found, wake, cacheable = self._lookup_tiers(request, keys, now)
        if cacheable:
            self._last_lookup = (seen, found)
        if wake is not None:
            self._wake_at(wake)
        return found

    def _lookup_tiers(self, request: Request, keys: BlockRun, now: int) -> tuple[int, int | None, bool]:
        """``HostTier.lookup`` with storage behind the host, as vLLM's tiering manager looks up each block in turn
        (``TieringOffloadingManager.lookup``, the connector's ``_maximal_prefix_lookup``): a block on the host is
        a hit, or pending while it lands or is read; one missing there but held on storage takes a host slot
        (evicting the host's least recently used block) and is read into it, pending; one that gets no slot, or
        is on neither, ends the run. Any pending block makes the request wait (−1, with the earliest instant one
        of them is known to land); the scan goes on past them, so one plan starts the reads of the whole run.
        Runs of blocks on the host, and of blocks only on storage, are taken a run at a time. The third value says
        whether the answer holds while the tiers neither gain nor lose a block: not if a read got no host slot
        (one may free without a block leaving, as a load or a write to storage ends)."""
        tier, storage = self.tier, self.storage
        held = storage.blocks
        found, total, wake, pending, cacheable = 0, len(keys), float("inf"), False, True
        promoted, slots = [], []
        while found < total:
            at = keys.start + found  # (the first block not found yet, of the request's)
            n, gap, late, read = tier.scan(keys.sub(at, keys.stop), now)
            if n:  # (a run on the host)
                if late is not None:
                    pending, wake = True, min(wake, late)
                elif read:
                    pending = True
                found += n
                if found == total:
                    break
            # (then a run missing on the host, up to the next block there: read what storage holds from its start)
            at += n
            held_run = list(map(held.__contains__, keys.keys[at:at + gap]))
            m = held_run.index(False) if False in held_run else gap
            taken, copy = tier.promote(keys.sub(at, at + m), now) if m else (0, None)
            if taken:
                promoted += keys.keys[at:at + taken]
                slots.append((copy, taken))
                found += taken
            if taken < m:
                cacheable = False
            if taken < gap:
                break  # (a block on neither tier, or one that got no host slot: a miss)
        if promoted:  # (read once the plan is made: ``_start_reads``; until then the slots are neither read nor freed)
            self.promoting.append((request, promoted, slots))
            self.promoted.setdefault(request, set()).update(promoted)
            return -1, None, False
        if pending:
            return -1, None if wake == float("inf") else wake, False
        return found, None, cacheable

    def _poll(self, at: int) -> None:
        """vLLM's tiering manager polls its tiers at ``at``: the host blocks of writes to storage ended by then
        may be evicted from now on (``complete_read``). It polls at the first call after a step's schedule ends
        (a lookup, or the end of the next schedule) and again when it takes a store's slots, so a write that
        ends during a pass is known at the next plan's first lookup, or after its lookups if the plan before
        took slots."""
        self._poll_open = False
        writes, release = self._writes, self.tier.release
        while writes and writes[0][0] <= at:
            _, copy, count = writes.popleft()
            release(copy, count, at)

    def planned_in_run(self) -> None:
        """A run of passes planned some of its passes itself: their plans looked nothing up and stored nothing, so
        each ended with the manager's poll open (the next lookup polls)."""
        self._poll_open = True

    def _start_reads(self, at: int) -> None:
        """Start the storage reads the plan's lookups asked for, one per request, at ``at`` (vLLM submits a
        request's promotions as one job when the step's schedule ends, ``_flush_pending_promotions``); the rank
        plans again when each lands."""
        storage, tier = self.storage, self.tier
        for request, keys, slots in self.promoting:
            end = storage.read(keys, at)
            for copy, count in slots:
                tier.landed(copy, count, end)
            if not request.num_preemptions:  # (the request's figures are its first admission's)
                if request.storage_load_start_at is None:
                    request.storage_load_start_at = at
                request.storage_load_end_at = end
            tokens = len(keys) * self.block_size
            self._event(at, EventKind.STORAGE_LOAD_START, request, tokens)
            if self.recorder is not None:
                self.env.timeout(end - self.env.now).callbacks.append(
                    lambda _, request=request, tokens=tokens: self._event(
                        self.env.now, EventKind.STORAGE_LOAD_END, request, tokens))
            self._wake_at(end)
        self.promoting.clear()

    def _wake_at(self, wake: float) -> None:
        """Plan the rank again at ``wake`` (a block landing), unless it is not set yet (``UNQUEUED``: the end of
        the pass whose copy it is plans again) or already asked for."""
        if wake != UNQUEUED and wake not in self._wakes:
            self._wakes.add(wake)
            self.env.timeout(wake - self.env.now).callbacks.append(lambda _: self._woken(wake))

    def _woken(self, at: int) -> None:
        self._wakes.discard(at)
        self.on_wake()

    def load(self, request: Request, start: int, count: int) -> None:
        """The scheduler gave the request GPU blocks for its blocks ``start`` … ``start + count − 1`` found on the
        host: pin them; the copy is queued with the plan's (``planned``), and the request is handed to
        ``on_loaded`` when it lands."""
        keys = request.block_keys.run(start, start + count)
        held = self.tier.read(keys)
        promoted = self.promoted.pop(request, None)
        if promoted and not request.num_preemptions:
            from_storage = len(promoted.intersection(keys.list())) * self.block_size
            request.num_storage_cached_tokens = from_storage
            self.num_storage_hit_tokens += from_storage
        offered = self.offered[request] = Offered(request, start)
        offered.next = start + count  # (what it loaded is not offered)
        offered.held.append(held)
        self.num_loads += 1
        self.blocks_loaded += count
        self.queued.append((request, held, min((start + count) * self.block_size, request.num_tokens - 1)))

    def start_loads(self, loads: list, at: int) -> None:
        """Start the copies of ``loads`` at ``at``: the end of the pass planned with them (vLLM copies on a stream
        that waits for that pass), or the plan's instant if it runs no pass."""
        now = self.env.now
        for request, held, computed in loads:
            _, end = self.load_link.transfer(at, len(held) * self.gpu_block_bytes)
            if not request.num_preemptions:  # (the request's figures are its first admission's)
                request.host_load_start_at = at
            self._event(at, EventKind.HOST_LOAD_START, request, len(held) * self.block_size)
            heappush(self._landing, end)
            self.env.timeout(max(end - now, 0)).callbacks.append(
                lambda _, request=request, held=held, computed=computed: self._landed(request, held, computed))

    def _landed(self, request: Request, held: Held, computed: int) -> None:
        heappop(self._landing)  # (the earliest: loads land in the order they started, on one link)
        self.tier.done_reading(held)
        if not request.num_preemptions:
            request.host_load_end_at = self.env.now
        self._event(self.env.now, EventKind.HOST_LOAD_END, request, len(held) * self.block_size)
        self.on_loaded(request, computed)

    # -- what a plan sets going, and a pass end ------------------------------------------------

    def planned(self, plan: SchedulerOutput, at: int) -> None:
        """A plan was made at ``at`` (``Rank.plan``). As vLLM's scheduler builds the connector's part of a step: the
        requests that finished before the step before it become the most recent first (``finished``); then each
        request the plan runs offers the full prompt blocks the pass computes, taking their slots now (what
        the tier has not stored yet); then the requests that finished in the pass just delivered offer what
        they still owe and become the most recent. Copies (those stores, and the loads the plan made) are
        queued when the plan's pass ends (``pass_ended``), or at once if it runs no pass."""
        finishing, stores = self.finishing, []
        if self.storage is not None:  # (as vLLM's schedule ends: it polls if it has not yet, then may poll again)
            if self._poll_open:
                self._poll(at)
            self._poll_open = True
            self._read_last_plan = bool(self.promoting)
            if self.promoting:  # (before the plan's stores take their slots, as vLLM flushes them first)
                self._start_reads(at)
        if self._early_stores:
            stores, self._early_stores = self._early_stores, []
        self._finish_before(at, stores)
        bs, offered = self.block_size, self.offered
        for request, context, new in zip(plan.requests, plan.num_context_tokens, plan.num_new_tokens):
            end = min(context + new, request.num_prompt_tokens) // bs
            entry = offered.get(request)
            if entry is None:
                if end <= 0:
                    continue
                entry = offered[request] = Offered(request)
            entry.block_ids = request.block_ids
            if end > entry.next:
                self._offer(entry, end, at, stores)
        if finishing:
            self._finish([entry for _, entry in finishing], at, stores)
            finishing.clear()
        loads, self.queued = self.queued, []
        wait, flushed = self._flushes(plan, at, stores) if self._allocated is not None else (at, [])
        out = {id(store) for store in flushed}
        if plan.is_empty:  # (copied at once; its loads wait for the copies reading blocks they take)
            for store in stores:
                landed = self._store(*store, at, -1)
                if id(store) in out:
                    wait = max(wait, landed)
            if loads:
                self.start_loads(loads, max(wait, at))
        else:
            if flushed:
                stores = [store for store in stores if id(store) not in out]
            plan.host_stores, plan.host_loads = stores or None, loads or None
            if wait > at or flushed:
                plan.host_flush = (wait, flushed)

    def _finish_before(self, at: int, stores: list) -> None:
        """The requests that finished before ``at`` (their step's plan was a run's: it had nothing else to store)
        offer what they still owe and become the most recent, a pass's finishes at a time."""
        finishing = self.finishing
        while finishing and finishing[0][0] < at:
            ended = finishing[0][0]
            group = []
            while finishing and finishing[0][0] == ended:
                group.append(finishing.popleft()[1])
            self._finish(group, at, stores)

    def _flushes(self, plan: SchedulerOutput, at: int, stores: list) -> tuple[int, list]:
        """vLLM's flush (the connector's ``jobs_to_flush``): a copy to the tier reads GPU blocks, so before a pass
        that reuses a block a copy of a finished request still reads, vLLM's worker waits for that copy; so it
        does for the copies of requests the plan preempts. A finished request's last offer made by this very
        plan whose blocks the plan takes is copied before the pass instead of after it. Returns when the pass
        may start at the earliest (``at`` if at once) and those stores."""
        allocated, fenced, offered = self._allocated, self._fenced, self.offered
        wait, flushed = at, []
        if allocated:
            if fenced:
                for block in allocated.intersection(fenced):
                    wait = max(wait, fenced[block])
            flushed = [store for store in stores if store[0] not in offered and not allocated.isdisjoint(store[3])]
            allocated.clear()
        for request in plan.preempted:
            entry = offered.get(request)
            if entry is not None and entry.copies:
                wait = max(wait, max(landing for landing, _ in entry.copies))
        if fenced and self.store_link.free_at <= at:  # (every copy has landed: no fence holds)
            fenced.clear()
        return wait, flushed

    def carried_by_run(self, plan: SchedulerOutput) -> bool:
        """Whether a run of passes may start with the pass of ``plan`` and queue its copies as that pass ends
        (``planner.run.Run``, as ``Rank.finish_pass`` would): the plan loads nothing and waits for no copy, and it
        only stores blocks of requests still running (a finished request's copy would fence GPU blocks that are
        free now, which the run's checks, made as it starts, would not see: ``Run._flush_check``), and no storage
        tier is behind the host (a write through, queued as the run is applied ahead of the clock, would reach a
        store other ranks read)."""
        if plan.host_loads or plan.host_flush or self.storage is not None:
            return False
        offered = self.offered
        return all(store[0] in offered for store in plan.host_stores or ())

    def pass_ended(self, plan: SchedulerOutput, at: int, pass_index: int) -> None:
        """The pass of a plan (``planned``) ended at ``at``: queue its copies."""
        self._copy(plan.host_stores or (), plan.host_loads or (), at, pass_index)

    def finished(self, request: Request, at: int) -> None:
        """A request finished at ``at``: at the next plan its blocks become the tier's most recent (and what it
        still owes the tier is offered once more)."""
        entry = self.offered.pop(request, None)
        if entry is not None:
            self.finishing.append((at, entry))
            for landing, blocks in entry.copies:
                if landing > at:  # (its blocks are free now, and may be taken while a copy still reads them)
                    self._fence(blocks, landing)
        if self.promoted:
            self.promoted.pop(request, None)

    def _offer(self, entry: Offered, end: int, at: int, stores: list) -> None:
        """Take the tier's slots for a request's blocks ``entry.next`` … ``end − 1`` not stored yet, at ``at``; an
        offer it cannot make room for is made again at the request's next pass or finish."""
        request = entry.request
        if end <= entry.hopeless:
            return  # (this offer, or a smaller one, can never fit: making it again changes nothing)
        if self._poll_open and self.storage is not None:  # (``prepare_store`` polls first)
            self._poll(at)
        first = entry.next
        keys = entry.keys.run(first, end)
        taken = self.tier.store(keys, at)
        if taken is None:
            if self.tier.never_fits:
                entry.hopeless = end
            else:
                self._retrying.add(request)
            return
        self._retrying.discard(request)
        entry.next = end
        new, copy, held = taken
        entry.held.append(held)
        if new:  # (with the GPU blocks its copy reads)
            ids = entry.block_ids
            if len(new) == end - first:
                source = ids[first:end]
            else:  # (the blocks the copy takes, among those offered)
                source = list(map(ids.__getitem__, (copy.taken + first).tolist()))
            stores.append((request, new, copy, source))
            entry.lands_at = UNQUEUED  # (until its copy is queued: ``_copy``)

    def _finish(self, entries: list[Offered], at: int, stores: list) -> None:
        """Requests that finished in one pass offer what they still owe the tier; then the blocks each used become
        the most recent (vLLM builds every store job of a step before it signals the finished requests)."""
        for entry in entries:
            end = entry.request.num_prompt_tokens // self.block_size
            if end > entry.next:
                self._offer(entry, end, at, stores)
            self._retrying.discard(entry.request)
        for entry in entries:
            self.tier.touch_reversed(entry.keys.run(entry.first, entry.next), entry.held)

    def _copy(self, stores, loads, at: int, pass_index: int) -> None:
        """Queue the copies of a pass that ended at ``at``: its stores on the store link, its loads on the load
        link."""
        for store in stores:
            self._store(*store, at, pass_index)
        if loads:
            self.start_loads(loads, at)
            # (the bytes over all the rank's GPUs, as the summary counts them; stores count their own)
            self.pass_bytes.add(pass_index, sum(len(held) for _, held, _ in loads) * self.block_bytes, 0)

    def _store(self, request: Request, keys: list, copy, source: list[int], at: int, pass_index: int) -> int:
        """Queue one request's copy to the tier at ``at``; returns when it lands. Until then the GPU blocks it reads
        are watched for reuse (``_flushes``): as its request's while it runs, at once if it has finished."""
        landed = self.store_link.transfer(at, len(keys) * self.gpu_block_bytes)[1]
        storage = self.storage
        if storage is None:
            self.tier.landed(copy, len(keys), landed)
        else:  # (written through to storage from its landing; the host keeps it until that write is polled done)
            self.tier.landed(copy, len(keys), landed, pinned=True)
            self._writes.append((storage.write(keys, landed), copy, len(keys)))
            self._event(at, EventKind.STORAGE_STORE, request, len(keys) * self.block_size, pass_index)
        entry = self.offered.get(request)
        if entry is not None:
            entry.lands_at = landed  # (its copies land in the order they are queued)
            entry.copies = [c for c in entry.copies if c[0] > at]
            entry.copies.append((landed, source))
        elif self._allocated is not None:
            self._fence(source, landed)
        self.blocks_stored += len(keys)
        self.pass_bytes.add(pass_index, 0, len(keys) * self.block_bytes)
        self._event(at, EventKind.HOST_STORE, request, len(keys) * self.block_size, pass_index)
        return landed

    def _fence(self, blocks: list[int], until: int) -> None:
        """A finished request's copy reads ``blocks`` until ``until``: a plan that takes one waits for it."""
        fenced = self._fenced
        for block in blocks:
            if fenced.get(block, 0) < until:
                fenced[block] = until

    def pass_ns(self, plan: SchedulerOutput, start: int, busy_ns: int, pass_index: int = -1) -> int:
        """How long a pass lasts that must wait for copies reading blocks it reuses (``host_flush``): the copies it
        flushes are queued when it starts, and its forward pass runs once they and those it waits for have
        landed. (Loads run between passes.)"""
        wait, flushed = plan.host_flush
        for store in flushed:
            wait = max(wait, self._store(*store, start, pass_index))
        return max(wait - start, 0) + busy_ns

    def settle(self) -> None:
        """(Its copies lock nothing on the GPU: nothing to acknowledge when idle.)"""

    def cold_start(self) -> None:
        """The worker left: a restarted vLLM has an empty CPU tier (its figures keep counting)."""
        old = self.tier
        self.tier = HostTier(old.capacity)
        self.tier.num_failed, self.tier.num_evicted = old.num_failed, old.num_evicted
        self.offered.clear()
        self.finishing.clear()
        self._retrying.clear()
        self.promoted.clear()
        self.promoting.clear()
        self._early_stores.clear()
        self._read_last_plan, self._poll_open = False, True
        self._writes.clear()
        self._fenced.clear()
        if self._allocated is not None:
            self._allocated.clear()
        if self.storage is not None:  # (its node's local disk goes with it)
            self.storage.clear(self.env.now)
        self._last_lookup = (None, 0)

    def flush(self, at: int, pass_index: int) -> None:
        """(Its stores are queued at their pass's end by ``pass_ended``.)"""

    def _event(self, at: int, kind: EventKind, request: Request, tokens: int, pass_index: int = -1) -> None:
        if self.recorder is not None:
            worker, rank, role = self.where
            self.recorder.event(at, kind, worker, rank, request.request_id, tokens, role, pass_index)

    # -- figures --------------------------------------------------------------------------------

    def figures(self, end_ns: int) -> dict:
        """What the tier held and moved, its links' busy time counted up to ``end_ns``."""
        tier = self.tier
        return {"capacity_blocks": tier.capacity, "blocks_held": len(tier), "loads": self.num_loads,
                "blocks_loaded": self.blocks_loaded, "blocks_stored": self.blocks_stored,
                "blocks_evicted": tier.num_evicted, "stores_failed": tier.num_failed,
                "bytes_loaded": round(self.blocks_loaded * self.block_bytes),
                "bytes_stored": round(self.blocks_stored * self.block_bytes),
                "load_link_busy_ns": self.load_link.busy_until(end_ns),
                "store_link_busy_ns": self.store_link.busy_until(end_ns)}

    def storage_figures(self, end_ns: int) -> dict:
        """What the storage tier held and moved, its queues' busy time counted up to ``end_ns``."""
        storage = self.storage
        assert storage is not None
        return storage.figures(end_ns, storage.read_link.busy_until(end_ns))
