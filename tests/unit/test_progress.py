"""The terminal progress bar: it only reads the run, draws on the given stream, and erases itself."""

from __future__ import annotations

import io
import json
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


def test_a_time_cut_run_ends_at_the_cut_with_or_without_progress():
    """Concurrency 2 of 100→5 requests goes on for ever (no request limit); cut at 0.105 s, between two
    passes (each takes 10 or 20 ms, so no pass ends at 0.105): the clock, and so the run's duration, is
    the cut itself whether or not the run shows progress (a heartbeat off a terminal must not change it)."""
    data = make_scenario(traffic={"load": {"concurrency": 2}, "stop": {"requests": None,
                                                                      "max_virtual_time_seconds": 0.105}})
    plain = Simulation(parse_scenario(data, Path(".")))
    watched = Simulation(parse_scenario(data, Path(".")))
    a, b = plain.run(), watched.run(progress=lambda s: None)
    assert plain.now == watched.now == 0.105
    assert a.summary["duration_s"] == b.summary["duration_s"]
    assert a.requests.equals(b.requests) and a.passes.equals(b.passes)


def test_progress_bar_draws_then_erases(monkeypatch):
    monkeypatch.setattr(sim_module, "PROGRESS_EVERY", 7)
    stream = io.StringIO()
    sim = Simulation(parse_scenario(scenario(), Path(".")))
    now = [0.0]
    bar = ProgressBar(sim, stream, tty=True, clock=lambda: now[0])
    sim.run(until=0.5)
    now[0] = 0.5  # half a second after the start: the first redraw
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
    for quiet in ((), ("--quiet",)):  # a run of well under 10 s: no heartbeat either
        proc = subprocess.run([sys.executable, "-m", "simmodel.cli", "run", "-c", str(path), "--format", "json",
                               *quiet], capture_output=True, text=True, check=True)
        assert proc.stderr == ""


def test_heartbeat_off_a_terminal_every_ten_seconds_of_wall_time():
    """Off a terminal, a line once 10 s of (fake) wall time have passed since the last. Closed loop of 2,
    100→5 requests, sync: cycles of 60 ms, 5 passes (prefill 20 ms, four 10 ms decodes), 2 requests each.
    At 0.456 s: 7 cycles (35 passes, 14 requests) + prefill 420–440 + decode 440–450 = 37 passes, over 10 s:
    3.7 passes/s. At 0.956 s: 15 cycles (75 passes, 30 requests) + prefill + 3 decodes to 950 = 79 passes,
    42 more over the next 10 s: 4.2 passes/s."""
    stream = io.StringIO()
    sim = Simulation(parse_scenario(scenario(), Path(".")))
    now = [0.0]
    bar = ProgressBar(sim, stream, tty=False, clock=lambda: now[0])
    sim.run(until=0.456)
    for now[0] in (5.0, 9.99):
        bar(sim)
    assert stream.getvalue() == ""  # under 10 s since the start
    now[0] = 10.0
    bar(sim)
    sim.run(until=0.956)
    for now[0] in (19.99, 20.0):
        bar(sim)
    assert stream.getvalue().splitlines() == [
        "simmodel: 14/40 requests done, 0.46 s simulated, 3.7 passes/s",
        "simmodel: 30/40 requests done, 0.96 s simulated, 4.2 passes/s"]
    sim.run(progress=bar)  # the end, within 10 s: nothing more, and nothing to erase
    assert len(stream.getvalue().splitlines()) == 2


def test_quiet_silences_the_heartbeat(tmp_path, monkeypatch):
    """The CLI's run with a heartbeat due at every call: lines on stderr, none with --quiet."""
    import yaml
    from click.testing import CliRunner

    from simmodel.cli import cli

    monkeypatch.setattr(sim_module, "PROGRESS_EVERY", 7)
    monkeypatch.setattr(ProgressBar, "HEARTBEAT_S", 0.0)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario()))
    loud = CliRunner().invoke(cli, ["run", "-c", str(path), "--format", "json"])
    assert loud.exit_code == 0 and "requests done," in loud.stderr and "passes/s" in loud.stderr
    quiet = CliRunner().invoke(cli, ["run", "-c", str(path), "--format", "json", "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    a, b = json.loads(loud.stdout), json.loads(quiet.stdout)
    a.pop("wall_time_s"), b.pop("wall_time_s")
    assert a == b  # the heartbeat only reads the run
