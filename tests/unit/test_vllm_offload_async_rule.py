"""vLLM's async scheduling with a KV connector (its CPU tier) frees no block of a request the pass in flight runs,
so a running request that needs a block whose victim is in that pass waits a pass instead of preempting it
(issue 24), by hand.

The engine loop is vLLM's ``step_with_batch_queue`` (``tests/offload_stepdriver``): plans S0 S1 U0 S2 U1 …, where
Sk plans pass k and Uk applies its outputs. Blocks of 4 tokens, 3 usable GPU blocks (4 less vLLM's null block); A
and B arrive together, each a 4-token prompt (one block) and 6 outputs.
"""

from __future__ import annotations

from offload_stepdriver import run_offload_steps

from simmodel.engine.scheduler.vllm import VllmSchedulerConfig


def _run(async_scheduling: bool) -> list[dict]:
    requests = [{"id": name, "arrival_step": 0, "prompt_tokens": 4, "output_tokens": 6,
                 "prompt_token_ids": [base + i for i in range(4)]} for name, base in (("A", 100), ("B", 200))]
    config = VllmSchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=64,
                                 enable_prefix_caching=True, async_scheduling=async_scheduling)
    return run_offload_steps(requests, config, num_gpu_blocks=4, block_size=4, host_blocks=100)


def test_async_a_request_whose_victim_is_in_flight_waits_a_pass():
    """S0 admits A and B (one block each, 1 left). S1, planned while pass 0 runs: A's 5th token needs a second
    block and takes the last one; B's needs one too, none is free, and the victim (the last running request, B
    itself) is in pass 0: nothing is preempted, B and those after it wait, so pass 1 runs A alone. U0 gives both
    their first token. S2: A's 6th token fits its second block; B still needs a block and B is in no pass in
    flight now (pass 1 runs only A): B is preempted (its block freed) and pass 2 runs A alone."""
    records = _run(True)
    assert [r["scheduled"] for r in records[:3]] == [{"A": 4, "B": 4}, {"A": 1}, {"A": 1}]
    assert [r["preempted"] for r in records[:3]] == [[], [], ["B"]]


def test_sync_the_same_request_is_preempted_at_once():
    """Synchronous, nothing is in flight when a pass is planned: S1 (after U0) finds no block for B's 5th token
    once A took the last one, and preempts B there."""
    records = _run(False)
    assert [r["scheduled"] for r in records[:2]] == [{"A": 4, "B": 4}, {"A": 1}]
    assert [r["preempted"] for r in records[:2]] == [[], ["B"]]
