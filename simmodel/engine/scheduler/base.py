"""What every backend's per-rank scheduler offers the rank that drives it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from simmodel.engine.request import Request


@dataclass(slots=True)
class SchedulerOutput:
    """One rank's plan for one pass: who runs, with how many new tokens each.

    ``num_context_tokens[i]`` is the number of tokens of ``requests[i]`` already in KV before
    this pass; ``is_decode[i]`` marks a one-token step of a request that has already sampled;
    ``samples[i]`` marks a chunk that reaches the end of its sequence and so samples a token.
    """

    requests: list[Request] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    num_context_tokens: list[int] = field(default_factory=list)
    is_decode: list[bool] = field(default_factory=list)
    samples: list[bool] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    resumed: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    drafts: dict[Request, int] = field(default_factory=dict)
    """Speculative decoding: the drafts this pass verifies, per request that has any (several passes may be in
    flight under async scheduling, each verifying its own)."""
    padded: set[Request] = field(default_factory=set)
    """Of those, the requests whose drafts are placeholders padding an admission to a uniform decode (token id −1
    in vLLM): never accepted."""
    kv_blocks_used: int = 0
    """KV blocks in use on the rank once this pass was planned."""
    host_stores: list | None = None
    """With a host KV tier: the blocks the tier took slots for as the pass was planned, per request, copied when it
    ends (``VllmCpuOffload.planned``)."""
    host_loads: list | None = None
    """With a host KV tier: the loads planned with the pass, which start when it ends (``VllmCpuOffload.planned``)."""
    host_loaded: list | None = None
    """SGLang's HiCache: (request, pages) loaded from the host for this pass, copied beside its forward pass
    (``SglangHiCache.pass_ns``)."""
    host_flush: tuple | None = None
    """vLLM with a host KV tier: (when the pass may start at the earliest, the copies to the tier it makes before
    it) where it reuses GPU blocks a copy still reads (``VllmCpuOffload._flushes``)."""
    host_synced_pages: int = 0
    """SGLang's HiCache under ``write_back``: pages copied to the host while evicting since the last plan; the
    pass starts once they land."""

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_new_tokens)

    @property
    def is_empty(self) -> bool:
        return not self.requests


class Scheduler(Protocol):
    """Plain-Python scheduling policy of one rank, as its rank drives it; no time passes inside it. Every KV
    block it holds is in ``pool``. (The pass planner, ``engine.planner``, drives
    vLLM's scheduler through more of its own API: ``admit_waiting``, ``retire``, its queues and flags.)"""

    running: list[Request]
    """Requests with KV on the rank, in the order the engine schedules them."""
    waiting: Any
    """Requests queued for admission (a deque), first in line first."""
    pool: Any
    """The rank's KV pool (``kv_cache.BlockPool``, ``PrefixCachingBlockPool`` or SGLang's radix cache)."""
    planner: str | None
    """Which of the pass planner's ways to plan runs (``engine.planner.PLANNERS``) serves it; None: none."""

    def add_request(self, request: Request) -> None:
        """Queue a new request."""
        ...

    def has_requests(self) -> bool:
        """Whether any request is running or queued here."""
        ...

    def reset_prefix_cache(self) -> None:
        """Drop everything the rank's prefix cache holds (it holds no request: a worker leaving its pool)."""
        ...

    @property
    def num_queued(self) -> int:
        """Requests waiting here for the scheduler to take them (what a serving metric reports as waiting)."""
        ...

    def schedule(self, arrived_before: int | None = None, throttle_prefills: bool = False) -> SchedulerOutput:
        """Plan the next pass: the requests that run and their new tokens. ``arrived_before``: requests
        arriving at or after it are not read yet (async engines); ``throttle_prefills``: this pass may not
        start new prefills (vLLM's prefill schedule interval, SGLang's prefill/decode interval)."""
        ...

    def update_from_output(self, output: SchedulerOutput) -> tuple[list[Request], list[Request]]:
        """Apply a pass's outcome; returns the requests that sampled a token and those that finished."""
        ...

    def add_handoff(self, request: Request) -> None:
        """P/D decode side: a request whose prompt KV has arrived joins the next pass."""
        ...

    def release(self, request: Request) -> None:
        """P/D prefill side: free the KV a finished prefill leg held for its transfer."""
        ...


class PullHandoffs(Protocol):
    """P/D handoffs where the decode side reserves a prompt's KV when its transfer starts (vLLM, NIXL)."""

    def add_remote(self, request: Request) -> None:
        """A request prefilled elsewhere waits here until ``schedule()`` reserves its KV blocks."""
        ...


class DestinationFirstHandoffs(Protocol):
    """P/D handoffs where the decode rank reserves a prompt's KV before its prefill starts (SGLang)."""

    def add_prealloc(self, request: Request) -> None:
        """Reserve the KV of a prompt about to be prefilled elsewhere."""
        ...

    def drop_handoff(self, request: Request) -> None:
        """A one-token request is done once its KV arrives: drop its reservation."""
        ...

    def decodes(self, request: Request) -> bool:
        """Whether the request has tokens to decode here once its KV arrives."""
        ...
