"""vLLM's prefix-caching block pool (``engine.kv_cache.PrefixCachingBlockPool``) when several blocks hold one key:
which block a hit takes, which blocks a prefix depends on, and what eviction leaves. Expected values by hand from
vLLM's rules (the pool's class doc): the first block cached under a key is the one a hit takes; a freed request's
blocks rejoin the free queue tail-first; allocation takes from the front and evicts what it takes."""

from __future__ import annotations

from types import SimpleNamespace

from simmodel.engine.kv_cache import BlockKeys, PrefixCachingBlockPool


def _cache_twice(pool: PrefixCachingBlockPool, keys: BlockKeys) -> None:
    """Two requests of the same two blocks of content, one after the other: each takes two blocks from the front of
    the free queue, caches both (32 tokens) and is freed."""
    for _ in range(2):
        request = SimpleNamespace(block_ids=pool.allocate_ids(2), num_cached_blocks=0, block_keys=keys, num_blocks=2)
        pool.cache_full_blocks(request, 32)
        pool.free_request(request)


def test_hits_take_the_first_block_cached_under_a_key_until_eviction_leaves_another():
    """Four blocks of 16 tokens. Requests A and B have the same two blocks of content (k0 k1): A takes blocks 0 1 and
    caches them, is freed (queue 2 3 1 0); B takes 2 3 and caches them as second copies, is freed (queue 1 0 3 2).
    A 33-token prompt of that content looks up (33 − 1) // 16 = 2 blocks: hits 0 1 (the first copies), resting on
    all four blocks. Taking single blocks from the front: 1 goes (k1 now only in 3: hits 0 3), then 0 (k0 only in 2:
    hits 2 3), then 3 (k1's last copy: hits 2 alone, the prefix resting on block 2 only)."""
    pool = PrefixCachingBlockPool(4, 16)
    keys = BlockKeys(lambda j: ("same", j))
    _cache_twice(pool, keys)
    prompt = SimpleNamespace(num_tokens=33, block_keys=keys)
    assert pool.find_hits(prompt) == [0, 1]
    assert pool.allocate_one() == 1
    assert pool.find_hits(prompt) == [0, 3]
    assert pool.allocate_one() == 0
    assert pool.find_hits(prompt) == [2, 3]
    assert pool.allocate_ids(1) == [3]  # (through the run of blocks a prompt takes, as through a decode's one)
    assert pool.find_hits(prompt) == [2]
    assert pool.allocate_ids(1) == [2]
    assert pool.find_hits(prompt) == [] and not pool.blocks_by_key


def test_a_block_cached_again_by_its_own_request_is_not_a_second_holder():
    """A request caching 32 tokens, then 48 of its three blocks: the first two keys are cached once (one holder
    each), the third added; freeing and taking all three evicts each key with its only block."""
    pool = PrefixCachingBlockPool(3, 16)
    events = []
    pool.listener = lambda keys, stored: events.extend((key, stored) for key in keys)
    keys = BlockKeys(lambda j: ("own", j))
    request = SimpleNamespace(block_ids=pool.allocate_ids(3), num_cached_blocks=0, block_keys=keys, num_blocks=3)
    pool.cache_full_blocks(request, 32)
    pool.cache_full_blocks(request, 48)
    assert events == [(keys(0), True), (keys(1), True), (keys(2), True)]
    prompt = SimpleNamespace(num_tokens=49, block_keys=keys)
    assert pool.find_hits(prompt) == [0, 1, 2]
    pool.free_request(request)
    assert sorted(pool.allocate_ids(3)) == [0, 1, 2]
    assert events[3:] == [(keys(2), False), (keys(1), False), (keys(0), False)] and not pool.blocks_by_key


class _Prompt(SimpleNamespace):
    """A waiting request (hashable, as the engine's are)."""

    __hash__ = object.__hash__


def test_the_first_free_block_a_waiting_prompt_rests_on():
    """Five blocks of 16 tokens. A and B hold the same two blocks of content (s0 s1): A takes 0 1, caches and frees
    them (queue 2 3 4 1 0); B takes 2 3, caches them as second copies and frees them (queue 4 1 0 3 2); U takes 4 and
    frees it uncached, back to the front (queue 4 1 0 3 2). A 33-token prompt of that content rests on all four
    cached blocks (s0 in 0 and 2, s1 in 1 and 3): the first of them in the queue is block 1, at position 1, and
    among the first one block (4, uncached) there is none. A 17-token prompt rests on s0 alone: blocks 0 and 2, at
    positions 2 and 4; beside a prompt of other content (nothing cached), still position 2; before the 33-token
    prompt, position 1 (the first prompt's block does not end the search: a later one may come sooner)."""
    pool = PrefixCachingBlockPool(5, 16)
    same = BlockKeys(lambda j: ("s", j))
    _cache_twice(pool, same)
    lone = SimpleNamespace(block_ids=pool.allocate_ids(1), num_cached_blocks=0, block_keys=BlockKeys(lambda j: ("u", j)),
                           num_blocks=1)
    pool.free_request(lone)
    long, short = _Prompt(num_tokens=33, block_keys=same), _Prompt(num_tokens=17, block_keys=same)
    other = _Prompt(num_tokens=33, block_keys=BlockKeys(lambda j: ("q", j)))
    assert pool.first_free_holder([long], 5) == 1
    assert pool.first_free_holder([long], 1) is None
    assert pool.first_free_holder([short], 5) == 2
    assert pool.first_free_holder([other, short], 5) == 2
    assert pool.first_free_holder([other], 5) is None
    assert pool.first_free_holder([short, long], 5) == 1
    long.num_tokens = 17  # (the same request asked about again, its prompt now one block: as the short one)
    assert pool.first_free_holder([long], 5) == 2
