"""A host KV tier behind the GPU prefix cache (vLLM's offloading connector), by hand.

The set-up every timeline here shares: Llama-3.1-8B-Instruct on one H100 (tensor 1), 16-token blocks. One
token's KV on one GPU is 32 layers × 2 (K and V) × 8 KV heads × 128 × 2 bytes = 131,072 bytes, so a block is
2,097,152 bytes (2 MiB). The host link is set to 32 GB/s with 100 µs per transfer: a block's bytes take
2,097,152 / 32e9 s = 65.536 µs, and a transfer of n blocks 100 + 65.536·n µs. Fixed timing: 20 ms a pass
with prefill work, 10 ms a decode pass. The GPU holds 40 blocks (context_length 640, the most 40 blocks hold).

Requests are Mooncake rows whose one 512-token hash id says what the prompt holds: A and C hold the same
content (id 1), B other content (id 2); each is 512 tokens in (32 blocks) and 2 out.
"""

from __future__ import annotations

import pytest
from factories import CHAT_SESSIONS as SESSIONS
from factories import host_tier_timeline, make_scenario, run_both_ways, run_scenario

BLOCK = 2_097_152
PER_BLOCK_NS = 65_536
LATENCY_NS = 100_000


def _scenario(tmp_path, host: dict, rows: list[tuple[float, int]]) -> dict:
    return host_tier_timeline(tmp_path, host, rows)


def test_a_prefix_evicted_from_the_gpu_is_loaded_from_the_host(tmp_path):
    """A (t = 0) prefills 0–20 ms; the 32 full prompt blocks it computes are stored after that pass: one copy of
    32 blocks on the store link, 100 + 32 × 65.536 = 2,197.152 µs, landing at 22.197152 ms. A's decode (20–30 ms)
    takes a 33rd block (its 513th token), never full and never offered (prompt blocks only). When A finishes,
    vLLM frees its blocks tail first: the partial block to the front of the free queue, the 32 cached ones to
    its back, block 31 first and block 0 last.
    B (t = 100 ms, other content) takes 32 blocks: A's partial one, the 7 never used, then A's blocks 31 … 8
    (evicting them); its decode takes one more, evicting A's block 7. A's blocks 0–6 stay cached on the GPU. B's
    32 blocks are stored at 120 ms.
    C (t = 200 ms, A's content) finds A's blocks 0–6 on the GPU (112 tokens) and, from block 7 on, blocks 7–31 on
    the host: 25 blocks (the lookup runs to the prompt's last full block). The load takes 100 + 25 × 65.536 =
    1,738.4 µs on the load link: it lands at 201.7384 ms, when C is admitted with 512 − 1 = 511 tokens computed
    (the last prompt token is always computed), prefills that token 201.7384–221.7384 ms (a pass with prefill
    work: 20 ms; TTFT 21.7384 ms) and decodes to 231.7384 ms. C offers nothing: what it loaded is on the host.
    Over the 3 × 512 = 1,536 prompt tokens looked up: 112 found on the GPU, 400 loaded from the host."""
    res = run_scenario(_scenario(tmp_path, {"capacity_gib": 1}, [(0, 1), (100, 2), (200, 1)]))
    req = res.requests.set_index("request_id")
    assert req.cached_tokens.tolist() == [0, 0, 112]
    assert req.host_cached_tokens.tolist() == [0, 0, 400]
    assert req.host_load_ms[2] == pytest.approx(1.7384, abs=1e-9)
    assert req.ttft_ms[2] == pytest.approx(21.7384, abs=1e-9)
    assert req.finish_s[2] == pytest.approx(0.2317384, abs=1e-12)
    assert req.ttft_ms[0] == pytest.approx(20.0) and req.ttft_ms[1] == pytest.approx(20.0)
    ev = res.events
    stores = ev[ev.kind == "host_store"]
    assert stores.time_s.tolist() == pytest.approx([0.020, 0.120])
    assert stores.num_tokens.tolist() == [512, 512] and stores.request_id.tolist() == [0, 1]
    assert stores.pass_index.tolist() == [0, 2]  # (A's prefill and decode are passes 0 and 1)
    loads = ev[ev.kind.isin(["host_load_start", "host_load_end"])]
    assert loads.time_s.tolist() == pytest.approx([0.200, 0.2017384], abs=1e-12)
    assert loads.num_tokens.tolist() == [400, 400]
    admission = ev[(ev.kind == "admission") & (ev.request_id == 2)]
    assert admission.time_s.tolist() == pytest.approx([0.2017384], abs=1e-12)
    assert admission.num_tokens.tolist() == [1]
    tier = res.summary["kv_offload"]["aggregated"]
    assert tier["capacity_blocks_per_rank"] == (1 << 30) // BLOCK == 512
    assert (tier["queried_tokens"], tier["gpu_hit_tokens"], tier["host_hit_tokens"]) == (1536, 112, 400)
    assert tier["hit_ratio"] == pytest.approx(512 / 1536)
    assert (tier["loads"], tier["blocks_loaded"], tier["blocks_stored"], tier["blocks_evicted"]) == (1, 25, 64, 0)
    assert tier["bytes_loaded"] == 25 * BLOCK and tier["bytes_stored"] == 64 * BLOCK
    duration_ns = 231_738_400
    assert tier["store_link_utilization"] == pytest.approx(2 * (LATENCY_NS + 32 * PER_BLOCK_NS) / duration_ns)
    assert tier["load_link_utilization"] == pytest.approx((LATENCY_NS + 25 * PER_BLOCK_NS) / duration_ns)
    assert res.summary["prefix_cache_hit_ratio"] == pytest.approx(112 / 1536)  # (the GPU's own, as before)
    # Per pass: A's prefill (pass 0) and B's (pass 2) stored 32 blocks each; C's load was started by a plan that
    # ran no pass (C waited alone), so no pass row carries it.
    passes = res.passes.set_index("pass_index")
    assert passes.host_bytes_stored.to_dict() == {0: 32 * BLOCK, 1: 0, 2: 32 * BLOCK, 3: 0, 4: 0, 5: 0}
    assert passes.host_bytes_loaded.sum() == 0


def test_the_host_tier_evicts_a_prefix_from_its_tail(tmp_path):
    """The same three requests with a host tier of 40 blocks (80 MiB = 0.078125 GiB). A stores its 32 blocks;
    when it finishes they become the most recent in reverse order, so its block 0 is the most recent and block
    31 the least. B's 32 blocks need 24 slots: A's blocks 31 … 8 go, and A's 0–7 stay. C finds A's blocks 0–6
    on the GPU (as above) and block 7 on the host (block 8 is gone): it loads 1 block, 100 + 65.536 µs, landing
    at 200.165536 ms, and prefills 512 − 128 = 384 tokens to 220.165536 ms (TTFT 20.165536 ms). It then offers
    blocks 8–31 (past what it loaded), none of them on the host: storing those 24 evicts the 24 least recent,
    A's blocks 7 … 0 (stored, then touched, before B's) and B's 31 … 16 (B finished too: its tail first).
    Stored 32 + 32 + 24 = 88 blocks, evicted 24 + 24 = 48."""
    res = run_scenario(_scenario(tmp_path, {"capacity_gib": 0.078125}, [(0, 1), (100, 2), (200, 1)]))
    req = res.requests.set_index("request_id")
    assert req.cached_tokens.tolist() == [0, 0, 112]
    assert req.host_cached_tokens.tolist() == [0, 0, 16]
    assert req.ttft_ms[2] == pytest.approx(20.165536, abs=1e-9)
    tier = res.summary["kv_offload"]["aggregated"]
    assert tier["capacity_blocks_per_rank"] == 40
    assert (tier["blocks_stored"], tier["blocks_evicted"], tier["blocks_held"], tier["loads"]) == (88, 48, 40, 1)
    stores = res.events[res.events.kind == "host_store"]
    assert stores.num_tokens.tolist() == [512, 512, 24 * 16]


def test_a_pass_that_reuses_blocks_a_copy_still_reads_waits_for_it(tmp_path):
    """vLLM's flush. The link at 0.1 GB/s: a block's bytes take 2,097,152 / 1e8 s = 20.97152 ms, so A's store of 32
    blocks runs 20 → 20 + 0.1 + 671.08864 = 691.18864 ms, while A finishes at 30 ms and frees its blocks. B (100
    ms) takes 32 blocks: A's partial one, the 7 never used, then A's blocks 31 … 8, which A's copy still reads,
    so its pass waits for that copy (vLLM's worker flushes it first): B computes 691.18864 → 711.18864 ms (its
    pass row: 100 ms → 711.18864 ms). B's store runs 711.18864 → 1,382.37728 ms; B decodes to 721.18864 ms.
    C (t = 200 ms) is planned at 711.18864 ms: A's blocks 0–6 on the GPU, 7–31 on the host (landed at 691 ms),
    but its load needs 25 free blocks and B holds 33 of the 40: it waits. When B finishes (721.18864 ms) the
    load takes B's freed blocks, which B's copy still reads: the load starts when that copy lands, at
    1,382.37728 ms, and takes 0.1 + 25 × 20.97152 = 524.388 ms, landing at 1,906.76528 ms; C prefills its last
    token to 1,926.76528 ms: TTFT 1,726.76528 ms."""
    res = run_scenario(_scenario(tmp_path, {"capacity_gib": 1, "link_gb_per_s": 0.1},
                                 [(0, 1), (100, 2), (200, 1)]))
    req = res.requests.set_index("request_id")
    assert req.cached_tokens.tolist() == [0, 0, 112]
    assert req.host_cached_tokens.tolist() == [0, 0, 400]
    assert req.ttft_ms[1] == pytest.approx(611.18864, abs=1e-9)
    assert req.ttft_ms[2] == pytest.approx(1726.76528, abs=1e-9)
    loads = res.events[res.events.kind.isin(["host_load_start", "host_load_end"])]
    assert loads.time_s.tolist() == pytest.approx([1.38237728, 1.90676528], abs=1e-12)
    passes = res.passes
    assert passes.start_s.tolist()[2] == pytest.approx(0.1)
    assert passes.end_s.tolist()[2] == pytest.approx(0.71118864, abs=1e-12)
    assert passes.rank_busy_ms.tolist()[2] == pytest.approx(611.18864, abs=1e-9)  # (the wait, then 20 ms)
    stores = res.events[res.events.kind == "host_store"]
    assert stores.num_tokens.tolist() == [512, 512]


MOONCAKE = {"source": {"type": "trace", "path": "builtin:mooncake/conversation_head2000.jsonl", "format": "mooncake",
                       "block_size": 512},
            "load": {"type": "trace_timestamps"}, "stop": {"requests": 100}}


@pytest.mark.parametrize("traffic, worker", [
    (MOONCAKE, {"parallelism": {"tensor": 4}, "kv_cache": {"capacity": {"type": "fixed", "blocks": 5000},
                                                           "host_offload": {"capacity_gib": 40}}}),
    (SESSIONS, {"kv_cache": {"capacity": {"type": "fixed", "blocks": 1200}, "host_offload": {"capacity_gib": 8}}}),
    (SESSIONS, {"scheduler": {"async_scheduling": True},
                "kv_cache": {"capacity": {"type": "fixed", "blocks": 1200}, "host_offload": {"capacity_gib": 4}}}),
    (SESSIONS, {"kv_cache": {"capacity": {"type": "fixed", "blocks": 1200},
                             "host_offload": {"capacity_gib": 8, "link_gb_per_s": 0.5}}}),
], ids=["mooncake-open-loop", "sessions", "sessions-async-small-tier", "sessions-slow-link"])
def test_runs_of_passes_with_a_host_tier_equal_the_pass_by_pass_run(traffic, worker):
    """Multi-turn loads on a GPU cache small enough to evict (and preempt) and a host tier that finds the evicted
    prefixes (and evicts, and on a slow link makes lookups wait for blocks still landing): Mooncake conversations
    at their timestamps (runs planned ahead through the arrivals) and closed-loop chat sessions (runs applied as
    their passes end). Planned as runs of passes (the default) and pass by pass (``coalesce=False``), every
    request, pass, event and tier figure is the same."""
    data = make_scenario(traffic=traffic, engine={"context_length": 65536 if traffic is MOONCAKE else 16384,
                                                  "workers": {"aggregated": {"timing": {"type": "default"},
                                                                             **worker}}})
    runs, differ = run_both_ways(data)
    assert runs.summary["kv_offload"]["aggregated"]["loads"] > 0
    assert not differ


def test_runs_of_passes_with_flushes_equal_the_pass_by_pass_run():
    """A slow link (0.2 GB/s, 5 ms a copy) and short outputs: requests finish while their copies to the host are
    on their way, and later passes take the blocks those copies read, so passes wait for them (vLLM's flush).
    Runs of passes end before such a pass and leave it to the rank's own plan; every table is the same as pass
    by pass (``tools/fuzz_host_offload.py`` seed 26, which found a flush priced inside a run)."""
    data = make_scenario(
        traffic={"source": {"type": "synthetic", "input_tokens": {"distribution": "uniform", "min": 50, "max": 2000},
                            "output_tokens": {"distribution": "uniform", "min": 1, "max": 200},
                            "shared_prefix": {"tokens": 200, "groups": 8}},
                 "load": {"type": "gamma", "requests_per_second": 60, "burstiness": 0.3}, "stop": {"requests": 60}},
        engine={"context_length": 4800, "workers": {"aggregated": {
            "parallelism": {"attention_data": 2},
            "scheduler": {"max_batched_tokens": 2048, "max_sequences": 8, "long_prefill_token_threshold": 256},
            "kv_cache": {"capacity": {"type": "fixed", "blocks": 300},
                         "host_offload": {"capacity_gib": 100, "link_gb_per_s": 0.2, "latency_us": 5000}},
            "timing": {"type": "default"}}}})
    runs, differ = run_both_ways(data)
    assert (runs.passes.rank_busy_ms > 100).any()  # (a pass that waited for a copy: decodes take ~7 ms)
    assert not differ


def _open_loop(inputs: tuple[int, int], outputs: tuple[int, int], prefix: int, rate: int, requests: int,
               context: int, worker: dict) -> dict:
    """Synthetic prompts of ``inputs`` tokens (uniform, over six shared ``prefix``-token prefixes) and ``outputs``
    tokens out, arriving Poisson at ``rate`` a second, on one worker (``worker`` over ``make_scenario``'s)."""
    return make_scenario(
        traffic={"source": {"type": "synthetic",
                            "input_tokens": {"distribution": "uniform", "min": inputs[0], "max": inputs[1]},
                            "output_tokens": {"distribution": "uniform", "min": outputs[0], "max": outputs[1]},
                            "shared_prefix": {"tokens": prefix, "groups": 6}},
                 "load": {"type": "poisson", "requests_per_second": rate}, "stop": {"requests": requests}},
        engine={"context_length": context, "workers": {"aggregated": worker}})


def _tier_worker(sequences: int, blocks: int, gib: float, link_gb_per_s: float) -> dict:
    """A worker of ``sequences`` slots and ``blocks`` GPU KV blocks with a host tier of ``gib`` GiB on a
    ``link_gb_per_s`` GB/s link, priced by the default timing model."""
    return {"scheduler": {"max_sequences": sequences},
            "kv_cache": {"capacity": {"type": "fixed", "blocks": blocks},
                         "host_offload": {"capacity_gib": gib, "link_gb_per_s": link_gb_per_s}},
            "timing": {"type": "default"}}


def test_runs_that_start_with_a_pass_storing_to_the_host_equal_the_pass_by_pass_run(monkeypatch):
    """Short whole prompts arriving open loop, over a GPU cache small enough to evict and a queue that builds up:
    the pass that admits a prompt stores its blocks to the host, and a run of passes may start with it, queueing
    those copies as that pass ends (``VllmCpuOffload.carried_by_run``), as the rank does pass by pass. Every
    request, pass, event and tier figure is the same as pass by pass; runs did start with such passes."""
    from simmodel.offload.vllm_connector import VllmCpuOffload

    carried = []
    decide = VllmCpuOffload.carried_by_run

    def noted(self, plan):
        carried.append(decide(self, plan))
        return carried[-1]

    monkeypatch.setattr(VllmCpuOffload, "carried_by_run", noted)
    data = _open_loop((100, 600), (5, 80), 256, 40, 150, 4096, _tier_worker(16, 400, 2, 4))
    runs, differ = run_both_ways(data)
    assert True in carried
    assert runs.summary["kv_offload"]["aggregated"]["loads"] > 0
    assert not differ


def test_runs_through_a_landed_load_that_waits_for_blocks_equal_the_pass_by_pass_run(monkeypatch):
    """Long prompts (2,500–6,000 tokens) over six shared 2,048-token prefixes, arriving slowly, on 1,000 GPU blocks:
    a prefix the GPU evicted is loaded from the host, and once it lands the rest of the prompt may not fit beside
    the running decodes. The request then waits, its prefix on the GPU, for a finish to free blocks, with nothing
    else waiting; a run of decode passes goes on meanwhile and ends at the decision after the first finish, whose
    plan admits it, as the rank's own plans do pass by pass. Every table is the same as pass by pass; such runs
    did happen (and counting the landed load as nothing waiting, which lets the run go past that finish, makes
    the tables differ)."""
    from simmodel.engine.planner.running import RunningRequests

    through = []
    gather = RunningRequests.gather

    def noted(self):
        landed = any(rank.scheduler.handoffs and not rank.scheduler.waiting for rank in self.ranks)
        taken = gather(self)
        through.append(taken and landed)
        return taken

    monkeypatch.setattr(RunningRequests, "gather", noted)
    data = _open_loop((2500, 6000), (100, 400), 2048, 5, 100, 8192, _tier_worker(64, 1000, 8, 8))
    runs, differ = run_both_ways(data)
    assert True in through
    assert not differ


def test_a_store_that_evicts_what_a_waiting_request_found_is_not_carried_by_a_run():
    """A tiny host tier (0.1 GiB: 51 blocks of 2 MiB) on a very slow link (2 MB/s), 48 GPU blocks: offers to the
    tier are refused while its blocks are still landing and made again at later passes. A decode pass's plan that
    makes one again stores 13 blocks and evicts 13, one of them the host block a waiting request had just found
    (its load could not start for want of GPU blocks). Pass by pass, the next plan looks that request up again,
    finds nothing and admits it as a plain prefill; a run that started with that pass would admit nothing at its
    next decision (its decisions look nothing up), so a run starts with a storing pass only while nothing waits.
    Every table is the same as pass by pass (found by a review's fuzzer: two requests finished 28 s apart)."""
    data = _open_loop((1, 601), (1, 4), 16, 100, 175, 768, {
        "scheduler": {"max_sequences": 32},
        "kv_cache": {"capacity": {"type": "fixed", "blocks": 48},
                     "host_offload": {"capacity_gib": 0.1, "link_gb_per_s": 0.002, "latency_us": 100}},
        "timing": {"type": "fixed", "prefill_ms": 1, "decode_ms": 1}})
    runs, differ = run_both_ways(data)
    assert runs.summary["kv_offload"]["aggregated"]["blocks_evicted"] > 0
    assert not differ


def test_a_prefill_pool_keeps_its_tier_and_the_requests_show_its_hits(tmp_path):
    """Disaggregated, the tier on the prefill workers: the same three requests, each prefill leg a one-token request
    that holds its 32 prompt blocks (its one token is sampled by the prefill pass, which computes no 33rd block)
    until its KV has left. B then takes the 8 never-used blocks and 24 of A's (evicting A's blocks 31 … 8), so C
    finds A's blocks 0–7 on the prefill GPU (128 tokens) and 8–31 on the host (24 blocks, 384 tokens). The request
    rows show the prefill leg's figures."""
    data = _scenario(tmp_path, {"capacity_gib": 1}, [(0, 1), (100, 2), (200, 1)])
    role = data["engine"]["workers"].pop("aggregated")
    decode = {key: value for key, value in role.items() if key != "kv_cache"}
    data["engine"]["mode"] = "disaggregated"
    data["engine"]["workers"] = {"prefill": role, "decode": decode}
    res = run_scenario(data)
    req = res.requests.set_index("request_id")
    assert req.cached_tokens.tolist() == [0, 0, 128]
    assert req.host_cached_tokens.tolist() == [0, 0, 384]
    assert req.host_load_ms[2] == pytest.approx((LATENCY_NS + 24 * PER_BLOCK_NS) / 1e6, abs=1e-9)
    tier = res.summary["kv_offload"]["prefill"]
    assert (tier["loads"], tier["blocks_loaded"], tier["blocks_stored"]) == (1, 24, 64)
    assert "decode" not in res.summary["kv_offload"]
