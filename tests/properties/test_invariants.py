"""Invariants over randomly generated small scenarios (fixed, polynomial and roofline timing; tight and loose KV;
DP 1–4; every load type, a real trace among them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from factories import make_scenario
from hypothesis import given, settings
from hypothesis import strategies as st

from simmodel import Simulation
from simmodel.config.load import parse_scenario


@st.composite
def scenarios(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    block = draw(st.sampled_from([1, 4, 16]))
    context = draw(st.integers(64, 512))
    blocks = draw(st.integers(-(-context // block), 4 * -(-context // block)))
    max_seqs = draw(st.integers(1, 8))
    budget = draw(st.integers(max(max_seqs, 8), 256))
    load = draw(st.sampled_from([
        {"type": "concurrency", "concurrency": draw(st.integers(1, 6))},
        {"type": "poisson", "requests_per_second": draw(st.floats(1, 200)),
         "max_concurrency": draw(st.one_of(st.none(), st.integers(1, 4)))},
        {"type": "constant_rate", "requests_per_second": draw(st.floats(1, 200))},
        {"type": "gamma", "requests_per_second": draw(st.floats(1, 200)), "burstiness": draw(st.floats(0.1, 5))},
        {"type": "trace_timestamps", "speedup": draw(st.sampled_from([1.0, 50.0]))},
    ]))
    source = draw(st.sampled_from([
        {"type": "synthetic", "input_tokens": {"distribution": "uniform", "min": 1, "max": context + 20},
         "output_tokens": {"distribution": "uniform", "min": 1, "max": 60}},
        {"type": "shared_prefix", "num_groups": draw(st.integers(1, 3)), "prompts_per_group": draw(st.integers(1, 4)),
         "system_prompt_tokens": {"distribution": "uniform", "min": 1, "max": context // 2},
         "question_tokens": {"distribution": "uniform", "min": 1, "max": context // 2 + 20},
         "output_tokens": {"distribution": "uniform", "min": 1, "max": 60}},
        {"type": "sessions", "turns": {"distribution": "uniform", "min": 1, "max": 4},
         "new_input_tokens_per_turn": {"distribution": "uniform", "min": 1, "max": context // 3},
         "output_tokens_per_turn": {"distribution": "uniform", "min": 1, "max": 40},
         "inter_turn_delay_ms": draw(st.sampled_from([0, 5])), "shared_prefix_ratio": draw(st.floats(0, 1))},
    ]))
    if load["type"] == "trace_timestamps":  # a real trace's first rows (long prompts: many are refused)
        source = {"type": "trace", "format": "azure", "path": "builtin:azure/code_2023.csv"}
    data = make_scenario(
        traffic={"source": source, "load": load, "stop": {"requests": draw(st.integers(1, 25))}},
        engine={"seed": seed, "context_length": context, "workers": {"aggregated": {
            "parallelism": {"attention_data": draw(st.integers(1, 4)), "replicas": draw(st.integers(1, 2))},
            "scheduler": {"max_sequences": max_seqs, "max_batched_tokens": budget,
                          "long_prefill_token_threshold": draw(st.sampled_from([0, 0, 16]))},
            "kv_cache": {"block_size": block, "capacity": {"type": "fixed", "blocks": blocks}},
            "timing": {"type": "fixed", "prefill_ms": draw(st.sampled_from([0, 5, 20])), "decode_ms": 3}}}})
    data["traffic"]["source"] = source  # not merged into the synthetic defaults
    if source["type"] == "sessions":
        data["traffic"]["load"].pop("max_concurrency", None)  # refused with sessions (a rule of its own)
    return data


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_every_request_ends_once_and_resources_come_back(data):
    sim = Simulation(parse_scenario(data, Path(".")))
    res = sim.run()
    req, passes = res.requests, res.passes
    role = data["engine"]["workers"]["aggregated"]
    context = data["engine"]["context_length"]
    assert len(req) == data["traffic"]["stop"]["requests"]
    served = req[req.status == "completed"]
    assert set(req.status) <= {"completed", "rejected"}
    assert (req.status == "rejected").tolist() == (req.input_tokens >= context).tolist()
    # exactly its output tokens, or fewer when the context limit stops it
    expected = np.minimum(served.requested_output_tokens, context - served.input_tokens)
    assert served.output_tokens.tolist() == expected.tolist()
    assert (served.arrival_s <= served.first_admit_s).all()
    assert (served.first_admit_s <= served.first_token_s).all() and (served.first_token_s <= served.finish_s).all()
    assert (passes.num_scheduled_tokens <= role["scheduler"]["max_batched_tokens"]).all()
    assert (passes.num_prefill_seqs + passes.num_decode_seqs <= role["scheduler"]["max_sequences"]).all()
    assert (passes.kv_blocks_used <= role["kv_cache"]["capacity"]["blocks"]).all()
    finishes = res.events[res.events.kind == "finish"].request_id
    assert sorted(finishes) == sorted(served.request_id)
    for worker in sim.workers:
        for rank in worker.ranks:
            assert rank.pool.num_free_blocks == rank.pool.num_blocks and not rank.running and not rank.waiting
    again = Simulation(parse_scenario(data, Path("."))).run()  # the same seed: the same outputs
    for name in ("requests", "passes", "events"):
        assert getattr(again, name).equals(getattr(res, name)), name


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_unlimited_capacity_means_no_queueing(seed, concurrency):
    """Concurrency below max_sequences, ample KV and budget: every request is admitted on arrival."""
    data = make_scenario(traffic={"source": {"input_tokens": {"distribution": "uniform", "min": 1, "max": 500}},
                                  "load": {"type": "concurrency", "concurrency": concurrency},
                                  "stop": {"requests": 12}},
                         engine={"seed": seed})
    res = Simulation(parse_scenario(data, Path("."))).run()
    assert (res.requests.queue_ms == 0).all()


def _disaggregated(seed: int, draw) -> dict:
    """Random 1–2 prefill and decode workers of 1–2 ranks, tight KV on either side, shared or free links."""
    context = draw(st.integers(64, 400))
    role = lambda: {  # noqa: E731
        "parallelism": {"replicas": draw(st.integers(1, 2)), "attention_data": draw(st.integers(1, 2))},
        "scheduler": {"max_sequences": draw(st.integers(1, 6)), "max_batched_tokens": draw(st.integers(8, 256)),
                      "async_scheduling": draw(st.booleans())},
        "kv_cache": {"block_size": 16, "capacity": {"type": "fixed",
                                                     "blocks": draw(st.integers(-(-context // 16), 60))}},
        "timing": {"type": "fixed", "prefill_ms": draw(st.sampled_from([0, 7, 20])), "decode_ms": 3}}
    scenario = make_scenario(
        traffic={"source": {"input_tokens": {"distribution": "uniform", "min": 1, "max": context - 1},
                            "output_tokens": {"distribution": "uniform", "min": 1, "max": 30}},
                 "load": draw(st.sampled_from([{"type": "poisson", "requests_per_second": 50},
                                               {"type": "concurrency", "concurrency": 4}])),
                 "stop": {"requests": draw(st.integers(1, 20))}},
        engine={"seed": seed, "context_length": context, "mode": "disaggregated",
                # None: transfers take no time (a handoff can land between two passes of the same instant)
                "kv_transfer": {"bandwidth_gb_per_second": draw(st.one_of(st.none(), st.floats(0.01, 100))),
                                "bytes_per_token": 131072,
                                "contention": draw(st.sampled_from(["none", "shared_link"]))},
                "workers": {"prefill": role(), "decode": role()}})
    del scenario["engine"]["workers"]["aggregated"]
    return scenario


def _drains_without_loss(scenario: dict) -> None:
    """Every request completes exactly once with its tokens, and every KV block comes back on both sides."""
    context = scenario["engine"]["context_length"]
    sim = Simulation(parse_scenario(scenario, Path(".")))
    res = sim.run()
    req = res.requests
    assert (req.status == "completed").all()
    expected = np.minimum(req.requested_output_tokens, context - req.input_tokens)
    assert req.output_tokens.tolist() == expected.tolist()
    assert (req.prefill_done_s <= req.transfer_start_s).all() and (req.transfer_end_s <= req.first_token_s).all()
    assert res.summary["num_kv_transfers"] == len(req)
    for worker in sim.workers:
        for rank in worker.ranks:
            assert rank.pool.num_free_blocks == rank.pool.num_blocks and not rank.has_requests()


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.data())
def test_disaggregated_runs_drain_without_loss(seed, data):
    """Random P/D deployments (``_disaggregated``) hand every request off once and leak no block."""
    _drains_without_loss(_disaggregated(seed, data.draw))


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.data())
def test_handoffs_through_a_shared_store_drain_without_loss(seed, data):
    """The same deployments handing off through the prefill role's shared store (``kv_transfer.via: storage``),
    slow or fast, with a host tier that holds a prompt: every request handed off once, no block leaked (a
    prefill rank frees a leg's blocks once its write ends, before or after the decode rank reads)."""
    draw = data.draw
    scenario = _disaggregated(seed, draw)
    engine = scenario["engine"]
    engine["kv_transfer"] = {"via": "storage", "timing_mode": draw(st.sampled_from(["full_prompt",
                                                                                    "destination_missing"]))}
    speed = draw(st.sampled_from([0.05, 2.0, 50.0]))
    engine["workers"]["prefill"]["kv_cache"]["host_offload"] = {
        "capacity_gib": 0.05, "storage": {"read_gb_per_s": speed, "write_gb_per_s": speed, "shared": True}}
    _drains_without_loss(scenario)


@st.composite
def coalescing_scenarios(draw):
    """``scenarios`` with prefix caching sometimes on and a fixed, polynomial or roofline timing."""
    data = draw(scenarios())
    role = data["engine"]["workers"]["aggregated"]
    role["kv_cache"]["prefix_caching"] = draw(st.booleans())
    role["scheduler"]["async_scheduling"] = draw(st.booleans())
    role["timing"] = draw(st.sampled_from([role["timing"], {"type": "polynomial"}, {"type": "default"}]))
    if data["traffic"]["source"]["type"] != "trace" and draw(st.booleans()):  # a staged load instead
        stages = [draw(st.sampled_from([{"requests_per_second": draw(st.floats(5, 200))},
                                        {"concurrency": draw(st.integers(1, 6))}]))
                  | draw(st.sampled_from([{"duration_s": draw(st.floats(0.01, 0.3))},
                                          {"requests": draw(st.integers(1, 8))},
                                          {"duration_s": draw(st.floats(0.01, 0.3)), "requests": draw(st.integers(1, 8))}]))
                  for _ in range(draw(st.integers(1, 3)))]
        arrivals = draw(st.sampled_from(["constant", "poisson", "gamma", "fixed_count"]))
        if arrivals == "fixed_count":
            for stage in stages:
                stage.setdefault("duration_s", 0.1)
        data["traffic"]["load"] = {"type": "stages", "stages": stages, "arrivals": arrivals}
        if len(stages) > 1:
            data["traffic"]["load"] |= {"drain": draw(st.booleans()), "pause_s": draw(st.sampled_from([0, 0.02]))}
    if data["traffic"]["source"]["type"] == "synthetic" and draw(st.booleans()):
        data["traffic"]["source"]["shared_prefix"] = {"tokens": draw(st.integers(1, 64)), "groups": 2}
    return data


@settings(max_examples=60, deadline=None)
@given(coalescing_scenarios())
def test_coalesced_decode_runs_change_nothing(data):
    """Every output of a run with coalesced decode runs equals the pass-by-pass run's."""
    results = [Simulation(parse_scenario(data, Path(".")), coalesce=c).run() for c in (False, True)]
    a, b = ({k: v for k, v in r.summary.items() if k != "wall_time_s"} for r in results)
    assert a == b
    for name in ("requests", "passes", "events"):
        assert getattr(results[0], name).equals(getattr(results[1], name)), name
