"""Wall time of a 64-candidate recommend grid, on one process and on the local process pool.

    python3 benchmarks/recommend_grid.py [--scenario scenarios/recommend-aggregated.yaml] [--workers N]

The search is ``scenarios/recommend-aggregated.yaml``: Llama-3.1-8B-Instruct on H100 SXM, aggregated,
tensor parallel 1, 2, 4 and 8 GPUs × 4 token budgets × 4 sequence limits (64 candidates), each
simulating 1,000 Poisson requests. The search runs twice, in-process (``LocalExecutor(1)``) and on a
pool of ``--workers`` processes (default: one per core), and the script prints both wall times, the
speed-up, the candidates per second, and checks that both ledgers are identical.
"""

# ruff: noqa: T201  (a benchmark script reports on stdout; print is its interface)

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from simmodel.recommend.executor import LocalExecutor
from simmodel.recommend.search import load_search, rank, run_search

ROOT = Path(__file__).resolve().parents[1]


def timed(spec, space, base, workers: int) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    entries, interrupted = run_search(spec, space, base, LocalExecutor(workers))
    assert not interrupted
    return time.perf_counter() - start, entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=ROOT / "scenarios" / "recommend-aggregated.yaml")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    spec, space, base = load_search(args.scenario)
    print(f"{args.scenario.name}: {space.size} candidates, {os.cpu_count()} cores")
    one_s, one = timed(spec, space, base, 1)
    pool_s, pooled = timed(spec, space, base, args.workers)
    best = rank(one, spec)[0]
    print(f"one process:          {one_s:8.1f} s  ({len(one) / one_s:.2f} candidates/s)")
    print(f"pool of {args.workers:<2} processes:  {pool_s:8.1f} s  ({len(pooled) / pool_s:.2f} candidates/s)")
    print(f"speed-up:             {one_s / pool_s:8.2f}x")
    print(f"identical ledgers:    {json.dumps(one) == json.dumps(pooled)}")
    print(f"best: {best['choices']} {spec.target} {best['objectives']}")


if __name__ == "__main__":
    main()
