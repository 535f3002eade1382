"""The traffic process: creates requests open loop (timed arrivals) or closed loop (N clients)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from simmodel.config.schema import Scenario, SyntheticSource
from simmodel.engine.clock import to_ns
from simmodel.engine.kv_cache import trace_block_content
from simmodel.engine.request import Request, RequestStatus
from simmodel.metrics.records import EventKind, Recorder
from simmodel.traffic.arrivals import gaps
from simmodel.traffic.lengths import sample_lengths
from simmodel.traffic.traces import TraceData

CHUNK = 1024  # draws are made in fixed-size chunks so a run's randomness never depends on its length


class RequestStream:
    """Request ``i``'s lengths, trace hints and (open loop) arrival time, generated on demand.

    Synthetic lengths come from two seeded streams (input, output); Poisson gaps from a third, or
    from ``traffic.load.seed`` when given. A trace supplies lengths in file order and, with
    ``trace_timestamps``, its arrivals divided by ``speedup``.
    """

    def __init__(self, scenario: Scenario, trace: TraceData | None) -> None:
        traffic = scenario.traffic
        self.source, self.load, self.trace = traffic.source, traffic.load, trace
        arrivals_seq, input_seq, output_seq = np.random.SeedSequence(scenario.engine.seed).spawn(3)
        if traffic.load.seed is not None:
            arrivals_seq = np.random.SeedSequence(traffic.load.seed)
        self._rngs = [np.random.default_rng(s) for s in (arrivals_seq, input_seq, output_seq)]
        limits = [n for n in (traffic.stop.requests, None if trace is None else len(trace)) if n is not None]
        self.limit: int | None = min(limits) if limits else None
        self.limits = None
        """The run's ``RunLimits`` (requests created), if any."""
        self.extra_prompt_tokens = 0
        """Tokens every prompt carries besides its text (a vision-language model's image tokens)."""
        self._arrival = np.zeros(0)
        self._isl = np.zeros(0, dtype=np.int64)
        self._osl = np.zeros(0, dtype=np.int64)
        if trace is not None:
            self._isl, self._osl = trace.input_tokens, trace.output_tokens
            if traffic.load.type == "trace_timestamps":
                self._arrival = trace.arrival_s / traffic.load.speedup

    def request(self, i: int) -> tuple[int, int, int | None, tuple[int, ...] | None]:
        """Prompt tokens, output tokens, dp_rank hint and hash ids of request ``i``."""
        while i >= len(self._isl):
            assert isinstance(self.source, SyntheticSource)
            self._isl = np.concatenate([self._isl, sample_lengths(self.source.input_tokens, self._rngs[1], CHUNK)])
            self._osl = np.concatenate([self._osl, sample_lengths(self.source.output_tokens, self._rngs[2], CHUNK)])
        isl = int(self._isl[i]) + self.extra_prompt_tokens
        if self.trace is None:
            return isl, int(self._osl[i]), None, None
        hint = int(self.trace.dp_rank[i])
        return isl, int(self._osl[i]), (hint if hint >= 0 else None), self.trace.hash_ids[i]

    def block_content(self, i: int, num_prompt_tokens: int, block_size: int):
        """What each KV block of request ``i`` holds, for prefix caching: trace hash ids, a synthetic
        shared prefix, or content unique to the request."""
        unique = (-1, i)  # integers only: hashes of str are salted per process
        if self.trace is not None and self.trace.hash_ids[i] is not None:
            return trace_block_content(self.trace.hash_ids[i], self.source.block_size, num_prompt_tokens,
                                       block_size, unique)
        shared = getattr(self.source, "shared_prefix", None)
        if shared is not None:
            group, limit = i % shared.groups, min(shared.tokens, num_prompt_tokens)

            def content(j: int) -> object:
                return (-2, group, j) if (j + 1) * block_size <= limit else (unique, j)
            return content
        return lambda j: (unique, j)

    def prompt_segments(self, i: int, num_prompt_tokens: int, trace_block_size: int | None = None) -> list:
        """What request ``i``'s prompt tokens are, as radix-cache segments ``(content key, tokens)``: one per
        trace hash id (``trace_block_size`` tokens each, the last truncated), a synthetic shared prefix
        then the request's own tokens, or the request's own tokens only."""
        unique = (-1, i)
        if self.trace is not None and self.trace.hash_ids[i] is not None:
            size = trace_block_size or self.source.block_size
            segs, left = [], num_prompt_tokens
            for h in self.trace.hash_ids[i]:
                if left <= 0:
                    break
                n = min(size, left)
                segs.append(((-3, h), n))
                left -= n
            if left > 0:
                segs.append((unique, left))
            return segs
        shared = getattr(self.source, "shared_prefix", None)
        if shared is not None:
            limit = min(shared.tokens, num_prompt_tokens)
            segs = [((-2, i % shared.groups), limit)]
            if num_prompt_tokens > limit:
                segs.append((unique, num_prompt_tokens - limit))
            return segs
        return [(unique, num_prompt_tokens)]

    def prefill_hint(self, i: int) -> int | None:
        """The prefill rank a trace row names (disaggregated serving), if any."""
        if self.trace is None or self.trace.prefill_dp_rank[i] < 0:
            return None
        return int(self.trace.prefill_dp_rank[i])

    def arrival(self, i: int) -> float:
        """Arrival time of request ``i`` in seconds (open-loop loads only)."""
        while i >= len(self._arrival):
            start = self._arrival[-1] if len(self._arrival) else None
            steps = gaps(self.load, self._rngs[0], CHUNK)
            if start is None:
                steps[0] = 0.0
                start = 0.0
            self._arrival = np.concatenate([self._arrival, start + np.cumsum(steps)])
        return float(self._arrival[i])


class TrafficSource:
    """Injects requests into the deployment through ``place`` and keeps every request it made.

    Open loop: one timeout per arrival. Closed loop (``concurrency``): N clients each send their next
    request the moment the previous one finishes (or is rejected), until the request limit.
    """

    def __init__(self, env: simpy.Environment, stream: RequestStream, place: Callable[[Request], object],
                 recorder: Recorder, context_length: int, concurrency: int = 0) -> None:
        self.env, self.stream, self.place, self.recorder = env, stream, place, recorder
        self.context_length, self.concurrency = context_length, concurrency
        self.requests: list[Request] = []
        self.pending: simpy.Event | None = None
        """The timeout of the next open-loop arrival while it is scheduled."""

    def _has_next(self) -> bool:
        limit = self.stream.limit
        return limit is None or len(self.requests) < limit

    def quiet_until(self, end_ns: int) -> bool:
        """Whether the requests arriving from now to ``end_ns`` (open loop) leave that instant free: none
        arrives exactly then, and none breaks ``limits.max_requests``. A coalesced run spanning the next
        arrival may then end at ``end_ns``."""
        limits = self.stream.limits
        i = len(self.requests)
        while self._has_next_index(i):
            at = to_ns(self.stream.arrival(i))
            if at > end_ns:
                return True
            if at == end_ns or (limits is not None and i + 1 > limits.spec.max_requests):
                return False
            i += 1
        return True

    def _has_next_index(self, i: int) -> bool:
        limit = self.stream.limit
        return limit is None or i < limit

    def run(self) -> Generator[simpy.Event, Any, None]:
        if self.concurrency:
            for _ in range(self.concurrency):
                if not self._has_next():
                    break
                self._inject()
            return
        while self._has_next():
            at = to_ns(self.stream.arrival(len(self.requests)))
            if at > self.env.now:
                self.pending = self.env.timeout(at - self.env.now)
                yield self.pending
            self._inject()

    def _inject(self) -> None:
        """Create request number ``len(self.requests)`` now; loop while closed-loop rejections return at once."""
        while True:
            i = len(self.requests)
            if self.stream.limits is not None:
                self.stream.limits.check_requests(i + 1)
            isl, osl, hint, hashes = self.stream.request(i)
            request = Request(i, self.env.now, isl, osl, hint, hashes)
            request.prefill_dp_rank_hint = self.stream.prefill_hint(i)
            self.requests.append(request)
            self.recorder.event(self.env.now, EventKind.ARRIVAL, -1, -1, i, isl, "client")
            if self.concurrency:
                request.on_finish = self._on_finish
            if isl < self.context_length:
                self.place(request)  # the rank it lands on records the placement (maybe later: frontend)
                return
            # vLLM's server refuses a prompt at or over max_model_len before it reaches the engine.
            request.status = RequestStatus.REJECTED
            request.finished_at = self.env.now
            self.recorder.event(self.env.now, EventKind.REJECTION, -1, -1, i, isl, "client")
            if not (self.concurrency and self._has_next()):
                return

    def _on_finish(self, request: Request) -> None:
        if self._has_next():
            self._inject()
