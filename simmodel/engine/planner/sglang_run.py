"""SGLang's pass planner: a rank's plain decode passes planned as one run.

Between an SGLang rank's prefills, every pass decodes each running request one token, and such a pass only
moves counters: one more token in KV and one more output per request, a page whenever a sequence fills one,
the ``new_token_ratio`` one step down. So the planner takes the decode passes from a delivery on as a run
(``plan_decode_run``): rows (passes) of its requests (columns), their totals priced in one call of the
timing model, each request's finish in closed form. The worker applies the run as its passes end
(``Worker._tick``: each pass end an event of its own), and each row is planned, recorded and finished as the
pass-by-pass loop plans, records and finishes a pass, through the scheduler's own rules
(``SglangScheduler.plan_decode``, ``finish_decoded``, ``deliver_decoded``) and the rank's recording
(``Rank.record_pass_end``).

A run starts only where the scheduler says the passes from now on are plain decodes (``decode_run``), on a
one-rank synchronous worker, and ends before a pass short of a free page per request (SGLang would evict or
retract there), at the first pass end after which something was placed on the rank (its next plan may
prefill), at the end of ``run(until=...)``, and when every request has finished; anything else runs pass by
pass. Passes, events, inter-token intervals, the radix tree and every request's fields are those of the
pass-by-pass run (``tests/scenarios/test_decode_runs.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.clock import clock_ns
from simmodel.engine.planner.running import MAX_RUN
from simmodel.engine.recorder import Event, EventKind, PassEnd, PassRecord
from simmodel.perf.timing import DECODE, PassSums

if TYPE_CHECKING:
    from simmodel.engine.worker import Worker


def plan_decode_run(worker: Worker, horizon: float, plans: list | None = None,
                    in_flight: tuple | None = None) -> tuple[DecodeRun, int] | None:
    """The worker's decode passes from now as a run applied as its passes end (``Worker._tick``), and how many
    rows it may deliver (each ending before ``horizon``), or None when the next pass is not one (the loop then
    plans it on its own). Only at a delivery on a one-rank synchronous worker (no ``plans`` made, none
    ``in_flight``); the run plans its first row now."""
    if plans is not None or in_flight is not None or worker.lag or len(worker.ranks) > 1:
        return None
    rank = worker.ranks[0]
    columns = rank.scheduler.decode_run()
    if columns is None:
        return None
    requests, left = columns
    if any(r.first_token_at is None for r in requests):
        return None  # (a P/D handoff's first token is sampled by its first decode)
    if rank.recorder.staged and len({r.stage for r in requests}) > 1:
        return None  # (a run's intervals are recorded under one stage)
    now = worker.env.now
    rows = min(max(left), worker.tick_rows, MAX_RUN)
    if worker.limits is not None:
        rows = min(rows, worker.limits.spec.max_passes - worker.limits.num_passes)
    if rows < 1:
        return None
    run = DecodeRun(worker, now, rows, requests, left)
    m = run.valid(horizon) if run.price() else 0
    if m < 1:
        return None
    run.plan_first()
    return run, m


class DecodeRun:
    """A run of an SGLang rank's decode passes: rows (passes) of its running requests (columns, in batch order).

    Column i has ``context[i]`` tokens in KV and ``outputs[i]`` sampled before row 0 and decodes in rows
    0..``left[i]`` − 1, the last of which samples its last token (it finishes at that row's end).
    """

    lag = 0
    """Passes in flight while the next is planned: none (synchronous)."""
    takes_placements = False
    """A request placed on the rank ends the run at the next pass end: SGLang's next plan prefills it."""

    def __init__(self, worker: Worker, now: int, rows: int, requests: list, left: list[int]) -> None:
        self.worker, self.rows = worker, rows
        rank = self.rank = worker.ranks[0]
        self.sched, self.pool, self.recorder = rank.scheduler, rank.pool, rank.recorder
        self.start0 = now
        self.base = rank.num_passes
        """Passes the rank has run before row 0."""
        self.requests = requests
        self.context = np.array([r.num_computed_tokens for r in requests], np.int64)
        self.outputs = np.array([r.num_output_tokens for r in requests], np.int64)
        self.left = np.array(left, np.int64)
        self.stage = requests[0].stage if self.recorder.staged else 0
        page = self.page = self.sched.page
        j = np.arange(rows)[:, None]
        active = self.left > j
        self.active = active.sum(axis=1)
        """Requests each row decodes."""
        self.pages = (active & ((self.context + j) % page == 0)).sum(axis=1)
        """New pages each row takes (a decode takes one where its sequence has filled its last page)."""
        contexts = np.where(active, self.context + j, 0).sum(axis=1)
        table = self.table = np.zeros((rows, 10))
        table[:, DECODE] = table[:, DECODE + 1] = table[:, DECODE + 4] = self.active
        table[:, DECODE + 2] = contexts
        table[:, DECODE + 3] = contexts + self.active
        self.finishing: dict[int, list[int]] = {}
        """Row: the columns whose last token it samples, in batch order."""
        for i, n in enumerate(self.left.tolist()):
            if n <= rows:
                self.finishing.setdefault(n - 1, []).append(i)
        self.cap = self._free_rows()
        self.busy = np.zeros((rows, 1), np.int64)
        self.end = np.zeros(rows, np.int64)
        self.labels: list = [()] * rows
        self.used_at = [0] * rows
        self.done: set[int] = set()
        """Columns finished (their fields delivered as their last row ended)."""

    def _free_rows(self) -> int:
        """Rows before the first planned short of a free page per request it decodes (SGLang would evict, or
        retract, there): the rank's free pages less the rows' new pages, plus the last partial pages the
        finishes before give back."""
        given = np.zeros(self.rows, np.int64)
        for row, columns in self.finishing.items():
            if row + 1 < self.rows:
                final = self.context[columns] + self.left[columns]
                given[row + 1] = int((-(-final // self.page) - final // self.page).sum())
        free = self.sched.cache.num_free - np.concatenate(([0], np.cumsum(self.pages)[:-1])) + np.cumsum(given)
        short = free < self.active
        return int(np.argmax(short)) if short.any() else self.rows

    def price(self) -> bool:
        """Price every row in one call; False if a price does not fit the clock (the loop reports it)."""
        worker = self.worker
        seconds, labels = worker.timing.price_sums(PassSums(self.table, np.tile(worker.kv_capacity_tokens, self.rows),
                                                            self.rows))
        busy = clock_ns(seconds)
        if busy is None:
            return False
        self.busy = busy
        busy[:, 0].cumsum(out=self.end)
        self.end += self.start0
        self.labels = labels
        return True

    def valid(self, horizon: float) -> int:
        """Rows the run may take: up to the first short of pages, each ending before ``horizon`` and starting
        within the time limit."""
        v = min(self.cap, self.rows)
        end = self.end[:v]
        if v and end[v - 1] >= horizon:
            v = int(end.searchsorted(horizon, side="left"))
        limits = self.worker.limits
        if limits is not None:
            if self.start0 > limits.max_time_ns:
                return 0
            if v and end[v - 1] > limits.max_time_ns:
                v = min(v, 1 + int(end.searchsorted(limits.max_time_ns, side="right")))
        return v

    # -- rows, as their passes start and end ------------------------------------------------------------

    def plan_first(self) -> None:
        """Plan row 0 now."""
        self.sched.plan_decode(int(self.active[0]), int(self.pages[0]))

    def plan_row(self, k: int) -> None:
        """Row k + 1 is planned now, at the end of row k."""
        self.sched.plan_decode(int(self.active[k + 1]), int(self.pages[k + 1]))

    def waiting(self) -> bool:
        """Nothing waits while a run goes on (a request placed on the rank ends it)."""
        return False

    def begin_row(self, k: int) -> None:
        """Row k starts now, planned: counted against the limits, its pages in use noted and its begin recorded,
        as the pass barrier starts a pass."""
        start = self.start0 if k == 0 else int(self.end[k - 1])
        worker = self.worker
        if worker.limits is not None:
            worker.limits.count_pass(start)
        self.used_at[k] = self.pool.num_used_blocks
        rec = self.recorder
        if rec.keep_events or rec.sink is not None:
            rec.add_events([tuple.__new__(Event, (start, EventKind.PASS_BEGIN, worker.worker_id, 0, -1,
                                                  int(self.active[k]), worker.role, self.base + k))])

    def end_row(self, k: int) -> bool:
        """Row k ends now: the requests whose last token it samples finish (their fields delivered first), and
        the pass is recorded as the barrier records it (``Rank.record_pass_end``: its finishes call back
        there). Returns whether a finish called back."""
        end = int(self.end[k])
        start = self.start0 if k == 0 else int(self.end[k - 1])
        intervals = self._intervals(k, start, end)  # (before the finishing requests' fields move on)
        finishing = self.finishing.get(k, ())
        sched, requests = self.sched, self.requests
        finished = []
        for i in finishing:
            request = requests[i]
            self._deliver(i, k + 1, k + 1)
            sched.finish_decoded(request, self._pages_of(i, k + 1))
            self.done.add(i)
            finished.append((request, request.num_output_tokens))
        worker, rank = self.worker, self.rank
        a = int(self.active[k])
        row = PassRecord(worker.role, worker.worker_id, 0, self.base + k, start, end, a, 0, 0, a, a,
                         self.used_at[k], 0, int(self.busy[k, 0]), "+".join(self.labels[k]))
        return rank.record_pass_end(PassEnd(row, end, intervals, (), finished))

    def _intervals(self, k: int, start: int, end: int) -> list[tuple[int, int, int]]:
        """Row k's inter-token intervals, as ``Rank.finish_pass`` counts them: a request that sampled in the pass
        before follows it by the gap since that pass's delivery (all of them after row 0), any other by the
        time since its last token."""
        stage = self.stage
        if k:
            return [(end - start, int(self.active[k]), stage)]
        last = self.base - 1
        intervals = [(end - r.last_token_at, 1, stage) for r in self.requests if r.last_token_pass != last]
        follow = sum(1 for r in self.requests if r.last_token_pass == last)
        if follow:
            intervals.append((end - self.rank.last_delivery, follow, stage))
        return intervals

    # -- the end of the run ---------------------------------------------------------------------------

    def _pages_of(self, i: int, rows: int) -> int:
        """Pages column i's decodes in rows 0..rows − 1 took (one where its context was a multiple of a page)."""
        n = min(rows, int(self.left[i]))
        if n <= 0:
            return 0
        c, page = int(self.context[i]), self.page
        return (c + n - 1) // page - (c - 1) // page

    def _deliver(self, i: int, delivered: int, planned: int) -> None:
        """Column i's request once ``delivered`` of the run's rows delivered their tokens, ``planned`` planned."""
        request = self.requests[i]
        n = min(delivered, int(self.left[i]))
        request.num_computed_tokens = int(self.context[i]) + min(planned, int(self.left[i]))
        if n <= 0:
            return
        ends = self.end
        outputs = int(self.outputs[i])
        request.num_output_tokens = outputs + n
        request.num_emitted = 1
        if outputs < 2 <= outputs + n and request.second_token_at is None:
            request.second_token_at = int(ends[1 - outputs])
        request.last_token_at = int(ends[n - 1])
        request.last_token_pass = self.base + n - 1

    def close(self, m: int, ahead: int = 0, started: int | None = None) -> tuple:
        """The run stops after row m − 1, and ``ahead`` rows after it are planned, ``started`` of them (default:
        all) started (an error stopped the simulation during row m, or as it started). The requests and the
        scheduler as it leaves them; no pass in flight."""
        still = [i for i in range(len(self.requests)) if i not in self.done]
        for i in still:
            self._deliver(i, m, m + ahead)
        self.sched.deliver_decoded([self.requests[i] for i in still], [self._pages_of(i, m + ahead) for i in still])
        rank = self.rank
        rank.num_passes += m
        if m:
            rank.last_delivery = int(self.end[m - 1])
        last = m + (ahead if started is None else started) - 1
        self.worker.count_run(m, self.labels[:last + 1], int(self.busy[last, 0]) if last >= 0 else 0,
                              limits_counted=True)
        return ()

