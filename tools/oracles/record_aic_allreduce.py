#!/usr/bin/env python3
"""Record the all-reduce latencies NVIDIA measured on each GPU system under vLLM (AIConfigurator's tables).

Regenerate (from the repo root), with the Python that has ``aiconfigurator-core==0.12.0`` (on this machine
/work/venv-aic, made as tools/oracles/record_aic_grid.py says):

    /work/venv-aic/bin/python tools/oracles/record_aic_allreduce.py   # writes benchmarks/data/aic_allreduce.csv

AIConfigurator ships, per GPU system and vLLM version, ``comm/vllm/<version>/custom_allreduce_perf.parquet``:
one BF16 all-reduce through vLLM's ``tensor_model_parallel_all_reduce`` (its custom all-reduce inside a node,
NCCL where that declines), timed inside a CUDA graph among 2, 4 or 8 GPUs of one node, for messages of 128 to
2^29 elements. Its ``message_size`` counts elements, not bytes (AIC's collector, ``collector/
collect_all_reduce.py``, allocates ``[size // 4096, 4096]`` tensors), so a row's message is 2 × message_size
bytes. This script keeps the CUDA-graph rows (``backend`` ``vllm_graph``: vLLM captures its decode passes in
graphs) of the version AIC's own grid used for that system (``record_aic_grid.py``: vLLM 0.24.0; a100_sxm
0.14.0; l40s backward-filled from its 0.22.0 directory, whose rows were collected with vLLM 0.14.0), for
every system both AIC and our registry (``simmodel.perf.hardware.HARDWARE``) know. Deterministic: rows sorted.

Columns: ``system``, ``vllm_version`` (the rows' own), ``gpus``, ``message_bytes``, ``latency_us``.
``benchmarks/allreduce_fit.py`` fits ``simmodel.perf.roofline.ALL_REDUCE`` on this file.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from simmodel.perf.hardware import HARDWARE  # noqa: E402

VERSIONS = {"a100_sxm": "0.14.0", "h100_sxm": "0.24.0", "h200_sxm": "0.24.0", "b200_sxm": "0.24.0",
            "gb200": "0.24.0", "l40s": "0.24.0"}
"""The vLLM database version AIC's grid uses per system (its "current" slot; a100_sxm's only one)."""
BF16_BYTES = 2


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def table(data_root: Path, system: str) -> tuple[Path, pd.DataFrame]:
    """The newest custom all-reduce table at or before the system's version (AIC backward-fills so)."""
    tables = sorted((p for p in (data_root / system / "comm" / "vllm").glob("*/custom_allreduce_perf.parquet")
                     if _key(p.parent.name) <= _key(VERSIONS[system])), key=lambda p: _key(p.parent.name))
    if not tables:
        raise SystemExit(f"{system}: no vLLM custom all-reduce table at or before {VERSIONS[system]}")
    frame = pd.read_parquet(tables[-1])
    frame = frame[frame["backend"] == "vllm_graph"]
    if set(frame["allreduce_dtype"]) != {"bfloat16"}:
        raise SystemExit(f"{tables[-1]}: expected BF16 rows only, got {sorted(set(frame['allreduce_dtype']))}")
    return tables[-1], frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "data" / "aic_allreduce.csv")
    args = parser.parse_args()
    import aiconfigurator_core

    data_root = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
    rows = []
    for system in sorted(VERSIONS):
        assert system in HARDWARE, system
        path, frame = table(data_root, system)
        print(f"{system}: {path.relative_to(data_root)} ({len(frame)} rows, device {frame['device'].iloc[0]})")
        for r in frame.itertuples():
            rows.append((system, str(r.version), int(r.num_gpus), int(r.message_size) * BF16_BYTES,
                         round(float(r.latency) * 1000.0, 4)))
    rows.sort()
    with args.out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("system", "vllm_version", "gpus", "message_bytes", "latency_us"))
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
