"""Every ready scenario in ``scenarios/`` validates and runs (cut to a few requests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simmodel.sim import Simulation

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_ready_scenario_runs(path: Path) -> None:
    results = Simulation.from_yaml(path, ["traffic.stop.requests=12"], keep_events=False).run()
    assert results.summary["completed_requests"] == 12
