"""SGLang's HiCache (a host tier in the radix tree, ``kv_cache.host_offload`` on an SGLang worker), by hand.

The set-up every timeline here shares: Llama-3.1-8B-Instruct on one H100 (tensor 1), SGLang with pages of one
token and 600 KV tokens (context_length 600). One token's KV on one GPU is 32 layers × 2 (K and V) × 8 KV heads ×
128 × 2 bytes = 131,072 bytes. The host link is set to 1 GB/s with 100 µs per copy: n tokens take
100,000 + 131,072·n ns. Fixed timing: 20 ms a pass with prefill work, 10 ms a decode pass. The host pool holds
ratio 2 × 600 = 1,200 tokens (plus one page), more than everything here.

Requests are Mooncake rows whose one 512-token hash id says what the prompt holds: A and C hold the same content
(id 1), B other content (id 2); each is 512 tokens in and 2 out, at 0, 100 and 200 ms.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import CHAT_SESSIONS as SESSIONS
from factories import make_sglang_scenario, run_both_ways, run_scenario

TOKEN_NS = 131_072
TOKEN_BYTES = 131_072  # (one token of KV on one GPU; at 1 GB/s it takes TOKEN_NS)
LATENCY_NS = 100_000


def _scenario(tmp_path, host: dict | None, rows: list[tuple[int, int]] = ((0, 1), (100, 2), (200, 1))) -> dict:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 512, "output_length": 2, "hash_ids": [h]})
                            + "\n" for t, h in rows))
    kv = {"block_size": 1, "capacity": {"type": "fixed", "blocks": 600}}
    if host is not None:
        kv["host_offload"] = {"link_gb_per_s": 1, "latency_us": 100, **host}
    data = make_sglang_scenario(engine={"context_length": 600, "workers": {"aggregated": {"kv_cache": kv}}})
    data["traffic"] = {"source": {"type": "trace", "path": str(path), "format": "mooncake"},
                       "load": {"type": "trace_timestamps"}}
    return data


def test_write_through_a_prefix_demoted_to_the_host_is_loaded_back_beside_the_pass(tmp_path):
    """A prefills 0–20 ms; its 512 prompt tokens go in the tree then and, write-through, are copied to the host
    at once: 100 µs + 512 × 131,072 ns = 67.208864 ms on the store link, landing at 87.208864 ms; the tree keeps
    them locked until a plan reaps the copy. A decodes 20–30 ms and finishes: its first output token joins the
    tree (a node of its own, copied behind the prompt's: lands at 87.439936 ms).
    B (100 ms) reaps both copies, then needs 512 tokens with 87 free: the least recently used leaf, A's output
    token, then A's prompt are *demoted* (both are on the host), freeing 513. B's copies land long before C.
    C (200 ms, A's content) matches A's 511 tokens (the prompt less its last token) on the host, none on the GPU.
    The check counts them as needing GPU room (512 + 2 outputs + 1 page = 515 < 87 free + 513 evictable), and the
    load takes 511 tokens of GPU room at once, demoting B. C's pass computes its last prompt token while the load
    copies 511 tokens beside it: 100 µs + 511 × 131,072 ns = 67.077792 ms, longer than the 20 ms forward, so the
    pass lasts that long: TTFT 67.077792 ms, then a 10 ms decode.
    Host hits: 511 of the 1,536 prompt tokens looked up; none on the GPU."""
    res = run_scenario(_scenario(tmp_path, {"ratio": 2}))
    req = res.requests.set_index("request_id")
    load_ms = (LATENCY_NS + 511 * TOKEN_NS) / 1e6
    assert load_ms == pytest.approx(67.077792)
    assert req.cached_tokens.tolist() == [0, 0, 0]
    assert req.host_cached_tokens.tolist() == [0, 0, 511]
    assert req.ttft_ms.tolist()[:2] == pytest.approx([20.0, 20.0])
    assert req.ttft_ms[2] == pytest.approx(load_ms, abs=1e-9)
    assert req.host_load_ms[2] == pytest.approx(load_ms, abs=1e-9)
    assert req.finish_s[2] == pytest.approx(0.2 + load_ms / 1e3 + 0.010, abs=1e-12)
    tier = res.summary["kv_offload"]["aggregated"]
    assert tier["host_hit_tokens"] == 511 and tier["gpu_hit_tokens"] == 0
    assert tier["blocks_loaded"] == 511
    # stored: A's 512 + 1 and B's 512 + 1 (C's prompt was on the host; its output token is copied at its finish)
    assert tier["blocks_stored"] == 513 + 513 + 1
    assert tier["capacity_blocks_per_rank"] == 1201  # int(2 × 600) // 1 + 1 (SGLang's padding page)
    # Per pass (a page is one token of 131,072 bytes): the load rides in C's pass (the one starting at 200 ms);
    # the stores in the passes whose outputs inserted them, summing to the tier's bytes stored.
    passes = res.passes
    assert passes.host_bytes_loaded.tolist() == [511 * TOKEN_BYTES if t == pytest.approx(0.2) else 0
                                                 for t in passes.start_s]
    assert passes.host_bytes_stored.sum() == tier["bytes_stored"] == (513 + 513 + 1) * TOKEN_BYTES
    assert passes.host_bytes_stored.iloc[0] == 512 * TOKEN_BYTES  # (A's prompt, copied as its prefill ends)


def test_a_faster_link_hides_the_load_behind_the_forward_pass(tmp_path):
    """At 32 GB/s the 511-token load takes 100 µs + 511 × 131,072 / 32 ns = 2.193056 ms, under the 20 ms
    forward: C's TTFT is the pass's 20 ms, and its load shows in host_load_ms only."""
    data = _scenario(tmp_path, {"ratio": 2})
    data["engine"]["workers"]["aggregated"]["kv_cache"]["host_offload"]["link_gb_per_s"] = 32
    req = run_scenario(data).requests.set_index("request_id")
    assert req.host_cached_tokens[2] == 511
    assert req.ttft_ms[2] == pytest.approx(20.0, abs=1e-9)
    assert req.host_load_ms[2] == pytest.approx((LATENCY_NS + 511 * TOKEN_NS / 32) / 1e6, abs=1e-6)


def test_write_through_selective_keeps_a_prefix_used_once_off_the_host(tmp_path):
    """``write_through_selective`` copies a node on its second counted insertion: A's prompt is inserted by A
    alone, so it is never copied, and B's eviction deletes it. C recomputes all 512 tokens (TTFT 20 ms)."""
    res = run_scenario(_scenario(tmp_path, {"ratio": 2, "write_policy": "write_through_selective"}))
    req = res.requests.set_index("request_id")
    assert req.host_cached_tokens.tolist() == [0, 0, 0]
    assert req.ttft_ms.tolist() == pytest.approx([20.0, 20.0, 20.0])
    assert res.summary["kv_offload"]["aggregated"]["blocks_stored"] == 0


def test_write_through_selective_copies_a_prefix_a_second_request_inserts_through(tmp_path):
    """Four requests: A (0 ms), A2 (50 ms, A's content), B (100 ms, other content), C (200 ms, A's content), on a
    32 GB/s link. A's insertion counts one hit on its prompt. A2 finds 511 tokens of it on the GPU (the match
    splits it there) and computes the last one; its insertion at 70 ms walks both parts, their second hit: both
    are copied (511 + 1 = 512 tokens, 100 µs + 512 × 131,072 / 32 ns = 2.197152 ms, reaped at A2's finish plan at
    80 ms). The outputs (one hit each) never are. B's room evicts A's and A2's output tokens (deleted) and demotes
    A's prompt; C loads its 511 tokens from the host (100 µs + 511 × 4,096 ns = 2.193056 ms, under the 20 ms
    forward: TTFT 20 ms). Stored: the 512 tokens A2 copied, nothing else."""
    data = _scenario(tmp_path, {"ratio": 2, "write_policy": "write_through_selective"},
                     [(0, 1), (50, 1), (100, 2), (200, 1)])
    data["engine"]["workers"]["aggregated"]["kv_cache"]["host_offload"]["link_gb_per_s"] = 32
    res = run_scenario(data)
    req = res.requests.set_index("request_id")
    assert req.cached_tokens.tolist() == [0, 511, 0, 0]
    assert req.host_cached_tokens.tolist() == [0, 0, 0, 511]
    assert req.ttft_ms.tolist() == pytest.approx([20.0] * 4)
    assert req.host_load_ms[3] == pytest.approx((LATENCY_NS + 511 * TOKEN_NS / 32) / 1e6, abs=1e-9)
    tier = res.summary["kv_offload"]["aggregated"]
    assert tier["blocks_stored"] == 512 and tier["blocks_demoted"] == 512


def test_write_back_copies_on_eviction_and_the_pass_waits_for_it(tmp_path):
    """``write_back`` copies nothing at insertion. B's admission evicts A's output token, then A's prompt: each is
    copied to the host as it is evicted (513 tokens), and SGLang's scheduler waits for the copies, so B's pass
    starts after them: 100 µs + 513 × 131,072 ns = 67.339936 ms, then 20 ms: TTFT 87.339936 ms.
    C's load needs room, evicting B's 513 tokens the same way: a 67.339936 ms wait, then the 511-token load
    (67.077792 ms) beside the 20 ms forward: TTFT 134.417728 ms."""
    res = run_scenario(_scenario(tmp_path, {"ratio": 2, "write_policy": "write_back"}))
    req = res.requests.set_index("request_id")
    stall_ms = (LATENCY_NS + 513 * TOKEN_NS) / 1e6
    load_ms = (LATENCY_NS + 511 * TOKEN_NS) / 1e6
    assert req.host_cached_tokens.tolist() == [0, 0, 511]
    assert req.ttft_ms[0] == pytest.approx(20.0)
    assert req.ttft_ms[1] == pytest.approx(stall_ms + 20.0, abs=1e-9)
    assert req.ttft_ms[2] == pytest.approx(stall_ms + load_ms, abs=1e-9)
    tier = res.summary["kv_offload"]["aggregated"]
    assert tier["blocks_written_back"] == 2 * 513


def test_without_the_tier_the_prefix_is_recomputed(tmp_path):
    res = run_scenario(_scenario(tmp_path, None))
    req = res.requests.set_index("request_id")
    assert req.ttft_ms.tolist() == pytest.approx([20.0, 20.0, 20.0])
    assert "kv_offload" not in res.summary




@pytest.mark.parametrize("traffic, worker", [
    (SESSIONS, {"parallelism": {"tensor": 2}, "kv_cache": {"capacity": {"type": "fixed", "blocks": 17000},
                                                           "host_offload": {"ratio": 3, "latency_us": 50}}}),
    (SESSIONS, {"kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 1100},
                             "host_offload": {"capacity_gib": 4}}}),
    (SESSIONS, {"kv_cache": {"capacity": {"type": "fixed", "blocks": 17000},
                             "host_offload": {"ratio": 1.5, "write_policy": "write_through_selective"}}}),
    (SESSIONS, {"kv_cache": {"capacity": {"type": "fixed", "blocks": 17000},
                             "host_offload": {"ratio": 2, "write_policy": "write_back", "link_gb_per_s": 2}}}),
    (SESSIONS, {"host_loop": True, "kv_cache": {"capacity": {"type": "fixed", "blocks": 17000},
                                                "host_offload": {"ratio": 2, "link_gb_per_s": 0.5}}}),
    (SESSIONS, {"parallelism": {"attention_data": 2}, "kv_cache": {"capacity": {"type": "fixed", "blocks": 17000},
                                                                   "host_offload": {"ratio": 2}}}),
], ids=["sessions-tp2", "sessions-pages", "sessions-selective", "sessions-write-back", "sessions-overlap-slow",
        "sessions-attention-dp"])
def test_runs_of_passes_with_hicache_equal_the_pass_by_pass_run(traffic, worker):
    """Closed-loop chat sessions on a GPU pool small enough to evict and a host pool that finds the evicted prefixes
    (pages of 1 and 16 tokens, every write policy, a slow link, SGLang's overlap loop, attention DP): planned as runs
    of decode passes (the default) and pass by pass (``coalesce=False``), every request, pass, event and tier figure
    is the same."""
    data = make_sglang_scenario(traffic=traffic, engine={"context_length": 16384, "workers": {"aggregated": {
        "timing": {"type": "default"}, **worker}}})
    runs, differ = run_both_ways(data)
    assert runs.summary["kv_offload"]["aggregated"]["loads"] > 0
    assert not differ


@pytest.mark.parametrize("backend, host", [
    ("sglang", {"ratio": 2, "storage": {}}),
    ("vllm", {"capacity_gib": 4, "storage": {}}),
], ids=["sglang", "vllm"])
def test_a_drained_worker_with_a_host_tier_leaves_and_comes_back_cold(backend, host):
    """The ready planner scenario with a load that falls: the planner drains three of its four workers. A
    draining worker leaves once it holds no KV; HiCache's copies to the host lock KV until acknowledged, which an
    idle engine does as they land, so every drained worker leaves (none is left draining at the end, one serves),
    and its host tier leaves with it: empty, as a restarted engine's; so does the storage tier behind it (a local
    disk)."""
    from simmodel.scaling.fleet import OFF
    from simmodel.sim import Simulation

    sets = ["traffic.load.stages=[{requests_per_second: 2, duration_s: 30}, {requests_per_second: 20, "
            "duration_s: 60}, {requests_per_second: 0.2, duration_s: 300}]", f"engine.backend={backend}",
            "engine.workers.aggregated.kv_cache.block_size=16",  # (SGLang's pages too: fewer storage keys)
            "engine.workers.aggregated.kv_cache.capacity={type: fixed, blocks: 2000}",
            "engine.workers.aggregated.kv_cache.host_offload=" + str(host).replace("'", "")]
    sim = Simulation.from_yaml(Path(__file__).resolve().parents[2] / "scenarios" / "planner-step-load.yaml", sets,
                               keep_events=False)
    res = sim.run()
    last = res.replicas.iloc[-1]
    assert (last.serving, last.draining) == (1, 0)
    fleet = sim.fleets["aggregated"]
    off = [(w, fleet.lives[k][-1][1]) for k, (w, state) in enumerate(zip(fleet.workers, fleet.state)) if state == OFF]
    assert len(off) == 3
    for worker, left in off:
        for rank in worker.ranks:
            held = rank.scheduler.cache.host_tokens if backend == "sglang" else len(rank.offload.tier)
            assert held == 0
            assert len(rank.offload.storage) == 0
            assert rank.offload.storage.write_link.free_at <= left  # (its queued writes went with the disk)
    assert sum(rank.offload.storage.blocks_written for worker, _ in off for rank in worker.ranks) > 0
