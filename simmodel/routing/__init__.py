"""Routers: which worker (and attention-DP rank) of a pool each request goes to, picked by ``router.type``.

``round_robin`` (``engine.placement.RoundRobin``) and ``random`` read nothing of the workers, so each
request's worker is known before it arrives and the workers plan through their own arrivals
(``placement.ArrivalRoutes``). ``least_loaded``, ``kv_aware`` and ``scored`` read the pool as it is at the
arrival (``loads``: the requests they routed, as the ranks report them; ``cache_view``: the blocks each rank
caches), so they are asked at that instant. ``docs/routing.md`` describes each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simmodel.engine.placement import RoundRobin, Router
from simmodel.routing.routers import KvAware, LeastLoaded, RandomRouter, Scored

if TYPE_CHECKING:
    import simpy

    from simmodel.config.schema import RouterSpec
    from simmodel.engine.worker import Worker

ROUTERS = {
    "round_robin": lambda workers, spec, **_: RoundRobin(workers),
    "random": RandomRouter,
    "least_loaded": LeastLoaded,
    "kv_aware": KvAware,
    "scored": Scored,
}
"""The router of each ``router.type``, built from the pool's workers, its spec, the environment (``env``) and
the traffic's sessions (``sessions``, or None)."""


def make_router(spec: RouterSpec, workers: list[Worker], env: simpy.Environment, sessions=None,
                predicts: bool = True) -> Router:
    """The pool's router. ``predicts``: whether the cached tokens it expects for a request are kept on the
    request (``predicted_cached_tokens``; not for a decode pool, whose prefix the prefill side computed)."""
    router = ROUTERS[spec.type](workers, spec, env=env, sessions=sessions)
    router.predicts = predicts
    return router


def router_predicts(router: Router) -> bool:
    """Whether the router keeps the cached tokens it expects on each request (``predicted_cached_tokens``)."""
    return getattr(router, "predicts", False) and getattr(router, "view", None) is not None


__all__ = ["ROUTERS", "make_router", "router_predicts"]
