"""Run a search: expand the candidates, simulate them on a process pool, rank them and write the ledger."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import yaml

from simmodel.config.catalog import is_builtin
from simmodel.config.domains import is_domain
from simmodel.config.load import _model, _Node, apply_overrides, parse_scenario, read_yaml
from simmodel.config.registries import _hardware
from simmodel.config.schema import Sla
from simmodel.errors import ScenarioError, signal_of
from simmodel.export import staged_folder
from simmodel.paths import exists
from simmodel.perf.hardware import HARDWARE
from simmodel.perf.models import MODELS
from simmodel.recommend.executor import LocalExecutor
from simmodel.recommend.space import MAX_GRID, Candidate, SearchSpace, expand
from simmodel.recommend.spec import SearchSpec, parse_search

TIE = 1e-9
"""Relative difference under which two objective values are the same."""
CSV_METRICS = ("output_throughput_tok_s", "output_throughput_per_gpu", "throughput_per_user",
               "goodput_rps", "sla_attainment", "mean_ttft_ms", "mean_tpot_ms", "mean_e2e_ms",
               "output_tokens_per_joule", "cost_per_million_tokens")


def load_search(path: Path, overrides=()) -> tuple[SearchSpec, SearchSpace, Path]:
    """Read a search scenario: its spec and search space; errors name the file."""
    try:
        data = apply_overrides(read_yaml(path), overrides)
        spec = parse_search(data)
        base_dir = path.resolve().parent
        engine = data.get("engine") if isinstance(data.get("engine"), dict) else {}
        for key in ("model", "hardware"):
            if is_domain(engine.get(key)):
                raise ScenarioError(f"engine.{key}: one per search (not searched); run one search per {key}")
        model = _model(_Node(engine, "engine"), base_dir)[1]
        energy = "tokens_per_joule" in (spec.target, *(spec.pareto if spec.target == "pareto" else ()))
        if energy and _hardware(_Node(engine, "engine"), base_dir)[1].board_power_w is None:
            raise ScenarioError("engine.hardware: the tokens_per_joule target needs the GPU's power (board_power_w "
                                "and idle_power_w in the system file)")
        space = SearchSpace(data, lambda mode: model)
        check_unsearched(space, base_dir)
    except ScenarioError as exc:
        raise ScenarioError(f"{path.name}: {exc}", exc.category) from None
    except RecursionError:  # a mapping nested thousands deep (``--set a.a.a…=1``): copying it overflows
        raise ScenarioError(f"{path.name}: nested too deeply to be a search scenario") from None
    return spec, space, base_dir


def check_unsearched(space: SearchSpace, base_dir: Path) -> None:
    """Bad input outside the searched fields (a typo, a value out of range) would make every candidate
    unsupported: refuse the search instead, naming the field. Checked on each mode's first candidate."""
    for g, (_, dims) in enumerate(space.grids):
        candidate = space.candidate(0, space.number_of(g, [0] * len(dims)))
        try:
            parse_scenario(candidate.config, base_dir)
        except ScenarioError as exc:
            if exc.category != "invalid_config":
                continue  # a shape the model cannot take, or no room for KV: that candidate's own verdict
            field = str(exc).split(":", 1)[0].strip()
            searched = ["engine.mode", *(d.path for d in dims)]
            if not any(field.startswith(p) or p.startswith(field) for p in searched):
                raise


def check_choices(space: SearchSpace, base_dir: Path) -> None:
    """Refuse a searched value no candidate could take (bad input, not a candidate's verdict): each value
    of each dimension is tried with the other dimensions at their first value, and an invalid-config error
    on that dimension's own field is one error naming the field and the choice."""
    for g, (_, dims) in enumerate(space.grids):
        for i, dim in enumerate(dims):
            for j, value in enumerate(dim.values):
                digits = [0] * len(dims)
                digits[i] = j
                try:
                    parse_scenario(space.candidate(0, space.number_of(g, digits)).config, base_dir)
                except ScenarioError as exc:
                    field, _, rule = str(exc).partition(":")
                    if exc.category == "invalid_config" and (field == dim.path or field.startswith(
                            (f"{dim.path}.", f"{dim.path}["))):
                        raise ScenarioError(f"{field}: choice {json.dumps(value, default=str)}: {rule.strip()}") \
                            from None


def check_search(spec: SearchSpec, space: SearchSpace, base_dir: Path) -> tuple[int, dict[str, int]]:
    """Validate a search without simulating: its searched values (``check_choices``), then every candidate
    it would simulate as the search checks each before simulating it (grid and random: the ones they take;
    Bayesian: every combination, when there are at most ``MAX_GRID``, else none). Returns the candidates
    checked and how many were rejected, by reason category."""
    from simmodel.recommend.evaluate import check

    check_choices(space, base_dir)
    if spec.algorithm != "bayesian":
        candidates = expand(space, spec.algorithm, spec.max_trials, spec.seed)
    elif space.size <= MAX_GRID:
        candidates = [space.candidate(n + 1, n) for n in range(space.size)]
    else:
        candidates = []
    rejected: dict[str, int] = {}
    for candidate in candidates:
        verdict = check(candidate.config, spec, base_dir)[2]
        if verdict is not None:
            rejected[verdict[1]] = rejected.get(verdict[1], 0) + 1
    return len(candidates), dict(sorted(rejected.items()))


def planned(spec: SearchSpec, space: SearchSpace) -> int:
    """How many candidates the search will simulate (at most, for Bayesian search)."""
    return min(spec.max_trials or space.size, space.size)


def run_search(spec: SearchSpec, space: SearchSpace, base_dir: Path, executor=None,
               on_result: Callable[[dict], None] | None = None) -> tuple[list[dict], int]:
    """Every simulated candidate's ledger entry in candidate order (whatever order the executor finishes
    them in), and the signal that stopped the search, 0 if none: ``SIGINT`` for Ctrl-C, ``SIGTERM`` (the
    entries are then those that finished; the executor's workers are stopped at once)."""
    executor = executor or LocalExecutor(spec.parallelism)
    entries: dict[int, dict] = {}
    candidates: dict[int, Candidate] = {}

    def simulate(batch: list[Candidate]) -> None:
        candidates.update((c.id, c) for c in batch)
        for entry in executor.map([(c.id, c.config, spec, str(base_dir)) for c in batch]):
            entries[entry["id"]] = entry
            if on_result is not None:
                on_result(entry)

    interrupted = 0
    closed = False
    try:
        if spec.algorithm == "bayesian":
            from simmodel.recommend.optimize import bayesian
            bayesian(spec, space, simulate, entries)
        else:
            simulate(expand(space, spec.algorithm, spec.max_trials, spec.seed))
        executor.close()
        closed = True
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM as the command raises it (errors.Interrupted)
        interrupted = signal_of(exc)
    finally:
        if not closed:
            executor.close(abort=True)
    ledger = []
    for id in sorted(entries):
        entry, c = entries[id], candidates[id]
        entry["choices"], entry["config"] = c.choices, c.config
        ledger.append(entry)
    return ledger, interrupted


def pareto_front(entries: list[dict], objectives) -> list[dict]:
    """The entries no other entry dominates (at least as good in every objective, better in one).
    Values within a relative 1e-9 of each other count as equal: metrics that are the same number in
    exact arithmetic can differ in their last bits, and that must not decide the front."""
    points = np.array([[e["objectives"][m] if higher else -e["objectives"][m] for m, higher in objectives]
                       for e in entries], dtype=np.float64).reshape(len(entries), len(objectives))
    tol = TIE * np.abs(points)
    front = []
    for e, p, t in zip(entries, points, tol):
        at_least = np.all(points >= p - t, axis=1)
        better = np.any(points > p + t, axis=1)
        if not np.any(at_least & better):
            front.append(e)
    return front


def rank(entries: list[dict], spec: SearchSpec) -> list[dict]:
    """Feasible candidates best first: by score, then fewer GPUs, then candidate order. For ``pareto``:
    the Pareto front of the feasible candidates, best first by the first objective (in its own direction),
    then fewer GPUs, then order."""
    feasible = [e for e in entries if e["status"] == "feasible"]
    if spec.target == "pareto":
        first, higher = spec.objectives[0]
        sign = -1.0 if higher else 1.0
        return sorted(pareto_front(feasible, spec.objectives),
                      key=lambda e: (sign * _rounded(e["objectives"][first]), e["metrics"]["gpu_count"], e["id"]))
    return sorted(feasible, key=lambda e: (-_rounded(e["score"]), e["metrics"]["gpu_count"], e["id"]))


def _rounded(value: float) -> float:
    """A score to 12 significant digits: scores equal in exact arithmetic tie (then fewer GPUs win)
    whatever their last bits."""
    return float(f"{value:.12g}")


def runnable(config: dict, base_dir: Path) -> dict:
    """A candidate as a scenario file saved elsewhere: every relative file path it names (the trace, a
    model's config.json, a system .yaml, a host profile) made absolute against the search's folder."""
    config = json.loads(json.dumps(config))

    def absolute(holder: dict, key: str, is_file) -> None:
        value = holder.get(key)
        if isinstance(value, str) and not Path(value).is_absolute() and is_file(value):
            holder[key] = str((base_dir / value).resolve())

    source = (config.get("traffic") or {}).get("source")
    if isinstance(source, dict):
        absolute(source, "path", lambda v: not is_builtin(v))  # builtin:NAME means the same file anywhere
    engine = config.get("engine") if isinstance(config.get("engine"), dict) else {}
    absolute(engine, "model", lambda v: v not in MODELS and exists(base_dir / v))
    def hardware_file(value: str) -> bool:
        return value not in HARDWARE and value.endswith((".yaml", ".yml"))

    absolute(engine, "hardware", hardware_file)
    for role in (engine.get("workers") or {}).values():
        if isinstance(role, dict):
            absolute(role, "hardware", hardware_file)
            if isinstance(role.get("host_profile"), dict):
                absolute(role["host_profile"], "path", lambda v: True)
    return config


def with_sla(config: dict, sla: Sla, gpu_hour_price: float | None = None) -> dict:
    """A saved candidate with the search's SLA as its ``evaluation.sla`` (the required fraction as the search
    resolved it, ``strict_sla`` included) and its ``gpu_hour_price``, so that ``simmodel run`` of it reports
    the goodput, attainment and cost the search ranked it by; unchanged when the search has neither."""
    evaluation: dict = {}
    if sla.bounded:
        evaluation["sla"] = {k: v for k, v in asdict(sla).items() if v is not None}
    if gpu_hour_price is not None:
        evaluation["gpu_hour_price"] = gpu_hour_price
    return {**config, "evaluation": evaluation} if evaluation else config


def write_ledger(folder: Path, spec: SearchSpec, entries: list[dict], ranked: list[dict], base_dir: Path,
                 interrupted: int = 0, overwrite: bool = False, scenario: Path | None = None) -> str | None:
    """recommendation.json, recommendation.csv, recommendations/0001.yaml … (best first) and, with plotly
    installed, pareto.html (``plots.charts.pareto_chart``, self-contained), written to a temporary folder beside
    ``folder`` and moved into place whole (``staged_folder``: a folder that filled up while the search ran is
    refused as at the start). ``interrupted``: the signal that stopped the search (0: none). Returns why
    pareto.html was not written (the import that failed), or None."""
    missing = None
    try:
        from simmodel.plots.charts import pareto_chart
    except ImportError as exc:  # (the plot extra is not installed: the caller says so, with the import's error)
        pareto_chart, missing = None, str(exc)
    with staged_folder(folder, overwrite, "recommend", scenario) as staging:
        if pareto_chart is not None:
            (staging / "pareto.html").write_text(pareto_chart(entries, ranked, spec.pareto).to_html(
                include_plotlyjs=True))
        ledger = {"target": spec.target, "objectives": [m for m, _ in spec.objectives], "sla": asdict(spec.sla),
                  "algorithm": spec.algorithm, "seed": spec.seed, "interrupted": bool(interrupted),
                  "ranked": [e["id"] for e in ranked], "candidates": entries}
        (staging / "recommendation.json").write_text(json.dumps(ledger, indent=2, default=str) + "\n")
        paths = sorted({p for e in entries for p in e.get("choices", {})})
        with (staging / "recommendation.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["id", "rank", "status", "reason_category", "score", "gpu_count", *paths, *CSV_METRICS])
            order = {e["id"]: i for i, e in enumerate(ranked, start=1)}
            for e in entries:
                m = e["metrics"] or {}
                writer.writerow([e["id"], order.get(e["id"], ""), e["status"], e["reason_category"] or "",
                                 "" if e["score"] is None else e["score"],
                                 "" if e["gpu_count"] is None else e["gpu_count"],
                                 *(json.dumps(e.get("choices", {}).get(p)) for p in paths),
                                 *("" if m.get(k) is None else m[k] for k in CSV_METRICS)])
        saved = staging / "recommendations"
        saved.mkdir()
        for i, e in enumerate(ranked, start=1):
            scenario_data = with_sla(runnable(e["config"], base_dir), spec.sla, spec.gpu_hour_price)
            (saved / f"{i:04d}.yaml").write_text(yaml.safe_dump(scenario_data, sort_keys=False))
    return missing
