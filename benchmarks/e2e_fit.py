"""Fit the default timing's end-to-end terms on the real vLLM runs of ``benchmarks/data/vllm_h100_e2e.json``
with ``simmodel calibrate``'s own fit, once on every run and once per model with that model's runs held
out (leave one model out), and write the fitted values to ``benchmarks/data/vllm_h100_e2e_fit.json``.

    python3 benchmarks/e2e_fit.py [--jobs N] [--scale F]   # needs SciPy (pip install 'simmodel[calibrate]')

The all-runs values are the defaults (``simmodel.perf.roofline``); ``accuracy_report.py`` predicts each
model's runs with the values fitted without them, which is the error docs/accuracy.md reports. Fitted:
``FITTED`` (the frontend's time per request outside the passes); the pass-pricing constants stay those
fitted on the kernel tables. Each run is simulated as ``e2e_accuracy.py`` does, its stages shortened to
``--scale`` of their length (at least ``MIN_STAGE_S``; the stages are steady within a few seconds, and a
fit simulates them a few dozen times). Fitted figures per stage: E2E and TTFT mean and p90, and the time
per output token (E2E − TTFT over the output count the client counted); the saturated stage is left out.
"""

# ruff: noqa: T201  (a benchmark script reports on stdout; print is its interface)

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import e2e_accuracy as e2e
import yaml

from simmodel.calibrate.fit import Plan, Run, calibrate
from simmodel.compare.measured import DERIVED_TPOT, Figure, Measurement, Scope
from simmodel.config.calibration import identity_of
from simmodel.config.load import parse_scenario

OUT = e2e.REPO / "benchmarks" / "data" / "vllm_h100_e2e_fit.json"
FITTED = ["request_overhead_ms"]
SCALE = 0.2
MIN_STAGE_S = 60.0


def measurement(run: dict) -> Measurement:
    """The run's measured stage figures as inference-perf reports them (ms)."""
    scopes = []
    for k, m in enumerate(run["measured"]):
        scope = Scope(f"stage {k}", k)
        for stat in ("mean", "p90"):
            scope.figures.append(Figure("request_latency", stat, m["e2e_ms"][stat], "e2e"))
            scope.figures.append(Figure("time_to_first_token", stat, m["ttft_ms"][stat], "ttft_multi_token"))
        # the client's output count, from the derived step it was computed with: (E2E − TTFT) / (n − 1)
        tokens = (m["e2e_ms"]["mean"] - m["ttft_ms"]["mean"]) / m["itl_ms_mean"] + 1
        scope.figures.append(Figure(DERIVED_TPOT, "mean", m["itl_ms_mean"], "decode_step_from_means", tokens))
        scopes.append(scope)
    return Measurement("inference-perf", e2e.DATA, scopes)


def fit_runs(data: dict, folder: Path, scale: float) -> list[Run]:
    """One calibration run per simulated run of the record (stages shortened), the saturated one left out."""
    runs = []
    for run in data["runs"]:
        if run["stages"] is None or any(m.get("failures", 0) for m in run["measured"]):
            continue
        short = dict(run, stages=[dict(s, duration_s=max(MIN_STAGE_S, s["duration_s"] * scale))
                                  for s in run["stages"]])
        path = folder / f"{run['id']}.yaml"
        path.write_text(yaml.safe_dump(e2e.scenario(short, folder)))
        role = parse_scenario(yaml.safe_load(path.read_text()), folder).engine
        deployments = [identity_of("aggregated", role.workers["aggregated"].deployment, role.backend,
                                   role.workers["aggregated"].parallelism)]
        runs.append(Run(run["id"], path, [], measurement(run), ["aggregated"], deployments))
    return runs


def fold(runs: list[Run], held_model: str | None, models: dict[str, str], jobs: int) -> dict:
    for r in runs:
        r.held_out = models[r.name] == held_model
    plan = Plan(runs, list(FITTED))
    t0 = time.perf_counter()
    values = calibrate(plan, jobs=jobs)
    print(f"  held out {held_model or 'nothing'}: {values} ({time.perf_counter() - t0:.0f} s)"
          + "".join(f"\n    note: {n}" for n in plan.notes), flush=True)
    return {name: round(value, 3) for name, value in values.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2, help="processes simulating the fit runs side by side")
    ap.add_argument("--scale", type=float, default=SCALE, help="stage length, as a fraction of the measured one")
    args = ap.parse_args(argv)
    data = e2e.load()
    with tempfile.TemporaryDirectory() as folder:
        runs = fit_runs(data, Path(folder), args.scale)
        models = {r["id"]: r["model"] for r in data["runs"]}
        names = sorted({models[r.name] for r in runs})
        print(f"fitting {FITTED} on {len(runs)} runs of {len(names)} models", flush=True)
        result = {"fitted": FITTED, "scale": args.scale, "runs": [r.name for r in runs],
                  "all": fold(runs, None, models, args.jobs),
                  "without": {m: fold(runs, m, models, args.jobs) for m in names}}
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(e2e.REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
