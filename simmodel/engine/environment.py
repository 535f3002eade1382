"""The SimPy environment a simulation runs on, with one more rank among the events of one instant.

SimPy processes the events due at one instant by priority (``URGENT`` 0, then ``NORMAL`` 1), then in the
order they were scheduled. A pass end, and a worker waking to plan, must come after every other event of
its instant: an arrival at a pass's very end joins the next pass, as in vLLM, whose engine reads new
requests before it schedules. ``Late`` events take a third priority, after ``NORMAL``; the environment
gives it to them when they are scheduled (``Environment.schedule``, SimPy's own hook for that).
"""

from __future__ import annotations

from typing import Any

import simpy
from simpy.events import NORMAL, Timeout

LATE = NORMAL + 1
"""The priority of ``Late`` events: after every normal event of their instant."""


class Environment(simpy.Environment):
    """SimPy's environment, scheduling ``Late`` events after every normal event of their instant."""

    def schedule(self, event: simpy.Event, priority: int = NORMAL, delay: float = 0) -> None:
        super().schedule(event, LATE if type(event) is Late else priority, delay)


class Late(Timeout):
    """A timeout that fires ``delay`` from now, after every normal event of that instant (on an
    ``Environment`` of this module only)."""

    def __init__(self, env: Environment, delay: int = 0, value: Any = None) -> None:
        if not isinstance(env, Environment):
            raise TypeError("Late events need simmodel.engine.environment.Environment (plain SimPy would fire "
                            "them as normal timeouts)")
        super().__init__(env, delay, value)
