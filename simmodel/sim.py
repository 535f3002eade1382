"""Build a SimPy model of a deployment from a scenario, step or run it, and collect its results."""

from __future__ import annotations

import copy
import math
import numbers
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simmodel.config.load import load_scenario
from simmodel.config.schema import AgenticSource, Scenario, StorageSpec, TraceSource
from simmodel.engine.backends import BACKENDS, Backend
from simmodel.engine.clock import MAX_NS, NS_PER_S, to_ns
from simmodel.engine.collector import collector_paused
from simmodel.engine.encoder_pool import EncoderPool
from simmodel.engine.environment import Environment
from simmodel.engine.limits import RunLimits
from simmodel.engine.placement import ArrivalRoutes, Router, take_prefill_figures
from simmodel.engine.rank import Rank
from simmodel.engine.request import Request
from simmodel.engine.vision_encoder import image_tokens
from simmodel.engine.worker import Worker
from simmodel.errors import ScenarioError, SimulationError
from simmodel.frontend.stages import Frontend
from simmodel.metrics.energy import energy_summary, pass_joules
from simmodel.metrics.records import EventKind, PassLog, Recorder
from simmodel.metrics.sessions import session_summary
from simmodel.metrics.sla import sla_summary
from simmodel.metrics.summarize import (
    RequestTable,
    companion_summary,
    event_columns,
    events_frame,
    pass_columns,
    passes_frame,
    passes_table,
    request_table,
    role_summary,
    stage_summaries,
    summarize,
    worker_pass_tokens,
)
from simmodel.offload import StoredBlocks, host_blocks, offload_summary
from simmodel.perf.energy import GpuPower, PassEnergy, gpu_power
from simmodel.perf.timings import afd_ffn_work, make_energy, make_timing
from simmodel.routing import make_router, router_predicts
from simmodel.routing.report import routing_summary
from simmodel.scaling import Fleet, ReplicaPlanner
from simmodel.scaling.fleet import replica_columns
from simmodel.scaling.observe import observe
from simmodel.traffic.agent_traces import read_agent_trace
from simmodel.traffic.agents import AgentSession
from simmodel.traffic.lengths import smallest_length
from simmodel.traffic.source import RequestStream, RoutedAtArrival, TrafficSource, WorkerArrivals
from simmodel.traffic.traces import MAX_SPAN_S, TraceData, read_trace
from simmodel.transfer.kv_transfer import KvTransfer

PROGRESS_EVERY = 100
"""Events between two calls of a run's ``progress`` callback. Few: one event may carry a coalesced run of
many passes through many arrivals (20,000 quickstart requests are about 4,000 events, 1.5 ms each), and
the callback decides by wall time whether to draw, so a call costs next to nothing."""
PASS_KINDS = (EventKind.PASS_BEGIN, EventKind.PASS_END)
"""Event-log rows that ``step()`` passes over unless asked to pause at pass boundaries."""
MAX_UNTIL_S = MAX_NS / NS_PER_S
"""``run(until)`` at or beyond this (about 146 years, the most the integer-nanosecond clock holds) runs to
the end."""


if TYPE_CHECKING:
    import pandas as pd


class Results:
    """What a run produced: the summary mapping and the three tables (pandas DataFrames).

    The tables hold the run as it was when the results were taken (rows only ever come after those
    counted here); each is built, and pandas imported, when first read, so a caller that needs only the
    summary pays for neither.
    """

    def __init__(self, summary: dict, requests: RequestTable, passes: PassLog, num_passes: int,
                 events: list, num_events: int, stage_starts: np.ndarray | None = None,
                 by_worker: bool = False, replicas: dict | None = None,
                 pass_bytes: dict[tuple[int, int], dict[int, list[float]]] | None = None,
                 powers: dict[str, GpuPower | None] | None = None) -> None:
        self.summary = summary
        self._powers = powers
        """Per role, its GPU's power (``perf.energy``), for the pass table's ``energy_j``; None: no such column."""
        self._pass_bytes = pass_bytes
        """With host KV tiers: per (worker, rank), the bytes loaded and stored over the host link per pass index
        (``offload.protocol.PassBytes``), for the pass table's ``host_bytes_loaded`` and ``host_bytes_stored``."""
        self._replicas = replicas
        """A replica planner's pools over time (``replicas.csv``): columns, or None without a planner."""
        self._requests, self._passes, self._num_passes = requests, passes, num_passes
        self._events, self._num_events, self._stage_starts = events, num_events, stage_starts
        self._by_worker = by_worker
        """Workers planned ahead, each on its own: passes are ordered by end then worker, and each instant's
        events by worker (``summarize.event_order``), so that the order is that of the pass-by-pass run."""
        self._tables: dict[str, pd.DataFrame] = {}

    @property
    def requests(self) -> pd.DataFrame:
        if "requests" not in self._tables:
            self._tables["requests"] = self._requests.frame()
        return self._tables["requests"]

    @property
    def passes(self) -> pd.DataFrame:
        if "passes" not in self._tables:
            self._tables["passes"] = passes_frame(self._pass_data())
        return self._tables["passes"]

    @property
    def events(self) -> pd.DataFrame:
        if "events" not in self._tables:
            self._tables["events"] = events_frame(self._events[:self._num_events], by_worker=self._by_worker)
        return self._tables["events"]

    @property
    def replicas(self) -> pd.DataFrame | None:
        """Each scaled pool's workers serving, starting and draining from each change on (None: no planner)."""
        if self._replicas is None:
            return None
        import pandas as pd

        return pd.DataFrame(self._replicas)

    def replica_columns(self) -> dict | None:
        return self._replicas

    def request_columns(self) -> dict | None:
        """The requests table as plain columns (``RequestTable.plain_columns``), or None: write the frame."""
        return self._requests.plain_columns()

    def pass_columns(self) -> dict:
        """The passes table as columns, without pandas (``passes_table``)."""
        return passes_table(self._pass_data())

    def event_columns(self) -> dict:
        """The events table as columns, without pandas (``event_columns``)."""
        events = self._events  # the whole log unless rows came after the results were taken: no copy
        return event_columns(events if len(events) == self._num_events else events[:self._num_events],
                             by_worker=self._by_worker)

    def _pass_data(self) -> dict:
        passes = self._passes  # the log, or (unpickled) its columns
        data = dict(passes) if isinstance(passes, dict) else pass_columns(passes, self._num_passes)
        if self._pass_bytes is not None and "host_bytes_loaded" not in data:
            data["host_bytes_loaded"], data["host_bytes_stored"] = _host_bytes(data, self._pass_bytes)
        if self._powers is not None and "energy_j" not in data:
            joules = pass_joules(data, self._powers)
            if joules is not None:
                data["energy_j"] = joules
        if self._by_worker:
            data = _by_end_and_worker(data)
        if self._stage_starts is not None:  # a staged load: each pass's stage, by its start
            data["stage"] = np.maximum(np.searchsorted(self._stage_starts, data["start_ns"], side="right") - 1, 0)
        return data

    def __getstate__(self) -> dict:  # pickled: the rows themselves, not the whole log
        state = dict(self.__dict__)
        if not isinstance(self._passes, dict):
            state["_passes"] = pass_columns(self._passes, self._num_passes)
        state["_events"] = self._events[:self._num_events]
        return state


def _host_bytes(data: dict, pass_bytes: dict[tuple[int, int], dict[int, list[float]]]) -> tuple:
    """Per pass row, the bytes its rank's host tier loaded and stored with that pass (0 for most)."""
    key = ((np.asarray(data["worker"], dtype=np.int64) << 42) | (np.asarray(data["dp_rank"], dtype=np.int64) << 32)
           | np.asarray(data["pass_index"], dtype=np.int64))
    loaded, stored = np.zeros(len(key), dtype=np.int64), np.zeros(len(key), dtype=np.int64)
    entries = [((w << 42) | (r << 32) | i, moved) for (w, r), by_pass in pass_bytes.items()
               for i, moved in by_pass.items()]
    if entries and len(key):
        wanted = np.array([k for k, _ in entries], dtype=np.int64)
        moved = np.array([m for _, m in entries], dtype=np.float64).round().astype(np.int64)
        order = np.argsort(key, kind="stable")
        at = np.minimum(np.searchsorted(key[order], wanted), len(key) - 1)
        found = key[order[at]] == wanted  # (a pass not in the rows taken yet: left out)
        loaded[order[at[found]]], stored[order[at[found]]] = moved[found, 0], moved[found, 1]
    return loaded, stored


def _or_minus_one(value: int | None) -> int:
    """A count, or −1 where there is none (as ``worker`` is −1 for a request never placed)."""
    return -1 if value is None else value


def _by_end_and_worker(data: dict) -> dict:
    """Pass rows ordered by their end, then worker (stably: a worker's ranks keep their order)."""
    order = np.lexsort((np.asarray(data["worker"]), np.asarray(data["end_ns"])))
    return {name: (np.asarray(column)[order] if isinstance(column, np.ndarray) else [column[i] for i in order])
            for name, column in data.items()}


def frontend_summary(frontends: list[Frontend]) -> list[dict]:
    """Per frontend stage, over every worker's frontend: requests served, mean wait and mean service."""
    rows = []
    for index, stage in enumerate(frontends[0].stages):
        served = sum(f.stages[index].num_served for f in frontends)
        wait = sum(f.stages[index].total_wait_ns for f in frontends)
        service = sum(f.stages[index].total_service_ns for f in frontends)
        rows.append({"stage": stage.spec.name, "workers": stage.spec.workers, "requests": served,
                     "mean_wait_ms": wait / served / 1e6 if served else None,
                     "mean_service_ms": service / served / 1e6 if served else None})
    return rows


def load_trace(scenario: Scenario) -> TraceData | None:
    """Read the scenario's trace, if any, and check its rank hints against the deployment."""
    source = scenario.traffic.source
    if not isinstance(source, TraceSource):
        return None
    try:
        trace = read_trace(source.path, source.format,
                           require_monotone=scenario.traffic.load.type == "trace_timestamps")
    except ScenarioError as exc:
        raise ScenarioError(f"traffic.source.path: {exc}") from None
    load = scenario.traffic.load
    if load.type == "trace_timestamps" and trace.arrival_s.max() / load.speedup > MAX_SPAN_S:
        span = float(trace.arrival_s.max())
        raise ScenarioError(f"traffic.load.speedup: the trace's arrivals span {span:g} s, {span / load.speedup:g} s "
                            f"of simulated time at speedup {load.speedup:g}; at most 1e9 s")
    workers = scenario.engine.workers
    checks = [("dp_rank", trace.dp_rank, list(workers.values())[-1])]
    if "prefill" in workers:  # prefill_dp_rank only means something with a prefill pool
        checks.append(("prefill_dp_rank", trace.prefill_dp_rank, workers["prefill"]))
    for column, hints, role in checks:
        ranks = role.parallelism.attention_data
        bad = hints >= ranks
        if bad.any():
            row = int(np.argmax(bad))
            raise ScenarioError(f"traffic.source.path: {source.path}: row {row + 1} names {column} "
                                f"{hints[row]} but {role.name} workers have attention_data {ranks}")
    return trace


def serving_context_length(scenario: Scenario) -> int:
    """The longest prompt plus one that every role accepts. vLLM refuses a prompt at ``max_model_len``;
    SGLang one at ``max_req_len = min(context_length, KV tokens) − 1``."""
    return BACKENDS[scenario.engine.backend].max_prompt_tokens(scenario)


def load_agent_trace(scenario: Scenario) -> list[AgentSession] | None:
    """Read an agentic trace's sessions (``traffic.source.type: agentic``), if the scenario has one."""
    source = scenario.traffic.source
    if not isinstance(source, AgenticSource):
        return None
    try:
        sessions = read_agent_trace(source.path, source.format, source.block_size)
    except ScenarioError as exc:
        raise ScenarioError(f"traffic.source.path: {exc}") from None
    load = scenario.traffic.load
    span = max(s.start_s for s in sessions) - min(s.start_s for s in sessions)
    if load.type == "trace_timestamps" and span / load.speedup > MAX_SPAN_S:
        raise ScenarioError(f"traffic.load.speedup: the sessions' starts span {span:g} s, {span / load.speedup:g} s "
                            f"of simulated time at speedup {load.speedup:g}; at most 1e9 s")
    unset = next(((s, c) for s in sessions for c in s.calls if c.parents and c.wait_s is None), None)
    if source.tool_latency_ms is None and unset is not None:
        raise ScenarioError(f"traffic.source.tool_latency_ms: required, since call {unset[1].name!r} of session "
                            f"{unset[0].name!r} gives no wait_ms")
    if source.tool_latency_ms is not None and unset is None:
        raise ScenarioError("traffic.source.tool_latency_ms: every call of the trace gives its own wait, so it would "
                            "change nothing; remove it")
    return sessions


def check_workload(scenario: Scenario) -> TraceData | list[AgentSession] | None:
    """Validation that needs the workload: the trace file (an agentic trace's sessions), and traffic that could
    never be served."""
    agents = load_agent_trace(scenario)
    if agents is not None:
        return agents
    trace = load_trace(scenario)
    source = scenario.traffic.source
    context = serving_context_length(scenario)
    overhead = scenario.traffic.prompt_overhead_tokens
    if trace is None and smallest_length(source.input_tokens) + overhead >= context:
        if smallest_length(source.input_tokens) < context:  # (the overhead tips it over)
            raise ScenarioError(f"traffic.source.prompt_overhead_tokens: with it every prompt would be at or above "
                                f"context_length ({context}) and rejected; got {overhead}")
        raise ScenarioError(f"traffic.source.input_tokens: every prompt would be at or above "
                            f"context_length ({context}) and rejected")
    return trace


def kv_transfer_bytes_per_token(scenario: Scenario) -> float:
    """``bytes_per_token: auto``: the KV one prefill GPU sends per token (its shard, in the KV dtype)."""
    spec = scenario.engine.kv_transfer
    if spec is not None and spec.bytes_per_token is not None:
        return spec.bytes_per_token
    prefill = scenario.engine.workers["prefill"]
    if spec is not None and spec.via == "storage":  # (a job of the prefill rank's tier: its GPUs' shards together)
        return host_blocks(prefill)[1] / prefill.kv_cache.block_size
    return prefill.deployment.kv_bytes_per_token_per_gpu


def _prefill_store(scenario: Scenario) -> StorageSpec | None:
    """The prefill role's storage tier (what a handoff through storage moves over), or None."""
    host = scenario.engine.workers["prefill"].kv_cache.host_offload
    return None if host is None else host.storage


class Simulation:
    """A deployment and its traffic as SimPy processes on one ``simpy.Environment`` (``engine.environment.Environment``).

    Step through it with ``step()`` (to the next instant something observable happens: an arrival, an
    admission, a first token, a finish, a preemption; ``step(passes=True)``: a pass boundary too) or
    ``run(until=...)``; while paused, ``requests`` are the requests so far, ``workers`` give each worker's
    ranks with their ``running`` and ``waiting`` queues and KV ``pool`` (``pools`` by role in
    disaggregated mode), ``events`` is the event log so far and ``now`` the simulated time.

    Runs of passes are planned in closed form (``engine.planner``), with the same outcome and records
    as planning every pass on its own (``coalesce=False``). No run reaches past a pause: ``run(until)``
    cuts them there and ``step()`` plans its passes one by one, so whatever is shown while paused is what
    the pass-by-pass simulation holds at that instant, and nothing is stamped after ``now``.
    """

    def __init__(self, scenario: Scenario, keep_events: bool = True, event_sink=None,
                 coalesce: bool = True) -> None:
        trace = check_workload(scenario)
        self.scenario = scenario
        self.env = Environment()
        self.recorder = Recorder(keep_events, event_sink)
        self.recorder.staged = bool(scenario.traffic.load.stages)
        self.shared_stores: dict[str, StoredBlocks] = {}
        """Per role whose storage tier is ``shared``, the one store its ranks read and write (``offload.attach``)."""
        if event_sink is not None:
            event_sink.watermark = self._event_watermark
        engine = scenario.engine
        self.images = getattr(scenario.traffic.source, "images", None)
        self.front_role = engine.front_role
        self.image_tokens = 0 if self.images is None else image_tokens(engine.workers[self.front_role].deployment,
                                                                       self.images)
        self.frontends: dict[int, Frontend] = {}
        """SGLang: each front worker's frontend stage pools, by worker id."""
        self.backend: Backend = BACKENDS[engine.backend](self)
        planner = scenario.planner
        scaled = {} if planner is None else planner.pools
        self.pools: dict[str, list[Worker]] = {
            name: self.backend.build_pool(role, make_timing(role, engine.backend),
                                          scaled[name].max_replicas if name in scaled else None)
            for name, role in engine.workers.items()}
        self.workers: list[Worker] = [w for pool in self.pools.values() for w in pool]
        self.energy: dict[str, PassEnergy] = {name: make_energy(role, engine.backend)
                                              for name, role in engine.workers.items()}
        """Per role, how its passes' energy is priced (``simmodel.perf.energy``)."""
        for name, pool in self.pools.items():
            for worker in pool:
                worker.energy = self.energy[name]
        self.limits = RunLimits(scenario.limits)
        cutoff = scenario.traffic.stop.max_virtual_time_seconds
        self.stop_at: int | None = None if cutoff is None else to_ns(cutoff)
        for worker in self.workers:
            worker.limits = self.limits
            worker.coalesce = coalesce and worker.stages is None  # (a pipelined worker's passes overlap: no runs)
            worker.horizon = self.stop_at
        load = scenario.traffic.load
        agents = trace if isinstance(trace, list) else None
        stream = RequestStream(scenario, None if agents is not None else trace, agents)
        self.routers: dict[str, Router] = {
            name: make_router(scenario.router(name), pool, self.env, stream.sessions or stream.agents,
                              predicts=name != "decode")
            for name, pool in self.pools.items()}
        """Per role, the router that picks the worker of each request placed on its pool (``simmodel.routing``)."""
        self.fleets: dict[str, Fleet] = {
            name: Fleet(self.env, name, self.pools[name], self.routers[name], engine.workers[name].parallelism.replicas,
                        to_ns(engine.workers[name].startup_seconds)) for name in scaled}
        """Per scaled role (``planner.pools``), its workers as the replica planner runs them (``simmodel.scaling``)."""
        self.planner: ReplicaPlanner | None = None
        if planner is not None:
            self.planner = ReplicaPlanner(self.env, planner, self.fleets, self._work_left, self._observe)
            for name in scaled:
                for worker in self.pools[name]:
                    worker.reads_at = self.planner.next_read_ns
        self.transfer: KvTransfer | None = None
        if engine.mode == "disaggregated":
            assert engine.kv_transfer is not None
            self.transfer = KvTransfer(self.env, engine.kv_transfer, kv_transfer_bytes_per_token(scenario),
                                       self.pools["prefill"], self.pools["decode"], self.pick_decode, self.recorder,
                                       destination_first=self.backend.destination_first,
                                       store=_prefill_store(scenario))
        self.encoders: EncoderPool | None = None
        """EPD: the encoder pool the requests' images go through before they reach the deployment."""
        if engine.encoder is not None:
            front = engine.workers[self.front_role]
            self.encoders = EncoderPool(self.env, engine.encoder, replace(front.deployment, tensor=engine.encoder.tensor),
                                        self.images, front.timing.efficiency, self._deliver)
        stream.extra_prompt_tokens = self.image_tokens + scenario.traffic.prompt_overhead_tokens
        stream.limits = self.limits
        self.source = TrafficSource(self.env, stream, self._place, self.recorder,
                                    serving_context_length(scenario),
                                    load.concurrency if load.type == "concurrency" else 0,
                                    to_ns(engine.request_overhead_ms / 1000.0))
        self.wall_time_s = 0.0
        self.routes: ArrivalRoutes | None = None
        """Each arrival's worker, known ahead (see ``_route_ahead``), or None."""
        self._route_ahead(engine)
        quiet = (not self.source.has_index(self.limits.first_request_over())
                 and not any(router.reads_state for router in self.routers.values()))
        for worker in self.workers:
            worker.quiet_callbacks = quiet
        self.order_by_worker = any(worker.arrivals is not None for worker in self.workers)
        """Workers plan ahead, each on its own: the tables take the canonical order (``summarize.event_order``)."""
        if event_sink is not None:
            event_sink.by_worker = self.order_by_worker
        for worker in self.workers:
            self.env.process(worker.run())
            for rank in worker.ranks:
                self.env.process(rank.run())
        self.env.process(self.source.run())
        if self.planner is not None:
            self.env.process(self.planner.run())

    def _observe(self, role: str, t0: int, t1: int) -> tuple | None:
        """What the SLA planner saw of ``role``'s pool from ``t0`` to ``t1`` (``scaling.observe``), the kind of
        pool, its ranks per worker and the most sequences a rank may decode at the observed context."""
        seen = observe(role, self.requests, self.recorder.passes, t0, t1)
        if seen is None:
            return None
        spec = self.scenario.engine.workers[role]
        context = max(1.0, seen.isl + seen.osl / 2)
        batch = min(spec.scheduler.max_sequences, int(spec.kv_tokens_per_rank // context))
        return seen, role, spec.parallelism.attention_data, batch

    def _work_left(self) -> bool:
        """Whether any process but the replica planner has an event to come (asked as its own has fired)."""
        return self.env.peek() != float("inf")

    def _route_ahead(self, engine) -> None:
        """Aggregated vLLM under an open-loop load with a router that reads no state: an arrival only creates
        a request and queues it on the worker the router names, which is known ahead. Each worker is then
        given its own arrivals (``WorkerArrivals``) and plans its passes through them waiting for no one. With a
        router that reads state, or a replica planner changing the pool, each request is routed as it arrives
        and the workers plan ahead up to that instant (``RoutedAtArrival``). Not where the ranks share a storage
        tier: a rank's lookup must see every other rank's writes ended by then, so no worker plans ahead."""
        if (engine.mode != "aggregated" or not self.backend.routes_ahead or not self.source.open_loop
                or self.encoders is not None):
            return
        if "aggregated" in self.shared_stores:
            return  # (its ranks look up a store the others write: none may plan ahead of the clock)
        router = self.routers["aggregated"]
        if router.reads_state or self.planner is not None:  # (a planner changes whom the router may pick)
            # Routed as each request arrives: the workers plan ahead up to the next arrival (``RoutedAtArrival``),
            # unless the router sees the workers' KV events late, stamped as the passes that make them plan.
            if not self.scenario.router("aggregated").event_lag_ms:
                arrivals = RoutedAtArrival(self.source)
                for worker in self.pools["aggregated"]:
                    worker.arrivals = arrivals
            return
        self.routes = ArrivalRoutes(router, self.source.rejected, self.source.stream.limit)
        self.source.routed(self.routes)
        for k, worker in enumerate(self.pools["aggregated"]):
            worker.arrivals = WorkerArrivals(self.source, k)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: Iterable[str] = (), keep_events: bool = True,
                  event_sink=None, coalesce: bool = True) -> Simulation:
        """Load, override and validate a scenario file, then build its model. ``event_sink`` (a
        ``ParquetEventSink``) streams the event log instead of keeping it; ``coalesce=False`` plans every
        pass on its own (see the class)."""
        scenario = load_scenario(path, overrides)
        try:
            return cls(scenario, keep_events, event_sink, coalesce)
        except ScenarioError as exc:
            raise ScenarioError(f"{Path(path).name}: {exc}") from None

    # -- placement -----------------------------------------------------------------------------

    def _place(self, request: Request, at: int | None = None) -> Rank | None:
        """Send a new request to a worker, then a rank (``engine.backends``); ``at``: the arrival instant of a
        request a worker makes ahead of the clock (routed loads only). With an encoder pool, its images first
        (placed when their embeddings arrive: returns None)."""
        if self.encoders is not None:
            self.encoders.submit(request)
            return None
        return self.backend.place(request, at)

    def _deliver(self, request: Request) -> None:
        """A request whose embeddings the encoder pool has sent reaches the deployment."""
        self.backend.place(request, None)

    def pick_decode(self, request: Request) -> Rank:
        """The decode rank a prefilled request goes to: the decode pool's router, then the worker's rank."""
        return self.routers["decode"].pick(request).pick_rank(request.dp_rank_hint)

    # -- driving -------------------------------------------------------------------------------

    @property
    def now(self) -> float:
        """Simulated time in seconds."""
        return self.env.now / NS_PER_S

    @property
    def finished(self) -> bool:
        """True once no event is left before the stop time."""
        nxt = self.env.peek()
        return nxt == float("inf") or (self.stop_at is not None and nxt > self.stop_at)

    @property
    def requests(self) -> list[Request]:
        return self.source.requests

    def step(self, passes: bool = False) -> bool:
        """Advance to the next instant at which something observable happens, and pause there; returns
        False (and does nothing) when the run is over.

        Observable: a row of the event log other than a pass boundary (an arrival, a placement or
        rejection, an admission, a preemption or resume, a first token, a finish, a P/D handoff step);
        with ``passes``, a pass beginning or ending too. Without an event log (``keep_events=False``)
        every instant at which any event happens is a pause. Every event of that instant is processed,
        and the passes run one by one meanwhile (no coalesced run reaches past the clock), so while paused
        the requests, queues, KV pools and event log are those of the pass-by-pass simulation
        (``coalesce=False``) at the same instant.
        """
        if self.finished:
            return False
        started = time.perf_counter()
        saved = [worker.coalesce for worker in self.workers]
        for worker in self.workers:
            worker.coalesce = False  # a step's passes are planned one at a time, each applied at its end
        try:
            with collector_paused(), self._settled_on_error():
                while not self.finished:
                    logged = len(self.recorder.events)
                    self._run_instant()
                    if self._observed_since(logged, passes):
                        break
        finally:
            for worker, coalesce in zip(self.workers, saved):
                worker.coalesce = coalesce
            self.wall_time_s += time.perf_counter() - started
        return True

    @contextmanager
    def _settled_on_error(self):
        """If an error stops the simulation (a limit, a pass the clock cannot hold), every worker's run being
        applied as its passes end is settled first (``Worker.settle``), so that the results read after the
        error are those of the pass-by-pass simulation at that instant."""
        try:
            yield
        except BaseException:
            for worker in self.workers:
                worker.settle()
            raise

    def _run_instant(self) -> None:
        """Process every event at the next instant at which one is due (those it schedules for the same
        instant included)."""
        env = self.env
        at = env.peek()
        while env.peek() == at:
            env.step()

    def _observed_since(self, logged: int, passes: bool) -> bool:
        """Whether the event-log rows from number ``logged`` on hold an observable one (see ``step``);
        always True without an event log."""
        if not self.recorder.keep_events:
            return True
        rows = self.recorder.events
        return passes and len(rows) > logged or any(row.kind not in PASS_KINDS for row in rows[logged:])

    def run(self, until: float | None = None, progress: Callable[[Simulation], None] | None = None) -> Results:
        """Run to ``until`` seconds of simulated time (or to the end) and return the results so far.

        ``until`` is a number of seconds, not before ``now``; ``None`` or ``math.inf`` (or any time beyond
        what the clock can hold, ``MAX_UNTIL_S``) runs to the end. Events at ``until`` itself happen. While
        events remain after ``until``, ``now`` is ``until`` afterwards; once none remain, the clock stays at
        the last event (the run's end, ``results.summary["duration_s"]``), however far ``until`` lies.

        ``progress`` (e.g. a terminal progress bar) is called about every ``PROGRESS_EVERY`` events and once
        at the end; it only reads the simulation.

        Raises:
            TypeError: ``until`` is not a number (a string, a bool).
            ValueError: ``until`` is NaN or before ``now``.
        """
        limit = self.stop_at
        until_ns = self._until_ns(until)
        if until_ns is not None:
            limit = until_ns if limit is None else min(until_ns, limit)
        started = time.perf_counter()
        for worker in self.workers:
            worker.horizon = limit  # no coalesced pass may end past where this call stops
        with collector_paused():
            with self._settled_on_error():
                if progress is not None:
                    self._run_with_progress(limit, progress)
                if limit is None:
                    self.env.run()
                elif limit >= self.env.now:
                    self._run_to(limit)
            if limit is None:
                stalled = [r for r in self.requests if not r.status.is_finished]
                if stalled:
                    raise SimulationError(f"the simulation stopped with {len(stalled)} request(s) unfinished and "
                                          f"nothing left to happen (request {stalled[0].request_id} first)")
            self.wall_time_s += time.perf_counter() - started
            return self.results()

    def _until_ns(self, until: object) -> int | None:
        """``run``'s ``until`` checked and in nanoseconds; None for "to the end"."""
        if until is None:
            return None
        if isinstance(until, (bool, np.bool_)) or not isinstance(until, numbers.Real):
            raise TypeError(f"until must be a number of seconds (or None for the end), got {until!r}")
        try:
            until = float(until)
        except OverflowError:  # an int beyond any float (10**400): later than any clock, so the end
            return None
        if math.isnan(until):
            raise ValueError("until must be a number of seconds, got nan")
        if until < self.now:
            raise ValueError(f"until ({until:g} s) is before now ({self.now:g} s); the clock only moves forward")
        return None if until >= MAX_UNTIL_S else to_ns(until)

    def _run_to(self, limit: int) -> None:
        """Process every event up to and at ``limit`` (ns); the clock reaches ``limit`` only while events
        remain after it, so a drained run's clock stays at its last event."""
        env = self.env
        peek, step = env.peek, env.step
        while peek() <= limit:  # (not env.run(until), whose stop event would move a drained clock to limit)
            step()
        if env.now < limit and peek() != float("inf"):
            env.run(until=limit)  # only its stop event is left before the next event: the clock moves to limit

    def _run_with_progress(self, limit: int | None, progress: Callable[[Simulation], None]) -> None:
        """Step the events up to ``limit`` (all, for None) here so that ``progress`` can be called between
        them; ``run`` then finishes as it would without ``progress`` (the clock moved to a cut the same way),
        so a run's outputs never depend on whether it showed progress."""
        env, step, end = self.env, self.env.step, float("inf") if limit is None else limit
        inf = float("inf")
        while (nxt := env.peek()) < inf and nxt <= end:
            for _ in range(PROGRESS_EVERY):
                nxt = env.peek()
                if nxt == inf or nxt > end:
                    break
                step()
            progress(self)
        progress(self)

    def _event_watermark(self) -> int:
        """No event recorded from now on has an earlier time: now, or the end of a pass not yet finished."""
        return min([self.env.now, *(end for w in self.workers for end in w.open_pass_ends)])

    @property
    def num_finished(self) -> int:
        """Requests that completed or were rejected so far."""
        return self.recorder.num_done

    # -- results -------------------------------------------------------------------------------

    @property
    def events(self) -> pd.DataFrame:
        """The event log up to ``now``, in time order (``summarize.event_order``). With async scheduling the
        pass committed to run after the one in flight has its ``pass_begin`` row logged already, stamped with
        its start: it is kept back until the clock reaches it (the final results hold every row)."""
        return events_frame(self.recorder.events, upto_ns=self.env.now, by_worker=self.order_by_worker)

    def end_time(self) -> float:
        """When the run ended: the last pass end once drained, else the current time."""
        if self.finished and not any(not r.status.is_finished for r in self.requests):
            arrivals = [r.arrived_at for r in self.requests] or [0]
            return max(self.recorder.passes.max_end_ns(), max(arrivals)) / NS_PER_S
        return self.env.now / NS_PER_S

    def _provenance_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for worker in self.workers:
            for label, n in worker.provenance_counts.items():
                counts[label] = counts.get(label, 0) + n
        return counts

    @staticmethod
    def _reported(request: Request) -> Request:
        """The request as the results show it: one still on a prefill worker (disaggregated) with what that
        worker has done so far, on a copy (the request itself takes them over at its handoff, ``KvTransfer``;
        taking results while paused changes nothing)."""
        leg = request.prefill_leg
        if leg is None or request.prefill_done_at is not None:
            return request
        shown = copy.copy(request)
        take_prefill_figures(shown, leg)
        return shown

    def results(self) -> Results:
        disaggregated = self.transfer is not None
        reported = [self._reported(r) for r in self.requests]
        requests = request_table(reported, disaggregated)
        if any(router_predicts(router) for router in self.routers.values()):
            requests.add("predicted_cached_tokens", [_or_minus_one(r.predicted_cached_tokens) for r in reported])
        if self.frontends:  # time in the frontend stages; the rest of queue_ms waited for the scheduler
            requests.add("frontend_ms", [r.frontend_ns / 1e6 for r in self.requests])
        roles = {}
        end_ns = to_ns(self.end_time())
        scaled = {name: fleet.replica_stats(end_ns) for name, fleet in self.fleets.items()}
        for name, role in self.scenario.engine.workers.items():
            p = role.parallelism
            gpu_count, seconds = p.gpu_count, None
            if name in scaled:  # the most GPUs up at once, and each worker's lifetime
                gpu_count = scaled[name]["peak_workers_up"] * p.gpus_per_worker
                seconds = self.fleets[name].worker_seconds(end_ns)
            roles[name] = role_summary(gpu_count, p.gpus_per_worker, p.replicas, self.end_time(),
                                       sum(w.num_passes for w in self.pools[name]), role.num_kv_blocks,
                                       role.kv_tokens_per_rank, seconds)
        summary = summarize(requests, self.recorder, roles, wall_time_s=self.wall_time_s,
                            end_s=self.end_time(), provenance_counts=self._provenance_counts(),
                            request_overhead_s=self.scenario.engine.request_overhead_ms / 1000.0)
        powers = {name: e.power for name, e in self.energy.items()}
        companion = self.scenario.engine.workers[self.front_role].afd
        busy_gpu_seconds = {}

        def pool(name: str, gpus: int, per_worker: int, workers: int, deployment, busy_s: float) -> None:
            """A pool that runs no passes of its own: its GPUs and GPU-hours in the totals, its power and busy time."""
            entry = roles[name] = companion_summary(gpus, per_worker, workers, self.end_time())
            summary["gpu_count"] += entry["gpu_count"]
            summary["gpu_hours"] += entry["gpu_hours"]
            powers[name], busy_gpu_seconds[name] = gpu_power(deployment), busy_s

        if companion is not None:  # AFD: the FFN workers, priced with the attention passes, have GPUs of their own
            tokens, durations = worker_pass_tokens(pass_columns(self.recorder.passes))
            front = self.scenario.engine.workers[self.front_role]
            pool("ffn", companion.ffn.gpu_count, companion.ffn_gpus_per_worker, companion.ffn.replicas,
                 companion.ffn_deployment,
                 afd_ffn_work(front, self.scenario.engine.backend).busy_gpu_seconds(tokens, durations))
        if self.encoders is not None:  # EPD: the encoder pool's GPUs, busy while they encode
            spec = self.encoders.spec
            pool("encoder", spec.gpu_count, spec.tensor, spec.replicas, self.encoders.deployment,
                 sum(w.gpu_busy_ns for w in self.encoders.workers) / 1e9)
        summary.update(energy_summary(roles, powers, self.recorder.passes, summary["total_output_tokens"],
                                      summary["completed_requests"], self.scenario.gpu_hour_price, busy_gpu_seconds))
        if self.scenario.engine.speculation is not None:
            scheds = [rank.scheduler for w in self.workers for rank in w.ranks]
            verified = sum(s.num_drafts_verified for s in scheds)
            accepted = sum(s.num_drafts_accepted for s in scheds)
            rounds = sum(r.spec_rounds for r in self.requests)
            summary["speculation"] = {
                "kind": self.scenario.engine.speculation.kind, "num_rounds": rounds,
                "num_draft_tokens": verified, "num_accepted_tokens": accepted,
                "acceptance_rate": accepted / verified if verified else None,
                "mean_tokens_per_round": (rounds + accepted) / rounds if rounds else None,
            }
        if self.scenario.routers:
            summary["routing"] = routing_summary({name: self.scenario.router(name) for name in self.pools},
                                                 {name: len(pool) for name, pool in self.pools.items()}, reported,
                                                 end_ns)
        replicas = None
        if self.planner is not None:
            decisions = sum(1 for d in self.planner.decisions if to_ns(d["time_s"]) <= end_ns)
            summary["planner"] = {"mode": self.scenario.planner.mode, "decisions": decisions, "pools": scaled}
            replicas = replica_columns(self.fleets, end_ns)
        if self.scenario.sla is not None:
            summary["sla"] = sla_summary(self.scenario.sla, requests, summary["duration_s"])
        pools = [rank.pool for w in self.workers for rank in w.ranks if rank.pool.caching]
        queries = sum(p.num_queries for p in pools)
        summary["prefix_cache_hit_ratio"] = sum(p.num_hits for p in pools) / queries if queries else None
        if disaggregated:
            assert self.transfer is not None
            summary["num_kv_transfers"] = self.transfer.num_transfers
            summary.update(self.transfer.route.figures(end_ns))
        offloads = [(w.role, rank) for w in self.workers for rank in w.ranks if rank.offload is not None]
        if offloads:  # a host KV tier: what it held and moved, and each request's tokens loaded from it
            summary["kv_offload"] = offload_summary(offloads, end_ns)
            requests.add("host_cached_tokens", [r.num_host_cached_tokens - r.num_storage_cached_tokens
                                                for r in reported])
            requests.add("host_load_ms", [float("nan") if r.host_load_end_at is None
                                          else (r.host_load_end_at - r.host_load_start_at) / 1e6 for r in reported])
            if any(rank.offload.storage is not None for _, rank in offloads):
                requests.add("storage_cached_tokens", [r.num_storage_cached_tokens for r in reported])
                requests.add("storage_load_ms", [
                    float("nan") if r.storage_load_end_at is None or not r.num_storage_cached_tokens
                    else (r.storage_load_end_at - r.storage_load_start_at) / 1e6 for r in reported])
        summary.update(self.backend.summary())
        if self.frontends:
            spec = self.scenario.engine.workers[self.front_role].frontend
            assert spec is not None
            summary["frontend"] = frontend_summary(list(self.frontends.values()))
            summary["frontend_provenance"] = {"source": spec.source, "measured_for": spec.measured_for}
        if self.encoders is not None:
            summary["encoder"] = {"image_tokens_per_request": self.image_tokens, **self.encoders.summary(end_ns)}
            requests.add("encoder_worker", [r.encoder_worker for r in self.requests])
            requests.add("encoder_ms", [float("nan") if r.embeddings_at is None
                                        else (r.embeddings_at - r.arrived_at) / 1e6 for r in self.requests])
        elif self.images is not None:
            encoders = [v for w in self.pools[self.front_role] for v in (w.vision or [])]
            hits = sum(v.cache.num_hits for v in encoders)
            misses = sum(v.cache.num_misses for v in encoders)
            summary["vision"] = {
                "image_tokens_per_request": self.image_tokens,
                "images_encoded": sum(v.num_images_encoded for v in encoders),
                "encoder_seconds": sum(v.encode_s for v in encoders),
                "embedding_cache_hits": hits, "embedding_cache_misses": misses,
                "embedding_cache_hit_ratio": hits / (hits + misses) if hits + misses else None,
            }
        agents = self.source.agents
        if agents is not None:  # agentic sessions: which session and call each request is, and per session
            of = [agents.of_request[r.request_id] for r in self.requests]
            requests.add("session", [state.session.name for state, _ in of])
            requests.add("call", [state.session.calls[k].name for state, k in of])
            summary["sessions"] = session_summary(
                agents.states, {r.request_id: r.num_prompt_tokens for r in self.requests},
                {r.request_id: r.num_cached_tokens for r in self.requests})
        sessions = self.source.sessions
        if sessions is not None:  # multi-turn sessions: which conversation and turn each request is
            requests.add("session", [sessions.of_request[r.request_id][0].id for r in self.requests])
            requests.add("turn", [sessions.of_request[r.request_id][1] for r in self.requests])
        if self.scenario.traffic.warnings:
            summary["workload_warnings"] = list(self.scenario.traffic.warnings)
        stages = self.scenario.traffic.load.stages
        starts = None
        if stages:  # a staged load: each request's stage, each pass's stage (by its start), and per stage
            requests.add("stage", [r.stage for r in self.requests])
            starts = np.array(self.source.stage_starts_ns or [0], dtype=np.int64)
            summary["stages"] = stage_summaries(requests, self.recorder, stages, self.source.stage_starts_ns,
                                                self.source.stage_ends_ns)
        pass_bytes = {(w.worker_id, rank.rank_id): dict(rank.offload.pass_bytes.by_pass)
                      for w in self.workers for rank in w.ranks if rank.offload is not None} or None
        return Results(summary, requests, self.recorder.passes, len(self.recorder.passes), self.recorder.events,
                       len(self.recorder.events), starts, by_worker=self.order_by_worker, replicas=replicas,
                       pass_bytes=pass_bytes, powers={name: e.power for name, e in self.energy.items()})
