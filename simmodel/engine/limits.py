"""Hard safety limits of a run (``limits``): no input can make a run go on forever.

A run stops with a ``SimulationError`` naming the limit once it would plan more passes, create more
requests or reach a later simulated time than allowed. Limits are not stop conditions (see
``traffic.stop``): reaching one is an error, and nothing is written.
"""

from __future__ import annotations

from simmodel.config.schema import LimitsSpec
from simmodel.engine.clock import NS_PER_S, to_ns
from simmodel.errors import SimulationError


class RunLimits:
    """Counts passes across every worker of a run and checks requests and simulated time."""

    def __init__(self, spec: LimitsSpec) -> None:
        self.spec = spec
        self.num_passes = 0
        self.max_time_ns = to_ns(spec.max_virtual_time_seconds)

    def count_pass(self, start_ns: int) -> None:
        self.num_passes += 1
        if self.num_passes > self.spec.max_passes:
            raise SimulationError(f"the run exceeded limits.max_passes ({self.spec.max_passes:,} passes over all "
                                  f"workers); raise it with --set limits.max_passes=N if the run is meant to be "
                                  f"that long")
        self.check_time(start_ns)

    def check_time(self, now_ns: int) -> None:
        if now_ns > self.max_time_ns:
            raise SimulationError(f"the run reached {now_ns / NS_PER_S:,.9g} s of simulated time, beyond "
                                  f"limits.max_virtual_time_seconds ({self.spec.max_virtual_time_seconds:g}); "
                                  f"raise it with --set limits.max_virtual_time_seconds=S if that is intended")

    def first_request_over(self) -> int:
        """The number (from 0) of the first request that breaks ``max_requests`` (``check_requests``)."""
        return self.spec.max_requests

    def check_requests(self, num_requests: int) -> None:
        if num_requests > self.spec.max_requests:
            raise SimulationError(f"the run created more than limits.max_requests ({self.spec.max_requests:,}) "
                                  f"requests; bound the traffic (traffic.stop) or raise it with "
                                  f"--set limits.max_requests=N")
