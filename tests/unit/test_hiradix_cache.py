"""SGLang's radix tree with a host tier (``HiRadixCache``): its rules by hand, and a property over random runs of
the scheduler. Units are pages of one token; sequences are segments (``radix_cache``)."""

from __future__ import annotations

import random

from simmodel.engine.hiradix_cache import HiRadixCache
from simmodel.engine.request import Request
from simmodel.engine.scheduler.sglang import SglangScheduler, SglangSchedulerConfig
from simmodel.offload.link import HostLink
from simmodel.offload.sglang_hicache import SglangHiCache

A, B, C = [("a", 6)], [("b", 6)], [("c", 6)]


def _acked(cache: HiRadixCache) -> None:
    """The copies queued so far are acknowledged (what the rank's tier does at a plan after they land)."""
    for node, _ in cache.backups:
        cache.unlock(node)
    cache.backups.clear()


def test_write_through_backs_up_at_insertion_and_locks_until_acknowledged():
    cache = HiRadixCache(10, 20, "write_through")
    added, node = cache.insert(A)
    assert added == 6 and cache.host_tokens == 6 and cache.backups == [(node, 6)]
    assert cache.evictable_tokens == 0  # (the copy's lock: SGLang's inc_lock_ref until the ack)
    _acked(cache)
    assert cache.evictable_tokens == 6
    cache.check()


def test_eviction_demotes_a_node_on_the_host_and_a_match_runs_through_it():
    """A (6, on the host) is the least recently used leaf when B needs 6 of 10 pages with 4 free: demoted, it
    stays in the tree on the host; matching A finds 6 pages, none of them on the GPU."""
    cache = HiRadixCache(10, 20, "write_through")
    cache.insert(A)
    _acked(cache)
    assert cache.allocate(6)
    assert cache.cached_tokens == 0 and cache.num_demoted == 6 and cache.host_tokens == 6
    matched, node = cache.match(A)
    assert matched == 6
    assert cache.device_part(node) == (cache.root, 6)
    cache.check()


def test_load_back_makes_room_and_puts_the_nodes_back_on_the_gpu():
    """A demoted; B inserted (6 of 10 pages on the GPU, acknowledged). Loading A's 6 pages back needs 6 free of
    4: B, the only GPU leaf, is demoted; A is on the GPU again (and still on the host)."""
    cache = HiRadixCache(10, 20, "write_through")
    cache.insert(A)
    _acked(cache)
    cache.allocate(6)
    cache.release(6)
    cache.insert(B)
    cache.allocate(0)
    _acked(cache)
    _, node = cache.match(A)
    cache.lock(node)
    assert cache.load_back(node, 6)
    assert not node.evicted and cache.cached_tokens == 6 and cache.num_demoted == 12
    assert cache.match_length(B) == 6 and cache.device_part(cache.match(B)[1])[1] == 6
    cache.unlock(node)
    cache.check()


def test_load_back_fails_without_room_and_changes_nothing():
    cache = HiRadixCache(10, 20, "write_through")
    cache.insert(A)
    _acked(cache)
    cache.allocate(6)  # (A demoted; the 6 pages now a request's own, not evictable)
    _, node = cache.match(A)
    cache.lock(node)
    assert not cache.load_back(node, 6)
    assert node.evicted and cache.cached_tokens == 0 and cache.num_free == 4


def test_write_through_selective_backs_up_on_the_second_counted_insertion():
    """A's own insertion counts one hit; a second request inserting through A counts the second and backs A up.
    The same request inserting again past nothing new (``counted_from``) counts nothing."""
    cache = HiRadixCache(20, 20, "write_through_selective")
    cache.insert(A)
    cache.insert(A, counted_from=6)
    assert cache.host_tokens == 0
    cache.insert([*A, ("x", 2)])
    assert cache.host_tokens == 6 and [n for _, n in cache.backups] == [6]
    cache.check()


def test_an_unbacked_node_is_deleted_on_eviction():
    cache = HiRadixCache(10, 20, "write_through_selective")
    cache.insert(A)
    cache.allocate(6)
    assert cache.num_deleted == 6 and cache.match_length(A) == 0


def test_write_back_copies_the_evicted_node_alone_and_counts_the_wait():
    """Write-back copies nothing at insertion; evicting A's leaf X copies X only (not its parent A), then A, now a
    GPU leaf, is copied and demoted in turn."""
    cache = HiRadixCache(10, 20, "write_back")
    cache.insert(A)
    cache.insert([*A, ("x", 2)])
    assert cache.host_tokens == 0 and not cache.backups
    cache.allocate(9)  # 2 free: 7 more needed: X (2) then A (6)
    assert cache.take_synced() == 8 and cache.num_written_back == 8 and cache.host_tokens == 8
    assert cache.match_length([*A, ("x", 2)]) == 8
    cache.check()


def test_host_eviction_takes_least_recently_used_childless_host_only_nodes():
    """Host pool of 8: A (6) is on the host only; C's backup needs 6 with 2 free, so A leaves the tree. A node
    still on the GPU never loses its host copy."""
    cache = HiRadixCache(12, 8, "write_through")
    cache.insert(A)
    _acked(cache)
    cache.allocate(12)  # A demoted
    cache.release(12)
    cache.insert(C)
    assert cache.num_host_evicted == 6 and cache.match_length(A) == 0 and cache.host_tokens == 6
    cache.insert(B)  # needs 6 on the host, 2 free, nothing host-only: not copied
    assert cache.num_backup_failed == 6 and cache.host_tokens == 6
    cache.check()


def test_an_insertion_over_a_host_only_node_puts_it_back_on_the_gpu():
    """A request that recomputed A (its load skipped) inserts it: its copy becomes A's GPU KV, counted as added."""
    cache = HiRadixCache(10, 20, "write_through")
    cache.insert(A)
    _acked(cache)
    cache.allocate(6)
    cache.release(6)
    added, node = cache.insert(A)
    assert added == 6 and not node.evicted and cache.cached_tokens == 6
    cache.check()


class _Timeout:
    def __init__(self, at: int) -> None:
        self.at, self.callbacks = at, []


class _Env:
    """A clock for the tier: ``now``, and timeouts fired as it advances."""

    def __init__(self) -> None:
        self.now = 0
        self.timeouts: list[_Timeout] = []

    def timeout(self, delay: int) -> _Timeout:
        self.timeouts.append(_Timeout(self.now + delay))
        return self.timeouts[-1]

    def advance(self, t: int) -> None:
        self.now = t
        due = [e for e in self.timeouts if e.at <= t]
        self.timeouts = [e for e in self.timeouts if e.at > t]
        for e in due:
            for callback in e.callbacks:
                callback(e)


def _random_run(seed: int, policy: str, page: int) -> None:
    """A random stream of 60 requests sharing five prefixes through one rank's scheduler with a tree and host pool
    small enough to evict on both tiers; the tree is recounted after every plan and every pass."""
    rng = random.Random(seed)
    kv = rng.choice([300, 600, 1200]) // page * page
    host_pages = rng.choice([10, 40, 200, 2000]) // page + 1
    cfg = SglangSchedulerConfig(max_req_len=kv - 1, page_size=page, host_pages=host_pages, write_policy=policy,
                                chunked_prefill_size=max(page, rng.choice([64, 256, 8192]) // page * page))
    sched = SglangScheduler(cfg, kv)
    env = _Env()
    sched.offload = tier = SglangHiCache(env, sched.cache, HostLink(1e9, 1000), HostLink(1e9, 1000), page, 100.0,
                                         100.0)
    woken = []
    tier.on_wake = lambda: woken.append(env.now)
    arrivals = []
    for i in range(60):
        shared, own = rng.randrange(0, 150), rng.randrange(1, 60)
        r = Request(i, 0, shared + own, rng.randrange(1, 30))
        r.prompt_segments = ([(("p", rng.randrange(5)), shared)] if shared else []) + [(("o", i), own)]
        arrivals.append((rng.randrange(0, 2_000_000), i, r))
    arrivals.sort()
    k = t = done = passes = 0
    while done < len(arrivals):
        while k < len(arrivals) and arrivals[k][0] <= t:
            sched.add_request(arrivals[k][2])
            k += 1
        env.advance(t)
        plan = sched.schedule()
        sched.cache.check()
        if not plan.requests:
            # (an idle rank plans again at the next arrival, or when a copy its plan waits for lands)
            later = [arrivals[k][0]] if k < len(arrivals) else []
            later += [e.at for e in env.timeouts]
            assert later and (tier.waking or k < len(arrivals)), f"seed {seed}: stuck"
            t = max(t + 1, min(later))
            continue
        t += tier.pass_ns(plan, t, 10_000 + 100 * sum(plan.num_new_tokens))
        env.advance(t)
        tier.pass_ended(plan, t, passes)
        done += len(sched.update_from_output(plan)[1])
        tier.flush(t)
        sched.cache.check()
        passes += 1


def test_random_runs_keep_the_tree_consistent():
    """Every page is counted once per tier, capacities hold, host-only nodes keep their host copy, and every
    request finishes (``HiRadixCache.check``), for each write policy and page size."""
    for policy in ("write_through", "write_through_selective", "write_back"):
        for seed in range(12):
            for page in (1, 4):
                _random_run(seed, policy, page)


def test_matching_a_host_only_prefix_again_and_again_keeps_its_candidates_bounded():
    """A request waiting with a host-only prefix is matched at every plan, offering the node again each time: the
    stale offers are dropped as they pile up (at most twice the live ones above 1,024), and the node is still the
    one host eviction takes."""
    cache = HiRadixCache(10, 20, "write_through")
    cache.insert(A)
    _acked(cache)
    cache.allocate(6)  # A demoted: host-only
    for _ in range(5000):
        cache.match(A)
    assert cache.num_host_candidates <= 1025
    assert cache.evict_host(1) == 6 and cache.match_length(A) == 0
    cache.check()
