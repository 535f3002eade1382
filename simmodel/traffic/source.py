"""The traffic process: creates requests open loop (timed arrivals) or closed loop (N clients)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from simmodel.config.schema import Scenario, SessionsSource, SharedPrefixSource, SyntheticSource
from simmodel.engine.clock import NS_PER_S, to_ns
from simmodel.engine.kv_cache import trace_block_content
from simmodel.engine.recorder import EventKind, Recorder
from simmodel.engine.request import Request, RequestStatus
from simmodel.traffic.agents import AgentSessions
from simmodel.traffic.arrivals import gaps, rescaled_arrivals, stage_arrivals
from simmodel.traffic.lengths import sample_lengths
from simmodel.traffic.sessions import Sessions
from simmodel.traffic.shared_prefix import SharedPrefixPool
from simmodel.traffic.traces import TraceData

CHUNK = 1024  # draws are made in fixed-size chunks so a run's randomness never depends on its length


class RequestStream:
    """Request ``i``'s lengths, trace hints and (open loop) arrival time, generated on demand.

    Synthetic lengths come from two seeded streams (input, output); Poisson gaps from a third, or
    from ``traffic.load.seed`` when given. A trace supplies lengths in file order and, with
    ``trace_timestamps``, its arrivals divided by ``speedup``.
    """

    def __init__(self, scenario: Scenario, trace: TraceData | None, agents: list | None = None) -> None:
        """``agents``: an agentic trace's sessions (``traffic.agent_traces``), in their order of start."""
        traffic = scenario.traffic
        self.source, self.load, self.trace = traffic.source, traffic.load, trace
        arrivals_seq, input_seq, output_seq = np.random.SeedSequence(scenario.engine.seed).spawn(3)
        if traffic.load.seed is not None:
            arrivals_seq = np.random.SeedSequence(traffic.load.seed)
        self._rngs = [np.random.default_rng(s) for s in (arrivals_seq, input_seq, output_seq)]
        self.arrival_rng = self._rngs[0]
        limits = [n for n in (traffic.stop.requests, None if trace is None else len(trace)) if n is not None]
        self.limit: int | None = min(limits) if limits else None
        self.limits = None
        """The run's ``RunLimits`` (requests created), if any."""
        self.extra_prompt_tokens = 0
        """Tokens every prompt carries besides its text (a vision-language model's image tokens)."""
        self._arrival = np.zeros(0)
        self._isl = np.zeros(0, dtype=np.int64)
        self._osl = np.zeros(0, dtype=np.int64)
        if trace is not None:
            self._isl, self._osl = trace.input_tokens, trace.output_tokens
            if traffic.load.type == "trace_timestamps":
                self._arrival = trace.arrival_s / traffic.load.speedup
        self.pool = None
        if isinstance(self.source, SharedPrefixSource):
            self.pool = SharedPrefixPool(self.source, self._rngs[1])
        self.sessions = None
        if isinstance(self.source, SessionsSource):
            self.sessions = Sessions(self.source, self._rngs[1], self._rngs[2])
        self.agents = None
        if agents is not None:
            self.agents = AgentSessions(agents, self.source.tool_latency_ms, self._rngs[1])
            if traffic.load.type == "trace_timestamps":  # a session starts at its first call's time
                starts = np.array([a.start_s for a in agents])
                self._arrival = (starts - starts.min()) / traffic.load.speedup

    def request(self, i: int) -> tuple[int, int, int | None, tuple[int, ...] | None]:
        """Prompt tokens, output tokens, dp_rank hint and hash ids of request ``i``."""
        while i >= len(self._isl):
            if self.pool is not None:
                prompts = self.pool.prompt_of(np.arange(len(self._isl), len(self._isl) + CHUNK))
                self._isl = np.concatenate([self._isl, self.pool.prompt_tokens[prompts]])
            else:
                assert isinstance(self.source, SyntheticSource)
                self._isl = np.concatenate([self._isl, sample_lengths(self.source.input_tokens, self._rngs[1], CHUNK)])
            self._osl = np.concatenate([self._osl, sample_lengths(self.source.output_tokens, self._rngs[2], CHUNK)])
        isl = int(self._isl[i]) + self.extra_prompt_tokens
        if self.trace is None:
            return isl, int(self._osl[i]), None, None
        hint = int(self.trace.dp_rank[i])
        return isl, int(self._osl[i]), (hint if hint >= 0 else None), self.trace.hash_ids[i]

    def block_content(self, i: int, num_prompt_tokens: int, block_size: int):
        """What each KV block of request ``i`` holds, for prefix caching: trace hash ids, a synthetic
        shared prefix, or content unique to the request."""
        unique = (-1, i)  # integers only: hashes of str are salted per process
        if self.trace is not None and self.trace.hash_ids[i] is not None:
            return trace_block_content(self.trace.hash_ids[i], self.source.block_size, num_prompt_tokens,
                                       block_size, unique)
        if self.pool is not None:
            return self.pool.block_content(i, num_prompt_tokens, block_size)
        if self.sessions is not None:
            return self.sessions.block_content(i, block_size)
        if self.agents is not None:
            return self.agents.block_content(i, block_size)
        shared = getattr(self.source, "shared_prefix", None)
        if shared is not None:
            group, limit = i % shared.groups, min(shared.tokens, num_prompt_tokens)

            def content(j: int) -> object:
                return (-2, group, j) if (j + 1) * block_size <= limit else (unique, j)
            return content
        return lambda j: (unique, j)

    def prompt_segments(self, i: int, num_prompt_tokens: int, trace_block_size: int | None = None) -> list:
        """What request ``i``'s prompt tokens are, as radix-cache segments ``(content key, tokens)``: one per
        trace hash id (``trace_block_size`` tokens each, the last truncated), a synthetic shared prefix
        then the request's own tokens, or the request's own tokens only."""
        unique = (-1, i)
        if self.trace is not None and self.trace.hash_ids[i] is not None:
            size = trace_block_size or self.source.block_size
            segs, left = [], num_prompt_tokens
            for h in self.trace.hash_ids[i]:
                if left <= 0:
                    break
                n = min(size, left)
                segs.append(((-3, h), n))
                left -= n
            if left > 0:
                segs.append((unique, left))
            return segs
        if self.pool is not None:
            return self.pool.segments(i, num_prompt_tokens)
        if self.sessions is not None:
            return self.sessions.segments(i)
        if self.agents is not None:
            return self.agents.segments(i)
        shared = getattr(self.source, "shared_prefix", None)
        if shared is not None:
            limit = min(shared.tokens, num_prompt_tokens)
            segs = [((-2, i % shared.groups), limit)]
            if num_prompt_tokens > limit:
                segs.append((unique, num_prompt_tokens - limit))
            return segs
        return [(unique, num_prompt_tokens)]

    def prefill_hint(self, i: int) -> int | None:
        """The prefill rank a trace row names (disaggregated serving), if any."""
        if self.trace is None or self.trace.prefill_dp_rank[i] < 0:
            return None
        return int(self.trace.prefill_dp_rank[i])

    def arrival_before(self, i: int, before_s: float) -> float | None:
        """Arrival time of request ``i`` in seconds if it comes before ``before_s``, else None, drawing the
        arrivals no further than that (a request far beyond the run is never drawn for)."""
        if not len(self._arrival):
            self.arrival(0)  # (rescaled loads draw all their arrivals at once)
        drawn = not (self.load.rescale_to_rate or (self.trace is not None and self.load.type == "trace_timestamps"))
        while drawn and i >= len(self._arrival) and self._arrival[-1] < before_s:
            self.arrival(len(self._arrival))
        if i < len(self._arrival):
            at = float(self._arrival[i])
            return at if at < before_s else None
        return None

    def arrival(self, i: int) -> float:
        """Arrival time of request ``i`` in seconds (open-loop loads only)."""
        if self.load.rescale_to_rate and not len(self._arrival):
            self._arrival = rescaled_arrivals(self.load, self._rngs[0], self.limit)
        while i >= len(self._arrival):
            start = self._arrival[-1] if len(self._arrival) else None
            steps = gaps(self.load, self._rngs[0], CHUNK)
            if start is None:
                steps[0] = 0.0
                start = 0.0
            self._arrival = np.concatenate([self._arrival, start + np.cumsum(steps)])
        return float(self._arrival[i])


class TrafficSource:
    """Injects requests into the deployment through ``place`` and keeps every request it made.

    The load's unit is a request, or a whole session with a ``sessions`` source (its turns follow one
    another, see ``simmodel.traffic.sessions``). Open loop: one timeout per arrival. Closed loop
    (``concurrency``): N clients each start their next unit the moment the previous one finishes (or is
    rejected), until the request limit. Staged loads run their stages one after the other.
    """

    def __init__(self, env: simpy.Environment, stream: RequestStream, place: Callable[[Request, int], object],
                 recorder: Recorder, context_length: int, concurrency: int = 0, overhead_ns: int = 0) -> None:
        self.env, self.stream, self.place, self.recorder = env, stream, place, recorder
        self.context_length, self.concurrency = context_length, concurrency
        self.overhead_ns = overhead_ns
        """``engine.request_overhead_ms``: how long after the client sends a request the deployment receives it
        (a request it refuses is refused at once, by the server's front)."""
        self._requests: list[Request] = []
        self._in_order = True
        """Whether ``_requests`` is in request order (workers create their own arrivals ahead, see
        ``WorkerArrivals``, so a later request may be made before an earlier one)."""
        self._created = bytearray()
        """Per request index, ``SENT`` once it is created, ``PLACED`` once it is handed to the deployment or
        refused (an open-loop load whose arrivals workers make ahead)."""
        self._in_transit: dict[int, Request] = {}
        """Routed requests sent and not yet handed over (``engine.request_overhead_ms``)."""
        self._reaching: deque[int] = deque()
        """Open loop, routed at arrival: when each request sent and not yet handed over reaches the deployment
        (in sending order; the overhead is one constant)."""
        self.routes = None
        """``placement.ArrivalRoutes`` when each arrival's worker is known ahead (see ``routed``), else None."""
        self.sessions = stream.sessions
        self.agents = stream.agents
        self.units = 0
        """Units (requests, or sessions) the load has started."""
        self.staged = stream.load.type == "stages"
        self.stage = 0
        """The stage of a staged load now sending requests (or the last one that did)."""
        self.stage_open = False
        """Whether that stage still sends."""
        self.stage_closed_loop = False
        """Whether it is a concurrency stage (its clients send again when a request finishes)."""
        self.stage_sent = 0
        self.stage_starts_ns: list[int] = []
        self.stage_ends_ns: list[int] = []
        """When each stage began, and stopped sending."""
        self.outstanding: list[int] = []
        """Units of each stage in flight (kept under ``drain`` only)."""
        self._stage_done: simpy.Event | None = None
        self._draining: tuple[int, simpy.Event] | None = None
        self.in_flight = 0
        """Requests handed to the deployment and not finished (counted under ``max_concurrency`` only)."""
        self.backlog = 0
        """Arrivals waiting at the client for a slot under ``max_concurrency``."""

    @property
    def requests(self) -> list[Request]:
        """Every request made so far, in request order."""
        if not self._in_order:
            self._requests.sort(key=_request_id)
            self._in_order = True
        return self._requests

    @property
    def open_loop(self) -> bool:
        """Whether each arrival only creates and places its request at its own time, whatever the
        deployment does: timed arrivals of requests, with no client cap, no sessions and no stages."""
        load = self.stream.load
        return (load.type != "stages" and not self.concurrency and self.sessions is None and self.agents is None
                and load.max_concurrency is None)

    def routed(self, routes) -> None:
        """Place every arrival on the worker ``routes`` (``placement.ArrivalRoutes``) names for it, so that each
        worker may make its own arrivals ahead of the clock (``WorkerArrivals``). Open loop only."""
        assert self.open_loop
        self.routes = routes

    def rejected(self, i: int) -> bool:
        """Whether request ``i`` is refused before placement (``refuses``)."""
        return self.refuses(self.stream.request(i)[0])

    def refuses(self, num_prompt_tokens: int) -> bool:
        """vLLM's server refuses a prompt at or over ``max_model_len`` before it reaches the engine (SGLang's
        at ``max_req_len``): the serving context length."""
        return num_prompt_tokens >= self.context_length

    def refusal_ns(self, before_ns: float) -> int | None:
        """When the first request over ``limits.max_requests`` arrives (open loop), the run failing there, if
        before ``before_ns``; None if it comes later or the load ends before."""
        limits = self.stream.limits
        if limits is None or not self.has_index(i := limits.first_request_over()):
            return None
        at = self.stream.arrival_before(i, before_ns / NS_PER_S)
        return None if at is None else to_ns(at)

    def made(self, i: int) -> bool:
        """Whether request ``i`` has been handed to the deployment, or refused (routed open-loop loads)."""
        return i < len(self._created) and self._created[i] == PLACED

    def _sent(self, i: int) -> bool:
        """Whether request ``i`` has been created (sent by its client; routed open-loop loads)."""
        return i < len(self._created) and self._created[i] != 0

    def _has_next(self, waiting: int = 0) -> bool:
        """Whether another request may be created (``waiting`` more already promised)."""
        limit = self.stream.limit
        return limit is None or len(self._requests) + waiting < limit

    def has_index(self, i: int) -> bool:
        """Whether the load has a request number ``i`` (within ``traffic.stop.requests`` and the trace)."""
        limit = self.stream.limit
        return limit is None or i < limit

    def _closed(self, stage: int) -> bool:
        """Whether a finished unit of ``stage`` is followed by another: a closed-loop load, or a
        concurrency stage still sending."""
        return bool(self.concurrency) or (stage == self.stage and self.stage_open and self.stage_closed_loop)

    def _close_stage(self) -> None:
        self.stage_open = False
        if self._stage_done is not None and not self._stage_done.triggered:
            self._stage_done.succeed()

    def _unit_started(self, stage: int) -> None:
        if self.staged and self.stream.load.drain:
            self.outstanding[stage] += 1

    def _unit_done(self, stage: int) -> None:
        """A unit (a request, or a whole session) of ``stage`` ended: a stage waiting to drain may go on."""
        if not (self.staged and self.stream.load.drain):
            return
        self.outstanding[stage] -= 1
        if self._draining is not None and self._draining[0] == stage and not self.outstanding[stage]:
            self._draining[1].succeed()
            self._draining = None

    def run(self) -> Generator[simpy.Event, Any, None]:
        if self.stream.load.type == "stages":
            yield from self._run_stages()
            return
        if self.concurrency:
            for _ in range(self.concurrency):
                if not self._has_next():
                    break
                self._start_unit()
            return
        if self.routes is not None:
            yield from self._run_routed()
            return
        cap = self.stream.load.max_concurrency
        while self._has_next(self.backlog) and self._has_unit(self.units + self.backlog):
            i = self.units + self.backlog
            at = to_ns(self.stream.arrival(i))
            if at > self.env.now:
                yield self.env.timeout(at - self.env.now)
            if cap is not None and self.in_flight >= cap:
                self.backlog += 1  # waits at the client for a free slot
            else:
                self._start_unit()

    def _run_routed(self) -> Generator[simpy.Event, Any, None]:
        """Open loop with routes known ahead: each request at its arrival time, unless its worker made it
        already (``WorkerArrivals.arrive_early``)."""
        i = 0
        while self.has_index(i):
            at = to_ns(self.stream.arrival(i))
            if at > self.env.now:
                yield self.env.timeout(at - self.env.now)
            if not self._sent(i):
                if not self.overhead_ns:
                    self.arrive(i, at)
                else:  # sent now, handed over the overhead later, unless its worker took it ahead by then
                    self._send(i, at)
                    self.env.timeout(self.overhead_ns).callbacks.append(lambda _event, i=i: self._hand_over(i))
            i += 1

    def arrive(self, i: int, at: int) -> None:
        """Request ``i``, sent at ``at``, reaches the deployment as at ``at`` + ``overhead_ns`` (routed open-loop
        loads): created as at ``at`` if its client has not sent it yet, then placed. Creating and placing a
        request schedules nothing, so every record and field is as at those times."""
        if not self._sent(i):
            self._send(i, at)
        self._hand_over(i, at + self.overhead_ns)

    def _send(self, i: int, at: int) -> None:
        """Create request ``i`` as sent at ``at`` (routed open-loop loads); a prompt the server refuses is
        refused there."""
        if self.stream.limits is not None:
            self.stream.limits.check_requests(i + 1)
        if i >= len(self._created):
            self._created.extend(bytes(i + 1 - len(self._created) + 1024))
        if self._requests and self._requests[-1].request_id > i:
            self._in_order = False
        self.units += 1
        isl, osl, hint, hashes = self.stream.request(i)
        request = self._create(i, isl, osl, self.stage, hint, hashes, at)
        if self.refuses(request.num_prompt_tokens):
            self._refuse(request, at)
            self._created[i] = PLACED
        else:
            self._created[i] = SENT
            self._in_transit[i] = request

    def _hand_over(self, i: int, at: int | None = None) -> None:
        """Place sent request ``i`` now (or as at ``at``), unless it was placed already."""
        request = self._in_transit.pop(i, None)
        if request is None:
            return
        self._created[i] = PLACED
        self.place(request, self.env.now if at is None else at)
        self.in_flight += 1

    def _run_stages(self) -> Generator[simpy.Event, Any, None]:
        """A staged load: the stages one after the other. A stage sends for its duration and/or until it
        sent its ``requests``, whichever comes first: a rate stage at ``stage_arrivals``, a concurrency
        stage through N clients that each send again when their request finishes. Units still in flight
        when a stage stops sending run to completion and don't count against the next stage's clients;
        with ``drain`` the next stage waits for them, then ``pause_s``. Each request carries the index of
        the stage that started its unit."""
        load = self.stream.load
        for k, spec in enumerate(load.stages):
            if k and load.pause_s:
                yield self.env.timeout(to_ns(load.pause_s))
            start = self.env.now
            self.stage, self.stage_sent, self.stage_open = k, 0, True
            self.stage_closed_loop = spec.concurrency is not None
            self.stage_starts_ns.append(start)
            self.outstanding.append(0)
            end = None if spec.duration_s is None else start + to_ns(spec.duration_s)
            if spec.concurrency is not None:
                self._stage_done = self.env.event()
                for _ in range(spec.concurrency):
                    if not (self.stage_open and self._has_next()):
                        break
                    self._start_unit()
                if self.stage_open and self._has_next():
                    waits = [self._stage_done] if end is None else [self._stage_done, self.env.timeout(end - start)]
                    yield self.env.any_of(waits)
            else:
                for at_s in stage_arrivals(spec, start / NS_PER_S, load.arrivals, load.burstiness,
                                           self.stream.arrival_rng):
                    at = to_ns(at_s)
                    if at > self.env.now:
                        yield self.env.timeout(at - self.env.now)
                    if not (self.stage_open and self._has_next()):
                        break
                    self._start_unit()
                if self.stage_open and end is not None and end > self.env.now and self._has_next():
                    yield self.env.timeout(end - self.env.now)
            self.stage_open = False
            self.stage_ends_ns.append(self.env.now)
            if not self._has_next():
                return
            if load.drain and self.outstanding[k] > 0:
                drained = self.env.event()
                self._draining = (k, drained)
                yield drained

    def _has_unit(self, i: int) -> bool:
        """Whether the load has a unit number ``i`` to start (an agentic trace's sessions run out)."""
        return self.agents is None or i < self.agents.num_sessions

    def _start_unit(self) -> None:
        """Start one unit of load now: a request, a session's first turn, or an agentic session's roots."""
        if self.agents is not None:
            if self._has_unit(self.units):
                self.units += 1
                self._start_agent_session()
            return
        self.units += 1
        if self.sessions is None:
            self._inject()
        else:
            self._unit_started(self.stage)
            self._send_turn(self.sessions.start(self.stage))

    def _inject(self) -> None:
        """Create request number ``len(self.requests)`` now; loop while closed-loop rejections return at once."""
        while True:
            i = len(self.requests)
            if self.stream.limits is not None:
                self.stream.limits.check_requests(i + 1)
            isl, osl, hint, hashes = self.stream.request(i)
            request = self._create(i, isl, osl, self.stage, hint, hashes)
            if self.concurrency or (self.staged and (self.stage_closed_loop or self.stream.load.drain)):
                request.on_finish = self._on_finish
            elif self.stream.load.max_concurrency is not None:
                request.on_finish = self._on_slot_free
            if self._admit(request):
                self.in_flight += 1
                self._unit_started(request.stage)
                return
            if not (self._closed(request.stage) and self._has_next()):
                return

    def _create(self, i: int, isl: int, osl: int, stage: int, hint: int | None = None, hashes=None,
                at: int | None = None) -> Request:
        """Request ``i`` arriving now (or at ``at``)."""
        at = self.env.now if at is None else at
        request = Request(i, at, isl, osl, hint, hashes)
        request.prefill_dp_rank_hint = self.stream.prefill_hint(i)
        request.stage = stage
        self._requests.append(request)
        if self.staged and stage == self.stage and self.stage_open:
            self.stage_sent += 1
            cap = self.stream.load.stages[stage].requests
            if cap is not None and self.stage_sent >= cap:
                self._close_stage()
        self.recorder.event(at, EventKind.ARRIVAL, -1, -1, i, isl, "client")
        return request

    def _admit(self, request: Request) -> bool:
        """Hand the request sent now to the deployment ``overhead_ns`` later, or refuse it at once; whether it
        is handed over."""
        if self.refuses(request.num_prompt_tokens):
            self._refuse(request, self.env.now)
            return False
        # the rank it lands on records the placement (maybe later: an SGLang frontend)
        if not self.overhead_ns:
            self.place(request, self.env.now)
        else:
            self._reaching.append(self.env.now + self.overhead_ns)
            self.env.timeout(self.overhead_ns).callbacks.append(lambda _event: self._reach(request))
        return True

    def _reach(self, request: Request) -> None:
        self._reaching.popleft()
        self.place(request)

    def next_placement_ns(self) -> int | None:
        """Open loop, routed at arrival: when the next request reaches the deployment (one sent already, or the
        next to send), or None if no request is left. A request the server will refuse counts too."""
        at = self._reaching[0] if self._reaching else None
        if self.stream.load.type == "stages" or not self._has_next():
            return at
        nxt = to_ns(self.stream.arrival(len(self._requests))) + self.overhead_ns
        return nxt if at is None else min(at, nxt)

    def _refuse(self, request: Request, at: int) -> None:
        """The server refuses the request as it is sent, at ``at``."""
        request.status = RequestStatus.REJECTED
        request.finished_at = at
        self.recorder.event(at, EventKind.REJECTION, -1, -1, request.request_id,
                            request.num_prompt_tokens, "client")

    def _on_finish(self, request: Request) -> None:
        self._unit_done(request.stage)
        if self._closed(request.stage) and self._has_next():
            self._inject()

    def _on_slot_free(self, request: Request) -> None:
        """Under ``max_concurrency``: a finish frees a slot for the longest-waiting arrival."""
        self.in_flight -= 1
        while self.backlog and self.in_flight < self.stream.load.max_concurrency:  # a refusal frees it again
            self.backlog -= 1
            self._start_unit()

    # -- sessions ---------------------------------------------------------------------------------
    def _send_turn(self, session) -> None:
        """Send the session's next turn now; a refused turn ends the session."""
        while True:
            if not self._has_next():
                self._unit_done(session.stage)
                return
            i = len(self.requests)
            if self.stream.limits is not None:
                self.stream.limits.check_requests(i + 1)
            isl, osl = self.sessions.next_prompt(session)
            request = self._create(i, isl, osl, session.stage)  # a turn belongs to its session's stage
            self.sessions.sent(session, i)
            request.on_finish = self._on_turn_finish
            if self._admit(request):
                return
            self._unit_done(session.stage)  # the session ends with its refused turn
            if not (self._closed(session.stage) and self._has_next()):
                return
            session = self.sessions.start(self.stage)  # a closed loop starts another at once
            self._unit_started(self.stage)
            self.units += 1

    def _on_turn_finish(self, request: Request) -> None:
        session, _ = self.sessions.of_request[request.request_id]
        self.sessions.answered(session, request.request_id, request.num_output_tokens)
        if session.turn < session.turns:
            delay = to_ns(self.sessions.source.inter_turn_delay_ms / 1000.0)
            if delay:
                self.env.timeout(delay).callbacks.append(lambda _event: self._send_turn(session))
            else:
                self._send_turn(session)
        else:
            self._unit_done(session.stage)
            if self._closed(session.stage) and self._has_next():
                self._start_unit()


    # -- agentic sessions ---------------------------------------------------------------------------
    def _start_agent_session(self) -> None:
        """Start the trace's next session now: each root call at its own time from now."""
        self._unit_started(self.stage)
        state = self.agents.start(self.stage, self.env.now)
        for k, delay_s in self.agents.roots(state):
            self._after(to_ns(delay_s), state, k)

    def _after(self, delay: int, state, k: int) -> None:
        if delay:
            self.env.timeout(delay).callbacks.append(lambda _event: self._send_call(state, k))
        else:
            self._send_call(state, k)

    def _send_call(self, state, k: int) -> None:
        """Send call ``k`` of a session now (nothing once the session ended: a refused call, the run's request cap)."""
        if state.finished_at is not None:
            return
        if not self._has_next():
            self.agents.abandon(state, self.env.now)
            self._unit_done(state.stage)
            return
        i = len(self.requests)
        if self.stream.limits is not None:
            self.stream.limits.check_requests(i + 1)
        isl = self.agents.prompt(state, k, i)
        request = self._create(i, isl, state.session.calls[k].output_tokens, state.stage)
        request.on_finish = self._on_call_finish
        self.agents.sent(state, self.env.now)
        if not self._admit(request):  # a refused call ends its session
            self.agents.abandon(state, self.env.now)
            self._agent_session_done(state)

    def _on_call_finish(self, request: Request) -> None:
        state, ready = self.agents.answered(request.request_id, request.num_output_tokens, self.env.now)
        if state.abandoned:
            return
        for c in ready:  # after its wait, and no earlier than its own time in the session
            call = state.session.calls[c]
            floor = state.started_at + to_ns(call.start_s) - self.env.now
            self._after(max(to_ns(self.agents.wait_s(call)), floor), state, c)
        if state.finished_at is not None:
            self._agent_session_done(state)

    def _agent_session_done(self, state) -> None:
        self._unit_done(state.stage)
        if self._closed(state.stage) and self._has_next():
            self._start_unit()


class RoutedAtArrival:
    """The arrivals of an open-loop load whose router reads the workers' state (``router.type`` least_loaded,
    kv_aware, scored) or picks among the workers a replica planner keeps serving: each request is routed at the
    instant it reaches the deployment, as the pool is then, so no worker's requests are known ahead; but
    nothing else reads or changes a worker before that instant (a planner's samples bound runs on their own,
    ``Worker.reads_at``). A worker's runs of passes are then applied when they start, up to the next such instant
    (``horizon_ns``), and admit no arrival themselves (``next_arrival_ns`` is None); the router, told of
    their plans and pass ends as they are recorded, is asked only once they are over."""

    def __init__(self, source: TrafficSource) -> None:
        self.source = source

    def next_arrival_ns(self) -> None:
        """None: no request is known to come to this worker before the router sends it."""
        return None

    def quiet_until(self, end_ns: int) -> bool:
        return True

    def horizon_ns(self, before_ns: float) -> float:
        """The next instant a request reaches the deployment (and is routed), or the one the request limit is
        broken at, if before ``before_ns``."""
        times = [t for t in (self.source.next_placement_ns(), self.source.refusal_ns(before_ns)) if t is not None]
        return min([before_ns, *times])


SENT, PLACED = 1, 2
"""A routed request's states in ``TrafficSource._created`` (0: not sent yet)."""


def _request_id(request: Request) -> int:
    return request.request_id


class WorkerArrivals:
    """The arrivals of a routed open-loop load (``TrafficSource.routed``) that come to one worker: what its
    pass planner may peek at, and make ahead of the clock when its passes run past them.

    An arrival of this load only creates a request and queues it on its worker, and which worker is known
    ahead, so a worker planning its passes through its own arrivals waits for nobody. A request is made as
    at its own arrival time (``TrafficSource.arrive``); the load's process then finds it made.
    """

    def __init__(self, source: TrafficSource, worker_index: int) -> None:
        self.source, self.worker_index = source, worker_index
        self._position = 0
        """This worker's requests before this one (in its own order) are all made."""
        self._last_at: tuple[int, int] = (-1, 0)
        """(request, ``_at``) of the last request asked for."""

    def _next_index(self, position: int | None = None) -> tuple[int, int] | None:
        """(position, request index) of this worker's first request not made yet, from ``position`` on (else
        from the first not made, which is remembered); None if the load has no more."""
        source, routes, k = self.source, self.source.routes, self.worker_index
        p = self._position if position is None else position
        while (i := routes.request_of(k, p)) is not None:
            if not source.made(i):
                break
            p += 1
        if position is None:
            self._position = p
        return None if i is None else (p, i)

    def _at(self, i: int) -> int:
        """When request ``i`` reaches the deployment (its arrival plus ``engine.request_overhead_ms``); the
        worker's next request is asked for again and again as its runs go on, so the last answer is kept."""
        last = self._last_at
        if last[0] == i:
            return last[1]
        at = to_ns(self.source.stream.arrival(i)) + self.source.overhead_ns
        self._last_at = (i, at)
        return at

    def next_arrival_ns(self) -> int | None:
        """When this worker's next request reaches it (None: no more)."""
        found = self._next_index()
        return None if found is None else self._at(found[1])

    def quiet_until(self, end_ns: int) -> bool:
        """Whether none of this worker's requests arriving from now to ``end_ns`` arrives exactly then: a run
        of passes spanning the next arrival may then end at ``end_ns``. (No run reaches the instant a request
        would break ``limits.max_requests``: ``horizon_ns``.)"""
        found = self._next_index()
        while found is not None:
            p, i = found
            at = self._at(i)
            if at >= end_ns:
                return at > end_ns
            found = self._next_index(p + 1)
        return True

    def horizon_ns(self, before_ns: float) -> float:
        """The first instant before ``before_ns`` at which something but this worker's own arrivals may change
        it, or the run fail: the arrival of the first request over ``limits.max_requests`` (whichever worker
        it goes to, if any); else ``before_ns``."""
        at = self.source.refusal_ns(before_ns)  # (sent then: the run fails as its client sends it)
        return before_ns if at is None else at

    def arrive_early(self, before_ns: int) -> None:
        """Make this worker's requests arriving before ``before_ns``, each as at its own arrival time. The
        caller checked ``quiet_until``."""
        while (found := self._next_index()) is not None:
            if self._at(found[1]) >= before_ns:
                return
            self.source.arrive(found[1], to_ns(self.source.stream.arrival(found[1])))
