"""Hand-derived pauses of ``Simulation.step()`` and ``run(until=...)``.

The factory's scenario (``make_scenario``): one client (concurrency 1) sends 4 requests of 100 → 5 tokens
one after another; fixed timing, a pass with prefill 20 ms, a decode pass 10 ms; synchronous scheduling.
So request i arrives at 60·i ms and is admitted then, its prefill pass ends at 60·i + 20 (first token),
its four decode passes end 10 ms apart, the last at 60·i + 60 (finish), when the next request arrives.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from factories import make_scenario, trace_scenario, write_csv_trace

from simmodel import Simulation
from simmodel.config.load import parse_scenario


def simulation(data: dict | None = None, **options) -> Simulation:
    return Simulation(parse_scenario(make_scenario() if data is None else data, Path(".")), **options)


def pauses(sim: Simulation, **step_options) -> list[float]:
    """The instants (ms) at which ``step`` pauses, to the end."""
    times = []
    while sim.step(**step_options):
        times.append(round(sim.now * 1000, 6))
    return times


def test_step_pauses_at_arrivals_admissions_first_tokens_and_finishes():
    # each request: arrival and admission at 60·i, first token at 60·i + 20; a finish at 60·i + 60 is the
    # next request's arrival (the decode passes between change nothing but token counts)
    assert pauses(simulation()) == [0, 20, 60, 80, 120, 140, 180, 200, 240]


def test_step_with_passes_pauses_at_every_pass_boundary_too():
    # the prefill pass 0–20, then decode passes ending every 10 ms; no pass runs between two requests
    # (the next one arrives at the instant the last pass ends)
    expected = [t + 60 * i for i in range(4) for t in (0, 20, 30, 40, 50)] + [240]
    assert pauses(simulation(), passes=True) == expected


def test_without_an_event_log_step_pauses_at_every_instant_anything_happens():
    # every instant is a pass end or an arrival: as above
    expected = [t + 60 * i for i in range(4) for t in (0, 20, 30, 40, 50)] + [240]
    assert pauses(simulation(keep_events=False)) == expected


def test_a_pause_shows_the_tokens_sampled_so_far_and_no_later():
    sim = simulation()
    sim.step()
    sim.step()  # 20 ms: request 0's prefill pass sampled its first token; its decode passes are to come
    (r0,) = sim.requests
    assert (sim.now, r0.num_output_tokens, r0.first_token_at, r0.finished_at) == (0.02, 1, 20_000_000, None)
    assert sim.events.time_s.max() == 0.02
    sim.step()  # 60 ms: request 0 finished (4 decode passes), request 1 arrived and was admitted
    assert [(r.request_id, r.num_output_tokens, r.status.name) for r in sim.requests] == [
        (0, 5, "FINISHED"), (1, 0, "RUNNING")]
    assert sim.events.time_s.max() == 0.06


def test_step_after_run_until_and_run_after_steps_keep_the_outcome():
    # run(until=45 ms) pauses mid-decode of request 0 (passes ended at 20, 30, 40: 3 tokens), the next
    # step pauses at its finish (60 ms); the run's outputs are those of a run never paused
    sim = simulation()
    sim.run(until=0.045)
    assert (sim.now, sim.requests[0].num_output_tokens) == (0.045, 3)
    sim.step()
    assert sim.now == 0.06
    results, unpaused = sim.run(), simulation().run()
    for name in ("requests", "passes", "events"):
        assert getattr(results, name).equals(getattr(unpaused, name)), name


def test_step_returns_false_once_the_run_is_over():
    sim = simulation()
    sim.run()
    assert sim.step() is False and sim.now == 0.24


def test_results_taken_while_a_prefill_leg_waits_do_not_count_its_preemption_twice(tmp_path):
    """1P1D, the prefill rank 10 blocks of 16 tokens, 64-token prefill budget, admission needing only the
    first chunk's blocks (``reserve_full_isl: false``), one sequence at a time (the prefill default); KV
    sent at 0.1 GB/s, 131,072 bytes a token. A (40 tokens) and B (150) arrive at 0. A's prefill pass 0–20 ms
    (3 blocks, held until its transfer ends: 40 × 131,072 B / 0.1 GB/s = 52.4 ms, at 72.4 ms); B's first
    chunk 20–40 ms (64 tokens, 4 blocks). At 40 its next chunk needs 4 more: 3 + 8 = 11 > 10 blocks, so B is
    preempted, once: it resumes when A's blocks come back, and its 150 tokens then fit (3 + 10 would not,
    but A's are gone). Paused at 50 ms, B is still on the prefill worker; the results then, and at the end,
    show that one preemption (taking results used to write it into the request, and the handoff added it
    again)."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 40, 3), (0.0, 150, 3)])
    data = trace_scenario(trace, engine={"context_length": 160})
    role = data["engine"]["workers"].pop("aggregated")
    prefill = copy.deepcopy(role)
    prefill["kv_cache"]["capacity"]["blocks"] = 10
    prefill["scheduler"].update(max_batched_tokens=64, reserve_full_isl=False)
    data["engine"].update({"mode": "disaggregated", "workers": {"prefill": prefill, "decode": role},
                           "kv_transfer": {"bandwidth_gb_per_second": 0.1, "bytes_per_token": 131072}})
    sim = simulation(data)
    paused = sim.run(until=0.05).requests
    assert paused.preemptions.tolist() == [0, 1]
    assert paused.prefill_done_s.isna().tolist() == [False, True]  # B is still on the prefill worker
    final = sim.run().requests
    assert final.preemptions.tolist() == [0, 1]
    assert final.transfer_start_s.tolist() == pytest.approx([0.02, final.prefill_done_s[1]])
