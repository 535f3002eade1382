"""The pass barrier: the attention-DP ranks of one worker run every pass in lockstep.

In vLLM's and SGLang's data-parallel attention, every rank of an engine steps together: each plans its own
batch, the forward pass of all ranks runs as one (the MoE or tensor-parallel collectives join them), and it
lasts as long as the slowest rank. A rank with nothing to run still joins (a dummy batch). Here each rank's
process hands its plan in and waits; the worker's process waits until every plan is in, prices the pass,
lets its time go by, applies the outcome and releases the ranks to plan again.
"""

from __future__ import annotations

import simpy
from simpy.events import Event

from simmodel.engine.scheduler.base import SchedulerOutput


class PassBarrier:
    """Where the ranks of one worker meet every pass."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._plans: list[SchedulerOutput | None] = []
        self._num_submitted = 0
        self.all_in: Event = env.event()
        """Fires once every rank has handed in its plan for this round."""
        self._pass_done: Event = env.event()

    def add_rank(self) -> None:
        self._plans.append(None)

    @property
    def is_open(self) -> bool:
        """Whether no rank has handed in a plan for this round yet."""
        return self._num_submitted == 0

    def submit(self, rank_id: int, plan: SchedulerOutput) -> Event:
        """Hand in one rank's plan; the returned event fires when the pass is over."""
        self._plans[rank_id] = plan
        self._num_submitted += 1
        if self._num_submitted == len(self._plans):
            self.all_in.succeed()
        return self._pass_done

    def collect(self) -> list[SchedulerOutput]:
        """Every rank's plan of this round (once ``all_in``); the next round starts empty."""
        plans = list(self._plans)
        self._num_submitted = 0
        self.all_in = self.env.event()
        return plans

    def release(self) -> None:
        """The pass is over: the ranks plan the next one."""
        done, self._pass_done = self._pass_done, self.env.event()
        done.succeed()
