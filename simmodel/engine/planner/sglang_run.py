"""SGLang's pass planner: a worker's plain decode passes planned as one run, for every attention-DP rank.

Between an SGLang rank's prefills, every pass decodes each running request one token, and such a pass only
moves counters: one more token in KV and one more output per request, a page whenever a sequence fills one,
the ``new_token_ratio`` one step down. So the planner takes the decode passes from a delivery on as a run
(``plan_decode_run``): rows (passes) of the ranks' requests (columns, rank after rank), every rank's totals
priced in one call of the timing model, each request's finish in closed form. The worker applies the run as
its passes end (``Worker._tick``: each pass end an event of its own, lasting as long as its slowest rank),
and each row is planned, finished and recorded rank by rank as the pass barrier plans, finishes and records a
pass, through the scheduler's own rules (``SglangScheduler.plan_decode``, ``finish_decoded``,
``deliver_decoded``) and the rank's recording (``Rank.record_pass_end``).

A run starts only where every rank's scheduler says the passes from now on are plain decodes
(``decode_run``; an idle rank decodes nothing and waits for the others), on a synchronous worker, and ends
before a pass whose new pages may not fit a rank's free and evictable pages (SGLang would retract there; its
plan evicts the tree as SGLang's does), at the first pass end after a prompt to prefill was placed on the
worker (on several ranks, anything placed), at the end of ``run(until=...)`` and at the limits; anything else
runs pass by pass. On one rank, a P/D decode run goes on through SGLang's handoffs, each row's plan making them
as ``schedule`` does: first it tries to reserve the KV of the requests waiting for it
(``SglangScheduler.reserve_preallocs``, given the running requests' tokens and needs the run holds), whose
prefill legs then start; then the requests whose KV arrived join the batch (``join_handoffs``) and become new
columns from that row (``DecodeRun.join``), their first decode delivering the client's first token with the
prefill's, and the rows are priced again. A plan whose reservations or joins leave its new pages short of the
free and evictable ones, or its pass past the run's horizon or the clock, a plan joining a staged load's
request of another stage, and the run's first plan if it reserves, are finished by the rank (``Rank.plan``,
the rest of ``schedule``) and those passes run on their own.
On several ranks, a finish that calls back into the simulation (a closed-loop client's next request) ends the
run before its pass unless no callback can fail the run or read a worker's state (``Worker.quiet_callbacks``),
as for vLLM's runs.
Passes, events, inter-token intervals, the radix trees and every request's fields are those of the
pass-by-pass run (``tests/scenarios/test_sglang_runs.py``).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.clock import clock_ns
from simmodel.engine.planner.running import MAX_RUN, PRICED_AHEAD, per_rank_sums, rows_within
from simmodel.engine.recorder import Event, EventKind, PassEnd, PassRecord
from simmodel.engine.scheduler.sglang import new_pages
from simmodel.perf.timing import DECODE, PassSums

if TYPE_CHECKING:
    from simmodel.engine.worker import Worker


def plan_decode_run(worker: Worker, horizon: float, plans: list | None = None,
                    in_flight: tuple | None = None) -> tuple[DecodeRun, int] | None:
    """The worker's decode passes from now as a run applied as its passes end (``Worker._tick``), and how many
    rows it may deliver (each ending before ``horizon``), or None when the next pass is not one (the loop then
    plans it on its own). Only at a delivery on a synchronous worker (no ``plans`` made, none ``in_flight``);
    the run plans its first row now."""
    if plans is not None or in_flight is not None or worker.lag:
        return None
    columns = []
    for rank in worker.ranks:
        mine = rank.scheduler.decode_run()
        if mine is None or len(worker.ranks) > 1 and rank.scheduler.prealloc:
            return None  # (reservations are planned inside runs on one rank only: ``DecodeRun.takes_placements``)
        columns.append(mine)
    requests = [r for mine, _ in columns for r in mine]
    if not requests or any(r.first_token_at is None for r in requests):
        return None  # (a P/D handoff's first token is sampled by its first decode)
    if worker.ranks[0].recorder.staged and len({r.stage for r in requests}) > 1:
        return None  # (a run's intervals are recorded under one stage)
    left = [n for _, mine in columns for n in mine]
    rows = min(max(left), worker.tick_rows, MAX_RUN)
    if worker.limits is not None:
        rows = min(rows, worker.limits.spec.max_passes - worker.limits.num_passes)
    if rows < 1:
        return None
    run = DecodeRun(worker, worker.env.now, rows, requests, left, [len(mine) for mine, _ in columns], horizon)
    m = run.valid(horizon) if run.price() else 0
    if m < 1:
        return None
    run.plan_first()
    return run, m


class DecodeRun:
    """A run of an SGLang worker's decode passes: rows (passes) of its ranks' running requests (columns, rank
    after rank, each rank's in batch order).

    Column i, on rank ``rank_of[i]``, has ``context[i]`` tokens in KV and some outputs sampled before its first row
    ``first[i]`` (0, or the row whose plan joined it), and decodes in rows ``first[i]``..``first[i] + left[i]`` − 1,
    the last of which samples its last token (it finishes at that row's end); ``column_fields[i]`` holds the same
    as Python integers.
    """

    lag = 0
    """Passes in flight while the next is planned: none (synchronous)."""
    holds_waiting = False
    """Never set here (see ``Run.holds_waiting``)."""

    def __init__(self, worker: Worker, now: int, rows: int, requests: list, left: list[int],
                 counts: list[int], horizon: float = float("inf")) -> None:
        self.worker, self.rows, self.horizon = worker, rows, horizon
        ranks = self.ranks = worker.ranks
        R = self.num_ranks = len(ranks)
        self.scheds = [rank.scheduler for rank in ranks]
        self.recorder = ranks[0].recorder
        self.start0 = now
        self.base = ranks[0].num_passes
        """Passes every rank has run before row 0 (all ranks run every pass)."""
        self.requests = requests
        self.bounds = [0]
        """Columns of rank r: ``bounds[r]:bounds[r + 1]``."""
        for count in counts:
            self.bounds.append(self.bounds[-1] + count)
        contexts = [r.num_computed_tokens for r in requests]
        outputs = [r.num_output_tokens for r in requests]
        self.context = np.array(contexts, np.int64)
        self.left = np.array(left, np.int64)
        self.first = np.zeros(len(requests), np.int64)
        """Per column, the row of its first decode: 0, or the row whose plan joined it (a P/D handoff whose KV
        arrived during the run: ``join``)."""
        self.column_fields = [(c, o, 0, n) for c, o, n in zip(contexts, outputs, left)]
        """Per column, (context, outputs, first, left) as Python integers, for delivering it."""
        self.joined: dict[int, list[int]] = {}
        """Row: the columns its plan joined to the batch (their first decode delivers the client's first token)."""
        self.acted = False
        """Whether the plan just made reserved KV for a P/D request or joined one whose KV arrived (what it set
        going runs before its pass starts: ``Worker._tick``)."""
        self.stage = requests[0].stage if self.recorder.staged else 0
        page = self.page = self.scheds[0].page
        self.active = np.zeros((rows, R), np.int64)
        """Requests each row decodes, per rank (rows, ranks)."""
        self.pages = self.active if page == 1 else np.zeros((rows, R), np.int64)
        """New pages each row takes per rank (a decode takes one where its sequence has filled its last page)."""
        self.table = np.zeros((rows * R, 10))
        """Each row's ranks' pass sums, as the timing model takes them."""
        self.finishing: dict[int, list[int]] = {}
        """Row: the columns whose last token it samples (rank after rank, each in batch order)."""
        self._count_columns(0, 0, self.context, self.left, self.bounds)
        self.cap = self._free_rows()
        calls = [i for i, r in enumerate(requests) if r.on_finish is not None]
        if calls and R > 1 and not worker.quiet_callbacks:  # (the pass where the first of them finishes)
            self.cap = min(self.cap, int(self.left[calls].min()) - 1)
        self.busy = np.zeros((rows, R), np.int64)
        self.work_ns = np.zeros((rows, R), np.int64)
        """Each row's rank passes at datasheet peaks (``PassEnergy.work_ns``)."""
        self.end = np.zeros(rows, np.int64)
        self.labels: list = [()] * rows
        self.priced = 0
        """Rows priced with the columns as they are now (``price``)."""
        self.capacity = np.tile(worker.kv_capacity_tokens, rows)
        """Each row's ranks' KV capacity in tokens, as the timing model takes them."""
        self.used_at: list[list[int]] = [[]] * rows
        self.done: set[int] = set()
        """Columns finished (their fields delivered as their last row ended)."""
        self.held: np.ndarray | None = None
        """Per column, its prompt and output tokens before row 0 (for ``reserve_preallocs``), once needed."""
        self.needs: np.ndarray | None = None
        """Per column, its ``SglangScheduler.clipped_need``, with ``held``."""
        self.handed: list | None = None
        """The plans of a row the run could not plan itself (``_plan``: the first plan reserving KV for a P/D request,
        or reservations or joins that leave it short of pages or past the horizon), made by the ranks: that row
        runs on its own, after the run."""
        self.planned_alone: list | None = None
        """``handed``, if it is row 0: the run delivers nothing and the worker's loop runs that pass."""
        self.settled = False
        """Whether the requests and schedulers were left as the run leaves them (``_settle``)."""

    @property
    def takes_placements(self) -> bool:
        """Whether a request placed on the worker meanwhile leaves the run going: on one rank, a P/D request
        waiting for its KV to be reserved (each row's plan tries, as SGLang's does) or one whose KV arrived (the
        next row's plan joins it to the batch, a new column), not a new prompt (SGLang's next plan prefills it;
        it ends the run)."""
        return self.num_ranks == 1 and not self.scheds[0].waiting

    def _free_rows(self, k: int = 0) -> int:
        """Rows before the first from row k on (its plan not made yet) planned with a rank whose new pages may not
        fit what is free or evictable (SGLang would retract there; short of free pages alone, the plan evicts, as
        SGLang's does): each rank's free and evictable pages now less its rows' new pages from row k, plus the
        last partial pages the finishes from row k on give back. (A finish also makes its stored pages evictable,
        left out: the bound stays below what SGLang has.)"""
        rows, R, page = self.rows, self.num_ranks, self.page
        pages = self.pages[k:]
        free = (np.array([s.cache.num_free + s.cache.num_evictable for s in self.scheds]) - np.cumsum(pages, axis=0))
        free += pages  # (before each row's own pages: what its plan finds free or evictable)
        if page > 1:  # a finish frees its last partial page for the rows after it
            final = self.context + self.left
            done = self.first + self.left  # (the row after each column's last)
            given = np.zeros((rows + 1 - k, R), np.int64)
            rank_of = np.repeat(np.arange(R), np.diff(self.bounds))
            within = (done > k) & (done < rows)
            np.add.at(given, (done[within] - k, rank_of[within]), (-(-final // page) - final // page)[within])
            free += np.cumsum(given[:rows - k], axis=0)
        short = (free < pages).any(axis=1)
        return k + int(np.argmax(short)) if short.any() else rows

    def price(self, k: int = 0) -> bool:
        """Price rows k.. of every rank in one call, the next ``PRICED_AHEAD`` of them (``priced_further`` prices
        more as the run's rows end; a join prices the rows from its row again); False if a price does not fit
        the clock (the loop reports it)."""
        worker, R = self.worker, self.num_ranks
        hi = min(self.rows, k + PRICED_AHEAD)
        n = hi - k
        sums = PassSums(self.table[k * R:hi * R], self.capacity[k * R:hi * R], n)
        seconds, labels = worker.timing.price_sums(sums)
        busy = clock_ns(seconds)
        if busy is None:
            return False
        self.busy[k:hi] = busy
        self.work_ns[k:hi] = worker.work_ns(sums).reshape(n, R)
        end = self.end[k:hi]
        (busy[:, 0] if R == 1 else busy.max(axis=1)).cumsum(out=end)
        end += int(self.end[k - 1]) if k else self.start0
        self.labels[k:hi] = labels
        self.priced = hi
        return True

    def valid(self, horizon: float) -> int:
        """Rows the run may take: up to the first short of pages (or a finish that may not call back inside),
        each priced, ending before ``horizon`` and starting within the time limit."""
        return rows_within(self.end, min(self.cap, self.rows, self.priced), horizon, self.worker.limits, self.start0)

    def priced_further(self, taken: int, horizon: float) -> int:
        """The rows the run may take now, ``taken`` being all it could as priced (``Run.priced_further``): the
        rows after them are priced if only their price held it back (a price the clock cannot hold ends the
        run there: the loop plans that pass and reports it)."""
        if self.priced < min(self.rows, self.cap):
            if not self.price(self.priced):
                self.cap = self.priced
                return taken
        return max(taken, self.valid(horizon))

    # -- rows, as their passes start and end ------------------------------------------------------------

    def plan_first(self) -> None:
        """Plan row 0 now, on every rank."""
        self._plan(0)

    def plan_row(self, k: int) -> None:
        """Row k + 1 is planned now, at the end of row k, on every rank."""
        self._plan(k + 1)

    def _plan(self, k: int) -> None:
        """Plan row k on every rank, as ``SglangScheduler.schedule`` plans a decode rank's pass: first the KV of
        P/D requests waiting for it (``reserve_preallocs``, one rank), then the P/D requests whose KV arrived join
        the batch (``join``, one rank), then the row's decodes. Where the first plan reserves, or where what a
        later plan reserved or joined leaves the row's new pages short of what is free or evictable (SGLang would
        retract) or its price past the run's horizon (or past what the clock holds), or where a staged load's request
        of another stage joins (a run's intervals are recorded under one stage), the rank plans the rest of the
        pass itself and the run hands it over (``handed``)."""
        self.acted = False
        for rank, sched in zip(self.ranks, self.scheds):
            if sched.prealloc and sched.reserve_preallocs(*self._running_tokens(k)):
                if not k:  # (what the first plan sets going runs before its pass: the loop runs it)
                    self._hand_over_plan(rank, sched, k)
                    self.planned_alone = self.handed
                    return
                self.acted = True
            if sched.handoffs:  # (one rank: ``takes_placements``)
                self.acted = True
                if self.recorder.staged and any(r.stage != self.stage for r in sched.handoffs):
                    self._hand_over_plan(rank, sched, k)  # (a run's intervals are recorded under one stage)
                    return
                if not self.join(k, sched.join_handoffs()):
                    self._hand_over_plan(rank, sched, k)
                    return
        if self.acted:
            self.cap = self._free_rows(k)
            if self.cap <= k or self.valid(self.horizon) <= k:
                self._hand_over_plan(self.ranks[0], self.scheds[0], k)
                return
        for sched, n, pages in zip(self.scheds, self.active[k].tolist(), self.pages[k].tolist()):
            if n:  # (a rank with nothing running plans an empty pass: no decode, no step of its ratio)
                sched.plan_decode(n, pages)
            else:
                sched.plan_idle()

    def _hand_over_plan(self, rank, sched, k: int) -> None:
        """The rank plans row k itself, on the requests as the run leaves them, its reservations (if any) made
        already: the run hands that pass over (``handed``)."""
        self._settle(k)
        self.handed = [rank.plan(schedule=partial(sched.schedule, preallocs_reserved=True))]
        self.worker.mark_planned()

    def join(self, k: int, joined: list) -> bool:
        """P/D requests whose KV arrived joined the batch as row k was planned (``SglangScheduler.join_handoffs``:
        each holds its prompt and the prefill's token): each becomes a column decoding from row k, whose first
        decode delivers the client's first token with the prefill's, and the rows from k are priced again.
        False if a price does not fit the clock (the loop then plans the row, and reports it)."""
        sched = self.scheds[0]
        i0 = len(self.requests)
        context = np.array([r.num_computed_tokens for r in joined], np.int64)
        left = np.array([sched.passes_left(r) for r in joined], np.int64)
        self.requests += joined
        self.context = np.concatenate((self.context, context))
        self.left = np.concatenate((self.left, left))
        self.first = np.concatenate((self.first, np.full(len(joined), k, np.int64)))
        self.bounds[-1] += len(joined)
        if self.held is not None:
            self.held = np.concatenate((self.held, [r.num_prompt_tokens + r.num_output_tokens for r in joined]))
            self.needs = np.concatenate((self.needs, [sched.clipped_need(r) for r in joined]))
        self.column_fields += [(c, r.num_output_tokens, k, n) for r, c, n in zip(joined, context.tolist(), left.tolist())]
        self.joined[k] = list(range(i0, i0 + len(joined)))
        self._count_columns(k, i0, context, left, [0, len(joined)])
        return self.price(k)

    def _count_columns(self, k: int, i0: int, context: np.ndarray, left: np.ndarray, bounds: list[int]) -> None:
        """Add columns i0.. (their ``context`` and ``left``, rank r's in ``bounds[r]:bounds[r + 1]`` of them),
        decoding from row k, to each row's decodes, new pages and pass sums, and to the rows that sample their
        last tokens."""
        rows, page = self.rows, self.page
        for i, n in enumerate(left.tolist(), i0):
            if k + n <= rows:
                self.finishing.setdefault(k + n - 1, []).append(i)
        if not len(left):
            return
        hi = min(rows, k + int(left.max()))  # (the rows the columns run)
        j = np.arange(hi - k)[:, None]
        active = left > j
        decodes = per_rank_sums(active, bounds)
        contexts = per_rank_sums(active * (context + j), bounds)
        self.active[k:hi] += decodes
        if page > 1:  # (with pages of one token ``pages`` is ``active``)
            self.pages[k:hi] += per_rank_sums(active & ((context + j) % page == 0), bounds)
        cells = self.table.reshape(rows, self.num_ranks, 10)[k:hi]
        cells[:, :, DECODE] += decodes
        cells[:, :, DECODE + 1] += decodes
        cells[:, :, DECODE + 4] += decodes
        cells[:, :, DECODE + 2] += contexts
        cells[:, :, DECODE + 3] += contexts + decodes

    def _running_tokens(self, k: int) -> tuple[int, int]:
        """The prompt and output tokens of the requests running when row k is planned (one rank: those with a
        row from k on, each k − ``first`` outputs on from its first row; a column joined by row k's own plan is
        not one yet, as it joins after the reservations), and the largest ``clipped_need`` among them (or those
        tokens if none runs), for ``reserve_preallocs``."""
        assert self.num_ranks == 1, "a run plans reservations on one rank only (plan_decode_run)"
        if self.held is None:
            sched = self.scheds[0]
            self.held = np.array([r.num_prompt_tokens + outputs for r, (_, outputs, _, _) in
                                  zip(self.requests, self.column_fields)], np.int64)
            self.needs = np.array([sched.clipped_need(r) for r in self.requests], np.int64)
        first = self.first
        running = self.left > k - first
        n = int(running.sum())
        tokens = int(self.held[running].sum()) + int((k - first[running]).sum())
        return tokens, int(self.needs[running].max()) if n else tokens

    def waiting(self) -> bool:
        """Whether the plan just made must be handed over (``handed``), or reserved or joined (``acted``): what it
        set going runs before its pass (nothing else waits while a run goes on)."""
        return self.handed is not None or self.acted

    def admit_placed(self, k: int, at: int) -> list:
        """Row k was planned now (``_plan``) seeing what was placed on the worker: the plans it hands over, if
        any (``handed``)."""
        if self.handed is None:  # (else its plan saw them: ``_plan``)
            self.worker.mark_planned()
            return []
        return self.handed

    def take(self, k: int, outs: list, admitted_at: int) -> bool:
        """Whether the run goes on with row k as the run planned it (False: it hands it over)."""
        self.acted = False
        return self.handed is None

    def hand_over(self, m: int) -> tuple[tuple, list]:
        """The run stops after row m − 1; row m, planned by the ranks (``handed``), runs on its own."""
        return self.close(m), self.handed

    def begin_row(self, k: int) -> None:
        """Row k starts now, planned: counted against the limits, each rank's pages in use noted and its begin
        recorded, as the pass barrier starts a pass."""
        start = self.start0 if k == 0 else int(self.end[k - 1])
        worker = self.worker
        if worker.limits is not None:
            worker.limits.count_pass(start)
        self.used_at[k] = [rank.pool.num_used_blocks for rank in self.ranks]
        rec = self.recorder
        if rec.keep_events or rec.sink is not None:
            new_event, w, role, index = tuple.__new__, worker.worker_id, worker.role, self.base + k
            rec.add_events([new_event(Event, (start, EventKind.PASS_BEGIN, w, r, -1, n, role, index))
                            for r, n in enumerate(self.active[k].tolist())])

    def end_row(self, k: int) -> bool:
        """Row k ends now: rank by rank, as the barrier finishes each rank's pass, the requests whose last token
        it samples finish (their fields delivered first) and the pass is recorded (``Rank.record_pass_end``: its
        finishes call back there). Returns whether a finish called back."""
        end = int(self.end[k])
        start = self.start0 if k == 0 else int(self.end[k - 1])
        worker, requests = self.worker, self.requests
        role, w, index, label = worker.role, worker.worker_id, self.base + k, "+".join(self.labels[k])
        finishing = self.finishing.get(k, ())
        called_back = False
        joined = self.joined.get(k, ())
        for r, (rank, sched) in enumerate(zip(self.ranks, self.scheds)):
            intervals = self._intervals(k, r, start, end)  # (before the finishing requests' fields move on)
            lo, hi = self.bounds[r], self.bounds[r + 1]
            finished = []
            for i in finishing:
                if lo <= i < hi:
                    request = requests[i]
                    self._deliver([i], k + 1, k + 1)
                    sched.finish_decoded(request, self._pages_of([i], k + 1)[0])
                    self.done.add(i)
                    finished.append((request, request.num_output_tokens))
            a = int(self.active[k, r])
            row = PassRecord(role, w, r, index, start, end, a, 0, 0, a, a, self.used_at[k][r], 0,
                             int(self.busy[k, r]), int(self.work_ns[k, r]), label)
            firsts = [requests[i] for i in joined] if joined else ()  # (one rank: ``takes_placements``)
            called_back |= rank.record_pass_end(PassEnd(row, end, intervals, firsts, finished))
        return called_back

    def _intervals(self, k: int, r: int, start: int, end: int) -> list[tuple[int, int, int]]:
        """Rank r's inter-token intervals in row k, as ``Rank.finish_pass`` counts them: a request that sampled
        in the pass before follows it by the gap since that pass's delivery (all of them after row 0), any other
        by the time since its last token."""
        stage = self.stage
        if k:
            joined = self.joined.get(k)
            if not joined:
                return [(end - start, int(self.active[k, r]), stage)]
            # A joined request's first decode delivers the prefill's token and its own together (no interval for
            # the first, none between them); the others follow the pass before.
            follow = int(self.active[k, r]) - len(joined)
            return [(0, 1, stage)] * len(joined) + ([(end - start, follow, stage)] if follow else [])
        last = self.base - 1
        mine = self.requests[self.bounds[r]:self.bounds[r + 1]]
        intervals = [(end - q.last_token_at, 1, stage) for q in mine if q.last_token_pass != last]
        follow = sum(1 for q in mine if q.last_token_pass == last)
        if follow:
            intervals.append((end - self.ranks[r].last_delivery, follow, stage))
        return intervals

    # -- the end of the run ---------------------------------------------------------------------------

    def _pages_of(self, columns: list[int], rows: int) -> list[int]:
        """Pages each of ``columns`` took in the run's rows 0..rows − 1 (from its first row; one where its context
        was a multiple of a page)."""
        page, fields = self.page, self.column_fields
        return [new_pages(context, max(min(rows - first, left), 0), page)
                for context, _, first, left in map(fields.__getitem__, columns)]

    def _deliver(self, columns: list[int], delivered: int, planned: int) -> None:
        """The requests of ``columns`` once ``delivered`` of the run's rows delivered their tokens, ``planned``
        planned (a column's rows counted from its first)."""
        ends, base = self.end, self.base
        requests, fields = self.requests, self.column_fields
        for i in columns:
            context, outputs, first, left = fields[i]
            request = requests[i]
            n = min(delivered - first, left)
            request.num_computed_tokens = context + min(max(planned - first, 0), left)
            if n <= 0:
                continue
            request.num_output_tokens = outputs + n
            request.num_emitted = 2 if request.kv_transferred and outputs + n == 2 else 1
            if request.first_token_at is None:  # (a joined P/D request's: its first decode, with the prefill's)
                request.first_token_at = int(ends[first])
            if outputs < 2 <= outputs + n and request.second_token_at is None:
                request.second_token_at = int(ends[first + 1 - outputs])
            request.last_token_at = int(ends[first + n - 1])
            request.last_token_pass = base + first + n - 1

    def close(self, m: int, ahead: int = 0, started: int | None = None) -> tuple:
        """The run stops after row m − 1, and ``ahead`` rows after it are planned, ``started`` of them (default:
        all) started (an error stopped the simulation during row m, or as it started). The requests and the
        schedulers as it leaves them (unless a handed-over plan left them so already); no pass in flight."""
        if not self.settled:
            self._settle(m, ahead)
        last = m + (ahead if started is None else started) - 1
        self.worker.count_run(m, self.labels[:last + 1], int(self.busy[last].max()) if last >= 0 else 0,
                              limits_counted=True)
        return ()

    def _settle(self, m: int, ahead: int = 0) -> None:
        """The requests and the schedulers once rows 0..m − 1 delivered and ``ahead`` rows after them planned."""
        self.settled = True
        for r, (rank, sched) in enumerate(zip(self.ranks, self.scheds)):
            still = [i for i in range(self.bounds[r], self.bounds[r + 1]) if i not in self.done]
            self._deliver(still, m, m + ahead)
            sched.deliver_decoded([self.requests[i] for i in still], self._pages_of(still, m + ahead))
            rank.num_passes += m
            if m:
                rank.last_delivery = int(self.end[m - 1])
