#!/usr/bin/env python3
"""Record the all-reduce latencies NVIDIA measured on each GPU system under vLLM, SGLang and TensorRT-LLM
(AIConfigurator's tables).

Regenerate (from the repo root), with the Python that has ``aiconfigurator-core==0.12.0`` (on this machine
/work/venv-aic, made as tools/oracles/record_aic_grid.py says):

    /work/venv-aic/bin/python tools/oracles/record_aic_allreduce.py   # writes benchmarks/data/aic_allreduce.csv

AIConfigurator ships, per GPU system, engine and version, ``comm/<engine>/<version>/custom_allreduce_perf.parquet``:
one BF16 all-reduce through the engine's ``tensor_model_parallel_all_reduce`` (its custom all-reduce inside a
node, NCCL where that declines), timed inside a CUDA graph among 2, 4 or 8 GPUs of one node, for messages of
128 to 2^29 elements. Its ``message_size`` counts elements, not bytes (AIC's collector, ``collector/
collect_all_reduce.py``, allocates ``[size // 4096, 4096]`` tensors), so a row's message is 2 × message_size
bytes. This script keeps the CUDA-graph rows (``backend`` ``vllm_graph`` / ``sglang_graph``: both engines
capture their decode passes in graphs), for every system both AIC and our registry
(``simmodel.perf.hardware.HARDWARE``) know: for vLLM, of the version AIC's own grid used for that system
(``record_aic_grid.py``: vLLM 0.24.0; a100_sxm 0.14.0; l40s backward-filled from its 0.22.0 directory,
whose rows were collected with vLLM 0.14.0); for SGLang, of its newest version there (0.5.14; a100_sxm
0.5.10).

TensorRT-LLM's tables (``comm/trtllm/<version>/``) have no ``backend`` column: every row times the same thing,
BF16 (``allreduce_dtype``; ``implementation`` ``trtllm`` where that column exists), so all rows are kept. AIC's
collector (``collector/collect_all_reduce.py``, later ``collector/network/``, in ai-dynamo/aiconfigurator) runs
TRT-LLM's own ``AllReduce`` module (``tensorrt_llm._torch.distributed``) with ``AllReduceStrategy.AUTO`` and no
fusion: the strategy a TRT-LLM server uses by default, one-shot, two-shot or NCCL by size from its lookup table
(for 1.3.0rc20 with ``TLLM_DISABLE_ALLREDUCE_AUTOTUNE=1``, so that the lookup table decides, as in serving,
rather than the autotuner's NCCL choice). It times the ops inside a CUDA graph, as TRT-LLM's decode passes
run (1.0.0: 5 all-reduces a graph; 1.3.0rc20: 100, each followed by a small matmul whose own graph's time is
subtracted), on a ``[size // 4096, 4096]`` tensor: ``message_size`` counts elements here too (the 1.0.0
collector: "element count, not bytes"), 2 bytes each (the 1.0.0 rows' float16, the collector's default then,
was relabelled bfloat16 by AIC's renaming of 16-bit types). Version: per system the newest with a custom
all-reduce table, which is also AIC's "current" TRT-LLM database (``get_latest_database_version``):
1.3.0rc20, the full sweep collected for AIC's 1.3.0rc20 upgrade, on b200_sxm, gb200, h100_sxm and h200_sxm
(it supersedes 1.2.0rc5 and 1.3.0rc10); l40s's 1.3.0rc20 directory (like its 1.3.0rc15 one) is a copy of its
1.0.0 rows (``version`` 1.0.0: L40S was not collected again); a100_sxm has only 1.0.0. Deterministic: rows
sorted (vLLM's and SGLang's rows are as before: ``trtllm`` sorts between them).

Columns: ``engine`` (vllm, sglang, trtllm), ``system``, ``version`` (the rows' own), ``gpus``, ``message_bytes``,
``latency_us``.
``benchmarks/allreduce_fit.py`` fits ``simmodel.perf.roofline.ALL_REDUCE`` on this file.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from simmodel.perf.hardware import HARDWARE  # noqa: E402

VERSIONS = {"vllm": {"a100_sxm": "0.14.0", "h100_sxm": "0.24.0", "h200_sxm": "0.24.0", "b200_sxm": "0.24.0",
                     "gb200": "0.24.0", "l40s": "0.24.0"},
            "sglang": {"a100_sxm": "0.5.14", "h100_sxm": "0.5.14", "h200_sxm": "0.5.14", "b200_sxm": "0.5.14",
                       "gb200": "0.5.14", "l40s": "0.5.14"},
            "trtllm": {"a100_sxm": "1.0.0", "h100_sxm": "1.3.0rc20", "h200_sxm": "1.3.0rc20", "b200_sxm": "1.3.0rc20",
                       "gb200": "1.3.0rc20", "l40s": "1.3.0rc20"}}
"""Per engine, the newest database version taken per system (vLLM: the one AIC's grid uses, its "current"
slot, a100_sxm's only one; SGLang: 0.5.14, or the newest before it; TRT-LLM: 1.3.0rc20, AIC's "current",
a100_sxm's only one, 1.0.0)."""
BF16_BYTES = 2


def _key(version: str) -> tuple[int, ...]:
    """A database version's order: 1.3.0rc10 < 1.3.0rc20 < 1.3.0 < 1.3.0.post1 < 1.3.1."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:rc(\d+)|\.post(\d+))?", version)
    if match is None:
        raise SystemExit(f"unrecognised database version {version!r}")
    major, minor, patch, rc, post = match.groups()
    stage = (0, int(rc)) if rc is not None else (2, int(post)) if post is not None else (1, 0)
    return (int(major), int(minor), int(patch), *stage)


def _measured(frame: pd.DataFrame, engine: str, path: Path) -> pd.DataFrame:
    """The rows of the engine's default all-reduce in CUDA graphs: vLLM's and SGLang's ``<engine>_graph``
    rows; TRT-LLM's table holds only those (its AUTO strategy, graph-captured), checked by its columns."""
    if engine != "trtllm":
        return frame[frame["backend"] == f"{engine}_graph"]
    if "backend" in frame or set(frame["framework"]) != {"TRTLLM"} or (
            "implementation" in frame and set(frame["implementation"]) != {"trtllm"}):
        raise SystemExit(f"{path}: not TRT-LLM's own all-reduce rows only")
    return frame


def table(data_root: Path, engine: str, system: str) -> tuple[Path, pd.DataFrame]:
    """The newest custom all-reduce table at or before the system's version (AIC backward-fills so)."""
    top = VERSIONS[engine][system]
    tables = sorted((p for p in (data_root / system / "comm" / engine).glob("*/custom_allreduce_perf.parquet")
                     if _key(p.parent.name) <= _key(top)), key=lambda p: _key(p.parent.name))
    if not tables:
        raise SystemExit(f"{system}: no {engine} custom all-reduce table at or before {top}")
    frame = _measured(pd.read_parquet(tables[-1]), engine, tables[-1])
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
    for engine, systems in VERSIONS.items():
        for system in sorted(systems):
            assert system in HARDWARE, system
            path, frame = table(data_root, engine, system)
            print(f"{engine} {system}: {path.relative_to(data_root)} ({len(frame)} rows, device "
                  f"{frame['device'].iloc[0]})")
            for r in frame.itertuples():
                rows.append((engine, system, str(r.version), int(r.num_gpus), int(r.message_size) * BF16_BYTES,
                             round(float(r.latency) * 1000.0, 4)))
    rows.sort()
    with args.out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("engine", "system", "version", "gpus", "message_bytes", "latency_us"))
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
