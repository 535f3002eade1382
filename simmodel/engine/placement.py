"""Placement: which worker of a role a request goes to.

A serving frontend (vLLM's API server behind a load balancer, Dynamo's router) picks one worker of a pool
for each new request. A ``Router`` makes that choice; the worker then picks the attention-DP rank (the
trace's ``dp_rank`` hint, else its own round robin, ``Worker.pick_rank``).

Round robin reads nothing of the workers' state, so its choice for the n-th request of a pool is known
before that request arrives. ``ArrivalRoutes`` uses that: under an open-loop load it tells each worker
which requests will come to it and when, so that a worker can plan its passes through its own arrivals
without waiting for the other workers (``traffic.source.WorkerArrivals``). A router that reads the
workers' state (a KV-aware router) must be asked at the arrival instant, and sets ``reads_state``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from simmodel.engine.request import Request
    from simmodel.engine.worker import Worker


class Router(Protocol):
    """Chooses the worker of a pool that a request goes to."""

    reads_state: bool
    """Whether a choice reads the workers' state (then it can only be made at the request's arrival)."""
    workers: list[Worker]
    """The pool it picks from."""

    def pick(self, request: Request | None) -> Worker:
        """The worker for the next request placed on this pool."""
        ...

    def serve(self, workers: list[Worker]) -> None:
        """From now on pick among ``workers`` only (a replica planner added or removed some)."""
        ...


class RoundRobin:
    """Each request to the next worker of the pool in turn, whatever their load (vLLM's and Dynamo's
    default for a pool of identical replicas)."""

    reads_state = False

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers
        self._next = 0

    def pick(self, request: Request | None) -> Worker:
        worker = self.workers[self._next]
        self._next = (self._next + 1) % len(self.workers)
        return worker

    def serve(self, workers: list[Worker]) -> None:
        """Take turns over ``workers`` from now on, the turn staying where it was (modulo their number)."""
        self.workers = list(workers)
        self._next %= len(self.workers)


class ArrivalRoutes:
    """The worker each request of an open-loop load goes to, asked of a router that reads no state, in
    request order, ahead of the arrivals.

    ``rejected(i)`` says whether request ``i`` is refused before placement (it then takes no turn of the
    router). Routes are found in chunks as far as they are asked for.
    """

    CHUNK = 1024

    def __init__(self, router: Router, rejected, limit: int | None) -> None:
        if router.reads_state:
            raise ValueError("routes can be known ahead only for a router that reads no state")
        self.router, self.rejected, self.limit = router, rejected, limit
        self.index_of = {id(w): k for k, w in enumerate(router.workers)}
        self._routes = np.zeros(0, dtype=np.int64)
        """Per request: the index of its worker in the router's pool, or −1 if refused."""
        self._of_worker: list[list[int]] = [[] for _ in router.workers]
        """Per worker: its requests, in request order, as far as routes are found."""

    def _extend(self) -> bool:
        """Route the next chunk of requests; False if the load has no more."""
        lo = len(self._routes)
        hi = lo + self.CHUNK if self.limit is None else min(lo + self.CHUNK, self.limit)
        if hi <= lo:
            return False
        more = np.array([-1 if self.rejected(j) else self.index_of[id(self.router.pick(None))]
                         for j in range(lo, hi)], dtype=np.int64)
        self._routes = np.concatenate((self._routes, more))
        for k, indices in enumerate(self._of_worker):
            indices.extend((np.flatnonzero(more == k) + lo).tolist())
        return True

    def worker_index(self, i: int) -> int:
        """The pool index of request ``i``'s worker (−1: it is refused before placement)."""
        while i >= len(self._routes):
            if not self._extend():
                raise IndexError(f"request {i} is past the load's last request")
        return int(self._routes[i])

    def worker(self, i: int) -> Worker:
        return self.router.workers[self.worker_index(i)]

    def request_of(self, k: int, position: int) -> int | None:
        """The request number ``position`` (from 0) of those going to worker ``k``, or None if the load has
        no more."""
        indices = self._of_worker[k]
        while position >= len(indices):
            if not self._extend():
                return None
        return indices[position]


def prefill_leg(request: Request, on_finish) -> Request:
    """Disaggregated serving: the prefill pool's part of ``request``, a one-token request whose finish
    (``on_finish``) hands its KV to the decode side. The request then only waits for that KV."""
    from simmodel.engine.request import Request

    leg = Request(request.request_id, request.arrived_at, request.num_prompt_tokens, 1,
                  request.prefill_dp_rank_hint)
    leg.bootstrap, leg.client = True, request
    request.prefill_leg = leg
    leg.on_finish = on_finish
    request.kv_transferred = True
    return leg


def take_prefill_figures(client: Request, leg: Request) -> None:
    """Show on a disaggregated request what its prefill leg did: its admission, prefill worker and rank,
    preemptions, tokens found in the prefill rank's caches (GPU and host) and the router's prediction (at the
    handoff, ``KvTransfer``; or on a copy, for a request still on its prefill worker when results are taken)."""
    client.first_admitted_at = leg.first_admitted_at
    client.prefill_worker, client.prefill_dp_rank = leg.worker, leg.dp_rank
    client.num_preemptions += leg.num_preemptions
    client.num_cached_tokens = leg.num_cached_tokens
    client.num_host_cached_tokens = leg.num_host_cached_tokens
    client.host_load_start_at, client.host_load_end_at = leg.host_load_start_at, leg.host_load_end_at
    client.num_storage_cached_tokens = leg.num_storage_cached_tokens
    client.storage_load_start_at, client.storage_load_end_at = leg.storage_load_start_at, leg.storage_load_end_at
    client.predicted_cached_tokens = leg.predicted_cached_tokens
