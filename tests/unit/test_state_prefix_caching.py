"""Prefix caching of state layers (vLLM 0.32's ``mamba_cache_mode`` align, retention 0): ``StatePrefixCachingPool``
and the chunk split of ``VllmScheduler._state_split``, on one full-attention group and one state group, blocks of 4
tokens, synchronous scheduling, a budget of 64 tokens. Expected numbers derived by hand from the rules in
``engine/state_kv_cache.py``'s docstring (read from ``MambaManager``, ``HybridKVCacheCoordinator`` and
``Scheduler._mamba_block_aligned_split``); the recorded streams of ``test_vllm_state_apc_golden.py`` check the same
rules against the real scheduler."""

from __future__ import annotations

from stepdriver import run_steps

from simmodel.engine.hybrid_kv_cache import NULL
from simmodel.engine.kv_cache import BlockKeys
from simmodel.engine.request import Request
from simmodel.engine.scheduler.vllm import VllmScheduler, VllmSchedulerConfig
from simmodel.engine.state_kv_cache import StatePrefixCachingPool, state_checkpoint_valid
from simmodel.perf.kv_layout import KvLayout

CONFIG = VllmSchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=64,
                             enable_prefix_caching=True)
SHARED = list(range(100, 112))  # 12 tokens: three whole blocks


def steps(prompts: dict[str, list[int]], outputs: int = 2, checkpoint: bool = False, arrivals=None) -> list[dict]:
    layout = KvLayout(2, 1, full_groups=1, state_groups=1, state_checkpoint=checkpoint)
    reqs = [{"id": name, "arrival_step": (arrivals or {}).get(name, 0), "prompt_tokens": len(ids),
             "output_tokens": outputs, "prompt_token_ids": ids} for name, ids in prompts.items()]
    return [{k: r[k] for k in ("step", "scheduled", "hits")} for r in
            run_steps(reqs, CONFIG, 1001, 4, layout=layout) if r["scheduled"]]


def test_a_gated_deltanet_prompt_is_cut_at_its_replay_boundary():
    """10 tokens: the last block boundary before the last token is 8 (``(10 − 1) // 4 · 4``), where the state must be
    written at a chunk's end: 8 tokens, then 2, then the decode."""
    assert [s["scheduled"] for s in steps({"a": list(range(10))})] == [{"a": 8}, {"a": 2}, {"a": 1}]


def test_mamba2_writes_a_checkpoint_instead():
    """Mamba-2 writes the state at 8 into a checkpoint block inside the one chunk of 10."""
    assert [s["scheduled"] for s in steps({"a": list(range(10))}, checkpoint=True)] == [{"a": 10}, {"a": 1}]


def test_the_state_list_holds_one_state_and_a_checkpoint():
    """Mamba-2, prompt 10 at once: the full group takes 3 blocks; the state group a null at 0, the checkpoint (the
    state at 8) at 1 and the running state at 2: 5 blocks. Cached: full blocks 0 and 1 (8 of the 10 tokens fill them),
    and the checkpoint, the prompt's replay state. Once 10 tokens are processed, the blocks before (10 − 1) // 4 = 2
    are given back: the checkpoint rejoins the free queue, cached, where it counts as free again (4 blocks held, 96
    free)."""
    pool = StatePrefixCachingPool(100, 4, KvLayout(2, 1, full_groups=1, state_groups=1, state_checkpoint=True))
    sched = VllmScheduler(CONFIG, pool)
    r = Request(0, 0, 10, 2)
    ids = list(range(10))
    r.block_keys = BlockKeys(lambda j: tuple(ids[4 * j:4 * j + 4]) if 4 * j + 4 <= 10 else ("u", j))
    sched.add_request(r)
    out = sched.schedule()
    assert out.num_new_tokens == [10] and r.num_blocks == 5 and pool.num_free_blocks == 95
    full, state = r.block_ids
    assert len(full) == 3 and state[0] == NULL and NULL not in state[1:]
    assert pool.key_of[state[1]] is not None and pool.key_of[state[2]] is None
    assert [pool.key_of[b] is not None for b in full] == [True, True, False]
    sched.update_from_output(out)
    sched.schedule()  # (the decode: 10 processed)
    assert state[1] == NULL and r.num_blocks == 4 and pool.num_free_blocks == 96


def test_a_repeated_prompt_hits_the_replay_state_a_pass_later():
    """b repeats a's 10 tokens, arriving with it. In the first pass a is cut at 8 and its state there cached at the
    plan, so b, which would hit it, waits (a state cached by this step's plan is not computed yet). In the second pass
    a computes its last 2 tokens: its cacheable tokens (10, rounded down to a block) are its replay boundary again, so
    vLLM re-registers the state this step and b waits again. In the third, a has processed 10 tokens and given the
    state back (still cached), so b hits 8 tokens and computes 2."""
    prompt = list(range(10))
    got = steps({"a": prompt, "b": list(prompt)})
    assert [s["scheduled"] for s in got[:3]] == [{"a": 8}, {"a": 2}, {"a": 1, "b": 2}]
    assert got[2]["hits"] == {"b": 8}


def test_a_junction_is_cut_and_its_state_cached_for_the_next_sibling():
    """a (12 shared + 5 of its own) runs alone first: cut at its replay boundary 16, then 1. b (the same 12 + 9 of its
    own) hits a's 3 full-attention blocks, but no state: a cached its state only at 16, past the shared part. So b's
    hit is 0 and its junction 12: its chunks stop at 12 (its state there cached), then at its replay boundary 20,
    then 1. c (the same 12 + 6) then hits b's state at the junction: 12 tokens, and computes 6 (its boundary is 16:
    cut there, then 2)."""
    a = SHARED + [1, 2, 3, 4, 5]
    b = SHARED + [6, 7, 8, 9, 10, 11, 12, 13, 14]
    c = SHARED + [20, 21, 22, 23, 24, 25]
    got = steps({"a": a, "b": b, "c": c}, outputs=1, arrivals={"a": 0, "b": 10, "c": 20})
    assert [s["scheduled"] for s in got] == [{"a": 16}, {"a": 1}, {"b": 12}, {"b": 8}, {"b": 1}, {"c": 4}, {"c": 2}]
    assert [s["hits"] for s in got if s["hits"]] == [{"a": 0}, {"b": 0}, {"c": 12}]


def test_a_chunk_the_budget_cuts_ends_on_a_block_boundary():
    """A budget of 10 tokens cuts a 30-token prompt: 10 rounds down to 8, then 8 more (16), 8 (24), then its replay
    boundary (28) and the last 2."""
    config = VllmSchedulerConfig(max_num_seqs=8, max_num_batched_tokens=10, max_model_len=64,
                                 enable_prefix_caching=True)
    layout = KvLayout(2, 1, full_groups=1, state_groups=1)
    got = run_steps([{"id": "a", "arrival_step": 0, "prompt_tokens": 30, "output_tokens": 1,
                      "prompt_token_ids": list(range(30))}], config, 1001, 4, layout=layout)
    assert [r["scheduled"]["a"] for r in got if r["scheduled"]] == [8, 8, 8, 4, 2]


def test_checkpoint_validity():
    """``is_mamba_prefill_checkpoint_valid`` (alignment 1), blocks of 4, the state at 8: a chunk 0…10 can write it (it
    starts on a boundary, 0 + 4 ≤ 8 < 10, column cdiv(10, 4) − 2 = 1 past the initial state's (0 − 1) // 4 = −1); so
    can 4…10 (4 + 4 ≤ 8, column 1 past 0); 2…10 starts mid-block; 0…8 ends at 8 (its own state, no checkpoint);
    8…10 starts there."""
    assert state_checkpoint_valid(0, 10, 8, 4)
    assert state_checkpoint_valid(4, 10, 8, 4)
    assert not state_checkpoint_valid(2, 10, 8, 4)
    assert not state_checkpoint_valid(0, 8, 8, 4)
    assert not state_checkpoint_valid(8, 10, 8, 4)
