"""Fit the performance model's named parameters to measured runs, and say how well it did on runs the fit
never saw.

Each run is a scenario and the benchmark tool's result file of the same workload on the real deployment
(``simmodel.compare``). For a candidate set of parameter values every fit run is simulated with them, and
each measured figure (TTFT, TPOT/ITL, E2E means and percentiles, throughput) gives one residual,
log(simulated / measured); SciPy's ``least_squares`` (trust region reflective, bounded so every parameter
stays physical) finds the values that minimise their squares. The report gives, per run and figure, the
error before (the model's defaults) and after, on the fit and the held-out runs.
"""

from __future__ import annotations

import math
import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from simmodel.compare.measured import Measurement, read_measured
from simmodel.compare.table import Mismatch, compare
from simmodel.config.calibration import (
    ENTRY_ONLY,
    FIELD_PATHS,
    IDENTITY,
    PARAMETERS,
    START,
    identity_of,
    inapplicable,
    timing_fields,
)
from simmodel.config.load import _Node, apply_overrides, parse_scenario, read_yaml
from simmodel.errors import ScenarioError, SimulationError
from simmodel.export import write_whole
from simmodel.paths import is_file
from simmodel.sim import Simulation

DEFAULT_PARAMETERS = ("compute_efficiency", "memory_efficiency", "host_prefill_ms", "host_decode_ms")
DEFAULT_HOLDOUT = 0.25
FAR_ABOVE = 2.0
"""Held-out error above this many times the fit error (and above 5 %) is warned about."""


@dataclass
class Run:
    name: str
    scenario: Path
    overrides: list[str]
    measurement: Measurement
    roles: list[str]
    """Roles priced by the default timing: the calibrated parameters apply to them."""
    deployments: list[dict]
    held_out: bool = False
    explicit: list[str] = field(default_factory=list)
    inapplicable: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Per role, the parameters its deployment has no part for (the MoE ones on a dense model, the block-FP8
    one without block scales): the fit leaves them out of that role's timing."""
    before: list[dict] = field(default_factory=list)
    after: list[dict] = field(default_factory=list)


@dataclass
class Plan:
    runs: list[Run]
    parameters: list[str]
    notes: list[str] = field(default_factory=list)
    """What the fit says about itself: no convergence, parameters left out or on a bound."""


def load_runs(path: Path, holdout: str | None = None) -> Plan:
    """Read RUNS.yaml; ``holdout`` (the CLI's) is a fraction or a comma-separated list of run names."""
    if not is_file(path):
        raise ScenarioError(f"--runs {path}: no such file")
    try:
        data = read_yaml(path)
    except ScenarioError as exc:
        raise ScenarioError(f"--runs {path}: {str(exc).replace('the scenario file', 'the file')}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"--runs {path}: must be a mapping with runs")
    root = _Node(data, "")
    base = path.resolve().parent
    raw_runs = root.raw("runs")
    if not isinstance(raw_runs, list) or not raw_runs:
        raise ScenarioError(f"{path.name}: runs: must be a non-empty list of {{scenario, measured}}")
    runs: list[Run] = []
    for i, item in enumerate(raw_runs):
        if not isinstance(item, dict):
            raise ScenarioError(f"{path.name}: runs[{i}]: must be a mapping, got {item!r}")
        node = _Node(item, f"runs[{i}]")
        scenario = _file(node, "scenario", base, path)
        measured = _file(node, "measured", base, path)
        try:
            tool = None if node.raw("tool", None) is None else node.choice(
                "tool", ("vllm-bench", "inference-perf", "guidellm", "aiperf"))
            held = node.bool("holdout", False)
        except ScenarioError as exc:
            raise ScenarioError(f"{path.name}: {exc}") from None
        overrides = node.raw("set", [])
        if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
            raise ScenarioError(f"{path.name}: runs[{i}].set: must be a list of PATH=VALUE strings")
        name = node.raw("name", scenario.stem)
        if not isinstance(name, str) or not name:
            raise ScenarioError(f"{path.name}: runs[{i}].name: must be a non-empty string")
        try:
            node.done()
        except ScenarioError as exc:
            raise ScenarioError(f"{path.name}: {exc}") from None
        try:
            loaded = parse_scenario(apply_overrides(read_yaml(scenario), overrides), scenario.resolve().parent)
        except ScenarioError as exc:
            raise ScenarioError(f"{path.name}: runs[{i}] ({name}): {scenario.name}: {exc}") from None
        roles = [r for r, role in loaded.engine.workers.items() if role.timing.type == "default"]
        if not roles:
            raise ScenarioError(f"{path.name}: runs[{i}] ({name}): no worker role uses the default timing, so "
                                f"there is nothing to calibrate")
        for r in roles:
            if loaded.engine.workers[r].timing.calibration is not None:
                raise ScenarioError(f"{path.name}: runs[{i}] ({name}): engine.workers.{r}.timing.calibration: "
                                    f"calibrate from the model's own defaults; remove it")
        deployments = [identity_of(r, loaded.engine.workers[r].deployment, loaded.engine.backend,
                                   loaded.engine.workers[r].parallelism) for r in roles]
        explicit = _explicit_timing(apply_overrides(read_yaml(scenario), overrides), roles)
        try:
            measurement = read_measured(measured, tool)
        except ScenarioError as exc:
            raise ScenarioError(f"{path.name}: runs[{i}] ({name}): {exc}") from None
        run = Run(name, scenario, list(overrides), measurement, roles, deployments, held)
        run.explicit = explicit
        run.inapplicable = {r: tuple(inapplicable(loaded.engine.workers[r].deployment)) for r in roles}
        runs.append(run)
    if len({r.name for r in runs}) != len(runs):
        raise ScenarioError(f"{path.name}: runs: names must be distinct")
    parameters = root.raw("parameters", list(DEFAULT_PARAMETERS))
    if not isinstance(parameters, list) or not parameters or not all(isinstance(p, str) for p in parameters) \
            or len(set(parameters)) != len(parameters) or any(p not in PARAMETERS for p in parameters):
        raise ScenarioError(f"{path.name}: parameters: must be a list of distinct names among "
                            f"{', '.join(PARAMETERS)}, got {parameters!r}")
    for run in runs:  # a value a run fixes but the fit does not fit would not be in the calibration file
        fixed = sorted(set(run.explicit) - set(parameters))
        if fixed:
            raise ScenarioError(f"{path.name}: run {run.name}: {fixed[0]} is set in its scenario but not fitted; "
                                f"fit it (parameters) or remove it, so that the calibration says every value used")
    file_split = root.raw("holdout", None)
    split = holdout if holdout is not None else file_split
    try:
        seed = root.int("seed", 0, minimum=0)
        root.done()
    except ScenarioError as exc:
        raise ScenarioError(f"{path.name}: {exc}") from None
    _split(runs, split, seed, path.name)
    if all(r.held_out for r in runs):
        raise ScenarioError(f"{path.name}: holdout: leaves no run to fit on")
    return Plan(runs, parameters)


def _entry(data: dict) -> str:
    """The role requests reach first."""
    return "prefill" if (data.get("engine") or {}).get("mode") == "disaggregated" else "aggregated"


def _explicit_timing(data: dict, roles: list[str]) -> list[str]:
    """The calibration parameters a run's default-timing roles set explicitly (the frontend cost also as
    ``engine.request_overhead_ms``, when the role requests reach first is one of them)."""
    engine_wide = (data.get("engine") or {}).get("request_overhead_ms") is not None and _entry(data) in roles
    found = {"request_overhead_ms"} if engine_wide else set()
    for role in roles:
        timing = ((data.get("engine") or {}).get("workers") or {}).get(role, {}).get("timing") or {}
        for name, path in FIELD_PATHS.items():
            value = timing
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if value is not None:
                found.add(name)
    return sorted(found)


def _file(node: _Node, key: str, base: Path, path: Path) -> Path:
    value = node.raw(key)
    if not isinstance(value, str) or not value:
        raise ScenarioError(f"{path.name}: {node.at(key)}: must be a file path, got {value!r}")
    file = Path(value) if Path(value).is_absolute() else base / value
    if not is_file(file):
        raise ScenarioError(f"{path.name}: {node.at(key)}: {file}: no such file")
    return file


def _split(runs: list[Run], split, seed: int, where: str) -> None:
    """Mark held-out runs: listed by name, or a fraction of the deployments (whole deployments, chosen with
    ``seed``), on top of runs marked ``holdout: true``. One deployment alone holds nothing out by default."""
    if split is None:
        groups = sorted({_key(r) for r in runs})
        if len(groups) < 2:
            return
        split = DEFAULT_HOLDOUT
    if isinstance(split, str):
        try:
            split = float(split)
        except ValueError:
            split = [s.strip() for s in split.split(",") if s.strip()]
    if isinstance(split, list):
        if not all(isinstance(name, str) for name in split):
            raise ScenarioError(f"{where}: holdout: a list of run names, got {split!r}")
        unknown = set(split) - {r.name for r in runs}
        if unknown:
            raise ScenarioError(f"{where}: holdout: no run named {sorted(unknown)[0]!r}")
        for r in runs:
            r.held_out = r.held_out or r.name in split
        return
    if isinstance(split, bool) or not isinstance(split, (int, float)) or not 0 <= split < 1:
        raise ScenarioError(f"{where}: holdout: must be a fraction in [0, 1) or a list of run names, got {split!r}")
    groups = sorted({_key(r) for r in runs})
    count = math.ceil(split * len(groups)) if split > 0 else 0
    if count >= len(groups):
        count = len(groups) - 1
    chosen = set(random.Random(seed).sample(groups, count)) if count else set()
    for r in runs:
        r.held_out = r.held_out or _key(r) in chosen


def _key(run: Run) -> tuple:
    return tuple(tuple(d[k] for k in IDENTITY) for d in run.deployments)


def scenario_with(run: Run, values: dict[str, float]):
    """The run's scenario with its default-timing roles priced by these parameter values."""
    data = apply_overrides(read_yaml(run.scenario), run.overrides)
    entry = _entry(data)
    if entry in run.roles and any(n in values for n in ENTRY_ONLY):  # the engine-wide value gives way to the fit
        data["engine"].pop("request_overhead_ms", None)
    for role in run.roles:
        timing = data["engine"]["workers"][role].setdefault("timing", None) or {}
        data["engine"]["workers"][role]["timing"] = timing
        own = {n: v for n, v in values.items()
               if (role == entry or n not in ENTRY_ONLY) and n not in run.inapplicable.get(role, ())}
        for key, value in timing_fields(own).items():
            if isinstance(value, dict):
                timing[key] = {**(timing.get(key) or {}), **value}
            else:
                timing[key] = value
    return parse_scenario(data, run.scenario.resolve().parent)


def simulate(run: Run, values: dict[str, float]) -> list[dict]:
    """The comparison rows of the run simulated with these parameter values."""
    sim = Simulation(scenario_with(run, values), keep_events=False)
    results = sim.run()
    return compare(run.measurement, sim, results)[0]


def check_run(run: Run, notes: list[str]) -> None:
    """Before fitting, at the model's defaults: the run must match its measured file — every measured
    stage in the scenario, some figure to fit, and the same number of requests when the scenario fixes it
    (a run cut by time sends as many as its pace allows: then a note, not a refusal)."""
    scenario = scenario_with(run, {})  # no value set: the model's defaults
    sim = Simulation(scenario, keep_events=False)
    results = sim.run()
    rows, found = compare(run.measurement, sim, results)
    measured, simulated = run.measurement.requests, len(results.requests)
    counts_differ = measured is not None and measured != simulated
    mismatches = [n for n in found if isinstance(n, Mismatch)]
    if counts_differ:
        mismatches = mismatches[1:]  # (the request count's comes first: a run cut by time may differ, below)
    if mismatches:
        raise ScenarioError(f"run {run.name}: {mismatches[0]}")
    if not any(fitted(r) for r in rows):
        raise ScenarioError(f"run {run.name}: its measured file holds no figure to fit (means, percentiles or "
                            f"throughputs)")
    if counts_differ:
        traffic = scenario.traffic
        timed = traffic.stop.max_virtual_time_seconds is not None or any(
            st.duration_s is not None and st.requests is None for st in traffic.load.stages)
        if not timed:
            raise ScenarioError(f"run {run.name}: the measured run sent {measured} requests, the scenario "
                                f"{simulated}; describe the same workload")
        notes.append(f"run {run.name}: the measured run sent {measured} requests, the scenario {simulated} at the "
                     f"defaults (a run cut by time)")
    said = {n for scope in run.measurement.scopes for n in scope.notes}  # what the file holds that is not compared
    notes.extend(f"run {run.name}: {n}" for n in found if not isinstance(n, Mismatch) and n not in said)


def fitted(row: dict) -> bool:
    """Whether a figure is fitted: a central value (mean, median, percentile) or a throughput; spreads
    (std, min, max) depend on what the simulation does not see (noise) and would swamp the rest."""
    return row["stat"] not in ("std", "min", "max") and row["measured"] > 0


DIFF_STEPS = (0.1, 0.03, 0.01)
"""The relative steps of the differences that estimate how the figures move, largest first, each fit starting
where the one before it ended (the best one found is kept). A simulated figure is not smooth in the
parameters: a pass that ends a little sooner admits a request one pass earlier, and the figure steps. Under
an open-loop load such steps come every few hundredths of a percent of a parameter (constant-rate arrivals
line up with passes), so a derivative taken over a small step measures a step, not the trend, and the fit
stops far from the values (a prefill host time of 10–19 ms for a true 1.5). Central differences over a tenth
of each value see the trend across many steps; the smaller ones then refine it where the figures are smooth
(closed loops)."""
STEP_FLOOR = {"efficiency": 0.1, "ms": 1.0, "us": 10.0}
"""By a parameter's unit (its name's last part): the value its steps are taken relative to when it is smaller
(an overhead near zero still moves the passes by a measurable amount)."""
XTOL = 1e-4
"""A fit step stops once it would move the parameters by less than this fraction of their size: a figure
steps over far larger moves under an open-loop load, and a calibration needs no more (a closed-loop fit still
lands within 1e-6 of the truth)."""
EVALUATIONS_PER_PARAMETER = 80
"""About this many simulations of the fit runs per fitted parameter, all steps together (a fit of four
parameters typically takes 100–250); then the fit stops where it is (see ``_Differences``)."""


def _staged_fit(fun, x0: np.ndarray, first: np.ndarray, lo: np.ndarray, hi: np.ndarray, names: list[str]):
    """``least_squares`` once per step of ``DIFF_STEPS``, each from the best point so far, within the budget of
    simulations (``first``: the residuals at ``x0``, simulated already). Returns the best fit, the first
    Jacobian (over the largest steps: where a parameter moves no figure at all, it depends on nothing the runs
    measure), and whether the budget ran out."""
    from scipy.optimize import least_squares

    floors = np.array([STEP_FLOOR.get(n.rsplit("_", 1)[1], STEP_FLOOR["efficiency"]) for n in names])
    fit = _Differences(fun, x0, first, floors, lo, hi, EVALUATIONS_PER_PARAMETER * len(names) - 1)
    result = None
    for step in DIFF_STEPS:
        fit.step = step
        found = least_squares(fit.residuals, x0 if result is None else result.x, jac=fit.jacobian, bounds=(lo, hi),
                              x_scale="jac", xtol=XTOL, ftol=1e-10, gtol=1e-10, max_nfev=30 * len(names))
        if result is None or found.cost <= result.cost:
            result = found
        if fit.spent:
            break
    return result, fit.first, fit.spent


class _Differences:
    """The residuals (the last point simulated is kept: a Jacobian starts where the fit just was) and their
    Jacobian by central differences of ``step`` × max(|x|, floor) each way (one-sided at a bound). Once the
    ``budget`` of simulations cannot pay for another Jacobian, the Jacobian is zero, which ends the fit where
    it is (the trial steps after the last one may spend a few more)."""

    def __init__(self, fun, x0: np.ndarray, f0: np.ndarray, floors: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 budget: int) -> None:
        self.fun, self.floors, self.lo, self.hi = fun, floors, lo, hi
        self.step = DIFF_STEPS[0]
        self.left = budget
        self.spent = False
        self.first: np.ndarray | None = None
        """The first Jacobian measured."""
        self._at, self._value = x0.copy(), f0
        """The last point simulated and its residuals (the fit's start, simulated already)."""

    def residuals(self, x: np.ndarray) -> np.ndarray:
        if not np.array_equal(x, self._at):  # (a Jacobian starts where the fit just was)
            self.left -= 1
            self._at, self._value = x.copy(), self.fun(x)
        return self._value

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        f0 = self.residuals(x)
        if self.left < 2 * len(x):
            self.spent = True
            return np.zeros((len(f0), len(x)))
        columns = []
        for i in range(len(x)):
            h = self.step * max(abs(x[i]), self.floors[i])
            up, down = x.copy(), x.copy()
            up[i], down[i] = min(x[i] + h, self.hi[i]), max(x[i] - h, self.lo[i])
            f_up = f0 if up[i] == x[i] else self._other(up)
            f_down = f0 if down[i] == x[i] else self._other(down)
            columns.append((f_up - f_down) / (up[i] - down[i]))
        jacobian = np.column_stack(columns)
        if self.first is None:
            self.first = jacobian
        return jacobian

    def _other(self, x: np.ndarray) -> np.ndarray:
        self.left -= 1
        return self.fun(x)


MISSING = 5.0
"""The residual of a fitted figure the simulation has no value of (a factor of e⁵ off)."""


def residuals(rows: list[dict]) -> list[float]:
    """log(simulated / measured) of every fitted figure, one slot each whatever happens."""
    return [math.log(r["simulated"] / r["measured"]) if r["simulated"] is not None and r["simulated"] > 0
            else MISSING for r in rows if fitted(r)]


class RunPool:
    """Simulates runs with a set of parameter values: one after the other, or with ``jobs`` > 1 in that many
    worker processes (forked once, for the whole fit), each simulating one run at a time. Either way each run
    is simulated on its own and the rows come back in the runs' order, so ``jobs`` never changes a result."""

    def __init__(self, runs: list[Run], jobs: int = 1) -> None:
        from simmodel.recommend.executor import LocalExecutor

        self.runs = runs
        self.executor = LocalExecutor(min(jobs, len(runs)), self._task) if jobs > 1 and len(runs) > 1 else None

    def _task(self, task: tuple[int, dict[str, float]]) -> tuple[int, list[dict] | None, Exception | None]:
        i, values = task
        try:
            return i, simulate(self.runs[i], values), None
        except (ScenarioError, SimulationError) as exc:  # (raised again by the caller, as with one process)
            return i, None, exc

    def rows(self, values: dict[str, float]) -> list[list[dict]]:
        """Each run's comparison rows, simulated with these values."""
        if self.executor is None:
            return [simulate(run, values) for run in self.runs]
        out: list[list[dict] | None] = [None] * len(self.runs)
        for entry in self.executor.map([(i, values) for i in range(len(self.runs))]):
            if isinstance(entry, dict):  # (the worker process died: killed for memory, a crash)
                raise SimulationError(f"a calibrate worker process died ({entry['reason']}); try --jobs 1")
            i, rows, error = entry
            if error is not None:
                raise error
            out[i] = rows
        return out  # type: ignore[return-value]

    def close(self, abort: bool = False) -> None:
        if self.executor is not None:
            self.executor.close(abort)


def calibrate(plan: Plan, on_evaluation=None, jobs: int = 1) -> dict[str, float]:
    """The fitted values of ``plan.parameters`` (and each run's rows before and after); ``jobs`` worker
    processes simulate the fit runs of each evaluation side by side (``RunPool``)."""
    pool = RunPool([r for r in plan.runs if not r.held_out], jobs)
    try:
        values = _calibrate(plan, pool, on_evaluation)
    except BaseException:  # (Ctrl-C included: the workers are stopped at once, not waited for)
        pool.close(abort=True)
        raise
    pool.close()
    return values


def _calibrate(plan: Plan, pool: RunPool, on_evaluation) -> dict[str, float]:
    names = plan.parameters
    x0 = np.array([START.get(n, PARAMETERS[n][0]) for n in names], dtype=np.float64)
    lo = np.array([PARAMETERS[n][1] for n in names], dtype=np.float64)
    hi = np.array([PARAMETERS[n][2] for n in names], dtype=np.float64)
    # a default on a bound (a zero overhead) starts 1 % of the range inside it: trust-region steps taken
    # from a bound can stay stuck on it while another parameter compensates
    x0 = np.where(x0 <= lo, lo + 0.01 * (hi - lo), np.where(x0 >= hi, hi - 0.01 * (hi - lo), x0))
    plan.notes = []
    for run in plan.runs:  # every run, held out or not, must match its measured file
        check_run(run, plan.notes)

    def fun(x: np.ndarray) -> np.ndarray:
        values = dict(zip(names, x.tolist()))
        res = [v for rows in pool.rows(values) for v in residuals(rows)]
        if on_evaluation is not None:
            on_evaluation(values)
        return np.array(res, dtype=np.float64)

    first = fun(x0)
    if len(first) < len(names):
        raise ScenarioError(f"the fit runs give {len(first)} measured figures for {len(names)} parameters; "
                            f"add runs or fit fewer parameters")
    result, jacobian, spent = _staged_fit(fun, x0, first, lo, hi, names)
    if spent:
        plan.notes.append(f"the fit used its {EVALUATIONS_PER_PARAMETER * len(names)} simulations of the fit runs "
                          f"({EVALUATIONS_PER_PARAMETER} a parameter); the values are the best found")
    elif result.status <= 0:
        plan.notes.append(f"the fit did not converge ({result.message}); the values are the best found")
    elif result.cost > 1e-8 and result.optimality > 1e-3:
        plan.notes.append(f"the fit stopped where the figures still pull (first-order optimality "
                          f"{result.optimality:.3g}): simulated figures may step as the parameters move (events "
                          f"crossing pass boundaries); weigh the held-out error, or fit fewer parameters")
    # a parameter no fit run depends on is not calibrated: its Jacobian column is zero
    influence = np.abs(jacobian).max(axis=0) if jacobian is not None and jacobian.size else np.zeros(len(names))
    unused = [n for n, v in zip(names, influence) if v < 1e-9]
    for n in unused:
        plan.notes.append(f"{n}: no fit run depends on it (left out of the calibration)")
    for n, v in zip(names, result.x):
        if n not in unused and (v <= PARAMETERS[n][1] + 1e-9 or v >= PARAMETERS[n][2] - 1e-9):
            plan.notes.append(f"{n}: ended on its bound ({v:g}); the runs may ask for what the model cannot give")
    values = {n: float(v) for n, v in zip(names, result.x) if n not in unused}
    if not values:
        raise ScenarioError("no fitted parameter affects the fit runs; nothing to calibrate")
    defaults = {n: PARAMETERS[n][0] for n in names if PARAMETERS[n][0] is not None}  # None: the scenario's own
    for run in plan.runs:
        run.before = simulate(run, defaults)
        run.after = simulate(run, values)
    return values


def mean_abs_error(runs: list[Run], which: str) -> float | None:
    errors = [abs(r["error_pct"]) for run in runs for r in getattr(run, which)
              if r["error_pct"] is not None and fitted(r)]
    return float(np.mean(errors)) if errors else None


def report(plan: Plan, values: dict[str, float]) -> dict:
    """What the calibration file records beside the values: the runs, the errors, and a warning."""
    fit = [r for r in plan.runs if not r.held_out]
    held = [r for r in plan.runs if r.held_out]
    error = {"fit": {"before_pct": mean_abs_error(fit, "before"), "after_pct": mean_abs_error(fit, "after")},
             "held_out": {"before_pct": mean_abs_error(held, "before"), "after_pct": mean_abs_error(held, "after")}}
    warning = None
    f, h = error["fit"]["after_pct"], error["held_out"]["after_pct"]
    if h is not None and f is not None and h > 5.0 and h > FAR_ABOVE * f:
        warning = (f"the held-out runs' error ({h:.1f} %) is far above the fit runs' ({f:.1f} %): the calibration "
                   f"may not carry over to those deployments or workloads")
    deployments = []
    for run in fit:
        for d in run.deployments:
            if d not in deployments:
                deployments.append(d)
    runs = [{"name": r.name, "set": "held_out" if r.held_out else "fit", "scenario": str(r.scenario),
             "measured": str(r.measurement.path), "tool": r.measurement.tool,
             "error_pct": [{"scope": a["scope"], "metric": a["metric"], "stat": a["stat"],
                            "before": b["error_pct"], "after": a["error_pct"]} for b, a in zip(r.before, r.after)]}
            for r in plan.runs]
    return {"calibration": {"parameters": values, "fitted_on": deployments,
                            "fit_runs": [r.name for r in fit], "held_out_runs": [r.name for r in held],
                            "mean_abs_error": error, "warning": warning, "notes": list(plan.notes),
                            "runs": runs}}


def is_calibration_file(path: Path) -> bool:
    """Whether ``path`` is a file simmodel calibrate wrote: YAML, one mapping whose one key is
    ``calibration``, holding ``parameters``."""
    try:
        if path.stat().st_size > 10_000_000:
            return False
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and list(data) == ["calibration"] and isinstance(data["calibration"], dict) \
        and "parameters" in data["calibration"]


def check_output(path: Path, overwrite: bool) -> None:
    """The calibration file may be written at ``path``: nothing is there, or (with ``overwrite``) a
    calibration file simmodel wrote, never another file (a scenario, the runs file) or a folder."""
    try:
        there = path.exists() or path.is_symlink()
        is_dir = path.is_dir()
    except (OSError, ValueError) as exc:  # a name too long, say
        raise ScenarioError(f"--output {path}: cannot write there: {getattr(exc, 'strerror', None) or exc}") \
            from None
    if is_dir:
        raise ScenarioError(f"--output {path}: is a folder; give the calibration file's name")
    if there and not overwrite:
        raise FileExistsError(f"--output {path}: exists (use --overwrite to replace it)")
    if there and not is_calibration_file(path):
        raise FileExistsError(f"--output {path}: exists and is not a calibration file simmodel wrote (a YAML "
                              f"mapping whose one key is calibration); --overwrite replaces only those")


def probe_output(path: Path) -> None:
    """Before fitting: the calibration file's folder can be made and written to."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(handle)
        os.unlink(name)
    except OSError as exc:
        raise ScenarioError(f"--output {path}: cannot write there: {exc.strerror or exc}") from None


def write_calibration(path: Path, document: dict, overwrite: bool = False) -> None:
    """Write the calibration file whole: a temporary file beside it, renamed over it (checked again by
    ``check_output`` just before, as a file may have appeared while the fit ran). An OS error (a full
    disk) leaves ``path`` as it was and no temporary file."""
    check_output(path, overwrite)
    try:
        write_whole(path, yaml.safe_dump(document, sort_keys=False))
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write: {exc.strerror or exc}; {path} is left as it was",
                      f"--output {path}") from None


def format_report(document: dict) -> str:
    cal = document["calibration"]
    lines = ["fitted parameters:"]
    lines += [f"  {name:<22} {value:.6g}   ({PARAMETERS[name][3]}"
              + ("" if PARAMETERS[name][0] is None else f"; default {PARAMETERS[name][0]:g}") + ")"
              for name, value in cal["parameters"].items()]
    lines += ["", f"{'run':<24} {'set':<9} {'figures':>7} {'mean |error| before':>20} {'after':>8}"]
    for run in cal["runs"]:
        central = [e for e in run["error_pct"] if e["stat"] not in ("std", "min", "max")]  # the fitted figures
        before = [abs(e["before"]) for e in central if e["before"] is not None]
        after = [abs(e["after"]) for e in central if e["after"] is not None]
        lines.append(f"{run['name']:<24} {run['set']:<9} {len(after):>7} "
                     f"{(np.mean(before) if before else float('nan')):>19.1f}% {(np.mean(after) if after else float('nan')):>7.1f}%")
    e = cal["mean_abs_error"]

    def show(v):
        return "-" if v is None else f"{v:.1f} %"
    lines += ["", f"fit runs:      {show(e['fit']['before_pct'])} → {show(e['fit']['after_pct'])}",
              f"held-out runs: {show(e['held_out']['before_pct'])} → {show(e['held_out']['after_pct'])}"]
    if not cal["held_out_runs"]:
        lines.append("note: no run is held out (one deployment); --holdout NAMES holds runs out to check the fit")
    lines += [f"note: {n}" for n in cal["notes"]]
    return "\n".join(lines)
