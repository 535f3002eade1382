"""vLLM async scheduling in time (fixed timing: prefill pass 20 ms, decode pass 10 ms, mixed 30 ms).

While one pass runs the next is already committed; when a pass ends its outputs are processed and the
pass after the committed one is decided. Each expectation is derived in its docstring.
"""

from __future__ import annotations

import pytest
from factories import run_scenario, trace_scenario, write_csv_trace

ASYNC = {"engine": {"workers": {"aggregated": {"scheduler": {"async_scheduling": True}}}}}


def run(tmp_path, rows, **extra):
    data = trace_scenario(write_csv_trace(tmp_path / "t.csv", rows), **ASYNC)
    if extra.get("concurrency"):
        data["traffic"]["load"] = {"type": "concurrency", "concurrency": extra["concurrency"]}
    return run_scenario(data)


def test_lone_request_runs_as_in_sync(tmp_path):
    """A (100→50) alone: prefill 0–20, then 49 decode passes of 10 ms (each committed one pass ahead):
    TTFT 20, E2E 510 — committing early changes nothing for one request."""
    res = run(tmp_path, [(0.0, 100, 50)])
    assert res.requests.ttft_ms.tolist() == pytest.approx([20]) and res.requests.e2e_ms.tolist() == pytest.approx([510])


def test_arrival_mid_pass_skips_the_committed_pass(tmp_path):
    """B (100→2) arrives at 105 during A's decode 100–110; the pass 110–120 was committed at 100, so B
    joins the pass committed at 110, which runs 120–150 (mixed, 30 ms): TTFT 45 (sync: 35). A pays the
    mixed pass: E2E 20 + 49·10 + 20 = 530."""
    res = run(tmp_path, [(0.0, 100, 50), (0.105, 100, 2)])
    assert res.requests.ttft_ms.tolist() == pytest.approx([20, 45])
    assert res.requests.e2e_ms.tolist()[0] == pytest.approx(530)


def test_arrival_exactly_at_a_pass_end_counts_as_a_reaction(tmp_path):
    """B arrives at 110, the instant A's pass 100–110 ends: the pass committed then (120–130) does not see
    it; the next one (committed at 120) does and runs 130–160: TTFT 50 (sync: 30)."""
    res = run(tmp_path, [(0.0, 100, 50), (0.110, 100, 2)])
    assert res.requests.ttft_ms.tolist() == pytest.approx([20, 50])


def test_an_empty_committed_pass_runs_at_once(tmp_path):
    """A (100→2): prefill 0–20 and its decode 20–30 are committed at 0; at 20 nothing more is due for A (its
    in-flight outputs reach max_tokens), so the pass committed then is empty. B arrives at 25; at 30 the
    empty pass runs at once and B's pass is committed and starts at 30: TTFT 25."""
    res = run(tmp_path, [(0.0, 100, 2), (0.025, 100, 2)])
    assert res.requests.ttft_ms.tolist() == pytest.approx([20, 25])


def test_idle_engine_admits_a_closed_loop_reaction_at_once(tmp_path):
    """Concurrency 1, two 100→2 requests: A ends at 30 and the client sends B at 30. Both passes committed
    at 30 are empty (B is a reaction), so the engine is idle and reads B at once: B runs 30–50–60."""
    res = run(tmp_path, [(0.0, 100, 2), (0.0, 100, 2)], concurrency=1)
    assert (res.requests.arrival_s * 1000).tolist() == pytest.approx([0, 30])
    assert res.requests.ttft_ms.tolist() == pytest.approx([20, 20])
    assert res.requests.e2e_ms.tolist() == pytest.approx([30, 30])


def test_both_passes_committed_on_wake_see_the_same_arrivals(tmp_path):
    """Three 5000→3 prompts at 0, budget 8192, context 16000: the idle engine commits pass 0 (A 5000 + B's
    first 3192) and, at the same instant, pass 1, which still sees C: A's decode 1 + B's last 1808 + C's
    5000 = 6809 tokens, mixed, 20–50. Tokens: A at 20; B and C at 50: TTFT [20, 50, 50]; A's third token
    comes from the pass committed at 20 (50–60): E2E [60, 70, 70]."""
    data = trace_scenario(write_csv_trace(tmp_path / "t.csv", [(0.0, 5000, 3)] * 3), **ASYNC)
    data["engine"]["context_length"] = 16000
    res = run_scenario(data)
    assert res.requests.ttft_ms.tolist() == pytest.approx([20, 50, 50])
    assert res.requests.e2e_ms.tolist() == pytest.approx([60, 70, 70])
    assert res.passes.num_scheduled_tokens.tolist()[:2] == [8192, 6809]
