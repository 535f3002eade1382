"""A simulation runs with Python's cyclic garbage collector paused (``engine.collector``). That is sound only
because a run makes no reference cycles: every ready scenario (the searches aside), cut to a few requests, leaves
no cyclic garbage."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest
from factories import make_scenario

from simmodel.config.load import parse_scenario
from simmodel.engine.collector import collector_paused
from simmodel.sim import Simulation

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p for p in (ROOT / "scenarios").glob("*.yaml") if not p.name.startswith("recommend-"))


@pytest.fixture
def collector_on():
    """The collector on for the test, as it was after it."""
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_a_run_makes_no_reference_cycles(path: Path, collector_on) -> None:
    sim = Simulation.from_yaml(path, ["traffic.stop.requests=16"])  # (with its event log: the rows a run keeps)
    gc.collect()
    gc.disable()  # (as the run pauses it, and for what the test does after the run too)
    sim.run()
    assert gc.collect() == 0  # the unreachable objects found: cycles nothing but the collector would free


def test_the_collector_is_paused_during_a_run_and_back_after(collector_on) -> None:
    seen: list[bool] = []
    sim = Simulation(parse_scenario(make_scenario(), Path(".")))
    sim.run(progress=lambda s: seen.append(gc.isenabled()))
    assert seen and not any(seen)
    assert gc.isenabled()
    stepped = Simulation(parse_scenario(make_scenario(), Path(".")))
    stepped.step()
    assert gc.isenabled()


def test_a_collector_turned_off_stays_off(collector_on) -> None:
    gc.disable()
    Simulation(parse_scenario(make_scenario(), Path("."))).run()
    assert not gc.isenabled()


def test_the_collector_is_back_on_after_an_error(collector_on) -> None:
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("stopped")
    assert gc.isenabled()


def test_pauses_nest_and_the_last_one_to_end_turns_it_back_on(collector_on) -> None:
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()  # (an inner pause ending, a run inside a run, leaves the outer one paused)
    assert gc.isenabled()


def test_a_pause_that_ends_first_leaves_another_threads_pause(collector_on) -> None:
    # The main thread's pause begins first and ends first; the other thread's, begun meanwhile, still holds:
    # the collector stays paused until it ends too (``simmodel serve`` runs simulations in worker threads).
    began, ended = threading.Event(), threading.Event()
    seen = []

    def other():
        with collector_paused():
            began.set()
            ended.wait(5)
            seen.append(gc.isenabled())

    thread = threading.Thread(target=other)
    with collector_paused():
        thread.start()
        began.wait(5)
    ended.set()
    thread.join(5)
    assert seen == [False] and gc.isenabled()
