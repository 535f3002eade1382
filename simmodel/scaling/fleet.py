"""One pool's workers as a replica planner runs them: which serve, which are starting or draining, and how long
each has been up (its GPUs are paid for from the moment it is asked for until it leaves).

The pool is built at its ``max_replicas`` workers; the first ``parallelism.replicas`` serve from the start and the
rest are off (an off worker has no request and sleeps, costing nothing). Adding a worker starts the lowest-
numbered one that is off: it serves ``startup_seconds`` later (Dynamo replay's engine ``startup_time``).
Removing one cancels the highest-numbered worker still starting, else drains the highest-numbered serving one:
the router stops sending it requests at once, it finishes what it holds, and it leaves once empty (found at
the planner's next metric sample), its KV handed back (as Dynamo's replay planner scales down). The router only
ever sees the serving workers (``Router.serve``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.clock import NS_PER_S

if TYPE_CHECKING:
    import simpy

    from simmodel.engine.placement import Router
    from simmodel.engine.worker import Worker

OFF, STARTING, SERVING, DRAINING = "off", "starting", "serving", "draining"


class Fleet:
    """A scaled pool: its workers' states, lifetimes and the replica counts over time."""

    def __init__(self, env: simpy.Environment, role: str, workers: list[Worker], router: Router, serving: int,
                 startup_ns: int) -> None:
        self.env, self.role, self.workers, self.router, self.startup_ns = env, role, workers, router, startup_ns
        self.state = [SERVING if k < serving else OFF for k in range(len(workers))]
        self.lives: list[list[list]] = [[[0, None]] if k < serving else [] for k in range(len(workers))]
        """Per worker, its [from, to) spans up in ns (to None: up still)."""
        self.timeline: list[tuple[int, int, int, int]] = []
        """(instant, serving, starting, draining) at the start and at every change."""
        self.num_scale_outs = self.num_scale_ins = 0
        self._changed()

    def count(self, state: str) -> int:
        return self.state.count(state)

    @property
    def scaling(self) -> bool:
        """Whether a worker it added is still starting (a planner decides nothing meanwhile)."""
        return STARTING in self.state

    def serving(self) -> list[Worker]:
        return [w for w, state in zip(self.workers, self.state) if state == SERVING]

    def draining(self) -> list[Worker]:
        return [w for w, state in zip(self.workers, self.state) if state == DRAINING]

    def add(self) -> bool:
        """Start the lowest-numbered worker that is off, or, if none is, take back the lowest-numbered one draining
        (it serves again at once: it never stopped); False if every worker serves or is starting."""
        if OFF not in self.state:
            if DRAINING not in self.state:
                return False
            self.state[self.state.index(DRAINING)] = SERVING
            self.num_scale_outs += 1
            self._changed()
            return True
        k = self.state.index(OFF)
        self.lives[k].append([self.env.now, None])
        self.num_scale_outs += 1
        if self.startup_ns:
            self.state[k] = STARTING
            self.env.timeout(self.startup_ns).callbacks.append(lambda _event, k=k: self._ready(k))
        else:
            self.state[k] = SERVING
        self._changed()
        return True

    def _ready(self, k: int) -> None:
        if self.state[k] == STARTING:  # (not cancelled meanwhile)
            self.state[k] = SERVING
            self._changed()

    def remove(self) -> bool:
        """Cancel the highest-numbered starting worker, else drain the highest-numbered serving one; False if
        neither is left."""
        for wanted, then in ((STARTING, OFF), (SERVING, DRAINING)):
            ks = [k for k, state in enumerate(self.state) if state == wanted]
            if ks:
                k = ks[-1]
                self.state[k] = then
                if then == OFF:
                    self.lives[k][-1][1] = self.env.now
                self.num_scale_ins += 1
                self._changed()
                return True
        return False

    def retire_drained(self) -> None:
        """Draining workers that hold nothing any more (no request, no KV block in use, no pass in flight)
        leave now."""
        left = False
        for k, (worker, state) in enumerate(zip(self.workers, self.state)):
            if state != DRAINING or not worker.is_idle or worker.has_requests():
                continue
            for rank in worker.ranks:  # (an idle engine polls its host copies: those landed unlock their KV)
                rank.settle_host_copies()
            if not any(rank.pool.num_used_blocks or rank.has_pending_releases for rank in worker.ranks):
                self.state[k] = OFF
                self.lives[k][-1][1] = self.env.now
                for rank in worker.ranks:  # its KV handed back: if it comes back, it starts cold
                    rank.scheduler.reset_prefix_cache()
                    if rank.offload is not None:
                        rank.offload.cold_start()
                left = True
        if left:
            self._changed()

    def _changed(self) -> None:
        self.router.serve(self.serving())
        self.timeline.append((self.env.now, self.count(SERVING), self.count(STARTING), self.count(DRAINING)))

    def worker_seconds(self, end_ns: int) -> float:
        """Seconds the pool's workers were up, summed, the run ending at ``end_ns`` (no span counts past it)."""
        return sum(max(0, min(end_ns, end_ns if to is None else to) - since)
                   for spans in self.lives for since, to in spans) / NS_PER_S

    def until(self, end_ns: int) -> list[tuple[int, int, int, int]]:
        """The timeline up to the run's end (a change after it, a worker ready once the last request is done,
        is past the run)."""
        return [row for row in self.timeline if row[0] <= end_ns] or self.timeline[:1]

    def replica_stats(self, end_ns: int) -> dict:
        """Serving workers over the run (to ``end_ns``): least, time-weighted mean and most; how many were added
        and removed; the most workers up at once."""
        timeline = self.until(end_ns)
        serving = [n for _, n, _, _ in timeline]
        times = [t for t, *_ in timeline] + [max(end_ns, timeline[-1][0])]
        span = times[-1] - times[0]
        mean = (sum(n * (b - a) for n, a, b in zip(serving, times, times[1:])) / span) if span else float(serving[-1])
        return {"min_serving": min(serving), "mean_serving": mean, "max_serving": max(serving),
                "scale_outs": self.num_scale_outs, "scale_ins": self.num_scale_ins,
                "peak_workers_up": max(n + s + d for _, n, s, d in timeline)}


def replica_columns(fleets: dict[str, Fleet], end_ns: int) -> dict:
    """``replicas.csv`` as columns: every scaled pool's changes up to the run's end, by time, then pool (a pool's
    changes at one instant in their order)."""
    rows = sorted(((t, name, *counts) for name, fleet in fleets.items() for t, *counts in fleet.until(end_ns)),
                  key=lambda row: row[:2])
    columns = list(zip(*rows))
    return {"time_s": np.array(columns[0], dtype=np.float64) / NS_PER_S, "role": list(columns[1]),
            **{name: np.array(column, dtype=np.int64) for name, column in zip(("serving", "starting", "draining"),
                                                                              columns[2:])}}
