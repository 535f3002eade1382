"""Hard safety limits: a run that would go past one stops with an error naming it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from factories import make_scenario

from simmodel.config.load import parse_scenario
from simmodel.engine.planner.running import rows_within
from simmodel.errors import ScenarioError, SimulationError
from simmodel.sim import Simulation


def run(data: dict):
    return Simulation(parse_scenario(data, Path("."))).run()


def test_max_passes_stops_the_run():
    """4 requests of 100 → 5 one at a time: 5 passes each (1 prefill, 4 decode) = 20 passes."""
    assert run(make_scenario(limits={"max_passes": 20})).summary["num_passes"] == 20
    with pytest.raises(SimulationError, match=r"limits\.max_passes \(19 passes"):
        run(make_scenario(limits={"max_passes": 19}))


def test_max_requests_stops_an_open_ended_run():
    """A time-bounded Poisson load at 100 req/s for 10 s makes about 1,000 requests: above a limit of 50."""
    data = make_scenario(traffic={"load": {"type": "poisson", "requests_per_second": 100},
                                  "stop": {"requests": None, "max_virtual_time_seconds": 10}},
                         limits={"max_requests": 50})
    with pytest.raises(SimulationError, match=r"limits\.max_requests \(50\)"):
        run(data)


def test_max_virtual_time_stops_the_run():
    """One request every 10 s (constant rate 0.1/s): the fourth arrives at 30 s and its prefill starts then."""
    data = make_scenario(traffic={"load": {"type": "constant_rate", "requests_per_second": 0.1}},
                         limits={"max_virtual_time_seconds": 25})
    with pytest.raises(SimulationError, match=r"30 s of simulated time, beyond limits\.max_virtual_time_seconds"):
        run(data)


@pytest.mark.parametrize("limits, traffic, message", [
    ({"max_requests": 3}, {}, "traffic.stop.requests: 4 is above limits.max_requests (3)"),
    ({"max_virtual_time_seconds": 5}, {"stop": {"max_virtual_time_seconds": 10}},
     "traffic.stop.max_virtual_time_seconds: 10 is above limits.max_virtual_time_seconds (5)"),
    ({"max_passes": 0}, {}, "limits.max_passes: must be a positive integer, got 0"),
    ({"passes": 5}, {}, "limits.passes: unknown field"),
])
def test_limit_rules(limits, traffic, message):
    with pytest.raises(ScenarioError) as info:
        parse_scenario(make_scenario(traffic=traffic, limits=limits), Path("."))
    assert message in str(info.value)


def test_a_run_takes_the_rows_that_end_before_the_horizon_and_start_within_the_time_limit():
    """Passes ending at 10, 20, 30, 40 ns, the first starting at 0 (row k starts where row k − 1 ends)."""
    end = np.array([10, 20, 30, 40])
    assert rows_within(end, 4, float("inf"), None, 0) == 4
    assert rows_within(end, 4, 25, None, 0) == 2       # rows ending at 10 and 20 end before 25
    assert rows_within(end, 4, 20, None, 0) == 1       # a row ending at the horizon itself is left out
    assert rows_within(end, 3, float("inf"), None, 0) == 3
    limit = SimpleNamespace(max_time_ns=15)            # rows starting at 0 and 10 start within it, 20 does not
    assert rows_within(end, 4, float("inf"), limit, 0) == 2
    assert rows_within(end, 4, 15, limit, 0) == 1      # the horizon cuts first
    assert rows_within(end, 4, float("inf"), limit, 16) == 0  # the run would start past the limit
    assert rows_within(end, 0, float("inf"), limit, 0) == 0
