"""End-to-end timelines with fixed timing (prefill 20 ms, decode 10 ms, mixed pass 30 ms).

Every expected number is derived by hand in the docstring; several are the same setups that Dynamo's
mocker (``ai-dynamo`` 1.6.1, offline replay with fixed timing) was run on by the developers, and it agrees.
"""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_scenario, run_scenario, trace_scenario, write_csv_trace


def ms(series) -> list[float]:
    return [round(float(x), 6) for x in series]


def test_single_request_prefill_then_decodes():
    """One 100-token prompt, 5 outputs: prefill 0–20 gives token 1, four decodes give tokens 2–5 at 30..60."""
    res = run_scenario(make_scenario(traffic={"stop": {"requests": 1}}))
    row = res.requests.iloc[0]
    assert (row.ttft_ms, row.ttst_ms, row.tpot_ms, row.e2e_ms, row.queue_ms) == pytest.approx((20, 10, 10, 60, 0))
    assert res.summary["itl_ms"]["mean"] == pytest.approx(10)
    assert res.summary["num_passes"] == 5


def test_arrival_at_pass_end_joins_next_pass_and_mixed_passes_add(tmp_path):
    """Five 1000-token, 50-output requests 100 ms apart (sync vLLM).

    r0: prefill 0–20, decodes of 10 ms; r1 arrives at 100, exactly a pass end, so it joins the pass
    starting at 100, a mixed pass of 30 ms: TTFT 30 for r1..r4. Each later arrival stalls every running
    decode once by 20 ms: E2E = 20 + 49·10 + 20·(later arrivals while running) = 590, 580, 560, 540, 520
    (r1 also pays 10 ms for its own mixed prefill pass: 30 + 48·10 + 3·20 + ... = 580).
    """
    trace = write_csv_trace(tmp_path / "t.csv", [(0.1 * i, 1000, 50) for i in range(5)])
    res = run_scenario(trace_scenario(trace))
    assert ms(res.requests.ttft_ms) == [20, 30, 30, 30, 30]
    assert ms(res.requests.e2e_ms) == [590, 580, 560, 540, 520]


def test_arrival_mid_pass_waits_for_the_pass_in_flight(tmp_path):
    """A at 0 (100→50); B (100→2) at 105 ms while A's decode runs 100–110: B starts at 110 in a
    30 ms mixed pass, TTFT = 5 + 30 = 35; A pays 20 ms extra once: E2E = 20 + 49·10 + 20 = 530."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 50), (0.105, 100, 2)])
    res = run_scenario(trace_scenario(trace))
    assert ms(res.requests.ttft_ms) == [20, 35]
    assert ms(res.requests.e2e_ms)[0] == 530


def test_attention_dp_ranks_share_the_pass_barrier(tmp_path):
    """Same two requests, attention_data 2: B lands on rank 1. Pass 110–130 is max(rank0 decode 10,
    rank1 prefill 20) = 20, so B's TTFT = 25 and A's E2E = 20 + 49·10 + 10 = 520."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 50), (0.105, 100, 2)])
    res = run_scenario(trace_scenario(trace, engine={"workers": {"aggregated": {
        "parallelism": {"attention_data": 2}}}}))
    assert ms(res.requests.ttft_ms) == [20, 25]
    assert ms(res.requests.e2e_ms)[0] == 520
    assert res.requests.dp_rank.tolist() == [0, 1]
    assert res.summary["gpu_count"] == 2


def test_two_workers_are_independent(tmp_path):
    """replicas 2: B goes to the idle worker 1 and starts on arrival: TTFT 20; A is undisturbed: 510."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 50), (0.105, 100, 2)])
    res = run_scenario(trace_scenario(trace, engine={"workers": {"aggregated": {
        "parallelism": {"replicas": 2}}}}))
    assert ms(res.requests.ttft_ms) == [20, 20]
    assert ms(res.requests.e2e_ms)[0] == 510
    assert res.requests.worker.tolist() == [0, 1]


def test_max_sequences_one_serializes(tmp_path):
    """max_sequences 1, two 100→3 requests at 0: A runs 0–40 (20 + 2·10); B is admitted at 40: TTFT 60."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 3), (0.0, 100, 3)])
    res = run_scenario(trace_scenario(trace, engine={"workers": {"aggregated": {
        "scheduler": {"max_sequences": 1, "max_batched_tokens": 8192}}}}))
    assert ms(res.requests.ttft_ms) == [20, 60]
    assert ms(res.requests.queue_ms) == [0, 40]


def test_chunked_prefill_splits_a_long_prompt():
    """A 20,000-token prompt with budget 8192 takes 3 prefill passes (8192, 8192, 3616): TTFT 60."""
    res = run_scenario(make_scenario(traffic={"source": {"input_tokens": 20000, "output_tokens": 2},
                                              "stop": {"requests": 1}},
                                     engine={"context_length": 32768, "workers": {"aggregated": {
                                         "kv_cache": {"capacity": {"blocks": 4000}}}}}))
    assert ms(res.requests.ttft_ms) == [60]
    assert res.passes.num_scheduled_tokens.tolist()[:3] == [8192, 8192, 3616]


def test_closed_loop_sends_next_request_on_finish():
    """concurrency 1, four 100→5 requests: each runs 60 ms; request k arrives at 60·k, TTFT 20 each."""
    res = run_scenario(make_scenario())
    assert ms(res.requests.arrival_s * 1000) == [0, 60, 120, 180]
    assert ms(res.requests.ttft_ms) == [20] * 4
    assert res.summary["duration_s"] == pytest.approx(0.24)
    # 4 requests × 5 tokens over 0.24 s
    assert res.summary["output_throughput_tok_s"] == pytest.approx(20 / 0.24)


def test_recompute_preemption_timeline():
    """The oracle self-test (3 × 8→8, block 4, 4 usable blocks, max_model_len 16) in time.

    Pass 0 (20 ms): r0 and r1 prefill → both first tokens at 20. Pass 1: r0 needs a 3rd block, none is
    free, r1 is preempted; r0 decodes alone to its 8th token at 20 + 7·10 = 90. r1 recomputes 9 tokens
    (20 ms → 110) then decodes 6 times → 170. r2 prefills 170–190, decodes 7 times → 260.
    r1's tokens 1→2 are 90 ms apart: pooled ITL = 20 gaps of 10 ms and one of 90 ms.
    """
    res = run_scenario(make_scenario(
        traffic={"source": {"input_tokens": 8, "output_tokens": 8}, "load": {"concurrency": 3},
                 "stop": {"requests": 3}},
        engine={"context_length": 16, "workers": {"aggregated": {
            "kv_cache": {"block_size": 4, "capacity": {"type": "fixed", "blocks": 4}}}}}))
    assert ms(res.requests.ttft_ms) == [20, 20, 190]
    assert ms(res.requests.e2e_ms) == [90, 170, 260]
    assert res.requests.preemptions.tolist() == [0, 1, 0]
    assert res.summary["num_preemptions"] == 1
    itl = res.summary["itl_ms"]
    assert itl["mean"] == pytest.approx((20 * 10 + 90) / 21)
    assert itl["max"] == pytest.approx(90) and itl["p50"] == pytest.approx(10)
    assert itl["p99"] == pytest.approx(np.percentile([10] * 20 + [90], 99))
    assert ms(res.requests.tpot_ms) == [10, round(150 / 7, 6), 10]


def test_prompt_at_context_length_is_rejected_and_run_goes_on(tmp_path):
    """context_length 100: a 100-token prompt is refused at arrival; the 99-token one is served."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 5), (0.0, 99, 1)])
    res = run_scenario(trace_scenario(trace, engine={"context_length": 100}))
    assert res.requests.status.tolist() == ["rejected", "completed"]
    assert res.summary["rejected_requests"] == 1 and res.summary["completed_requests"] == 1


def test_generation_stops_at_context_length(tmp_path):
    """Prompt 90, 20 outputs asked, context_length 100: vLLM stops once 90 + k >= 100, after 10 tokens."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 90, 20)])
    res = run_scenario(trace_scenario(trace, engine={"context_length": 100}))
    assert res.requests.output_tokens.tolist() == [10]
    assert ms(res.requests.e2e_ms) == [20 + 9 * 10]


def test_time_cutoff_reports_in_flight_requests_as_incomplete():
    """Cutoff at 50 ms: the one request (needs 60 ms) has 4 tokens (20, 30, 40, 50) and is incomplete."""
    res = run_scenario(make_scenario(traffic={"stop": {"requests": 1, "max_virtual_time_seconds": 0.05}}))
    assert res.requests.status.tolist() == ["incomplete"]
    assert res.summary["incomplete_requests"] == 1 and res.summary["completed_requests"] == 0
    assert res.requests.output_tokens.tolist() == [4]
    assert res.summary["total_output_tokens"] == 4
    # throughput runs to the last token emitted (50 ms), not only to completions
    assert res.summary["duration_s"] == pytest.approx(0.05)
    assert res.summary["output_throughput_tok_s"] == pytest.approx(4 / 0.05)


def test_constant_rate_arrivals():
    """constant_rate 4 req/s: arrivals at 0, 0.25, 0.5; each served alone (60 ms) so TTFT is 20."""
    res = run_scenario(make_scenario(traffic={"load": {"type": "constant_rate", "requests_per_second": 4},
                                              "stop": {"requests": 3}}))
    assert ms(res.requests.arrival_s) == [0, 0.25, 0.5]
    assert ms(res.requests.ttft_ms) == [20] * 3


def test_gpu_hours_count_every_gpu_of_every_worker():
    """2 workers × tensor 2 × 2 DP ranks = 8 GPUs; one 60 ms request: 8 × 0.06 s / 3600."""
    res = run_scenario(make_scenario(
        traffic={"stop": {"requests": 1}},
        engine={"workers": {"aggregated": {"parallelism": {"replicas": 2, "tensor": 2, "attention_data": 2}}}}))
    assert res.summary["gpu_count"] == 8
    assert res.summary["gpu_hours"] == pytest.approx(8 * 0.06 / 3600)
