"""A request's KV block keys from a trace's hash ids (``engine.kv_cache.TraceBlocks``): what each block holds, by hand,
and the keys its one-loop chaining makes, which must be those ``BlockKeys`` chains one block at a time."""

from __future__ import annotations

import numpy as np

from simmodel.engine.kv_cache import BlockKeys, TraceBlocks, trace_block_content


def test_each_kv_block_holds_its_slice_of_one_trace_block_then_the_requests_own_tokens():
    """Trace blocks of 64 tokens (hash ids 7 and 8), KV blocks of 16, a 100-token prompt: the trace knows 100 tokens,
    so blocks 0–5 ((5 + 1) × 16 = 96 ≤ 100) hold slices of trace blocks 7 (blocks 0–3) and 8 (blocks 4–5), and block
    6 on (7 × 16 = 112 > 100) is the request's own."""
    content = trace_block_content((7, 8), 64, 100, 16, (-1, 5))
    assert [content(j) for j in range(8)] == [((7, 0, 16),), ((7, 16, 32),), ((7, 32, 48),), ((7, 48, 64),),
                                              ((8, 0, 16),), ((8, 16, 32),), ((-1, 5), 6), ((-1, 5), 7)]
    same = trace_block_content((7, 8, 9), 16, 40, 16, (-1, 6))  # (one KV block per trace block: 40 tokens, 2 known)
    assert [same(j) for j in range(4)] == [((7, 0, 16),), ((8, 0, 16),), ((-1, 6), 2), ((-1, 6), 3)]


def test_chained_keys_are_the_keys_chained_one_block_at_a_time():
    """Random traces, block sizes and prompt lengths, keys asked for in random steps: ``TraceBlocks.chain`` makes the
    keys ``BlockKeys`` makes from the same content hidden behind a plain function (one block at a time), the first
    being hash((0, content(0)))."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        block_size = int(rng.choice([1, 4, 16, 64]))
        per = int(rng.integers(1, 9))
        hash_ids = tuple(rng.integers(0, 50, int(rng.integers(0, 12))).tolist())
        prompt = int(rng.integers(1, (len(hash_ids) + 2) * per * block_size + 2))
        content = trace_block_content(hash_ids, per * block_size, prompt, block_size, (-1, 9))
        assert isinstance(content, TraceBlocks)
        chained, plain = BlockKeys(content), BlockKeys(lambda j, content=content: content(j))
        n = 0
        while n < prompt // block_size + 3:
            n += int(rng.integers(1, 2 * per + 2))
            assert chained.upto(n)[:n] == plain.upto(n)[:n]
        assert chained(0) == hash((0, content(0)))
