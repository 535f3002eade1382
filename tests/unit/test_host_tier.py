"""The host KV tier's own rules (``simmodel.offload.tier.HostTier``) and its configuration, by hand."""

from __future__ import annotations

import copy
import random
from collections import Counter, OrderedDict

import pytest
from factories import make_scenario, make_sglang_scenario, scenario_error

from simmodel.engine.kv_cache import BlockKeys, TraceBlocks
from simmodel.offload.tier import HostTier


def _store(tier: HostTier, keys: list, now: int, lands: float) -> list | None:
    """Store ``keys`` at ``now``, the copy of what the tier takes landing at ``lands``."""
    taken = tier.store(keys, now)
    if taken is None:
        return None
    tier.landed(taken[1], len(taken[0]), lands)
    return taken[0]


def test_lookup_counts_the_landed_run_and_waits_on_a_landing_or_read_block():
    """Keys a, b stored at t = 0 landing at 2; c stored at 10 landing at 11. At t = 5: a, b found
    and c missing → 2. At t = 10.5 the run a, b, c reaches c still landing → wait until 11. A load reading b
    makes a later lookup reaching b wait with no time (that load's end wakes the rank)."""
    tier = HostTier(10)
    assert _store(tier, ["a", "b"], 0, 2) == ["a", "b"]
    assert tier.lookup(["a", "b", "c"], 1) == (-1, 2)  # (b lands at 2)
    assert tier.lookup(["a", "b", "c"], 5) == (2, None)
    assert _store(tier, ["a", "b", "c"], 10, 11) == ["c"]  # (a, b are here: not copied again)
    assert tier.lookup(["a", "b", "c"], 10) == (-1, 11)
    assert tier.lookup(["a", "b", "c"], 11) == (3, None)
    assert tier.lookup(["x", "a"], 11) == (0, None)  # (a run starts at the first key)
    reading = tier.read(["b"])
    assert tier.lookup(["a", "b"], 12) == (-1, None)
    tier.done_reading(reading)
    assert tier.lookup(["a", "b"], 12) == (2, None)


def test_a_store_evicts_the_least_recent_landed_unread_blocks_or_takes_nothing():
    """Capacity 4: a, b, c, d stored (landed at once). A finished request that used [c, d] makes d then c the
    most recent: order a, b, d, c. Storing e, f (landing at 100) evicts a and b. Then g, h offered with c while a
    load reads d: d is read, c is offered (protected), e and f have not landed: nothing can go, so the store
    takes nothing and counts one failure. Once d is no longer read, storing g evicts it."""
    tier = HostTier(4)
    _store(tier, ["a", "b", "c", "d"], 0, 0)
    tier.touch_reversed(["c", "d"])
    assert tier.keys() == ["a", "b", "d", "c"]
    assert _store(tier, ["e", "f"], 1, 100) == ["e", "f"]
    assert tier.keys() == ["d", "c", "e", "f"] and tier.num_evicted == 2
    reading = tier.read(["d"])
    assert _store(tier, ["g", "h", "c"], 2, 100) is None  # (c is offered: protected; d read)
    assert tier.num_failed == 1 and len(tier) == 4
    tier.done_reading(reading)
    assert _store(tier, ["g"], 3, 200) == ["g"]
    assert "d" not in tier and tier.num_evicted == 3


def test_landing_blocks_are_never_evicted():
    """Capacity 2, a and b landing at 50: storing c at 10 cannot evict them; at 60 it evicts a. A block whose copy
    is not queued yet (its slot taken as its pass was planned) is neither found nor evicted, and a lookup reaching
    it waits for no set time (the end of that pass plans again)."""
    tier = HostTier(2)
    _store(tier, ["a", "b"], 0, 50)
    assert _store(tier, ["c"], 10, 70) is None
    assert tier.store(["c"], 60)[0] == ["c"]  # (its copy not queued yet)
    assert tier.keys() == ["b", "c"]
    assert tier.lookup(["b", "c"], 80) == (-1, None)
    assert tier.store(["d"], 80)[0] == ["d"] and tier.keys() == ["c", "d"]  # (b goes, c cannot)
    assert tier.store(["e"], 90) is None


def test_random_operations_keep_the_tier_within_its_capacity():
    """Property: under random stores, reads and finishes, the tier never holds more than its capacity, never
    evicts a block being read or still landing, and a lookup never counts a block that is not there."""
    rng = random.Random(7)
    tier = HostTier(50)
    reading: list[tuple] = []
    for now in range(0, 4000, 3):
        keys = [rng.randrange(120) for _ in range(rng.randrange(1, 30))]
        keys = list(dict.fromkeys(keys))
        op = rng.random()
        if op < 0.5:
            before = {k: tier.lands_at(k) for k in tier.keys()}
            taken = _store(tier, keys, now, now + rng.randrange(0, 40))
            gone = set(before) - set(tier.keys())
            assert all(before[k] <= now for k in gone)  # (only landed blocks go)
            assert not gone & {k for ks, _ in reading for k in ks}
            assert taken is None or set(taken) <= set(tier.keys())
        elif op < 0.7:
            n, _ = tier.lookup(keys, now)
            if n > 0:
                assert all(tier.lands_at(k) <= now for k in keys[:n])
                reading.append((keys[:n], tier.read(keys[:n])))
        elif op < 0.85 and reading:
            tier.done_reading(reading.pop(rng.randrange(len(reading)))[1])
        else:
            tier.touch_reversed(keys)
        assert len(tier) <= tier.capacity


class _PlainLru:
    """The tier's rules stated plainly, one key at a time over an ordered dict (least recent first): what the
    slot-and-log ``HostTier`` must agree with, operation by operation."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.order, self.reads = capacity, OrderedDict(), Counter()
        self.landing: list[list] = []  # [lands, free from, count counted as landed]

    def _can_go(self, key, now, protected) -> bool:
        _, free_at = self.order[key]
        return free_at <= now and not self.reads[key] and key not in protected

    def store(self, keys, now):
        here = [key for key in keys if key in self.order]
        new = [key for key in keys if key not in self.order]
        if not new:
            return new, None
        over = len(self.order) + len(new) - self.capacity
        if over > 0:
            protected = set(here)
            victims = [key for key in self.order if self._can_go(key, now, protected)][:over]
            if len(new) > self.capacity - len(here) or len(victims) < over:
                return None
            for key in victims:
                del self.order[key]
        times = [float("inf"), float("inf")]  # (shared by the copy's keys, as ``Copy``)
        for key in new:
            self.order[key] = times
        return new, times

    def promote(self, keys, now):
        over = len(self.order) + len(keys) - self.capacity
        count = len(keys)
        if over > 0:
            victims = [key for key in self.order if self._can_go(key, now, set())][:over]
            count -= over - len(victims)
            for key in victims:
                del self.order[key]
        times = [float("inf"), float("inf")]
        for key in keys[:max(count, 0)]:
            self.order[key] = times
        return max(count, 0), times

    def lookup(self, keys, now):
        n = 0
        while n < len(keys) and keys[n] in self.order:
            n += 1
        late = [self.order[key][0] for key in keys[:n] if self.order[key][0] > now]
        if late:
            return -1, None if late[0] == float("inf") else late[0]
        if any(self.reads[key] for key in keys[:n]):
            return -1, None
        return n, None

    def touch_reversed(self, keys):
        for key in reversed(keys):
            if key in self.order:
                self.order.move_to_end(key)


def _store_both(tier: HostTier, plain: _PlainLru, copies: list, now: int, keys: list, given) -> tuple | None:
    """Both store ``keys`` (the tier given ``given``: them, or their run) and must agree on what they take; a copy
    that takes blocks joins ``copies``. Returns the tier's answer."""
    taken, want = tier.store(given, now), plain.store(keys, now)
    assert (taken is None) == (want is None)
    if taken is not None:
        assert taken[0] == want[0]
        if want[1] is not None:
            copies.append((taken[1], want[1], len(taken[0])))
    return taken


def _promote_both(tier: HostTier, plain: _PlainLru, copies: list, now: int, keys: list, given) -> None:
    """Both take slots for ``keys`` (none of them held; the tier given ``given``) to be read from storage, and must
    take as many; a copy that takes some joins ``copies``."""
    got, want = tier.promote(given, now), plain.promote(keys, now)
    assert got[0] == want[0]
    if got[0]:
        copies.append((got[1], want[1], got[0]))


def _land_or_release(tier: HostTier, copies: list, rng: random.Random, now: int) -> None:
    """A random copy of ``copies`` lands (a pinned one is released later), or a pinned one that landed is
    released: ``copies`` holds (the tier's ``Copy``, ``_PlainLru``'s times, its blocks)."""
    copy, times, count = copies.pop(rng.randrange(len(copies)))
    if times[0] == float("inf"):
        lands, pinned = now + rng.randrange(0, 30), rng.random() < 0.3
        tier.landed(copy, count, lands, pinned)
        times[0] = lands
        if not pinned:
            times[1] = lands
        else:
            copies.append((copy, times, count))
    elif times[1] == float("inf"):
        tier.release(copy, count, now)
        times[1] = now


def _look_up_and_load(tier: HostTier, plain: _PlainLru, reading: list, rng: random.Random, now: int, keys: list,
                      ask) -> None:
    """Both look ``keys`` up and must agree; if some are found, a load reads the first few of them (a load may
    read fewer blocks than its lookup found). ``ask(a, b)``: what the tier is given for ``keys[a:b]``."""
    assert tier.lookup(ask(0, len(keys)), now) == plain.lookup(keys, now)
    found, _ = plain.lookup(keys, now)
    if found > 0:
        found = rng.randint(1, found)
        reading.append((keys[:found], tier.read(ask(0, found))))
        plain.reads.update(keys[:found])


def _end_a_load(tier: HostTier, plain: _PlainLru, reading: list, rng: random.Random) -> None:
    """A random load of ``reading`` (its keys, what the tier's ``read`` gave) ends."""
    done, held = reading.pop(rng.randrange(len(reading)))
    tier.done_reading(held)
    plain.reads.subtract(done)


def test_the_tier_agrees_with_its_rules_stated_plainly():
    """Property: random stores (landing now or later, some pinned for storage and released later), promotions,
    lookups, loads (read, then done) and finishes (touches, with and without the slots the request's stores
    and loads gave) leave ``HostTier`` and ``_PlainLru`` with the same answers and the same LRU order, on a
    tier small enough to evict all the time. Keys are drawn from a small set so that they are evicted, stored
    again in other slots, and touched through stale slots."""
    for seed in range(6):
        rng = random.Random(seed)
        tier, plain = HostTier(40), _PlainLru(40)
        reading, held_by, copies = [], {}, []
        for now in range(0, 3000, 2):
            keys = list(dict.fromkeys(rng.randrange(90) for _ in range(rng.randrange(1, 25))))
            op = rng.random()
            if op < 0.35:
                taken = _store_both(tier, plain, copies, now, keys, keys)
                if taken is not None:
                    held_by[tuple(keys)] = taken[2]
            elif op < 0.42:
                absent = [key for key in keys if key not in plain.order]
                _promote_both(tier, plain, copies, now, absent, absent)
            elif op < 0.6 and copies:
                _land_or_release(tier, copies, rng, now)
            elif op < 0.75:
                _look_up_and_load(tier, plain, reading, rng, now, keys, lambda a, b, keys=keys: keys[a:b])
            elif op < 0.85 and reading:
                _end_a_load(tier, plain, reading, rng)
            else:
                stored = [ks for ks in held_by if ks[0] == keys[0]]
                if stored and rng.random() < 0.7:
                    keys = list(stored[-1])
                    tier.touch_reversed(keys, [held_by[stored[-1]]])
                else:
                    tier.touch_reversed(keys)
                plain.touch_reversed(keys)
            assert tier.keys() == list(plain.order)


def test_a_store_given_a_key_twice_raises_and_takes_nothing():
    """Block keys are chained hashes, so one store never holds a key twice; if it did, the tier says so and is
    left as it was: a, b held in a tier of 5, a store of c, c raises, and c, d, e then fit in the 3 free slots."""
    tier = HostTier(5)
    _store(tier, ["a", "b"], 0, 0)
    with pytest.raises(ValueError, match="distinct"):
        tier.store(["c", "c"], 1)
    assert tier.keys() == ["a", "b"]
    assert _store(tier, ["c", "d", "e"], 1, 1) == ["c", "d", "e"] and tier.keys() == ["a", "b", "c", "d", "e"]


def test_host_offload_configuration_rules():
    workers = {"aggregated": {"kv_cache": {"host_offload": {"capacity_gib": 8}}}}
    both = make_sglang_scenario(engine={"workers": {"aggregated": {"kv_cache": {"host_offload": {
        "capacity_gib": 8, "ratio": 2}}}}})
    assert "give capacity_gib or ratio, not both" in scenario_error(both)
    assert "write_policy: must be one of write_through, write_through_selective, write_back" in scenario_error(
        make_sglang_scenario(engine={"workers": {"aggregated": {"kv_cache": {"host_offload": {
            "write_policy": "lazy"}}}}}))
    assert "is SGLang HiCache's (--hicache-ratio)" in scenario_error(make_scenario(engine={"workers": {
        "aggregated": {"kv_cache": {"host_offload": {"capacity_gib": 8, "ratio": 2}}}}}))
    no_cache = make_scenario(engine={"workers": {"aggregated": {"kv_cache": {
        "prefix_caching": False, "host_offload": {"capacity_gib": 8}}}}})
    assert "exist only with prefix caching" in scenario_error(no_cache)
    # 16 tokens × 131,072 bytes (Llama-3.1-8B at tensor 1) = 2 MiB a block: 1 MiB holds none.
    tiny = make_scenario(engine={"workers": {"aggregated": {"kv_cache": {"host_offload": {"capacity_gib": 1 / 1024}}}}})
    assert scenario_error(tiny) == ("engine.workers.aggregated.kv_cache.host_offload.capacity_gib: holds no whole KV "
                                    "block (one is 2 MiB over the rank's GPUs); give it at least that")
    for field, value, rule in (("capacity_gib", 0, "must be a positive number"), ("policy", "arc", "must be one of lru"),
                               ("link_gb_per_s", -1, "must be a positive number"),
                               ("latency_us", "x", "must be a non-negative number"), ("tier", 1, "unknown field")):
        bad = make_scenario(engine={"workers": copy.deepcopy(workers)})
        bad["engine"]["workers"]["aggregated"]["kv_cache"]["host_offload"][field] = value
        assert f"kv_cache.host_offload.{field}: {rule}" in scenario_error(bad), field
    missing = make_scenario(engine={"workers": {"aggregated": {"kv_cache": {"host_offload": {"policy": "lru"}}}}})
    assert "host_offload.capacity_gib: required field is missing" in scenario_error(missing)


def test_a_decode_worker_takes_no_host_tier():
    role = {"kv_cache": {"host_offload": {"capacity_gib": 8}},
            "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}}
    data = make_scenario()
    data["engine"]["mode"] = "disaggregated"
    data["engine"]["workers"] = {"prefill": role, "decode": role}
    assert "decode.kv_cache.host_offload: a decode worker receives its prompts' KV" in scenario_error(data)


def test_host_offload_null_means_no_tier():
    from pathlib import Path

    from simmodel.config.load import parse_scenario

    data = make_scenario(engine={"workers": {"aggregated": {"kv_cache": {"host_offload": None}}}})
    assert parse_scenario(data, Path(".")).engine.workers["aggregated"].kv_cache.host_offload is None


def test_a_request_whose_own_copy_has_not_landed_is_not_looked_up():
    """vLLM does not look a request up while a copy of its own is in flight (a preempted request whose prompt
    is still on its way to the host): the lookup says wait, and the rank plans again when the copy lands. A
    request's 2 prompt blocks offered at t = 0 (slots taken), copied at the pass end t = 10 over a link of
    1 byte/ns with 1,000-byte blocks: the copy lands at 10 + 2,000 = 2,010."""
    from offload_stepdriver import FakeEnv

    from simmodel.engine.kv_cache import BlockKeys
    from simmodel.engine.request import Request
    from simmodel.engine.scheduler.base import SchedulerOutput
    from simmodel.offload import HostLink, VllmCpuOffload

    env = FakeEnv()
    offload = VllmCpuOffload(env, HostTier(10), HostLink(1e9, 0), HostLink(1e9, 0), 4, 1000.0, 1000.0)
    woken = []
    offload.on_wake = lambda: woken.append(env.now)
    request = Request(0, 0, 8, 4)
    request.block_keys = BlockKeys(lambda j: ("r", j))
    plan = SchedulerOutput([request], [8], [0], [False], [True])
    offload.planned(plan, 0)
    env.run_until(10)
    offload.pass_ended(plan, 10, 0)
    assert offload.tier.lands_at(request.block_keys(0)) == 2010
    env.run_until(500)
    assert offload.lookup(request, 0) == -1 and offload.waking
    env.run_until(2010)
    assert woken == [2010] and not offload.waking
    assert offload.lookup(request, 0) == 2  # (its blocks are on the host now)


def test_an_offer_larger_than_the_tier_is_not_made_again():
    """A tier of 3 blocks: an offer of 4 new blocks can never fit, however much is evicted (``never_fits``); one
    of 2 blocks while the 2 landed blocks it would evict are being read fits in principle and only waits.
    Through the connector: a request whose 4 prompt blocks the tier can never hold is not kept retrying (its
    passes may run in runs), and its next plan makes no second failed offer."""
    from offload_stepdriver import FakeEnv

    from simmodel.engine.kv_cache import BlockKeys
    from simmodel.engine.request import Request
    from simmodel.engine.scheduler.base import SchedulerOutput
    from simmodel.offload import HostLink, VllmCpuOffload

    tier = HostTier(3)
    assert tier.store(["a", "b", "c", "d"], 0) is None and tier.never_fits and tier.num_failed == 1
    _store(tier, ["a", "b"], 0, 0)
    tier.read(["a", "b"])
    assert tier.store(["c", "d"], 1) is None and not tier.never_fits and tier.num_failed == 2

    env = FakeEnv()
    offload = VllmCpuOffload(env, HostTier(3), HostLink(1e9, 0), HostLink(1e9, 0), 4, 1000.0, 1000.0)
    request = Request(0, 0, 16, 4)
    request.block_keys = BlockKeys(lambda j: ("r", j))
    offload.planned(SchedulerOutput([request], [16], [0], [False], [True]), 0)
    assert offload.tier.num_failed == 1 and not offload.retrying
    offload.planned(SchedulerOutput([request], [1], [16], [True], [True]), 10)
    assert offload.tier.num_failed == 1 and len(offload.tier) == 0


def _trace_requests(rng: random.Random, count: int, per: int) -> list:
    """Requests of a Mooncake-like trace (``per`` KV blocks of one token to a trace block): each one's hash ids
    are a conversation's first few (so that prompts share prefixes and diverge at trace-block bounds), and some
    know fewer tokens than their blocks hold (blocks past them are their own, groups of one)."""
    conversations = [[rng.randrange(1000) for _ in range(8)] for _ in range(4)]
    requests = []
    for i in range(count):
        ids = tuple(rng.choice(conversations)[:rng.randint(1, 8)])
        known = len(ids) * per - (rng.randrange(per + 1) if rng.random() < 0.3 else 0)
        blocks = BlockKeys(TraceBlocks(ids, per, 1, known, (-1, i)))
        requests.append((blocks, len(ids) * per + rng.randrange(3)))
    return requests


def test_a_tier_keyed_by_trace_blocks_agrees_with_its_rules_stated_plainly():
    """Property: the tier keyed by groups of blocks (``BlockRun``s of trace blocks, 4 KV blocks each) gives
    ``_PlainLru``'s answers and LRU order, operation by operation, for random stores, promotions, lookups,
    loads and touches over random ranges of requests whose prompts share and leave conversations at trace-block
    bounds, some with blocks past what the trace knows; half way through each seed, a plain list of keys
    (a run that does not group) turns it into a tier of blocks, which must go on agreeing."""
    for seed in range(6):
        rng = random.Random(seed)
        requests = _trace_requests(rng, 30, 4)
        tier, plain = HostTier(60), _PlainLru(60)
        reading, copies = [], []
        for step, now in enumerate(range(0, 3000, 2)):
            blocks, n = rng.choice(requests)
            start = rng.randrange(n) if rng.random() < 0.4 else 0
            stop = rng.randint(start + 1, n)
            run = blocks.run(start, stop)
            keys = blocks.upto(stop)[start:stop]
            if step == 750:  # (a plain list does not group: the tier keys blocks from now on)
                assert tier.keys_groups
                assert tier.lookup(list(keys), now) == plain.lookup(keys, now)
                assert not tier.keys_groups
            op = rng.random()
            if op < 0.35:
                taken = _store_both(tier, plain, copies, now, keys, run)
                assert not taken or not taken[0] or tier.keys()[-len(taken[0]):] == taken[0]  # (the newest, in order)
            elif op < 0.42:
                absent = 0
                while absent < len(keys) and keys[absent] not in plain.order:
                    absent += 1
                _promote_both(tier, plain, copies, now, keys[:absent], run.sub(start, start + absent))
            elif op < 0.6 and copies:
                _land_or_release(tier, copies, rng, now)
            elif op < 0.75:
                _look_up_and_load(tier, plain, reading, rng, now, keys, lambda a, b, run=run: run.sub(run.start + a, run.start + b))
            elif op < 0.85 and reading:
                _end_a_load(tier, plain, reading, rng)
            else:
                tier.touch_reversed(run)
                plain.touch_reversed(keys)
            assert tier.keys() == list(plain.order)
            assert len(tier) == len(plain.order) <= tier.capacity


def test_a_run_of_another_block_size_turns_the_tier_into_a_dict_of_blocks():
    """Two requests with 4 KV blocks to a trace block, one of 1-token blocks, one of 2-token blocks: the keys of a
    group's later blocks follow from its first one's with the block size of its content, so the second request
    turns the tier into a dict of blocks, and every block keeps its key (the first request's 4 blocks, then the
    second's 4, in the order they were stored)."""
    first = BlockKeys(TraceBlocks((7,), 4, 1, 4, (-1, 0)))
    second = BlockKeys(TraceBlocks((7,), 4, 2, 8, (-1, 1)))
    tier = HostTier(20)
    _store(tier, first.run(0, 4), 0, 0)
    assert tier.keys_groups
    _store(tier, second.run(0, 4), 1, 1)
    assert not tier.keys_groups
    assert tier.keys() == first.upto(4)[:4] + second.upto(4)[:4]
    assert tier.lookup(first.run(0, 4), 2) == (4, None) and tier.lookup(second.run(0, 4), 2) == (4, None)
