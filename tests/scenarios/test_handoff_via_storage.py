"""A P/D handoff through the prefill role's shared store (``engine.kv_transfer.via: storage``), by hand.

One prefill and one decode worker, Llama-3.1-8B-Instruct on H100 (131,072 KV bytes per token at tensor 1), fixed
timing (20 ms a pass with prefill work, 10 ms a decode pass), synchronous scheduling. The prefill role keeps a host
tier and a shared store moving 2.097152 GB/s each way with 100 µs a job: a 512-token prompt's KV (67,108,864 B)
takes 0.1 + 32 = 32.1 ms to write or read, one block of 16 tokens 0.1 + 1 = 1.1 ms. Each prompt asks for 2 tokens.
"""

from __future__ import annotations

import json

import pytest
from factories import make_scenario, run_scenario

from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError

FIXED = {"timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}, "scheduler": {"async_scheduling": False}}
STORE = {"read_gb_per_s": 2.097152, "write_gb_per_s": 2.097152, "latency_us": 100, "shared": True}


def _via_storage(tmp_path, rows: list[tuple[float, int]], backend: str = "vllm", prefill: dict | None = None,
                 **transfer) -> dict:
    """One request per ``(timestamp ms, hash id)`` row, 512 tokens in and 2 out, its content named by the id."""
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 512, "output_length": 2, "hash_ids": [h]})
                            + "\n" for t, h in rows))
    host = {"capacity_gib": 0.25, "link_gb_per_s": 32, "latency_us": 100, "storage": STORE}
    if backend == "sglang":
        host["write_policy"] = "write_through"
    roles = {"prefill": {**FIXED, "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 100},
                                                      "host_offload": host},
                         **(prefill or {})},
             "decode": {**FIXED, "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 1000}}}}
    if backend == "sglang":
        for role in roles.values():
            role.pop("scheduler")  # (SGLang's loop is synchronous unless host_loop)
    data = make_scenario(engine={"mode": "disaggregated", "backend": backend, "context_length": 1024,
                                 "kv_transfer": {"via": "storage", **transfer}})
    data["engine"]["workers"] = roles
    data["traffic"] = {"source": {"type": "trace", "path": str(path), "format": "mooncake"},
                       "load": {"type": "trace_timestamps"}}
    return data


def test_the_prefill_writes_the_prompt_and_the_decode_reads_it(tmp_path):
    """Prefill 0–20 ms; the prompt's KV is written to the store 20–52.1 ms (the prefill rank's handoff queue);
    the decode worker, idle, reserves at 20 ms and reads once the write has ended, 52.1–84.2 ms; it admits the
    request at 84.2 ms and samples the first token at 94.2 ms (TTFT 94.2), the second at 104.2 ms. The prefill
    rank, idle, frees the blocks as its write ends (52.1 ms), before the decode side has them."""
    res = run_scenario(_via_storage(tmp_path, [(0, 1)]))
    row = res.requests.iloc[0]
    assert row.ttft_ms == pytest.approx(94.2, abs=1e-9) and row.e2e_ms == pytest.approx(104.2, abs=1e-9)
    assert (row.prefill_done_s, row.transfer_start_s) == pytest.approx((0.020, 0.020), abs=1e-12)
    assert row.transfer_end_s == pytest.approx(0.0842, abs=1e-12) == row.decode_admit_s
    assert row.source_released_s == pytest.approx(0.0521, abs=1e-12)
    ev = res.events
    assert ev[ev.kind == "transfer_start"].role.tolist() == ["prefill"]
    assert ev[ev.kind == "transfer_end"].role.tolist() == ["decode"]
    assert res.summary["num_kv_transfers"] == 1
    moved = res.summary["kv_transfer_storage"]  # (each queue busy 32.1 ms of the 104.2 ms run)
    assert (moved["bytes_written"], moved["bytes_read"]) == (67_108_864, 67_108_864)
    assert moved["write_utilization"] == pytest.approx(32.1 / 104.2) == moved["read_utilization"]


def test_writes_queue_on_the_prefill_rank_and_reads_on_the_decode_rank(tmp_path):
    """Two different prompts prefilled together (prefill max_sequences 2), done at 20 ms: their writes queue on
    the prefill rank, 20–52.1 and 52.1–84.2 ms, each freeing its blocks as it ends; the decode rank reserves
    both at 20 ms and reads the first 52.1–84.2 ms, the second from its write's end and the first read's,
    84.2–116.3 ms. The first is admitted at 84.2 ms (TTFT 94.2, finished at 104.2); the second, landing on an
    idle decode worker, is admitted at 116.3 ms: TTFT 126.3 ms."""
    res = run_scenario(_via_storage(tmp_path, [(0, 1), (0, 2)], prefill={"scheduler": {
        "async_scheduling": False, "max_sequences": 2}}))
    req = res.requests.sort_values("request_id")
    assert req.source_released_s.tolist() == pytest.approx([0.0521, 0.0842], abs=1e-12)
    assert req.transfer_end_s.tolist() == pytest.approx([0.0842, 0.1163], abs=1e-12)
    assert req.ttft_ms.tolist() == pytest.approx([94.2, 126.3], abs=1e-9)


def test_destination_missing_reads_only_the_blocks_the_decode_rank_lacks(tmp_path):
    """The same prompt again at 200 ms, after the first finished (104.2 ms). The prefill rank finds 31 blocks on
    its GPU (vLLM leaves the last prompt token to compute) and block 31 on its host, loaded in 100 + 65.536 µs
    (32 GB/s): its pass runs 200.165536–220.165536 ms, and the whole prompt is written again, to 252.265536 ms.
    The decode rank, reserving at 220.165536 ms, finds ⌊511 / 16⌋ = 31 blocks in its own prefix cache and reads
    the one it lacks, 1.1 ms from the write's end: 253.365536 ms, first token 10 ms later, TTFT 63.365536 ms."""
    res = run_scenario(_via_storage(tmp_path, [(0, 1), (200, 1)], timing_mode="destination_missing"))
    req = res.requests.sort_values("request_id")
    assert req.host_cached_tokens.tolist() == [0, 16]
    assert req.transfer_end_s.tolist() == pytest.approx([0.0842, 0.253365536], abs=1e-12)
    assert req.ttft_ms.tolist() == pytest.approx([94.2, 63.365536], abs=1e-9)


def test_sglang_hands_off_destination_first_through_the_store(tmp_path):
    """SGLang: the decode rank reserves when the request is routed (at 0), so the read follows the write at once:
    write 20–52.1 ms, read 52.1–84.2 ms; the arrived request joins the decode batch with the prefill's token, and
    the decode pass 84.2–94.2 ms samples the second: both tokens reach the client at 94.2 ms (TTFT = E2E)."""
    res = run_scenario(_via_storage(tmp_path, [(0, 1)], backend="sglang"))
    row = res.requests.iloc[0]
    assert row.transfer_end_s == pytest.approx(0.0842, abs=1e-12)
    assert row.ttft_ms == pytest.approx(94.2, abs=1e-9) == row.e2e_ms
    assert row.source_released_s == pytest.approx(0.0521, abs=1e-12)


@pytest.mark.parametrize("change, message", [
    ({"bandwidth_gb_per_second": 10}, "engine.kv_transfer.bandwidth_gb_per_second: describes the link between the "
                                      "pools; with via: storage"),
    ({"contention": "shared_link"}, "engine.kv_transfer.contention: describes the link"),
    ({"via": "nfs"}, "engine.kv_transfer.via: must be one of link, storage, got 'nfs'"),
    ({"shared": False}, "engine.kv_transfer.via: storage hands the KV off through a store the prefill workers write "
                        "and the decode workers read; give the prefill role one"),
])
def test_a_handoff_through_storage_needs_the_prefill_role_s_shared_store(tmp_path, change, message):
    data = _via_storage(tmp_path, [(0, 1)])
    if "shared" in change:
        data["engine"]["workers"]["prefill"]["kv_cache"]["host_offload"]["storage"]["shared"] = False
    else:
        data["engine"]["kv_transfer"].update(change)
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(")):
        parse_scenario(data, tmp_path)
