"""``simmodel estimate`` against the full simulator, and its CLI surface."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from factories import make_scenario, run_scenario

from simmodel.perf.estimate import estimate_from_options

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("model, hardware, tensor, isl, osl", [
    ("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", 1, 1000, 50),
    ("meta-llama/Llama-3.1-70B-Instruct", "h200_sxm", 4, 20000, 8),  # three prefill chunks
    ("Qwen/Qwen3-8B", "h200_sxm", 2, 7, 1),
    # MoE: each pass of the request is priced on its own (its experts serve its own tokens), not as one
    # attention-DP rank among the request's other passes, whose tokens the experts would then serve too
    ("mistralai/Mixtral-8x7B-v0.1", "h100_sxm", 2, 600, 20),
])
def test_single_request_through_the_simulator_agrees_with_estimate(model, hardware, tensor, isl, osl):
    est = estimate_from_options(model=model, hardware=hardware, tensor=tensor, backend="vllm", dtype="auto",
                                context_length=32768, max_batched_tokens=8192, input_tokens=isl, output_tokens=osl,
                                decode_batch=None, context=None, prefill_tokens=None)
    data = make_scenario(
        traffic={"source": {"input_tokens": isl, "output_tokens": osl}, "stop": {"requests": 1}},
        engine={"model": model, "hardware": hardware, "context_length": 32768, "workers": {"aggregated": {
            "parallelism": {"tensor": tensor}, "kv_cache": {"capacity": {"type": "default"}},
            "timing": {"type": "default"}}}})
    row = run_scenario(data).requests.iloc[0]
    assert row.ttft_ms == pytest.approx(est["ttft_ms"], rel=1e-6)
    assert row.e2e_ms == pytest.approx(est["e2e_ms"], rel=1e-6)
    if osl > 1:
        assert row.tpot_ms == pytest.approx(est["mean_itl_ms"], rel=1e-6)
    else:
        assert est["mean_itl_ms"] is None


def test_the_frontend_time_per_request_adds_once_to_ttft_and_e2e():
    """One 1000-token prompt (one chunk), 3 output tokens: TTFT = the prefill pass + the default timing's
    frontend time per request; E2E = TTFT + the two decode passes (their mean is the ITL)."""
    from simmodel.perf.roofline import REQUEST_OVERHEAD_MS

    est = estimate_from_options(model="Qwen/Qwen3-8B", hardware="h100_sxm", tensor=1, backend="vllm", dtype="auto",
                                context_length=None, max_batched_tokens=8192, input_tokens=1000, output_tokens=3,
                                decode_batch=None, context=None, prefill_tokens=None)
    prefill = estimate_from_options(model="Qwen/Qwen3-8B", hardware="h100_sxm", tensor=1, backend="vllm",
                                    dtype="auto", context_length=None, max_batched_tokens=8192, input_tokens=None,
                                    output_tokens=None, decode_batch=None, context=None, prefill_tokens=1000)
    assert est["ttft_ms"] == pytest.approx(prefill["pass_ms"] + REQUEST_OVERHEAD_MS, abs=1e-6)
    assert est["e2e_ms"] == pytest.approx(est["ttft_ms"] + 2 * est["mean_itl_ms"], abs=1e-6)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simmodel.cli", "estimate", *args], cwd=ROOT,
                          capture_output=True, text=True)


def test_estimate_cli_json_keys():
    base = ["--model", "Qwen/Qwen3-8B", "--hardware", "h200_sxm", "--format", "json"]
    req = json.loads(cli(*base, "--input-tokens", "100", "--output-tokens", "10").stdout)
    assert set(req) == {"ttft_ms", "mean_itl_ms", "e2e_ms"}
    assert req["e2e_ms"] == pytest.approx(req["ttft_ms"] + 9 * req["mean_itl_ms"])
    decode = json.loads(cli(*base, "--decode-batch", "8", "--context", "512").stdout)
    prefill = json.loads(cli(*base, "--prefill-tokens", "512").stdout)
    assert set(decode) == set(prefill) == {"pass_ms"}


@pytest.mark.parametrize("args, message", [
    (["--prefill-tokens", "3", "--context", "5"], "give one of"),
    (["--input-tokens", "3"], "--input-tokens and --output-tokens go together"),
    (["--input-tokens", "50000", "--output-tokens", "1"], "at or above context_length 40960"),
    (["--prefill-tokens", "9000"], "one pass holds at most 8192 prompt tokens"),
    (["--decode-batch", "300", "--context", "10"], "300 sequences exceed max_sequences 256"),
    (["--decode-batch", "256", "--context", "40000"], "KV blocks exceed the rank's"),
])
def test_estimate_bad_options(args, message):
    proc = cli("--model", "Qwen/Qwen3-8B", "--hardware", "h200_sxm", *args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1
