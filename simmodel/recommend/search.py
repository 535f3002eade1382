"""Run a search: expand the candidates, simulate them on a process pool, rank them and write the ledger."""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml

from simmodel.config.domains import is_domain
from simmodel.config.load import _model, _Node, apply_overrides, read_yaml
from simmodel.errors import ScenarioError
from simmodel.recommend.evaluate import evaluate
from simmodel.recommend.space import Candidate, expand
from simmodel.recommend.spec import SearchSpec, parse_search

CSV_METRICS = ("gpu_count", "output_throughput_tok_s", "output_throughput_per_gpu", "throughput_per_user",
               "goodput_rps", "sla_attainment", "mean_ttft_ms", "mean_tpot_ms", "mean_e2e_ms")


def load_search(path: Path, overrides=()) -> tuple[SearchSpec, list[Candidate], Path]:
    """Read a search scenario: its spec and candidates; errors name the file."""
    try:
        data = apply_overrides(read_yaml(path), overrides)
        spec = parse_search(data)
        base_dir = path.resolve().parent
        engine = data.get("engine") if isinstance(data.get("engine"), dict) else {}
        for key in ("model", "hardware"):
            if is_domain(engine.get(key)):
                raise ScenarioError(f"engine.{key}: one per search (not searched); run one search per {key}")
        model = _model(_Node(engine, "engine"), base_dir)[1]
        candidates = expand(data, lambda mode: model, spec.algorithm, spec.max_trials, spec.seed)
    except ScenarioError as exc:
        raise ScenarioError(f"{path.name}: {exc}", exc.category) from None
    return spec, candidates, base_dir


def run_search(spec: SearchSpec, candidates: list[Candidate], base_dir: Path, workers: int | None = None,
               on_result=None) -> list[dict]:
    """Every candidate's ledger entry, in candidate order (whatever order the pool finishes them in)."""
    workers = workers or spec.parallelism or os.cpu_count() or 1
    entries: dict[int, dict] = {}
    if workers == 1:
        for c in candidates:
            entries[c.id] = evaluate(c.id, c.config, spec, str(base_dir))
            if on_result is not None:
                on_result(entries[c.id])
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(evaluate, c.id, c.config, spec, str(base_dir)) for c in candidates]
            try:
                for future in futures:
                    entry = future.result()
                    entries[entry["id"]] = entry
                    if on_result is not None:
                        on_result(entry)
            except KeyboardInterrupt:
                for future in futures:
                    future.cancel()
                raise
    for c in candidates:
        if c.id in entries:
            entries[c.id]["choices"] = c.choices
            entries[c.id]["config"] = c.config
    return [entries[c.id] for c in candidates if c.id in entries]


def rank(entries: list[dict]) -> list[dict]:
    """Feasible candidates best first: by score, then fewer GPUs, then candidate order."""
    feasible = [e for e in entries if e["status"] == "feasible"]
    return sorted(feasible, key=lambda e: (-e["score"], e["metrics"]["gpu_count"], e["id"]))


def runnable(config: dict, base_dir: Path) -> dict:
    """A candidate as a scenario file saved elsewhere: a relative trace path made absolute."""
    source = (config.get("traffic") or {}).get("source")
    if isinstance(source, dict) and isinstance(source.get("path"), str) and not Path(source["path"]).is_absolute():
        config = json.loads(json.dumps(config))
        config["traffic"]["source"]["path"] = str((base_dir / source["path"]).resolve())
    return config


def write_ledger(folder: Path, spec: SearchSpec, entries: list[dict], ranked: list[dict], base_dir: Path) -> None:
    """recommendation.json, recommendation.csv and recommendations/0001.yaml … (best first), written to a
    temporary folder beside ``folder`` and moved into place whole."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        ledger = {"target": spec.target, "sla": vars(spec.sla), "algorithm": spec.algorithm,
                  "ranked": [e["id"] for e in ranked], "candidates": entries}
        (staging / "recommendation.json").write_text(json.dumps(ledger, indent=2, default=str) + "\n")
        paths = sorted({p for e in entries for p in e.get("choices", {})})
        with (staging / "recommendation.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["id", "rank", "status", "reason_category", "score", *paths, *CSV_METRICS])
            order = {e["id"]: i for i, e in enumerate(ranked, start=1)}
            for e in entries:
                m = e["metrics"] or {}
                writer.writerow([e["id"], order.get(e["id"], ""), e["status"], e["reason_category"] or "",
                                 "" if e["score"] is None else e["score"],
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
