"""What every backend's per-rank scheduler offers the rank that drives it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

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
    kv_blocks_used: int = 0
    """KV blocks in use on the rank once this pass was planned."""

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_new_tokens)

    @property
    def is_empty(self) -> bool:
        return not self.requests


class Scheduler(Protocol):
    """Plain-Python scheduling policy of one rank; no time passes inside it."""

    running: list[Request]

    def add_request(self, request: Request) -> None: ...

    def has_requests(self) -> bool: ...

    def schedule(self) -> SchedulerOutput: ...

    def update_from_output(self, output: SchedulerOutput) -> tuple[list[Request], list[Request]]: ...
