"""The vLLM pass planner: a worker's passes planned as one run, in closed form, for every attention-DP rank.

In steady serving every pass is a decode of the same running requests (``decode_run`` reads them as
arrays), and an admission only adds a column to that picture: the prompt's prefill in the pass that admits
it, then one decode a pass. A run holds the candidate passes (rows) of the running requests (columns), the
per-rank totals the timing model prices them from (one call for the whole run), and the KV operations
(allocations, prefix-cache insertions, finishes) queued in the order vLLM makes them.

Two ways to drive a run (``docs/speed.md``):

- ahead (``carry``, ``carry_async``): a worker that only its own arrivals reach (``Worker.arrivals``: an
  open-loop load placed by a router that reads no state) applies the run when it starts and yields to its
  end. A run does not stop at an arrival: the request is created as at its arrival time
  (``WorkerArrivals.arrive_early``: creating it schedules nothing), each rank's scheduler admits with its
  own admission (``VllmScheduler.admit_waiting``) when the pass after the arrival is planned — on the pool
  and queue as they are then — and the run prices the passes from there on again with the new columns.
  When an admission is not whole prompts admitted alone (a chunk, a resumption), that pass, planned by the
  schedulers, is handed to the worker to run on its own (see ``Worker._carry``; async, where the plan that
  sees an arrival is made at the first pass end after it, two passes ahead, the run ends at that pass end
  and hands the plan to the worker's loop). Without known arrivals, async runs stop before the next event
  of any other process.
- as the passes end (``plan_ticked``, driven by ``Worker._tick``): any other synchronous worker applies
  each row when its pass ends, at the SimPy event the pass-by-pass barrier would make, and ends the run when
  something was placed on it meanwhile.

A run also ends before a pass short of KV blocks (vLLM would preempt), a finish that calls back into the
simulation, the safety limits, and when every request has finished. Passes, events, inter-token
intervals, block ids and every request's fields are those of the pass-by-pass run;
``tests/scenarios/test_decode_runs.py`` checks it, byte for byte.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.clock import NS_PER_S
from simmodel.engine.decode_run import MAX_RUN, DecodeRun, busy_ns, joined
from simmodel.engine.recorder import Event as EventRow
from simmodel.engine.recorder import EventKind, PassRecord
from simmodel.engine.request import RequestStatus
from simmodel.engine.scheduler.base import SchedulerOutput
from simmodel.perf.timing import DECODE, PREFILL, PassSums

if TYPE_CHECKING:
    from simmodel.engine.request import Request
    from simmodel.engine.worker import Worker

_COLUMNS = 1 << 20
"""Pool operations are queued by one integer key (step × _COLUMNS + column) × 4 + action, so that a heap
pops them in vLLM's order: by step (synchronous: row × 2 + phase, a row's plan then its end; async: see
``_CarriedAsync``), then running order, then action."""
_ALLOCATE, _CACHE, _FINISH = 0, 1, 2

_DECODE_ROW = np.array([1, 1, 0, 1, 1])
"""What one decoding request adds to a pass's decode totals (sequences, new tokens, context, pairs, sampled),
besides its context (added to the context and pairs columns)."""


class _Carried:
    """The run's requests (columns) and its candidate passes (rows), over every attention-DP rank of the worker.

    A column runs from its first row ``first`` for ``left`` passes on its rank ``rank_of``: a request running
    at the start, or one admitted in row ``first`` (its prefill then). In row j it has ``context + j − first``
    tokens in KV before the pass (as if mid-decode; a prefill row reads its tokens from the plan). Columns are
    in each rank's running order (a rank's admissions are appended after its running requests). A row's
    totals per rank (``cells[j, r]``, the timing model's ``PassSums`` columns; ``table`` is the same numbers
    with one line per pass and rank, as they are priced) are whole numbers kept exactly in float64.
    """

    asynchronous = False
    CACHE_SHIFT = (1, 1)
    """Tokens a cache insertion at step s covers: context − first + s // 2 + this, by the step's phase."""
    FINISH_BACK = 0
    """A finish at step s retires the request after row s // 2 − this."""

    def __init__(self, worker: Worker, run: DecodeRun, now: int, rows: int) -> None:
        self.worker, self.now, self.rows = worker, now, rows
        self.start0 = now
        """When row 0 starts."""
        ranks = self.ranks = worker.ranks
        R = self.num_ranks = len(ranks)
        self.scheds = [rank.scheduler for rank in ranks]
        self.pools = [rank.pool for rank in ranks]
        self.caching, self.bs = self.pools[0].caching, self.pools[0].block_size
        self.recorder = ranks[0].recorder
        self.base = ranks[0].num_passes
        """Passes every rank has run before row 0 (all ranks run every pass)."""
        self.admits = worker.arrivals is not None and worker.prefill_schedule_interval <= 1
        """Whether the run admits requests itself: only where nothing but the worker's own arrivals reaches it
        (``Worker.arrivals``), and no pass is off a prefill cadence (``prefill_schedule_interval``: such a
        pass may defer prefills, so the run stops before the plan that sees an arrival instead)."""
        self.stage = run.stage
        self.planned_first = run.plans is not None
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
        grows = (context % self.bs == 0) & (context >= run.blocks * self.bs) & active
        if self.planned_first:
            grows[0] = False  # the plan took the first pass's blocks already
        self.allocations = run.per_rank(grows)
        """Blocks the decodes of each row take, per rank (rows, ranks)."""
        self.total_allocations = self.allocations.sum(axis=0)
        decodes = run.per_rank(active)
        contexts = run.per_rank(np.where(active, context, 0))
        table = self.table = np.zeros((rows * R, 10), order="F")  # each column contiguous: priced as arrays
        cells = self.cells = table.reshape(rows, R, 10)  # the same numbers by row and rank
        self.first_decodes = np.zeros(R, np.int64)
        """Per rank, the requests whose first token row 0 samples in a decode (a P/D decode leg's first pass):
        priced and counted as decodes, but their token follows none."""
        if self.planned_first:  # the first row's prefills, from the plans, are not decodes
            for i in np.flatnonzero(run.new).tolist():
                r = int(run.rank_of[i])
                plan, k = run.plans[r], i - run.bounds[r]
                if plan.is_decode[k]:
                    self.first_decodes[r] += 1
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
        self.end = np.zeros(rows, np.int64)
        self.labels: list = [()] * rows
        self.last = int(run.left.max())
        """Rows up to this one have a request running (the ones after have none yet)."""
        self.cap = rows
        """Rows the run may take at most (lowered where a row's blocks would not be free, or its price not fit
        the clock, or a finish would call back into the simulation)."""
        if run.calls_back is not None:  # the pass in which such a request finishes runs on its own
            self.cap = min(self.cap, int(run.left[run.calls_back].min()) - 1 + self.asynchronous)
        self.applied = 0
        """Rows whose pool operations are applied (allocations, cache insertions, finishes)."""
        self.planned = 0 if self.planned_first else -1
        """The row whose planning (its allocations and insertions) is applied, if ahead of ``applied``."""
        self.planned_rows = 1 if self.planned_first else 0
        """Rows whose allocations are taken (for a pool of counted blocks)."""
        self.returned = np.zeros((rows, R), np.int64)
        """Blocks returned at the end of each row, per rank."""
        self.admitted_blocks = np.zeros((rows, R), np.int64)
        """Blocks in use added by each row's admissions, per rank."""
        self.used_at = np.zeros((rows, R), np.int64)
        """Blocks in use on each rank as each row started (runs applied as their passes end)."""
        self.finished: dict[int, list] = {}
        """Row: the columns of the requests finishing at its end, in the order they retire."""
        self.finishes = [False] * R
        """Per rank: requests finished since its last admission (the scheduler's running list is behind)."""
        self.used_before = np.array([pool.num_used_blocks for pool in self.pools])
        self.ops: list[int] = []
        """Pool operations to come, a heap of keys (see ``_COLUMNS``)."""
        for i, (left, context, blocks, cached, new) in enumerate(zip(
                run.left.tolist(), run.computed.tolist(), run.blocks.tolist(), run.cached.tolist(), run.new.tolist())):
            self._schedule_ops(i, 0, left, context, blocks, cached, new)
        self.plans_by_row: dict[int, list[SchedulerOutput]] = {}
        """Row: per rank, the scheduler's output of the admissions planned in it (their part of the row's plan)."""
        self.capacity_bound = [False] * R
        """Per rank, ``prefill_capacity_bound`` as the last admission left it."""
        self.waits = [bool(s.waiting) for s in self.scheds]
        """Per rank: requests wait, the first of them not admitted for want of a sequence slot, of KV blocks or
        of token budget. None of those grows before a request of that rank finishes (decodes only take blocks;
        the prefix-cache hits of a waiting prompt only shrink as free blocks are reused), so the plan after each
        finish tries again (and the plan after each arrival, which also counts toward
        ``long_prefill_token_threshold``)."""
        self.skipped = [0] * R
        """Per rank, the requests the last admission stepped over (async: a preempted one's output in flight)."""
        self.last_admission = 0
        """The row of the last admission: it saw the finishes of the rows before it."""
        self._kv_check(self.planned_rows)

    # -- rows ---------------------------------------------------------------------------------------

    def price_from(self, k: int) -> bool:
        """Price rows k.. up to the last with a running request; False if a price does not fit the clock."""
        hi = min(self.last, self.rows)
        if k >= hi:
            return True
        n, R = hi - k, self.num_ranks
        seconds, labels = self.worker.timing.price_sums(
            PassSums(self.table[k * R:hi * R], self.capacity[k * R:hi * R], n))
        busy = busy_ns(seconds)
        if busy is None:  # a price the clock cannot hold (the pass-by-pass path reports it): not taken
            fits = ((seconds * NS_PER_S < 2**62) & (seconds >= 0)).all(axis=1)
            j = int(np.argmax(~fits))
            self.cap = min(self.cap, k + j)
            if not j:
                return False
            hi, seconds, labels = k + j, seconds[:j], labels[:j]
            busy = busy_ns(seconds)
        self.busy[k:hi] = busy
        self.end[k:hi] = np.cumsum(busy[:, 0] if R == 1 else busy.max(axis=1)) + (self.end[k - 1] if k else self.now)
        self.labels[k:hi] = labels
        return True

    def valid(self, horizon: float) -> int:
        """Rows the run may take as priced now: each ends before ``horizon`` and starts within the time limit."""
        v = min(self.cap, self.last, self.rows)
        end = self.end[:v]
        v = min(v, int(np.searchsorted(end, horizon, side="left")))
        limits = self.worker.limits
        if limits is not None:
            if self.now > limits.max_time_ns:
                return 0
            v = min(v, 1 + int(np.searchsorted(end, limits.max_time_ns, side="right")))
        return v

    def _kv_check(self, k: int) -> None:
        """Lower ``cap`` to the first row from k on (the rows before are planned) whose decodes would need more
        blocks than a rank has free now (frees ignored: a shorter run is the same run)."""
        free = np.array([pool.num_free_blocks for pool in self.pools])
        if (self.total_allocations <= free).all():
            return  # even every row's blocks are free
        short = (np.cumsum(self.allocations[k:], axis=0) > free).any(axis=1)
        if short.any():
            self.cap = min(self.cap, k + int(np.argmax(short)))

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
            heappush(ops, ((2 * (f + left - 1) + 1) * _COLUMNS + i) * 4 + _FINISH)

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

    def _apply_steps(self, limit: int, planned_rows: int) -> None:
        """Apply the queued operations of the steps before ``limit``; rows up to ``planned_rows`` are planned."""
        pools, scheds, requests, ops, rank_of = self.pools, self.scheds, self.requests, self.ops, self.rank_of
        if not self.caching and planned_rows > self.planned_rows:  # counted blocks: the allocations' totals
            taken = self.allocations[self.planned_rows:planned_rows].sum(axis=0).tolist()
            for pool, blocks in zip(pools, taken):
                pool.take_for_run(blocks)
        self.planned_rows = max(self.planned_rows, planned_rows)
        limit = limit * _COLUMNS * 4
        context, first, left, bs = self.context, self.first, self.left, self.bs
        shift, back = self.CACHE_SHIFT, self.FINISH_BACK
        while ops and ops[0] < limit:
            key = heappop(ops)
            code, action = key >> 2, key & 3
            step, i = divmod(code, _COLUMNS)
            request, r = requests[i], int(rank_of[i])
            pool = pools[r]
            if action == _FINISH:
                row = (step >> 1) - back
                if self.caching:
                    before = pool.num_free_blocks
                    scheds[r].retire(request)
                    self.returned[row, r] += pool.num_free_blocks - before
                else:
                    blocks = max(int(self.blocks[i]), -(-int(context[i] + left[i]) // bs))
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

    # -- admissions ------------------------------------------------------------------------------------

    def admit(self, k: int, arrived_before: int | None = None) -> list[SchedulerOutput]:
        """Every rank's admissions when row k is planned (its decodes planned already), as ``schedule()`` makes
        them after planning the running requests (async: seeing the requests ``arrived_before``)."""
        outs = []
        for r, (sched, pool) in enumerate(zip(self.scheds, self.pools)):
            if self.finishes[r]:  # the scheduler's list, as the passes before left it
                sched.running = [q for q in sched.running if q.status is RequestStatus.RUNNING]
                self.finishes[r] = False
            cfg = sched.config
            eligible = len(sched.running) + len(sched.waiting) + len(sched.handoffs)
            threshold = cfg.long_prefill_token_threshold if eligible > 1 else 0
            out = SchedulerOutput()
            sched.finished_since_schedule = False
            used = pool.num_used_blocks
            budget = cfg.max_num_batched_tokens - int(self.cells[k, r, DECODE])  # after the row's decodes
            skipped = self.skipped[r] = sched.admit_waiting(budget, threshold, out, arrived_before)
            self.admitted_blocks[k, r] += pool.num_used_blocks - used
            self.capacity_bound[r] = len(sched.waiting) + len(sched.handoffs) > skipped
            outs.append(out)
        self.plans_by_row[k] = outs
        self.worker.mark_planned()
        return outs

    def take(self, k: int, outs: list[SchedulerOutput], admitted_at: int) -> bool:
        """Add the requests admitted in row k (planned at ``admitted_at``) as columns and price the rows from
        k again; False if the admission is not whole prompts alone (the row is then handed over)."""
        self.last_admission = k
        waits = [bool(sched.waiting) for sched in self.scheds]
        admitted = any(out.admitted for out in outs)
        if not admitted and not any(waits):
            return False
        for sched, out, skipped in zip(self.scheds, outs, self.skipped):
            if (sched.handoffs or out.resumed or skipped or not all(out.samples)
                    or len(sched.running) > sched.config.max_num_batched_tokens):
                return False
        self.waits = waits
        if not admitted:
            return True  # the first waiting request does not fit yet: the row only decodes
        max_model_len, bs = self.scheds[0].config.max_model_len, self.bs
        staged = self.recorder.staged
        for out in outs:
            for request in out.requests:
                if (min(request.max_tokens, max_model_len - request.num_prompt_tokens) < 1
                        or request.on_finish is not None or request.num_output_tokens or request.bootstrap
                        or request.kv_transferred or (staged and request.stage != self.stage)):
                    return False
        cells, rows = self.cells, self.rows
        for r, out in enumerate(outs):
            prefill = cells[k, r]
            for request, q, c in zip(out.requests, out.num_new_tokens, out.num_context_tokens):
                prompt, blocks = request.num_prompt_tokens, request.num_blocks
                left = min(request.max_tokens, max_model_len - prompt)
                context = prompt - 1
                self._column(request, r, context, left, k, blocks, request.num_cached_blocks)
                request.first_admitted_at = admitted_at
                prefill[PREFILL] += 1  # its prefill: q new tokens on c cached, sampling its first token
                prefill[PREFILL + 1] += q
                prefill[PREFILL + 2] += c
                prefill[PREFILL + 3] += q * c + q * (q + 1) // 2
                prefill[PREFILL + 4] += 1
                lo, hi = k + 1, min(k + left, rows)
                if lo < hi:  # its decodes: context + j − k tokens in KV in row j
                    cells[lo:hi, r, DECODE:DECODE + 5] += self.ramp[lo:hi]
                    cells[lo:hi, r, DECODE + 2:DECODE + 4] += context - k
                    j = k + max(-(-(context + 1) // bs), blocks) * bs - context  # its first block boundary
                    if j < hi:
                        self.allocations[j:hi:bs, r] += 1
                        self.total_allocations[r] += len(range(j, hi, bs))
                if k + left > self.last:
                    self.last = k + left
        self._kv_check(k + 1)
        return self.price_from(k)

    def _waiting_columns(self) -> np.ndarray:
        """The columns of the ranks where requests wait."""
        n = self.n
        if self.num_ranks == 1:
            return np.ones(n, bool)
        return np.array(self.waits)[self.rank_of[:n]]

    def slot_row(self, valid: int) -> int | None:
        """While requests wait on a rank (``waits``): the first row before ``valid`` whose plan sees a finish
        there since the last admission (None: none)."""
        if not any(self.waits):
            return None
        n = self.n
        last = self.first[:n] + self.left[:n] - 1  # the row each request finishes in
        later = last[(last >= self.last_admission) & self._waiting_columns()]
        if not later.size:
            return None
        row = int(later.min()) + 1
        return row if row < valid else None

    def _column(self, request: Request, r: int, context: int, left: int, first: int, blocks: int,
                cached: int) -> None:
        """Add a request admitted on rank r in row ``first`` (its prefill) as the last column."""
        i = self.n
        if i == len(self.left):
            for name in ("context", "outputs", "left", "first", "blocks", "cached", "rank_of", "prefills"):
                array = getattr(self, name)
                setattr(self, name, np.concatenate((array, np.zeros_like(array))))
        self.context[i], self.left[i], self.first[i], self.blocks[i], self.cached[i] = (
            context, left, first, blocks, cached)
        self.outputs[i], self.prefills[i], self.rank_of[i] = 0, True, r
        self.requests.append(request)
        self.n = i + 1
        self._schedule_ops(i, first, left, context, blocks, cached, True)

    # -- the end of the run ----------------------------------------------------------------------------

    def commit(self, m: int, handing_over: bool) -> list[SchedulerOutput] | None:
        """Apply and record rows 0..m − 1; if ``handing_over``, return the plans of row m (planned already)."""
        self.apply(m, handing_over)
        n = self.n
        first, left = self.first[:n], self.left[:n]
        ran = np.clip(np.minimum(left, m - first), 0, None)
        self._deliver(m, ran, ran + ((first < m) & (m - first < left)) if handing_over else ran, handing_over)
        self._record(m)
        if not handing_over:
            return None
        return self._hand_over(m, int(self.end[m - 1]))

    def _hand_over(self, k: int, planned_at: int) -> list[SchedulerOutput]:
        """Row k's plans, made at ``planned_at``, for the worker to run on their own: recorded as the ranks
        record theirs, each scheduler left as its last admission left it."""
        plans = self._row_plans(k)
        for rank, sched, pool, plan, bound in zip(self.ranks, self.scheds, self.pools, plans, self.capacity_bound):
            sched.prefill_capacity_bound = bound
            plan.kv_blocks_used = pool.num_used_blocks
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

    def _deliver(self, m: int, delivered: np.ndarray, planned: np.ndarray, handing_over: bool) -> None:
        """The requests and the schedulers once rows 0..m − 1 delivered their tokens, ``planned`` rows of each
        request planned (async: row m is in flight; handing over: one more row is planned)."""
        n = self.n
        first = self.first[:n]
        computed = (self.context[:n] + planned).tolist()
        outputs = (self.outputs[:n] + delivered).tolist()
        in_flight = (planned - delivered).tolist() if self.asynchronous else None
        blocks = None  # counted blocks (no prefix caching): those of the tokens computed, for the running
        if not self.caching:
            blocks = np.maximum(self.blocks[:n], -(-(self.context[:n] + planned) // self.bs)).tolist()
        lefts = self.left[:n].tolist()
        ends = self.end.tolist()
        base = self.base
        first_rows, runs, prefills = first.tolist(), delivered.tolist(), self.prefills[:n].tolist()
        plans = planned.tolist()
        for i, request in enumerate(self.requests):
            r = runs[i]
            if not r:  # admitted into a row still to run: as its admission left it, but for the decodes
                extra = plans[i] - 1  # planned after it (async, handing over: the row after it)
                if extra > 0:
                    request.num_computed_tokens += extra
                    request.num_output_placeholders += extra
                    request.num_in_flight_tokens += extra
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
            request.num_scheduled_drafts = 0
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
        requests = self.requests
        for row, done in self.finished.items():
            for i in done:
                requests[i].finished_at = ends[row]
        last_finished = {int(self.rank_of[i]) for i in self.finished.get(m - 1, ())}
        still = None if handing_over else np.flatnonzero((first <= m) & (first + self.left[:n] > m))
        for r, (rank, sched) in enumerate(zip(self.ranks, self.scheds)):
            rank.num_passes += m
            rank.last_delivery = ends[m - 1]
            sched.prefill_capacity_bound = bool(sched.waiting)  # what the plan of the last row found
            # Handing over, the pass after the last delivery is planned already (``schedule()`` clears the
            # flag), and the scheduler's running list is as that plan left it.
            sched.finished_since_schedule = not handing_over and r in last_finished
            if still is not None:
                mine = still if self.num_ranks == 1 else still[self.rank_of[still] == r]
                sched.running = [requests[i] for i in mine.tolist()]

    def _used(self, upto: int) -> np.ndarray:
        """Blocks in use on each rank when each row 0..upto − 1 was planned, shape (upto, ranks): allocations and
        admissions so far, less the blocks of the requests finished before (synchronous: by the row before;
        async: by the one before it)."""
        lag = 1 + self.asynchronous
        used = (self.used_before + np.cumsum(self.allocations[:upto], axis=0)
                + np.cumsum(self.admitted_blocks[:upto], axis=0))
        used[lag:] -= np.cumsum(self.returned[:max(upto - lag, 0)], axis=0)
        return used

    def _record(self, m: int) -> None:
        """Record rows 0..m − 1 at once (see ``_record_rows``) and count them as started."""
        used = self._used(m)
        if self.asynchronous:
            used[0] = [plan.kv_blocks_used for plan in self.in_flight_plans]
        self._record_rows(0, m, used, begins=True)
        s = int(self.asynchronous)  # the passes started in the run: synchronous 0..m − 1, async 1..m
        self.worker.count_run(m, self.labels[s:m + s], int(self.busy[m - 1 + s].max()))

    def _starts(self, lo: int, hi: int) -> np.ndarray:
        """When rows lo..hi − 1 start: row 0 at ``start0``, each other one as the row before it ends."""
        if lo == 0:
            return np.concatenate(([self.start0], self.end[:hi - 1]))
        return self.end[lo - 1:hi - 1]

    def _record_rows(self, lo: int, hi: int, used: np.ndarray, begins: bool) -> None:
        """Record rows lo..hi − 1 as the pass-by-pass loop records their passes (``used``: each one's blocks in use
        per rank): per row, if ``begins``, every rank's admissions and then every rank's begin event, then per
        rank its first tokens, finishes and end event. Async, a row's begin event (and its admissions) is
        appended when it is planned, before the outputs of the row before it are delivered."""
        worker, rec, R = self.worker, self.recorder, self.num_ranks
        role, w = worker.role, worker.worker_id
        s = int(self.asynchronous) if begins else 0  # rows planned ahead of the deliveries
        cells = self.cells[lo:hi + s]
        decodes = cells[:, :, DECODE].astype(np.int64)
        prefill_seqs = cells[:, :, PREFILL].astype(np.int64)
        prefill_tokens = cells[:, :, PREFILL + 1].astype(np.int64)
        tokens = decodes + prefill_tokens
        m = hi - lo
        starts = self._starts(lo, hi + s)
        ends = self.end[lo:hi]
        gaps = (ends - starts[:m]).tolist()
        values, counts = rec.itl_values, rec.itl_counts
        kept = 0
        follows = decodes[:m]  # decodes: their token follows one sampled the pass before
        if lo == 0 and self.first_decodes.any():
            follows = follows.copy()
            follows[0] -= self.first_decodes
        if R == 1:
            for gap, c in zip(gaps, follows[:, 0].tolist()):
                if c > 0:
                    values.append(gap)
                    counts.append(c)
                    kept += 1
        else:
            for gap, row in zip(gaps, follows.tolist()):
                for c in row:
                    if c > 0:
                        values.append(gap)
                        counts.append(c)
                        kept += 1
        if rec.staged:  # a run's intervals are all of one stage
            rec.itl_stages.extend([self.stage] * kept)
        labels = joined(self.labels[lo:hi])
        if m == 1:  # one row (a run applied as its passes end): appended as the barrier appends a pass's rows
            self._append_row(lo, int(starts[0]), int(ends[0]), tokens[0], prefill_tokens[0], prefill_seqs[0],
                             decodes[0], used[0], labels[0])
        elif R == 1:
            per_pass = (w, 0, np.arange(self.base + lo, self.base + hi), starts[:m], ends)
        else:
            labels = [label for label in labels for _ in range(R)]
            per_pass = (w, np.tile(np.arange(R), m), np.repeat(np.arange(self.base + lo, self.base + hi), R),
                        np.repeat(starts[:m], R), np.repeat(ends, R))
        if m > 1:
            sampled = decodes[:m] + prefill_seqs[:m]
            rec.passes.extend(role, labels,
                              (*per_pass, tokens[:m].ravel(), prefill_tokens[:m].ravel(), prefill_seqs[:m].ravel(),
                               decodes[:m].ravel(), sampled.ravel(), used.ravel(), 0, self.busy[lo:hi].ravel()),
                              int(ends[m - 1]))
        finished = self.finished
        if not (rec.keep_events or rec.sink is not None):
            rec.num_done += sum(len(done) for row, done in finished.items() if lo <= row < hi)
            return
        new_event = tuple.__new__
        PASS_END, FIRST_TOKEN, FINISH = EventKind.PASS_END, EventKind.FIRST_TOKEN, EventKind.FINISH
        requests, rank_of, outputs, left = self.requests, self.rank_of, self.outputs, self.left
        firsts: dict[tuple[int, int], list] = {}
        n = self.n
        first = self.first[:n]
        for i in np.flatnonzero(self.prefills[:n] & (first >= lo) & (first < hi)).tolist():
            firsts.setdefault((int(first[i]), int(rank_of[i])), []).append(requests[i])
        rows = []
        add = rows.append
        per_row, start_list, end_list = tokens.tolist(), starts.tolist(), ends.tolist()
        for x in range(m):
            k = lo + x
            t1 = end_list[x]
            if begins:  # row k + s is planned (its begin appended) as row k − 1 ends
                self._begin_events(k + s, start_list[x], start_list[x + s], per_row[x + s], add)
            done = finished.get(k, ())
            for r in range(R):
                for request in firsts.get((k, r), ()):
                    add(new_event(EventRow, (t1, FIRST_TOKEN, w, r, request.request_id, 1, role, -1)))
                for i in done:  # with all its outputs (a run applied as its passes end delivers them later)
                    if R == 1 or rank_of[i] == r:
                        add(new_event(EventRow, (t1, FINISH, w, r, requests[i].request_id,
                                                 int(outputs[i] + left[i]), role, -1)))
                add(new_event(EventRow, (t1, PASS_END, w, r, -1, per_row[x][r], role, self.base + k)))
        rec.add_events(rows)

    def _append_row(self, k: int, start: int, end: int, tokens: np.ndarray, prefill_tokens: np.ndarray,
                    prefill_seqs: np.ndarray, decodes: np.ndarray, used: np.ndarray, label: str) -> None:
        """Append row k's pass rows, one per rank (the values per rank)."""
        worker, passes = self.worker, self.recorder.passes
        role, w, index = worker.role, worker.worker_id, self.base + k
        for r, (t, pt, ps, d, u, b) in enumerate(zip(tokens.tolist(), prefill_tokens.tolist(), prefill_seqs.tolist(),
                                                       decodes.tolist(), used.tolist(), self.busy[k].tolist())):
            passes.append(PassRecord(role, w, r, index, start, end, t, pt, ps, d, d + ps, u, 0, b, label))

    def _begin_events(self, j: int, planned_at: int, start: int, tokens: list[int], add) -> None:
        """Append row j's admissions (planned at ``planned_at``) and every rank's begin event (at ``start``,
        ``tokens`` scheduled per rank)."""
        worker = self.worker
        role, w, new_event = worker.role, worker.worker_id, tuple.__new__
        for r, out in enumerate(self.plans_by_row.get(j) or ()):
            for request, q in zip(out.requests, out.num_new_tokens):
                add(new_event(EventRow, (planned_at, EventKind.ADMISSION, w, r, request.request_id, q, role, -1)))
        for r in range(self.num_ranks):
            add(new_event(EventRow, (start, EventKind.PASS_BEGIN, w, r, -1, tokens[r], role, self.base + j)))

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

    def end_row(self, k: int, plan_next: bool) -> None:
        """Row k ends now: its finishes applied, and if ``plan_next`` the planning of row k + 1; recorded as the
        pass barrier records a pass end."""
        self.apply(k + 1, plan_next)
        self._record_rows(k, k + 1, self.used_at[k:k + 1], begins=False)

    def close(self, m: int) -> None:
        """The run stops after row m − 1 (every row up to it started and ended, and counted as it started):
        the requests and the schedulers as it leaves them."""
        n = self.n
        ran = np.clip(np.minimum(self.left[:n], m - self.first[:n]), 0, None)
        self._deliver(m, ran, ran, False)
        self.worker.count_run(m, self.labels[:m], int(self.busy[m - 1].max()), limits_counted=True)


def carry(worker: Worker, horizon: float, plans: list | None = None,
          start: int | None = None) -> tuple[int, list[SchedulerOutput] | None] | None:
    """Run the worker's passes from now (or ``start``), admitting its arrivals as they come where it may
    (``_Carried.admits``); returns when the last pass ends and, if the pass after it was planned already and
    must run on its own, its plans; None if no pass qualifies (the worker then runs the next pass on its own).

    ``plans``, if given, are the ranks' plans of the first pass (made by the schedulers, maybe admitting).
    Every pass ends before ``horizon``, the next event that may read or change the worker.
    """
    now = worker.env.now if start is None else start
    typical = worker.decode_pass_ns or worker.last_pass_ns
    if plans is None and now + typical >= horizon:
        return None  # the next pass would most likely end past the horizon: not worth gathering
    run = _gathered(worker, plans, asynchronous=False)
    rows = _rows(worker, now, horizon, started_before=0)
    if run is None or rows < 1:
        return None
    state = _Carried(worker, run, now, rows)
    state.price_from(0)
    worker.open_pass_ends.append(now)  # events before the arrivals created ahead are still to be recorded
    try:
        m = _admit_arrivals(state, worker.arrivals, horizon)
        if m < 1:
            return None
        plans = state.commit(m, handing_over=state.planned == m)
    finally:
        worker.open_pass_ends.remove(now)
    return int(state.end[m - 1]), plans


def plan_ticked(worker: Worker, horizon: float, plans: list | None = None) -> tuple[_Carried, int] | None:
    """Plan the worker's passes from now as a run applied as its passes end (``Worker._tick``), for a worker
    whose arrivals are not known ahead: returns the run and how many rows it may take (each ends before
    ``horizon``), or None if no pass qualifies. The worker ends the run early, at the end of a row, if a request
    was placed on it meanwhile (the next plan would see it). ``plans``: as for ``carry``."""
    run = _gathered(worker, plans, asynchronous=False)
    rows = min(_rows(worker, worker.env.now, horizon, started_before=0), worker.tick_rows)
    if run is None or rows < 1:
        return None
    state = _Carried(worker, run, worker.env.now, rows)
    state.price_from(0)
    m = state.valid(horizon)
    if m < 1:
        return None
    if not state.planned_first:
        state.apply(0, plan=True)  # row 0 is planned now
    return state, m


def _gathered(worker: Worker, plans: list | None, asynchronous: bool) -> DecodeRun | None:
    """The worker's running requests as a run's arrays, or None if they cannot start a run (see
    ``decode_run.DecodeRun.gather``). Requests may wait only where the run admits them itself."""
    admits = worker.arrivals is not None and worker.prefill_schedule_interval <= 1
    run = DecodeRun(worker, plans, asynchronous, may_wait=admits)
    return run if run.gather() else None


def _rows(worker: Worker, now: int, horizon: float, started_before: int) -> int:
    """Candidate rows of a run: at most ``MAX_RUN``, about twice what the time to ``horizon`` allows at the
    last pass's pace (a longer stretch continues as the next run), and no pass started past the pass limit
    (``started_before``: rows at the start already started)."""
    rows = MAX_RUN
    if horizon != float("inf"):
        rows = min(rows, int((horizon - now) // max(worker.decode_pass_ns or worker.last_pass_ns, 1)) + 2)
    if worker.limits is not None:
        rows = min(rows, worker.limits.spec.max_passes - worker.limits.num_passes + started_before)
    return rows


def _next_arrival(source, end: np.ndarray, valid: int) -> tuple[int | None, int]:
    """The next arrival and the first of the ``valid`` rows that does not end before it; (None, valid) if
    every row ends before it (or none comes, or the worker's arrivals are not known ahead)."""
    t = None if source is None else source.next_arrival_ns()
    if t is None:
        return None, valid
    j = int(np.searchsorted(end[:valid], t, side="left"))
    return (None, valid) if j == valid else (t, j)


def _admit_arrivals(state: _Carried, source, horizon: float) -> int:
    """Take rows while arrivals (and requests waiting for a slot, after each finish) are admitted whole;
    returns how many rows the run takes."""
    end = state.end
    valid = state.valid(horizon)
    while True:
        if valid < 1:
            return 0
        t, j = _next_arrival(source, end, valid)
        slot = state.slot_row(valid)
        if slot is not None and (t is None or slot <= j):
            # A finish frees a slot before the next arrival is read: the plan of that row admits the next
            # waiting request (or, at the arrival's own row, the arrival sees the same plan below).
            if t is None or slot < j + 1:
                state.apply(slot, plan=True)
                outs = state.admit(slot)
                if not state.take(slot, outs, int(end[slot - 1])):
                    return slot
                valid = state.valid(horizon)
                if valid <= slot:
                    return slot
                continue
        if t is None:
            return valid  # every row ends before the next arrival
        if end[j] == t:
            return j  # a pass ending at the arrival's instant runs on its own
        # Row j spans the arrival: the next row's plan sees it. No arrival may come at row j's very end
        # (it would be seen too), nor break the request limit.
        if not source.quiet_until(int(end[j])):
            return j
        k = j + 1  # (past the last admission's row: the arrival comes after that row's plan)
        if k >= valid or not state.admits:
            return k  # (not admitting: the worker plans row k, seeing the arrival made by then)
        state.apply(k, plan=True)
        source.arrive_early(int(end[j]))
        outs = state.admit(k)
        if not state.take(k, outs, int(end[j])):
            return k
        valid = state.valid(horizon)
        if valid <= k:
            return k


# -- asynchronous scheduling ------------------------------------------------------------------------

class _CarriedAsync(_Carried):
    """A run under vLLM's async scheduling, each pass planned while the one before it runs: row 0 is the pass
    in flight, and row j ≥ 1 is planned at decision j − 2, when the outputs of row j − 2 are processed (decision
    −1: now). Step 2(d + 1) processes the outputs of row d (its delivered tokens cached, then the finished
    retired), step 2(d + 1) + 1 plans row d + 2 (blocks, then the delivered tokens cached), and the
    admissions of that plan follow it. A run of m rows delivers rows 0..m − 1 and leaves row m in flight."""

    asynchronous = True
    CACHE_SHIFT = (0, 1)
    FINISH_BACK = 1

    def __init__(self, worker: Worker, run: DecodeRun, now: int, rows: int, in_flight: tuple) -> None:
        self.in_flight_plans, first_start, (first_busy, first_provenance), first_end = in_flight
        super().__init__(worker, run, now, rows)
        self.start0 = first_start
        self.busy[0], self.end[0] = first_busy, first_end  # priced when it started
        self.labels[0] = tuple(first_provenance.split("+")) if first_provenance else ()
        self.last_admission = 1  # row 1 is planned now (decision −1), after the outputs before it
        self.handing_over: int | None = None
        """A row planned already that must run on its own (its admission is not whole prompts alone, or its
        price does not fit the clock): the loop is handed its plan and starts it."""

    def _schedule_ops(self, i: int, f: int, left: int, context: int, blocks: int, cached: int,
                      prefill: bool) -> None:
        """Queue column i's pool operations. It runs rows f..f + left − 1; row f was planned before (the pass
        in flight, or its admission), the window plans the others. Planning row r (step 2r − 1) takes a
        block where its context reaches a block boundary past the blocks held, and caches the delivered
        tokens (context of row r) where they fill a new block; processing its last row's outputs (step
        2(f + left)) caches them once more if they fill one, then retires it."""
        bs, ops = self.bs, self.ops
        hi = min(f + left, self.rows)
        lo = f + 1
        if self.caching:
            row = f + max(-(-(context + 1) // bs), blocks) * bs - context
            for r in range(row, hi, bs):
                heappush(ops, ((2 * r - 1) * _COLUMNS + i) * 4 + _ALLOCATE)
            if lo < hi and (context + 1) // bs > cached:
                heappush(ops, ((2 * lo - 1) * _COLUMNS + i) * 4 + _CACHE)
            row = f + max(cached + 1, -(-(context + 2) // bs)) * bs - context
            for r in range(row, hi, bs):
                heappush(ops, ((2 * r - 1) * _COLUMNS + i) * 4 + _CACHE)
            last = f + left - 1
            known = context + left  # tokens known once its last row's outputs are processed
            if last < self.rows and known // bs > cached and (left == 1 or known % bs == 0):
                heappush(ops, ((2 * (last + 1)) * _COLUMNS + i) * 4 + _CACHE)
        if f + left - 1 < self.rows:
            heappush(ops, ((2 * (f + left)) * _COLUMNS + i) * 4 + _FINISH)

    def slot_decision(self, valid: int) -> int | None:
        """While requests wait on a rank (``waits``): the first decision before ``valid`` that retires a request
        there since the last admission (a request is retired when its last row's outputs are processed, at the
        decision ending that row, which plans the row after next); None: none."""
        if not any(self.waits):
            return None
        n = self.n
        last = self.first[:n] + self.left[:n] - 1
        # an admission into row k saw decisions up to k − 2
        later = last[(last >= self.last_admission - 1) & self._waiting_columns()]
        if not later.size:
            return None
        d = int(later.min())
        return d if d < valid else None

    def decide(self, d: int, plan: bool) -> None:
        """Apply the operations up to decision d: the outputs of rows ..d processed, and if ``plan`` row
        d + 2's decodes planned."""
        self._apply_steps(2 * (d + 1) + 1 + plan, d + 2 + plan)

    def deliverable(self, horizon: float) -> int:
        """Rows whose outputs may be delivered as priced now: before ``horizon`` and within the time limit."""
        hi = min(self.last, self.rows, self.cap)
        end = self.end[:hi]
        v = int(np.searchsorted(end, horizon, side="left"))
        limits = self.worker.limits
        if limits is not None:
            v = min(v, int(np.searchsorted(end, limits.max_time_ns, side="right")))
        return v

    def valid(self, horizon: float) -> int:
        """How many rows the run may deliver: each before ``horizon``, and the row then left in flight
        planned and running a request."""
        return min(self.cap - 1, self.last - 1, self.rows - 1, self.deliverable(horizon))

    def end_row(self, d: int, plan_next: bool) -> None:
        """Row d ends now (decision d): its outputs processed, and if ``plan_next`` row d + 2 planned; recorded as
        the async loop records a pass's outputs."""
        self.decide(d, plan_next)
        used = self.used_at[d:d + 1] if d else np.array([[plan.kv_blocks_used for plan in self.in_flight_plans]])
        self._record_rows(d, d + 1, used, begins=False)

    def close(self, m: int) -> tuple:
        """The run stops with rows 0..m − 1 delivered and row m in flight (planned and started in the run, each
        row counted against the limits as it started): the requests and the schedulers as it leaves them, and
        the pass in flight as the async loop keeps it."""
        n = self.n
        first, left = self.first[:n], self.left[:n]
        delivered = np.clip(np.minimum(left, m - first), 0, None)
        planned = np.clip(np.minimum(left, m + 1 - first), 0, None)
        plans = self._row_plans(m)
        for plan, used in zip(plans, self.used_at[m].tolist()):
            plan.kv_blocks_used = used
        self._deliver(m, delivered, planned, False)
        self.worker.count_run(m, self.labels[1:m + 1], int(self.busy[m].max()), limits_counted=True)
        return plans, int(self.end[m - 1]), (self.busy[m].copy(), "+".join(self.labels[m])), int(self.end[m])

    def finish(self, m: int) -> tuple[tuple, list[SchedulerOutput] | None]:
        """Apply and record rows 0..m − 1 delivered and row m planned; returns the pass left in flight, and
        if handing over, the plans of row m + 1 (planned at the end of row m − 1)."""
        over = self.handing_over is not None
        self.decide(m - 1, plan=over)
        n = self.n
        first, left = self.first[:n], self.left[:n]
        delivered = np.clip(np.minimum(left, m - first), 0, None)
        planned = np.clip(np.minimum(left, m + 1 + over - first), 0, None)
        plans = self._row_plans(m)
        for plan, used in zip(plans, self._used(m + 1)[m].tolist()):
            plan.kv_blocks_used = used
        self._deliver(m, delivered, planned, over)
        self._record(m)
        worker = self.worker
        worker.open_pass_ends.remove(int(self.end[0]))
        worker.open_pass_ends.append(int(self.end[m]))
        in_flight = plans, int(self.end[m - 1]), (self.busy[m].copy(), "+".join(self.labels[m])), int(self.end[m])
        if not over:
            return in_flight, None
        return in_flight, self._hand_over(m + 1, int(self.end[m - 1]))


def carry_async(worker: Worker, horizon: float, in_flight: tuple) -> tuple | None:
    """Plan and apply the passes that follow under async scheduling, admitting the worker's arrivals as they
    come where it may (``_Carried.admits``); returns the new pass in flight, when the run's last outputs are delivered, and the plans of the pass after it if the run planned
    it already and the loop must start it (else None); None if no run starts.

    An arrival is read by the first decision after it: the one at the end of row d plans row d + 2 and
    admits the request there with the scheduler's own admission. If that is not whole prompts admitted
    alone, the run ends with row d's outputs delivered and hands the plan of row d + 2 to the loop.
    """
    now = worker.env.now
    if worker.launch is not None:
        return None  # launches move the planning times
    plans, _, _, first_end = in_flight
    if first_end >= horizon:
        return None
    run = _gathered(worker, plans, asynchronous=True)
    rows = _rows(worker, now, horizon, started_before=1)  # row 0 is in flight: rows 1..m start in the run
    if run is None or rows < 2:
        return None
    state = _CarriedAsync(worker, run, now, rows, in_flight)
    state.price_from(1)
    worker.open_pass_ends.append(now)
    try:
        m = _admit_arrivals_async(state, worker.arrivals, horizon)
        if m < 1:
            return None
        new_in_flight, handed = state.finish(m)
    finally:
        worker.open_pass_ends.remove(now)
    return new_in_flight, int(state.end[m - 1]), handed


def plan_ticked_async(worker: Worker, horizon: float, in_flight: tuple) -> tuple[_CarriedAsync, int] | None:
    """``plan_ticked`` under async scheduling: plan the passes after the one in flight (``in_flight``) as a run
    applied as they end (``Worker._tick_async``); returns the run and how many rows it may deliver (each before
    ``horizon``, the row after the last left planned and in flight), or None if no pass qualifies. Row 1 is
    planned now (its blocks taken)."""
    if worker.launch is not None:
        return None  # launches move the planning times
    now = worker.env.now
    plans, _, _, first_end = in_flight
    if not now < first_end < horizon:
        return None  # (a pass in flight ending now is delivered at once by the loop)
    run = _gathered(worker, plans, asynchronous=True)
    rows = min(_rows(worker, now, horizon, started_before=1), worker.tick_rows)
    if run is None or rows < 2:
        return None
    state = _CarriedAsync(worker, run, now, rows, in_flight)
    state.price_from(1)
    m = state.valid(horizon)
    if m < 1 or not state.busy[1:m + 1].max(axis=1).all():
        return None  # (after a pass of no time the loop decides at once, without waiting)
    state.decide(-1, plan=True)
    return state, m


def _admit_arrivals_async(state: _CarriedAsync, source, horizon: float) -> int:
    """Take rows while arrivals are admitted whole; returns how many rows the run delivers."""
    end = state.end
    valid = state.valid(horizon)
    while True:
        if valid < 1:
            return 0
        t, d = _next_arrival(source, end, valid)
        slot = state.slot_decision(valid)
        if slot is not None and (t is None or slot < d):
            # Decision ``slot`` retires a request and admits the next waiting one into row slot + 2 (before
            # the next arrival, which decision d reads); the run then delivers row slot + 1 too.
            if (slot + 2 >= min(state.cap, state.rows) or state.deliverable(horizon) < slot + 2
                    or not source.quiet_until(int(end[slot + 1]))):
                return slot + 1
            state.decide(slot, plan=True)
            row, at = slot + 2, int(end[slot])
            out = state.admit(row, at)
            if not state.take(row, out, at):
                state.handing_over = row
                return slot + 1
            valid = state.valid(horizon)
            continue
        if t is None:
            return valid  # every delivery comes before the next arrival
        if end[d] == t or not source.quiet_until(int(end[d])):
            return d  # an arrival at a delivery's instant (or over the request limit): the loop reads it
        if not state.admits:
            return d + 1  # the loop makes decision d (the arrival made by then), after row d's delivery
        # Decision d (at the end of row d) reads it and plans row d + 2: the run then delivers row d + 1 too,
        # so no arrival may come at its very end (it would be recorded before that delivery) or break the
        # request limit by then.
        if (d + 2 >= min(state.cap, state.rows) or state.deliverable(horizon) < d + 2
                or not source.quiet_until(int(end[d + 1]))):
            return d + 1
        state.decide(d, plan=True)
        source.arrive_early(int(end[d]))
        row, at = d + 2, int(end[d])
        out = state.admit(row, at)
        if not state.take(row, out, at):
            state.handing_over = row  # the loop starts the pass as planned (a chunk, a request left waiting)
            return d + 1
        valid = state.valid(horizon)
