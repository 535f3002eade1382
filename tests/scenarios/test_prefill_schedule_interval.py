"""vLLM's prefill schedule interval (N = 2) on a worker of two attention-DP ranks, synchronous scheduling,
fixed timing (prefill pass 20 ms, decode 10 ms, mixed 30 ms; the worker's pass is its slowest rank).

Passes of a wave are numbered from 0; only even passes may start prefill work on a rank that is
decoding, unless the last admitting pass left requests waiting for capacity.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_scenario, run_scenario, trace_scenario, write_csv_trace

from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError


def run(tmp_path, rows, interval=2, **role):
    data = trace_scenario(write_csv_trace(tmp_path / "t.csv", rows), engine={"workers": {"aggregated": {
        "parallelism": {"attention_data": 2}, "scheduler": {"prefill_schedule_interval": interval, **role}}}})
    return run_scenario(data)


@pytest.mark.parametrize("interval, ttft", [(1, 35), (2, 45)])
def test_prompt_waits_for_an_even_pass_while_its_rank_decodes(tmp_path, interval, ttft):
    """A (100→20) on rank 0 prefills in pass 0 (0–20) and decodes (pass 1: 20–30, pass 2: 30–40, …).
    B (100→2, dp_rank 0) arrives at 35. Without the interval it joins pass 3 at 40 (mixed 40–70: TTFT 35).
    With N = 2, pass 3 is off cadence and rank 0 decodes, so B waits for pass 4 at 50 (50–80: TTFT 45)."""
    res = run(tmp_path, [(0.0, 100, 20, 0), (0.035, 100, 2, 0)], interval)
    assert res.requests.ttft_ms.tolist() == pytest.approx([20, ttft])


def test_a_rank_with_nothing_running_is_not_held_back(tmp_path):
    """Same, but B lands on idle rank 1: only ranks that decode defer prefills, so B joins pass 3 at 40
    (rank 1 prefill 20 ms, rank 0 decode 10 ms: the pass takes 20): TTFT 40 + 20 − 35 = 25."""
    res = run(tmp_path, [(0.0, 100, 20, 0), (0.035, 100, 2, 1)])
    assert res.requests.ttft_ms.tolist() == pytest.approx([20, 25])


def test_a_running_prefill_chunk_waits_off_cadence(tmp_path):
    """Budget 64: A (40→20) runs alone; B (100→2, rank 0) arrives at 5 and is admitted in pass 2 at 30 with
    a 63-token chunk (A's decode takes 1 of 64) in a mixed pass 30–60. Pass 3 (off cadence) lets A decode
    but B's remaining 37 prompt tokens wait; pass 4 at 70 finishes B's prompt: first token at 100, TTFT 95."""
    res = run(tmp_path, [(0.0, 40, 20, 0), (0.005, 100, 2, 0)], max_batched_tokens=64, max_sequences=8)
    b = res.passes[(res.passes.dp_rank == 0)].reset_index(drop=True)
    assert b.num_scheduled_tokens.tolist()[:5] == [40, 1, 64, 1, 38]
    assert res.requests.ttft_ms.tolist()[1] == pytest.approx(95)


def test_the_counter_restarts_when_the_group_drains(tmp_path):
    """A (100→2) runs passes 0–1 and the worker drains at 30; B arrives at 100, starting a new wave whose
    pass 0 admits it at once: TTFT 20 (it would wait for an even pass otherwise)."""
    res = run(tmp_path, [(0.0, 100, 2, 0), (0.100, 100, 2, 0)])
    assert res.requests.ttft_ms.tolist() == pytest.approx([20, 20])


def test_interval_needs_attention_dp():
    data = make_scenario(engine={"workers": {"aggregated": {"scheduler": {"prefill_schedule_interval": 4}}}})
    with pytest.raises(ScenarioError, match="prefill_schedule_interval: balances prefills across attention-DP"):
        parse_scenario(data, Path("."))
