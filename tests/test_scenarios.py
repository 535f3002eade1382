"""Every ready scenario in ``scenarios/`` validates and runs (cut to a few requests); every ready search
scenario (``recommend-*.yaml``) searches (cut to a few requests and candidates)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simmodel.sim import Simulation

ROOT = Path(__file__).resolve().parents[1]
ALL = sorted((ROOT / "scenarios").glob("*.yaml"))
SEARCHES = [p for p in ALL if p.name.startswith("recommend-")]
SCENARIOS = [p for p in ALL if p not in SEARCHES]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_ready_scenario_runs(path: Path) -> None:
    results = Simulation.from_yaml(path, ["traffic.stop.requests=12"], keep_events=False).run()
    assert results.summary["completed_requests"] == 12


@pytest.mark.parametrize("path", SEARCHES, ids=[p.stem for p in SEARCHES])
def test_ready_search_runs(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "simmodel.cli", "recommend", "-c", str(path), "--output-dir",
                           str(out), "--set", "traffic.stop.requests=12", "--set", "optimizer.max_trials=6",
                           "--set", "optimizer.parallelism=2", "--format", "json"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    ledger = json.loads((out / "recommendation.json").read_text())
    assert len(ledger["candidates"]) == 6
    assert not [e for e in ledger["candidates"] if e["status"] in ("failed", "unsupported")]
