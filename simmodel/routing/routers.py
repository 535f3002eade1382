"""The routers that read the pool (and the seeded random one): each picks a worker, and the routers that read
state also its attention-DP rank (set as the request's rank hint, which the worker then keeps).

- ``RandomRouter``: a seeded uniform draw of a worker per request (reads no state, so known ahead).
- ``LeastLoaded``: the worker with the fewest active sequences (running or queued), ties by fewest queued, then
  lowest index.
- ``KvAware``: Dynamo's KV router: per rank, cost = ``overlap_score_weight`` × prefill blocks still to compute
  (its routed prompt tokens not yet prefilled plus this prompt, in blocks, less the blocks of this prompt the
  rank caches) + active blocks (the distinct prompt blocks of the requests routed there and not finished, plus
  this prompt's full blocks beyond those it shares with them); the lowest cost wins (ties: lowest worker, then
  rank), or with ``temperature`` T > 0 a draw with weights exp(−(cost − min) / ((max − min)·T)).
- ``Scored``: llm-d's endpoint picker: a weighted sum of scorers, each in [0, 1], the highest sum wins (ties:
  lowest worker, then rank): ``prefix-cache`` (leading prompt blocks cached ÷ full prompt blocks),
  ``queue-depth`` ((most queued − queued) ÷ (most − fewest) over the ranks; 1 when all are equal),
  ``kv-utilization`` (1 − the rank's KV blocks in use ÷ its blocks), ``session-affinity`` (1 on the rank
  that served the session's previous turn).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.clock import to_ns
from simmodel.routing.cache_view import CacheView
from simmodel.routing.loads import PoolLoads

if TYPE_CHECKING:
    import simpy

    from simmodel.config.schema import RouterSpec
    from simmodel.engine.request import Request
    from simmodel.engine.worker import Worker


class RandomRouter:
    """Each request to a worker drawn uniformly from the router's own seeded stream (reads no state)."""

    reads_state = False

    def __init__(self, workers: list[Worker], spec: RouterSpec, **_) -> None:
        self.workers = workers
        self._rng = np.random.default_rng(spec.seed)

    def pick(self, request: Request | None) -> Worker:
        return self.workers[int(self._rng.integers(len(self.workers)))]

    def serve(self, workers: list[Worker]) -> None:
        self.workers = list(workers)


class _RankRouter:
    """A router that reads the pool's state and picks a rank: ``_choose`` gives the rank's index among
    ``ranks`` (worker after worker); the request keeps that rank (``dp_rank_hint``). A request whose trace
    names a rank is routed among the workers' ranks of that number only."""

    reads_state = True
    predicts = True
    """Whether the cached tokens the router expects are kept on the request (``predicted_cached_tokens``)."""

    def __init__(self, workers: list[Worker], spec: RouterSpec, env: simpy.Environment, **_) -> None:
        self.workers, self.spec, self.env = workers, spec, env
        self.loads = PoolLoads(workers)
        self.ranks = self.loads.ranks
        self.block_size = self.ranks[0].pool.block_size
        self.serving = list(workers)
        """The workers it may pick (a replica planner's serving ones; ``loads`` keeps every worker's)."""
        self._candidates = list(range(len(self.ranks)))

    def serve(self, workers: list[Worker]) -> None:
        self.serving = list(workers)
        up = {id(w) for w in workers}
        self._candidates = [c for c, rank in enumerate(self.ranks) if id(rank.worker) in up]

    def candidates(self, request: Request) -> list[int]:
        hint = request.dp_rank_hint
        if hint is None:
            return self._candidates
        return [c for c in self._candidates if self.ranks[c].rank_id == hint]

    def pick(self, request: Request) -> Worker:
        rank = self.ranks[self._choose(request)]
        request.dp_rank_hint = rank.rank_id
        return rank.worker

    def _choose(self, request: Request) -> int:
        raise NotImplementedError

    def _prompt_keys(self, request: Request) -> tuple[list, int]:
        """The prompt's full blocks: their keys (the list may run longer) and how many."""
        n = request.num_prompt_tokens // self.block_size
        return (request.block_keys.upto(n) if n else []), n


class LeastLoaded(_RankRouter):
    """The worker with the fewest active sequences (routed there and not finished, running or queued, over its
    ranks), ties by fewest queued, then index; its rank the worker's own next (round robin, or the trace's)."""

    def pick(self, request: Request) -> Worker:
        loads, ranks = self.loads, self.ranks
        per_worker: dict[int, list[int]] = {}
        for c, rank in enumerate(ranks):
            totals = per_worker.setdefault(rank.worker.worker_id, [0, 0])
            totals[0] += loads.running[c] + loads.queued[c]
            totals[1] += loads.queued[c]
        worker = min(self.serving, key=lambda w: (per_worker[w.worker_id][0], per_worker[w.worker_id][1], w.worker_id))
        rank = worker.pick_rank(request.dp_rank_hint)
        request.dp_rank_hint = rank.rank_id
        loads.routed(request, loads.index[id(rank)])
        return worker


class KvAware(_RankRouter):
    """Dynamo's KV router (see the module); the predicted cached tokens are kept on the request."""

    def __init__(self, workers: list[Worker], spec: RouterSpec, env: simpy.Environment, **_) -> None:
        super().__init__(workers, spec, env)
        self.view = CacheView(env, self.ranks, to_ns(spec.event_lag_ms / 1000.0), spec.approximate,
                              to_ns(spec.ttl_s))
        self._rng = np.random.default_rng(spec.seed) if spec.temperature > 0 else None

    def _choose(self, request: Request) -> int:
        keys, n = self._prompt_keys(request)
        isl, bs, loads = request.num_prompt_tokens, self.block_size, self.loads
        overlap = self.view.overlaps(keys, n)
        weight = self.spec.overlap_score_weight
        chosen = self.candidates(request)
        costs = [weight * max(0.0, (loads.prefill_tokens[c] + isl) / bs - overlap[c])
                 + len(loads.block_refs[c]) + n - loads.active_depth(c, keys, n) for c in chosen]
        c = chosen[self._pick_cost(costs)]
        cached = min(overlap[c] * bs, isl)
        if self.predicts:
            request.predicted_cached_tokens = cached
        loads.routed(request, c, isl - cached, keys[:n])
        if self.spec.approximate:
            self.view.remember(c, keys[:n])
        return c

    def _pick_cost(self, costs: list[float]) -> int:
        """The lowest cost's position (the first of equals), or a softmax draw over the costs."""
        low = min(costs)
        if self._rng is None:
            return costs.index(low)
        span = max(costs) - low
        if span == 0:
            weights = [1.0] * len(costs)
        else:
            scale = span * self.spec.temperature
            weights = [math.exp(-(cost - low) / scale) for cost in costs]
        u = self._rng.random() * sum(weights)
        acc = 0.0
        for i, w in enumerate(weights):
            acc += w
            if u < acc:
                return i
        return len(weights) - 1


class Scored(_RankRouter):
    """llm-d's weighted scorers (see the module); with ``prefix-cache``, the predicted cached tokens are kept on
    the request."""

    def __init__(self, workers: list[Worker], spec: RouterSpec, env: simpy.Environment, sessions=None,
                 **_) -> None:
        super().__init__(workers, spec, env)
        self.weights = dict(spec.weights)
        self.view = CacheView(env, self.ranks, to_ns(spec.event_lag_ms / 1000.0)) if "prefix-cache" in self.weights \
            else None
        self.sessions = sessions
        self._last_rank: dict[int, int] = {}
        """Session id → the rank its previous turn went to."""

    def _choose(self, request: Request) -> int:
        chosen = self.candidates(request)
        totals = [0.0] * len(chosen)
        weights, loads = self.weights, self.loads
        prefix = weights.get("prefix-cache")
        overlap = None
        if prefix is not None:
            keys, n = self._prompt_keys(request)
            overlap = self.view.overlaps(keys, n)
            if n:
                for i, c in enumerate(chosen):
                    totals[i] += prefix * overlap[c] / n
        queue = weights.get("queue-depth")
        if queue is not None:
            depths = [loads.queued[c] for c in chosen]
            most, fewest = max(depths), min(depths)
            for i, q in enumerate(depths):
                totals[i] += queue * (1.0 if most == fewest else (most - q) / (most - fewest))
        usage = weights.get("kv-utilization")
        if usage is not None:
            for i, c in enumerate(chosen):
                pool = self.ranks[c].pool
                totals[i] += usage * (1.0 - pool.num_used_blocks / pool.num_blocks)
        session = None
        affinity = weights.get("session-affinity")
        if affinity is not None:
            session = self.sessions.of_request[request.request_id][0].id
            last = self._last_rank.get(session)
            for i, c in enumerate(chosen):
                if c == last:
                    totals[i] += affinity
        c = chosen[totals.index(max(totals))]
        if session is not None:
            self._last_rank[session] = c
        if overlap is not None and self.predicts:
            request.predicted_cached_tokens = min(overlap[c] * self.block_size, request.num_prompt_tokens)
        loads.routed(request, c)
        return c
