"""The routers' own bookkeeping, by hand: the cache view (KV block events, their lag, the approximate mode's
TTL) and the per-rank loads."""

from __future__ import annotations

from types import SimpleNamespace

from simmodel.engine.kv_cache import BlockKeys, PrefixCachingBlockPool
from simmodel.routing.cache_view import CacheView
from simmodel.routing.loads import PoolLoads


def ranks(n: int):
    return [SimpleNamespace(pool=SimpleNamespace(listener=None)) for _ in range(n)]


def test_precise_view_matches_the_longest_leading_run_per_rank():
    """Rank 0 holds a b c, rank 1 a b: the prompt a b c d leads rank 0's blocks by 3 and rank 1's by 2; a x by 1
    on both; once rank 0 evicts b, a b c leads it by 1 (c alone does not count) and rank 1 still by 2."""
    env = SimpleNamespace(now=0)
    rs = ranks(2)
    view = CacheView(env, rs)
    rs[0].pool.listener(list("abc"), True)
    rs[1].pool.listener(["a"], True)
    rs[1].pool.listener(["b"], True)
    assert view.overlaps(list("abcd"), 4) == [3, 2]
    assert view.overlaps(list("ax"), 2) == [1, 1]
    assert view.overlaps(list("xa"), 2) == [0, 0]
    assert view.overlaps([], 0) == [0, 0]
    rs[0].pool.listener(["b"], False)
    assert view.overlaps(list("abc"), 3) == [1, 2]
    assert view.overlaps(list("ab"), 1) == [1, 1]  # (only the first n keys count)


def test_lagged_events_are_seen_late():
    """A 100 ns lag: a block stored at 0 is not seen at 99, and is at 100; removed at 150, still seen at 249."""
    env = SimpleNamespace(now=0)
    rs = ranks(1)
    view = CacheView(env, rs, lag_ns=100)
    rs[0].pool.listener(["a"], True)
    env.now = 99
    assert view.overlaps(["a"], 1) == [0]
    env.now = 100
    assert view.overlaps(["a"], 1) == [1]
    env.now = 150
    rs[0].pool.listener(["a"], False)
    env.now = 249
    assert view.overlaps(["a"], 1) == [1]
    env.now = 250
    assert view.overlaps(["a"], 1) == [0]


def test_approximate_view_forgets_after_the_ttl_unless_routed_again():
    """TTL 10: a b routed to rank 0 at 0 (until 10); a routed there again at 8 (until 18). At 5 both are held;
    at 10 b is gone, a is not; at 18 nothing is. Nothing listens to the pools."""
    env = SimpleNamespace(now=0)
    rs = ranks(2)
    view = CacheView(env, rs, approximate=True, ttl_ns=10)
    assert rs[0].pool.listener is None
    view.remember(0, ["a", "b"])
    env.now = 5
    assert view.overlaps(["a", "b"], 2) == [2, 0]
    env.now = 8
    view.remember(0, ["a"])
    env.now = 10
    assert view.overlaps(["a", "b"], 2) == [1, 0]
    env.now = 18
    assert view.overlaps(["a", "b"], 2) == [0, 0]


def test_a_pool_tells_its_listener_when_a_key_is_first_cached_and_last_evicted():
    """Four blocks. Request A takes blocks 0 1 and caches keys k0 k1 (two store events); freed, they rejoin the
    queue tail-first: 2 3 1 0. Request B (the same content) takes 2 3 and caches k0 k1 again (second copies: no
    event); freed: 1 0 3 2. Taking three blocks evicts 1 (k1 still held by 3), 0 (k0 still held by 2), then 3
    (k1's last copy: removed); taking one more evicts 2 (k0's last copy: removed)."""
    pool = PrefixCachingBlockPool(4, 16)
    events = []
    pool.listener = lambda keys, stored: events.extend((key, stored) for key in keys)
    keys = BlockKeys(lambda j: ("same", j))
    for _ in range(2):
        request = SimpleNamespace(block_ids=pool.allocate_ids(2), num_cached_blocks=0, block_keys=keys,
                                  num_blocks=2)
        pool.cache_full_blocks(request, 32)
        pool.free_request(request)
    assert events == [(keys(0), True), (keys(1), True)]
    assert pool.allocate_ids(3) == [1, 0, 3]
    assert events[2:] == [(keys(1), False)]
    assert pool.allocate_ids(1) == [2]
    assert events[3:] == [(keys(0), False)]


def test_loads_follow_plans_and_pass_ends():
    """Rank 0 of two: a request routed with 40 prefill tokens and blocks a b is queued; admitted, running; its
    first token clears its prefill tokens; preempted, queued again; resumed; finished, gone with its blocks.
    A second request sharing block a keeps it active (counted once)."""
    workers = [SimpleNamespace(ranks=[SimpleNamespace(watcher=None)]), SimpleNamespace(ranks=[SimpleNamespace()])]
    loads = PoolLoads(workers)
    r0, r1 = loads.ranks
    p, q = object(), object()
    loads.routed(p, 0, 40, ["a", "b"])
    loads.routed(q, 0, 10, ["a"])
    assert (loads.queued[0], loads.running[0], loads.prefill_tokens[0]) == (2, 0, 50)
    assert loads.block_refs[0] == {"a": 2, "b": 1}
    assert loads.active_depth(0, ["a", "b", "c"], 3) == 2 and loads.active_depth(1, ["a"], 1) == 0
    plan = SimpleNamespace(admitted=[p], preempted=[], resumed=[])
    loads.on_plan(r0, plan)
    assert (loads.queued[0], loads.running[0]) == (1, 1)
    loads.on_pass_end(r0, [p], ())
    assert loads.prefill_tokens[0] == 10
    loads.on_plan(r0, SimpleNamespace(admitted=[], preempted=[p], resumed=[]))
    assert (loads.queued[0], loads.running[0]) == (2, 0)
    loads.on_plan(r0, SimpleNamespace(admitted=[], preempted=[], resumed=[p]))
    loads.on_pass_end(r0, [], [(p, 3)])
    assert (loads.queued[0], loads.running[0], loads.prefill_tokens[0]) == (1, 0, 10)
    assert loads.block_refs[0] == {"a": 1}
    loads.on_pass_end(r0, [], [(q, 1)])  # finished before admission (a one-token handoff)
    assert (loads.queued[0], loads.prefill_tokens[0], loads.block_refs[0]) == (0, 0, {})


def test_least_loaded_takes_fewest_active_then_fewest_queued_then_lowest_index():
    """Worker 0 runs 2 (active 2, queued 0), worker 1 runs 1 and queues 1 (active 2, queued 1), worker 2 runs 1
    and queues 2 (active 3): worker 0 (ties worker 1 on active, fewer queued). It then holds 3 active (the new
    one queued), so the next goes to worker 1; then workers 0, 1, 2 all hold 3 active and 1, 2, 2 queued:
    worker 0 again."""
    from simmodel.config.schema import RouterSpec
    from simmodel.routing.routers import LeastLoaded

    def worker(w):
        rank = SimpleNamespace(rank_id=0, watcher=None, pool=SimpleNamespace(block_size=16))
        node = SimpleNamespace(worker_id=w, ranks=[rank], pick_rank=lambda hint: rank)
        rank.worker = node
        return node

    workers = [worker(w) for w in range(3)]
    router = LeastLoaded(workers, RouterSpec("least_loaded"), env=SimpleNamespace(now=0))
    loads = router.loads
    loads.running[:], loads.queued[:] = [2, 1, 1], [0, 1, 2]
    class Request:
        dp_rank_hint = None

    picks = [router.pick(Request()).worker_id for _ in range(3)]
    assert picks == [0, 1, 0]


def test_the_sla_planners_pass_fit_and_sizing():
    """Rows made exactly from 4 ms + 0.5 ms a decoding sequence + 0.01 ms a prefill token are fitted back. At ISL
    1,000 and OSL 200 with itl 20 ms: a rank decodes at most floor((20 − 4) / 0.5) = 32 sequences (64 allowed),
    a step of 20 ms: 200 × 20 / 32 = 125 ms of decode per request, plus 1,000 × 0.01 = 10 ms of prefill in an
    aggregated pool (its first token in 4 + 10 = 14 ms, within 500). At 30 requests/s on workers of 2 ranks:
    ceil(30 × 0.135 / 2) = ceil(2.025) = 3 workers (within 1–8). With no column varying, the whole time goes to
    the work: 12 ms passes of 1,000 prefill tokens are 12 µs a token."""
    import numpy as np
    import pytest

    from simmodel.scaling.sla import PassFit, fit_passes, replicas_needed, seconds_per_request

    decodes = np.array([0, 4, 8, 16, 3, 0, 12])
    tokens = np.array([1000, 0, 500, 0, 2000, 300, 0])
    seconds = (4 + 0.5 * decodes + 0.01 * tokens) / 1e3
    fit = fit_passes(decodes, tokens, seconds)
    assert fit == pytest.approx(PassFit(0.004, 0.0005, 0.00001))
    exact = PassFit(0.004, 0.0005, 0.00001)
    assert seconds_per_request("decode", exact, 1000, 200, 0.5, 0.020, 64) == pytest.approx(0.125)
    assert seconds_per_request("aggregated", exact, 1000, 200, 0.5, 0.020, 64) == pytest.approx(0.135)
    assert seconds_per_request("prefill", exact, 1000, 200, 0.013, 0.020, 64) is None  # 14 ms > 13 ms TTFT
    assert seconds_per_request("decode", exact, 1000, 200, 0.5, 0.004, 64) is None  # no room in 4 ms
    assert replicas_needed(30, 0.135, 2, (1, 8)) == 3
    assert replicas_needed(30, None, 2, (1, 8)) == 8
    assert replicas_needed(1, 0.135, 2, (1, 8), ttft_missed=4) == 5
    flat = fit_passes(np.zeros(3, dtype=np.int64), np.full(3, 1000), np.full(3, 0.012))
    assert flat == pytest.approx(PassFit(0.0, 0.0, 0.000012))


def test_round_robin_keeps_its_turn_when_the_pool_changes():
    """Over a b, the first pick is a (the turn moves to 1); with c added, the turn stays at 1: b, c, a; with the
    pool cut to one worker, that one."""
    from simmodel.engine.placement import RoundRobin

    router = RoundRobin(["a", "b"])
    assert router.pick(None) == "a"
    router.serve(["a", "b", "c"])
    assert [router.pick(None) for _ in range(3)] == ["b", "c", "a"]
    router.serve(["c"])
    assert [router.pick(None) for _ in range(2)] == ["c", "c"]


def test_a_reset_prefix_cache_forgets_every_key_and_tells_the_router():
    """A worker that leaves its pool hands its KV back: its cached keys are forgotten (the router is told
    they are removed), so if it comes back its first request finds nothing cached."""
    pool = PrefixCachingBlockPool(4, 16)
    events = []
    pool.listener = lambda keys, stored: events.append((list(keys), stored))
    keys = BlockKeys(lambda j: ("k", j))
    request = SimpleNamespace(block_ids=pool.allocate_ids(2), num_cached_blocks=0, block_keys=keys, num_blocks=2)
    pool.cache_full_blocks(request, 32)
    pool.free_request(request)
    pool.reset_prefix_cache()
    assert events[-1] == ([keys(0), keys(1)], False)
    assert pool.find_hits(SimpleNamespace(num_tokens=33, block_keys=keys)) == []
    assert pool.num_free_blocks == 4
