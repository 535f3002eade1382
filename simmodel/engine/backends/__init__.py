"""Serving engines: what vLLM, SGLang and TensorRT-LLM each bring to a simulation, picked by ``engine.backend``.

A backend builds a role's workers (each rank's scheduler and KV pool), places a new request on them, says
the longest prompt it serves and adds its own figures to the summary. Everything else (traffic, routers,
the pass loop, KV transfers, the results) is shared, so a new engine is one more entry in ``BACKENDS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from simmodel.engine.backends.sglang import SglangBackend
from simmodel.engine.backends.trtllm import TrtllmBackend
from simmodel.engine.backends.vllm import VllmBackend

if TYPE_CHECKING:
    from simmodel.config.schema import Scenario, WorkerRole
    from simmodel.engine.rank import Rank
    from simmodel.engine.request import Request
    from simmodel.engine.worker import Worker
    from simmodel.perf.timing import PassTiming


class Backend(Protocol):
    """One serving engine inside a ``Simulation`` (which it is given, and reads only public attributes of)."""

    destination_first: bool
    """P/D handoffs: the decode rank reserves the prompt's KV before the prefill starts (SGLang), instead of
    at the transfer's start (vLLM's NIXL connector)."""
    routes_ahead: bool
    """Whether an arrival only creates a request and queues it on the worker its router picks (no frontend,
    no per-request work before the scheduler), so an open-loop load can be routed ahead (``Worker.arrivals``)."""

    @staticmethod
    def max_prompt_tokens(scenario: Scenario) -> int:
        """The longest prompt plus one that every role accepts."""
        ...

    def build_pool(self, role: WorkerRole, timing: PassTiming, count: int | None = None) -> list[Worker]:
        """``replicas`` workers (or ``count``: a scaled pool's most) of ``attention_data`` ranks, each rank with its
        own scheduler and KV pool."""
        ...

    def place(self, request: Request, at: int | None) -> Rank | None:
        """Send a new request to a worker, then a rank (``at``: the arrival instant of a request made ahead)."""
        ...

    def summary(self) -> dict:
        """The backend's own summary figures."""
        ...


BACKENDS: dict[str, type] = {"vllm": VllmBackend, "sglang": SglangBackend, "trtllm": TrtllmBackend}
"""The backend of each ``engine.backend`` value."""
