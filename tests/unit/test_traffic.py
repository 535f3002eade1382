"""Length samplers, arrival processes and placement."""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_scenario, run_scenario, trace_scenario, write_csv_trace

from simmodel.config.schema import LengthSpec, LoadSpec
from simmodel.traffic.arrivals import gaps
from simmodel.traffic.lengths import sample_lengths


def test_fixed_and_uniform_lengths():
    rng = np.random.default_rng(0)
    assert sample_lengths(LengthSpec("fixed", value=7), rng, 3).tolist() == [7, 7, 7]
    draws = sample_lengths(LengthSpec("uniform", min=3, max=5), rng, 20_000)
    assert set(draws.tolist()) == {3, 4, 5}  # inclusive bounds
    assert draws.mean() == pytest.approx(4, abs=0.03)


def test_lognormal_is_parameterised_by_the_lengths_mean_and_std():
    """For lognormal lengths with mean m and std s: σ² = ln(1 + s²/m²), μ = ln m − σ²/2."""
    draws = sample_lengths(LengthSpec("lognormal", mean=1000, std=500, min=1), np.random.default_rng(1), 200_000)
    assert draws.mean() == pytest.approx(1000, rel=0.01)
    assert draws.std() == pytest.approx(500, rel=0.02)


def test_normal_is_rounded_and_clipped():
    draws = sample_lengths(LengthSpec("normal", mean=10, std=20, min=5, max=12), np.random.default_rng(2), 1000)
    assert draws.min() == 5 and draws.max() == 12


def test_choice_respects_weights():
    draws = sample_lengths(LengthSpec("choice", values=(1, 9), weights=(3.0, 1.0)), np.random.default_rng(3), 40_000)
    assert (draws == 1).mean() == pytest.approx(0.75, abs=0.01)


def test_poisson_gaps_are_exponential_with_mean_one_over_rate():
    g = gaps(LoadSpec("poisson", requests_per_second=8.0), np.random.default_rng(4), 100_000)
    assert g.mean() == pytest.approx(1 / 8, rel=0.01)
    assert g.std() == pytest.approx(1 / 8, rel=0.02)  # exponential: std equals mean
    assert g.min() < 1e-4  # not clipped


def test_poisson_run_starts_at_zero_and_uses_its_own_seed():
    base = make_scenario(traffic={"load": {"type": "poisson", "requests_per_second": 5, "seed": 11},
                                  "stop": {"requests": 5}})
    a, b = run_scenario(base), run_scenario({**base, "engine": {**base["engine"], "seed": 99}})
    assert a.requests.arrival_s.iloc[0] == 0.0
    # the load's own seed fixes the arrivals whatever the engine seed
    assert a.requests.arrival_s.tolist() == b.requests.arrival_s.tolist()


def test_placement_round_robin_over_workers_then_ranks(tmp_path):
    """2 workers × 2 ranks: requests 0..5 go to (w0 r0), (w1 r0), (w0 r1), (w1 r1), (w0 r0), (w1 r0)."""
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 50, 2)] * 6)
    res = run_scenario(trace_scenario(trace, engine={"workers": {"aggregated": {
        "parallelism": {"replicas": 2, "attention_data": 2}}}}))
    assert list(zip(res.requests.worker, res.requests.dp_rank)) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 0), (1, 0)]


def test_trace_dp_rank_is_kept(tmp_path):
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 50, 2, 1), (0.0, 50, 2, 1), (0.0, 50, 2, 0)])
    res = run_scenario(trace_scenario(trace, engine={"workers": {"aggregated": {
        "parallelism": {"attention_data": 2}}}}))
    assert res.requests.dp_rank.tolist() == [1, 1, 0]


def test_trace_dp_rank_out_of_range_is_rejected(tmp_path):
    from simmodel.errors import ScenarioError

    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 50, 2, 3)])
    with pytest.raises(ScenarioError, match="row 1 names dp_rank 3 but aggregated workers have attention_data 2"):
        run_scenario(trace_scenario(trace, engine={"workers": {"aggregated": {"parallelism": {"attention_data": 2}}}}))


def test_trace_speedup_divides_timestamps(tmp_path):
    trace = write_csv_trace(tmp_path / "t.csv", [(0.0, 50, 2), (1.0, 50, 2)])
    res = run_scenario(trace_scenario(trace, traffic={"load": {"type": "trace_timestamps", "speedup": 4}}))
    assert res.requests.arrival_s.tolist() == [0.0, 0.25]


def test_an_arrival_far_beyond_the_run_is_never_drawn_for():
    """``RequestStream.arrival_before``: at a constant 10 req/s request i arrives at i / 10 s (the first at 0),
    so request 5 comes at 0.5 s, before 1 s, and request 20 at 2 s, not before 1 s. Request 10,000,000 (a
    limit a worker's horizon asks about) is not before 1 s either, and finding that draws nothing near ten
    million arrivals: only those up to 1 s."""
    from pathlib import Path

    from factories import make_scenario

    from simmodel.config.load import parse_scenario
    from simmodel.traffic.source import RequestStream

    data = make_scenario(traffic={"load": {"type": "constant_rate", "requests_per_second": 10},
                                  "stop": {"requests": None, "max_virtual_time_seconds": 60}})
    stream = RequestStream(parse_scenario(data, Path(".")), None)
    assert stream.arrival_before(5, 1.0) == pytest.approx(0.5)  # (sums of 0.1 s gaps)
    assert stream.arrival_before(20, 1.0) is None
    assert stream.arrival_before(10_000_000, 1.0) is None
    assert stream.arrival(20) == pytest.approx(2.0)
