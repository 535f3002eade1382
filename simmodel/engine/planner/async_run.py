"""A run under vLLM's async scheduling: each pass planned while the one before it runs."""

from __future__ import annotations

from heapq import heappush
from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.planner.run import _ALLOCATE, _CACHE, _COLUMNS, _FINISH, Run
from simmodel.engine.scheduler.base import SchedulerOutput

if TYPE_CHECKING:
    from simmodel.engine.planner.running import RunningRequests
    from simmodel.engine.worker import Worker


class AsyncRun(Run):
    """A run under vLLM's async scheduling, each pass planned while the one before it runs: row 0 is the pass
    in flight, and row j ≥ 1 is planned at decision j − 2, when the outputs of row j − 2 are processed (decision
    −1: now). Step 2(d + 1) processes the outputs of row d (its delivered tokens cached, then the finished
    retired), step 2(d + 1) + 1 plans row d + 2 (blocks, then the delivered tokens cached), and the
    admissions of that plan follow it. A run of m rows delivers rows 0..m − 1 and leaves row m in flight."""

    lag = 1
    CACHE_SHIFT = (0, 1)
    FINISH_BACK = 1

    def __init__(self, worker: Worker, run: RunningRequests, now: int, rows: int, in_flight: tuple,
                 ticked: bool = False) -> None:
        self.in_flight_plans, first_start, (first_busy, first_provenance, first_work), first_end = in_flight
        super().__init__(worker, run, now, rows, ticked)
        self.start0 = first_start
        self.busy[0], self.work_ns[0], self.end[0] = first_busy, first_work, first_end  # priced when it started
        self.worked = 1
        self.labels[0] = tuple(first_provenance.split("+")) if first_provenance else ()
        self.last_admission = 1  # row 1 is planned now (decision −1), after the outputs before it

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
            heappush(ops, (int(self._finish_step(f + left - 1)) * _COLUMNS + i) * 4 + _FINISH)

    @staticmethod
    def _finish_step(last):
        """The step that retires a request whose last row is ``last``: processing that row's outputs."""
        return 2 * (last + 1)

    def decide(self, d: int, plan: bool) -> None:
        """Apply the operations up to decision d: the outputs of rows ..d processed, and if ``plan`` row
        d + 2's decodes planned."""
        self._apply_steps(2 * (d + 1) + 1 + plan, d + 2 + plan)

    def may_plan(self, d: int, valid: int, horizon: float, source) -> bool:
        """Whether decision d may plan row d + 2 with what it admits: that row is one the run may take, and the
        run then delivers row d + 1 too, so that row ends before ``horizon`` and no arrival comes at its very
        end (it would be recorded before that delivery) or breaks the request limit by then."""
        return (d + 2 < min(self.cap, self.rows) and self.deliverable(horizon) >= d + 2
                and source.quiet_until(int(self.end[d + 1])))

    def deliverable(self, horizon: float) -> int:
        """Rows whose outputs may be delivered as priced now: before ``horizon`` and within the time limit."""
        hi = min(self.last, self.rows, self.cap, self.priced)
        end = self.end[:hi]
        v = int(end.searchsorted(horizon, side="left"))
        limits = self.worker.limits
        if limits is not None:
            v = min(v, int(end.searchsorted(limits.max_time_ns, side="right")))
        return v

    def valid(self, horizon: float) -> int:
        """How many rows the run may deliver: each before ``horizon``, and the row then left in flight
        planned and running a request."""
        return min(self.cap - 1, self.last - 1, self.rows - 1, self.priced - 1, self.deliverable(horizon))

    def end_row(self, d: int) -> bool:
        """Row d ends now (decision d): its outputs processed and recorded as the async loop records a pass's
        outputs; whether a finish called back as it was recorded."""
        self.decide(d, False)
        used = self.used_at[d] if d else np.array([plan.kv_blocks_used for plan in self.in_flight_plans])
        return self._record_row(d, used.tolist())

    def plan_row(self, d: int) -> None:
        """Decision d plans row d + 2 (its blocks taken, the delivered tokens cached)."""
        self.decide(d, True)
        self.planned_itself()

    def close(self, m: int, ahead: int = 1, started: int | None = None) -> tuple:
        """The run stops with rows 0..m − 1 delivered and row m in flight, and ``ahead`` − 1 rows after it
        planned (an error stopped the simulation after the decision that planned row m + 1), ``started`` rows
        from m on started (default: all ``ahead``); each row was counted against the limits as it started. The
        requests and the schedulers as it leaves them; returns the pass it leaves in flight, as the loop keeps it."""
        in_flight = self._in_flight(m, self.used_at[m])
        self._deliver(m, self._rows_through(m), self._rows_through(m + ahead), False, saw_waiting=False)
        last = m + (ahead if started is None else started) - 1
        self.worker.count_run(m, self.labels[1:last + 1], int(self.busy[last].max()), limits_counted=True)
        return (in_flight,)

    def hand_over(self, m: int) -> tuple[tuple, list[SchedulerOutput]]:
        """The run stops with rows 0..m − 1 delivered and row m in flight, and row m + 1, planned at the end of
        row m − 1 (``admit_placed``), for the loop to start: the requests and the schedulers as that plan left
        them, the pass in flight and row m + 1's plans."""
        in_flight = self._in_flight(m, self.used_at[m])
        self._deliver(m, self._rows_through(m), self._rows_through(m + 2), True)
        self.worker.count_run(m, self.labels[1:m + 1], int(self.busy[m].max()), limits_counted=True)
        return (in_flight,), self._hand_over(m + 1, int(self.end[m - 1]))

    def _in_flight(self, m: int, used: np.ndarray) -> tuple:
        """Row m as the pass in flight the async loop keeps (plans, start, (busy per rank, provenance, active per
        rank), end);
        ``used``: its blocks in use per rank when it was planned."""
        plans = self._row_plans(m)
        for plan, blocks in zip(plans, used.tolist()):
            plan.kv_blocks_used = blocks
        cost = (self.busy[m].copy(), "+".join(self.labels[m]), self.works(m + 1)[m].copy())
        return plans, int(self.end[m - 1]), cost, int(self.end[m])

    def plan_first(self) -> None:
        """Decision −1: plan row 1 now (its blocks taken), after the outputs before it."""
        self.decide(-1, plan=True)
        self.planned_itself()

    def finish(self, m: int) -> tuple[tuple, list[SchedulerOutput] | None]:
        """Apply and record rows 0..m − 1 delivered and row m planned; returns the pass left in flight, and
        if handing over, the plans of row m + 1 (planned at the end of row m − 1)."""
        over = self.refused == m + 1  # (the row after the one left in flight, refused: ``_admit_arrivals``)
        self.decide(m - 1, plan=over)
        in_flight = self._in_flight(m, self._used(m + 1)[m])
        self._deliver(m, self._rows_through(m), self._rows_through(m + 1 + over), over)
        self._record(m)
        worker = self.worker
        worker.open_pass_ends.remove(int(self.end[0]))
        worker.open_pass_ends.append(int(self.end[m]))
        if not over:
            return (in_flight,), None
        return (in_flight,), self._hand_over(m + 1, int(self.end[m - 1]))
