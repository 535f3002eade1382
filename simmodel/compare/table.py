"""Measured against simulated: one row per measured figure, with the simulated value of the same
quantity under the measuring tool's definition, and the error."""

from __future__ import annotations

import numpy as np

from simmodel.compare.definitions import SimulatedScope, samples, statistic
from simmodel.compare.measured import Measurement, Scope
from simmodel.sim import Results, Simulation

COLUMNS = ("scope", "metric", "stat", "definition", "measured", "simulated", "error", "error_pct", "abs_error_pct")


def simulated_scopes(sim: Simulation, results: Results) -> dict[int | None, SimulatedScope]:
    """The whole run (key None) and, for a staged load, each stage."""
    rec = sim.recorder
    values = np.frombuffer(rec.itl_values, dtype=np.int64).astype(np.float64) / 1e6
    counts = np.frombuffer(rec.itl_counts, dtype=np.int64)
    summary = results.summary
    scopes = {None: SimulatedScope(results.requests, values, counts, summary["request_throughput_rps"],
                                   summary["output_throughput_tok_s"])}
    if "stages" in summary:
        of_stage = np.frombuffer(rec.itl_stages, dtype=np.int64)
        for block in summary["stages"]:
            k = block["stage"]
            mine = of_stage == k
            scopes[k] = SimulatedScope(results.requests[results.requests["stage"] == k], values[mine], counts[mine],
                                       block["request_throughput_rps"], block["output_throughput_tok_s"])
    return scopes


class Mismatch(str):
    """A note that the scenario does not describe the measured run as the file has it (another request count,
    a measured stage the scenario lacks), as opposed to a note on what is compared."""


COUNTED = ("ntpot", "output_throughput")
"""Figures that divide or multiply by the measuring tool's own count of output tokens."""
COUNT_TOLERANCE = 0.05
"""How far the tool's mean output count may be from the simulated one before ``COUNTED`` figures are set
apart: further, the tool counted other tokens than the server generated (inference-perf re-tokenizes the
streamed text: 193.7 a request for 247 generated on measured vLLM runs), and those figures measure the count."""


def _counted_apart(scope: Scope, simulated: SimulatedScope) -> str | None:
    """A note if the scope's figures per counted token are not compared (see ``COUNT_TOLERANCE``)."""
    counted = next((f.tokens for f in scope.figures if f.tokens is not None), None)
    done = simulated.requests[simulated.requests["status"] == "completed"]
    if counted is None or not len(done):
        return None
    generated = float(done["output_tokens"].mean())
    if abs(counted / generated - 1) <= COUNT_TOLERANCE:
        return None
    names = sorted({f.metric for f in scope.figures if f.definition in COUNTED})
    if not names:
        return None
    return (f"{scope.name}: {' and '.join(names)} not compared: the tool counted {counted:.1f} output tokens a "
            f"request where the simulation generates {generated:.1f} (inference-perf counts by re-tokenizing the "
            f"streamed text), and they are per counted token")


def compare(measurement: Measurement, sim: Simulation, results: Results) -> tuple[list[dict], list[str]]:
    """The comparison rows, and notes on measured scopes that could not be matched with the run."""
    scopes = simulated_scopes(sim, results)
    rows, notes = [], []
    if measurement.requests is not None and measurement.requests != len(results.requests):
        notes.append(Mismatch(f"the measured run sent {measurement.requests} requests, the scenario "
                              f"{len(results.requests)}: they may not describe the same workload"))
    nearest = measurement.tool == "guidellm"
    for scope in measurement.scopes:
        notes += scope.notes
        if scope.stage not in scopes:
            notes.append(Mismatch(f"{scope.name}: not compared, the scenario has no stage {scope.stage} "
                                  f"(give traffic.load.type: stages with one stage per measured stage)"))
            continue
        simulated = scopes[scope.stage]
        skipped = _counted_apart(scope, simulated)
        if skipped:
            notes.append(skipped)
        for fig in scope.figures:
            if skipped and fig.definition in COUNTED:
                continue
            got = samples(fig.definition, simulated, fig.tokens)
            if isinstance(got, tuple):
                value = statistic(got[0], got[1], fig.stat, nearest_rank=nearest)
            else:
                value = got
            error = None if value is None else value - fig.value
            pct = None if error is None or fig.value == 0 else 100.0 * error / fig.value
            rows.append({"scope": scope.name, "metric": fig.metric, "stat": fig.stat, "definition": fig.definition,
                         "measured": fig.value, "simulated": value, "error": error, "error_pct": pct,
                         "abs_error_pct": None if pct is None else abs(pct)})
    return rows, notes


def format_rows(rows: list[dict], notes: list[str], tool: str) -> str:
    """A terminal table grouped by scope."""
    lines = [f"measured by {tool} vs simulated (error = simulated − measured)"]
    width = max([len(r["metric"]) for r in rows] + [6])
    scope = None
    for r in rows:
        if r["scope"] != scope:
            scope = r["scope"]
            lines += ["", f"[{scope}]", f"{'metric':<{width}} {'stat':>6} {'measured':>12} {'simulated':>12} "
                                        f"{'error':>11} {'error %':>9}"]

        def show(v, fmt):
            return "-" if v is None else format(v, fmt)
        lines.append(f"{r['metric']:<{width}} {r['stat']:>6} {show(r['measured'], '12.3f')} "
                     f"{show(r['simulated'], '12.3f')} {show(r['error'], '+11.3f')} {show(r['error_pct'], '+8.1f')}%")
    pcts = [r["abs_error_pct"] for r in rows if r["abs_error_pct"] is not None]
    if pcts:
        lines += ["", f"mean absolute error: {np.mean(pcts):.1f} % over {len(pcts)} figures"]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)
