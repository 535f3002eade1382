"""The replica planner (``planner``, mode load): a timeline derived by hand, and the same outputs in runs as pass by
pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import make_scenario, scenario_error, write_csv_trace
from test_decode_runs import assert_same

from simmodel.config.load import parse_scenario
from simmodel.sim import Simulation

PLANNER = {"mode": "load", "metric_interval_s": 1, "adjustment_interval_s": 4, "queue_scale_out": 0.5,
           "pools": {"aggregated": {"min_replicas": 1, "max_replicas": 2}}}


def scenario(trace: Path, planner: dict | None = PLANNER, **role) -> dict:
    data = make_scenario(engine={"workers": {"aggregated": {
        "startup_seconds": 2, "scheduler": {"max_sequences": 1, "async_scheduling": False},
        "kv_cache": {"capacity": {"type": "fixed", "blocks": 10_000}}, **role}}})
    data["traffic"] = {"source": {"type": "trace", "path": str(trace), "format": "csv"},
                       "load": {"type": "trace_timestamps"}}
    if planner is not None:
        data["planner"] = planner
    return data


def run(data: dict, coalesce: bool = True):
    return Simulation(parse_scenario(data, Path(".")), coalesce=coalesce).run()


def test_a_step_in_load_adds_a_worker_after_its_startup_and_drains_it_when_the_load_is_gone(tmp_path):
    """One worker of one sequence, fixed 20 ms prefill and 10 ms decode passes; the planner samples every second
    and decides every 4 s (queue_scale_out 0.5, queue_scale_in 0.2; KV use stays near 0 with 10,000 blocks);
    startup_seconds 2; one to two workers.

    - A request of 1 output at 0 (the trace's clock starts at its first row) takes 0–20 ms; nothing else arrives
      until 4.5 s: the decision at 4 reads a mean queue of 0, but the pool is at its minimum.
    - Five requests of 100 prompt tokens and 100 outputs arrive at 4.5 s, all on worker 0; each takes 20 + 99 ×
      10 = 1,010 ms, one after the other: 4.5–5.51, 5.51–6.52, 6.52–7.53, 7.53–8.54, 8.54–9.55. The samples at
      5, 6, 7, 8 s find 4, 3, 2, 1 waiting: mean 2.5 > 0.5, so at 8 s a worker is added; it serves from 10 s.
    - The samples at 9–12 s find nothing waiting: at 12 s (no worker starting) the pool drains worker 1,
      which holds nothing and leaves at the next sample, 13 s.
    - A last request (2 outputs) at 14.5 s goes to worker 0 and ends at 14.53 s, the run's end.

    GPU-hours: worker 0 up 14.53 s, worker 1 from 8 to 13 s, one GPU each: 19.53 / 3600. Serving workers: 1
    until 10, 2 until 12, then 1: mean (10 + 2 × 2 + 2.53) / 14.53."""
    rows = [(0.0, 100, 1)] + [(4.5, 100, 100)] * 5 + [(14.5, 100, 2)]
    results = run(scenario(write_csv_trace(tmp_path / "t.csv", rows)))
    table = results.requests
    assert table["worker"].tolist() == [0] * 7
    assert table["e2e_ms"].tolist() == pytest.approx([20, 1010, 2020, 3030, 4040, 5050, 30])
    replicas = results.replicas
    assert [tuple(r) for r in replicas[["time_s", "serving", "starting", "draining"]].itertuples(index=False)] == [
        (0.0, 1, 0, 0), (8.0, 1, 1, 0), (10.0, 2, 0, 0), (12.0, 1, 0, 1), (13.0, 1, 0, 0)]
    assert results.summary["gpu_hours"] == pytest.approx(19.53 / 3600)
    pool = results.summary["planner"]["pools"]["aggregated"]
    assert pool == {"min_serving": 1, "mean_serving": pytest.approx(16.53 / 14.53), "max_serving": 2,
                    "scale_outs": 1, "scale_ins": 1, "peak_workers_up": 2}
    assert results.summary["gpu_count"] == 2


def test_an_added_worker_takes_requests_once_it_serves(tmp_path):
    """The same step with a request every 250 ms from 10.1 s on (1 output: 20 ms each): worker 1 serves from
    10 s, and round robin takes turns over the two serving workers, the turn where it was (worker 0's)."""
    rows = [(0.0, 100, 1)] + [(4.5, 100, 100)] * 5 + [(10.1 + 0.25 * i, 100, 1) for i in range(8)]
    table = run(scenario(write_csv_trace(tmp_path / "t.csv", rows))).requests
    assert table["worker"].tolist() == [0] * 6 + [0, 1, 0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize(("router", "mode"), [(None, "load"), ({"type": "kv_aware"}, "load"),
                                             ({"type": "least_loaded"}, "load"), (None, "sla")])
def test_runs_of_passes_change_nothing_under_a_planner(tmp_path, router, mode):
    """A burst (50 requests/s for 6 s) and a lull (2/s from 20 to 40 s) on 1–3 workers (polynomial timing, prefix caching, startup 1 s, decisions every 2 s):
    planned in runs and pass by pass, every table, the summary and the replica timeline are the same."""
    rows = [(round(0.02 * i, 3), 200 + 16 * (i % 7), 60) for i in range(300)] + [
        (round(20 + 0.5 * i, 3), 150, 20) for i in range(40)]
    planner = {**PLANNER, "adjustment_interval_s": 2, "metric_interval_s": 0.5, "queue_scale_out": 2,
               "pools": {"aggregated": {"min_replicas": 1, "max_replicas": 3}}}
    if mode == "sla":
        planner = {"mode": "sla", "ttft_ms": 300, "itl_ms": 30, "adjustment_interval_s": 2, "metric_interval_s": 0.5,
                   "pools": planner["pools"]}
    data = scenario(write_csv_trace(tmp_path / "t.csv", rows), planner,
                    startup_seconds=1, timing={"type": "polynomial"},
                    scheduler={"max_sequences": 8, "async_scheduling": False},
                    kv_cache={"prefix_caching": True, "capacity": {"type": "fixed", "blocks": 10_000}})
    if router is not None:
        data["router"] = router
    a, b = run(data), run(data, coalesce=False)
    assert_same(a, b)
    assert a.replicas.equals(b.replicas)
    assert a.summary["planner"]["pools"]["aggregated"]["scale_outs"] >= 1
    assert a.summary["planner"]["pools"]["aggregated"]["scale_ins"] >= 1


def test_planner_rules_are_checked(tmp_path):
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 5)])
    base = scenario(trace)

    def error(**changes) -> str:
        data = json.loads(json.dumps(base))
        data["planner"].update(changes)
        return scenario_error(data)

    assert "planner.queue_scale_out: read in mode load only (mode is sla)" in error(mode="sla")
    assert "planner.itl_ms: read in mode sla only (mode is load)" in error(itl_ms=30)
    assert "planner.mode: must be one of load, sla" in error(mode="fast")
    assert "planner.pools.decode: not a pool of this deployment" in error(pools={"decode": {"max_replicas": 2}})
    assert "planner.pools.aggregated.max_replicas: must be at least min_replicas (3)" in error(
        pools={"aggregated": {"min_replicas": 3, "max_replicas": 2}})
    assert "the workers the run starts with, must lie within min_replicas and max_replicas (2–3)" in error(
        pools={"aggregated": {"min_replicas": 2, "max_replicas": 3}})
    assert "planner.metric_interval_s: must be at most adjustment_interval_s (4)" in error(metric_interval_s=5)
    assert "planner.queue_scale_in: must be below queue_scale_out (0.5)" in error(queue_scale_in=0.5)
    assert "planner.pools: name at least one pool to scale" in error(pools={})
    assert "planner.metric_interval_s: must be at least 0.1, got 0.01" in error(metric_interval_s=0.01)
    assert "planner.kv_scale_out: must be a non-negative number at most 1, got 2" in error(kv_scale_out=2)
    assert "planner.pools.aggregated.max_replicas: the deployment could grow to 200,000 GPUs" in error(
        pools={"aggregated": {"max_replicas": 200_000}})
    assert "engine.workers.aggregated.startup_seconds: the planner can add no worker to this pool" in error(
        pools={"aggregated": {"max_replicas": 1}})
    no_planner = json.loads(json.dumps(base))
    del no_planner["planner"]
    assert ("engine.workers.aggregated.startup_seconds: only delays workers a planner adds"
            in scenario_error(no_planner))


def test_disaggregated_pools_scale_each_on_its_own(tmp_path):
    """P/D, both pools scaled (1–2 prefill, 1–3 decode workers, polynomial timing): the same outputs and replica
    timeline in runs as pass by pass; the decode pool, where the backlog waits, scales out."""
    rows = [(round(0.01 * i, 3), 300, 80) for i in range(400)] + [(round(15 + 0.5 * i, 3), 200, 10) for i in range(30)]
    data = scenario(write_csv_trace(tmp_path / "t.csv", rows), None)
    role = {"parallelism": {"replicas": 1}, "startup_seconds": 1, "timing": {"type": "polynomial"},
            "scheduler": {"max_sequences": 16, "async_scheduling": False},
            "kv_cache": {"capacity": {"type": "fixed", "blocks": 10_000}}}
    data["engine"].update(mode="disaggregated", workers={"prefill": role, "decode": role})
    data["planner"] = {**PLANNER, "adjustment_interval_s": 2, "metric_interval_s": 0.5, "queue_scale_out": 2,
                       "pools": {"prefill": {"max_replicas": 2}, "decode": {"max_replicas": 3}}}
    a, b = run(data), run(data, coalesce=False)
    assert_same(a, b)
    assert a.replicas.equals(b.replicas)
    pools = a.summary["planner"]["pools"]
    assert pools["decode"]["scale_outs"] >= 1 and set(a.replicas["role"]) == {"prefill", "decode"}
    assert (a.requests["status"] == "completed").all()


def test_the_sla_planner_sizes_a_decode_pool_for_the_rate_it_saw(tmp_path):
    """P/D, one prefill worker, a decode pool of 1–3 workers of 2 sequences each (fixed 20 ms prefill and 10 ms
    decode passes), mode sla with itl_ms 50, a decision every 10 s. 100 requests of 100 prompt tokens and 50
    outputs arrive 0.1 s apart from 0 to 9.9 s.

    At 10 s the planner saw 100 arrivals in 10 s (10 requests/s), a mean output of 50 (every finished request's),
    and decode passes of 10 ms whatever their batch (1 or 2): fixed 10 ms, 0 per sequence, so the largest batch
    within 50 ms is the rank's 2 sequences (its KV holds far more). A request then costs 50 × 10 ms / 2 = 0.25 s
    of a worker: 10 × 0.25 = 2.5 → 3 workers, both added at once (startup 0)."""
    rows = [(round(0.1 * i, 3), 100, 50) for i in range(100)]
    data = scenario(write_csv_trace(tmp_path / "t.csv", rows), None)
    decode = {"parallelism": {"replicas": 1}, "scheduler": {"max_sequences": 2, "async_scheduling": False},
              "kv_cache": {"capacity": {"type": "fixed", "blocks": 10_000}},
              "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}}
    prefill = {**decode, "scheduler": {"async_scheduling": False}}
    data["engine"].update(mode="disaggregated", workers={"prefill": prefill, "decode": decode})
    data["planner"] = {"mode": "sla", "itl_ms": 50, "adjustment_interval_s": 10, "metric_interval_s": 1,
                       "pools": {"decode": {"max_replicas": 3}}}
    sim = Simulation(parse_scenario(data, Path(".")))
    results = sim.run()
    first = sim.planner.decisions[0]
    assert (first["time_s"], first["rate_rps"], first["osl"], first["target"]) == (10.0, 10.0, 50.0, 3)
    assert [tuple(r) for r in results.replicas[["time_s", "serving"]].itertuples(index=False)][:3] == [
        (0.0, 1), (10.0, 2), (10.0, 3)]


def test_a_draining_worker_serves_what_it_holds_and_takes_nothing_new(tmp_path):
    """Two workers of one sequence (1–2, decisions every 4 s, samples every second, queue_scale_in 1), fixed
    20/10 ms passes. Four requests of 300 outputs (3,010 ms each) at 0: R0, R2 on worker 0 and R1, R3 on
    worker 1, round robin; R0 and R1 run 0–3.01, R2 and R3 wait and run 3.01–6.02. The samples at 1, 2, 3
    find one waiting per worker, at 4 none: mean 0.75 < 1 at 4 s, so worker 1 drains, holding R3 (running).
    R4 (2 outputs) at 4.5 s goes to worker 0, the only one serving, and runs after R2: 6.02–6.05. Worker 1
    finishes R3 at 6.02 and leaves at the 7 s sample. A last request at 10 s keeps the run (and the planner)
    going; it ends at 10.03 s. GPU-hours: 10.03 + 7 seconds."""
    rows = [(0.0, 100, 300)] * 4 + [(4.5, 100, 2), (10.0, 100, 2)]
    planner = {**PLANNER, "queue_scale_out": 5, "queue_scale_in": 1,
               "pools": {"aggregated": {"min_replicas": 1, "max_replicas": 2}}}
    results = run(scenario(write_csv_trace(tmp_path / "t.csv", rows), planner, parallelism={"replicas": 2},
                           startup_seconds=0))
    table = results.requests
    assert table["worker"].tolist() == [0, 1, 0, 1, 0, 0]
    assert table["e2e_ms"].tolist() == pytest.approx([3010, 3010, 6020, 6020, 1550, 30])
    assert [tuple(r) for r in results.replicas[["time_s", "serving", "draining"]].itertuples(index=False)] == [
        (0.0, 2, 0), (4.0, 1, 1), (7.0, 1, 0)]
    assert results.summary["gpu_hours"] == pytest.approx(17.03 / 3600)
