"""Stepping through the SimPy model from Python, and the real traces through the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import SHARED_TRACES, make_scenario

from simmodel import Simulation
from simmodel.config.load import parse_scenario

ROOT = Path(__file__).resolve().parents[1]


def test_step_pause_inspect_resume():
    """Two 100→5 requests, concurrency 2: one 20 ms prefill pass for both, then 10 ms decodes."""
    sim = Simulation(parse_scenario(make_scenario(traffic={"load": {"concurrency": 2}, "stop": {"requests": 2}}),
                                    Path(".")))
    assert sim.step() and sim.now == 0.0
    sim.run(until=0.015)  # inside the first pass
    rank = sim.workers[0].ranks[0]
    assert [r.request_id for r in rank.running] == [0, 1] and not rank.waiting
    assert rank.pool.num_used_blocks == 2 * 7  # cdiv(100, 16) blocks each
    kinds = sim.events["kind"].tolist()
    assert kinds.count("admission") == 2 and "first_token" not in kinds
    assert sim.now == 0.015
    results = sim.run()
    assert results.summary["completed_requests"] == 2
    assert results.requests.e2e_ms.tolist() == pytest.approx([60, 60])
    assert rank.pool.num_free_blocks == rank.pool.num_blocks
    assert not sim.step()


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/traces not present")
@pytest.mark.parametrize("scenario, requests", [
    ("scenarios/azure-conv-trace.yaml", 300),
    ("scenarios/mooncake-conversation.yaml", 100),
    ("scenarios/disagg-llama70b-h200.yaml", 100),
    ("scenarios/mooncake-prefix-caching.yaml", 200),
])
def test_real_trace_heads_run_to_completion(scenario, requests):
    sim = Simulation.from_yaml(ROOT / scenario, overrides=[f"traffic.stop.requests={requests}"])
    results = sim.run()
    s = results.summary
    assert s["num_requests"] == requests
    assert s["completed_requests"] + s["rejected_requests"] == requests
    assert results.requests.output_tokens[results.requests.status == "completed"].gt(0).all()
    for worker in sim.workers:
        for rank in worker.ranks:
            assert rank.pool.num_free_blocks == rank.pool.num_blocks
