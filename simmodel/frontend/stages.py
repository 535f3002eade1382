"""SGLang's HTTP frontend as a chain of black-box stages in front of the scheduler.

Before a request reaches the scheduler, SGLang's frontend runs it through host-side workers: the
tokenizer manager, the multimodal processor (image decode and resize), and so on. We model each of
them as a stage: a pool of ``workers`` identical servers with FIFO queueing (a ``simpy.Resource``).
A request visits stage 0, then 1, ..., waiting each time for a free worker, and is handed to the
scheduler (a callback) at the instant the last stage's service ends.

Busy workers share the host's CPU cores, so service slows down with concurrency: a request that starts
service while k requests of its stage are in service (itself included, 1 <= k <= workers) takes
``service_ms * concurrency_scale[k - 1]``. The scale is measured, not derived. The k seen at the start
holds for the whole service; later arrivals do not slow a request already in service.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import simpy

NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class StageSpec:
    """One frontend stage: ``workers`` servers, base service time and measured sharing slowdown."""

    name: str
    workers: int
    service_ms: float
    concurrency_scale: tuple[float, ...]   # [k - 1]: service multiplier with k requests in service

    def __post_init__(self) -> None:
        object.__setattr__(self, "concurrency_scale", tuple(float(s) for s in self.concurrency_scale))
        if self.workers < 1:
            raise ValueError(f"stage {self.name!r}: workers must be >= 1, got {self.workers}")
        if not self.service_ms >= 0.0 or self.service_ms == float("inf"):
            raise ValueError(f"stage {self.name!r}: service_ms must be finite and >= 0, got {self.service_ms}")
        if len(self.concurrency_scale) != self.workers:
            raise ValueError(f"stage {self.name!r}: concurrency_scale needs {self.workers} entries (one per "
                             f"worker), got {len(self.concurrency_scale)}")
        if not all(0.0 < s < float("inf") for s in self.concurrency_scale):
            raise ValueError(f"stage {self.name!r}: concurrency_scale entries must be finite and > 0, "
                             f"got {list(self.concurrency_scale)}")


class Stage:
    """One pool of frontend workers (e.g. the tokenizer processes); a request waits for a free worker."""

    def __init__(self, env: simpy.Environment, spec: StageSpec) -> None:
        self.env, self.spec = env, spec
        self.pool = simpy.Resource(env, capacity=spec.workers)
        # Rounded once per k, so every service of the same k lasts exactly the same whole ns.
        self.service_ns = [int(round(spec.service_ms * s * NS_PER_MS)) for s in spec.concurrency_scale]
        self.num_in_service = 0
        self.num_served = 0
        self.total_wait_ns = 0
        self.total_service_ns = 0

    def serve(self) -> Generator[simpy.Event, Any, None]:
        """Wait for a free worker (FIFO), then hold it for the service time at the current concurrency."""
        queued_at = self.env.now
        with self.pool.request() as req:
            yield req
            # Counted on resume, not from pool.users: SimPy grants same-instant requests before any of
            # their processes resume, and the first to start must see only itself.
            self.num_in_service += 1
            service_ns = self.service_ns[self.num_in_service - 1]
            wait_ns = self.env.now - queued_at
            yield self.env.timeout(service_ns)
            self.num_in_service -= 1
            # Counted when service ends, so a run cut off mid-service keeps the means consistent.
            self.num_served += 1
            self.total_wait_ns += wait_ns
            self.total_service_ns += service_ns

    def stats(self) -> dict[str, Any]:
        """Requests served and their mean wait and service in ms (None before the first is served)."""
        n = self.num_served
        return {"stage": self.spec.name, "workers": self.spec.workers, "requests": n,
                "mean_wait_ms": self.total_wait_ns / n / NS_PER_MS if n else None,
                "mean_service_ms": self.total_service_ns / n / NS_PER_MS if n else None}


class Frontend:
    """SGLang's HTTP frontend: each request's process waits on the stages in order, then calls back.

    ``entered_at[request_id]`` and ``left_at[request_id]`` are the simulated instants (integer ns) at
    which the request was submitted and handed to the scheduler.
    """

    def __init__(self, env: simpy.Environment, stages: Sequence[StageSpec]) -> None:
        self.env = env
        self.stages = [Stage(env, spec) for spec in stages]
        self.entered_at: dict[int, int] = {}
        self.left_at: dict[int, int] = {}

    def submit(self, request_id: int, on_done: Callable[[], None]) -> None:
        """Start the request's trip through the stages.

        Args:
            request_id: unique id of the request; keys ``entered_at`` and ``left_at``.
            on_done: called once, at the instant the last stage's service ends (at once, from this
                call, when there are no stages).
        """
        self.entered_at[request_id] = self.env.now
        if not self.stages:
            self._leave(request_id, on_done)
            return
        self.env.process(self._run(request_id, on_done))

    def stage_stats(self) -> list[dict[str, Any]]:
        """Per stage, in order: name, workers, requests served, mean wait and mean service in ms."""
        return [stage.stats() for stage in self.stages]

    def _run(self, request_id: int, on_done: Callable[[], None]) -> Generator[simpy.Event, Any, None]:
        for stage in self.stages:
            yield from stage.serve()
        self._leave(request_id, on_done)

    def _leave(self, request_id: int, on_done: Callable[[], None]) -> None:
        self.left_at[request_id] = self.env.now
        on_done()
