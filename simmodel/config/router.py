"""``router``: which worker (and attention-DP rank) of a pool each request goes to, and the router's knobs.

One spec for every pool (``router: {type: kv_aware}``), or, in disaggregated mode, one per pool
(``router: {prefill: {...}, decode: {...}}``; a pool left out is routed round robin). A knob the chosen type
does not read is refused, so that every knob given has an effect.
"""

from __future__ import annotations

from simmodel.config.backends import BACKEND_RULES
from simmodel.config.node import _Node
from simmodel.config.schema import (
    DEFAULT_SCORER_WEIGHTS,
    ROUTER_TYPES,
    SCORERS,
    Engine,
    RouterSpec,
    SessionsSource,
    Traffic,
)
from simmodel.errors import ScenarioError

KNOBS = {
    "round_robin": (),
    "random": ("seed",),
    "least_loaded": (),
    "kv_aware": ("overlap_score_weight", "temperature", "seed", "event_lag_ms", "approximate", "ttl_s"),
    "scored": ("weights", "event_lag_ms"),
}
"""The knobs each router type reads."""
MAX_LAG_MS = 3_600_000.0
MAX_TTL_S = 1e9


def parse_routers(node: _Node, engine: Engine, traffic: Traffic) -> dict[str, RouterSpec]:
    """``router``: per pool (role name), its router; empty when the section is absent (round robin)."""
    if not node.data:
        node.done()
        return {}
    roles = engine.roles
    if engine.mode == "disaggregated" and any(key in node.data for key in roles):
        mixed = [key for key in node.data if key not in roles]
        if mixed:
            raise ScenarioError(f"{node.at(str(mixed[0]))}: give one router for every pool (type, …) or one per pool "
                                f"({', '.join(roles)}), not both")
        specs = {role: _router(node.node(role), engine, traffic, (role,)) for role in roles if node.has(role)}
        node.done()
        return specs
    spec = _router(node, engine, traffic, roles)
    return dict.fromkeys(roles, spec)


def _router(node: _Node, engine: Engine, traffic: Traffic, roles: tuple[str, ...]) -> RouterSpec:
    kind = node.choice("type", ROUTER_TYPES, "round_robin")
    reads = KNOBS[kind]
    every = {knob for knobs in KNOBS.values() for knob in knobs}
    for key, value in node.data.items():
        if key in every and key not in reads and value is not None:  # (null means absent)
            what = ", ".join(reads) if reads else "none"
            raise ScenarioError(f"{node.at(key)}: a {kind} router does not read it (its knobs: {what})")
    base = RouterSpec()
    temperature = node.number("temperature", base.temperature, maximum=1e6)
    if node.raw("seed", None) is not None and kind == "kv_aware" and temperature == 0:
        raise ScenarioError(f"{node.at('seed')}: a kv_aware router draws only with temperature above 0 "
                            f"(at 0 it picks the lowest cost, ties by worker and rank)")
    approximate = node.bool("approximate", base.approximate)
    if approximate and node.raw("event_lag_ms", None) is not None:
        raise ScenarioError(f"{node.at('event_lag_ms')}: an approximate kv_aware router reads no KV events "
                            f"(it remembers what it routed for ttl_s)")
    if node.raw("ttl_s", None) is not None and not approximate:
        raise ScenarioError(f"{node.at('ttl_s')}: only read with approximate: true (a precise router follows "
                            f"the workers' KV block events)")
    weights = _weights(node) if kind == "scored" else ()
    if kind == "scored" and node.raw("event_lag_ms", None) is not None and "prefix-cache" not in dict(weights):
        raise ScenarioError(f"{node.at('event_lag_ms')}: only the prefix-cache scorer reads KV events; "
                            f"give it a weight")
    spec = RouterSpec(kind, node.int("seed", base.seed, minimum=0, maximum=2**32 - 1),
                      node.number("overlap_score_weight", base.overlap_score_weight, maximum=1e6), temperature,
                      node.number("event_lag_ms", base.event_lag_ms, maximum=MAX_LAG_MS), approximate,
                      node.number("ttl_s", base.ttl_s, positive=True, maximum=MAX_TTL_S), weights)
    node.done()
    for role in roles:
        _check_pool(node, spec, engine, traffic, role)
    return spec


def _weights(node: _Node) -> tuple[tuple[str, float], ...]:
    """``weights``: scorer → weight above 0; llm-d's defaults when absent."""
    if node.raw("weights", None) is None:
        return DEFAULT_SCORER_WEIGHTS
    table = node.node("weights")
    weights = tuple((name, table.number(name, positive=True, maximum=1e6)) for name in SCORERS if table.has(name))
    for key in table.data:
        if key not in SCORERS:
            raise ScenarioError(f"{table.at(str(key))}: unknown scorer (scorers: {', '.join(SCORERS)})")
    if not weights:
        raise ScenarioError(f"{table.path}: give at least one scorer a weight ({', '.join(SCORERS)})")
    return weights


def _check_pool(node: _Node, spec: RouterSpec, engine: Engine, traffic: Traffic, role: str) -> None:
    """The rules joining a router to the pool it routes and to the traffic."""
    where = node.at("type")
    if spec.reads_cache:
        what = "a kv_aware router" if spec.type == "kv_aware" else "the prefix-cache scorer"
        if engine.backend != "vllm":
            label = BACKEND_RULES[engine.backend].label
            raise ScenarioError(f"{where}: {what} follows vLLM's KV block events; {label}'s cache events are not "
                                f"modelled yet (route {label} workers round_robin, random, least_loaded, or scored "
                                f"without prefix-cache)")
        if not engine.workers[role].kv_cache.prefix_caching:
            raise ScenarioError(f"{where}: {what} reads the workers' prefix caches, but "
                                f"engine.workers.{role}.kv_cache.prefix_caching is false")
    if any(name == "session-affinity" for name, _ in spec.weights) and not isinstance(traffic.source, SessionsSource):
        raise ScenarioError(f"{node.at('weights')}.session-affinity: needs sessions (traffic.source.type: "
                            f"sessions); this traffic has none")
