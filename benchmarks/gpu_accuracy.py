"""The default timing on GPUs other than H100/H200, against AIConfigurator's measured vLLM kernels
(``benchmarks/data/aic_grid_gpus.csv``, recorded by ``tools/oracles/record_aic_grid.py --systems ...``):
each GPU's achieved fractions of its datasheet peaks (``simmodel.perf.roofline.ACHIEVED``) fitted on its
own one-GPU points and checked on the rest (tensor-parallel points included, their all-reduces priced as
the GPU system measured them: ``roofline.ALL_REDUCE``). ``accuracy_report.py`` writes the result into the kernel-table
part of ``docs/accuracy.md``.

    python3 benchmarks/gpu_accuracy.py        # print the section

The dense grid's points (``accuracy_report.load``), priced as there, with the code's defaults for every
other constant. Per GPU, only the compute and memory fractions are fitted (robust least squares on
log(ours / AIC), soft-L1, scale 0.05; rounded to 0.01), on the TP-1 points at even grid positions (no
all-reduce in the pass, so the fractions are the GPU's own). HELD-OUT: the points at odd positions, every TP.
"""

# ruff: noqa: T201  (a benchmark script reports on stdout; print is its interface)

from __future__ import annotations

from dataclasses import replace

import numpy as np
from accuracy_report import SOFT_L1_SCALE, _even, current_defaults, load, pct, price, stats

from simmodel.perf.roofline import ACHIEVED

REPO_DATA = "benchmarks/data/aic_grid_gpus.csv"


def fit_fractions(one_gpu) -> tuple[float, float]:
    """The compute and memory fractions fitted on the one-GPU points ``one_gpu`` (the other constants the
    defaults); rounded to 0.01."""
    from scipy.optimize import least_squares

    base = current_defaults()
    aic = np.log([p.aic_ms for p in one_gpu])
    res = least_squares(lambda x: np.log(price(one_gpu, replace(base, compute=float(x[0]), memory=float(x[1])))) - aic,
                        np.array([base.compute, base.memory]), bounds=(0.01, 1.0), loss="soft_l1",
                        f_scale=SOFT_L1_SCALE, x_scale=0.1, diff_step=1e-3)
    compute, memory = (round(float(v), 2) for v in res.x)
    return compute, memory


def section(path) -> tuple[list[str], np.ndarray, dict]:
    """The markdown, the held-out errors with the code's defaults, and each GPU's fitted fractions."""
    points, skipped, grid = load(path)
    base = current_defaults()
    lines: list[str] = []
    w = lines.append
    w("### Other GPUs: each one's achieved fractions")
    w("")
    w(f"`{REPO_DATA}`: the same dense grid on {', '.join(sorted({p.system for p in points}))} ({len(points)} points")
    w(f"priced, {len(skipped)} flagged by AIC: out of memory, or a TP its all-reduce tables do not measure).")
    w("Kernels reach a different fraction of each GPU's datasheet peaks: the constants fitted on H100 leave")
    w("A100's decode 18 % short and Blackwell's prefill 14–24 % short. Each GPU's compute and memory fractions")
    w("(`ACHIEVED` in `simmodel/perf/roofline.py`, used when the scenario sets none) are fitted on its own")
    w("TP-1 points at even grid positions (`benchmarks/gpu_accuracy.py`); the points at odd positions, every TP,")
    w("are held out, their all-reduces priced as the GPU system measured them (\"All-reduce\" above).")
    w("")
    w("| GPU | fitted compute / memory | in the code | held-out n | held-out median abs err | within ±25% | "
      f"median signed | with H100's {base.compute:g} / {base.memory:g}: median abs err | within ±25% |")
    w("|---|---|---|---:|---:|---:|---:|---:|---:|")
    held_err, fitted = [], {}
    for system in sorted({p.system for p in points}):
        mine = [p for p in points if p.system == system]
        held = [p for p in mine if not _even(p, grid)]
        fitted[system] = fit_fractions([p for p in mine if p.tp == 1 and _even(p, grid)])
        code = ACHIEVED.get(system, (base.compute, base.memory))
        aic = np.array([p.aic_ms for p in held])
        err = price(held, replace(base, compute=code[0], memory=code[1])) / aic - 1
        h100 = price(held, base) / aic - 1
        held_err.append(err)
        s, g = stats(err), stats(h100)
        w(f"| {system} | {' / '.join(f'{v:g}' for v in fitted[system])} | {' / '.join(f'{v:g}' for v in code)} | "
          f"{s['n']} | "
          f"{pct(s['median'])} | {pct(s['within'])} | {pct(s['bias'], True)} | {pct(g['median'])} | "
          f"{pct(g['within'])} |")
    w("")
    stale = [s for s, f in fitted.items() if ACHIEVED.get(s) != f]
    w("**The code's fractions differ from the fitted ones:** " + ", ".join(stale) + "." if stale else
      "The code's fractions are the fitted ones.")
    w("")
    w("The A100 tables are AIC's vLLM 0.14.0 database (its only one for A100); the others vLLM 0.24.0. GB200's")
    w("TP-8 points are not in the file: AIC's GB200 all-reduce tables stop at 4 GPUs.")
    w("")
    return lines, np.concatenate(held_err), fitted


def main() -> int:
    from accuracy_report import REPO

    lines, _, fitted = section(REPO / REPO_DATA)
    print("\n".join(lines))
    print("fitted:", fitted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
