"""The replica planner: a SimPy process that samples each scaled pool and adds or removes a worker.

``mode: load`` follows the load-based planner of NVIDIA Dynamo (its classic ``LoadPlannerDefaults``): every
``metric_interval_s`` it samples each pool's serving workers (waiting requests per worker, and the fraction of
KV blocks in use over their ranks); every ``adjustment_interval_s`` it takes the means of those samples over the
interval and, unless a worker it added is still starting, adds one worker if the mean queue is above
``queue_scale_out`` or the mean KV use above ``kv_scale_out`` (and the pool is below ``max_replicas``), else
removes one if both are below their ``scale_in`` thresholds (and the pool is above ``min_replicas``). One step a
pool per interval.

The planner reads the workers at its sample instants, so no worker's run of passes reaches past the next one
(``next_read_ns``, through ``Worker.reads_at``): what it reads is what the pass-by-pass run holds then.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from simmodel.engine.clock import to_ns

if TYPE_CHECKING:
    import simpy

    from simmodel.config.schema import PlannerSpec
    from simmodel.scaling.fleet import Fleet


class ReplicaPlanner:
    """Samples and scales ``fleets`` (by role) while ``work_left()``."""

    def __init__(self, env: simpy.Environment, spec: PlannerSpec, fleets: dict[str, Fleet],
                 work_left: Callable[[], bool]) -> None:
        self.env, self.spec, self.fleets, self.work_left = env, spec, fleets, work_left
        self.sample_ns = to_ns(spec.metric_interval_s)
        self.adjust_ns = to_ns(spec.adjustment_interval_s)
        self._next_sample, self._next_adjust = self.sample_ns, self.adjust_ns
        self._sums = {role: [0.0, 0.0, 0] for role in fleets}
        """Per pool since the last decision: summed mean queue, summed mean KV use, samples."""
        self.decisions: list[dict] = []
        """Each decision: its instant, pool, the means it read and what it did."""

    def next_read_ns(self) -> int:
        """The next instant the planner reads the workers."""
        return min(self._next_sample, self._next_adjust)

    def run(self) -> Generator[simpy.Event, Any, None]:
        while self.work_left():
            at = self.next_read_ns()
            yield self.env.timeout(at - self.env.now)
            if at == self._next_sample:
                self._sample()
                self._next_sample += self.sample_ns
            if at == self._next_adjust:
                self._decide()
                self._next_adjust += self.adjust_ns

    def _sample(self) -> None:
        for role, fleet in self.fleets.items():
            fleet.retire_drained()
            workers = fleet.serving()
            ranks = [rank for worker in workers for rank in worker.ranks]
            if not ranks:
                continue
            sums = self._sums[role]
            sums[0] += sum(rank.scheduler.num_queued for rank in ranks) / len(workers)
            sums[1] += sum(rank.pool.num_used_blocks / rank.pool.num_blocks for rank in ranks) / len(ranks)
            sums[2] += 1

    def _decide(self) -> None:
        spec = self.spec
        for role, fleet in self.fleets.items():
            queue, kv, samples = self._sums[role]
            self._sums[role] = [0.0, 0.0, 0]
            if not samples or fleet.scaling:
                continue
            queue, kv = queue / samples, kv / samples
            bounds = spec.pools[role]
            up = fleet.count("serving") + fleet.count("starting")
            action = None
            if (queue > spec.queue_scale_out or kv > spec.kv_scale_out) and up < bounds.max_replicas:
                action = "add" if fleet.add() else None
            elif (queue < spec.queue_scale_in and kv < spec.kv_scale_in and fleet.count("serving") > bounds.min_replicas):
                action = "remove" if fleet.remove() else None
            self.decisions.append({"time_s": self.env.now / 1e9, "role": role, "mean_queue": queue,
                                   "mean_kv_usage": kv, "action": action})
