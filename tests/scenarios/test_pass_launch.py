"""vLLM pass launch (``scheduler.launch``) on a one-GPU worker with async scheduling; fixed timing
(prefill pass 20 ms, decode 10 ms, mixed 30 ms). Pass i is decided at D(i) = max(launch end of pass i−1,
end of pass i−2); pass i−2's outputs leave at D(i); passes run back to back on the GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_scenario, run_scenario, trace_scenario, write_csv_trace

from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError


def run(tmp_path, rows, **launch):
    spec = {"decode_ms": 5, "piecewise_ms": 8, "eager_ms": 15, "max_cudagraph_capture_size": 512,
            "eager_queue_fraction": 0.4, **launch}
    data = trace_scenario(write_csv_trace(tmp_path / "t.csv", rows), engine={"workers": {"aggregated": {
        "scheduler": {"async_scheduling": True, "launch": spec}}}})
    return run_scenario(data)


def test_fast_launches_leave_outputs_at_pass_ends(tmp_path):
    """A (100→3): pass 0 (prefill 0–20, launch 0–8), pass 1 decided at 8 (20–30, launch 8–13), pass 2
    decided at max(13, 20) = 20 (30–40); outputs leave at 20, 30 and 40: as without launch costs."""
    res = run(tmp_path, [(0.0, 100, 3)])
    assert (res.requests.ttft_ms.tolist(), res.requests.e2e_ms.tolist()) == ([pytest.approx(20)], [pytest.approx(40)])


def test_outputs_wait_for_the_next_launch(tmp_path):
    """Decode launches of 15 ms outlast the 10 ms decode passes. Pass 1 is decided at 8 and launched by 23,
    so pass 0's token leaves at 23 (TTFT 23), pass 1's at 38 (pass 2 launched 23–38), pass 2's at 50 (pass
    3's launch 38–53 is cut at its pass end, 50), pass 3's at 50: E2E 50."""
    res = run(tmp_path, [(0.0, 100, 4)], decode_ms=15)
    assert res.requests.ttft_ms.tolist() == pytest.approx([23]) and res.requests.e2e_ms.tolist() == pytest.approx([50])
    assert res.passes.end_s.tolist()[:3] == pytest.approx([0.020, 0.030, 0.040])  # launches move no pass


def test_arrival_early_in_a_long_pass_joins_the_next(tmp_path):
    """A (1000→3, eager: 1000 > 512 tokens) prefills 0–20, its launch ending at max(15, 0.4·20) = 15.
    B (100→2) arrives at 5, before pass 1 is decided at 15, so it joins pass 1 (mixed, 20–50, a piecewise
    launch 15–23): A's first token leaves at D(2) = max(23, 20) = 23; B's at D(3) = max(launch end of
    pass 2 (23 + 5), 50) = 50: TTFT 45. (Counting passes, as without launch costs, B would skip pass 1
    and get its token at 60: TTFT 55.)"""
    res = run(tmp_path, [(0.0, 1000, 3), (0.005, 100, 2)])
    assert res.requests.ttft_ms.tolist() == pytest.approx([23, 45])


@pytest.mark.parametrize("eager_ms, fraction, ttft", [(2, 0.0, 20), (2, 0.9, 23), (30, 0.0, 25)])
def test_eager_launch_bounds(tmp_path, eager_ms, fraction, ttft):
    """A 1000-token prefill runs eager (0–20). Its launch ends at min(max(eager_ms, fraction·20), 20):
    2 → pass 1 decided at 2, launched by 7, token at max(7, 20) = 20; fraction 0.9 → launch ends at 18,
    pass 1 launched by 23: token at 23; eager 30 → cut at the pass end 20, pass 1 launched by 25: 25."""
    res = run(tmp_path, [(0.0, 1000, 2)], eager_ms=eager_ms, eager_queue_fraction=fraction)
    assert res.requests.ttft_ms.tolist() == pytest.approx([ttft])


@pytest.mark.parametrize("change, message", [
    ({"scheduler": {"async_scheduling": False}}, "launch: models vLLM's async engine loop"),
    ({"scheduler": {"async_scheduling": None}, "_engine": {"speculation": {
        "kind": "ngram", "num_speculative_tokens": 1, "acceptance_rates": [0.5]}}},
     "launch: models vLLM's async engine loop"),  # (n-gram drafts: vLLM schedules synchronously)
    ({"parallelism": {"tensor": 2}}, "scheduler.launch: only one-GPU aggregated workers"),
])
def test_launch_validation(change, message):
    data = make_scenario(engine={"workers": {"aggregated": {"scheduler": {
        "async_scheduling": True, "launch": {"decode_ms": 1, "piecewise_ms": 2, "eager_ms": 3}}}}})
    agg = data["engine"]["workers"]["aggregated"]
    for key, value in change.items():
        if key == "_engine":
            data["engine"].update(value)
        else:
            agg.setdefault(key, {}).update(value)
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(data, Path("."))
