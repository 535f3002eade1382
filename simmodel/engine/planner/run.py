"""A run of passes: the candidate passes (rows) of a worker's requests (columns), over every attention-DP rank,
their per-rank totals priced in one call, and the KV operations queued in the order vLLM makes them.

Its admissions (``admissions``), its recording (``recording``) and async scheduling (``async_run``) are
modules of their own; ``drive`` plans and drives runs.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.clock import clock_ns, fits_clock
from simmodel.engine.planner.admissions import Admissions
from simmodel.engine.planner.recording import Recording
from simmodel.engine.planner.running import PRICED_AHEAD, RunningRequests, rows_within
from simmodel.engine.scheduler.base import SchedulerOutput
from simmodel.perf.timing import DECODE, PREFILL, PassSums

if TYPE_CHECKING:
    from simmodel.engine.request import Request
    from simmodel.engine.worker import Worker

_COLUMNS = 1 << 20
"""Pool operations are queued by one integer key (step × _COLUMNS + column) × 4 + action, so that a heap
pops them in vLLM's order: by step (synchronous: row × 2 + phase, a row's plan then its end; async: see
``AsyncRun``), then running order, then action."""
_ALLOCATE, _CACHE, _FINISH = 0, 1, 2

_DECODE_ROW = np.array([1, 1, 0, 1, 1])
"""What one decoding request adds to a pass's decode totals (sequences, new tokens, context, pairs, sampled),
besides its context (added to the context and pairs columns)."""


def sees_arrivals(worker: Worker) -> bool:
    """Whether the worker's runs may go on through requests waiting or arriving: only where nothing but the
    worker's own arrivals reaches it (``Worker.arrivals``) and no pass is off a prefill cadence
    (``prefill_schedule_interval``: such a pass may defer prefills, so a run stops before the plan that sees an
    arrival instead). The run admits them itself (``admits_arrivals``), or, on a worker with a host KV tier (whose
    admissions look prompts up on the host, so each is planned on its own), ends at the first decision that
    could admit one, the one after a finish or an arrival (``drive._admit_arrivals``), and no later than the
    tier's next event (``Worker._horizon``)."""
    return worker.arrivals is not None and worker.prefill_schedule_interval <= 1


def admits_arrivals(worker: Worker) -> bool:
    """Whether the worker's runs admit requests themselves (``sees_arrivals``): not with a host KV tier
    (``Worker.offloads``)."""
    return sees_arrivals(worker) and not worker.offloads


class Run(Admissions, Recording):
    """The run's requests (columns) and its candidate passes (rows), over every attention-DP rank of the worker.

    A column runs from its first row ``first`` for ``left`` passes on its rank ``rank_of``: a request running
    at the start, or one admitted in row ``first`` (its prefill then). In row j it has ``context + j − first``
    tokens in KV before the pass (as if mid-decode; a prefill row reads its tokens from the plan). Columns are
    in each rank's running order (a rank's admissions are appended after its running requests). A row's
    totals per rank (``cells[j, r]``, the timing model's ``PassSums`` columns; ``table`` is the same numbers
    with one line per pass and rank, as they are priced) are whole numbers kept exactly in float64.
    """

    lag = 0
    """Passes in flight while the next is planned (``Worker.lag``): none, a synchronous run delivers each pass it
    starts."""
    planned_alone = None
    """Never set here: the plans of a run's first pass made by the ranks (see ``sglang_run.DecodeRun``)."""
    holds_waiting = False
    """Whether the run, applied as its passes end on a worker with a host KV tier, goes on past requests waiting
    that no decision before its last could admit (``planner.plan_ticked``): its decisions admit nothing, and it
    ends at a pass end where a write to a storage tier has ended since (``Worker._tick``), as a waiting request's
    lookup at that plan could find more there, or in host slots it frees."""
    storage_marks: list[tuple] = []
    """With ``holds_waiting``: the ranks' storage marks when the run was planned (``Worker.storage_marks``)."""
    CACHE_SHIFT = (1, 1)
    """Tokens a cache insertion at step s covers: context − first + s // 2 + this, by the step's phase."""
    FINISH_BACK = 0
    """A finish at step s retires the request after row s // 2 − this."""

    def __init__(self, worker: Worker, run: RunningRequests, now: int, rows: int, ticked: bool = False) -> None:
        self.worker, self.now, self.rows = worker, now, rows
        self.ticked = ticked
        """Whether the run is applied as its passes end (``Worker._tick``): each row's finishes are recorded,
        their ``finished_at`` set, as the row ends (``Recording._record_row``)."""
        self.start0 = now
        """When row 0 starts."""
        ranks = self.ranks = worker.ranks
        R = self.num_ranks = len(ranks)
        self.scheds = [rank.scheduler for rank in ranks]
        self.pools = [rank.pool for rank in ranks]
        self.caching, self.bs = self.pools[0].caching, self.pools[0].block_size
        self.position_blocks, self.fixed_blocks = self.pools[0].position_blocks, self.pools[0].fixed_blocks
        """Blocks a request takes per ``bs`` tokens, and holds whatever its length (KV cache groups of state
        layers: ``KvLayout``; 1 and 0 otherwise)."""
        self.recorder = ranks[0].recorder
        self.base = ranks[0].num_passes
        """Passes every rank has run before row 0 (all ranks run every pass)."""
        self.admits = admits_arrivals(worker)
        """Whether the run admits requests itself (``admits_arrivals``)."""
        self.takes_placements = ticked and worker.prefill_schedule_interval <= 1 and not worker.offloads
        """Whether the run, applied as its passes end (``ticked``: ``Worker._tick``), goes on through requests
        placed on the worker meanwhile (P/D handoffs, a closed loop's next requests): the plan at the end of the
        row they come in admits them (``admit_placed``), and the run takes them if it can (``take``), else hands
        that plan over (``hand_over``). Not under a prefill schedule interval (see ``admits_arrivals``)."""
        self.calls_back_inside = self.takes_placements and (len(worker.ranks) == 1 or worker.quiet_callbacks)
        """Whether a finish that calls back into the simulation (a closed-loop client's next request) does so
        inside the run, as its row is recorded, instead of ending the run before that row. On several ranks
        only where no callback can fail the run or read a worker's state (``Worker.quiet_callbacks``): a run
        applies a row's end for all its ranks at once, and pass by pass the ranks after the one whose callback
        fails (``limits.max_requests``) would not have finished that pass, nor would their KV be freed yet for
        a router that reads it."""
        self.recorded_rows: set[int] = set()
        """Rows whose admissions were recorded as they were planned (``admit_placed``)."""
        self.stage = run.stage
        self.planned_first = run.plans is not None
        self.copying = [(rank, plan) for rank, plan in zip(ranks, run.plans) if plan.host_stores] \
            if self.planned_first and worker.offloads else []
        """The ranks whose plan of row 0 (made by them) stores to their host tier, with that plan: the copies are
        queued as row 0 ends (``first_copies``)."""
        self.requests: list[Request] = list(run.requests)
        n = len(self.requests)
        size = n + 32
        self.context = np.zeros(size, np.int64)
        self.outputs = np.zeros(size, np.int64)
        self.left = np.zeros(size, np.int64)
        self.first = np.zeros(size, np.int64)
        self.blocks = np.zeros(size, np.int64)
        self.cached = np.zeros(size, np.int64)
        self.rank_of = np.zeros(size, np.int64)
        self.prefills = np.zeros(size, bool)
        """Columns whose first row is their prefill (admitted in it, sampling their first token)."""
        self.n = n
        self.context[:n], self.outputs[:n], self.left[:n] = run.computed, run.outputs, run.left
        self.blocks[:n], self.cached[:n], self.prefills[:n] = run.blocks, run.cached, run.new
        self.rank_of[:n] = run.rank_of
        self.rows_index = np.arange(rows)
        j = self.rows_index[:, None]
        active = run.left > j
        context = run.computed + j
        positions = (run.blocks - self.fixed_blocks) // self.position_blocks  # (block_size tokens each)
        grows = (context % self.bs == 0) & (context >= positions * self.bs) & active
        if self.planned_first:
            grows[0] = False  # the plan took the first pass's blocks already
        self.allocations = run.per_rank(grows) * self.position_blocks
        """Blocks the decodes of each row take, per rank (rows, ranks)."""
        self.total_allocations = self.allocations.sum(axis=0)
        decodes = run.per_rank(active)
        contexts = run.per_rank(np.where(active, context, 0))
        table = self.table = np.zeros((rows * R, 10), order="F")  # each column contiguous: priced as arrays
        cells = self.cells = table.reshape(rows, R, 10)  # the same numbers by row and rank
        self.first_decodes = np.zeros((rows, R), np.int64)
        """Per row and rank, the requests whose first token the row samples in a decode (a P/D decode leg's first
        pass): priced and counted as decodes, but their token follows none."""
        if self.planned_first:  # the first row's prefills, from the plans, are not decodes
            for i in np.flatnonzero(run.new).tolist():
                r = int(run.rank_of[i])
                plan, k = run.plans[r], i - run.bounds[r]
                if plan.is_decode[k]:
                    self.first_decodes[0, r] += 1
                    continue
                q, c = plan.num_new_tokens[k], plan.num_context_tokens[k]
                cells[0, r, PREFILL:PREFILL + 5] += (1, q, c, q * c + q * (q + 1) // 2, 1)
                decodes[0, r] -= 1
                contexts[0, r] -= int(run.computed[i])
        cells[:, :, DECODE] = cells[:, :, DECODE + 1] = cells[:, :, DECODE + 4] = decodes
        cells[:, :, DECODE + 2] = contexts
        cells[:, :, DECODE + 3] = contexts + decodes
        self.ramp = np.asfortranarray(_DECODE_ROW + np.outer(self.rows_index, [0, 0, 1, 1, 0]))
        """Row j: what a request with j tokens of context adds to a row's decode totals."""
        self.capacity = np.tile(worker.kv_capacity_tokens, rows)
        self.busy = np.zeros((rows, R), np.int64)
        self.work_ns = np.zeros((rows, R), np.int64)
        """Each row's rank passes at datasheet peaks (``PassEnergy.work_ns``), rows ..``worked`` − 1 computed."""
        self.worked = 0
        """Rows whose ``work_ns`` is computed (``works``): a row's work depends only on its totals, so it is
        computed once they are final, when the row is recorded, not each time an admission prices the rows
        after it again."""
        self.end = np.zeros(rows, np.int64)
        self.labels: list = [()] * rows
        self.last = int(run.left.max())
        """Rows up to this one have a request running (the ones after have none yet)."""
        self.priced = 0
        """Rows priced with the columns as they are now (``price_from``); the run takes no row past them."""
        self.cap = rows
        """Rows the run may take at most (lowered where a row's blocks would not be free, or its price not fit
        the clock, or a finish would call back into the simulation outside ``calls_back_inside``)."""
        if run.calls_back is not None and not self.calls_back_inside:  # the pass in which such a request finishes
            self.cap = min(self.cap, int(run.left[run.calls_back].min()) - 1 + self.lag)
        self.applied = 0
        """Rows whose pool operations are applied (allocations, cache insertions, finishes)."""
        self.planned = 0 if self.planned_first else -1
        """Synchronous: the row the last decision planned (its allocations and insertions applied) if it is
        ahead of the rows applied, else −1; a run applied ahead that stops before it hands it to the loop
        (``finish``)."""
        self.refused: int | None = None
        """The last row whose admissions the run could not take (``Admissions.take``), which the loop then runs:
        how an async run applied ahead knows to hand over the row it planned (``AsyncRun.finish``)."""
        self.planned_rows = 1 if self.planned_first else 0
        """Rows whose allocations are taken (for a pool of counted blocks)."""
        self.returned = np.zeros((rows, R), np.int64)
        """Blocks returned at the end of each row, per rank."""
        self.admitted_blocks = np.zeros((rows, R), np.int64)
        """Blocks in use added by each row's admissions, per rank."""
        self.used_at = np.zeros((rows, R), np.int64)
        """Blocks in use on each rank as each row started (runs applied as their passes end)."""
        self.firsts: dict[tuple[int, int], list] = {}
        self.firsts_of = -1
        """(row, rank): the requests whose first token the row samples, as of ``firsts_of`` columns."""
        self.finished: dict[int, list] = {}
        """Row: the columns of the requests finishing at its end, in the order they retire."""
        self.finishes = [False] * R
        """Per rank: requests finished since its last admission (the scheduler's running list is behind)."""
        self.used_before = np.array([pool.num_used_blocks for pool in self.pools])
        self.ops: list[int] = []
        """Pool operations to come, a heap of keys (see ``_COLUMNS``)."""
        if self.caching:
            for i, (left, context, blocks, cached, new) in enumerate(zip(
                    run.left.tolist(), run.computed.tolist(), run.blocks.tolist(), run.cached.tolist(),
                    run.new.tolist())):
                self._schedule_ops(i, 0, left, context, blocks, cached, new)
        else:  # counted blocks: only the finishes are operations (the allocations are counted per row)
            last = run.left - 1
            within = np.flatnonzero(last < rows)
            self.ops = (((self._finish_step(last[within]) * _COLUMNS + within) << 2) + _FINISH).tolist()
            heapify(self.ops)  # (the keys are unique: the heap pops them in the order pushing them would)
        self.plans_by_row: dict[int, list[SchedulerOutput]] = {}
        """Row: per rank, the scheduler's output of the admissions planned in it (their part of the row's plan)."""
        self.capacity_bound = [False] * R
        """Per rank, ``prefill_capacity_bound`` as the last admission left it."""
        self.waits = [bool(s.waiting or s.handoffs) for s in self.scheds]
        """Per rank: requests wait (a prefix landed from a host KV tier too: ``RunningRequests._waiting_stays``),
        the first of them not admitted for want of a sequence slot, of KV blocks or of token budget. Slots and
        free blocks do not grow before a request of that rank finishes (decodes only take blocks; the prefix-cache
        hits of a waiting prompt only shrink as free blocks are reused), nor does the budget after a row that spent
        none on prefill (a run never holds a request back after one that did: ``Admissions.take``,
        ``RunningRequests.gather``), so the plan after each finish tries again (and the plan after each arrival,
        which also counts toward ``long_prefill_token_threshold``)."""
        self.skipped = [0] * R
        """Per rank, the requests the last admission stepped over (async: a preempted one's output in flight)."""
        self.last_admission = 0
        """The row of the last admission: it saw the finishes of the rows before it."""
        self.last_rows: list[list[int]] = [[] for _ in range(R)]
        """Per rank, a heap of the row each of its columns finishes in (``slot_decision``; rows before the last
        admission's decisions are dropped as they come up: they are never looked for again)."""
        for r, last in zip(run.rank_of.tolist(), (run.left - 1).tolist()):
            self.last_rows[r].append(last)
        for heap in self.last_rows:
            heapify(heap)
        self._kv_check(self.planned_rows)
        if worker.offloads and self.caching:
            if any(self.waits):
                self._prefix_check(self.planned_rows)
            self._flush_check(self.planned_rows)

    # -- rows ---------------------------------------------------------------------------------------

    def price_from(self, k: int) -> bool:
        """Price rows k.. up to the last with a running request, the next ``PRICED_AHEAD`` of them at most
        (``priced_further`` prices more when the run reaches them: the next arrival is mostly a row or two
        away, and its admission prices the rows after it again); False if a price does not fit the clock. The
        rows after them keep no price: each admission changes it."""
        self.worked = min(self.worked, k)  # (their totals may have changed: ``works``)
        hi = min(self.last, self.rows, k + PRICED_AHEAD)
        self.priced = max(k, hi)
        if k >= hi:
            return True
        n, R = hi - k, self.num_ranks
        sums = PassSums(self.table[k * R:hi * R], self.capacity[k * R:hi * R], n)
        seconds, labels = self.worker.timing.price_sums(sums)
        busy = clock_ns(seconds)
        if busy is None:  # a price the clock cannot hold (the pass-by-pass path reports it): not taken
            j = int(np.argmax(~fits_clock(seconds).all(axis=1)))
            self.cap = min(self.cap, k + j)
            if not j:
                return False
            hi, seconds, labels = k + j, seconds[:j], labels[:j]
            busy = clock_ns(seconds)
            self.priced = hi
        self.busy[k:hi] = busy
        end = self.end[k:hi]
        (busy[:, 0] if R == 1 else busy.max(axis=1)).cumsum(out=end)
        end += int(self.end[k - 1]) if k else self.now
        self.labels[k:hi] = labels
        return True

    def works(self, hi: int) -> np.ndarray:
        """``work_ns``, with rows ..``hi`` − 1 computed (and every row priced with them, in one call)."""
        lo = self.worked
        if lo < hi:
            hi = max(hi, min(self.priced, self.rows))
            R, n = self.num_ranks, hi - lo
            sums = PassSums(self.table[lo * R:hi * R], self.capacity[lo * R:hi * R], n)
            self.work_ns[lo:hi] = self.worker.work_ns(sums).reshape(n, R)
            self.worked = hi
        return self.work_ns

    def valid(self, horizon: float) -> int:
        """Rows the run may take as priced now: each ends before ``horizon`` and starts within the time limit."""
        return rows_within(self.end, min(self.cap, self.last, self.rows, self.priced), horizon, self.worker.limits,
                           self.now)

    def priced_further(self, taken: int, horizon: float) -> int:
        """A run whose ``taken`` rows are all it may take as priced: price the rows after them if only their
        price held it back; returns the rows it may take now (``valid``). Not a run applied as its passes end
        that holds waiting requests (it ends before the first decision after a finish, which ``plan_ticked``
        looked for among the rows priced then), nor, async, one past a pass of no time (the loop decides at
        once after it, ``plan_ticked``): those end here."""
        if self.holds_waiting:
            return taken
        if self.priced < min(self.last, self.rows, self.cap):
            before = self.priced
            if not self.price_from(before) or (self.ticked and self.lag
                                               and not self.busy[before:self.priced].max(axis=1).all()):
                return taken
        return max(taken, self.valid(horizon))

    def _kv_check(self, k: int) -> None:
        """Lower ``cap`` to the first row from k on (the rows before are planned) whose decodes would need more
        blocks than a rank has free now (frees ignored: a shorter run is the same run)."""
        free = [pool.num_free_blocks for pool in self.pools]
        if all(t <= f for t, f in zip(self.total_allocations.tolist(), free)):
            return  # even every row's blocks are free
        short = (np.cumsum(self.allocations[k:], axis=0) > free).any(axis=1)
        if short.any():
            self.cap = min(self.cap, k + int(np.argmax(short)))

    def _prefix_check(self, k: int) -> None:
        """With a host KV tier and requests waiting: lower ``cap`` to the first row from k on whose decodes would
        take a free block a waiting request finds in the GPU cache. Its GPU prefix would shrink there, and its
        host lookup then starts earlier and may find what lets it in (a load needs only the blocks it loads),
        so the plan after that row is the rank's own (``sees_arrivals``)."""
        for r, (sched, pool) in enumerate(zip(self.scheds, self.pools)):
            total = int(self.total_allocations[r])
            if sched.waiting and total:
                self._end_before(k, r, pool.first_free_holder(sched.waiting, total))

    def _flush_check(self, k: int) -> None:
        """With a host KV tier: lower ``cap`` to the first row from k on whose decodes would take a free block that
        a copy to the tier still reads (a finished request's: vLLM's flush, which the rank's own plan applies).
        Only blocks free now matter: a copy reads cached prompt blocks, which a finish inside the run puts at the
        free queue's tail (uncached ones go to its head, only pushing the others back), and the run takes no more
        blocks than were free at its start (``_kv_check``)."""
        for r in range(self.num_ranks):
            total = int(self.total_allocations[r])
            if total:
                fenced = self.worker.ranks[r].offload.fenced_blocks(self.now)
                self._end_before(k, r, self.pools[r].free_position(fenced, total) if fenced else None)

    def _end_before(self, k: int, r: int, at: int | None) -> None:
        """Lower ``cap`` to the first row from k on whose decodes on rank r would take the free block at position
        ``at`` of the free queue (None: none)."""
        if at is not None:
            reached = np.cumsum(self.allocations[k:, r]) > at
            if reached.any():
                self.cap = min(self.cap, k + int(np.argmax(reached)))

    # -- pool operations -------------------------------------------------------------------------------

    def _schedule_ops(self, i: int, f: int, left: int, context: int, blocks: int, cached: int,
                      prefill: bool) -> None:
        """Queue column i's pool operations (``ops``): the rows where its decode takes a block and where its
        tokens fill a block to cache (context + 1 reaching a block boundary past those cached), and its finish."""
        bs, ops = self.bs, self.ops
        hi = min(f + left, self.rows)
        lo = f + 1 if (prefill or (f == 0 and self.planned_first)) else f  # a planned row: done
        if self.caching:
            row = f + max(-(-context // bs), blocks) * bs - context  # context at a boundary
            if row < lo:
                row += -(-(lo - row) // bs) * bs
            for j in range(row, hi, bs):
                heappush(ops, (2 * j * _COLUMNS + i) * 4 + _ALLOCATE)
            row = f + (max(cached + 1, -(-(context + 1) // bs)) * bs - 1 - context)
            if row < lo:
                row += -(-(lo - row) // bs) * bs
            for j in range(row, hi, bs):
                heappush(ops, (2 * j * _COLUMNS + i) * 4 + _CACHE)
        if f + left - 1 < self.rows:
            heappush(ops, (int(self._finish_step(f + left - 1)) * _COLUMNS + i) * 4 + _FINISH)

    @staticmethod
    def _finish_step(last):
        """The step that retires a request whose last row is ``last`` (synchronous: that row's end)."""
        return 2 * last + 1

    def apply(self, upto: int, plan: bool) -> None:
        """Apply rows ``applied``..upto − 1 (each row's allocations and insertions, then its finishes), then
        if ``plan`` row upto's allocations and insertions, in vLLM's order:
        row, then allocations and insertions before finishes, then running order, then allocation before
        insertion."""
        if upto - self.applied + plan <= 0:
            return
        self._apply_steps(2 * upto + plan, upto + plan)
        self.applied = upto
        self.planned = upto if plan else -1

    def decide(self, d: int, plan: bool) -> None:
        """Apply the operations up to decision d, at the end of row d: rows ..d applied, and if ``plan`` row
        d + 1 planned."""
        self.apply(d + 1, plan)

    def may_plan(self, d: int, valid: int, horizon: float, source) -> bool:
        """Whether decision d may plan row d + 1 with what it admits: that row is one the run takes (``valid``
        of them as priced now)."""
        return d + 1 < valid

    def _apply_steps(self, limit: int, planned_rows: int) -> None:
        """Apply the queued operations of the steps before ``limit``; rows up to ``planned_rows`` are planned."""
        pools, ops = self.pools, self.ops
        if planned_rows > self.planned_rows:
            if not self.caching:  # counted blocks: the allocations' totals (one row's, mostly)
                lo = self.planned_rows
                allocations = self.allocations
                taken = allocations[lo] if planned_rows == lo + 1 else allocations[lo:planned_rows].sum(axis=0)
                for pool, blocks in zip(pools, taken.tolist()):
                    pool.take_for_run(blocks)
            self.planned_rows = planned_rows
        limit = limit * _COLUMNS * 4
        if not ops or ops[0] >= limit:
            return
        scheds, requests, rank_of = self.scheds, self.requests, self.rank_of
        context, first, left = self.context, self.first, self.left
        shift, back = self.CACHE_SHIFT, self.FINISH_BACK
        one_rank = self.num_ranks == 1
        while ops and ops[0] < limit:
            key = heappop(ops)
            code, action = key >> 2, key & 3
            step, i = divmod(code, _COLUMNS)
            request, r = requests[i], 0 if one_rank else int(rank_of[i])
            pool = pools[r]
            if action == _FINISH:
                row = (step >> 1) - back
                if self.caching:
                    before = pool.num_free_blocks
                    scheds[r].retire(request)
                    self.returned[row, r] += pool.num_free_blocks - before
                else:
                    blocks = max(int(self.blocks[i]), pool.blocks_for(int(context[i] + left[i]), 0))
                    request.num_blocks = blocks
                    self.returned[row, r] += blocks
                    scheds[r].retire(request)
                self.finished.setdefault(row, []).append(i)
                self.finishes[r] = True
            elif action == _CACHE:
                pool.cache_full_blocks(request, int(context[i]) - int(first[i]) + (step >> 1) + shift[step & 1])
            else:
                request.block_ids.append(pool.allocate_one())
                request.num_blocks = len(request.block_ids)

    # -- the end of the run ----------------------------------------------------------------------------

    def _rows_through(self, upto: int) -> np.ndarray:
        """How many of rows 0..upto − 1 each column runs in."""
        n = self.n
        return np.clip(np.minimum(self.left[:n], upto - self.first[:n]), 0, None)

    def plan_first(self) -> None:
        """Plan row 0 now (its blocks taken), unless the ranks planned it already."""
        if not self.planned_first:
            self.apply(0, plan=True)
            self.planned_itself()

    def finish(self, m: int) -> tuple[tuple, list[SchedulerOutput] | None]:
        """Apply and record rows 0..m − 1 of a run applied ahead; returns the passes it leaves in flight (none)
        and, if row m was planned already (the run hands it over), its plans."""
        self.first_copies()
        handing_over = self.planned == m  # (row m planned by the last decision: ``_admit_arrivals``)
        self.apply(m, handing_over)
        ran = self._rows_through(m)
        self._deliver(m, ran, self._rows_through(m + 1) if handing_over else ran, handing_over)
        self._record(m)
        if not handing_over:
            return (), None
        return (), self._hand_over(m, int(self.end[m - 1]))

    def first_copies(self) -> None:
        """Queue the copies to the host tier that row 0's plans store (``copying``) as row 0 ends, as
        ``Rank.finish_pass`` queues a pass's (before its outputs are applied)."""
        if self.copying:
            end = int(self.end[0])
            for rank, plan in self.copying:
                rank.offload.pass_ended(plan, end, self.base)
            self.copying = []

    def _hand_over(self, k: int, planned_at: int) -> list[SchedulerOutput]:
        """Row k's plans, made at ``planned_at``, for the worker to run on their own: recorded as the ranks
        record theirs (unless recorded as they were made, ``recorded_rows``), each scheduler left as its last
        admission left it."""
        plans = self._row_plans(k)
        for rank, sched, pool, plan, bound in zip(self.ranks, self.scheds, self.pools, plans, self.capacity_bound):
            sched.after_run(None, False, bound)
            plan.kv_blocks_used = pool.num_used_blocks
            if k not in self.recorded_rows:
                rank.record_plan(plan, planned_at)
        return plans

    def _row_plans(self, k: int) -> list[SchedulerOutput]:
        """Row k's plan on each rank as ``schedule()`` made it: the running requests' decodes, then the admissions."""
        outs = self.plans_by_row.get(k)
        n = self.n
        rel = k - self.first[:n]
        decoding = np.flatnonzero((rel > 0) & (rel < self.left[:n]))
        contexts = (self.context[:n] + rel).tolist()
        by_rank = self.rank_of[decoding].tolist()
        plans = []
        for r in range(self.num_ranks):
            out = outs[r] if outs is not None else SchedulerOutput()
            mine = decoding.tolist() if self.num_ranks == 1 else [i for i, q in zip(decoding.tolist(), by_rank) if q == r]
            plan = SchedulerOutput()
            plan.requests = [self.requests[i] for i in mine] + out.requests
            d = len(mine)
            plan.num_new_tokens = [1] * d + out.num_new_tokens
            plan.num_context_tokens = [contexts[i] for i in mine] + out.num_context_tokens
            plan.is_decode = [True] * d + out.is_decode
            plan.samples = [True] * d + out.samples
            plan.admitted, plan.resumed = out.admitted, out.resumed
            plans.append(plan)
        return plans

    def _deliver(self, m: int, delivered: np.ndarray, planned: np.ndarray, handing_over: bool,
                 saw_waiting: bool = True) -> None:
        """The requests and the schedulers once rows 0..m − 1 delivered their tokens, ``planned`` rows of each
        request planned (async: row m is in flight; handing over: one more row is planned)."""
        n = self.n
        first = self.first[:n]
        self._deliver_requests(np.arange(n), delivered, planned)
        requests, ends = self.requests, self.end.tolist()
        if not self.ticked:  # (a run applied as its passes end set them as each finish was recorded)
            for row, done in self.finished.items():
                for i in done:
                    requests[i].finished_at = ends[row]
        last_finished = {int(self.rank_of[i]) for i in self.finished.get(m - 1, ())}
        # Still running: the columns of a row planned (admitted ones included: async, up to two rows on) that do
        # not finish in the rows delivered.
        still = None if handing_over else np.flatnonzero((planned > 0) & (first + self.left[:n] > m))
        for r, (rank, sched) in enumerate(zip(self.ranks, self.scheds)):
            rank.num_passes += m
            if m:
                rank.last_delivery = ends[m - 1]
            running = None
            if still is not None:
                mine = still if self.num_ranks == 1 else still[self.rank_of[still] == r]
                running = [requests[i] for i in mine.tolist()]
            # Handing over, the pass after the last delivery is planned already (``schedule()`` cleared the
            # finished flag), and the scheduler's running list is as that plan left it. The last plan found the
            # requests waiting if it saw them (``saw_waiting``: a run applied as its passes end ends before any
            # plan sees a request placed meanwhile, unless it takes placements, and then no pass of it defers
            # prefills, the only thing the flag decides).
            sched.after_run(running, not handing_over and r in last_finished,
                            saw_waiting and bool(sched.waiting or sched.handoffs))

    def _deliver_requests(self, columns: np.ndarray, delivered: np.ndarray, planned: np.ndarray) -> None:
        """Columns ``columns``' requests once ``delivered`` of their rows delivered their tokens and ``planned``
        were planned (arrays over the columns given)."""
        context, outs = self.context[columns], self.outputs[columns]
        computed = (context + planned).tolist()
        outputs = (outs + delivered).tolist()
        in_flight = (planned - delivered).tolist() if self.lag else None
        blocks = None  # counted blocks (no prefix caching): those of the tokens computed, for the running
        if not self.caching:
            blocks = np.maximum(self.blocks[columns], self.pools[0].blocks_for(context + planned, 0)).tolist()
        lefts = self.left[columns].tolist()
        ends = self.end.tolist()
        base = self.base
        first_rows, runs, prefills = self.first[columns].tolist(), delivered.tolist(), self.prefills[columns].tolist()
        plans = planned.tolist()
        requests = self.requests
        for i, c in enumerate(columns.tolist()):
            request = requests[c]
            r = runs[i]
            if not r and prefills[i]:  # admitted into a row still to run: as its admission left it, but for
                extra = plans[i] - 1  # the decodes planned after it (async, handing over: the row after it)
                if extra > 0:
                    request.num_computed_tokens += extra
                    request.num_output_placeholders += extra
                    request.num_in_flight_tokens += extra
                    if blocks is not None:
                        request.num_blocks = blocks[i]
                continue
            if not r:  # nothing delivered yet (an error stopped the simulation in the run's first row)
                request.num_computed_tokens = computed[i]
                if in_flight is not None:
                    request.num_output_placeholders = request.num_in_flight_tokens = in_flight[i]
                if blocks is not None:
                    request.num_blocks = blocks[i]
                continue
            f = first_rows[i]
            request.num_computed_tokens = computed[i]
            request.num_output_tokens = outputs[i]
            if in_flight is not None:
                request.num_output_placeholders = request.num_in_flight_tokens = in_flight[i]
                request.is_prefill_chunk = False
            request.num_emitted = 1
            if blocks is not None and r < lefts[i]:
                request.num_blocks = blocks[i]
            if prefills[i]:
                request.first_token_at = ends[f]
                if r >= 2:
                    request.second_token_at = ends[f + 1]
            elif request.second_token_at is None:
                request.second_token_at = ends[f]
            request.last_token_at = ends[f + r - 1]
            request.last_token_pass = base + f + r - 1

    def _used(self, upto: int) -> np.ndarray:
        """Blocks in use on each rank when each row 0..upto − 1 was planned, shape (upto, ranks): allocations and
        admissions so far, less the blocks of the requests finished before (synchronous: by the row before;
        async: by the one before it)."""
        back = 1 + self.lag
        used = (self.used_before + np.cumsum(self.allocations[:upto], axis=0)
                + np.cumsum(self.admitted_blocks[:upto], axis=0))
        used[back:] -= np.cumsum(self.returned[:max(upto - back, 0)], axis=0)
        return used

    # -- a run applied as its passes end -------------------------------------------------------------

    def begin_row(self, k: int) -> None:
        """Row k starts now, planned (its blocks taken): counted against the limits, its blocks in use noted
        and its begin events recorded, as the pass barrier starts a pass."""
        start = self.start0 if k == 0 else int(self.end[k - 1])
        if self.worker.limits is not None:
            self.worker.limits.count_pass(start)
        self.used_at[k] = [pool.num_used_blocks for pool in self.pools]
        rec = self.recorder
        if rec.keep_events or rec.sink is not None:
            rows: list = []
            cells = self.cells[k]
            tokens = (cells[:, DECODE] + cells[:, PREFILL + 1]).astype(np.int64).tolist()
            self._begin_events(k, start, start, tokens, rows.append)
            rec.add_events(rows)

    def end_row(self, k: int) -> bool:
        """Row k ends now: its finishes applied and recorded as the pass barrier finishes each rank's pass
        (``_record_row``); whether a finish called back as it was recorded."""
        if not k:
            self.first_copies()
        self.apply(k + 1, False)
        return self._record_row(k, self.used_at[k].tolist())

    def plan_row(self, k: int) -> None:
        """Row k + 1 is planned now, at the end of row k (its blocks taken, its cache insertions made)."""
        self.apply(k + 1, True)
        self.planned_itself()

    def deliver_finished(self, columns: list[int]) -> None:
        """The requests of ``columns``, finished at the end of the row just recorded: as the run leaves them
        (``_deliver``), before their finish calls back."""
        index = np.array(columns)
        left = self.left[index]
        self._deliver_requests(index, left, left)

    def admit_placed(self, k: int, at: int) -> list[SchedulerOutput]:
        """Row k, planned now (``at``, the end of row k − 1, async: of row k − 2; ``end_row`` applied), sees the
        requests placed on the worker during that row, or still waiting: every rank admits (``admit``) and records
        its plan's admissions, as a rank records its plan."""
        outs = self.admit(k, at if self.lag else None)  # (async: seeing the requests arrived before)
        for rank, out in zip(self.ranks, outs):
            rank.record_plan(out, at)
        self.recorded_rows.add(k)
        return outs

    def hand_over(self, m: int) -> tuple[tuple, list[SchedulerOutput]]:
        """The run stops after row m − 1, and row m, planned at its end (``admit_placed``), runs on its own:
        the requests and the schedulers as that plan left them; no pass in flight, and row m's plans."""
        ran = self._rows_through(m)
        self._deliver(m, ran, self._rows_through(m + 1), True)
        self.worker.count_run(m, self.labels[:m], int(self.busy[m - 1].max()), limits_counted=True)
        return (), self._hand_over(m, int(self.end[m - 1]))

    def waiting(self) -> bool:
        """Whether a request waits on any rank (or a received handoff is not admitted yet)."""
        return any(sched.waiting or sched.handoffs for sched in self.scheds)

    def close(self, m: int, ahead: int = 0, started: int | None = None) -> tuple:
        """The run stops after row m − 1, and ``ahead`` rows after it are planned, ``started`` of them (default:
        all) started (an error stopped the simulation during row m, or as it started); every row was counted
        against the limits as it started. The requests and the schedulers as it leaves them; returns the passes
        it leaves in flight (none: a synchronous run delivers every pass it starts)."""
        ran = self._rows_through(m)
        self._deliver(m, ran, self._rows_through(m + ahead) if ahead else ran, False, saw_waiting=False)
        last = m + (ahead if started is None else started) - 1
        self.worker.count_run(m, self.labels[:last + 1], int(self.busy[last].max()) if last >= 0 else 0,
                              limits_counted=True)
        return ()
