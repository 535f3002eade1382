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


# -- The API says the truth: ``until``, ``now`` after the end, ``overrides``, the event view ----------------
# ``make_scenario``: 4 requests of 100→5 at concurrency 1, 20 ms prefill and 10 ms decode passes. Each
# request takes one prefill (its first token) and 4 decodes (tokens 2–5): 20 + 4 × 10 = 60 ms, and the
# next arrives as it finishes, so the run ends at 4 × 60 ms = 0.24 s, after 4 × 5 = 20 passes.
END_S = 0.24


def simulation(**overrides) -> Simulation:
    return Simulation(parse_scenario(make_scenario(**overrides), Path(".")))


@pytest.mark.parametrize("until, error, says", [
    (-1, ValueError, r"until \(-1 s\) is before now \(0 s\)"),
    (float("nan"), ValueError, "until must be a number of seconds, got nan"),
    ("5", TypeError, "until must be a number of seconds .* got '5'"),
    (True, TypeError, "until must be a number of seconds .* got True"),
])
def test_a_bad_until_is_refused_naming_until(until, error, says):
    sim = simulation()
    with pytest.raises(error, match=says):
        sim.run(until=until)
    assert sim.now == 0.0 and not sim.recorder.events  # refused before anything ran


def test_until_before_now_is_refused():
    sim = simulation()
    sim.run(until=0.1)
    with pytest.raises(ValueError, match=r"until \(0.05 s\) is before now \(0.1 s\)"):
        sim.run(until=0.05)
    assert sim.now == 0.1


@pytest.mark.parametrize("until", [float("inf"), 1e300, 10**400])  # 10**400: an int beyond any float
def test_until_infinity_runs_to_the_end(until):
    whole, capped = simulation().run(), simulation().run(until=until)
    assert capped.summary["completed_requests"] == whole.summary["completed_requests"] == 4
    assert capped.summary["duration_s"] == whole.summary["duration_s"] == pytest.approx(END_S)


@pytest.mark.parametrize("until", [None, 100.0])
def test_now_stays_at_the_end_of_the_run(until):
    sim = simulation()
    results = sim.run(until=until)
    assert sim.now == pytest.approx(END_S) and results.summary["duration_s"] == pytest.approx(END_S)
    sim.run(until=200.0)  # nothing left to happen: the clock does not move
    assert sim.now == pytest.approx(END_S)


def test_overrides_as_one_string_are_refused(tmp_path):
    import yaml

    from simmodel.config.load import load_scenario

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_scenario()))
    with pytest.raises(TypeError, match=r"overrides must be a list of 'PATH=VALUE' strings, got the single string "
                                        r"'engine.seed=1'"):
        Simulation.from_yaml(path, overrides="engine.seed=1")
    with pytest.raises(TypeError, match="overrides must be a list"):
        load_scenario(path, "engine.seed=1")
    with pytest.raises(TypeError, match="overrides must be 'PATH=VALUE' strings, got 1"):
        load_scenario(path, [1])
    with pytest.raises(TypeError, match=r"got a mapping; write \['engine.seed=3'\]"):
        Simulation.from_yaml(path, overrides={"engine.seed": 3})
    assert Simulation.from_yaml(path, overrides=["engine.seed=1"]).scenario.engine.seed == 1


def test_events_while_paused_hold_nothing_after_now():
    """Four requests of 100 → 50 one after another (each a 20 ms prefill pass, then 49 decode passes of 10 ms
    that the default simulation coalesces): stepping, or running 12.5 ms at a time into the decodes, nothing
    is logged after now (synchronous scheduling: not even in the raw log), and in the end the log shows
    every row."""
    for pause in ("step", "run"):
        sim = simulation(traffic={"source": {"output_tokens": 50}})
        pauses = 0
        while not sim.finished:
            sim.step() if pause == "step" else sim.run(until=sim.now + 0.0125)
            events = sim.events
            assert events.empty or events.time_s.max() <= sim.now
            assert len(events) == len(sim.recorder.events)
            pauses += 1
        # steps: each request's arrival and first token, and the last finish (the others are the next
        # arrival's instant): 9; runs: the 4 × 510 ms = 2.04 s cut every 12.5 ms: 164
        assert pauses == (9 if pause == "step" else 164)
        assert len(sim.events) == len(sim.run().events) == len(sim.recorder.events)


def test_pass_begin_and_end_share_the_pass_index():
    """Passes 0–4 serve request 0 (prefill 0–20 ms, decodes to 60 ms), pass 5 is request 1's prefill
    (60–80 ms); request rows carry -1."""
    events = simulation().run().events
    passes = events[events.kind.isin(["pass_begin", "pass_end"])]
    assert (events[~events.kind.isin(["pass_begin", "pass_end"])].pass_index == -1).all()
    span = {i: (g.time_s[g.kind == "pass_begin"].tolist(), g.time_s[g.kind == "pass_end"].tolist())
            for i, g in passes.groupby("pass_index")}
    assert sorted(span) == list(range(20))
    assert span[0] == ([0.0], [pytest.approx(0.02)]) and span[1] == ([pytest.approx(0.02)], [pytest.approx(0.03)])
    assert span[5] == ([pytest.approx(0.06)], [pytest.approx(0.08)])


@pytest.mark.parametrize("scheduler, ranks", [({"async_scheduling": True}, 1), ({}, 2),
                                              ({"async_scheduling": True}, 2)])
def test_every_pass_has_one_begin_and_one_end_with_its_index(scheduler, ranks):
    """Async passes begin before the one in flight ends; attention-DP ranks each count their own passes. Every
    (worker, rank, pass_index) has exactly one begin and one end, at the pass table's start and end."""
    traffic = {"load": {"concurrency": 5}, "stop": {"requests": 20}, "source": {"output_tokens": 30}}
    results = simulation(traffic=traffic,
                         engine={"workers": {"aggregated": {"scheduler": scheduler,
                                                            "parallelism": {"attention_data": ranks}}}}).run()
    events, keys = results.events, ["worker", "dp_rank", "pass_index"]
    begins = events[events.kind == "pass_begin"].set_index(keys).time_s.sort_index()
    ends = events[events.kind == "pass_end"].set_index(keys).time_s.sort_index()
    table = results.passes.set_index(keys).sort_index()
    assert begins.index.is_unique and ends.index.is_unique and begins.index.equals(table.index)
    assert ends.index.equals(table.index)
    assert begins.tolist() == pytest.approx(table.start_s.tolist())
    assert ends.tolist() == pytest.approx(table.end_s.tolist())
