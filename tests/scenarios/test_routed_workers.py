"""Workers that only their own arrivals reach plan their passes each on its own (``Worker.arrivals``).

Under an open-loop load placed round robin (a router that reads no state), which worker a request goes to
is known before it arrives, so each worker's runs of passes go on through its own arrivals and wait for no
other worker. These tests check the routes, that the outputs are those of the pass-by-pass run, that the
runs really are that long, and the order of simultaneous events of different workers.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from factories import simpy_events_to_end, trace_scenario, write_csv_trace
from test_decode_runs import assert_same, with_async

from simmodel.config.load import parse_scenario
from simmodel.errors import SimulationError
from simmodel.sim import Simulation


def replicas(n: int, **fields) -> dict:
    return {"engine": {"workers": {"aggregated": {"parallelism": {"replicas": n}, **fields}}}}


POLYNOMIAL = {"timing": {"type": "polynomial"}}
"""Runs of passes are priced from per-rank totals, which the fixed timing does not offer."""


def simulation(data: dict, coalesce: bool = True) -> Simulation:
    return Simulation(parse_scenario(data, Path(".")), coalesce=coalesce)


def test_round_robin_takes_turns_over_placed_requests_only(tmp_path):
    """Four arrivals on two replicas; request 1's prompt (5,000 tokens) is at or over context_length (4,096)
    and refused before placement, so it takes no turn: 0 → worker 0, 2 → worker 1, 3 → worker 0."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 3), (0.1, 5000, 3), (0.2, 100, 3), (0.3, 100, 3)])
    sim = simulation(trace_scenario(trace, **replicas(2)))
    table = sim.run().requests.set_index("request_id")
    assert table.loc[[0, 2, 3], "worker"].tolist() == [0, 1, 0]
    assert table.loc[1, "status"] == "rejected"


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_each_worker_runs_through_its_own_arrivals(tmp_path, asynchronous):
    """Four replicas, 40 requests of 200 output tokens arriving 50 ms apart. Pass by pass every pass takes
    SimPy steps of its own (more steps than passes); each worker carrying its runs through its own arrivals
    takes about one step per arrival (the load's timeouts) and a few per worker. Outputs are identical."""
    rows = [(round(0.05 * i, 3), 100 + 10 * i, 200) for i in range(40)]
    data = with_async(trace_scenario(write_csv_trace(tmp_path / "t.csv", rows), **replicas(4, **POLYNOMIAL)),
                      asynchronous)
    by_pass = simulation(data, coalesce=False)
    num_steps = simpy_events_to_end(by_pass)
    passes = sum(w.num_passes for w in by_pass.workers)
    assert num_steps > passes > 4 * 200
    coalesced = simulation(data)
    assert simpy_events_to_end(coalesced) < 2 * len(rows) + 40
    # workers made their own arrivals ahead, out of request order; the requests are listed in order
    assert [r.request_id for r in coalesced.requests] == list(range(len(rows)))
    assert_same(by_pass.results(), coalesced.results())


@pytest.mark.parametrize("coalesce", [False, True], ids=["by-pass", "coalesced"])
def test_simultaneous_events_order_clients_then_workers(tmp_path, coalesce):
    """Two replicas, two requests of 100 → 2 tokens at t = 0, fixed 20 ms prefill and 10 ms decode: both
    workers pass at the same instants. Each instant lists the clients' events, then worker 0's, then worker
    1's, each worker's in the order it made them: placement, admission, pass begin at 0; first token, pass
    end, the decode's begin at 20 ms; finish and pass end at 30 ms."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 2), (0.0, 100, 2)])
    sim = simulation(trace_scenario(trace, **replicas(2)), coalesce)
    events = sim.run().events
    got = list(zip(events["time_s"].round(6), events["kind"].astype(str), events["worker"], events["request_id"]))

    def worker_at_0(w: int) -> list:
        return [(0.0, "placement", w, w), (0.0, "admission", w, w), (0.0, "pass_begin", w, -1)]

    def worker_at_20(w: int) -> list:
        return [(0.02, "first_token", w, w), (0.02, "pass_end", w, -1), (0.02, "pass_begin", w, -1)]

    def worker_at_30(w: int) -> list:
        return [(0.03, "finish", w, w), (0.03, "pass_end", w, -1)]

    expected = ([(0.0, "arrival", -1, 0), (0.0, "arrival", -1, 1)] + worker_at_0(0) + worker_at_0(1)
                + worker_at_20(0) + worker_at_20(1) + worker_at_30(0) + worker_at_30(1))
    assert got == expected


def test_a_paused_replica_pool_is_the_pass_by_pass_one(tmp_path):
    """``run(until=...)`` in slices on two replicas: every worker's runs stop at the slice's end, so at each
    pause the requests made, each rank's queues and KV blocks are those of the pass-by-pass run."""
    rows = [(round(0.037 * i, 3), 200 + 7 * i, 60 + i) for i in range(30)]
    data = trace_scenario(write_csv_trace(tmp_path / "t.csv", rows), **replicas(2, **POLYNOMIAL))
    a, b = simulation(data, coalesce=False), simulation(data)
    for until in (0.3, 0.71, 1.2, 2.0):
        a.run(until=until), b.run(until=until)
        assert [(r.request_id, r.num_output_tokens, r.status) for r in a.requests] == \
               [(r.request_id, r.num_output_tokens, r.status) for r in b.requests]
        for wa, wb in zip(a.workers, b.workers):
            assert [q.request_id for q in wa.ranks[0].running] == [q.request_id for q in wb.ranks[0].running]
            assert wa.ranks[0].pool.num_used_blocks == wb.ranks[0].pool.num_used_blocks
    assert_same(a.run(), b.run())


def failing_run(sim: Simulation, match: str):
    """Run until the expected safety-limit error; the state it leaves: the instant, each request's tokens and
    the pass and event tables."""
    with pytest.raises(SimulationError, match=match):
        sim.run()
    res = sim.results()
    return sim.env.now, [r.num_output_tokens for r in sim.requests], res.passes, res.events


# Found by review: a run planned ahead must stop where the pass-by-pass run fails.
LIMIT_CASES = {
    # request 1 (5,000 tokens, refused for its length) is the first over max_requests 1: the run fails at
    # 50 ms, where request 0 has decoded a few tokens, not all 200
    "a refused prompt over max_requests": ([(0.0, 100, 200), (0.05, 5000, 5)], 1, {"max_requests": 1}),
    # request 2 goes to worker 0 and breaks max_requests 2 at 50 ms: worker 1 must not have run on
    "another worker's request over max_requests": ([(0.0, 100, 200), (0.0, 100, 200), (0.05, 100, 5)], 2,
                                                   {"max_requests": 2}),
    # a 100 ms time limit: the run fails when the first pass after it starts, on either worker
    "the time limit with two workers": ([(0.0, 2000, 300), (0.0, 100, 300)], 2, {"max_virtual_time_seconds": 0.1}),
}


@pytest.mark.parametrize("name", LIMIT_CASES)
def test_a_run_planned_ahead_fails_where_the_pass_by_pass_run_fails(tmp_path, name):
    rows, n, limits = LIMIT_CASES[name]
    data = trace_scenario(write_csv_trace(tmp_path / "t.csv", rows), limits=limits, **replicas(n, **POLYNOMIAL))
    match = "max_requests" if "max_requests" in limits else "max_virtual_time_seconds"
    a = failing_run(simulation(data, coalesce=False), match)
    b = failing_run(simulation(data), match)
    assert a[:2] == b[:2]
    if "max_requests" in limits:
        assert a[0] == 50_000_000 and max(a[1]) < 20  # failed at the arrival, mid-decode
    pd.testing.assert_frame_equal(a[2], b[2], check_exact=True)
    pd.testing.assert_frame_equal(a[3], b[3], check_exact=True)
