"""Simulate one API call: its deployment serving its requests, in a simulation of its own.

Each call builds and runs its own ``Simulation`` (no batch is ever shared between calls), on a trace written to
a temporary folder that is removed with the call: results are transient. The scenario is parsed and checked as
``simmodel run`` does, so a call gets the same one-line errors (``CallError``) a YAML file would.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from simmodel.config.load import parse_scenario
from simmodel.config.schema import Scenario
from simmodel.errors import ScenarioError, SimulationError
from simmodel.export import json_clean
from simmodel.serve import results
from simmodel.serve.workload import (
    READY_DIR,
    Arrival,
    ServeLimits,
    WorkloadError,
    arrival_order,
    check,
    deployment,
    ready_scenarios,
    with_requests,
)
from simmodel.sim import Results, Simulation, serving_context_length


class CallError(ValueError):
    """The call cannot be simulated as asked: ``field`` names what to change (422)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass
class Simulated:
    """A call's run: the parsed scenario, the results, and which call request each simulated id is."""

    scenario: Scenario
    results: Results
    order: list[int]


def ready_path(name: str, folder: Path = READY_DIR) -> Path:
    """The file of the ready scenario a call names, if a call can run it (``unusable``)."""
    ready = ready_scenarios(folder)
    if name not in ready:
        names = ", ".join(usable_scenarios(folder)) or "none found"
        raise WorkloadError("scenario", f"no ready scenario named {name!r} (ready: {names})")
    why = unusable(ready[name])
    if why is not None:
        raise WorkloadError("scenario", f"{name!r} is not a deployment a call can run: {why}")
    return ready[name]


def simulate(ready: Path | None, engine: dict | None, arrivals: list[Arrival], scheduler: dict | None,
             limits: ServeLimits) -> Simulated:
    """Run ``arrivals`` on the deployment (a ready scenario's file, ``ready_path``, or an engine block)."""
    try:
        data, base_dir = deployment(ready, engine)
    except WorkloadError as exc:
        raise CallError(exc.field, exc.message) from None
    sim = None
    with tempfile.TemporaryDirectory(prefix="simmodel-call-") as tmp:
        trace = Path(tmp) / "requests.csv"
        try:
            built = with_requests(data, trace, arrivals, scheduler, limits)
            parsed = parse_scenario(built, base_dir)
            check(arrivals, limits, serving_context_length(parsed))
            sim = Simulation(parsed)
            res = sim.run()
        except WorkloadError as exc:
            raise CallError(exc.field, exc.message) from None
        except ScenarioError as exc:
            raise CallError(_scenario_field(str(exc), engine is not None, bool(scheduler)), str(exc)) from None
        except SimulationError as exc:
            if sim is not None and sim.limits is not None and sim.limits.num_passes >= limits.max_passes:
                raise CallError("requests", f"the run needs more than {limits.max_passes:,} passes, the most a call "
                                            f"may take (simmodel serve --max-passes)") from None
            raise CallError("requests", f"the run stopped: {exc}") from None
    return Simulated(parsed, res, arrival_order(arrivals))


def _scenario_field(message: str, engine: bool, scheduler: bool) -> str:
    """The call's field a configuration error is about: the scheduler overrides when it names a scheduler field
    they set, else the engine block or the ready scenario."""
    path = message.split(":", 1)[0]
    if scheduler and ".scheduler." in path and path.rsplit(".", 1)[-1] in ("max_sequences", "max_batched_tokens"):
        return "scheduler"
    return "engine" if engine else "scenario"


_usable: dict[Path, tuple[float, str | None]] = {}
"""Per ready scenario, its file's modification time and why a call cannot run it (None: it can)."""


def unusable(path: Path) -> str | None:
    """Why a call cannot run a ready scenario's deployment (it needs its own traffic, a planner or a search), or
    None. Asked of a one-request workload, and kept until the file changes."""
    mtime = path.stat().st_mtime
    known = _usable.get(path)
    if known is not None and known[0] == mtime:
        return known[1]
    why = None
    try:
        data, base_dir = deployment(path, None)
        with tempfile.TemporaryDirectory(prefix="simmodel-probe-") as tmp:
            parse_scenario(with_requests(data, Path(tmp) / "r.csv", [Arrival("probe", 0.0, 1, 1)], None,
                                         ServeLimits()), base_dir)
    except (ScenarioError, WorkloadError) as exc:
        why = " ".join(str(exc).split())
    _usable[path] = (mtime, why)
    return why


def usable_scenarios(folder: Path = READY_DIR) -> dict[str, Path]:
    """The ready scenarios a call can run (``unusable``), by name."""
    return {name: path for name, path in ready_scenarios(folder).items() if unusable(path) is None}


def answer(call: Simulated, arrivals: list[Arrival]) -> dict:
    """``POST /api/scenarios``'s answer."""
    res = call.results
    # (a trace is replayed from its first arrival: the call's clock is that much later)
    start = min(a.arrival_s for a in arrivals)
    return {"aggregate": results.aggregate(res.summary),
            "requests": results.request_rows(res.requests, arrivals, call.order, start),
            **results.steps(res.passes, start),
            "scheduler": results.scheduler_of(call.scenario), "assumptions": results.assumptions(call.scenario),
            "provenance_counts": res.summary.get("provenance_counts", {}), "summary": json_clean(res.summary)}
