"""TensorRT-LLM's passes planned in runs (vLLM's pass planner, the starts made by TensorRT-LLM's own capacity
policy) must change nothing but speed: each scenario runs pass by pass (``coalesce=False``) and in runs, and the
summary (but wall time), every request row, pass row and event must be identical, and so must every KV pool
once the run is over. The scenarios reach each policy under loose and tight KV (starts held back by the blocks
to completion, ``max_utilization``'s pauses), block reuse and counted blocks, attention DP, two workers, a
closed loop, context-length stops, chunk units and P/D handoffs (a decode pool short of KV)."""

from __future__ import annotations

import copy

import pytest
from factories import _merge, make_scenario
from test_decode_runs import SYNTHETIC, assert_same, pool_state, run


def trtllm(**fields) -> dict:
    data = make_scenario(traffic=copy.deepcopy(SYNTHETIC))
    data["traffic"]["stop"] = {"requests": 100}
    role = data["engine"]["workers"]["aggregated"]
    role["scheduler"].pop("async_scheduling")  # (vLLM's field)
    role["kv_cache"].pop("block_size", None)
    data["engine"]["backend"] = "trtllm"
    _merge(role, copy.deepcopy(fields))
    return data


TIGHT = {"capacity": {"type": "fixed", "blocks": 150}}
SCENARIOS = {
    "guaranteed": trtllm(timing={"type": "default"}),
    "guaranteed-tight-reuse": trtllm(timing={"type": "polynomial"}, kv_cache={"prefix_caching": True, **TIGHT}),
    "guaranteed-tight-counted": trtllm(timing={"type": "polynomial"}, kv_cache={"prefix_caching": False, **TIGHT}),
    "max-utilization-tight": trtllm(timing={"type": "polynomial"}, kv_cache=TIGHT,
                                    scheduler={"capacity_policy": "max_utilization"}),
    "max-utilization-tight-counted": trtllm(kv_cache={"prefix_caching": False, **TIGHT},
                                            scheduler={"capacity_policy": "max_utilization"}),
    "static-batch": trtllm(scheduler={"capacity_policy": "static_batch", "max_sequences": 16}),
    "clients-leave-max-tokens-unset": trtllm(timing={"type": "polynomial"}, kv_cache=TIGHT,
                                             scheduler={"client_max_tokens": "context_length"}),
    "dp2-small-budget": trtllm(timing={"type": "default"}, parallelism={"attention_data": 2},
                               scheduler={"max_batched_tokens": 256, "chunk_unit": 64}),
    "two-workers-seqs8": trtllm(parallelism={"replicas": 2}, scheduler={"max_sequences": 8}),
}
SCENARIOS["closed-loop"] = copy.deepcopy(SCENARIOS["guaranteed-tight-reuse"])
SCENARIOS["closed-loop"]["traffic"]["load"] = {"type": "concurrency", "concurrency": 6}
SCENARIOS["context-length-stops"] = copy.deepcopy(SCENARIOS["guaranteed"])
SCENARIOS["context-length-stops"]["engine"]["context_length"] = 700
for _name, _decode in (("disaggregated", {}), ("disaggregated-tight-decode", {"kv_cache": TIGHT})):
    SCENARIOS[_name] = copy.deepcopy(SCENARIOS["guaranteed"])
    _role = SCENARIOS[_name]["engine"]["workers"].pop("aggregated")
    SCENARIOS[_name]["engine"].update(
        mode="disaggregated", kv_transfer={"bandwidth_gb_per_second": 20, "bytes_per_token": 131072},
        workers={"prefill": {**copy.deepcopy(_role), "parallelism": {"replicas": 2}},
                 "decode": _merge(copy.deepcopy(_role), copy.deepcopy(_decode))})
SCENARIOS["shared-prefix"] = copy.deepcopy(SCENARIOS["guaranteed-tight-reuse"])
SCENARIOS["shared-prefix"]["traffic"]["source"]["shared_prefix"] = {"tokens": 128, "groups": 2}


@pytest.mark.parametrize("name", SCENARIOS)
def test_trtllm_runs_give_identical_outputs(name):
    data = SCENARIOS[name]
    sim_a, by_pass = run(data, coalesce=False)
    sim_b, coalesced = run(data, coalesce=True)
    assert_same(by_pass, coalesced)
    assert pool_state(sim_a) == pool_state(sim_b)


def test_the_scenarios_reach_what_they_are_for():
    # (checked pass by pass: pauses under max_utilization with tight KV, counted as preemptions too; none under
    # guaranteed_no_evict, whose tight KV makes requests wait instead; every request completes)
    tight, guaranteed = (run(SCENARIOS[name], coalesce=False)[1].summary
                         for name in ("max-utilization-tight", "guaranteed-tight-reuse"))
    assert tight["num_pauses"] == tight["num_preemptions"] > 0
    assert guaranteed["num_pauses"] == 0 == guaranteed["num_preemptions"]
    assert guaranteed["num_requests_waiting_peak"] > 30 and guaranteed["completed_requests"] == 100
    # (clients leaving max_tokens unset: a start holds ceil(4096 / 32) = 128 of the 150 blocks to completion, so one
    # request runs at a time)
    passes = run(SCENARIOS["clients-leave-max-tokens-unset"], coalesce=False)[1].passes
    assert (passes["num_prefill_seqs"] + passes["num_decode_seqs"]).max() == 1
