"""SGLang's storage-tier prefetch rules on their own (``offload.sglang_storage``): when a lookup is made, refused
and made again, on a tree of one-token pages, a host pool of 600 pages and a storage tier whose jobs take 100 µs
(bandwidths of 1 GB/s for pages of 1,000 bytes: 1 µs a page)."""

from __future__ import annotations

from simmodel.engine.hiradix_cache import HiRadixCache
from simmodel.offload.link import HostLink
from simmodel.offload.sglang_storage import RETRY_INTERVAL, RETRY_MAX_ATTEMPTS, SglangStorage
from simmodel.offload.storage import StorageTier, StoredBlocks


class Req:
    def __init__(self, request_id: int) -> None:
        self.request_id = request_id
        self.storage_load_start_at = self.storage_load_end_at = None


def make(policy: str = "wait_complete", host: int = 600) -> tuple[HiRadixCache, SglangStorage]:
    cache = HiRadixCache(1000, host, "write_through")
    storage = StorageTier(StoredBlocks(None), HostLink(1e9, 100_000), HostLink(1e9, 100_000), 1000.0)
    return cache, SglangStorage(cache, storage, 100_000, 1, policy, 256, 1_000_000_000, 244_140.625)


def test_a_lookup_that_finds_nothing_is_made_again_eight_plans_later_but_never_for_the_head():
    # The lookups (one query each, one after another) find nothing; the plan after their answers drops them and
    # arms their re-issue. (A host pool of 2,000 pages: both may be in flight.)
    _, l3 = make(host=2000)
    head, second = Req(0), Req(1)
    l3.issue(head, [("h", 400)], 399, 0)
    l3.issue(second, [("s", 400)], 399, 0)
    assert [op.answer_at for op in l3.ops.values()] == [100_000, 200_000]
    l3.drain(200_000)
    assert not l3.ops
    waiting = [head, second]
    assert l3.due(waiting) == []  # plan 1: the head's re-issue is cancelled; the second's is due at plan 1 + 8
    for _ in range(RETRY_INTERVAL - 1):
        assert l3.due(waiting) == []
    assert l3.due(waiting) == [second]  # plan 9
    assert l3.due(waiting) == []  # (made again: nothing pending until that lookup is refused again)


def test_re_issues_stop_after_eight_attempts():
    _, l3 = make()
    head, late = Req(0), Req(1)
    made = 0
    for _ in range(RETRY_MAX_ATTEMPTS + 2):
        l3.issue(late, [("s", 400)], 399, 0)
        l3.drain(10**9)
        for _ in range(RETRY_INTERVAL + 1):
            made += late in l3.due([head, late])
    assert made == RETRY_MAX_ATTEMPTS


def test_lookups_are_refused_while_the_ones_in_flight_ask_for_half_the_host_pool():
    # 600 host pages: the first lookup asks for 399 pages, over the 300 that may be in flight; the next is
    # refused (and armed for a re-issue) until the first ends.
    _, l3 = make()
    first, second = Req(0), Req(1)
    l3.issue(first, [("a", 400)], 399, 0)
    l3.issue(second, [("b", 400)], 399, 0)
    assert first in l3.ops and second not in l3.ops and l3.num_refused == 1 and l3.occupied == 399
    l3.drain(10**9)  # (nothing found: dropped, its share freed)
    assert l3.occupied == 0
    l3.issue(second, [("b", 400)], 399, 10**9)
    assert second in l3.ops


def test_no_lookup_below_the_threshold_or_after_a_node_not_on_the_host():
    cache, l3 = make()
    l3.issue(Req(0), [("a", 200)], 199, 0)  # 199 pages < 256 tokens
    # a prompt whose first 100 tokens match a GPU node not backed up (write_through_selective: one hit is not
    # enough): nothing after it can be on storage
    cache_sel = HiRadixCache(1000, 600, "write_through_selective")
    storage = StorageTier(StoredBlocks(None), HostLink(1e9, 0), HostLink(1e9, 0), 1000.0)
    l3_sel = SglangStorage(cache_sel, storage, 0, 1, "wait_complete", 256, 0, 0.0)
    cache_sel.insert([("p", 100)])
    assert not cache_sel.root.children[("p", 0)].host
    l3_sel.issue(Req(1), [("p", 100), ("q", 400)], 499, 0)
    assert not l3.ops and not l3_sel.ops and not l3._retries and not l3_sel._retries
    # backed up (write_through): the lookup starts after the 100 matched pages
    cache.insert([("p", 100)])
    l3.issue(Req(2), [("p", 100), ("q", 400)], 499, 0)
    (op,) = l3.ops.values()
    assert (op.start, op.end) == (100, 499)


def test_a_read_joins_the_tree_as_host_only_pages_and_frees_the_host_pages_it_did_not_fill():
    # 300 pages written from 0 in jobs of 128, 128 and 44 pages (100 µs + 1 µs a page: they end at 228, 456 and
    # 600 µs); a request looked up at 1 ms finds all 300 (3 queries: answered at 1.3 ms); the plan
    # at 1.3 ms takes 300 host pages and reads 128 + 128 + 44 pages: 228 µs, 228 µs, 144 µs, landing at 1.528,
    # 1.756 and 1.900 ms. Under wait_complete the plan at 1.9 ms puts the 300 pages in the tree (host only).
    cache, l3 = make()
    keys = [("c", u) for u in range(300)]
    for k in range(0, 300, 128):
        l3.storage.write(keys[k:k + 128], 0)
    r = Req(0)
    l3.issue(r, [("c", 400)], 399, 1_000_000)
    (op,) = l3.ops.values()
    assert op.found == 300 and op.answer_at == 1_300_000
    l3.drain(1_300_000)
    assert cache.host_reserved == 300 and op.batch_ends == [1_528_000, 1_756_000, 1_900_000]
    assert not l3.ready(r, 1_899_999)
    l3.drain(1_900_000)
    assert l3.ready(r, 1_900_000) and cache.host_reserved == 0 and cache.host_tokens == 300
    node = cache.root.children[("c", 0)]
    assert node.evicted and node.host and node.length == 300
    assert l3.admitted(r) == (0, 300)  # (the pages it brought: 0..300 of its sequence)
    cache.check()


def test_a_timeout_wait_is_kept_across_lookups_until_admission_and_its_expiry_too():
    # timeout: 1 s + 244,140.625 ns a page (0.25 s per 1,024 one-token pages): 399 pages asked wait 1.0974 s.
    _, l3 = make("timeout", host=2000)
    r = Req(0)
    l3.issue(r, [("a", 400)], 399, 0)
    assert not l3.ready(r, 0)  # the wait starts here
    l3.drain(10**6)  # nothing found: dropped, to be looked up again
    l3.issue(r, [("a", 400)], 399, 10**6)  # (made again, as a re-issue would)
    wait = 1_000_000_000 + 399 * 244_140.625
    assert not l3.ready(r, int(wait))  # the first wait still runs: not past it yet
    assert l3.ready(r, int(wait) + 1)  # past it: stopped, and no lookup again...
    l3.issue(r, [("a", 400)], 399, 2 * 10**9)
    assert r not in l3.ops
    l3.admitted(r)  # ... until the request is admitted (a retracted request is looked up again)
    l3.issue(r, [("a", 400)], 399, 3 * 10**9)
    assert r in l3.ops


def test_a_read_without_host_room_evicts_the_whole_hit_s_worth():
    # Eight one-page sequences backed up, then demoted: the 10-page host pool has 2 pages free. A read of 3 pages
    # evicts 3 host-only pages (not the 1 it lacks), as SGLang's allocate_storage_hit does, then takes 3.
    cache = HiRadixCache(100, 10, "write_through")
    for k in range(8):
        cache.insert([(f"x{k}", 1)])
        for node, _ in cache.backups:
            cache.unlock(node)
        cache.backups.clear()
    cache.evict(8)
    assert cache.host_tokens == 8 and cache.host_free == 2
    assert cache.reserve_host(3, 1) == 3
    assert cache.host_tokens == 5 and cache.host_reserved == 3
    cache.check()


def test_a_lookup_stopped_before_its_queries_start_takes_no_query_time():
    # Three lookups at 0: their queries would run 0–100, 100–200 and 200–300 µs. best_effort stops the second at
    # 50 µs, before its queries start: the third's move up to 100–200 µs.
    _, l3 = make("best_effort", host=10_000)
    a, b, c = Req(0), Req(1), Req(2)
    for r, content in ((a, "a"), (b, "b"), (c, "c")):
        l3.issue(r, [(content, 400)], 399, 0)
    assert [op.answer_at for op in l3.ops.values()] == [100_000, 200_000, 300_000]
    assert l3.ready(b, 50_000)
    assert l3.ops[c].answer_at == 200_000 and l3.ops[a].answer_at == 100_000


def test_a_lookup_answered_at_the_instant_it_is_stopped_leaves_nothing_behind():
    # Queries that take no time (latency 0): a lookup made again after a plan's drain (a re-issue) is answered at
    # that very instant; best_effort stops it in the same plan, before any drain takes the answer. Found by
    # tools/fuzz_host_offload.py --backend sglang --storage (seed 4).
    cache = HiRadixCache(1000, 2000, "write_through")
    storage = StorageTier(StoredBlocks(None), HostLink(1e9, 0), HostLink(1e9, 0), 1000.0)
    l3 = SglangStorage(cache, storage, 0, 1, "best_effort", 256, 0, 0.0)
    r = Req(0)
    l3.issue(r, [("a", 400)], 399, 5)
    assert l3.ops[r].answer_at == 5
    assert l3.ready(r, 5)
    l3.drain(10)
    assert not l3.ops and not l3._asking and l3.occupied == 0


def test_a_lookup_stopped_while_its_query_runs_keeps_the_queue_until_that_query_ends():
    # Three lookups at 0 (queries 0–100, 100–200, 200–300 µs); the first is stopped at 50 µs, its query under way:
    # that query ends at 100 µs all the same, so the others still answer at 200 and 300 µs. A lookup made at 20 µs
    # after one stopped at 10 µs (whose query runs 0–100 µs all the same) is asked at 100 µs.
    _, l3 = make("best_effort", host=10_000)
    a, b, c = Req(0), Req(1), Req(2)
    for r, content in ((a, "a"), (b, "b"), (c, "c")):
        l3.issue(r, [(content, 400)], 399, 0)
    assert l3.ready(a, 50_000)
    assert [op.answer_at for op in l3.ops.values()] == [200_000, 300_000]
    _, l3 = make("best_effort", host=10_000)
    l3.issue(a, [("a", 400)], 399, 0)
    assert l3.ready(a, 10_000)
    l3.issue(b, [("b", 400)], 399, 20_000)
    assert (l3.ops[b].asked_at, l3.ops[b].answer_at) == (100_000, 200_000)


def test_a_host_page_being_written_to_storage_is_not_evicted_from_the_host():
    # With a storage tier the copies to the host are pinned there until their write to storage ends: of two
    # demoted one-page sequences, host room for a third backup evicts the unpinned one, then nothing.
    cache = HiRadixCache(100, 2, "write_through")
    cache.copied = {"backup": [], "synced": []}  # (as a storage tier keeps it: each copy pins its nodes)
    for name in ("a", "b"):
        cache.insert([(name, 1)])
        for node, _ in cache.backups:
            cache.unlock(node)
        cache.backups.clear()
    a, b = cache.root.children[("a", 0)], cache.root.children[("b", 0)]
    assert cache.host_pins == {a: 1, b: 1}
    cache.evict(2)  # both demoted: host-only, pinned
    cache.unpin_host(a)  # a's write to storage ended
    cache.insert([("c", 1)])  # its backup needs a host page: a goes, b stays
    assert ("a", 0) not in cache.root.children and b.host and cache.host_tokens == 2
    cache.insert([("d", 1)])  # no unpinned page left: the backup fails
    assert cache.num_backup_failed == 1 and ("d", 0) in cache.root.children and not cache.root.children[("d", 0)].host
    cache.check()
