"""TensorRT-LLM's capacity and micro-batch rules (``simmodel.engine.scheduler.trtllm``), pass by pass, with
expected numbers derived by hand in the comments (KV blocks of 4 tokens throughout, so block counts stay small).
"""

from __future__ import annotations

from simmodel.engine.kv_cache import BlockKeys, BlockPool, PrefixCachingBlockPool, token_block_content
from simmodel.engine.request import Request, RequestStatus
from simmodel.engine.scheduler.trtllm import TrtllmScheduler, TrtllmSchedulerConfig


def scheduler(blocks: int, policy: str = "guaranteed_no_evict", budget: int = 8192, unit: int = 4,
              chunked: bool = True, caching: bool = False, max_batch: int = 256, max_seq_len: int = 10_000,
              client_max_tokens: int = 0) -> TrtllmScheduler:
    pool = (PrefixCachingBlockPool if caching else BlockPool)(blocks, 4)
    config = TrtllmSchedulerConfig(max_batch_size=max_batch, max_num_tokens=budget, max_seq_len=max_seq_len,
                                   capacity_policy=policy, enable_chunked_context=chunked, chunk_unit=unit,
                                   client_max_tokens=client_max_tokens)
    return TrtllmScheduler(config, pool)


def request(i: int, prompt: int, outputs: int, tokens: list[int] | None = None) -> Request:
    r = Request(i, 0, prompt, outputs)
    if tokens is not None:
        r.block_keys = BlockKeys(token_block_content(tokens, 4, ("own", i)))
    return r


def step(s: TrtllmScheduler):
    """One pass: its plan, then its outputs applied; returns (plan, finished)."""
    plan = s.schedule()
    _, finished = s.update_from_output(plan)
    return plan, finished


def planned(plan) -> dict[int, int]:
    return {r.request_id: n for r, n in zip(plan.requests, plan.num_new_tokens)}


def test_guaranteed_no_evict_starts_only_what_fits_to_completion():
    # 10 blocks. A: 8 + 8 tokens → ceil(16/4) = 4 blocks to completion; B: 8 + 12 → 5; C: 4 + 4 → 2.
    # Pass 1: A fits (4 ≤ 10), takes 2 blocks (its 8 prompt tokens), still owed 2: free 8, promised 2.
    # B fits (5 ≤ 8 − 2 = 6), takes 2: free 6, promised 2 + 3 = 5. C needs 2 > 6 − 5 = 1: it waits.
    s = scheduler(10)
    a, b, c = request(0, 8, 8), request(1, 8, 12), request(2, 4, 4)
    for r in (a, b, c):
        s.add_request(r)
    plan, _ = step(s)
    assert planned(plan) == {0: 8, 1: 8}
    # Decoding moves blocks from free to held one for one: free − promised stays 1 until A finishes. A samples
    # its 8th token at pass 8 and frees 4 blocks; B then holds ceil(15/4) = 4 of its 5: free 6, promised 1,
    # and C (2 ≤ 5) starts in pass 9, not before.
    for k in range(2, 9):
        plan, finished = step(s)
        assert 2 not in planned(plan), k
    assert finished == [a]
    plan, _ = step(s)
    assert planned(plan) == {1: 1, 2: 4}


def test_guaranteed_no_evict_holds_blocks_for_the_max_tokens_clients_send():
    # The same A (8 prompt tokens, 8 out), B (8, 12), C (4, 4) on 10 blocks, their clients sending max_tokens 20:
    # A holds ceil((8 + 20) / 4) = 7 to completion, starts (7 ≤ 10) holding 2: free 8, owed 5; B needs 7 > 3 and
    # waits behind it. Left unset (max_seq_len 20: up to 20 tokens), each needs ceil(20 / 4) = 5: A starts (free 8,
    # owed 3), B too (5 ≤ 5: free 6, owed 6), C (5 > 0) waits. A request still stops at its own output length.
    for max_seq_len, client, started in ((10_000, 20, {0: 8}), (20, 20, {0: 8, 1: 8})):
        s = scheduler(10, max_seq_len=max_seq_len, client_max_tokens=client)
        a = request(0, 8, 8)
        for r in (a, request(1, 8, 12), request(2, 4, 4)):
            s.add_request(r)
        assert planned(step(s)[0]) == started, max_seq_len
    while a.status is RequestStatus.RUNNING:
        step(s)
    assert a.num_output_tokens == 8


def test_max_utilization_starts_on_the_prompt_alone():
    # The same three requests under max_utilization: each needs only its prompt's blocks now (2, 2, 1 of 10).
    s = scheduler(10, policy="max_utilization")
    for r in (request(0, 8, 8), request(1, 8, 12), request(2, 4, 4)):
        s.add_request(r)
    plan, _ = step(s)
    assert planned(plan) == {0: 8, 1: 8, 2: 4}


def test_max_utilization_pauses_the_newest_started_request():
    # 4 blocks; A and B: 4-token prompts, 10 outputs. Pass 1 starts both (1 block each) and samples a token each
    # (5 tokens known). Pass 2 computes token 5 of each: a second block each, free 0. Passes 3–5 compute tokens
    # 6–8 (still 2 blocks). Pass 6: A's token 9 needs a 3rd block, none free: B (started last) is paused, its 2
    # blocks freed and A takes one; a pass that paused starts nothing.
    s = scheduler(4, policy="max_utilization")
    a, b = request(0, 4, 10), request(1, 4, 10)
    s.add_request(a)
    s.add_request(b)
    for _ in range(5):
        plan, _ = step(s)
        assert plan.preempted == []
    plan, _ = step(s)
    assert plan.preempted == [b] and planned(plan) == {0: 1}
    assert b.status is RequestStatus.PREEMPTED and b.num_output_tokens == 5 and s.num_pauses == 1
    # B needs ceil((4 + 5) / 4) = 3 blocks to recompute its prompt and its 5 tokens; A holds 3 of 4 until its
    # 13th computed token takes the 4th (pass 10, which samples A's 10th and last token: A frees 4). Pass 11
    # resumes B with its 9 tokens.
    for k in range(7, 11):
        plan, finished = step(s)
        assert planned(plan) == {0: 1}, k
    assert finished == [a]
    plan, _ = step(s)
    assert plan.resumed == [b] and planned(plan) == {1: 9}


def test_static_batch_starts_requests_only_when_the_batch_drained():
    # A: 4 + 3 tokens starts in pass 1 and samples in passes 1–3. B arrives after pass 1: under static_batch it
    # waits until nothing runs (pass 4); under guaranteed_no_evict it starts in pass 2.
    for policy, starts_at in (("static_batch", 4), ("guaranteed_no_evict", 2)):
        s = scheduler(100, policy=policy)
        s.add_request(request(0, 4, 3))
        step(s)
        s.add_request(request(1, 4, 3))
        for k in range(2, 5):
            plan, _ = step(s)
            if 1 in planned(plan):
                assert k == starts_at, policy
                break
        else:
            raise AssertionError(policy)


def test_a_truncated_chunk_is_whole_units():
    # A 30-token prompt alone under a 10-token budget, unit 4 (the block size): 10 // 4 × 4 = 8 tokens a pass,
    # 8, 8, 8, then the last 6 (they fit whole). With unit 1: 10, 10, 10.
    for unit, chunks in ((4, [8, 8, 8, 6]), (1, [10, 10, 10])):
        s = scheduler(100, budget=10, unit=unit)
        s.add_request(request(0, 30, 2))
        got = [planned(step(s)[0])[0] for _ in chunks]
        assert got == chunks, unit


def test_a_chunk_after_decodes_takes_whole_units_of_what_is_left():
    # A decodes (1 token of the 10); B's 30-token prompt gets 9 // 4 × 4 = 8. Budget 5, two decodes: 3 left,
    # less than a unit: C's prompt runs nothing and stays queued.
    s = scheduler(100, budget=10)
    s.add_request(request(0, 4, 5))
    step(s)
    s.add_request(request(1, 30, 2))
    assert planned(step(s)[0]) == {0: 1, 1: 8}
    s = scheduler(100, budget=5)
    s.add_request(request(0, 4, 5))
    s.add_request(request(1, 1, 5))
    step(s)
    s.add_request(request(2, 30, 2))
    plan, _ = step(s)
    assert planned(plan) == {0: 1, 1: 1}
    assert [r.request_id for r in s.waiting] == [2]


def test_unchunked_prompt_waits_for_a_pass_it_fits_whole():
    # Without chunked context a prompt runs whole: A (6 tokens) fills a 10-token budget to 6, B (5) does not fit
    # the 4 left and blocks C (2) behind it (first come first served).
    s = scheduler(100, budget=10, chunked=False)
    for r in (request(0, 6, 2), request(1, 5, 2), request(2, 2, 2)):
        s.add_request(r)
    assert planned(step(s)[0]) == {0: 6}
    assert planned(step(s)[0]) == {0: 1, 1: 5, 2: 2}


def test_cached_blocks_give_no_credit_toward_a_start():
    # 6 blocks with block reuse. A: 9 prompt tokens, 3 outputs → 3 blocks to completion; it takes 3 and caches
    # its 2 full ones: 3 free, none owed. B shares A's first 8 tokens, 9 + 7 → 4 blocks to completion: TensorRT-LLM
    # counts them all (getRemainingBlocksToCompletion), 4 > 3, so B waits although 2 of them are A's cached blocks
    # (Dynamo's mocker would credit them and start B). C (4 + 4 → 2 ≤ 3) is behind B and waits too.
    shared = list(range(8))
    s = scheduler(6, caching=True)
    s.add_request(request(0, 9, 3, shared + [100]))
    s.add_request(request(1, 9, 7, shared + [200]))
    s.add_request(request(2, 4, 4, [300, 301, 302, 303]))
    plan, _ = step(s)
    assert planned(plan) == {0: 9} and [r.request_id for r in s.waiting] == [1, 2]
    # Once A finishes (its 3rd token, pass 3) its blocks are free (the 2 cached ones evictable): B starts from its
    # 2 cached blocks, computing its last prompt token; C then needs 2 ≤ 6 − 3 held by B − 1 owed by B.
    step(s)
    step(s)
    plan, _ = step(s)
    assert planned(plan) == {1: 1, 2: 4} and plan.requests[0].num_cached_tokens == 8


def test_decodes_go_before_a_prompt_being_chunked():
    # Budget 10, unit 4. A's 30-token prompt gets 8 (10 // 4 × 4), leaving 2: B's 1-token prompt starts with them.
    # Next pass B decodes first (TensorRT-LLM's micro-batch scheduler counts generation requests, then gives the
    # contexts what is left): B 1, A 9 // 4 × 4 = 8.
    s = scheduler(100, budget=10)
    s.add_request(request(0, 30, 2))
    s.add_request(request(1, 1, 5))
    assert planned(step(s)[0]) == {0: 8, 1: 1}
    plan, _ = step(s)
    assert [(r.request_id, n) for r, n in zip(plan.requests, plan.num_new_tokens)] == [(1, 1), (0, 8)]


def test_the_generation_side_reserves_a_handoff_only_if_its_whole_sequence_fits():
    # P/D decode rank, 10 blocks of 4. Remote A (8 + 8 → 4 blocks to completion): reserved, its prompt's 2 blocks
    # taken, 2 owed: free 8. B (8 + 12 → 5 ≤ 8 − 2): reserved, free 6, owed 2 + 3 = 5. C (4 + 4 → 2 > 6 − 5 = 1)
    # waits. Reserving spends no budget and runs nothing; each reservation starts a transfer (the callback).
    s = scheduler(10)
    started = []
    s.on_kv_reserved = started.append
    a, b, c = request(0, 8, 8), request(1, 8, 12), request(2, 4, 4)
    for r in (a, b, c):
        r.kv_transferred = True
        s.add_remote(r)
    plan, _ = step(s)
    assert plan.requests == [] and started == [a, b] and [r.request_id for r in s.waiting] == [2]
    assert s.pool.num_free_blocks == 6 and a.num_missing_blocks == 2
    # A's KV arrives: it starts ahead of the queue, decoding its prompt's last token (its first output), with
    # no block to take; C still waits (A now owes its 2 as a running request).
    s.add_handoff(a)
    plan, _ = step(s)
    assert planned(plan) == {0: 1} and plan.is_decode == [True] and a.num_output_tokens == 1
    assert started == [a, b] and s.pool.num_free_blocks == 6
