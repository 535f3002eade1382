"""Stepping through the SimPy model from Python, and the real traces through the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_scenario

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


def test_results_are_the_run_as_it_was_when_taken():
    """Same two requests as above: at 15 ms both are admitted and neither has a token; the tables of
    that moment stay so after the run goes on (they are built when first read)."""
    sim = Simulation(parse_scenario(make_scenario(traffic={"load": {"concurrency": 2}, "stop": {"requests": 2}}),
                                    Path(".")))
    early = sim.run(until=0.015)
    final = sim.run()
    assert early.requests.status.tolist() == ["incomplete", "incomplete"]
    assert early.requests.first_token_s.isna().all()
    assert len(early.passes) == 0 and early.events["kind"].tolist().count("admission") == 2
    assert "finish" not in early.events["kind"].tolist()
    assert final.requests.status.tolist() == ["completed", "completed"]
    assert len(final.passes) == 5  # 20 ms prefill pass (2 tokens' outputs begin), then 4 decodes to 5 outputs


def test_a_run_that_writes_no_tables_does_not_load_pandas(tmp_path):
    """``simmodel run`` without --output-dir needs only the summary: pandas (a third of a second to import)
    stays unloaded."""
    import subprocess
    import sys

    import yaml

    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(make_scenario(traffic={"load": {"concurrency": 2}, "stop": {"requests": 2}})))
    code = ("import sys\nfrom simmodel.cli import cli\ncli.main(['run', '-c', sys.argv[1], '--format', 'json'])\n"
            "print('pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code, str(scenario)], capture_output=True, text=True, check=True)
    assert out.stdout.rstrip().endswith("False")


def test_results_pickle_with_their_rows():
    """A search's worker process sends results back pickled: the tables read the same on the other side."""
    import pickle

    sim = Simulation(parse_scenario(make_scenario(traffic={"load": {"concurrency": 2}, "stop": {"requests": 2}}),
                                    Path(".")))
    results = sim.run()
    again = pickle.loads(pickle.dumps(results))
    assert again.summary == results.summary
    for name in ("requests", "passes", "events"):
        assert getattr(again, name).equals(getattr(results, name))
