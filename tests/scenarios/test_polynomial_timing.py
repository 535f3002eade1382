"""Whole runs under polynomial timing against Dynamo mocker 1.6.1 (``ai-dynamo`` 1.6.1's offline replay,
recorded by hand with the developers' replay driver; block size 16, 100 KV blocks per rank = 1600 tokens).
Each expectation is also the sum of P() and D() terms written out in the docstring."""

from __future__ import annotations

import pytest
from factories import run_scenario, trace_scenario, write_csv_trace

POLY = {"engine": {"context_length": 1600, "workers": {"aggregated": {
    "timing": {"type": "polynomial"}, "kv_cache": {"capacity": {"type": "fixed", "blocks": 100}}}}}}


def test_mixed_pass_pays_prefill_and_decode(tmp_path):
    """A (1000→4) at 0, B (500→2) at 40 ms. A: P(1000) = 32.105859, decode D(1001/1600) → 61.561058;
    B joins the pass at 61.561058: P(500) + D(1002/1600) → 115.228264; then D((1003 + 501)/1600) → 148.993800."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 1000, 4), (0.040, 500, 2)])
    res = run_scenario(trace_scenario(trace, **POLY))
    finish = (res.requests.finish_s * 1e3).tolist()
    first = (res.requests.first_token_s * 1e3).tolist()
    assert first == pytest.approx([32.105859, 115.228264], abs=2e-6)
    assert finish == pytest.approx([148.993800, 148.993800], abs=2e-6)


def test_attention_dp_pass_takes_the_slowest_rank(tmp_path):
    """dp 2, requests of 1000 and 500 (→3) at 0 on ranks 0 and 1: first pass max(P(1000), P(500)) = 32.105859;
    then two decode passes, each the max of the ranks' D(); Dynamo's last token is at 91.029874."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 1000, 3), (0.0, 500, 3)])
    data = trace_scenario(trace, **POLY)
    data["engine"]["workers"]["aggregated"]["parallelism"] = {"attention_data": 2}
    res = run_scenario(data)
    assert (res.requests.ttft_ms).tolist() == pytest.approx([32.105859] * 2, abs=2e-6)
    assert res.requests.finish_s.max() * 1e3 == pytest.approx(91.029874, abs=2e-6)
