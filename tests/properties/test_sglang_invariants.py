"""Invariants of the SGLang backend over randomly generated small scenarios: aggregated (DP 1–3, FCFS or
LPM, prefill/decode interval, mixed chunks, overlap host loop, frontend stages) and disaggregated
(destination-first), tight and loose KV, pages of 1 to 64 tokens, every load type."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from factories import make_sglang_scenario
from hypothesis import given, settings
from hypothesis import strategies as st

from simmodel import Simulation
from simmodel.config.load import parse_scenario


def _load(draw):
    stage = st.sampled_from([{"concurrency": draw(st.integers(1, 4))},
                             {"requests_per_second": draw(st.floats(1, 300))}])
    return draw(st.sampled_from([
        {"type": "concurrency", "concurrency": draw(st.integers(1, 6))},
        {"type": "poisson", "requests_per_second": draw(st.floats(1, 300))},
        {"type": "constant_rate", "requests_per_second": draw(st.floats(1, 300))},
        {"type": "stages", "arrivals": "constant",  # (a closed stage's last finish starts the next stage)
         "stages": [draw(stage) | {"requests": draw(st.integers(1, 8))} for _ in range(draw(st.integers(2, 3)))]},
    ]))


@st.composite
def scenarios(draw):
    context = draw(st.integers(64, 600))
    disaggregated = draw(st.booleans())
    timing = {"type": "fixed", "prefill_ms": draw(st.sampled_from([0, 5, 20])), "decode_ms": 3}
    traffic = {"source": {"input_tokens": {"distribution": "uniform", "min": 1, "max": context + 20},
                          "output_tokens": {"distribution": "uniform", "min": 1, "max": 60}},
               "load": _load(draw), "stop": {"requests": draw(st.integers(1, 25))}}
    host_loop = draw(st.booleans())
    front = {"host_loop": host_loop}
    if host_loop and draw(st.booleans()):
        front["frontend"] = {"stages": [{"workers": draw(st.integers(1, 3)), "service_ms": draw(st.sampled_from([0, 2]))}]}
    page = draw(st.sampled_from([1, 1, 16, 64]))
    chunk = draw(st.sampled_from([16, 64, 8192]))

    def kv(tokens: int) -> dict:  # (capacity blocks are pages)
        return {"block_size": page, "capacity": {"type": "fixed", "blocks": -(-tokens // page)}}
    if disaggregated:
        decode_kv = draw(st.integers(-(-(context - 1) // page) * page + 512, 3 * (context + 511)))
        engine = {"mode": "disaggregated", "context_length": context,
                  "kv_transfer": {"latency_ms": draw(st.sampled_from([0, 1])),
                                  "contention": draw(st.sampled_from(["none", "shared_link"]))},
                  "workers": {
                      "prefill": {**front, "timing": timing,
                                  "parallelism": {"replicas": draw(st.integers(1, 2))},
                                  "scheduler": ({"max_batched_tokens": max(chunk, page)} if host_loop
                                                else {"chunked_prefill_size": max(chunk, page)}) | {
                                      "max_sequences": draw(st.integers(1, 4))},
                                  "kv_cache": kv(draw(st.integers(context + page - 1, 4 * context + page)))},
                      "decode": {"timing": timing,
                                 "parallelism": {"attention_data": draw(st.integers(1, 2))},
                                 "scheduler": {"max_sequences": draw(st.integers(1, 8))},
                                 "kv_cache": kv(decode_kv)}}}
    else:
        dp = draw(st.integers(1, 4))
        scheduler = {"max_sequences": draw(st.integers(1, 8)),
                     "schedule_policy": draw(st.sampled_from(["fcfs", "lpm"])),
                     "prefill_decode_interval": draw(st.sampled_from([0, 0, 1, 3]))}
        chunk = max(chunk, dp * page)  # (a rank's share holds a page)
        scheduler |= {"max_batched_tokens": chunk} if host_loop else {"chunked_prefill_size": chunk}
        if not host_loop and not scheduler["prefill_decode_interval"] and draw(st.booleans()):
            scheduler["enable_mixed_chunk"] = True
        engine = {"context_length": context, "workers": {"aggregated": {
            **front, "timing": timing, "parallelism": {"attention_data": dp, "replicas": draw(st.integers(1, 2))},
            "scheduler": scheduler,
            "kv_cache": kv(draw(st.integers(context + page - 1, 4 * context + page)))}}}
    engine["seed"] = draw(st.integers(0, 2**32 - 1))
    if draw(st.integers(0, 4)) == 0:  # a real trace's first rows at their own times (long prompts: many refused)
        traffic["source"] = {"type": "trace", "format": "azure", "path": "builtin:azure/conv_2023.csv"}
        traffic["load"] = {"type": "trace_timestamps", "speedup": draw(st.sampled_from([1.0, 50.0]))}
    data = make_sglang_scenario(traffic=traffic)
    if traffic["load"]["type"] == "stages":  # (a staged load stops after its stages' requests)
        data["traffic"]["stop"] = {}
    data["engine"] = {"model": data["engine"]["model"], "hardware": data["engine"]["hardware"],
                      "backend": "sglang", **engine}
    return data


def _drained(sim: Simulation) -> None:
    for worker in sim.workers:
        for rank in worker.ranks:
            s = rank.scheduler
            s.cache.check()
            assert s.cache.allocated_tokens == 0
            assert s.cache.num_evictable == s.cache.cached_tokens  # nothing locked
            assert not (s.running or s.waiting or s.chunked or s.prealloc or s.transferring or s.handoffs)


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_every_sglang_request_ends_once_and_kv_comes_back(data):
    sim = Simulation(parse_scenario(data, Path(".")))
    res = sim.run()
    req, passes = res.requests, res.passes
    context = data["engine"]["context_length"]
    roles = data["engine"]["workers"]
    # SGLang's max_req_len = min(context, KV tokens) − 1: a prompt at or above it is refused (on any role),
    # and max_new_tokens is clipped to max_req_len − prompt − 1 and to KV tokens − prompt in whole pages − a
    # page − 1 (at least 1) where the request decodes.
    page = next(iter(roles.values()))["kv_cache"]["block_size"]
    tokens = {name: r["kv_cache"]["capacity"]["blocks"] * page for name, r in roles.items()}
    max_req_len = {name: min(context, tokens[name]) - 1 for name in roles}
    load = data["traffic"]["load"]
    expected = (sum(stage["requests"] for stage in load["stages"]) if load["type"] == "stages"
                else data["traffic"]["stop"]["requests"])
    assert len(req) == expected
    assert set(req.status) <= {"completed", "rejected"}
    assert (req.status == "rejected").tolist() == (req.input_tokens >= min(max_req_len.values())).tolist()
    served = req[req.status == "completed"]
    decoder = "decode" if "decode" in roles else "aggregated"
    paged = -(-served.input_tokens // page) * page
    limit = np.maximum(1, np.minimum(np.minimum(served.requested_output_tokens,
                                                max_req_len[decoder] - 1 - served.input_tokens),
                                     tokens[decoder] - paged - page - 1))
    assert served.output_tokens.tolist() == limit.tolist()
    assert (served.arrival_s <= served.first_admit_s).all()
    assert (served.first_admit_s <= served.first_token_s).all() and (served.first_token_s <= served.finish_s).all()
    # passes never mix prefill and decode (but with mixed chunks), and respect the sequence limit
    for name, role in data["engine"]["workers"].items():
        mine = passes[passes.role == name]
        if not role.get("scheduler", {}).get("enable_mixed_chunk"):
            assert ((mine.num_prefill_seqs == 0) | (mine.num_decode_seqs == 0)).all()
        assert (mine.num_prefill_seqs + mine.num_decode_seqs <= role["scheduler"]["max_sequences"]).all()
        assert (mine.kv_blocks_used <= role["kv_cache"]["capacity"]["blocks"]).all()
    _drained(sim)
    again = Simulation(parse_scenario(data, Path("."))).run()
    assert again.requests.equals(res.requests) and again.passes.equals(res.passes)


def _tree(cache) -> list:
    out, stack = [], [cache.root]
    while stack:
        node = stack.pop()
        out.append((node.block, node.start, node.end, node.lock_ref, node.last_access, node.joined, node.sealed))
        stack.extend(child for _, child in sorted(node.children.items(), key=repr))
    return out


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_runs_of_decode_passes_change_nothing(data):
    """SGLang's runs of decode passes (``engine.planner.sglang_run``) give the pass-by-pass run's outputs, its
    inter-token intervals and, at the end, its radix trees and ratios."""
    sims = [Simulation(parse_scenario(data, Path(".")), coalesce=c) for c in (False, True)]
    results = [sim.run() for sim in sims]
    a, b = ({k: v for k, v in r.summary.items() if k != "wall_time_s"} for r in results)
    assert a == b
    for name in ("requests", "passes", "events"):
        assert getattr(results[0], name).equals(getattr(results[1], name)), name
    ra, rb = (sim.recorder for sim in sims)
    assert (list(ra.itl_values), list(ra.itl_counts)) == (list(rb.itl_values), list(rb.itl_counts))
    states = [[(_tree(rank.scheduler.cache), rank.scheduler.new_token_ratio, rank.num_passes)
               for worker in sim.workers for rank in worker.ranks] for sim in sims]
    assert states[0] == states[1]
