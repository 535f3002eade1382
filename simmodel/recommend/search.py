"""Run a search: expand the candidates, simulate them on a process pool, rank them and write the ledger."""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from simmodel.config.domains import is_domain
from simmodel.config.load import _model, _Node, apply_overrides, read_yaml
from simmodel.errors import ScenarioError
from simmodel.recommend.executor import LocalExecutor
from simmodel.recommend.space import Candidate, SearchSpace, expand
from simmodel.recommend.spec import SearchSpec, parse_search

TIE = 1e-9
"""Relative difference under which two objective values are the same."""
CSV_METRICS = ("output_throughput_tok_s", "output_throughput_per_gpu", "throughput_per_user",
               "goodput_rps", "sla_attainment", "mean_ttft_ms", "mean_tpot_ms", "mean_e2e_ms")


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
        space = SearchSpace(data, lambda mode: model)
    except ScenarioError as exc:
        raise ScenarioError(f"{path.name}: {exc}", exc.category) from None
    return spec, space, base_dir


def planned(spec: SearchSpec, space: SearchSpace) -> int:
    """How many candidates the search will simulate (at most, for Bayesian search)."""
    return min(spec.max_trials or space.size, space.size)


def run_search(spec: SearchSpec, space: SearchSpace, base_dir: Path, executor=None,
               on_result: Callable[[dict], None] | None = None) -> tuple[list[dict], bool]:
    """Every simulated candidate's ledger entry in candidate order (whatever order the executor finishes
    them in), and whether Ctrl-C stopped the search (the entries are then those that finished)."""
    executor = executor or LocalExecutor(spec.parallelism)
    entries: dict[int, dict] = {}
    candidates: dict[int, Candidate] = {}

    def simulate(batch: list[Candidate]) -> None:
        candidates.update((c.id, c) for c in batch)
        for entry in executor.map([(c.id, c.config, spec, str(base_dir)) for c in batch]):
            entries[entry["id"]] = entry
            if on_result is not None:
                on_result(entry)

    interrupted = False
    try:
        if spec.algorithm == "bayesian":
            from simmodel.recommend.optimize import bayesian
            bayesian(spec, space, simulate, entries)
        else:
            simulate(expand(space, spec.algorithm, spec.max_trials, spec.seed))
        executor.close()
    except KeyboardInterrupt:
        interrupted = True
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
    the Pareto front of the feasible candidates, by the first objective, then fewer GPUs, then order."""
    feasible = [e for e in entries if e["status"] == "feasible"]
    if spec.target == "pareto":
        first = spec.objectives[0][0]
        return sorted(pareto_front(feasible, spec.objectives),
                      key=lambda e: (-e["objectives"][first], e["metrics"]["gpu_count"], e["id"]))
    return sorted(feasible, key=lambda e: (-e["score"], e["metrics"]["gpu_count"], e["id"]))


def runnable(config: dict, base_dir: Path) -> dict:
    """A candidate as a scenario file saved elsewhere: a relative trace path made absolute."""
    source = (config.get("traffic") or {}).get("source")
    if isinstance(source, dict) and isinstance(source.get("path"), str) and not Path(source["path"]).is_absolute():
        config = json.loads(json.dumps(config))
        config["traffic"]["source"]["path"] = str((base_dir / source["path"]).resolve())
    return config


def write_ledger(folder: Path, spec: SearchSpec, entries: list[dict], ranked: list[dict], base_dir: Path,
                 interrupted: bool = False) -> None:
    """recommendation.json, recommendation.csv and recommendations/0001.yaml … (best first), written to a
    temporary folder beside ``folder`` and moved into place whole."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        ledger = {"target": spec.target, "objectives": [m for m, _ in spec.objectives], "sla": vars(spec.sla),
                  "algorithm": spec.algorithm, "seed": spec.seed, "interrupted": interrupted,
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
            (saved / f"{i:04d}.yaml").write_text(yaml.safe_dump(runnable(e["config"], base_dir), sort_keys=False))
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
