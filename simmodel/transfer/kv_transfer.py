"""The P/D handoff: one SimPy process per request carries its KV from a prefill to a decode worker.

vLLM hands off source-first: when the prefill pass that completes a prompt ends, the prefill rank keeps
the request's KV blocks; the decode side picks a worker and rank and reserves blocks for the prompt
(waiting, first come first served, while that rank's KV is full: a slow decode side back-pressures
prefill); then the KV crosses the link in ``latency + prompt tokens × bytes per token / bandwidth``;
then the prefill rank frees its blocks and the decode rank admits the request ahead of new work. Its
first decode pass produces the client's first token.

With ``contention: shared_link`` each prefill worker has one outgoing and each decode worker one
incoming link (``simpy.Resource`` of capacity 1): concurrent transfers queue on them, and the waiting
shows in TTFT. With ``none`` transfers overlap freely.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from simmodel.config.schema import KvTransferSpec
from simmodel.engine.clock import NS_PER_S
from simmodel.engine.kv_cache import cdiv
from simmodel.engine.rank import Rank
from simmodel.engine.request import Request
from simmodel.engine.worker import Worker
from simmodel.metrics.records import EventKind, Recorder


class KvTransfer:
    """Hands finished prefill legs to the decode pool; owns the links between the two pools."""

    def __init__(self, env: simpy.Environment, spec: KvTransferSpec, bytes_per_token: float,
                 prefill_workers: list[Worker], decode_workers: list[Worker],
                 pick_decode: Callable[[Request], Rank], recorder: Recorder) -> None:
        self.env, self.spec, self.recorder, self.pick_decode = env, spec, recorder, pick_decode
        self.bytes_per_token = bytes_per_token
        shared = spec.contention == "shared_link"
        self.out_links = {id(w): simpy.Resource(env, 1) for w in prefill_workers} if shared else {}
        self.in_links = {id(w): simpy.Resource(env, 1) for w in decode_workers} if shared else {}
        self.num_transfers = 0

    def duration_ns(self, num_tokens: int) -> int:
        """Link latency plus the prompt's KV bytes over the bandwidth (no bandwidth: no transfer time)."""
        seconds = self.spec.latency_ms / 1000.0
        if self.spec.bandwidth_gb_per_second is not None:
            seconds += num_tokens * self.bytes_per_token / (self.spec.bandwidth_gb_per_second * 1e9)
        return int(round(seconds * NS_PER_S))

    def start(self, source: Rank, leg: Request) -> None:
        """Called when a prefill leg finishes: begin its handoff process."""
        self.env.process(self.run(source, leg))

    def run(self, source: Rank, leg: Request) -> Generator[simpy.Event, Any, None]:
        client = leg.client
        assert client is not None
        client.prefill_done_at = leg.finished_at
        client.first_admitted_at = leg.first_admitted_at
        client.prefill_worker, client.prefill_dp_rank = leg.worker, leg.dp_rank
        client.num_preemptions += leg.num_preemptions
        target = self.pick_decode(client)
        yield target.reserve(cdiv(client.num_prompt_tokens, target.pool.block_size))
        client.num_blocks = cdiv(client.num_prompt_tokens, target.pool.block_size)
        links = []
        if self.out_links:
            for link in (self.out_links[id(source.worker)], self.in_links[id(target.worker)]):
                request = link.request()
                yield request
                links.append((link, request))
        self._event(EventKind.TRANSFER_START, source, client)
        client.transfer_start_at = self.env.now
        yield self.env.timeout(self.duration_ns(client.num_prompt_tokens))
        for link, request in links:
            link.release(request)
        client.transfer_end_at = client.source_released_at = self.env.now
        self.num_transfers += 1
        self._event(EventKind.TRANSFER_END, target, client)
        source.release(leg)
        self._event(EventKind.SOURCE_RELEASED, source, client)
        source.worker.notify()  # freed prefill blocks may admit the next prompt
        target.add_handoff(client)
        target.worker.notify()

    def _event(self, kind: EventKind, rank: Rank, client: Request) -> None:
        self.recorder.event(self.env.now, kind, rank.worker.worker_id, rank.rank_id, client.request_id,
                            client.num_prompt_tokens, rank.role)
