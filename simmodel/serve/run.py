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
from simmodel.serve import results
from simmodel.serve.workload import (
    READY_DIR,
    Arrival,
    ServeLimits,
    WorkloadError,
    arrival_order,
    check,
    deployment,
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


def simulate(scenario: str | None, engine: dict | None, arrivals: list[Arrival], scheduler: dict | None,
             limits: ServeLimits, folder: Path = READY_DIR) -> Simulated:
    """Run ``arrivals`` on the deployment (a ready scenario's name, or an engine block)."""
    try:
        data, base_dir = deployment(scenario, engine, folder)
    except WorkloadError as exc:
        raise CallError(exc.field, exc.message) from None
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
            raise CallError("engine" if engine is not None else "scenario", str(exc)) from None
        except SimulationError as exc:
            raise CallError("requests", f"the run went past the server's limits: {exc}") from None
    return Simulated(parsed, res, arrival_order(arrivals))


def answer(call: Simulated, arrivals: list[Arrival]) -> dict:
    """``POST /api/scenarios``'s answer."""
    res = call.results
    return {"aggregate": results.aggregate(res.summary),
            "requests": results.request_rows(res.requests, arrivals, call.order),
            **results.steps(res.passes),
            "scheduler": results.scheduler_of(call.scenario), "assumptions": results.assumptions(call.scenario),
            "provenance_counts": res.summary.get("provenance_counts", {}), "summary": _jsonable(res.summary)}


def _jsonable(value):
    """The summary as JSON holds it (NaN and infinities as null, numpy scalars as numbers)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value
