"""A storage tier behind vLLM's host tier (``host_offload.storage``, vLLM 0.32's ``TieringOffloadingSpec``), by hand.

The set-up of ``test_host_offload.py``: Llama-3.1-8B-Instruct on one H100, 16-token blocks of 2,097,152 bytes
(2 MiB); a 32 GB/s host link with 100 µs a transfer (a copy of n blocks: 100 + 65.536·n µs); fixed timing, 20 ms
a pass with prefill work, 10 ms a decode pass; 40 GPU blocks. Requests are 512 tokens in (32 blocks), 2 out; A
and C hold the same content, B other content. As there: A prefills 0–20 ms and its 32 blocks are copied to the
host from 20 ms, landing at 22.197152 ms; A finishes at 30 ms; B (t = 100 ms) evicts A's blocks 7–31 from the GPU
and its own land on the host at 122.197152 ms; C (t = 200 ms) finds A's blocks 0–6 on the GPU (112 tokens).

context_length is 514 (a 512-token prompt and its 2 outputs: a prompt fills at most 32 blocks, so a host tier of one
prompt is allowed with storage behind it).

Storage moves 2.097152 GB/s with 100 µs a job, so a block takes 1 ms: a read or write of n blocks takes
0.1 + n ms.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from factories import CHAT_SESSIONS as SESSIONS
from factories import host_tier_timeline, make_scenario, make_sglang_scenario, run_both_ways, run_scenario

from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError

STORAGE = {"read_gb_per_s": 2.097152, "write_gb_per_s": 2.097152, "latency_us": 100}
ONE_PROMPT_GIB = 0.0625  # (32 blocks of 2 MiB)


def _scenario(tmp_path, host: dict, rows: list[tuple[float, int]]) -> dict:
    return host_tier_timeline(tmp_path, host, rows, context_length=514)


def test_a_prefix_evicted_from_the_host_is_read_back_from_storage(tmp_path):
    """The host holds one prompt (32 blocks). A's 32 blocks land on the host at 22.197152 ms and are written
    through to storage from then: 0.1 + 32 = 32.1 ms, held from 54.297152 ms. B's store (taken when B's pass is
    planned, at 100 ms) evicts all of A's (their write has ended); B's write runs 122.197152–154.297152 ms.
    C (200 ms) finds A's blocks 0–6 on the GPU, blocks 7–31 nowhere on the host and all on storage: 25 host slots
    are taken (evicting 25 of B's blocks) and read from storage, 0.1 + 25 = 25.1 ms, landing at 225.1 ms, while C
    waits in the queue. At 225.1 ms the 25 blocks are on the host: the usual host load, 100 + 25 × 65.536 =
    1,738.4 µs, lands at 226.8384 ms, and C prefills its last token to 246.8384 ms: TTFT 46.8384 ms. Its 400
    loaded tokens came from storage (host_cached_tokens counts those found on the host only: 0)."""
    res = run_scenario(_scenario(tmp_path, {"capacity_gib": ONE_PROMPT_GIB, "storage": STORAGE},
                                 [(0, 1), (100, 2), (200, 1)]))
    req = res.requests.set_index("request_id")
    assert req.cached_tokens.tolist() == [0, 0, 112]
    assert req.storage_cached_tokens.tolist() == [0, 0, 400]
    assert req.host_cached_tokens.tolist() == [0, 0, 0]
    assert req.storage_load_ms[2] == pytest.approx(25.1, abs=1e-9)
    assert req.host_load_ms[2] == pytest.approx(1.7384, abs=1e-9)
    assert req.ttft_ms[2] == pytest.approx(46.8384, abs=1e-9)
    ev = res.events
    reads = ev[ev.kind.isin(["storage_load_start", "storage_load_end"])]
    assert reads.time_s.tolist() == pytest.approx([0.200, 0.2251], abs=1e-12)
    assert reads.num_tokens.tolist() == [400, 400]
    loads = ev[ev.kind.isin(["host_load_start", "host_load_end"])]
    assert loads.time_s.tolist() == pytest.approx([0.2251, 0.2268384], abs=1e-12)
    writes = ev[ev.kind == "storage_store"]  # (queued with the host copy, at its pass's end)
    assert writes.time_s.tolist() == pytest.approx([0.020, 0.120]) and writes.num_tokens.tolist() == [512, 512]
    tier = res.summary["kv_offload"]["aggregated"]
    assert (tier["gpu_hit_tokens"], tier["host_hit_tokens"], tier["storage_hit_tokens"]) == (112, 0, 400)
    assert tier["hit_ratio"] == pytest.approx(512 / 1536) and tier["storage_hit_ratio"] == pytest.approx(400 / 1536)
    assert tier["storage_capacity_blocks_per_rank"] is None
    assert (tier["storage_blocks_written"], tier["storage_blocks_held"], tier["storage_reads"],
            tier["storage_blocks_read"]) == (64, 64, 1, 25)
    assert (tier["blocks_evicted"], tier["blocks_held"]) == (32 + 25, 32)  # (B's took A's slots; C's reads, B's)
    assert tier["storage_bytes_read"] == 25 * 2_097_152
    duration_ns = 256_838_400  # (C decodes its second token to 256.8384 ms)
    assert tier["storage_write_utilization"] == pytest.approx(2 * 32_100_000 / duration_ns)
    assert tier["storage_read_utilization"] == pytest.approx(25_100_000 / duration_ns)


def test_host_blocks_stay_until_their_write_to_storage_ends(tmp_path):
    """Storage written at a tenth of the speed: 10 ms a block, so A's write runs 22.197152–342.297152 ms and
    keeps A's 32 host blocks until then. B's store (planned at 100 ms) needs all 32 slots of the one-prompt host
    tier, finds none it may evict and takes nothing (``stores_failed``); B offers it again with its decode pass
    (120 ms) and when it has finished (the plan at 130 ms): three failed stores, nothing of B's on the host or
    storage. C (200 ms) finds A's blocks 0–6 on the GPU and 7–31 still on the host: the plain host load of
    test_host_offload's first timeline, TTFT 21.7384 ms, nothing from storage."""
    slow = {**STORAGE, "write_gb_per_s": 0.2097152}
    res = run_scenario(_scenario(tmp_path, {"capacity_gib": ONE_PROMPT_GIB, "storage": slow},
                                 [(0, 1), (100, 2), (200, 1)]))
    req = res.requests.set_index("request_id")
    assert req.host_cached_tokens.tolist() == [0, 0, 400]
    assert req.storage_cached_tokens.tolist() == [0, 0, 0]
    assert req.ttft_ms[2] == pytest.approx(21.7384, abs=1e-9)
    tier = res.summary["kv_offload"]["aggregated"]
    assert (tier["stores_failed"], tier["blocks_stored"], tier["blocks_evicted"]) == (3, 32, 0)
    assert tier["storage_blocks_written"] == 32 and tier["storage_reads"] == 0


def test_a_bounded_storage_tier_evicts_its_least_recently_written_blocks(tmp_path):
    """Storage of 32 blocks (0.0625 GiB): B's write, held from 154.297152 ms, evicts A's 32 blocks. C (200 ms)
    then finds A's blocks 7–31 neither on the host (B's hold it) nor on storage, and computes them: 400 tokens
    in one 20 ms pass, TTFT 20 ms."""
    res = run_scenario(_scenario(tmp_path, {"capacity_gib": ONE_PROMPT_GIB,
                                            "storage": {**STORAGE, "capacity_gib": ONE_PROMPT_GIB}},
                                 [(0, 1), (100, 2), (200, 1)]))
    req = res.requests.set_index("request_id")
    assert req.host_cached_tokens.tolist() == [0, 0, 0] and req.storage_cached_tokens.tolist() == [0, 0, 0]
    assert req.ttft_ms[2] == pytest.approx(20.0)
    tier = res.summary["kv_offload"]["aggregated"]
    assert tier["storage_capacity_blocks_per_rank"] == 32
    assert (tier["storage_blocks_evicted"], tier["storage_blocks_held"]) == (32, 32)


OPEN_LOOP = {"source": {"type": "synthetic", "input_tokens": {"distribution": "uniform", "min": 50, "max": 2000},
                        "output_tokens": {"distribution": "uniform", "min": 1, "max": 200},
                        "shared_prefix": {"tokens": 1000, "groups": 8}},
             "load": {"type": "gamma", "requests_per_second": 5, "burstiness": 0.3}, "stop": {"requests": 120}}


@pytest.mark.parametrize("traffic, context, worker", [
    (SESSIONS, 16384, {"kv_cache": {"capacity": {"type": "fixed", "blocks": 1200},
                                    "host_offload": {"capacity_gib": 2, "storage": {"read_gb_per_s": 2}}}}),
    (OPEN_LOOP, 4800, {"scheduler": {"async_scheduling": True, "max_batched_tokens": 8192, "max_sequences": 64},
                       "kv_cache": {"capacity": {"type": "fixed", "blocks": 300},
                                    "host_offload": {"capacity_gib": 0.5859375, "link_gb_per_s": 8, "storage": {
                                        "read_gb_per_s": 2, "write_gb_per_s": 2, "latency_us": 5000}}}}),
    ({**OPEN_LOOP, "source": {**OPEN_LOOP["source"], "shared_prefix": {"tokens": 200, "groups": 8}},
      "stop": {"requests": 60}}, 9600,
     {"scheduler": {"max_batched_tokens": 8192, "max_sequences": 256, "long_prefill_token_threshold": 256},
      "kv_cache": {"capacity": {"type": "fixed", "blocks": 600},
                   "host_offload": {"capacity_gib": 1.171875, "link_gb_per_s": 8, "storage": {
                       "read_gb_per_s": 2, "write_gb_per_s": 2, "latency_us": 5000}}}}),
], ids=["sessions", "open-loop-async", "open-loop-rereads"])
def test_runs_of_passes_with_a_storage_tier_equal_the_pass_by_pass_run(traffic, context, worker):
    """Multi-turn and shared-prefix loads on a GPU cache and a host tier both small enough to evict, with storage
    behind them (and a read queue slow enough that requests wait on it): planned as runs of passes and pass by
    pass, every request, pass, event and tier figure is the same. The open-loop cases (``fuzz_host_offload.py
    --storage`` seeds 27 and 42) found two rules the runs first broke: the requests that finished inside a run
    become the most recent before the next plan's lookups evict anything; and a request's reads evict host
    blocks, its own included, so the plan after one that read is the rank's own (it may read again)."""
    data = make_scenario(traffic=traffic, engine={"context_length": context, "workers": {"aggregated": {
        "timing": {"type": "default"}, **worker}}})
    runs, differ = run_both_ways(data)
    assert runs.summary["kv_offload"]["aggregated"]["storage_hit_tokens"] > 0
    assert not differ


def _assert_storage_runs_equal(inputs: tuple[int, int], outputs: tuple[int, int], prefix: int, load: dict,
                               context: int, sequences: int, blocks: int, link: dict, storage: dict) -> None:
    """100 synthetic requests (``inputs`` and ``outputs`` tokens, uniform, over twelve shared ``prefix``-token
    prefixes) under ``load``, on one worker of ``sequences`` slots, ``blocks`` GPU KV blocks, a 512-token budget
    a pass, and a 2 GiB host tier (``link``) with 20 GiB of storage behind it (``storage``): storage is read, and
    every table is the same planned as runs of passes and pass by pass."""
    data = make_scenario(
        traffic={"source": {"type": "synthetic",
                            "input_tokens": {"distribution": "uniform", "min": inputs[0], "max": inputs[1]},
                            "output_tokens": {"distribution": "uniform", "min": outputs[0], "max": outputs[1]},
                            "shared_prefix": {"tokens": prefix, "groups": 12}},
                 "load": load, "stop": {"requests": 100}},
        engine={"context_length": context, "workers": {"aggregated": {
            "timing": {"type": "default"},
            "scheduler": {"max_sequences": sequences, "max_batched_tokens": 512, "long_prefill_token_threshold": 0},
            "kv_cache": {"capacity": {"type": "fixed", "blocks": blocks}, "host_offload": {
                "capacity_gib": 2, **link, "storage": {"capacity_gib": 20, **storage}}}}}})
    runs, differ = run_both_ways(data)
    assert runs.summary["kv_offload"]["aggregated"]["storage_hit_tokens"] > 0
    assert not differ


def test_runs_of_passes_end_where_a_write_to_storage_may_change_a_waiting_lookup():
    """Open loop at 10 requests/s (3,548–7,548 tokens in over twelve shared 2,048-token prefixes, 200–800 out), 1,500
    GPU blocks, 16 sequences, a 2 GiB host tier with storage behind it read at 0.5 GB/s: requests wait, and pass
    by pass each plan looks them up again, so the first plan after a write to storage ends may read what it wrote
    (the first difference, at 24.646 s: request 32 read 512 tokens from storage). A run planned ahead through
    waiting requests ends before that plan (``VllmCpuOffload.next_event_ns``); it went past it, and the requests,
    passes, events and tier figures all differed (found by the eighteenth session's review, on the code before it
    too). Every table is the same as pass by pass."""
    _assert_storage_runs_equal((3548, 7548), (200, 800), 2048, {"type": "poisson", "requests_per_second": 10}, 8192,
                               16, 1500, {"link_gb_per_s": 8, "latency_us": 5000},
                               {"read_gb_per_s": 0.5, "write_gb_per_s": 2, "latency_us": 0})


def test_runs_of_passes_with_storage_under_a_closed_loop_equal_the_pass_by_pass_run():
    """Four clients in a closed loop (612–2,612 tokens in over twelve shared 512-token prefixes, 20–100 out), 300 GPU
    blocks, a 2 GiB host tier with storage behind it written at 0.5 GB/s. A run applied as its passes end plans
    the pass at 14.112 s itself; pass by pass that plan leaves vLLM's tiering manager to poll at the next lookup,
    which at 14.119 s releases the host blocks of a write that ended at 14.108 s, so the request placed at
    14.114 s is read from storage into 32 host slots. A run that did not tell the tier it planned that pass
    (``Recording.planned_itself``) left the poll closed: 4 slots, and the tier's figures and events differed from
    there (found by the eighteenth session's review, on the code before it too). Every table is the same as pass
    by pass."""
    _assert_storage_runs_equal((612, 2612), (20, 100), 512, {"type": "concurrency", "concurrency": 4}, 4800,
                               64, 300, {"link_gb_per_s": 8, "latency_us": 0},
                               {"read_gb_per_s": 2, "write_gb_per_s": 0.5, "latency_us": 100})


@pytest.mark.parametrize("storage, backend, message", [
    ({"read_gb_per_s": 0}, "vllm", "host_offload.storage.read_gb_per_s"),
    ({"capacity": 3}, "vllm", "host_offload.storage.capacity"),
    ({"prefetch_policy": "timeout"}, "vllm", "host_offload.storage.prefetch_policy: is SGLang HiCache's prefetch "
                                             "setting"),
    ({"prefetch_policy": "eager"}, "sglang", "host_offload.storage.prefetch_policy: must be one of"),
    ({"prefetch_threshold": -1}, "sglang", "host_offload.storage.prefetch_threshold: must be an integer >= 0"),
    ({"prefetch_policy": "timeout", "prefetch_timeout_base_s": -1}, "sglang",
     "host_offload.storage.prefetch_timeout_base_s"),
    ({"prefetch_timeout_per_ki_token_s": 0.5}, "sglang", "host_offload.storage.prefetch_timeout_per_ki_token_s: only "
                                                         "applies with prefetch_policy timeout"),
    ({"capacity_gib": 0.001}, "vllm", "host_offload.storage.capacity_gib: holds no whole KV block (one is 2 MiB"),
    # (the host's 4 GiB hold 2,048 blocks of 2 MiB; a prompt at context_length 65,536 fills 4,096)
    ({"context_length": 65536}, "vllm", "host_offload.capacity_gib: holds 2048 KV blocks, fewer than a prompt at "
                                        "context_length 65536 fills (4096)"),
])
def test_bad_storage_settings_are_refused(storage, backend, message):
    make = make_sglang_scenario if backend == "sglang" else make_scenario
    context = storage.pop("context_length", 4096)
    data = make(engine={"context_length": context, "workers": {"aggregated": {"kv_cache": {
        "capacity": {"type": "fixed", "blocks": 5000}, "host_offload": {"capacity_gib": 4, "storage": storage}}}}})
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_scenario(data, Path("."))
