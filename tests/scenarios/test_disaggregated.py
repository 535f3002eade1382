"""Disaggregated prefill/decode with fixed timing (prefill pass 20 ms, decode pass 10 ms).

Transfers: 50 GB/s and 131,072 B/token (Llama-3.1-8B's full KV in BF16), so a 1000-token prompt
takes 1000 · 131,072 / 50e9 s = 2.62144 ms on the link.
"""

from __future__ import annotations

import pytest
from factories import make_scenario, run_scenario, trace_scenario, write_csv_trace

FIXED = {"timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}, "scheduler": {"async_scheduling": False},
         "kv_cache": {"capacity": {"type": "fixed", "blocks": 1000}}}
T_MS = 2.62144


def disagg(trace=None, prefill=None, decode=None, **transfer):
    engine = {"mode": "disaggregated", "kv_transfer": {"bandwidth_gb_per_second": 50, "bytes_per_token": 131072,
                                                       **transfer},
              "workers": {"prefill": {**FIXED, **(prefill or {})}, "decode": {**FIXED, **(decode or {})}}}
    data = trace_scenario(trace) if trace is not None else make_scenario()
    data["engine"].update(engine)
    return data


def test_one_request_ttft_is_prefill_transfer_first_decode(tmp_path):
    """1P1D, 1000→5: prefill 0–20 (its bootstrap token is not the client's), transfer 20–22.62144, first
    decode pass 22.62144–32.62144 gives token 1, four more decodes: E2E 72.62144; the decode side
    produced all 5 tokens."""
    res = run_scenario(disagg(write_csv_trace(tmp_path / "t.csv", [(0.0, 1000, 5)])))
    row = res.requests.iloc[0]
    assert row.ttft_ms == pytest.approx(20 + T_MS + 10) and row.e2e_ms == pytest.approx(20 + T_MS + 50)
    assert row.output_tokens == 5 and row.tpot_ms == pytest.approx(10)
    assert (row.prefill_done_s, row.transfer_start_s) == pytest.approx((0.020, 0.020))
    assert row.transfer_end_s == pytest.approx(0.020 + T_MS / 1000) == row.decode_admit_s == row.source_released_s
    passes = res.passes.groupby("role").size().to_dict()
    assert passes == {"prefill": 1, "decode": 5}
    assert res.summary["roles"]["prefill"]["gpu_count"] == 1 and res.summary["gpu_count"] == 2
    assert set(res.events.role) == {"client", "prefill", "decode"}
    kinds = res.events[res.events.request_id == 0].kind.tolist()
    assert kinds.count("first_token") == 1 and "prefill_done" in kinds and "transfer_end" in kinds


def test_no_bandwidth_means_no_transfer_time(tmp_path):
    """Omitted bandwidth, 1 ms latency: TTFT = 20 + 1 + 10."""
    data = disagg(write_csv_trace(tmp_path / "t.csv", [(0.0, 1000, 2)]), latency_ms=1)
    del data["engine"]["kv_transfer"]["bandwidth_gb_per_second"]
    assert run_scenario(data).requests.ttft_ms.tolist() == pytest.approx([31])


@pytest.mark.parametrize("contention, ends, ttft", [
    ("none", [T_MS, T_MS], [20 + T_MS + 10] * 2),
    ("shared_link", [T_MS, 2 * T_MS], [20 + T_MS + 10, 20 + T_MS + 20]),
])
def test_shared_link_queues_simultaneous_transfers(tmp_path, contention, ends, ttft):
    """Two 1000-token prompts prefilled together (prefill max_sequences 2) hand off at 20 ms. Free links:
    both transfers end at 20 + T and share the first decode pass (TTFT 20 + T + 10). One shared link: the
    second waits for the first and ends at 20 + 2T — the pair takes twice as long as one transfer — which
    is inside the decode pass 20 + T … 30 + T, so it is admitted in the next one: TTFT 20 + T + 20."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 1000, 2), (0.0, 1000, 2)])
    res = run_scenario(disagg(trace, prefill={"scheduler": {"max_sequences": 2}}, contention=contention))
    assert ((res.requests.transfer_end_s - 0.020) * 1000).tolist() == pytest.approx(ends)
    assert res.requests.ttft_ms.tolist() == pytest.approx(ttft)


def test_tiny_decode_pool_back_pressures_prefill_without_loss(tmp_path):
    """Decode KV of 64 blocks × 16 tokens holds one 1000-token request (63 blocks) at a time, with
    context_length 1024. Prefill KV holds three. Requests wait for decode blocks (transfer start after the
    previous decode finishes) while their prefill blocks stay held, so prefill stalls too; all finish."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 1000, 3)] * 6)
    data = disagg(trace, prefill={"kv_cache": {"capacity": {"type": "fixed", "blocks": 190}},
                                  "scheduler": {"max_sequences": 4}},
                  decode={"kv_cache": {"capacity": {"type": "fixed", "blocks": 64}}})
    data["engine"]["context_length"] = 1024
    res = run_scenario(data)
    req = res.requests.sort_values("transfer_start_s")
    assert (req.status == "completed").all() and req.output_tokens.tolist() == [3] * 6
    # one request at a time on the decode side: each transfer starts once the previous request finished
    assert (req.transfer_start_s.to_numpy()[1:] >= req.finish_s.to_numpy()[:-1] - 1e-12).all()
    # prefill could take only three prompts (190 blocks / 63) until a transfer released blocks
    assert (req.first_admit_s > 0).sum() >= 3
    assert res.summary["num_kv_transfers"] == 6


def test_trace_rank_hints_pick_prefill_and_decode_ranks(tmp_path):
    """Two DP ranks on each side; each row names its prefill and decode rank, and both are kept."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens,prefill_dp_rank,dp_rank\n"
                    "0.0,100,2,1,0\n0.0,100,2,1,1\n0.0,100,2,0,1\n")
    data = disagg(path, prefill={"parallelism": {"attention_data": 2}}, decode={"parallelism": {"attention_data": 2}})
    res = run_scenario(data)
    assert res.requests.prefill_dp_rank.tolist() == [1, 1, 0]
    assert res.requests.dp_rank.tolist() == [0, 1, 1]


def test_prefill_role_serves_one_sequence_at_a_time_by_default(tmp_path):
    """Prefill max_sequences defaults to 1: two prompts at 0 finish prefill at 20 and 40."""
    res = run_scenario(disagg(write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 2), (0.0, 100, 2)])))
    assert (res.requests.prefill_done_s * 1000).tolist() == pytest.approx([20, 40])


@pytest.mark.parametrize("change, message", [
    ({"workers": {"prefill": {"hardware": "auto"}}}, "engine.workers.prefill.hardware: must name one concrete system"),
    ({"kv_transfer": {"timing_mode": "all"}}, "engine.kv_transfer.timing_mode: must be one of full_prompt"),
    ({"kv_transfer": {"contention": "fair"}}, "engine.kv_transfer.contention: must be one of none, shared_link"),
    ({"kv_transfer": {"bytes_per_token": 0}}, "engine.kv_transfer.bytes_per_token: must be a positive number"),
])
def test_disaggregated_validation(change, message):
    from pathlib import Path

    from simmodel.config.load import parse_scenario
    from simmodel.errors import ScenarioError

    data = disagg()
    for key, value in change.items():
        if key == "workers":
            for role, fields in value.items():
                data["engine"]["workers"][role].update(fields)
        else:
            data["engine"][key].update(value)
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(")):
        parse_scenario(data, Path("."))


def test_prefill_hardware_override_and_auto_bytes_per_token():
    """Prefill on H200, decode on H100; bytes_per_token auto = Llama-3.1-8B's KV per token per GPU at
    tensor 2: 2·32·(8/2)·128·2 = 65,536 B."""
    from pathlib import Path

    from simmodel.config.load import parse_scenario
    from simmodel.sim import kv_transfer_bytes_per_token

    data = disagg(prefill={"hardware": "h200_sxm", "parallelism": {"tensor": 2}})
    del data["engine"]["kv_transfer"]["bytes_per_token"]
    scenario = parse_scenario(data, Path("."))
    assert scenario.engine.workers["prefill"].deployment.hardware.system_id == "h200_sxm"
    assert scenario.engine.workers["decode"].deployment.hardware.system_id == "h100_sxm"
    assert kv_transfer_bytes_per_token(scenario) == 65536


def test_destination_missing_sends_only_the_blocks_the_decode_rank_lacks():
    """1 GB/s × 10,000 B/token, decode blocks of 64, two identical 1000-token prompts one after the other.
    The first sends its 16 whole blocks (1024 tokens): 10.24 ms. The second finds ⌊999/64⌋ = 15 blocks
    cached on the decode rank and sends one: 0.64 ms (Dynamo's mocker measures the same two figures)."""
    data = disagg(decode={"kv_cache": {"block_size": 64, "capacity": {"type": "fixed", "blocks": 100}}},
                  timing_mode="destination_missing", bandwidth_gb_per_second=1, bytes_per_token=10000)
    data["traffic"] = {"source": {"type": "synthetic", "input_tokens": 1000, "output_tokens": 2,
                                  "shared_prefix": {"tokens": 1000, "groups": 1}},
                       "load": {"type": "concurrency", "concurrency": 1}, "stop": {"requests": 2}}
    req = run_scenario(data).requests
    assert ((req.transfer_end_s - req.transfer_start_s) * 1000).tolist() == pytest.approx([10.24, 0.64])


def test_zero_time_handoffs_release_prefill_blocks_between_passes():
    """Regression: with no transfer time a handoff ends at the same instant its prefill pass ended, while the
    prefill worker is between passes. Its KV must still be released (not left for a pass that never comes):
    twelve closed-loop requests on a prefill pool that holds two prompts at a time all complete."""
    data = disagg(prefill={"kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 12}},
                           "scheduler": {"async_scheduling": True, "max_batched_tokens": 36, "max_sequences": 2}},
                  decode={"scheduler": {"async_scheduling": True}})
    del data["engine"]["kv_transfer"]["bandwidth_gb_per_second"]
    data["engine"]["context_length"] = 137
    data["traffic"] = {"source": {"type": "synthetic", "input_tokens": {"distribution": "uniform", "min": 1, "max": 136},
                                  "output_tokens": {"distribution": "uniform", "min": 1, "max": 40}},
                       "load": {"type": "concurrency", "concurrency": 4}, "stop": {"requests": 12}}
    data["engine"]["seed"] = 5
    res = run_scenario(data)
    assert (res.requests.status == "completed").all() and len(res.requests) == 12


def test_a_pass_that_only_preempts_is_planned_again_at_once(tmp_path):
    """Decode rank of 4 blocks × 16 tokens, one sequence at a time; R0 (31→3) and R1 (22→2), both prefilled
    0–20 ms, transfers instant, so at 20 ms each holds 2 decode blocks and none is free. R0 decodes 20–30
    (token 1) and 30–40 (token 2); at 40 its 33rd token needs a third block: it preempts itself and the
    plan schedules nothing. vLLM's engine schedules again at once (no forward ran): R1 is admitted at 40,
    decodes 40–50 and 50–60 and finishes, freeing 2 blocks. R0 resumes at 60: its two full blocks (32
    tokens) are still in the prefix cache (freed at preemption, not evicted), so one token is left, a
    decode pass 60–70 that samples its last token. (Before the fix the worker slept after the empty plan
    and the run stalled.)"""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 31, 3), (0.0, 22, 2)])
    data = disagg(trace, prefill={"scheduler": {"async_scheduling": False, "max_sequences": 2}},
                  decode={"scheduler": {"async_scheduling": False, "max_sequences": 1},
                                 "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 4}}})
    data["engine"]["context_length"] = 64
    data["engine"]["kv_transfer"].pop("bandwidth_gb_per_second")
    res = run_scenario(data)
    r0, r1 = res.requests.iloc[0], res.requests.iloc[1]
    assert (r0.ttft_ms, r0.e2e_ms, r0.preemptions) == pytest.approx((30, 70, 1))
    assert (r1.ttft_ms, r1.e2e_ms, r1.preemptions) == pytest.approx((50, 60, 0))
    ev = res.events[res.events.role == "decode"]
    preempt = ev[ev.kind == "preemption"]
    assert preempt.request_id.tolist() == [0] and preempt.time_s.tolist() == pytest.approx([0.040])
    assert ev[(ev.kind == "admission") & (ev.request_id == 1)].time_s.tolist() == pytest.approx([0.040])
    resume = ev[ev.kind == "resume"]
    assert resume.time_s.tolist() == pytest.approx([0.060]) and resume.num_tokens.tolist() == [1]
