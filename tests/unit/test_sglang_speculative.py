"""SGLang's EAGLE/MTP speculative decoding (spec v2, topk 1), scheduler rule 10 of ``engine/scheduler/sglang.py``.

Expected numbers are derived by hand from sglang 0.5.23's source (no golden: its CPU scheduler oracle has no draft
worker to run): ``get_alloc_reserve_per_decode`` = 2 · max(steps · topk, draft tokens) = 2 (k + 1);
``page_aligned_decode_alloc_lens`` grows a request's ``kv_allocated_len`` to ``ceil_page(committed + reserve)`` and
never shrinks it; ``_resolve_spec_v2_tokens`` commits the accepted drafts plus the target's token;
``update_finish_state`` caps the output at ``max_new_tokens``; ``release_kv_cache`` keeps ``owned_kv_len`` (the
tokens up to the last output's predecessor) and frees the rest of the row.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_sglang_scenario, run_scenario

from simmodel.config.load import parse_scenario
from simmodel.engine.request import Request, RequestStatus
from simmodel.engine.scheduler.sglang import SglangScheduler, SglangSchedulerConfig
from simmodel.errors import ScenarioError
from simmodel.sim import Simulation


def scheduler(kv_tokens: int, accepted: int, **config) -> SglangScheduler:
    """A rank whose every verification accepts ``accepted`` drafts."""
    sched = SglangScheduler(SglangSchedulerConfig(**config), kv_tokens)
    sched.accept = lambda request, drafts: accepted
    return sched


def passes(sched: SglangScheduler):
    """Plan passes one at a time (synchronously) until one plans nothing: each is yielded before its outputs are
    applied, which happens when the loop asks for the next."""
    while (out := sched.schedule()).requests:
        yield out
        sched.update_from_output(out)


def test_reserve_is_twice_the_draft_tokens():
    """topk 1: max(k · 1, k + 1) = k + 1 draft tokens; doubled for the overlap loop's lag."""
    assert [SglangSchedulerConfig(num_speculative_steps=k).decode_reserve for k in (0, 1, 3)] == [0, 4, 8]


def test_one_request_verifies_and_grows_its_allocation_by_hand():
    """k 3, 2 drafts accepted a round, prompt 10, 8 outputs, 1000 KV tokens, no radix cache.
    Pass 1 prefills 10 (free 990), samples token 1; committed 10.
    Pass 2 verifies 1 + 3 tokens over 10: allocation 10 → 10 + 8 = 18 (free 982); 3 tokens emitted (4), committed 13.
    Pass 3: 18 → 13 + 8 = 21 (free 979); outputs 7, committed 16.
    Pass 4: 21 → 24 (free 976); 3 accepted but 1 output left: 8, finished; its 24 tokens freed (free 1000).
    Drafts: 3 rounds × 3 verified, 2 accepted each (the last round's too, though one token was emitted)."""
    sched = scheduler(1000, 2, num_speculative_steps=3, radix_cache=False)
    r = Request(0, 0, 10, 8)
    sched.add_request(r)
    planned, outputs = [], []
    for out in passes(sched):
        if planned:  # (the pass before's outputs are applied now)
            outputs.append((r.num_output_tokens, r.num_emitted))
        planned.append((out.num_new_tokens, out.num_context_tokens, out.drafts.get(r, 0), sched.num_free_tokens))
    outputs.append((r.num_output_tokens, r.num_emitted))
    assert planned == [([10], [0], 0, 990), ([4], [10], 3, 982), ([4], [13], 3, 979), ([4], [16], 3, 976)]
    assert outputs == [(1, 1), (4, 3), (7, 3), (8, 1)]
    assert r.status is RequestStatus.FINISHED and sched.num_free_tokens == 1000
    assert (sched.num_drafts_verified, sched.num_drafts_accepted, r.spec_rounds) == (9, 6, 3)


def test_the_reserve_retracts_where_one_token_a_request_would_not():
    """k 1 (reserve 4), 1 draft accepted a round (2 tokens), 40 KV tokens, no radix cache; two requests of 10 → 20
    (clip_max_new_tokens 1, so both are admitted together). After the prefill 20 are free; each verification grows
    both allocations: 10 → 14 (free 12), → 16 (8), → 18 (4), → 20 (0), outputs 1, 3, 5, 7, 9. The fifth needs 2 more
    each with none free (a plain decode would need 1 each, and retract the same): B, last of the tie on
    (outputs, −prompt), is retracted and frees its 20 tokens; A takes 2 (free 18). The ratio is re-estimated from A:
    (9 + 20 · 1) / (20 + 1) > 1, so 1."""
    sched = scheduler(40, 1, num_speculative_steps=1, radix_cache=False, clip_max_new_tokens=1)
    a, b = Request(0, 0, 10, 20), Request(1, 0, 10, 20)
    sched.add_request(a)
    sched.add_request(b)
    frees, outputs = [], []
    for _ in range(5):
        out = sched.schedule()
        frees.append(sched.num_free_tokens)
        sched.update_from_output(out)
        outputs.append((a.num_output_tokens, b.num_output_tokens))
    assert frees == [20, 12, 8, 4, 0]
    assert outputs == [(1, 1), (3, 3), (5, 5), (7, 7), (9, 9)]
    out = sched.schedule()
    assert out.preempted == [b] and out.requests == [a] and out.num_context_tokens == [18]
    assert sched.num_free_tokens == 18 and sched.num_retractions == 1 and sched.new_token_ratio == 1.0
    assert b.status is RequestStatus.PREEMPTED and b.num_computed_tokens == 0


def test_overlap_loop_commits_a_pass_late():
    """The overlap loop plans pass n + 1 before pass n's outputs are processed, so the committed tokens lag a pass.
    k 3, 2 accepted, prompt 10, 8 outputs. Plan 1 prefills (free 990). Plan 2 verifies over 10: 10 → 18 (982); then
    pass 1's token. Plan 3: still 10 committed, 18 covers 10 + 8: nothing new (982); pass 2 commits 13 (outputs 4).
    Plan 4 over 13: → 21 (979); outputs 7, committed 16. Plan 5 over 16: → 24 (976); pass 4 emits the last output,
    and the row's 24 tokens are freed, plan 5's 3 with them (1000); pass 5's verification is discarded.
    Every verification writes at most k + 1 tokens past the committed ones of the plan before: 10 + 4 ≤ 18,
    13 + 4 ≤ 18 and the next, so the doubled reserve is what keeps the pass in flight inside the row."""
    sched = scheduler(1000, 2, num_speculative_steps=3, radix_cache=False, overlap=True)
    r = Request(0, 0, 10, 8)
    sched.add_request(r)
    plans, previous = [], None
    for _ in range(5):
        out = sched.schedule()
        plans.append((out.num_context_tokens, sched.num_free_tokens))
        if previous is not None:
            sched.update_from_output(previous)
        previous = out
    assert plans == [([0], 990), ([10], 982), ([10], 982), ([13], 979), ([16], 976)]
    assert r.status is RequestStatus.FINISHED and r.num_output_tokens == 8 and sched.num_free_tokens == 1000
    sched.update_from_output(previous)
    assert r.num_output_tokens == 8 and sched.num_free_tokens == 1000 and sched.num_drafts_verified == 9


def test_pages_and_the_radix_cache_by_hand():
    """Page size 4 (250 pages), k 1 (reserve 4), 1 accepted, prompt 10, 9 outputs, radix cache on. The prefill takes
    ceil(10/4) = 3 pages (free 247). Verification allocations: ceil_page(10 + 4) = 16 → 4 pages (+1, free 246);
    committed 12: ceil_page(16) = 16 (+0); 14: 20 (+1, 245); 16: 20 (+0). Outputs 1, 3, 5, 7, 9: done with 18
    committed (10 + 9 − 1); its 4 whole pages (16 tokens) stay in the tree, evictable; the partial page, which also
    held the unused reserve, is freed: 246 free."""
    sched = scheduler(1000, 1, num_speculative_steps=1, page_size=4)
    r = Request(0, 0, 10, 9)
    sched.add_request(r)
    free = [sched.cache.num_free for _ in passes(sched)]
    assert free == [247, 246, 246, 245, 245]
    assert r.num_computed_tokens == 18 and r.num_output_tokens == 9
    assert (sched.cache.num_free, sched.cache.num_evictable) == (246, 4)


def one_sglang_request(output_tokens: int, **engine):
    data = make_sglang_scenario(traffic={"source": {"input_tokens": 100, "output_tokens": output_tokens},
                                         "stop": {"requests": 1}}, engine=engine)
    return run_scenario(data)


def test_a_run_with_nextn_on_sglang():
    """Fixed timing (prefill 20 ms, decode 10 ms), nextn 3 with 2 accepted a round, 8 outputs: token 1 at 20, then
    3 a verification: 4 at 30, 7 at 40, 8 at 50 (E2E 50; 90 without drafts). Each verification schedules 1 + 3
    tokens; 3 rounds, acceptance 6 / 9, 3 tokens a round."""
    res = one_sglang_request(8, nextn=3, nextn_accepted=2.0)
    assert res.requests.e2e_ms.tolist() == pytest.approx([50])
    assert res.passes.num_scheduled_tokens.tolist() == [100, 4, 4, 4]
    spec = res.summary["speculation"]
    assert (spec["num_rounds"], spec["acceptance_rate"], spec["mean_tokens_per_round"]) == (3, pytest.approx(2 / 3), 3)


def test_max_sequences_defaults_to_sglangs_48_with_drafts():
    """SGLang sets ``max_running_requests`` 48 when it is unset with EAGLE/MTP drafts (``_handle_eagle_family``)."""
    def max_sequences(**worker):
        data = make_sglang_scenario(engine={"nextn": 2, "nextn_accepted": 1.0, "workers": {"aggregated": worker}})
        return parse_scenario(data, Path(".")).engine.workers["aggregated"].scheduler.max_sequences
    assert max_sequences() == 48
    assert max_sequences(scheduler={"max_sequences": 96}) == 96
    plain = parse_scenario(make_sglang_scenario(), Path(".")).engine.workers["aggregated"].scheduler.max_sequences
    assert plain == 256


@pytest.mark.parametrize("engine, path, rule", [
    ({"workers": {"aggregated": {"scheduler": {"enable_mixed_chunk": True}}}},
     "engine.workers.aggregated.scheduler.enable_mixed_chunk", "mixed chunks with EAGLE/MTP"),
    ({"workers": {"aggregated": {"kv_cache": {"host_offload": {"capacity_gib": 4}}}}},
     "engine.workers.aggregated.kv_cache.host_offload", "HiCache with speculative decoding"),
], ids=["mixed_chunk", "hicache"])
def test_what_sglang_speculation_refuses(engine, path, rule):
    data = make_sglang_scenario(engine={"nextn": 2, "nextn_accepted": 1.0, **engine})
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, Path("."))
    message = str(info.value)
    assert message.startswith(f"{path}: ") and rule in message and "\n" not in message, message


def test_disaggregated_sglang_speculation_is_refused():
    role = {"kv_cache": {"capacity": {"type": "fixed", "blocks": 100_000}},
            "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}}
    data = make_sglang_scenario(engine={"mode": "disaggregated", "nextn": 2, "nextn_accepted": 1.0})
    data["engine"]["workers"] = {"prefill": dict(role), "decode": dict(role)}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, Path("."))
    assert str(info.value).startswith("engine.mode: speculative decoding (engine.nextn) with a "
                                      "disaggregated SGLang deployment is not yet modeled")


def test_a_rank_must_hold_one_request_and_its_reserve():
    """nextn 5 keeps 2 (5 + 1) = 12 tokens allocated past a request's KV: one request at context_length 1024 needs
    1036 tokens (pages of one token), more than a rank of 1024; 1036 are enough."""
    def data(blocks: int) -> dict:
        return make_sglang_scenario(engine={"nextn": 5, "nextn_accepted": 1.0, "context_length": 1024, "workers": {
            "aggregated": {"kv_cache": {"capacity": {"type": "fixed", "blocks": blocks}}}}})
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data(1024), Path("."))
    assert str(info.value).startswith("engine.workers.aggregated.kv_cache.capacity: with EAGLE/MTP drafts (engine.nextn "
                                      "5) an SGLang request keeps 2 (k + 1) = 12 tokens")
    assert "needs 1036 tokens; a rank has 1024" in str(info.value)
    parse_scenario(data(1036), Path("."))


@pytest.mark.parametrize("page, overlap", [(1, False), (16, True)])
def test_nothing_leaks_under_retractions(page, overlap):
    """Property: 200 requests on two attention-DP ranks with 6,000 KV tokens each (retractions happen), shared
    prefixes in the radix cache: every request ends with all its outputs and, once all are done, every page of each
    rank is free or cached and evictable (no allocation, reserve included, is left behind)."""
    worker = {"kv_cache": {"block_size": page, "capacity": {"type": "fixed", "blocks": 6000 // page}},
              "parallelism": {"attention_data": 2}, "host_loop": overlap}
    data = make_sglang_scenario(
        traffic={"source": {"type": "synthetic", "input_tokens": {"distribution": "uniform", "min": 50, "max": 1500},
                            "output_tokens": {"distribution": "uniform", "min": 1, "max": 600},
                            "shared_prefix": {"tokens": 256, "groups": 4}},
                 "load": {"type": "poisson", "requests_per_second": 40}, "stop": {"requests": 200}},
        engine={"nextn": 3, "nextn_accepted": 1.5, "context_length": 4096, "workers": {"aggregated": worker}})
    sim = Simulation(parse_scenario(data, Path(".")))
    res = sim.run()
    assert res.summary["completed_requests"] == 200 and res.summary["num_retractions"] > 0
    for rank in (rank for worker in sim.workers for rank in worker.ranks):
        sched = rank.scheduler
        assert sched.num_free_tokens + sched.num_evictable_tokens == sched.num_kv_tokens
