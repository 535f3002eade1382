"""How well the default roofline constants price TensorRT-LLM's passes, and TRT-LLM's own fitted constants.

    python3 benchmarks/trtllm_fit.py [--csv benchmarks/data/aic_grid_trtllm.csv] [--vllm-csv benchmarks/data/aic_grid.csv]

Reads ``benchmarks/data/aic_grid_trtllm.csv`` (the dense grid of ``aic_grid.csv`` recorded from AIConfigurator's
TensorRT-LLM tables: ``tools/oracles/record_aic_grid.py --backend trtllm``; this script needs no AIConfigurator)
and prices every point with ``RooflineTiming(..., engine="trtllm")`` (TRT-LLM's measured all-reduce,
``roofline.ALL_REDUCE["trtllm"]``), through ``accuracy_report.price``, with

* **current defaults**: whatever ``Efficiency()`` and ``HostOverhead()`` hold in the code now (fitted on
  vLLM's kernels, ``accuracy_report.py``);
* **fitted for TRT-LLM**: the same five constants (compute and memory efficiency, prefill and decode host
  overhead, per-layer overhead) fitted on this grid's FIT points by ``accuracy_report.fit`` (soft-L1 least
  squares on log(ours / AIC), the same bounds and two starts) and rounded by ``accuracy_report.rounded``.

The FIT / HELD-OUT split is ``accuracy_report.load``'s: FIT = h100_sxm points on even grid positions,
HELD-OUT = the rest (every h200_sxm point and the odd h100_sxm positions). For reference it also prints the
current defaults on the vLLM grid (``aic_grid.csv``, engine vllm), the numbers ``docs/accuracy.md`` reports.
Prints markdown tables; writes nothing.
"""

# ruff: noqa: T201  (a benchmark script reports on stdout; print is its interface)

from __future__ import annotations

import argparse
from pathlib import Path

import accuracy_report as ar
import numpy as np

REPO = Path(__file__).resolve().parents[1]
TRTLLM_CSV = REPO / "benchmarks" / "data" / "aic_grid_trtllm.csv"
ENGINE = "trtllm"


def error_rows(label: str, points: list, err: np.ndarray) -> list[list[str]]:
    """One row per split (fit, held-out, all) and per kind within it."""
    fit = np.array([p.fit for p in points])
    kinds = np.array([p.kind for p in points])
    rows = []
    for split, mask in (("fit", fit), ("held-out", ~fit), ("all", np.ones_like(fit))):
        for kind in ("all", "prefill", "decode"):
            m = mask if kind == "all" else mask & (kinds == kind)
            s = ar.stats(err[m])
            rows.append([label, split, kind, str(s["n"]), ar.pct(s["median"]), ar.pct(s["within"]),
                         ar.pct(s["bias"], True), ar.pct(s["p90"]), ar.pct(s["worst"], True)])
    return rows


HEADER = ["constants", "split", "kind", "n", "median abs err", "within ±25%", "median signed", "p90 abs err", "worst"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=TRTLLM_CSV)
    ap.add_argument("--vllm-csv", type=Path, default=ar.DEFAULT_CSV, help="reference: the vLLM grid ('' to skip)")
    args = ap.parse_args(argv)

    points, skipped, grid = ar.load(args.csv)
    aic = np.array([p.aic_ms for p in points])
    fit_pts = [p for p in points if p.fit]
    defaults = ar.current_defaults()
    fitted_raw, method = ar.fit(fit_pts, ar.FIT_START, ENGINE)
    fitted = ar.rounded(fitted_raw)
    err = {name: ar.price(points, c, ENGINE) / aic - 1
           for name, c in (("current defaults", defaults), ("fitted (rounded)", fitted))}

    print(f"## TensorRT-LLM grid: {args.csv.name} ({', '.join(grid['versions'])})\n")
    print(f"{len(points)} priced points ({len(fit_pts)} fit, {len(points) - len(fit_pts)} held-out), "
          f"{len(skipped)} skipped by AIC; engine={ENGINE!r}; fit by {method}\n")
    print("### Constants\n")
    print(ar.table(["constants", *ar.PARAMS],
                   [[name, *ar.fmt_constants(c)] for name, c in (("current defaults", defaults),
                                                                 ("fitted (raw)", fitted_raw),
                                                                 ("fitted (rounded)", fitted))]))
    print("\n(raw, full precision: " + ", ".join(f"{n}={float(v)!r}" for n, v in zip(ar.PARAMS, fitted_raw.vector(),
                                                                              strict=True)) + ")\n")
    for name, e in err.items():
        print(f"### Errors, {name} (ours / AIC − 1)\n")
        print(ar.table(HEADER, error_rows(name, points, e), "lllrrrrrr"))
        print()

    print("### By system and kind (median signed error: current defaults → fitted)\n")
    rows = []
    for system in sorted({p.system for p in points}):
        for kind in ("prefill", "decode"):
            m = np.array([p.system == system and p.kind == kind for p in points])
            d, f = ar.stats(err["current defaults"][m]), ar.stats(err["fitted (rounded)"][m])
            rows.append([system, kind, str(d["n"]), f"{ar.pct(d['bias'], True)} → {ar.pct(f['bias'], True)}",
                         f"{ar.pct(d['median'])} → {ar.pct(f['median'])}"])
    print(ar.table(["system", "kind", "n", "median signed", "median abs err"], rows, "llrrr"))
    print()

    if str(args.vllm_csv):
        vpoints, _, vgrid = ar.load(args.vllm_csv)
        verr = ar.price(vpoints, defaults) / np.array([p.aic_ms for p in vpoints]) - 1
        print(f"### Reference: current defaults on the vLLM grid ({args.vllm_csv.name}, engine 'vllm', "
              f"{', '.join(vgrid['versions'])})\n")
        print(ar.table(HEADER, [r for r in error_rows("current defaults", vpoints, verr) if r[2] == "all"],
                       "lllrrrrrr"))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
