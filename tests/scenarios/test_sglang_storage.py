"""A storage tier behind SGLang's HiCache host pool (``kv_cache.host_offload.storage`` on an SGLang worker), by hand.

The set-up of ``test_hicache.py``: Llama-3.1-8B-Instruct on one H100, SGLang with pages of one token, 600 GPU KV
tokens, fixed 20 ms prefill / 10 ms decode passes; one token's KV is 131,072 bytes, so over the 1 GB/s host link
with 100 µs a copy n tokens take 100,000 + 131,072·n ns. The host pool holds int(1.83 × 600) + 1 = 1,099 pages.
Storage reads and writes at 1 GB/s with 100 µs a job, in jobs of 128 pages (16.877216 ms for a full one);
existence queries cost a job's latency per 128 pages asked.

Four Mooncake rows of 512 tokens in and 2 out: A (0 ms, content 1), B (200 ms, content 2), D (400 ms, content 3),
C (600 ms, content 1 again). Worked out once for all the tests:

- Each of A, B, D is looked up on storage as it arrives (511 pages: all but the last prompt token), finds
  nothing, and the 100 µs answer comes back at the next plan; under ``wait_complete`` and ``timeout`` the request
  waits for it: TTFT 0.1 + 20 = 20.1 ms. Its prompt (512 tokens) is copied to the host after its prefill and its
  first output token at its finish; both are written on to storage from their landing (A: prompt lands at
  20.1 + 67.208864 = 87.308864 ms, written by 87.308864 + 4 × 16.877216 = 154.817728 ms).
- B's prefill demotes A from the GPU (600 tokens); D's demotes B, and D's backup (512 pages, 73 host pages
  free of 1,099 − 2 × 513) evicts A's host-only nodes, least recently used: A's content is on storage only.
- C (600 ms) matches nothing on GPU or host; its lookup finds A's 511 pages on storage: 4 queries, answered at
  600.4 ms. That plan takes 511 host pages (evicting B's host-only nodes) and queues the read: batches of
  128, 128, 128 and 127 pages land at 617.277216, 634.154432, 651.031648 and 667.777792 ms.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import CHAT_SESSIONS as SESSIONS
from factories import make_sglang_scenario, run_both_ways, run_scenario

from simmodel.config.load import parse_scenario
from simmodel.sim import Simulation

TOKEN_NS = 131_072
LATENCY_NS = 100_000
BATCH_NS = LATENCY_NS + 128 * TOKEN_NS  # 16.877216 ms
READ_END_MS = 600.4 + (3 * BATCH_NS + LATENCY_NS + 127 * TOKEN_NS) / 1e6  # 667.777792


def _scenario(tmp_path, storage: dict | None, rows=((0, 1), (200, 2), (400, 3), (600, 1))) -> dict:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 512, "output_length": 2, "hash_ids": [h]})
                            + "\n" for t, h in rows))
    host = {"ratio": 1.83, "link_gb_per_s": 1, "latency_us": 100}
    if storage is not None:
        host["storage"] = {"read_gb_per_s": 1, "write_gb_per_s": 1, "latency_us": 100, **storage}
    kv = {"block_size": 1, "capacity": {"type": "fixed", "blocks": 600}, "host_offload": host}
    data = make_sglang_scenario(engine={"context_length": 600, "workers": {"aggregated": {"kv_cache": kv}}})
    data["traffic"] = {"source": {"type": "trace", "path": str(path), "format": "mooncake"},
                       "load": {"type": "trace_timestamps"}}
    return data


def test_wait_complete_reads_an_evicted_prefix_back_from_storage(tmp_path):
    """C waits for its read (it lands at 667.777792 ms), then finds the 511 pages on the host and loads them into
    the pass that admits it, beside the forward: 100 µs + 511 × 131,072 ns = 67.077792 ms, longer than the 20 ms
    forward. TTFT = 667.777792 + 67.077792 − 600 = 134.855584 ms. Its storage read took 600.4 → 667.777792 ms.
    Stored: A's, B's and D's prompts and first output tokens (3 × 513), and of C only what it computed: its last
    prompt token and its first output token (its other 511 tokens were loaded from the host, already there)."""
    res = run_scenario(_scenario(tmp_path, {"prefetch_policy": "wait_complete"}))
    req = res.requests.set_index("request_id")
    assert READ_END_MS == pytest.approx(667.777792)
    assert req.ttft_ms.tolist()[:3] == pytest.approx([20.1, 20.1, 20.1], abs=1e-9)
    load_ms = (LATENCY_NS + 511 * TOKEN_NS) / 1e6
    assert req.ttft_ms[3] == pytest.approx(READ_END_MS + load_ms - 600, abs=1e-9)
    assert req.ttft_ms[3] == pytest.approx(134.855584, abs=1e-9)
    assert req.storage_cached_tokens.tolist() == [0, 0, 0, 511]
    assert req.host_cached_tokens.tolist() == [0, 0, 0, 0]  # (the host part not brought from storage)
    assert req.cached_tokens.tolist() == [0, 0, 0, 0]
    assert req.storage_load_ms[3] == pytest.approx(READ_END_MS - 600.4, abs=1e-9)
    tier = res.summary["kv_offload"]["aggregated"]
    assert tier["storage_hit_tokens"] == 511 and tier["host_hit_tokens"] == 0
    assert tier["storage_blocks_read"] == 511 and tier["storage_reads"] == 1
    assert tier["storage_blocks_written"] == 3 * 513 + 2
    assert tier["storage_prefetches"] == 4 and tier["storage_prefetches_stopped"] == 0
    ev = res.events
    reads = ev[ev.kind.isin(["storage_load_start", "storage_load_end"])]
    assert reads.time_s.tolist() == pytest.approx([0.6004, READ_END_MS / 1e3], abs=1e-12)


def test_timeout_stops_the_read_and_keeps_the_batches_landed(tmp_path):
    """``timeout`` with 30 ms and nothing per token: C's wait starts at the first plan that skips it (600 ms) and
    ends at the first plan past 630 ms, which the rank makes at 630 ms + 1 ns. One batch (128 pages) has landed;
    the second is under way (it keeps the read queue until 634.154432 ms) and the rest are not read. The 128
    pages join the tree on the host; C loads them (100 µs + 128 × 131,072 ns = 16.877216 ms, inside the 20 ms
    forward) and computes the other 384: TTFT 30.000001 + 20 = 50.000001 ms."""
    res = run_scenario(_scenario(tmp_path, {"prefetch_policy": "timeout", "prefetch_timeout_base_s": 0.03,
                                            "prefetch_timeout_per_ki_token_s": 0}))
    req = res.requests.set_index("request_id")
    assert req.ttft_ms.tolist()[:3] == pytest.approx([20.1, 20.1, 20.1], abs=1e-9)
    assert req.ttft_ms[3] == pytest.approx(50.000001, abs=1e-9)
    assert req.storage_cached_tokens[3] == 128
    assert req.storage_load_ms[3] == pytest.approx(BATCH_NS / 1e6, abs=1e-9)
    tier = res.summary["kv_offload"]["aggregated"]
    assert tier["storage_blocks_read"] == 128 and tier["storage_prefetches_stopped"] == 1
    # the read queue was busy for the batch that landed and the one under way when the read stopped
    assert tier["storage_read_utilization"] * res.summary["duration_s"] * 1e9 == pytest.approx(2 * BATCH_NS, rel=1e-9)


def test_a_timeout_long_enough_waits_as_wait_complete_does(tmp_path):
    """SGLang's default timeout (1 s + 0.25 s per 1,024 tokens asked) outlasts the 67 ms read: as wait_complete."""
    res = run_scenario(_scenario(tmp_path, {"prefetch_policy": "timeout"}))
    assert res.requests.ttft_ms.tolist()[3] == pytest.approx(134.855584, abs=1e-9)


def test_best_effort_takes_a_request_at_once_and_its_lookup_goes_unanswered(tmp_path):
    """``best_effort`` (SGLang's default) stops a prefetch at the first plan that comes to its request: each
    request arrives at an idle rank, which takes it in the plan that looks it up, before the answer. Nothing is
    read; every request computes its prompt: TTFT 20 ms."""
    res = run_scenario(_scenario(tmp_path, {}))
    req = res.requests.set_index("request_id")
    assert req.ttft_ms.tolist() == pytest.approx([20.0] * 4, abs=1e-9)
    assert req.storage_cached_tokens.tolist() == [0, 0, 0, 0]
    tier = res.summary["kv_offload"]["aggregated"]
    assert tier["storage_prefetches_stopped"] == 4 and tier["storage_blocks_read"] == 0


def test_without_storage_the_evicted_prefix_is_recomputed(tmp_path):
    res = run_scenario(_scenario(tmp_path, None))
    req = res.requests.set_index("request_id")
    assert req.ttft_ms.tolist() == pytest.approx([20.0] * 4)
    assert req.host_cached_tokens.tolist() == [0] * 4


TOKENS = {"kv_cache": {"capacity": {"type": "fixed", "blocks": 17000},
                       "host_offload": {"ratio": 1, "storage": {"read_gb_per_s": 2, "write_gb_per_s": 2}}}}
PAGES_WRITE_BACK = {"kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 1100},
                                 "host_offload": {"ratio": 1, "write_policy": "write_back", "storage": {}}}}


@pytest.mark.parametrize("worker, policy", [(TOKENS, "wait_complete"), (TOKENS, "timeout"),
                                            (PAGES_WRITE_BACK, "best_effort")],
                         ids=["tokens-wait_complete", "tokens-timeout", "pages-write-back-best_effort"])
def test_runs_of_passes_with_storage_equal_the_pass_by_pass_run(worker, policy):
    """Closed-loop chat sessions on a GPU pool and a host pool small enough that earlier turns leave both: planned
    as runs of passes and pass by pass, every request, pass, event and tier figure is the same; storage serves
    some prompts, and the tree stays consistent."""
    worker = json.loads(json.dumps(worker))
    worker["kv_cache"]["host_offload"]["storage"]["prefetch_policy"] = policy
    data = make_sglang_scenario(traffic=SESSIONS, engine={"context_length": 16384, "workers": {"aggregated": {
        "timing": {"type": "default"}, **worker}}})
    runs, differ = run_both_ways(data)
    assert not differ
    tier = runs.summary["kv_offload"]["aggregated"]
    assert tier["storage_blocks_written"] > 0
    if policy != "best_effort":
        assert tier["storage_hit_tokens"] > 0
    if policy != "timeout":
        return
    sim = Simulation(parse_scenario(data, Path(".")))  # (once: the tree after the run)
    sim.run()
    for worker in sim.workers:
        for rank in worker.ranks:
            rank.scheduler.cache.check()
            assert not rank.offload.l3.ops  # (every prefetch ended: read, stopped or dropped)
