"""Coalesced decode runs (``engine/planner/``) must change nothing but speed.

Each scenario runs twice, pass by pass (``coalesce=False``) and with runs coalesced, and every output
must be identical: the summary (but wall time), every request row, every pass row and every event, in
order. The scenarios reach each way a run ends: arrivals, finishes by ``max_tokens`` and by context
length, KV pressure (preemption), callbacks (closed-loop clients, P/D handoffs), other workers' passes,
the stop time and the safety limits.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from factories import _merge, make_scenario, simpy_events_to_end, trace_scenario, write_csv_trace

from simmodel.config.load import parse_scenario
from simmodel.engine.planner import run as planner_run
from simmodel.engine.worker import Worker
from simmodel.errors import SimulationError
from simmodel.sim import Simulation

SYNTHETIC = {"source": {"type": "synthetic",
                        "input_tokens": {"distribution": "uniform", "min": 20, "max": 900},
                        "output_tokens": {"distribution": "uniform", "min": 1, "max": 300}},
             "load": {"type": "poisson", "requests_per_second": 25}, "stop": {"requests": 150}}


def worker(**fields) -> dict:
    return {"engine": {"workers": {"aggregated": fields}}}


def merged(*parts: dict) -> dict:
    """``make_scenario`` with ``SYNTHETIC`` traffic and the parts merged in, in order."""
    data = make_scenario(traffic=copy.deepcopy(SYNTHETIC))
    for part in parts:
        _merge(data, copy.deepcopy(part))
    return data


ROOFLINE = {"timing": {"type": "default"}}
POLYNOMIAL = {"timing": {"type": "polynomial"}}

SCENARIOS = {
    "roofline": merged(worker(**ROOFLINE)),
    "polynomial-prefix-caching": merged(
        worker(**POLYNOMIAL, kv_cache={"prefix_caching": True}),
        {"traffic": {"source": {"shared_prefix": {"tokens": 256, "groups": 3}}}}),
    "tight-kv-preemptions": merged(worker(**ROOFLINE, kv_cache={"capacity": {"type": "fixed", "blocks": 300}})),
    "tight-kv-prefix-caching": merged(worker(**POLYNOMIAL, kv_cache={
        "prefix_caching": True, "capacity": {"type": "fixed", "blocks": 300}}),
        {"traffic": {"source": {"shared_prefix": {"tokens": 128, "groups": 2}}}}),
    "attention-dp3": merged(worker(**ROOFLINE, parallelism={"attention_data": 3})),
    "moe-dp2-ep2": merged({"engine": {"model": "Qwen/Qwen3-30B-A3B", "hardware": "h200_sxm"}},
                          worker(**ROOFLINE, parallelism={"attention_data": 2, "moe_expert": 2},
                                 kv_cache={"capacity": {"type": "fixed", "blocks": 4000}})),
    "two-workers": merged(worker(**ROOFLINE, parallelism={"replicas": 2})),
    "closed-loop": merged({"traffic": {"load": {"type": "concurrency", "concurrency": 6}}}, worker(**ROOFLINE)),
    "context-length-stops": merged({"engine": {"context_length": 700}}, worker(**POLYNOMIAL)),
    "stop-time": merged(worker(**ROOFLINE)),
    "fixed-timing": merged(),
    "disaggregated": merged({"engine": {
        "mode": "disaggregated", "kv_transfer": {"bandwidth_gb_per_second": 50, "bytes_per_token": 131072},
        "workers": {"prefill": {**ROOFLINE, "scheduler": {"async_scheduling": False}},
                    "decode": {**ROOFLINE, "scheduler": {"async_scheduling": False}}}}}),
    "dp2-replicas2-prefill-interval": merged(worker(**ROOFLINE, parallelism={"replicas": 2, "attention_data": 2},
                                                    scheduler={"prefill_schedule_interval": 4})),
    "closed-loop-dp2": merged({"traffic": {"load": {"type": "concurrency", "concurrency": 6}}},
                              worker(**ROOFLINE, parallelism={"attention_data": 2})),
    # A staged load is not routed ahead: its workers apply their runs as the passes end, and requests placed
    # during a run are waiting when it ends, unseen by any of its plans (the prefill cadence must not count them).
    "staged-dp2-prefill-interval": merged(
        {"traffic": {"load": {"type": "stages", "arrivals": "constant",
                              "stages": [{"requests_per_second": 60, "requests": 80},
                                         {"requests_per_second": 20, "requests": 60}]},
                     "stop": {}}},
        worker(parallelism={"attention_data": 2}, scheduler={"prefill_schedule_interval": 3})),
    # The decode pool's KV is tight (reservations wait for blocks, preemptions) and cached; its ranks are two
    # attention-DP ranks behind shared links with a latency (transfers queue, handoffs come later).
    "disaggregated-tight-kv-dp2-shared-link": merged({"engine": {
        "mode": "disaggregated", "kv_transfer": {"bandwidth_gb_per_second": 20, "bytes_per_token": 131072,
                                                 "latency_ms": 2, "contention": "shared_link"},
        "workers": {"prefill": {**POLYNOMIAL, "kv_cache": {"prefix_caching": True},
                                "parallelism": {"replicas": 2}},
                    "decode": {**POLYNOMIAL, "parallelism": {"attention_data": 2},
                               "kv_cache": {"prefix_caching": True, "capacity": {"type": "fixed", "blocks": 400}}}}}},
        {"traffic": {"source": {"shared_prefix": {"tokens": 128, "groups": 2}}}}),
    # KV cache groups of Mamba-2 state layers: 1 block a request per state group, 1 per 2096 tokens of attention
    # (prompts near 2096 tokens, so that decodes cross it: blocks taken in runs, preemptions).
    "state-layers-tight-kv": merged({"engine": {"model": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
                                                "hardware": "h200_sxm", "context_length": 8192},
                                     "traffic": {"source": {"input_tokens": {"min": 1500, "max": 2500},
                                                            "output_tokens": {"min": 1, "max": 900}}}},
                                    worker(**ROOFLINE, kv_cache={"block_size": 2096, "prefix_caching": False, "capacity": {
                                        "type": "fixed", "blocks": 40}})),
}
# Fixed pass times make instants coincide: pass ends of both pools, transfer ends and placements at once.
SCENARIOS["disaggregated-fixed-timing"] = copy.deepcopy(SCENARIOS["disaggregated"])
for _role in SCENARIOS["disaggregated-fixed-timing"]["engine"]["workers"].values():
    _role.pop("timing")
del SCENARIOS["disaggregated"]["engine"]["workers"]["aggregated"]
del SCENARIOS["disaggregated-fixed-timing"]["engine"]["workers"]["aggregated"]
del SCENARIOS["disaggregated-tight-kv-dp2-shared-link"]["engine"]["workers"]["aggregated"]
SCENARIOS["stop-time"]["traffic"]["stop"] = {"max_virtual_time_seconds": 3.0}


def run(data: dict, coalesce: bool, **run_args):
    sim = Simulation(parse_scenario(data, Path(".")), coalesce=coalesce)
    return sim, sim.run(**run_args)


def assert_same(a, b) -> None:
    sa, sb = dict(a.summary), dict(b.summary)
    sa.pop("wall_time_s"), sb.pop("wall_time_s")
    assert sa == sb
    for name in ("requests", "passes", "events"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True, obj=name)


def pool_state(sim: Simulation) -> list:
    """Each rank's KV pool once the run is over: free blocks in eviction order and which of them hold cached
    content (and the prefix-cache counters)."""
    state = []
    for w in sim.workers:
        for rank in w.ranks:
            pool = rank.pool
            if not pool.caching:
                state.append(pool.num_free_blocks)
                continue
            queue, order = pool.free_queue, []
            b = queue.next[queue.head]
            while b != queue.tail:
                order.append(b)
                b = queue.next[b]
            state.append((order, [pool.key_of[b] is None for b in order], pool.num_queries, pool.num_hits))
    return state


def with_async(data: dict, asynchronous: bool) -> dict:
    data = copy.deepcopy(data)
    for role in data["engine"]["workers"].values():
        role.setdefault("scheduler", {})["async_scheduling"] = asynchronous
    return data


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name", SCENARIOS)
def test_coalesced_runs_give_identical_outputs(name, asynchronous):
    data = with_async(SCENARIOS[name], asynchronous)
    _, by_pass = run(data, coalesce=False)
    _, coalesced = run(data, coalesce=True)
    assert len(by_pass.passes) > 100
    assert_same(by_pass, coalesced)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_runs_are_actually_coalesced(tmp_path, asynchronous):
    """Three requests, then a fourth: pass by pass every pass takes several SimPy steps; coalesced, each
    stretch of decodes between the arrival and the finishes takes one."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 200), (0.0, 300, 150), (0.0, 50, 120),
                                                 (1.0, 80, 60)])
    data = with_async(trace_scenario(trace), asynchronous)
    by_pass = simpy_events_to_end(Simulation(parse_scenario(data, Path(".")), coalesce=False))
    coalesced = simpy_events_to_end(Simulation(parse_scenario(data, Path(".")), coalesce=True))
    assert by_pass > 3 * 200 and coalesced < 30


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_run_goes_on_past_the_rows_it_priced_first(tmp_path, asynchronous):
    """A run prices its next 64 rows (``PRICED_AHEAD``); when all of them end before the next arrival (here none
    comes) it prices 64 more and goes on. So one request's 600 decodes take the SimPy steps its 60 decodes take
    (one run either way); a run that ended where its prices end would take ⌈600 / 64⌉ = 10 runs, at least one
    step each, 9 more than the one run of 60."""
    steps = []
    for outputs in (60, 600):
        trace = write_csv_trace(tmp_path / f"{outputs}.csv", [(0.0, 100, outputs)])
        data = with_async(trace_scenario(trace), asynchronous)
        steps.append(simpy_events_to_end(Simulation(parse_scenario(data, Path(".")), coalesce=True)))
    assert steps[1] == steps[0]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("rate", [2, 25])
def test_pricing_a_few_rows_at_a_time_takes_the_runs_pricing_them_all_takes(monkeypatch, asynchronous, rate):
    """Runs applied ahead price ``PRICED_AHEAD`` rows at a time and price more when they reach them (no arrival
    among the rows priced, or one in the last of them, whose admission plans the row after). Priced 3 rows at a
    time, so that arrivals fall at the window's edge often, each run must take the passes it takes priced to
    its last row at once."""
    data = with_async(merged({"traffic": {"load": {"requests_per_second": rate}}}), asynchronous)
    count_run = Worker.count_run

    def passes_per_run(ahead: int) -> list[tuple[int, int]]:
        """(when, passes) of each run the worker counts."""
        monkeypatch.setattr(planner_run, "PRICED_AHEAD", ahead)
        taken: list[tuple[int, int]] = []

        def counted(worker, m, *rest, **named):
            taken.append((worker.env.now, m))
            return count_run(worker, m, *rest, **named)

        monkeypatch.setattr(Worker, "count_run", counted)
        Simulation(parse_scenario(data, Path("."))).run()
        return taken

    whole = passes_per_run(10**6)
    assert max(m for _, m in whole) > 3 and passes_per_run(3) == whole


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name, applied_as_they_end", [("attention-dp3", False), ("two-workers", False),
                                                       ("disaggregated", True), ("closed-loop", True)])
def test_every_deployment_runs_most_passes_in_runs(monkeypatch, name, applied_as_they_end, asynchronous):
    """Attention-DP ranks and replicas under an open loop (runs planned through their arrivals), P/D decode
    workers and closed loops (runs applied as their passes end, ended by a placement): most of the passes
    of the workers that decode are planned as runs, not one by one."""
    from simmodel.engine.planner import async_run
    from simmodel.engine.planner import run as planned_run

    in_runs = {"ahead": 0, "as they end": 0}
    record = planned_run.Run._record

    def counting_record(self, m):
        in_runs["ahead"] += m
        return record(self, m)

    def counting(end_row):
        def counting_end_row(self, k):
            in_runs["as they end"] += 1
            return end_row(self, k)
        return counting_end_row

    monkeypatch.setattr(planned_run.Run, "_record", counting_record)
    for cls in (planned_run.Run, async_run.AsyncRun):
        monkeypatch.setattr(cls, "end_row", counting(cls.end_row))
    _, results = run(with_async(SCENARIOS[name], asynchronous), coalesce=True)
    passes = results.passes
    decoding = len(passes[(passes.role != "prefill") & (passes.dp_rank == 0)])  # one row per rank: count rank 0
    kind = "as they end" if applied_as_they_end else "ahead"
    assert in_runs[kind] > 0.7 * decoding, (in_runs, decoding)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name", ["disaggregated", "disaggregated-fixed-timing"])
def test_a_decode_run_goes_on_through_the_handoffs_placed_on_it(monkeypatch, name, asynchronous):
    """A P/D decode worker's run applied as its passes end does not stop where a prefilled request is placed
    on it: the plan after the placement reserves its blocks, the one after the transfer admits it, and the
    run takes both (outputs identical to pass by pass: ``test_coalesced_runs_give_identical_outputs``).
    Most handoffs are therefore admitted inside a run, and a decode run spans many requests."""
    from simmodel.engine.planner import admissions
    from simmodel.engine.planner import run as planned_run

    counts = {"handoffs taken": 0, "decode runs": 0}
    take, init = admissions.Admissions.take, planned_run.Run.__init__

    def counting_take(self, k, outs, admitted_at):
        taken = take(self, k, outs, admitted_at)
        if taken:
            counts["handoffs taken"] += sum(q.kv_transferred for out in outs for q in out.admitted)
        return taken

    def counting_init(self, worker, *args, **kwargs):
        counts["decode runs"] += worker.role == "decode"
        init(self, worker, *args, **kwargs)

    monkeypatch.setattr(admissions.Admissions, "take", counting_take)
    monkeypatch.setattr(planned_run.Run, "__init__", counting_init)
    _, results = run(with_async(SCENARIOS[name], asynchronous), coalesce=True)
    requests = len(results.requests)
    assert counts["handoffs taken"] > 0.7 * requests, (counts, requests)
    assert counts["decode runs"] < 0.2 * requests, (counts, requests)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name", ["closed-loop", "closed-loop-dp2"])
def test_a_finish_that_calls_back_does_so_inside_a_run(monkeypatch, name, asynchronous):
    """In a run applied as its passes end, a finish that acts on the simulation (a closed-loop client sending its
    next request) calls back as its row is recorded, at its instant, and the run goes on (the next request,
    placed by it, is admitted by the next row's plan). On two attention-DP ranks too, since the load (stopped
    at its request count) cannot break ``limits.max_requests`` and the router reads no state. Most finishes
    happen inside runs, and a run spans many requests (outputs identical to pass by pass:
    ``test_coalesced_runs_give_identical_outputs``)."""
    from simmodel.engine.planner import run as planned_run

    counts = {"called back in a run": 0, "runs": 0}
    deliver, init = planned_run.Run.deliver_finished, planned_run.Run.__init__

    def counting_deliver(self, columns):
        counts["called back in a run"] += len(columns)
        return deliver(self, columns)

    def counting_init(self, worker, *args, **kwargs):
        counts["runs"] += 1
        init(self, worker, *args, **kwargs)

    monkeypatch.setattr(planned_run.Run, "deliver_finished", counting_deliver)
    monkeypatch.setattr(planned_run.Run, "__init__", counting_init)
    sim, results = run(with_async(SCENARIOS[name], asynchronous), coalesce=True)
    assert all(worker.quiet_callbacks for worker in sim.workers)
    requests = len(results.requests)
    assert counts["called back in a run"] > 0.5 * requests, (counts, requests)
    assert counts["runs"] < 0.5 * requests, (counts, requests)


def test_a_request_waiting_for_token_budget_is_admitted_when_the_budget_is_back(tmp_path):
    """Fixed timing (prefill 20 ms, decode 10 ms, both in a mixed pass), 64 batched tokens. R0 (10 tokens)
    prefills 0–20 ms. At 20 ms R0 decodes (1 token), so A (63 tokens, arrived at 15 ms) fills the budget and
    B (30 tokens, arrived at 16 ms) waits; the mixed pass runs 20–50 ms. At 50 ms R0 and A decode (2 tokens)
    and B is admitted: no request finished, the budget came back because A's prefill is over. A run must
    not assume B waits until a finish. Async, both ways the same."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 10, 60), (0.015, 63, 60), (0.016, 30, 10)])
    data = trace_scenario(trace, engine={"workers": {"aggregated": {
        "scheduler": {"max_batched_tokens": 64, "max_sequences": 8}}}})
    for asynchronous in (False, True):
        case = with_async(data, asynchronous)
        _, by_pass = run(case, coalesce=False)
        _, coalesced = run(case, coalesce=True)
        assert_same(by_pass, coalesced)
        if not asynchronous:
            events = coalesced.events
            admitted = events[events.kind == "admission"].set_index("request_id").time_s
            assert admitted.to_dict() == pytest.approx({0: 0.0, 1: 0.020, 2: 0.050})


def test_a_planned_pass_that_ends_a_prefill_leaves_budget_for_the_next(tmp_path):
    """64 batched tokens on each of one or two DP ranks: the first pass planned prefills 64 of request 0's
    128 tokens, the second its last 64 (sampling its first token), and request 1 (50 tokens) waits for
    budget; the third pass admits it, before any finish. A run starting with the second pass must not
    hold request 1 back; so too with a late arrival."""
    for ranks in (1, 2):
        for late in (False, True):
            rows = [(0.0, 128, 50, 0), (0.0, 50, 10, 0)] + [(0.0, 10, 50, r) for r in range(1, ranks)]
            rows += [(5.0, 10, 5, 0)] if late else []
            trace = write_csv_trace(tmp_path / f"t{ranks}{late}.csv", rows)
            data = trace_scenario(trace, engine={"workers": {"aggregated": {
                "parallelism": {"attention_data": ranks},
                "scheduler": {"max_batched_tokens": 64, "max_sequences": 8}}}})
            same_both_ways(data)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_error_inside_a_run_applied_as_its_passes_end_leaves_the_pass_by_pass_state(asynchronous):
    """Two replicas under a closed loop (runs applied as their passes end) hit ``limits.max_passes`` while
    one of them is inside a run; a staged load hits ``limits.max_requests`` while its worker is: the
    requests, passes, events and summary read after the error are those of the pass-by-pass run."""
    closed = merged({"traffic": {"load": {"type": "concurrency", "concurrency": 4}, "stop": {"requests": 30}},
                     "limits": {"max_passes": 37}}, worker(**ROOFLINE, parallelism={"replicas": 2}))
    same_error_both_ways(with_async(closed, asynchronous), "max_passes")
    staged = merged({"traffic": {"load": {"type": "stages", "arrivals": "constant",
                                          "stages": [{"requests_per_second": 10, "requests": 20}]}},
                     "limits": {"max_requests": 3}})
    staged["traffic"]["stop"] = {}
    same_error_both_ways(with_async(staged, asynchronous), "max_requests")


FIXED_10 = {"type": "fixed", "prefill_ms": 10, "decode_ms": 10}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_limit_error_raised_by_a_finish_inside_a_run_leaves_the_pass_by_pass_state(ranks, asynchronous):
    """A closed loop of three with ``limits.max_requests: 3``: the first finish's callback, sending request 3,
    fails the run. On one rank that finish calls back inside a run, and a request finishing in the same pass
    after it has no finish time (pass by pass, its pass stopped there); on two ranks the pass of the rank
    that fails ends on its own, so that the other rank has not finished it. Found by a review's fuzzing."""
    data = merged({"traffic": {"source": {"input_tokens": {"min": 1, "max": 60},
                                          "output_tokens": {"min": 1, "max": 3 if ranks == 1 else 40}}},
                   "limits": {"max_requests": 3}},
                  worker(timing=FIXED_10, parallelism={"attention_data": ranks}))
    data["traffic"]["load"] = {"type": "concurrency", "concurrency": 3}
    data["traffic"]["stop"] = {"max_virtual_time_seconds": 20.0}
    same_error_both_ways(with_async(data, asynchronous), "max_requests")


@pytest.mark.parametrize(("stop", "quiet"), [({"requests": 30}, True), ({"max_virtual_time_seconds": 20.0}, False)])
def test_callbacks_are_quiet_only_where_the_load_cannot_break_the_request_limit(stop, quiet):
    """A closed loop stopped at 30 requests can never create request 30 (``limits.max_requests`` is above it:
    the configuration refuses a stop over it), so no callback can fail a run; stopped by time only, the load
    may go on past any limit, and a run of two ranks ends before a finish that calls back."""
    data = merged(worker(timing=FIXED_10, parallelism={"attention_data": 2}))
    data["traffic"]["load"] = {"type": "concurrency", "concurrency": 3}
    data["traffic"]["stop"] = stop
    sim = Simulation(parse_scenario(data, Path(".")))
    assert [worker.quiet_callbacks for worker in sim.workers] == [quiet]


@pytest.mark.parametrize("load", [{"type": "concurrency", "concurrency": 2},
                                  {"type": "poisson", "requests_per_second": 50}])
def test_an_error_after_a_decision_admitted_a_handoff_leaves_the_requests_running(load):
    """Async P/D (fixed 10 ms passes): ``limits.max_passes`` fails the run as a decode row starts, after the
    decision that admitted a handoff into the row after it: that request stays in its rank's running list, as
    pass by pass (it used to be dropped from it). Found by a review's fuzzing."""
    data = merged({"engine": {"mode": "disaggregated",
                              "kv_transfer": {"bandwidth_gb_per_second": 50, "bytes_per_token": 131072},
                              "workers": {"prefill": {"timing": FIXED_10}, "decode": {"timing": FIXED_10}}},
                   "traffic": {"source": {"input_tokens": {"min": 10, "max": 50},
                                          "output_tokens": {"min": 1, "max": 10}}},
                   "limits": {"max_passes": 14 if load["type"] == "concurrency" else 16}})
    data["traffic"]["load"], data["traffic"]["stop"] = load, {"requests": 30}
    del data["engine"]["workers"]["aggregated"]
    same_error_both_ways(with_async(data, True), "max_passes")


def test_a_run_stopped_and_resumed_is_the_same_run():
    """``run(until=...)`` in slices: no coalesced pass may end past a slice's end, so the state at every
    stop, and the final outputs, are those of the pass-by-pass run."""
    data = SCENARIOS["roofline"]
    sim_a = Simulation(parse_scenario(data, Path(".")), coalesce=False)
    sim_b = Simulation(parse_scenario(data, Path(".")), coalesce=True)
    for until in (0.5, 1.0, 1.7, 2.5):
        a, b = sim_a.run(until=until), sim_b.run(until=until)
        assert sim_a.env.now == sim_b.env.now
        running_a = [[q.request_id for q in r.running] for w in sim_a.workers for r in w.ranks]
        running_b = [[q.request_id for q in r.running] for w in sim_b.workers for r in w.ranks]
        assert running_a == running_b
        assert len(a.passes) == len(b.passes)
    assert_same(sim_a.run(), sim_b.run())


def test_the_pass_limit_is_hit_at_the_same_pass(tmp_path):
    """A run never takes the passes past ``limits.max_passes``: the error comes at the same pass."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 400)])
    data = trace_scenario(trace, limits={"max_passes": 57})
    messages = []
    for coalesce in (False, True):
        sim = Simulation(parse_scenario(data, Path(".")), coalesce=coalesce)
        with pytest.raises(SimulationError, match="max_passes") as info:
            sim.run()
        messages.append((str(info.value), sim.env.now, sim.limits.num_passes))
    assert messages[0] == messages[1]
    # 1 prefill pass (20 ms) then decodes of 10 ms: pass 58 would start at 20 + 56 × 10 ms
    assert messages[0][2] == 58


def test_from_yaml_passes_the_choice_on():
    path = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"
    sim = Simulation.from_yaml(path, overrides=["traffic.stop.requests=5"], coalesce=False)
    assert [w.coalesce for w in sim.workers] == [False]
    assert all(w.coalesce for w in Simulation.from_yaml(path, overrides=["traffic.stop.requests=5"]).workers)


# -- cases found by review (each failed before its fix) -------------------------------------------------

def same_error_both_ways(data: dict, match: str) -> None:
    """The run fails with the same error both ways, at the same instant, with the same pass count, and the
    results read after it (requests, passes, events, summary) are the same."""
    states, results = [], []
    for coalesce in (False, True):
        sim = Simulation(parse_scenario(copy.deepcopy(data), Path(".")), coalesce=coalesce)
        with pytest.raises(SimulationError, match=match):
            sim.run()
        results.append(sim.results())
        queues = [([q.request_id for q in rank.running], [q.request_id for q in rank.waiting], rank.num_passes,
                   rank.pool.num_used_blocks) for w in sim.workers for rank in w.ranks]
        states.append((sim.env.now, sim.limits.num_passes, [q.num_computed_tokens for q in sim.requests], queues))
    assert states[0] == states[1]
    assert_same(*results)


def same_both_ways(data: dict) -> None:
    for asynchronous in (False, True):
        case = with_async(data, asynchronous)
        assert_same(run(case, coalesce=False)[1], run(case, coalesce=True)[1])


def test_two_ranks_short_of_blocks_in_one_run(tmp_path):
    """DP 2 with 12 blocks a rank: both ranks run out of KV inside one candidate run (the KV bound of the
    second rank used to be computed with arrays sized for the first's)."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 150, 0), (0.0, 20, 150, 0), (0.0, 30, 150, 1),
                                                 (0.0, 10, 150, 1)])
    data = trace_scenario(trace, engine={"context_length": 192, "workers": {"aggregated": {
        "parallelism": {"attention_data": 2},
        "kv_cache": {"prefix_caching": False, "block_size": 16, "capacity": {"type": "fixed", "blocks": 12}}}}})
    data["traffic"]["stop"] = {"requests": 4}
    same_both_ways(data)


@pytest.mark.parametrize("rows", [
    [(0.0, 100, 3), (0.01, 100, 3), (0.02, 100, 3)],
    [(0.0, 100, 10), (0.025, 100, 3), (0.03, 100, 3)],
])
def test_a_later_arrival_on_the_last_pass_end(tmp_path, rows):
    """A run spanning an arrival must not end exactly when a later request arrives: that arrival's events
    come before the pass end's (fixed 20/10 ms passes, arrivals on pass boundaries)."""
    data = trace_scenario(write_csv_trace(tmp_path / "t.csv", rows))
    data["traffic"]["stop"] = {"requests": len(rows)}
    same_both_ways(data)


def test_the_request_limit_inside_a_spanned_arrival(tmp_path):
    """limits.max_requests broken by an arrival a run would span: the error comes with the same state."""
    data = merged(worker(**ROOFLINE), {"traffic": {"load": {"type": "poisson", "requests_per_second": 3}}})
    data["traffic"]["stop"] = {"max_virtual_time_seconds": 60}
    data["limits"] = {"max_requests": 2}
    same_error_both_ways(data, "max_requests")


ROOMY = {"capacity": {"type": "fixed", "blocks": 20_000}}
"""KV for every request at once: runs end at arrivals, not for want of blocks."""


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name, part", [
    # prompts up to 900 tokens against a 256-token budget: most arrivals are admitted as a chunk, so the
    # pass planned after them runs on its own
    ("chunked-prefills", worker(**POLYNOMIAL, kv_cache=ROOMY, scheduler={"max_batched_tokens": 256})),
    # at most 10 running: an arrival finding 10 waits, and the planned pass admits nothing; the run goes on
    # and admits it in the pass planned after the next finish
    ("sequence-limit", worker(**ROOFLINE, kv_cache=ROOMY, scheduler={"max_sequences": 10})),
    ("prefix-caching", worker(**POLYNOMIAL, kv_cache={**ROOMY, "prefix_caching": True})),
])
def test_runs_carried_past_arrivals_change_nothing(monkeypatch, name, part, asynchronous):
    """One worker, open loop: a run admits each arrival in the pass planned after it and goes on
    (``carried_run``), or hands that pass, planned already, to the worker when it must run on its own (a
    chunk, a request left waiting). Outputs are those of the pass-by-pass run; the counts show both ways
    are taken."""
    from simmodel.engine.planner import run as planned_run

    counts = {"admitted in a run": 0, "left to the worker": 0}
    take = planned_run.Run.take

    def counting_take(self, *args):
        taken = take(self, *args)
        counts["admitted in a run" if taken else "left to the worker"] += 1
        return taken

    monkeypatch.setattr(planned_run.Run, "take", counting_take)
    data = with_async(merged(part, {"traffic": {"load": {"requests_per_second": 8}}}), asynchronous)
    sim_a, by_pass = run(data, coalesce=False)
    sim_b, coalesced = run(data, coalesce=True)
    assert_same(by_pass, coalesced)
    assert pool_state(sim_a) == pool_state(sim_b)  # block ids and cached blocks, not only what they decide
    slots_in_runs = name == "sequence-limit"  # waiting for a slot is carried: admitted after a finish
    assert counts["left to the worker"] > 10 or name == "prefix-caching" or slots_in_runs, counts
    assert counts["admitted in a run"] > (10 if name != "chunked-prefills" else 0), counts


MS = 1_000_000
TIMELINES = {
    # Synchronous, by hand, with the fixed 20 ms prefill / 10 ms decode timing (a mixed pass costs both):
    # A (100 → 50) prefills 0–20 ms and decodes 10 ms a pass, so pass j ends at 20 + 10j ms; B (40 → 20)
    # arrives at 55 ms, in pass 4 (50–60), and is admitted by pass 5 (60–90, mixed), so pass 5 + i ends at
    # 90 + 10i; C (30 → 3) arrives at 163 ms, in pass 13 (160–170), and is admitted by pass 14 (170–200),
    # so pass 14 + i ends at 200 + 10i. C's tokens end passes 14–16 (220 ms), B's 5–24 (300 ms), A's 0–49
    # (550 ms).
    "sync": ([0, 60, 170], [20, 90, 200], [550, 300, 220]),
    # Async: pass i is planned when pass i − 2 ends (pass 1 at once, when pass 0 is launched), so an
    # arrival joins the pass planned at the first pass end after it. A as above; B is admitted by the plan
    # made at 60 ms (the end of pass 4), pass 6, which runs after pass 5 (70–100 ms, mixed), so pass 6 + i
    # ends at 100 + 10i; C is admitted at 170 ms (the end of pass 13) into pass 15 (180–210 ms), so pass
    # 15 + i ends at 210 + 10i. C's tokens end passes 15–17 (230 ms), B's 6–25 (310 ms), A's 0–49 (550 ms).
    "async": ([0, 60, 170], [20, 100, 210], [550, 310, 230]),
}


@pytest.mark.parametrize("coalesce", [False, True], ids=["pass-by-pass", "coalesced"])
@pytest.mark.parametrize("mode", TIMELINES)
def test_arrivals_admitted_inside_a_run(tmp_path, monkeypatch, mode, coalesce):
    """A decodes alone; B and C arrive mid-pass and join the pass planned after their arrival, inside one
    carried run (``TIMELINES`` has the hand-derived times)."""
    from simmodel.engine.planner import run as planned_run

    admitted = []
    column = planned_run.Run._column

    def counting(self, request, *args):
        admitted.append(request.request_id)
        return column(self, request, *args)

    monkeypatch.setattr(planned_run.Run, "_column", counting)
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 50), (0.055, 40, 20), (0.163, 30, 3)])
    sim = Simulation(parse_scenario(with_async(trace_scenario(trace), mode == "async"), Path(".")),
                     coalesce=coalesce)
    result = sim.run()
    admitted_at, first_token, finished = TIMELINES[mode]
    assert [q.first_admitted_at for q in sim.requests] == [t * MS for t in admitted_at]
    assert [q.first_token_at for q in sim.requests] == [t * MS for t in first_token]
    assert [q.finished_at for q in sim.requests] == [t * MS for t in finished]
    assert len(result.passes) == 50
    assert admitted == ([1, 2] if coalesce else [])


@pytest.mark.parametrize("rows", [
    [(0.0, 100, 100), (0.045, 50, 20), (0.060, 30, 20)],  # the second arrival at the end of the pass after
    [(0.0, 100, 100), (0.045, 50, 20), (0.055, 30, 20)],  # the first's admission: that pass is delivered
])
def test_an_async_admission_then_an_arrival_at_the_next_pass_end(tmp_path, rows):
    """Async, an admission at the end of pass d plans pass d + 2, so the run must deliver pass d + 1 too: an
    arrival exactly at its end (fixed timing: 0.060 s is the end of pass 4) must not end the run before it."""
    data = with_async(trace_scenario(write_csv_trace(tmp_path / "t.csv", rows)), True)
    sim_a, by_pass = run(data, coalesce=False)
    sim_b, coalesced = run(data, coalesce=True)
    assert_same(by_pass, coalesced)
    assert pool_state(sim_a) == pool_state(sim_b)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_pass_the_clock_cannot_hold_fails_at_the_same_pass(tmp_path, monkeypatch, asynchronous):
    """A timing model pricing one admitting pass (a 37-token prompt) at 1e30 s: the run stops with the same
    error, at the same instant and with the same passes, events and pass count, whether the arrival is
    admitted inside a carried run or pass by pass (the carried run leaves that pass to the worker)."""
    from simmodel.perf import timing

    price = timing.FixedTiming._seconds

    def broken(self, sums):
        seconds, labels = price(self, sums)
        return np.where(sums.kinds()[0][:, timing.NEW_TOKENS] == 37, 1e30, seconds), labels

    monkeypatch.setattr(timing.FixedTiming, "_seconds", broken)
    data = with_async(trace_scenario(write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 100), (0.045, 37, 20)])),
                      asynchronous)
    same_error_both_ways(data, "priced a pass at 1e\\+30 s")


@pytest.mark.parametrize("bound", ["slots", "kv"])
@pytest.mark.parametrize("caching", [False, True], ids=["counted-blocks", "prefix-caching"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_runs_carried_while_requests_wait_change_nothing(monkeypatch, bound, caching, asynchronous):
    """Overload: 40 req/s into at most 8 sequences (``slots``), or into 700 KV blocks of 16 tokens, about 13
    prompts of the mean 460 tokens with their outputs (``kv``), so requests wait nearly all the time. A
    carried run goes on and, in the pass planned after each finish, tries to admit the next waiting request
    with the scheduler's own admission. Outputs and KV pools are those of the pass-by-pass run; with slots
    the bound, many admissions happen that way."""
    from simmodel.engine.planner import run as planned_run

    admitted_for_a_slot = 0
    admit = planned_run.Run.admit

    def counting_admit(self, *args):
        nonlocal admitted_for_a_slot
        outs = admit(self, *args)  # one output per rank (one rank here)
        admitted_for_a_slot += bool(self.waits[0] and outs[0].admitted)
        return outs

    monkeypatch.setattr(planned_run.Run, "admit", counting_admit)
    kv = {"capacity": {"type": "fixed", "blocks": 4000 if bound == "slots" else 700}, "prefix_caching": caching}
    scheduler = {"max_sequences": 8 if bound == "slots" else 256}
    data = with_async(merged(worker(**POLYNOMIAL, kv_cache=kv, scheduler=scheduler),
                             {"traffic": {"load": {"requests_per_second": 40}}}), asynchronous)
    if caching:
        data["traffic"]["source"]["shared_prefix"] = {"tokens": 128, "groups": 3}
    sim_a, by_pass = run(data, coalesce=False)
    sim_b, coalesced = run(data, coalesce=True)
    assert_same(by_pass, coalesced)
    assert pool_state(sim_a) == pool_state(sim_b)
    assert by_pass.summary["num_requests_waiting_peak"] > 50  # the queue really builds up
    if bound == "slots":
        assert admitted_for_a_slot > 15, admitted_for_a_slot
    else:  # KV-bound overload preempts as decodes grow, which ends runs: few get that far
        assert by_pass.summary["num_preemptions"] > 0
