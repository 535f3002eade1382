"""Build a SimPy model of a deployment from a scenario, step or run it, and collect its results."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import simpy

from simmodel.config.load import load_scenario
from simmodel.config.schema import Scenario, TraceSource, WorkerRole
from simmodel.engine.clock import NS_PER_S, to_ns
from simmodel.engine.kv_cache import BlockPool
from simmodel.engine.rank import Rank
from simmodel.engine.request import Request
from simmodel.engine.scheduler.vllm import VllmScheduler, VllmSchedulerConfig
from simmodel.engine.worker import Worker
from simmodel.errors import ScenarioError
from simmodel.metrics.records import Recorder
from simmodel.metrics.summarize import events_frame, passes_frame, requests_frame, summarize
from simmodel.perf.roofline import RooflineTiming
from simmodel.perf.timing import FixedTiming, PassTiming, PolynomialTiming
from simmodel.traffic.lengths import smallest_length
from simmodel.traffic.source import RequestStream, TrafficSource
from simmodel.traffic.traces import TraceData, read_trace


@dataclass(frozen=True)
class Results:
    """What a run produced: the summary mapping and the three tables."""

    summary: dict
    requests: pd.DataFrame
    passes: pd.DataFrame
    events: pd.DataFrame


def make_timing(role: WorkerRole, backend: str = "vllm") -> PassTiming:
    """The role's pass timing model. ``measured`` queries aiconfigurator once here (a few seconds)."""
    spec = role.timing
    if spec.type == "fixed":
        return FixedTiming(spec.prefill_ms, spec.decode_ms)
    if spec.type == "default":
        return RooflineTiming(role.deployment, spec.efficiency, spec.host)
    if spec.type == "measured":
        from simmodel.perf.measured import MeasuredTiming

        try:
            return MeasuredTiming(role.deployment, backend, backend_version=spec.backend_version,
                                  context_length=role.context_length,
                                  max_batched_tokens=role.scheduler.max_batched_tokens,
                                  max_sequences=role.scheduler.max_sequences)
        except ScenarioError as exc:
            raise ScenarioError(f"engine.workers.aggregated.timing: {exc}") from None
    return PolynomialTiming()


def load_trace(scenario: Scenario) -> TraceData | None:
    """Read the scenario's trace, if any, and check it against the deployment."""
    source = scenario.traffic.source
    if not isinstance(source, TraceSource):
        return None
    try:
        trace = read_trace(source.path, source.format,
                           require_monotone=scenario.traffic.load.type == "trace_timestamps")
    except ScenarioError as exc:
        raise ScenarioError(f"traffic.source.path: {exc}") from None
    ranks = scenario.engine.workers["aggregated"].parallelism.attention_data
    bad = trace.dp_rank >= ranks
    if bad.any():
        row = int(np.argmax(bad))
        raise ScenarioError(f"traffic.source.path: {source.path}: row {row + 1} names dp_rank "
                            f"{trace.dp_rank[row]} but workers have attention_data {ranks}")
    return trace


def check_workload(scenario: Scenario) -> TraceData | None:
    """Validation that needs the workload: the trace file, and traffic that could never be served."""
    trace = load_trace(scenario)
    source = scenario.traffic.source
    context = scenario.engine.workers["aggregated"].context_length
    if trace is None and smallest_length(source.input_tokens) >= context:
        raise ScenarioError(f"traffic.source.input_tokens: every prompt would be at or above "
                            f"context_length ({context}) and rejected")
    return trace


class Simulation:
    """A deployment and its traffic as SimPy processes on one ``simpy.Environment``.

    Step through it with ``step()`` (one event) or ``run(until=...)``; while paused, ``workers`` give
    each worker's ranks with their ``running`` and ``waiting`` queues and KV ``pool``, and ``events``
    is the event log so far.
    """

    def __init__(self, scenario: Scenario, keep_events: bool = True) -> None:
        trace = check_workload(scenario)
        self.scenario = scenario
        self.env = simpy.Environment()
        self.recorder = Recorder(keep_events)
        self.role = role = scenario.engine.workers["aggregated"]
        timing = make_timing(role, scenario.engine.backend)
        sched_cfg = VllmSchedulerConfig(
            max_num_seqs=role.scheduler.max_sequences,
            max_num_batched_tokens=role.scheduler.max_batched_tokens,
            max_model_len=role.context_length,
            long_prefill_token_threshold=role.scheduler.long_prefill_token_threshold,
            enable_chunked_prefill=scenario.engine.enable_chunked_prefill,
            reserve_full_isl=role.scheduler.reserve_full_isl,
        )
        self.workers: list[Worker] = []
        for w in range(role.parallelism.replicas):
            worker = Worker(self.env, w, timing)
            for r in range(role.parallelism.attention_data):
                pool = BlockPool(role.num_kv_blocks, role.kv_cache.block_size)
                worker.add_rank(Rank(self.env, worker, r, VllmScheduler(sched_cfg, pool), self.recorder))
            self.workers.append(worker)
        self._next_worker = 0
        load = scenario.traffic.load
        self.source = TrafficSource(self.env, RequestStream(scenario, trace), self._place, self.recorder,
                                    role.context_length, load.concurrency if load.type == "concurrency" else 0)
        cutoff = scenario.traffic.stop.max_virtual_time_seconds
        self.stop_at: int | None = None if cutoff is None else to_ns(cutoff)
        self.wall_time_s = 0.0
        for worker in self.workers:
            self.env.process(worker.run())
            for rank in worker.ranks:
                self.env.process(rank.run())
        self.env.process(self.source.run())

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: Iterable[str] = (), keep_events: bool = True) -> Simulation:
        """Load, override and validate a scenario file, then build its model."""
        scenario = load_scenario(path, overrides)
        try:
            return cls(scenario, keep_events)
        except ScenarioError as exc:
            raise ScenarioError(f"{Path(path).name}: {exc}") from None

    # -- placement -----------------------------------------------------------------------------

    def _place(self, request: Request) -> None:
        """Round robin across workers; the worker then picks the rank."""
        worker = self.workers[self._next_worker]
        self._next_worker = (self._next_worker + 1) % len(self.workers)
        worker.place(request)

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

    def step(self) -> bool:
        """Process one event; returns False (and does nothing) when the run is over."""
        if self.finished:
            return False
        started = time.perf_counter()
        self.env.step()
        self.wall_time_s += time.perf_counter() - started
        return True

    def run(self, until: float | None = None) -> Results:
        """Run to ``until`` seconds of simulated time (or to the end) and return the results so far."""
        limit = self.stop_at
        if until is not None:
            limit = to_ns(until) if limit is None else min(to_ns(until), limit)
        started = time.perf_counter()
        if limit is None:
            self.env.run()
        elif limit >= self.env.now:
            self.env.run(until=limit)
            while self.env.peek() <= limit:  # events at the limit itself still happen
                self.env.step()
        self.wall_time_s += time.perf_counter() - started
        return self.results()

    # -- results -------------------------------------------------------------------------------

    @property
    def events(self) -> pd.DataFrame:
        return events_frame(self.recorder.events)

    def end_time(self) -> float:
        """When the run ended: the last pass end once drained, else the current time."""
        if self.finished and not any(not r.status.is_finished for r in self.requests):
            ends = [p.end_ns for p in self.recorder.passes] or [0]
            arrivals = [r.arrived_at for r in self.requests] or [0]
            return max(max(ends), max(arrivals)) / NS_PER_S
        return self.env.now / NS_PER_S

    def _provenance_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for worker in self.workers:
            for label, n in worker.provenance_counts.items():
                counts[label] = counts.get(label, 0) + n
        return counts

    def results(self) -> Results:
        requests = requests_frame(self.requests)
        p = self.role.parallelism
        summary = summarize(
            requests, self.recorder, gpu_count=p.gpu_count, gpus_per_worker=p.gpus_per_worker,
            num_workers=p.replicas, num_passes=sum(w.num_passes for w in self.workers),
            end_s=self.end_time(), wall_time_s=self.wall_time_s, num_kv_blocks_per_rank=self.role.num_kv_blocks,
            block_size=self.role.kv_cache.block_size, provenance_counts=self._provenance_counts())
        return Results(summary, requests, passes_frame(self.recorder.passes), self.events)
