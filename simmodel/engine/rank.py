"""An attention-DP rank: its own scheduler and KV pool, planning one pass per barrier round."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import simpy

from simmodel.engine.recorder import Event, EventKind, PassEnd, PassRecord, Recorder
from simmodel.engine.request import Request, RequestStatus
from simmodel.engine.scheduler.base import Scheduler, SchedulerOutput

if TYPE_CHECKING:
    from simmodel.engine.worker import Worker
    from simmodel.offload.protocol import Offload


class Rank:
    """One attention-DP rank of a worker.

    Its process plans a batch with the rank's scheduler (bookkeeping only, no time passes), hands the
    plan to the worker's pass barrier, and waits there until every rank of the worker has finished
    the pass. The barrier applies the pass outcome (``finish_pass``) before it releases the ranks.
    """

    def __init__(self, env: simpy.Environment, worker: Worker, rank_id: int, scheduler: Scheduler,
                 recorder: Recorder) -> None:
        self.env, self.worker, self.rank_id = env, worker, rank_id
        self.scheduler, self.recorder = scheduler, recorder
        self.role = worker.role
        self.num_passes = 0
        self._pending_releases: list = []
        self.last_delivery = 0
        """When this rank's previous pass delivered its tokens (inter-token gaps of consecutive tokens)."""
        self.watcher = None
        """A router's bookkeeping of this rank (``routing.loads.PoolLoads``), told of every plan recorded here
        (``on_plan``) and every pass end (``on_pass_end``: its first tokens and finishes), at the instant the
        pass-by-pass loop records them; None: no router watches."""
        self.offload: Offload | None = None
        """The host KV tier behind this rank's pool (``simmodel.offload``): told of every plan (``planned``), pass
        end (``pass_ended``) and finish here; None: none."""

    def attach_offload(self, offload: Offload) -> None:
        """Put a host KV tier behind this rank: its scheduler loads from it, its passes store to it (its worker's
        runs then plan around it: ``Worker.offloads``)."""
        self.offload = self.scheduler.offload = offload
        self.worker.offloads = True
        offload.on_loaded = self._host_loaded
        offload.on_wake = self.worker.notify
        offload.recorder = self.recorder
        offload.where = (self.worker.worker_id, self.rank_id, self.role)

    def settle_host_copies(self) -> None:
        """The rank is idle: its host tier's copies that have landed are acknowledged now (an idle engine keeps
        polling them), as a plan would."""
        if self.offload is not None:
            self.offload.settle()

    def _host_loaded(self, request: Request, num_computed_tokens: int) -> None:
        """A request's blocks landed from the host tier: it joins this rank's next pass."""
        self.scheduler.load_done(request, num_computed_tokens)
        self.worker.notify()

    @property
    def pool(self):
        return self.scheduler.pool

    @property
    def running(self) -> list[Request]:
        return self.scheduler.running

    @property
    def waiting(self):
        return self.scheduler.waiting

    def add_request(self, request: Request, at: int | None = None) -> None:
        """Queue a new request here, placed now (or at ``at``: a worker making its own arrivals ahead)."""
        at = self.env.now if at is None else at
        self._placed(request, at)
        request.queued_at = at
        self.scheduler.add_request(request)

    def add_prealloc(self, request: Request) -> None:
        """SGLang destination-first handoff: reserve this rank's KV for a prompt before its prefill starts."""
        self._placed(request, self.env.now)
        self.scheduler.add_prealloc(request)

    def _placed(self, request: Request, at: int) -> None:
        request.worker, request.dp_rank = self.worker.worker_id, self.rank_id
        self.recorder.event(at, EventKind.PLACEMENT, self.worker.worker_id, self.rank_id,
                            request.request_id, request.num_prompt_tokens, self.role)

    # -- P/D handoffs ----------------------------------------------------------------------------

    def add_remote(self, request: Request) -> None:
        """A request prefilled elsewhere: it waits here until ``schedule()`` reserves its KV blocks."""
        request.worker, request.dp_rank = self.worker.worker_id, self.rank_id
        self.scheduler.add_remote(request)

    def add_handoff(self, request: Request) -> None:
        """A request whose KV has arrived joins this rank's next pass, ahead of other waiting work."""
        self.scheduler.add_handoff(request)

    def finish_handoff(self, request: Request) -> None:
        """SGLang destination-first: a one-token request is done when its KV and token arrive here."""
        self.scheduler.drop_handoff(request)
        now, w, r, rec = self.env.now, self.worker.worker_id, self.rank_id, self.recorder
        request.num_output_tokens = 1  # the prefill's token, its only one
        request.first_token_at = request.last_token_at = request.finished_at = now
        request.status = RequestStatus.FINISHED
        rec.event(now, EventKind.FIRST_TOKEN, w, r, request.request_id, 1, self.role)
        rec.event(now, EventKind.FINISH, w, r, request.request_id, request.num_output_tokens, self.role)
        if self.watcher is not None:
            self.watcher.on_pass_end(self, (request,), ((request, 1),))
        if request.on_finish is not None:
            request.on_finish(request)
        self.worker.notify()

    def release_when_idle(self, leg: Request, on_release) -> None:
        """Free a prefill leg's KV once its transfer is over: now if the worker sleeps, else at its pass end
        (vLLM's prefill side learns of finished sends when it processes a pass's outputs)."""
        if self.worker.is_idle:
            self._release(leg, on_release)
            self.worker.notify()
        else:
            self._pending_releases.append((leg, on_release))

    def apply_pending_releases(self) -> None:
        """At this rank's pass end: free the KV of the prefill legs whose transfer ended during the pass."""
        if self._pending_releases:
            releases, self._pending_releases = self._pending_releases, []
            for leg, on_release in releases:
                self._release(leg, on_release)

    def _release(self, leg: Request, on_release) -> None:
        self.scheduler.release(leg)
        on_release(leg)

    def has_requests(self) -> bool:
        return self.scheduler.has_requests()

    @property
    def expects_work(self) -> bool:
        """Whether something outside the passes will wake this rank to plan (a request waits for a block landing
        on its host tier)."""
        return self.offload is not None and self.offload.waking

    @property
    def has_pending_releases(self) -> bool:
        """Whether a prefill leg's KV waits to be freed at this rank's pass end (``release_when_idle``)."""
        return bool(self._pending_releases)

    def run(self) -> Generator[simpy.Event, Any, None]:
        while True:
            yield self.worker.submit(self.rank_id, self.plan())

    def plan(self, at: int | None = None,
             schedule: Callable[..., SchedulerOutput] | None = None) -> SchedulerOutput:
        """Plan this rank's next pass now (or as at ``at``, for a pass a worker plans at the end of a run of
        passes it applied ahead; no time passes) and record its admissions and preemptions. ``schedule``: how
        the scheduler plans it (default its ``schedule``; a run whose plan began it passes the rest)."""
        offload = self.offload
        if offload is not None:
            offload.plan_at = at
        plan = (schedule or self.scheduler.schedule)(self.worker.plan_cutoff, self.worker.throttle_prefills)
        plan.kv_blocks_used = self.pool.num_used_blocks
        if offload is not None:  # (what it stores and loads is copied as its pass ends, or now: no pass)
            offload.plan_at = None
            offload.planned(plan, self.env.now if at is None else at)
        if not plan.is_empty or plan.preempted:
            self.record_plan(plan, self.env.now if at is None else at)
        return plan

    def record_plan(self, plan: SchedulerOutput, now: int) -> None:
        """Record a plan made at ``now``: its preemptions, admissions (stamping each request) and resumptions."""
        w, r, rec, role = self.worker.worker_id, self.rank_id, self.recorder, self.role
        for request in plan.preempted:
            rec.event(now, EventKind.PREEMPTION, w, r, request.request_id, request.num_tokens, role)
        for request in plan.admitted:
            if request.kv_transferred:
                request.decode_admitted_at = now
            else:
                request.first_admitted_at = now
            rec.event(now, EventKind.ADMISSION, w, r, request.request_id, _new_tokens(plan, request), role)
        for request in plan.resumed:
            rec.event(now, EventKind.RESUME, w, r, request.request_id, _new_tokens(plan, request), role)
        if self.watcher is not None:
            self.watcher.on_plan(self, plan)

    def begin_pass(self, plan: SchedulerOutput, start_ns: int, pass_index: int) -> None:
        """Record the start of this rank's pass number ``pass_index`` (its ``finish_pass`` records the same)."""
        self.recorder.event(start_ns, EventKind.PASS_BEGIN, self.worker.worker_id, self.rank_id, -1,
                            plan.total_num_scheduled_tokens, self.role, pass_index)

    def finish_pass(self, plan: SchedulerOutput, start_ns: int, end_ns: int, busy_ns: int,
                    provenance: str = "", delivered_ns: int | None = None, work_ns: int = 0) -> None:
        """Apply the pass outcome: sample tokens, retire finished requests, record the pass. Its tokens reach
        the clients at ``delivered_ns`` (default: the pass end); ``work_ns``: its work at datasheet peaks
        (``PassEnergy.work_ns``)."""
        pass_end = end_ns
        end_ns = end_ns if delivered_ns is None else delivered_ns
        pass_index = self.num_passes
        self.num_passes += 1
        if plan.host_stores or plan.host_loads or plan.host_loaded:
            self.offload.pass_ended(plan, pass_end, pass_index)
        sampled, finished = self.scheduler.update_from_output(plan)
        staged = self.recorder.staged  # staged loads count intervals per stage
        intervals: list[tuple[int, int, int]] = []
        first_tokens = []
        consecutive: dict[int, int] = {}
        for request in sampled:
            if request.bootstrap:
                continue  # the prefill leg's token never reaches the client
            n = request.num_output_tokens
            stage = request.stage if staged else 0
            if request.first_token_at is None:
                request.first_token_at = end_ns
                first_tokens.append(request)
            elif request.last_token_pass == pass_index - 1:
                consecutive[stage] = consecutive.get(stage, 0) + 1
            else:
                intervals.append((end_ns - request.last_token_at, 1, stage))
            if request.num_emitted > 1:  # speculative decoding: the extra tokens arrive together
                intervals.append((0, request.num_emitted - 1, stage))
            if n >= 2 and request.second_token_at is None:
                request.second_token_at = end_ns
            request.last_token_at = end_ns
            request.last_token_pass = pass_index
        gap = end_ns - self.last_delivery
        intervals.extend((gap, count, stage) for stage, count in sorted(consecutive.items()))
        self.last_delivery = end_ns
        num_decode = sum(plan.is_decode)
        row = PassRecord(self.role, self.worker.worker_id, self.rank_id, pass_index, start_ns, pass_end,
                         plan.total_num_scheduled_tokens,
                         sum(n for n, d in zip(plan.num_new_tokens, plan.is_decode) if not d),
                         len(plan.requests) - num_decode, num_decode, len(sampled), plan.kv_blocks_used,
                         len(plan.preempted), busy_ns, work_ns, provenance)
        self.record_pass_end(PassEnd(row, end_ns, intervals, first_tokens,
                                     [(request, request.num_output_tokens) for request in finished]))

    def record_pass_end(self, end: PassEnd, before_call_back=None) -> bool:
        """Record the end of one of this rank's passes, in the order vLLM's engine makes it: the inter-token
        intervals, the first tokens, then each finish (a finish that acts on the simulation, a closed-loop
        client's next request or a prefill leg's handoff, calls back right after it is recorded, once
        ``before_call_back(j)`` has readied the j-th finished request), the KV released meanwhile, the pass row
        and its end. Returns whether a finish called back."""
        w, r, rec, role = self.worker.worker_id, self.rank_id, self.recorder, self.role
        row, at, intervals, first_tokens, finished = end
        if self.offload is not None:  # (its finished requests' blocks become the tier's most recent)
            for request, _ in finished:
                self.offload.finished(request, row.end_ns)
            self.offload.flush(at, row.pass_index)  # (the backups the outputs' insertions made are copied from now)
        for value, count, stage in intervals:
            rec.intervals(value, count, stage)
        if self.watcher is not None:  # (before any finish calls back: a next request routed then sees it)
            self.watcher.on_pass_end(self, first_tokens, finished)
        keep = rec.keep_events or rec.sink is not None
        new_event = tuple.__new__
        events = [new_event(Event, (at, EventKind.FIRST_TOKEN, w, r, q.request_id, 1, role, -1))
                  for q in first_tokens] if keep and first_tokens else []
        called_back = False
        for j, (request, outputs) in enumerate(finished):
            request.finished_at = at
            kind = EventKind.PREFILL_DONE if request.bootstrap else EventKind.FINISH
            if keep:
                events.append(new_event(Event, (at, kind, w, r, request.request_id, outputs, role, -1)))
            elif kind is EventKind.FINISH:
                rec.num_done += 1
            if request.on_finish is not None:
                if events:
                    rec.add_events(events)
                    events = []
                if before_call_back is not None:
                    before_call_back(j)
                request.on_finish(request)
                called_back = True
        if self._pending_releases:  # (their events come before the pass end's)
            if events:
                rec.add_events(events)
                events = []
            self.apply_pending_releases()
        rec.passes.append(row)
        if keep:
            events.append(new_event(Event, (row.end_ns, EventKind.PASS_END, w, r, -1, row.num_scheduled_tokens, role,
                                            row.pass_index)))
            rec.add_events(events)
        return called_back


def _new_tokens(plan: SchedulerOutput, request) -> int:
    """The tokens the plan schedules for ``request``, searched from the end (admissions come last)."""
    requests = plan.requests
    for i in range(len(requests) - 1, -1, -1):
        if requests[i] is request:
            return plan.num_new_tokens[i]
    raise ValueError(f"request {request.request_id} is not in the plan")
