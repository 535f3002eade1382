"""The terminal progress bar: it only reads the run, draws on the given stream, and erases itself."""

from __future__ import annotations

import io
from pathlib import Path

from factories import make_scenario

from simmodel import sim as sim_module
from simmodel.cli import ProgressBar
from simmodel.config.load import parse_scenario
from simmodel.sim import Simulation


def scenario() -> dict:
    return make_scenario(traffic={"load": {"concurrency": 2}, "stop": {"requests": 40}})


def test_a_run_with_progress_gives_the_same_results(monkeypatch):
    monkeypatch.setattr(sim_module, "PROGRESS_EVERY", 7)  # many calls in a small run
    calls = []
    plain = Simulation(parse_scenario(scenario(), Path("."))).run()
    watched = Simulation(parse_scenario(scenario(), Path("."))).run(progress=lambda s: calls.append(s.num_finished))
    assert watched.requests.equals(plain.requests) and watched.passes.equals(plain.passes)
    assert len(calls) > 5 and calls == sorted(calls) and calls[-1] == 40


def test_progress_bar_draws_then_erases(monkeypatch):
    monkeypatch.setattr(sim_module, "PROGRESS_EVERY", 7)
    stream = io.StringIO()
    sim = Simulation(parse_scenario(scenario(), Path(".")))
    bar = ProgressBar(sim, stream)
    bar._shown = -1e9  # draw at the first call
    sim.run(until=0.5)
    bar(sim)
    text = stream.getvalue()
    assert "/40 requests" in text and "s simulated" in text
    sim.run(progress=bar)
    assert stream.getvalue().endswith("\r\033[K")


def test_cli_prints_no_progress_when_stderr_is_not_a_terminal(tmp_path):
    import subprocess
    import sys

    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario()))
    proc = subprocess.run([sys.executable, "-m", "simmodel.cli", "run", "-c", str(path), "--format", "json"],
                          capture_output=True, text=True, check=True)
    assert proc.stderr == ""
