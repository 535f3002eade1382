"""The P/D handoff: a request's KV moves from a prefill worker to a decode worker.

vLLM hands off source-first, and each side acts when its scheduler runs:

1. the prefill pass that completes a prompt ends (its one sampled token is a bootstrap the client never
   sees); the prefill rank keeps the request's KV blocks, and the request joins the waiting queue of a
   decode rank chosen round robin;
2. a later ``schedule()`` of that decode rank reserves blocks for the whole prompt, in queue order (a
   full decode KV cache holds the request back, and its prefill blocks stay held: back-pressure);
3. the KV crosses the link: ``latency + prompt tokens × bytes per token / bandwidth``;
4. the decode rank admits the request at its next pass, ahead of other waiting work; that pass's token
   is the client's first. The prefill rank frees the blocks at its next pass end (at once if idle).

SGLang hands off destination-first (``destination_first``): the decode rank reserves the prompt's KV when a
request is routed to it (at its next plan, in queue order), and only then is the prefill leg queued on a
prefill rank; the transfer starts as soon as the prefill pass ends, the prefill rank keeps the prompt's
KV until the transfer is over (then it stays cached in its radix tree), and the arrived request joins the
decode rank's running batch with the prefill's token, which the client receives together with the first
decoded one.

With ``contention: shared_link`` each prefill worker has one outgoing and each decode worker one
incoming link (``simpy.Resource`` of capacity 1): concurrent transfers queue on them, and the waiting
shows in TTFT. With ``none`` transfers overlap freely. With ``via: storage`` the KV goes through the prefill
role's shared store instead, written as the prefill pass ends and read once the decode rank has reserved
(``routes.StoreRoute``); the prefill rank then frees it once its write is over.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from simmodel.config.schema import KvTransferSpec, StorageSpec
from simmodel.engine.placement import take_prefill_figures
from simmodel.engine.rank import Rank
from simmodel.engine.recorder import EventKind, Recorder
from simmodel.engine.request import Request
from simmodel.engine.worker import Worker
from simmodel.transfer.routes import ROUTES


class KvTransfer:
    """Hands finished prefill legs to the decode pool; owns the links between the two pools."""

    def __init__(self, env: simpy.Environment, spec: KvTransferSpec, bytes_per_token: float,
                 prefill_workers: list[Worker], decode_workers: list[Worker],
                 pick_decode: Callable[[Request], Rank], recorder: Recorder, destination_first: bool = False,
                 store: StorageSpec | None = None) -> None:
        self.env, self.spec, self.recorder, self.pick_decode = env, spec, recorder, pick_decode
        self.destination_first = destination_first
        self._expected: dict[Request, tuple[Rank, Callable[[Request], None]]] = {}
        """Destination-first: the decode rank each routed request reserves on, and how to place its leg."""
        self.prefill_workers = prefill_workers
        self.route = ROUTES[spec.via](env, spec, bytes_per_token, prefill_workers, decode_workers, store)
        """How the KV moves (``routes``): over the link, or through the prefill role's shared store (``store``)."""
        self.num_transfers = 0
        for worker in decode_workers:
            for rank in worker.ranks:
                rank.scheduler.on_kv_reserved = self._reserved_on(rank)

    def expect(self, target: Rank, client: Request, place_leg: Callable[[Request], None]) -> None:
        """Destination-first: ``client`` is routed to ``target``; once it reserves, ``place_leg`` queues the
        prefill leg."""
        self._expected[client] = (target, place_leg)

    def leg_finished(self, leg: Request) -> None:
        """A prefill leg's finish (its ``on_finish``): hand it off from the rank it ran on (``prefill_done``)."""
        self.prefill_done(self.prefill_workers[leg.worker].ranks[leg.dp_rank], leg)

    def prefill_done(self, source: Rank, leg: Request) -> None:
        """A prefill leg finished: queue its client request on a decode rank (step 1); destination-first,
        start the transfer to the rank that already reserved."""
        client = leg.client
        assert client is not None
        client.prefill_done_at = leg.finished_at
        take_prefill_figures(client, leg)
        client.source = (source, leg)
        self.route.put(source, client, lambda: self._started(source, client),
                       lambda: source.release_when_idle(leg, self._released))
        if self.destination_first:
            target, _ = self._expected.pop(client)
            self.env.process(self._transfer(target, client))
            return
        target = self.pick_decode(client)
        target.add_remote(client)
        target.worker.notify()

    def _reserved_on(self, target: Rank) -> Callable[[Request], None]:
        def reserved(client: Request) -> None:  # step 2, called from the decode rank's schedule()
            if self.destination_first:
                # (SGLang's decode side caches nothing it is sent: every page of the prompt)
                client.num_missing_blocks = -(-client.num_prompt_tokens // target.pool.block_size)
                self._expected[client][1](client.prefill_leg)
                return
            self.env.process(self._transfer(target, client))
        return reserved

    def _started(self, source: Rank, client: Request) -> None:
        client.transfer_start_at = self.env.now
        self._event(EventKind.TRANSFER_START, source, client)

    def _transfer(self, target: Rank, client: Request) -> Generator[simpy.Event, Any, None]:
        source = None if client.source is None else client.source[0]  # (through a store: freed once written)
        tokens = client.num_prompt_tokens
        if self.spec.timing_mode == "destination_missing":  # only the decode blocks not already cached
            tokens = client.num_missing_blocks * target.pool.block_size
        yield from self.route.move(source, target, client, tokens, lambda: self._started(source, client))
        client.transfer_end_at = self.env.now
        self.num_transfers += 1
        self._event(EventKind.TRANSFER_END, target, client)
        if self.destination_first and not target.scheduler.decodes(client):
            target.finish_handoff(client)  # the prefill's token was its only one
        else:
            target.add_handoff(client)
            target.worker.notify()
        if not self.route.releases_at_put:
            assert source is not None
            source.release_when_idle(client.source[1], self._released)

    def _released(self, leg: Request) -> None:
        client = leg.client
        assert client is not None
        client.source_released_at = self.env.now
        source = client.source[0]
        self._event(EventKind.SOURCE_RELEASED, source, client)
        client.source = None

    def _event(self, kind: EventKind, rank: Rank, client: Request) -> None:
        self.recorder.event(self.env.now, kind, rank.worker.worker_id, rank.rank_id, client.request_id,
                            client.num_prompt_tokens, rank.role)
