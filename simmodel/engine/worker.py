"""A worker: its attention-DP ranks run their passes in lockstep behind one pass barrier."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import simpy
from simpy.events import Event

from simmodel.engine.barrier import PassBarrier
from simmodel.engine.clock import clock_ns
from simmodel.engine.environment import Late
from simmodel.engine.planner import PLANNERS
from simmodel.engine.planner.running import MAX_RUN
from simmodel.engine.rank import Rank
from simmodel.engine.request import Request
from simmodel.engine.scheduler.base import SchedulerOutput
from simmodel.errors import SimulationError
from simmodel.perf.timing import PassBatch, PassCost, PassSums, PassTiming, pass_sums

if TYPE_CHECKING:
    from simmodel.engine.planner.async_run import AsyncRun
    from simmodel.engine.planner.run import Run
    from simmodel.perf.pipeline import PipelineStages

Pass = tuple  # a pass launched and not yet delivered: (plans, start, (busy ns per rank, provenance, work ns per rank), end)


class Ahead(NamedTuple):
    """A run applied when it started (``planner.carry``): its last outputs are
    delivered at ``end``; ``planned``: the plans of the pass after it if the run planned that pass already and
    the loop must start it, else None; ``in_flight``: the passes it leaves launched and not yet delivered."""

    end: int
    planned: list[SchedulerOutput] | None
    in_flight: tuple[Pass, ...] = ()


class Ticked(NamedTuple):
    """A run to apply as its passes end (``planner.plan_ticked``), delivering up to
    ``length`` passes."""

    run: Run | AsyncRun
    length: int


class Worker:
    """One engine instance (a vLLM server) with ``attention_data`` rank schedulers.

    Its process is the pass barrier: it waits until every rank has submitted a plan, prices all
    plans with one call of the timing model, lets the slowest rank's time pass, applies every
    rank's outcome at that instant and releases the ranks to plan again. A rank with no work still
    waits at the barrier. When no rank has work the worker sleeps until a request is placed on it.
    """

    def __init__(self, env: simpy.Environment, worker_id: int, timing: PassTiming, role: str = "aggregated",
                 async_scheduling: bool = False, prefill_schedule_interval: int = 1, launch=None,
                 prefill_decode_interval: int = 0) -> None:
        self.env, self.worker_id, self.timing, self.role = env, worker_id, timing, role
        self.async_scheduling = async_scheduling
        self.launch = launch
        """vLLM pass launch costs (``scheduler.launch``), or None."""
        self.prefill_schedule_interval = prefill_schedule_interval
        self.prefill_decode_interval = prefill_decode_interval
        """SGLang: rounds after a prefill round (on any rank) in which no rank may prefill."""
        self._blocked_rounds = 0
        self._passes_in_flight = 0
        self._wave_step = 0
        """Passes planned since the DP group last drained (vLLM's ``step_counter``, equal on every rank)."""
        self.plan_cutoff: int | None = None
        """Async scheduling: requests arriving at or after this time are not seen by the pass being planned."""
        self.ranks: list[Rank] = []
        self.num_passes = 0
        self.provenance_counts: dict[str, int] = {}
        self.barrier = PassBarrier(env)
        self._wake: Event | None = None
        self._next_rank = 0
        self._num_placed = 0
        self._placed_at_plan = 0
        self.kv_capacity_tokens = np.zeros(0)
        """KV tokens each rank's pool holds (what the timing model prices attention against)."""
        self.open_pass_ends: list[int] = []
        """End times of the passes started and not yet finished: their pass-end events are still to come."""
        self.limits = None
        """The run's ``RunLimits``, counting every pass started (None: unbounded, e.g. in unit tests)."""
        self.energy = None
        """The role's ``PassEnergy``, which prices each pass's work at datasheet peaks for its energy (None: the
        pass rows' ``rank_work_ns`` are 0)."""
        self.coalesce = True
        """Plan runs of passes (``planner``); off, every pass is planned on its own."""
        self.stages: PipelineStages | None = None
        """Pipeline parallelism (``perf.pipeline``): the stages' clocks, a pass going through them in turn while the
        next passes follow it (up to one per stage in flight, vLLM's batch queue); None: one stage. Set with
        ``coalesce`` off (a run of passes prices them back to back)."""
        self.quiet_callbacks = False
        """Whether a finish's callback (a closed-loop client sending its next request) can neither fail the run
        (the load cannot create the request over ``limits.max_requests``) nor read a worker's state (no router
        reads it): a run of several attention-DP ranks may then call back inside (``Run.calls_back_inside``)."""
        self.arrivals = None
        """This worker's arrivals (``traffic.source.WorkerArrivals``) when nothing but its own arrivals reaches
        it (an open-loop load placed by a router that reads no state, aggregated vLLM): its runs of passes
        then wait for no other process, and may span its arrivals and admit them; else None."""
        self.last_pass_ns = 0
        self.decode_pass_ns = 0
        """How long the last pass, and the last pass of a run, took (to size runs)."""
        self._open_run: tuple | None = None
        """The run being applied as its passes end: the rows it delivered, the rows planned after them and how
        many of those started (see ``settle``)."""
        self.tick_rows = 16
        """Passes the next run applied as its passes end is planned for (``_tick``): twice as many as the last
        such run took before something placed on the worker ended it, or twice the last if it ran to its end
        (planning passes that will not run costs time, and changes nothing else)."""
        self.horizon: int | None = None
        """No pass of a run ends after this time (the end of the run being driven), or None."""
        self.reads_at = None
        """When something outside next reads this worker's state (a replica planner's sample: a callable giving
        the instant), or None: no pass of a run ends at or after it."""
        self.vision: list | None = None
        """Per rank, a ``RankVision`` adding image-encoding time to its prefill passes (SGLang), or None."""
        self.hands_off = False
        """Whether every request placed on the worker is a P/D prefill leg, which hands its KV off when it
        finishes (a prefill pool's worker): its passes are never planned as runs, since each pass is done with
        its prompts, so a run would mostly be one pass long and cost more than that pass on its own."""
        self.offloads = False
        """Whether its ranks keep a host KV tier (``simmodel.offload``; set by ``Rank.attach_offload``). Its runs then
        never admit: an admission looks the prompt up on the host at the plan's instant and offers the tier what
        the pass computes, so every pass that admits is planned on its own (``Rank.plan``) and a run holds only
        the decodes between them (going on through waiting requests it does not admit where ``planner.run``'s
        ``sees_arrivals`` allows, or ``Run.holds_waiting`` in a run applied as its passes end), ending before a
        load lands (``_horizon``)."""

    def add_rank(self, rank: Rank) -> None:
        self.ranks.append(rank)
        self.barrier.add_rank()
        self.kv_capacity_tokens = np.array(
            [float(r.pool.num_blocks * r.pool.block_size) for r in self.ranks])

    # -- placement -----------------------------------------------------------------------------

    def pick_rank(self, hint: int | None) -> Rank:
        """The rank a trace names, else the next rank round robin."""
        if hint is not None:
            return self.ranks[hint]
        rank = self.ranks[self._next_rank]
        self._next_rank = (self._next_rank + 1) % len(self.ranks)
        return rank

    def place(self, request: Request, at: int | None = None) -> Rank:
        """Put a new request on a rank (see ``pick_rank``), now or as at ``at`` (an arrival made ahead)."""
        rank = self.pick_rank(request.dp_rank_hint)
        rank.add_request(request, at)
        self.notify()
        return rank

    def notify(self) -> None:
        """New work is on a rank: wake the barrier if the worker sleeps."""
        self._num_placed += 1
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def mark_planned(self) -> None:
        """Every request placed so far has been seen by a plan (see ``_sleep_until_work``)."""
        self._placed_at_plan = self._num_placed

    def _plan_ranks(self, at: int | None = None) -> list[SchedulerOutput]:
        """Every rank plans its next pass now (or as at ``at``: ``Rank.plan``), as the ranks do once the
        barrier releases them, for a pass the worker's loop runs next."""
        plans = [rank.plan(at=at) for rank in self.ranks]
        self.mark_planned()
        return plans

    def has_requests(self) -> bool:
        return any(rank.has_requests() for rank in self.ranks)

    def count_run(self, m: int, started: list[tuple[str, ...]], last_ns: int, limits_counted: bool = False) -> None:
        """Count a run of passes applied at once: it started and finished m passes of every rank
        (``started``: the provenance labels of those it started; ``last_ns``: how long the last one takes;
        ``limits_counted``: each was counted against the limits as it started)."""
        counts = self.provenance_counts
        first = started[0] if started else None
        if all(p is first for p in started):
            for label in first or ():
                counts[label] = counts.get(label, 0) + len(started)
        else:
            for labels in started:
                for label in labels:
                    counts[label] = counts.get(label, 0) + 1
        if self.limits is not None and not limits_counted:
            self.limits.num_passes += m
        self._wave_step += m
        self.num_passes += m
        self.last_pass_ns = self.decode_pass_ns = last_ns

    @property
    def is_idle(self) -> bool:
        """True while no pass of this worker is in flight (between busy periods, or between passes)."""
        return self._passes_in_flight == 0

    # -- the pass barrier ----------------------------------------------------------------------

    def submit(self, rank_id: int, plan: SchedulerOutput) -> Event:
        """Hand in one rank's plan at the pass barrier; the returned event fires when the pass is over."""
        if self.barrier.is_open:
            self._placed_at_plan = self._num_placed
        return self.barrier.submit(rank_id, plan)

    @property
    def throttle_prefills(self) -> bool:
        """vLLM's prefill schedule interval: only every N-th pass of a wave admits prefill work. SGLang's
        prefill/decode interval: no prefill in the N rounds after a round in which any rank prefilled."""
        if self.prefill_decode_interval:
            return self._blocked_rounds > 0
        return self.prefill_schedule_interval > 1 and self._wave_step % self.prefill_schedule_interval != 0

    def _collect(self) -> list[SchedulerOutput]:
        plans = self.barrier.collect()
        if self._blocked_rounds:
            self._blocked_rounds -= 1  # this round was planned blocked: it counts, busy or idle
        return plans

    def _count_prefill_round(self, plans: list[SchedulerOutput]) -> None:
        """After a round that ran prefill on any rank, block prefills for the next N rounds (SGLang)."""
        if self.prefill_decode_interval and any(not d for plan in plans for d in plan.is_decode):
            self._blocked_rounds = self.prefill_decode_interval

    def _release(self) -> None:
        self.barrier.release()

    @property
    def lag(self) -> int:
        """Passes in flight while the next one is planned: 0 synchronous (a pass is planned once the one before
        it delivered its outputs), 1 under async scheduling (vLLM's batch queue of two, SGLang's overlap); with
        P pipeline stages, P − 1 synchronous and P under async scheduling (vLLM's batch queue of P, or of P + 1
        with Model Runner V2)."""
        extra = 1 if self.async_scheduling else 0
        if self.stages is not None:
            return len(self.stages.free) - 1 + extra
        return extra

    def run(self) -> Generator[Event, Any, None]:
        """The engine loop, for either ``lag``: plan a pass, launch it, and deliver the outputs of the pass
        ``lag`` passes before it; the next plan follows at once.

        Synchronous, a pass is planned when the one before it has delivered its outputs and starts at once.
        Async (vLLM's ``step_with_batch_queue``), pass i is planned at D(i) = max(launch end of pass i−1, end of
        pass i−2), after the outputs of pass i−2 are processed, and sees only requests that arrived before D(i):
        a request arriving while a pass runs skips the pass already committed, and one arriving exactly at a
        pass end counts as a reaction to it. The GPU runs passes back to back (launches move no pass). Without
        a ``launch`` model launches take no time, so outputs leave at their pass end and D(i) is the end of
        pass i−2. An empty pass launches nothing (the pass in flight is delivered). An idle engine plans when a
        request arrives.

        Wherever a plan would follow a delivery, the planner may take the passes from there as a run
        (``_coalesced_run``), and so may the plan a synchronous worker just made; a run returns the passes it
        left in flight and, if it planned the next one already, that pass's plans.
        """
        lag = self.lag
        in_flight: list[Pass] = []  # launched, not delivered yet, oldest first
        planned = None  # plans a run made for the next pass (the ranks were not released)
        while True:
            plans, blocked = yield from self._round(planned)
            planned = None
            now = self.env.now
            empty = all(plan.is_empty for plan in plans)
            delivered = True  # (a delivery came before the next plan: a run may start there)
            if empty and not in_flight:
                # An idle blocked round takes no time, and neither does a plan that only preempted (vLLM's
                # engine schedules again at once, now admitting): plan the next round at once.
                if not blocked and not any(plan.preempted for plan in plans):
                    yield from self._idle()
            elif not empty and self.coalesce and (run := self._coalesced_run(plans=plans)) is not None:
                in_flight, planned = yield from self._drive(run)  # this pass and the ones after it
            else:
                launch_end = now
                if not empty:
                    gpu_free = in_flight[-1][3] if in_flight else now
                    self._count_prefill_round(plans)
                    if self.stages is None:
                        start, cost = self._start(plans, max(now, gpu_free))
                    else:  # the first stage takes it once free; its outputs come off the last stage
                        start, cost = self._start(plans, self.stages.ready_at(now))
                    end = self.open_pass_ends[-1]
                    launch_end = self._launch_end(plans, now, start, end)
                    in_flight.append((plans, start, cost, end))
                pending = in_flight.pop(0) if empty or len(in_flight) > lag else None
                decide_at = max(launch_end, pending[3] if pending is not None else now)
                if decide_at > now or not lag:  # (a synchronous pass's end is an event even if it took no time)
                    yield Late(self.env, decide_at - now)
                delivered = pending is not None
                if delivered:
                    self._finish(*pending)
                    if lag:  # requests arriving from now on react to these outputs: not read before this plan
                        self.plan_cutoff = self.env.now
            while (delivered and planned is None and self.coalesce
                   and (run := self._coalesced_run(in_flight=in_flight)) is not None):
                in_flight, planned = yield from self._drive(run)
            if planned is None:
                self._release()

    def _idle(self) -> Generator[Event, Any, None]:
        """No pass to run and none in flight: wait for work. Async, requests that arrived after the last plan's
        cutoff were not read by it: they are read at once (the group drained, a new wave starts)."""
        if self.plan_cutoff is not None and self.has_requests():
            self._wave_step = 0
            yield Late(self.env)
        else:
            yield from self._sleep_until_work()
        self.plan_cutoff = None

    def _round(self, planned: list[SchedulerOutput] | None) -> Generator[Event, Any, tuple[list, bool]]:
        """The plans of the next round, and whether it was planned under ``prefill_decode_interval``: those
        a run made already (the ranks were not released), else the ranks' once all are in."""
        if planned is not None:
            return planned, False
        yield self.barrier.all_in
        blocked = self._blocked_rounds > 0
        return self._collect(), blocked

    def _drive(self, run: Ahead | Ticked) -> Generator[Event, Any, tuple[list[Pass], list[SchedulerOutput] | None]]:
        """Let a run of passes (``_coalesced_run``) happen; returns the passes it left in flight, and the plans
        of the pass after it if the run planned that pass already, else None. A run applied ahead (a worker
        making its own arrivals) is waited out to its last delivery; any other is applied as its passes end
        (``_tick``). Async, requests arriving from its last delivery on are not read by the next plan."""
        if isinstance(run, Ticked):
            in_flight, planned = yield from self._tick(run.run, run.length)
        else:
            yield Late(self.env, run.end - self.env.now)
            in_flight, planned = run.in_flight, run.planned
        if self.lag:
            self.plan_cutoff = self.env.now
        return list(in_flight), planned

    def _tick(self, run: Run | AsyncRun, length: int) -> Generator[Event, Any, tuple]:
        """A run applied as its passes end (``planner.plan_ticked``), delivering up to ``length`` rows (more once
        those are priced, ``Run.priced_further``): each pass end is an event of its own, at the instant and in the
        order the loop makes it. With ``lag`` passes in flight (row 0 already, under async), the end of row d
        delivers its outputs and plans row d + 1 + lag, which then starts (at once, or async when row d + 1 ends).

        Something placed on the worker meanwhile is seen by that plan: the run goes on if it takes what the
        plan admits (``Run.takes_placements``, which an SGLang run answers by what was placed), else it ends
        there, handing the loop the plan if it was made already. Returns the passes left in flight, and the plans
        of the pass after them if made already. A run whose first plan the ranks made (``planned_alone``)
        hands it to the loop at once."""
        lag = run.lag
        if run.planned_alone is not None:  # (what that plan set going runs before the pass starts)
            yield self.env.timeout(0)
            return (), run.planned_alone
        horizon = self._limited_run()
        d = 0
        plan_now = False
        self._start_row(run, lag, delivered=0)
        while True:
            yield Late(self.env, int(run.end[d]) - self.env.now)
            self._passes_in_flight -= 1
            self._open_run = (run, d + 1, lag, lag)  # (its finishes may call back, and fail the run)
            called_back = run.end_row(d)
            self.open_pass_ends.remove(int(run.end[d]))
            if d + 1 == length and (length := run.priced_further(length, horizon)) == d + 1:
                break
            if self._placement_ends(run) or self._storage_moved(run):  # (its plan may prefill, or find more)
                break  # (the loop's release is then the hop after which the ranks plan, as pass by pass)
            if called_back:  # what the callbacks set going runs before the ranks plan (the barrier's release)
                yield self.env.timeout(0)
                # Placed by what the callbacks set going, within the hop the barrier's release takes: the ranks
                # plan now, as they would once released, and the loop runs that pass.
                plan_now = self._placement_ends(run)
                if plan_now:
                    break
            placed = self._placed_since_plan
            if placed and not run.takes_placements:
                break
            run.plan_row(d)
            admits = placed or run.waiting() and not run.holds_waiting  # (async: one placed now waits unseen)
            row = d + 1 + lag
            self._open_run = (run, d + 1, 1 + lag, lag)
            outs = run.admit_placed(row, self.env.now) if admits else None
            if admits or called_back:
                # What the plan or the callbacks set going (a P/D transfer once blocks are reserved, a client's
                # next request) runs before the pass starts, as between the ranks' plans and the barrier.
                yield self.env.timeout(0)
            if admits:  # the plan saw requests placed meanwhile, or waiting still (its scheduler tried them)
                valid = run.valid(horizon) if run.take(row, outs, self.env.now) else 0
                if valid <= d + 1:
                    self._open_run = None
                    self._size_next_run(d + 1, length)
                    return run.hand_over(d + 1)
                length = valid
            self._start_row(run, row, delivered=d + 1)
            d += 1
        self._open_run = None
        self._size_next_run(d + 1, length)
        in_flight = run.close(d + 1)
        return in_flight, (self._plan_ranks() if plan_now else None)

    def _placement_ends(self, run: Run | AsyncRun) -> bool:
        """Whether something placed on the worker since its ranks last planned ends a synchronous run that does
        not take placements (asked again after each hop: what a run takes can change as it goes)."""
        return self._placed_since_plan and not (run.takes_placements or run.lag)

    def _storage_moved(self, run: Run | AsyncRun) -> bool:
        """Whether a run that holds waiting requests must end here: a storage write has ended since it was planned,
        and a waiting request's lookup at this plan could find what it wrote (``Run.holds_waiting``)."""
        return run.holds_waiting and self.storage_marks() != run.storage_marks

    def storage_marks(self) -> list[tuple]:
        """Each rank's ``Offload.storage_mark`` now (a run that holds waiting requests ends once they change)."""
        now = self.env.now
        return [rank.offload.storage_mark(now) for rank in self.ranks]

    def _start_row(self, run: Run | AsyncRun, row: int, delivered: int) -> None:
        """Start a row of a run applied as its passes end, ``delivered`` rows having been delivered."""
        self._begin_row(run, row, delivered=delivered, ahead=1 + run.lag)
        self._passes_in_flight += 1
        self.open_pass_ends.append(int(run.end[row]))

    def _begin_row(self, run, row: int, delivered: int, ahead: int) -> None:
        """Start a row of a run applied as its passes end, noting for ``settle`` the rows ``delivered`` so far
        and the ``ahead`` rows planned after them, the last of which (this one) has started only once the
        limits let it."""
        self._open_run = (run, delivered, ahead, ahead - 1)
        run.begin_row(row)
        self._open_run = (run, delivered, ahead, ahead)

    def _size_next_run(self, taken: int, length: int) -> None:
        """``tick_rows`` after a run applied as its passes end took ``taken`` of its ``length`` rows."""
        self.tick_rows = min(MAX_RUN, 2 * max(taken if taken < length else self.tick_rows, 4))

    @property
    def _placed_since_plan(self) -> bool:
        """Whether a request was placed on the worker since its ranks last planned (the next plan sees it)."""
        return self._num_placed != self._placed_at_plan

    def settle(self) -> None:
        """The simulation stopped on an error inside a run being applied as its passes end: leave the requests
        and schedulers as that run had made them by now (its rows ended so far delivered, the ones planned
        after them planned), as the pass-by-pass loop would have."""
        if self._open_run is not None:
            run, delivered, ahead, started = self._open_run
            self._open_run = None
            run.close(delivered, ahead, started)

    def _coalesced_run(self, plans: list[SchedulerOutput] | None = None, in_flight: list[Pass] = ()):
        """The passes that follow now as one run (``planner``), to ``_drive``; None when the next pass must be
        planned on its own. Synchronous, the run starts with the pass the ranks just planned if ``plans`` are
        given, else it plans its first pass itself. Async, it starts at a delivery, with the pass after it in
        flight (``in_flight``).
        """
        if self.lag and (plans is not None or not in_flight):
            return None
        planner = PLANNERS.get(self.ranks[0].scheduler.planner)
        if (planner is None or self.hands_off or self.prefill_decode_interval or self.vision is not None
                or not hasattr(self.timing, "price_sums")):
            return None  # runs are priced from per-rank totals
        carry, plan_ticked = planner
        horizon = self._horizon()
        if horizon <= self.env.now:
            return None
        passing = in_flight[0] if in_flight else None
        if self.arrivals is None:  # applied as its passes end, seeing at each end what was placed meanwhile
            ticked = plan_ticked(self, self._limited_run(), plans, passing)
            return None if ticked is None else Ticked(*ticked)
        if carry is None:
            return None
        ahead = carry(self, horizon, plans, in_flight=passing)
        if ahead is None:
            return None
        end, planned, left = ahead
        if not self.lag:
            end, planned = self._carry(end, planned, horizon)
        return Ahead(end, planned, left)

    def _carry(self, end: int, planned: list[SchedulerOutput] | None,
               horizon: float) -> tuple[int, list[SchedulerOutput] | None]:
        """Go on after a run applied ahead (``planner.carry``) that ended at ``end``: if its last pass spans
        arrivals, the requests arriving before ``end`` are created, the ranks plan the pass starting at
        ``end`` as they would then (no other event comes before the horizon, and none at ``end``), and that
        pass starts another run if it can. Returns when the last run ends, and the plans of the pass
        after it if that pass must run on its own (None: the ranks plan it when released)."""
        source = self.arrivals
        while planned is None and (arrival := source.next_arrival_ns()) is not None and arrival < end:
            source.arrive_early(end)
            plans = self._plan_ranks(at=end)  # planning schedules nothing (but a host tier's load or wake)
            if all(plan.is_empty for plan in plans):
                return end, plans
            horizon = self._before_offload_events(horizon, end)
            run = PLANNERS[self.ranks[0].scheduler.planner][0](self, horizon, plans, start=end)
            if run is None:
                return end, plans
            end, planned, _ = run
        return end, planned

    def _horizon(self) -> float:
        """The next instant at which something but this worker's own runs may read or change it: the next event
        of any process, or, if nothing but its own arrivals reaches it (see ``arrivals``, which its runs then
        admit themselves), only the end of the run being driven, the time limit and the request limit."""
        if self.arrivals is None:
            return self._limited(self.env.peek())
        horizon = self._limited(float("inf"))
        if self.limits is not None:  # a pass may start after the time limit, and another worker's pass
            horizon = min(horizon, self.limits.max_time_ns + 1)  # that does fails the run: go pass by pass
        return self.arrivals.horizon_ns(self._before_offload_events(horizon))

    def _before_offload_events(self, horizon: float, at: int | None = None) -> float:
        """``horizon``, or earlier if a rank's host KV tier acts on it before (a load landing, a waiting request
        woken, storage gaining a write that a request waiting at ``at`` (default now) may find:
        ``VllmCpuOffload.next_event_ns``)."""
        if not self.offloads:
            return horizon
        at = self.env.now if at is None else at
        return min(horizon, *(rank.offload.next_event_ns(bool(rank.scheduler.waiting), at) for rank in self.ranks))

    def _limited_run(self) -> float:
        """How far a run applied as its passes end may reach: the end of the run being driven, and the time
        limit (a pass may start after it, and another worker's pass that does fails the run)."""
        horizon = self._limited(float("inf"))
        if self.limits is not None:
            horizon = min(horizon, self.limits.max_time_ns + 1)
        return horizon

    def _limited(self, horizon: float) -> float:
        if self.reads_at is not None:
            horizon = min(horizon, self.reads_at())
        return horizon if self.horizon is None else min(horizon, self.horizon + 1)

    def _launch_end(self, plans: list[SchedulerOutput], decided: int, start: int, end: int) -> int:
        """When the CPU finishes launching a pass decided at ``decided`` that runs ``start``–``end``."""
        launch = self.launch
        if launch is None:
            return decided
        tokens = max(plan.total_num_scheduled_tokens for plan in plans)
        eager = tokens > launch.max_cudagraph_capture_size
        prefill = any(not d for plan in plans for d in plan.is_decode)
        cost_ms = launch.eager_ms if eager else (launch.piecewise_ms if prefill else launch.decode_ms)
        done = decided + int(round(cost_ms * 1e6))
        if eager:  # a full CUDA launch queue holds the CPU until the GPU is this far into the pass
            done = max(done, start + int(round(launch.eager_queue_fraction * (end - start))))
        return min(done, end)  # a launch never ends after its pass

    def _sleep_until_work(self) -> Generator[Event, Any, None]:
        self._wave_step = 0  # the whole group drained: a new wave admits prefills at once
        if self._placed_since_plan:  # work arrived while the ranks were planning
            yield Late(self.env)
            return
        # Queued work with no pass to run is fine only while KV blocks are held outside the ranks' running
        # requests (a prefill leg awaiting its transfer, a reservation for an incoming one): their release
        # wakes the worker. With no block held at all, nothing could ever change: fail instead of hanging.
        if self.has_requests() and not any(rank.pool.num_used_blocks or rank.expects_work for rank in self.ranks):
            raise SimulationError(f"{self.role} worker {self.worker_id}: requests are queued but no rank can "
                                  f"schedule any of them, and none ever will (nothing is running to free KV): the "
                                  f"first one needs more KV or a larger pass budget than an empty rank has (SGLang "
                                  f"also reserves its output, or with ignore_eos and the radix cache off, room for "
                                  f"it to finish); give the rank more KV or shorten the requests")
        self._wake = self.env.event()
        yield self._wake
        self._wake = None
        yield Late(self.env)

    def _start(self, plans: list[SchedulerOutput],
               start: int | None = None) -> tuple[int, tuple[np.ndarray, str, np.ndarray]]:
        """Price a pass of every rank and record its start (now unless given); returns
        (start, (busy ns per rank, provenance, work ns per rank at datasheet peaks))."""
        start = self.env.now if start is None else start
        if self.limits is not None:
            self.limits.count_pass(start)
        self._wave_step += 1
        self._passes_in_flight += 1
        batch = self._batch(plans)
        sums = pass_sums(batch)
        own = getattr(self.timing, "price_sums", None)
        if own is None:
            cost = self.timing.price(batch)
        else:  # (``price`` of a timing that prices sums: the same bits, the sums made once)
            seconds, labels = own(sums)
            cost = PassCost(seconds[0], labels[0])
        seconds = cost.total_s
        work = self.work_ns(sums)
        if self.vision is not None:  # (the vision tower's GPU time counts as fully busy: ``perf.energy``)
            encode = np.array([v.pass_seconds(p) for v, p in zip(self.vision, plans)])
            seconds = seconds + encode
            work = work + np.rint(encode * 1e9).astype(np.int64)
        busy = clock_ns(seconds)
        if busy is None:
            raise SimulationError(f"{self.role} worker {self.worker_id}: the timing model priced a pass at "
                                  f"{seconds.max():g} s, outside what the simulated clock can hold")
        if self.offloads:  # a host tier's copies inside the pass (SGLang's loads and write-back stalls, vLLM's flushes)
            for i, (rank, plan) in enumerate(zip(self.ranks, plans)):
                if plan.host_loaded or plan.host_synced_pages or plan.host_flush:
                    index = rank.num_passes + self._passes_in_flight - 1  # (as ``begin_pass`` numbers it)
                    busy[i] = rank.offload.pass_ns(plan, start, int(busy[i]), index)
        self.last_pass_ns = int(busy.max())
        if self.stages is None:
            self.open_pass_ends.append(start + self.last_pass_ns)
        else:
            tokens = sum(sum(plan.num_new_tokens) for plan in plans)
            self.open_pass_ends.append(self.stages.place(start, self.last_pass_ns, tokens))
        for label in cost.provenance:
            self.provenance_counts[label] = self.provenance_counts.get(label, 0) + 1
        for rank, plan in zip(self.ranks, plans):  # its index: the rank's finished passes, then those in flight
            rank.begin_pass(plan, start, rank.num_passes + self._passes_in_flight - 1)
        return start, (busy, "+".join(cost.provenance), work)

    def _finish(self, plans: list[SchedulerOutput], start: int, cost: tuple[np.ndarray, str, np.ndarray],
                end: int | None = None) -> None:
        """Apply every rank's outcome now: the pass ran ``start``–``end`` (default: it ends now) and its
        outputs reach the clients at this instant."""
        busy, provenance, work = cost
        end = self.env.now if end is None else end
        self._passes_in_flight -= 1
        self.num_passes += 1
        for rank, plan, rank_busy, rank_work in zip(self.ranks, plans, busy.tolist(), work.tolist()):
            rank.finish_pass(plan, start, end, rank_busy, provenance, self.env.now, rank_work)
        self.open_pass_ends.remove(end)  # only now: its pass-end events are recorded

    def work_ns(self, sums: PassSums) -> np.ndarray:
        """Per row of ``sums`` (a rank of a pass): its work at datasheet peaks, ns (``PassEnergy.work_ns``)."""
        if self.energy is None:
            return np.zeros(len(sums.table), np.int64)
        return self.energy.work_ns(sums)

    def _batch(self, plans: list[SchedulerOutput]) -> PassBatch:
        if len(plans) == 1:
            plan = plans[0]
            n = len(plan.requests)
            return PassBatch(1, np.zeros(n, dtype=np.int64), np.array(plan.num_new_tokens, dtype=np.int64),
                             np.array(plan.num_context_tokens, dtype=np.int64), np.array(plan.is_decode, dtype=bool),
                             np.array(plan.samples, dtype=bool), self.kv_capacity_tokens)
        counts = [len(plan.requests) for plan in plans]
        rank = np.repeat(np.arange(len(plans)), counts)
        new = np.fromiter((n for p in plans for n in p.num_new_tokens), np.int64, rank.size)
        ctx = np.fromiter((n for p in plans for n in p.num_context_tokens), np.int64, rank.size)
        dec = np.fromiter((d for p in plans for d in p.is_decode), bool, rank.size)
        smp = np.fromiter((s for p in plans for s in p.samples), bool, rank.size)
        return PassBatch(len(plans), rank, new, ctx, dec, smp, self.kv_capacity_tokens)
