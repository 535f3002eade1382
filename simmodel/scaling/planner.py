"""The replica planner: a SimPy process that samples each scaled pool and adds or removes a worker.

``mode: load`` follows the load-based planner of NVIDIA Dynamo (its classic ``LoadPlannerDefaults``): every
``metric_interval_s`` it samples each pool's serving workers (waiting requests per worker, and the fraction of
KV blocks in use over their ranks); every ``adjustment_interval_s`` it takes the means of those samples over the
interval and, unless a worker it added is still starting, adds one worker if the mean queue is above
``queue_scale_out`` or the mean KV use above ``kv_scale_out`` (and the pool is below ``max_replicas``), else
removes one if both are below their ``scale_in`` thresholds (and the pool is above ``min_replicas``). One step a
pool per interval.

``mode: sla`` follows Dynamo's SLA planner (``sla``): at every adjustment it observes the last interval
(``observe``: the arrival rate, prompt and output lengths, the pool's own passes fitted) and sets each pool to
the workers that serve that load within ``ttft_ms`` and ``itl_ms``, adding or draining as many as it takes.
Metric samples then only find drained workers empty.

The planner reads the workers at its sample instants, so no worker's run of passes reaches past the next one
(``next_read_ns``, through ``Worker.reads_at``): what it reads is what the pass-by-pass run holds then.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from simmodel.engine.clock import to_ns
from simmodel.scaling.sla import replicas_needed, seconds_per_request

if TYPE_CHECKING:
    import simpy

    from simmodel.config.schema import PlannerSpec
    from simmodel.scaling.fleet import Fleet


class ReplicaPlanner:
    """Samples and scales ``fleets`` (by role) while ``work_left()``."""

    def __init__(self, env: simpy.Environment, spec: PlannerSpec, fleets: dict[str, Fleet],
                 work_left: Callable[[], bool], observe: Callable[[str, int, int], tuple] | None = None) -> None:
        self.env, self.spec, self.fleets, self.work_left = env, spec, fleets, work_left
        self.observe = observe
        """``sla``: per pool, what it saw from one instant to another (``observe.observe``'s ``Observation``, and
        the ranks a worker has and the most sequences a rank may decode at that context), or None."""
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
        while True:
            at = self.next_read_ns()
            yield self.env.timeout(at - self.env.now)
            if not self.work_left():  # the run is over: nothing is left to read or scale
                return
            if at == self._next_sample:
                self._sample()
                self._next_sample += self.sample_ns
            if at == self._next_adjust:
                self._decide()
                self._next_adjust += self.adjust_ns

    def _sample(self) -> None:
        for role, fleet in self.fleets.items():
            fleet.retire_drained()
            if self.spec.mode != "load":  # (the SLA mode reads the last interval's requests and passes instead)
                continue
            workers = fleet.serving()
            ranks = [rank for worker in workers for rank in worker.ranks]
            if not ranks:
                continue
            sums = self._sums[role]
            sums[0] += sum(rank.scheduler.num_queued for rank in ranks) / len(workers)
            sums[1] += sum(rank.pool.num_used_blocks / rank.pool.num_blocks for rank in ranks) / len(ranks)
            sums[2] += 1

    def _decide(self) -> None:
        if self.spec.mode == "sla":
            self._decide_sla()
            return
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

    def _decide_sla(self) -> None:
        spec, now = self.spec, self.env.now
        for role, fleet in self.fleets.items():
            if fleet.scaling:
                continue
            seen = self.observe(role, now - self.adjust_ns, now)
            if seen is None:
                continue
            obs, kind, ranks, max_batch = seen
            seconds = seconds_per_request(kind, obs.fit, obs.isl, obs.osl, spec.ttft_ms / 1e3, spec.itl_ms / 1e3,
                                          max_batch)
            bounds = spec.pools[role]
            missed = (kind != "decode" and obs.ttft_s is not None and obs.ttft_s > spec.ttft_ms / 1e3)
            target = replicas_needed(obs.rate, seconds, ranks, (bounds.min_replicas, bounds.max_replicas),
                                     fleet.count("serving") if missed else 0)
            up = fleet.count("serving") + fleet.count("starting")
            while up < target and fleet.add():
                up += 1
            while fleet.count("serving") > target and fleet.remove():
                pass
            self.decisions.append({"time_s": now / 1e9, "role": role, "rate_rps": obs.rate, "isl": obs.isl,
                                   "osl": obs.osl, "target": target})
