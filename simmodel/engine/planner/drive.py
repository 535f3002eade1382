"""Planning and driving runs, for either lag (``Worker.lag``): how far a run may go, and the loops that take
its rows through arrivals (``carry``) or plan it to be applied as its passes end (``plan_ticked``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.planner.async_run import AsyncRun
from simmodel.engine.planner.run import Run, admits_arrivals, sees_arrivals
from simmodel.engine.planner.running import MAX_RUN, RunningRequests
from simmodel.engine.scheduler.base import SchedulerOutput

if TYPE_CHECKING:
    from simmodel.engine.worker import Worker


def carry(worker: Worker, horizon: float, plans: list | None = None, start: int | None = None,
          in_flight: tuple | None = None) -> tuple[int, list[SchedulerOutput] | None, tuple] | None:
    """Run the worker's passes from now (or ``start``), admitting its arrivals as they come where it may
    (``Run.admits``); returns when the run's last outputs are delivered, the plans of the pass after it if
    the run planned that pass already and the loop must start it (else None), and the passes it leaves in
    flight; None if no pass qualifies (the loop then plans the next pass on its own).

    Synchronous, ``plans``, if given, are the ranks' plans of the first pass (made by the schedulers, maybe
    admitting). Async (``in_flight``: the pass in flight), an arrival is read by the first decision after
    it: the one at the end of row d plans row d + 2 and admits the request there with the scheduler's own
    admission; if that is not whole prompts admitted alone, the run ends with row d's outputs delivered and
    hands the plan of row d + 2 to the loop. Every pass ends before ``horizon``, the next event that may read
    or change the worker.
    """
    lag = worker.lag
    now = worker.env.now if start is None else start
    if in_flight is not None:
        plans, first_end = in_flight[0], in_flight[3]
        if worker.launch is not None or first_end >= horizon:
            return None  # (launches move the planning times)
    elif plans is None and now + (worker.decode_pass_ns or worker.last_pass_ns) >= horizon:
        return None  # the next pass would most likely end past the horizon: not worth gathering
    run = _gathered(worker, plans, lag, may_wait=sees_arrivals(worker))
    rows = _rows(worker, now, horizon, started_before=lag)  # async: row 0 is in flight, rows 1..m start
    if run is not None and not admits_arrivals(worker):
        rows = min(rows, _rows_to_admission(worker, run, now, lag))
    if run is None or rows < 1 + lag:
        return None
    state = AsyncRun(worker, run, now, rows, in_flight) if lag else Run(worker, run, now, rows)
    state.price_from(lag)
    worker.open_pass_ends.append(now)  # events before the arrivals created ahead are still to be recorded
    try:
        m = _admit_arrivals(state, worker.arrivals, horizon)
        if m < 1:
            return None
        left, plans = state.finish(m)
    finally:
        worker.open_pass_ends.remove(now)
    return int(state.end[m - 1]), plans, left


def plan_ticked(worker: Worker, horizon: float, plans: list | None = None,
                in_flight: tuple | None = None) -> tuple[Run, int] | None:
    """Plan the worker's passes from now as a run applied as its passes end (``Worker._tick``), for a worker
    whose arrivals are not known ahead: returns the run and how many rows it may deliver (each before
    ``horizon``; async, the row after the last left planned and in flight), or None if no pass qualifies. A
    request placed on the worker meanwhile is seen by the plan at the end of that row, which the run takes or
    hands to the worker (``Worker._tick``). ``plans``, ``in_flight``: as for ``carry``. The pass after the
    one in flight (async) or the first pass (synchronous, unless ``plans`` are given) is planned now."""
    lag = worker.lag
    now = worker.env.now
    if in_flight is not None:
        plans, first_end = in_flight[0], in_flight[3]
        if worker.launch is not None or not now < first_end < horizon:
            return None  # (a pass in flight ending now is delivered at once by the loop)
    waits = worker.offloads and worker.prefill_schedule_interval <= 1  # (ends where one could be admitted)
    run = _gathered(worker, plans, lag, may_wait=admits_arrivals(worker) or waits)
    rows = min(_rows(worker, now, horizon, started_before=lag), worker.tick_rows)
    if run is None or rows < 1 + lag:
        return None
    if lag:
        state = AsyncRun(worker, run, now, rows, in_flight, ticked=True)
    else:
        state = Run(worker, run, now, rows, ticked=True)
    state.price_from(lag)
    m = state.valid(horizon)
    if waits and any(state.waits):
        state.holds_waiting = True
        state.storage_marks = worker.storage_marks()  # (the run ends once storage gains a write: ``Worker._tick``)
        if (slot := state.slot_decision(m)) is not None:
            m = slot + 1  # (the decision after the first finish may admit one, and is the loop's)
    if m < 1 or lag and not state.busy[1:m + 1].max(axis=1).all():
        return None  # (async: after a pass of no time the loop decides at once, without waiting)
    state.plan_first()
    return state, m


def _gathered(worker: Worker, plans: list | None, lag: int, may_wait: bool) -> RunningRequests | None:
    """The worker's running requests as a run's arrays, or None if they cannot start a run (see
    ``running.RunningRequests.gather``). Requests may wait only where the run admits them itself, or ends where
    it could (``may_wait``). With a host KV tier, a first pass whose plan loads from it runs on its own
    (``Rank.finish_pass`` starts those copies), as does one that waits for copies still reading blocks it takes
    (``host_flush``: ``Worker._start`` prices the wait), and every pass while a request's offer to the tier waits
    to be made again, or after a plan whose lookups read from storage (``VllmCpuOffload.retrying``). A synchronous
    run of one rank with no request waiting (nor a prefix landed from the tier: kept as strict as before) may start
    with a pass whose plan stores to the tier, if the tier says so (``carried_by_run``): the run queues those copies
    as that pass ends (``Run.first_copies``). On several ranks the pass-by-pass loop queues each rank's copies
    between the ends of the ranks' passes, which a run applied ahead records all at once; and a store takes slots
    and may evict, so a waiting request's lookup at the next plan, which the rank's own plan makes again, may find
    less or wait (a run's decisions look nothing up)."""
    if worker.offloads:
        if any(rank.offload.retrying for rank in worker.ranks):
            return None
        sched = worker.ranks[0].scheduler
        carries = not lag and len(worker.ranks) == 1 and not (sched.waiting or sched.handoffs)
        if plans is not None and any((p.host_stores or p.host_loads or p.host_flush)
                                     and not (carries and rank.offload.carried_by_run(p))
                                     for rank, p in zip(worker.ranks, plans)):
            return None
    run = RunningRequests(worker, plans, bool(lag), may_wait=may_wait)
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


def _rows_to_admission(worker: Worker, run: RunningRequests, now: int, lag: int) -> int:
    """Rows a run that admits nothing itself (``admits_arrivals``: a worker with a host KV tier, or off a prefill
    cadence) can take: it ends at the first decision that could admit, the one after the next arrival (within
    twice the rows the time to it allows at the last pass's pace) or, on a rank where requests wait (or a prefix
    landed from the tier waits), the one after its first finish (``_admit_arrivals``). Its arrays are as long as its
    rows, and with a tier most such runs take a row or two; one sized short ends early, and the next run goes on from
    there."""
    rows = MAX_RUN
    arrival = worker.arrivals.next_arrival_ns()
    if arrival is not None:
        rows = 2 * _rows(worker, now, arrival, started_before=lag)
    for r, rank in enumerate(worker.ranks):
        if rank.scheduler.waiting or rank.scheduler.handoffs:
            left = run.left if len(worker.ranks) == 1 else run.left[run.rank_of == r]
            if len(left):
                rows = min(rows, int(left.min()) + 1 + lag)
    return rows


def _next_arrival(source, end: np.ndarray, valid: int) -> tuple[int | None, int]:
    """The next arrival and the first of the ``valid`` rows that does not end before it; (None, valid) if
    every row ends before it (or none comes)."""
    t = source.next_arrival_ns()
    if t is None:
        return None, valid
    j = int(end[:valid].searchsorted(t, side="left"))
    return (None, valid) if j == valid else (t, j)


def _admit_arrivals(state: Run | AsyncRun, source, horizon: float) -> int:
    """Take rows while arrivals (and requests waiting for a slot, after each finish) are admitted whole;
    returns how many rows the run delivers, for either lag (``state.lag``).

    Decision d, at the end of row d, plans row d + 1 + lag. An arrival is read by the first decision after
    it, and each rank's scheduler admits it there (``Run.admit``) with what waits; so does the decision that
    retires a request while requests wait for a slot (``slot_decision``). If what that decision admits is
    not whole prompts admitted alone, the run ends with row d delivered and hands the planned row to the
    loop (``finish``); so does a synchronous run that stops right before the row its last decision planned
    (``Run.planned``).
    """
    lag, end = state.lag, state.end
    valid = state.valid(horizon)
    while True:
        if valid < 1:
            return 0
        t, d = _next_arrival(source, end, valid)
        slot = state.slot_decision(valid)
        if ((slot is None or slot >= d) and d + 1 - lag >= valid
                and (more := state.priced_further(valid, horizon)) > valid):
            # The rows priced so far end before the next arrival, or (synchronous) the row its decision plans is
            # not priced yet: price more and look again (the run takes what it would take priced whole).
            valid = more
            continue
        if slot is not None and (t is None or slot < d):
            # A finish frees a slot before the next arrival is read: that decision admits the next waiting one.
            d = slot
            if not state.admits or not state.may_plan(d, valid, horizon, source):
                return d + 1  # (not admitting: the loop makes decision d)
            state.decide(d, plan=True)
        else:
            if t is None:
                return valid  # every delivery comes before the next arrival
            if end[d] == t or not source.quiet_until(int(end[d])):
                return d  # an arrival at a delivery's instant (or over the request limit): the loop reads it
            if not state.admits or not state.may_plan(d, valid, horizon, source):
                return d + 1  # (not admitting: the loop makes decision d, seeing the arrival made by then)
            state.decide(d, plan=True)
            source.arrive_early(int(end[d]))
        row, at = d + 1 + lag, int(end[d])
        outs = state.admit(row, at if lag else None)  # (async: seeing the requests arrived before)
        if not state.take(row, outs, at):
            return d + 1  # the loop starts the row as planned (a chunk, a request left waiting)
        valid = state.valid(horizon)
        if valid <= d + 1 and (valid := state.priced_further(valid, horizon)) <= d + 1:
            return d + 1  # (async: row d + 1, priced already, is left in flight)
