"""A storage tier shared by the workers of a pool (``host_offload.storage.shared``), by hand.

The set-up of ``test_storage_tier.py`` (and ``test_host_offload.py``) on two replicas, routed round robin: each
worker is Llama-3.1-8B-Instruct on one H100 with 40 GPU blocks of 16 tokens (2 MiB each), a host tier of one
prompt (32 blocks) over a 32 GB/s link with 100 µs a copy (n blocks: 100 + 65.536·n µs), fixed timing (20 ms a
pass with prefill work, 10 ms a decode pass); storage moves 2.097152 GB/s with 100 µs a job (n blocks: 0.1 + n
ms). Requests are 512 tokens in (32 blocks), 2 out; the first goes to worker 0, the second to worker 1.
"""

from __future__ import annotations

import pytest
from factories import (
    CHAT_SESSIONS,
    host_tier_timeline,
    make_scenario,
    make_sglang_scenario,
    run_both_ways,
    run_scenario,
    write_csv_trace,
)

from simmodel.offload.storage import StoredBlocks

STORAGE = {"read_gb_per_s": 2.097152, "write_gb_per_s": 2.097152, "latency_us": 100}
ONE_PROMPT_GIB = 0.0625  # (32 blocks of 2 MiB)


def _two_workers(tmp_path, shared: bool, rows: list[tuple[float, int]]) -> dict:
    data = host_tier_timeline(tmp_path, {"capacity_gib": ONE_PROMPT_GIB, "storage": {**STORAGE, "shared": shared}},
                              rows, context_length=514)
    data["engine"]["workers"]["aggregated"]["parallelism"] = {"replicas": 2}
    return data


def test_a_prompt_written_by_one_worker_is_read_by_another(tmp_path):
    """A (t = 0, worker 0) prefills 0–20 ms; its 32 blocks land on worker 0's host at 20 + 0.1 + 32 × 0.065536 =
    22.197152 ms and are written on to the shared store, 0.1 + 32 = 32.1 ms: held from 54.297152 ms. C, the same
    content, arrives at 100 ms on worker 1, whose GPU and host hold nothing: the store has all 32 blocks, so
    worker 1 takes 32 host slots and reads them, 32.1 ms, landing at 132.1 ms (C waits in the queue), then loads
    them to the GPU, 100 + 32 × 65.536 = 2,197.152 µs, landing at 134.297152 ms, and C prefills its last token
    to 154.297152 ms: TTFT 54.297152 ms, its 512 prompt tokens read from storage. The store is counted once: 32
    blocks written (C's read is not written back), 32 held."""
    res = run_scenario(_two_workers(tmp_path, True, [(0, 1), (100, 1)]))
    req = res.requests.set_index("request_id")
    assert req.worker.tolist() == [0, 1]
    assert req.storage_cached_tokens.tolist() == [0, 512]
    assert req.host_cached_tokens.tolist() == [0, 0] and req.cached_tokens.tolist() == [0, 0]
    assert req.storage_load_ms[1] == pytest.approx(32.1, abs=1e-9)
    assert req.host_load_ms[1] == pytest.approx(2.197152, abs=1e-9)
    assert req.ttft_ms[1] == pytest.approx(54.297152, abs=1e-9)
    ev = res.events
    reads = ev[ev.kind.isin(["storage_load_start", "storage_load_end"])]
    assert reads.time_s.tolist() == pytest.approx([0.100, 0.1321], abs=1e-12)
    assert reads.worker.tolist() == [1, 1]
    tier = res.summary["kv_offload"]["aggregated"]
    assert tier["storage_shared"] is True and tier["storage_capacity_blocks"] is None
    assert "storage_capacity_blocks_per_rank" not in tier
    assert (tier["storage_blocks_written"], tier["storage_blocks_held"], tier["storage_reads"],
            tier["storage_blocks_read"]) == (32, 32, 1, 32)
    assert tier["storage_hit_tokens"] == 512 and tier["storage_hit_ratio"] == pytest.approx(512 / 1024)


def test_each_worker_s_own_store_finds_nothing_of_the_other_s(tmp_path):
    """The same two requests with a store per worker (the default): worker 1's store never held A's blocks, so
    C computes its 512 tokens in one 20 ms pass, TTFT 20 ms. Each worker's store is counted: both wrote 32 blocks,
    but C's write (from its host copy landing at 122.197152 ms) ends at 154.297152 ms, after the run (C's last
    token at 130 ms): 32 held."""
    res = run_scenario(_two_workers(tmp_path, False, [(0, 1), (100, 1)]))
    req = res.requests.set_index("request_id")
    assert req.storage_cached_tokens.tolist() == [0, 0]
    assert req.ttft_ms[1] == pytest.approx(20.0)
    tier = res.summary["kv_offload"]["aggregated"]
    assert tier["storage_shared"] is False and tier["storage_capacity_blocks_per_rank"] is None
    assert (tier["storage_blocks_written"], tier["storage_blocks_held"]) == (64, 32)


def test_a_write_is_found_only_once_it_has_ended(tmp_path):
    """C arrives at 40 ms, before A's write to the store ends (54.297152 ms): worker 1's lookup finds nothing
    and C computes its prompt, TTFT 20 ms, as with stores of their own."""
    res = run_scenario(_two_workers(tmp_path, True, [(0, 1), (40, 1)]))
    req = res.requests.set_index("request_id")
    assert req.storage_cached_tokens.tolist() == [0, 0]
    assert req.ttft_ms[1] == pytest.approx(20.0)


def test_a_shared_store_holds_the_writes_of_every_rank_in_the_order_they_end():
    """Two ranks' writes to a store of 3 blocks, queued out of the order they end: rank x's [a, b] ends at 10,
    rank y's [c] at 5, then x's [d] at 20. At 12 the store holds c (held at 5), then a and b (at 10); at 20 d
    evicts the least recently written, c. A lookup at 7 sees c only."""
    store = StoredBlocks(3, shared=True)
    x, y = object(), object()
    store.add(10, ["a", "b"], x)
    store.add(5, ["c"], y)
    store.add(20, ["d"], x)
    store.catch_up(7)
    assert list(store.blocks) == ["c"]
    store.catch_up(12)
    assert list(store.blocks) == ["c", "a", "b"]
    store.catch_up(20)
    assert list(store.blocks) == ["a", "b", "d"] and store.num_evicted == 1


def test_a_leaving_worker_s_writes_still_on_their_way_never_land_in_a_shared_store():
    """Rank x leaves at 15: its write ending at 20 is lost, the one ended at 10 stays held, and rank y's write
    ending at 30 still lands. A store of its own would go with the worker, whole."""
    store = StoredBlocks(None, shared=True)
    x, y = object(), object()
    store.add(10, ["a"], x)
    store.add(20, ["b"], x)
    store.add(30, ["c"], y)
    store.forget(x, 15)
    store.catch_up(40)
    assert list(store.blocks) == ["a", "c"]
    own = StoredBlocks(None)
    own.add(10, ["a"], x)
    own.catch_up(12)
    own.forget(x, 15)
    assert len(own) == 0


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_runs_of_passes_with_a_shared_store_equal_the_pass_by_pass_run(backend):
    """Multi-turn chat on three replicas routed round robin, so a session's turns land on different workers and
    find their earlier turns only in the shared store: planned as runs of passes and pass by pass, every request,
    pass, event and tier figure is the same, and the store serves hits."""
    storage = {"read_gb_per_s": 2, "shared": True}
    if backend == "vllm":
        data = make_scenario(traffic=CHAT_SESSIONS, engine={"context_length": 16384, "workers": {"aggregated": {
            "parallelism": {"replicas": 3}, "timing": {"type": "default"},
            "kv_cache": {"capacity": {"type": "fixed", "blocks": 1200},
                         "host_offload": {"capacity_gib": 2, "storage": storage}}}}})
    else:  # (best_effort takes a request before its read lands on so light a load: wait for it)
        storage["prefetch_policy"] = "wait_complete"
        data = make_sglang_scenario(traffic=CHAT_SESSIONS, engine={"context_length": 16384, "workers": {
            "aggregated": {"parallelism": {"replicas": 3}, "kv_cache": {"capacity": {"type": "fixed", "blocks": 20000},
                                                                      "host_offload": {"ratio": 1, "storage": storage}}}}})
    data["traffic"] = {**data["traffic"], "stop": {"requests": 120}}
    runs, differ = run_both_ways(data)
    assert differ == []
    assert runs.summary["kv_offload"]["aggregated"]["storage_hit_tokens"] > 0


_SHARED_PREFIX_LOAD = {"source": {"type": "synthetic", "input_tokens": {"distribution": "uniform", "min": 50, "max": 2000},
                                  "output_tokens": {"distribution": "uniform", "min": 1, "max": 200},
                                  "shared_prefix": {"tokens": 200, "groups": 8}},
                       "load": {"type": "concurrency", "concurrency": 64}, "stop": {"requests": 120}}


@pytest.mark.parametrize("scheduler, storage, ranks", [
    ({"max_batched_tokens": 512, "max_sequences": 64, "long_prefill_token_threshold": 256},
     {"capacity_gib": 1, "read_gb_per_s": 0.2, "write_gb_per_s": 0.2, "latency_us": 0}, 1),
    ({"max_batched_tokens": 512, "max_sequences": 8, "long_prefill_token_threshold": 256,
      "prefill_schedule_interval": 2},
     {"capacity_gib": 0.05, "read_gb_per_s": 0.2, "write_gb_per_s": 20, "latency_us": 5000}, 2),
], ids=["waiting-past-writes", "prefill-interval"])
def test_runs_that_hold_waiting_requests_end_where_pass_by_pass_would_plan(scheduler, storage, ranks):
    """Cut-down forms of ``fuzz_host_offload.py --storage --shared`` seeds 4 and 8, which found the rules of a run
    that goes on past waiting requests (``Run.holds_waiting``): a waiting request's lookup at a plan reads what
    storage gained since (seed 4: its promotions evicted each other on a small host tier, and a write ended by
    another worker, or one of the rank's own, changed what the next plan read), so such a run ends at the first
    pass end after a write ended; and under a prefill schedule interval a waiting request is held back by the
    interval, not for want of room, so no run goes on past it (seed 8). Each case fails without its rule."""
    data = make_scenario(traffic=_SHARED_PREFIX_LOAD, engine={"context_length": 4800, "workers": {"aggregated": {
        "parallelism": {"attention_data": ranks, "replicas": 4 - ranks}, "scheduler": scheduler,
        "kv_cache": {"capacity": {"type": "fixed", "blocks": 300},
                     "host_offload": {"capacity_gib": 0.5859375 * ranks, "storage": {**storage, "shared": True}}}}}})
    data["router"] = {"type": "least_loaded"}
    runs, differ = run_both_ways(data)
    assert differ == []
    assert runs.summary["kv_offload"]["aggregated"]["storage_hit_tokens"] > 0


@pytest.mark.parametrize(("async_scheduling", "ttft_ms"), [(False, 3540.0), (True, 3550.0)])
def test_a_run_holding_waiting_requests_ends_at_the_finish_that_frees_a_slot_however_far(tmp_path, async_scheduling,
                                                                                        ttft_ms):
    """A (100 → 600 tokens), B (100 → 350) and C (100 → 50) at 0, two sequence slots, fixed timing (prefill 20 ms,
    decode 10 ms, a mixed pass both), a shared store (so the worker's runs are applied as their passes end and
    hold C waiting). A and B prefill 0–20; B's last token ends 349 decode passes later, at 20 + 349 × 10 = 3,510;
    the plan then admits C into a mixed pass 3,510–3,540 (async: the plan after that, 3,520–3,550), its first
    token. That finish lies some 350 rows into the run, past the rows it prices at first (64): the run ends there
    all the same, as pass by pass, and does not go on past the slot. (A fresh review found it going on: C's TTFT
    5,100 ms.)"""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 600), (0.0, 100, 350), (0.0, 100, 50)])
    data = make_scenario(traffic={"source": {"type": "trace", "path": str(trace), "format": "csv"},
                                  "load": {"type": "trace_timestamps"}},
                         engine={"context_length": 2048, "workers": {"aggregated": {
                             "scheduler": {"max_sequences": 2, "async_scheduling": async_scheduling},
                             "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10},
                             "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 4000},
                                          "host_offload": {"capacity_gib": 10, "storage": {**STORAGE, "shared": True}}}}}})
    runs, differ = run_both_ways(data)
    assert differ == []
    assert runs.requests.set_index("request_id").loc[2, "ttft_ms"] == pytest.approx(ttft_ms)
