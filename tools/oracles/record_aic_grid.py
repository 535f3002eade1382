#!/usr/bin/env python3
"""Record NVIDIA AIConfigurator's measured-kernel latencies on the accuracy-report grid.

Regenerate (from the repo root, /work/main), with a Python that has ``aiconfigurator==0.12.0`` and
``aiconfigurator-core==0.12.0`` installed (on this machine: /work/venv-aic):

    /work/venv-aic/bin/python tools/oracles/record_aic_grid.py          # writes benchmarks/data/aic_grid.csv
    /work/venv-aic/bin/python tools/oracles/record_aic_grid.py --out /tmp/x.csv --systems h200_sxm
    /work/venv-aic/bin/python tools/oracles/record_aic_grid.py --grid moe   # writes benchmarks/data/aic_grid_moe.csv
    /work/venv-aic/bin/python tools/oracles/record_aic_grid.py --systems a100_sxm,l40s,b200_sxm,gb200 \
        --out benchmarks/data/aic_grid_gpus.csv                          # the dense grid on the other GPUs
    /work/venv-aic/bin/python tools/oracles/record_aic_grid.py --backend trtllm
                                                         # writes benchmarks/data/aic_grid_trtllm.csv

(/work/venv-aic was made as ../shared/oracles/install_peers.sh makes its AIC venv: ``python3 -m venv``,
then ``pip install`` of the two 0.12.0 wheels, aiconfigurator_core-0.12.0-cp311-abi3-manylinux_2_28_x86_64.whl
and aiconfigurator-0.12.0-py3-none-any.whl, which pull numpy, pandas, pyarrow, ...)

The dense grid (the default, ``--grid dense``) takes about 15 seconds, is deterministic (two runs give
byte-identical files) and needs no GPU: AIC composes a forward pass from per-operator latencies (GEMM,
context/generation attention, custom all-reduce, ...) interpolated from tables that NVIDIA measured on
real H100/H200 GPUs under vLLM (per-op source "silicon"), plus empirical formulas for the small
elementwise ops (norms, activation, embedding; source "empirical"). For every point of this grid
``EngineHandle.last_provenance()`` is None, i.e. no op fell back to a coarser estimate tier (the script
stops otherwise).
``benchmarks/accuracy_report.py`` reads the CSV with the ordinary python and needs no AIC. ``--grid moe``
(about 25 seconds, deterministic too) records the same kinds of points for the mixture-of-experts / MLA
models below into their own file (extra columns, see the end).

What is queried (backend ``vllm``, AIC's "current" database slot, BF16 weights/KV/activations,
no prefix, pp = attention-DP = 1), through ``aiconfigurator.sdk.inference_session.InferenceSession.
run_static`` — the path ``aiconfigurator.cli.api.cli_estimate(mode="static_ctx"|"static_gen")`` runs —
and cross-checked against the compiled fast path ``aiconfigurator_core.sdk.engine.EngineHandle``:

* ``kind=prefill``, ``batch=1``, ``context_or_isl=ISL``: one prefill pass of one fresh ISL-token prompt
  (no cached prefix). ``static_ctx`` TTFT == ``EngineHandle.predict_prefill_latency(1, ISL, 0)``; it
  includes the LM head for the last token and no encoder.
* ``kind=decode``, ``batch=B``, ``context_or_isl=C``: ONE decode step (not a total) of B sequences, each
  with C tokens already in its KV cache and one new token (attention span C + 1). ``static_gen`` with
  ``isl=C, osl=2`` runs exactly one generation step, at ``s = isl + 1``; it equals
  ``EngineHandle.decode_step_latency(B, C, 1)``. (``decode_step_latency(gen_tokens, isl, osl)`` prices
  one step at ``s = isl + osl // 2 + 1`` — the mid-point of an OSL-long decode — so ``osl = 1`` or
  ``2`` is needed for the step at context C; ``predict_decode_latency(B, isl, osl)`` is the TOTAL of the
  ``osl - 1`` steps at the fixed ``s = isl + 1``.)
* All latencies are GPU time in ms from AIC's kernel tables; AIC's vLLM decode/prefill step has no
  host/scheduler overhead term.

Other GPUs (benchmarks/data/aic_grid_gpus.csv, the fourth command above): the same dense grid on every
other system that both AIC 0.12 (vLLM kernel tables) and our registry (simmodel.perf.hardware.HARDWARE)
know — a100_sxm, l40s, b200_sxm, gb200 (AIC has vLLM tables for b300_sxm, gb300, rtx_pro_6000_server and
b60 too, which our registry lacks; our mi300x is not in AIC). Its "current" vLLM database is 0.24.0 on
l40s, b200_sxm and gb200, and 0.14.0 on a100_sxm (AIC's per-system override; its only A100 vLLM data),
as the ``aic_version`` column says. Each op's table is the system's own silicon (the parquet ``device``
column names that GPU); l40s has no 0.24.0 all-reduce table, so AIC backward-fills it from its 0.22.0
directory (rows collected with vLLM 0.14.0 on L40S). Every priced point has ``last_provenance()`` None.
On gb200, AIC's custom all-reduce table (and its NCCL table) holds 2 and 4 GPUs only (AIC models a gb200
"node" as 4 GPUs); at tp 8 AIC silently scales the 4-GPU curve by the ring factor (7/8)/(3/4) and still
reports it as silicon, so those points are kept as skipped rows (``aic-extrapolated``, below).

TensorRT-LLM (``--backend trtllm``, benchmarks/data/aic_grid_trtllm.csv, the fifth command; about 15 seconds,
deterministic too, dense grid only: ``--grid moe`` stays vLLM's): the same points, systems and columns, queried
the same way (SDK session cross-checked against ``EngineHandle`` compiled for ``trtllm``; every priced point
has ``last_provenance()`` None), with AIC's backend ``trtllm`` at its "current" database slot
(``get_latest_database_version``), 1.3.0rc20 on both h100_sxm and h200_sxm (``aic_version``
aic0.12.0/trtllm1.3.0rc20). AIC composes the same operator list as for vLLM (embedding, add+norm, QKV GEMM,
attention, projection GEMM, gate/up GEMM, activation, down GEMM, LM head, two all-reduces a layer): the GEMMs,
context/generation attention and the all-reduce come from the TRT-LLM 1.3.0rc20 silicon tables (the
all-reduce: TRT-LLM's ``AllReduce`` with the AUTO strategy, measured at 2, 4 and 8 GPUs on both systems,
so no point is ``aic-extrapolated``; version directories such as 1.3.0rc20 order as rc releases before
1.3.0), the norms, activation and embedding from the same empirical formulas as vLLM's (identical
milliseconds). AIC's memory estimate is the same as for vLLM here, so the same 177 points are ``aic-oom``
with the same reasons (among them every Llama-3.1-70B point at tp 1 on h100_sxm); there is no
``aic-error``. AIC's TRT-LLM static step has no host/scheduler term either. Relative to aic_grid.csv,
point by point: prefill median 1.04× (10th–90th percentile 0.98–1.11×), decode 1.02× (0.96–1.09×).

Points AIC flags are kept as rows with an empty ``aic_ms`` and a ``skip_reason``:
``aic-oom: <total> GiB >= <capacity> GiB`` when AIC's memory estimate for the point (weights +
activations + KV for batch × (ISL + OSL) + NCCL + AIC's 3.5 GiB "others") reaches the GPU's memory
(``InferenceSummary.check_oom()``, the flag behind cli_estimate's "OOM" warning), or
``aic-error: <message>`` when AIC raises, or (dense grid, tp > 1) ``aic-extrapolated: ...`` when the system's
vLLM custom all-reduce table (with the older version directories AIC backward-fills from) has no row at
tp GPUs, so AIC's number is not measured data; the reason quotes the number AIC gave. Columns:

    model           our registry id (simmodel.perf.models.MODELS), e.g. meta-llama/Llama-3.1-8B
    system          AIC / our hardware id: h100_sxm, h200_sxm (aic_grid_gpus.csv: a100_sxm, l40s, b200_sxm, gb200)
    tp              tensor-parallel size
    kind            prefill | decode
    batch           sequences in the pass
    context_or_isl  prefill: prompt tokens; decode: tokens already in KV per sequence
    aic_ms          AIC latency of the pass, ms (empty when skipped)
    aic_version     aiconfigurator-core version / backend database version, e.g. aic0.12.0/vllm0.24.0
                    (aic0.12.0/vllm0.14.0 on a100_sxm; aic0.12.0/trtllm1.3.0rc20 in aic_grid_trtllm.csv)
    skip_reason     empty, or why AIC gave no usable number

``--grid moe`` (benchmarks/data/aic_grid_moe.csv): the same prefill ISLs, decode batches and contexts,
queried the same way (SDK session cross-checked against ``EngineHandle``, which is compiled with the
same MoE layout and KV dtype), for the MoE models that both AIC (a bundled config, i.e. in
``aiconfigurator_core.sdk.common.DefaultHFModels``, and vLLM tables) and our registry know, on h100_sxm
and h200_sxm (``MOE_MODELS`` below; ``--systems`` applies):

* Qwen/Qwen3-30B-A3B (BF16): tp 1, 2, 4 with the experts tensor-sharded (moe_tp = tp) and tp 2, 4 with
  them expert-parallel (moe_ep = tp);
* Qwen/Qwen3-235B-A22B (BF16): tp 4, 8, each with moe_tp = tp and with moe_ep = tp;
* deepseek-ai/DeepSeek-V3 (MLA + MoE; AIC's default for this checkpoint is FP8 block-scaled weights
  and experts, ``fp8_block``, and an FP8 KV cache; attention math stays BF16): tp 8 with moe_tp 8 and
  with moe_ep 8, each with AIC's default FP8 KV and with a BF16 KV cache (vLLM's ``kv_cache_dtype
  auto``; AIC has MLA tables for both). On h100_sxm every point is ``aic-oom`` (AIC's estimate is
  at least 88.6 GiB per GPU, most of it the ~78 GiB of FP8 weights each of the 8 GPUs holds);
* meta-llama/Llama-4-Scout-17B-16E-Instruct (BF16, text only; AIC prices every other layer's attention
  as an 8192-token sliding window and the rest as full attention, where the model chunks 3 layers of 4
  in 8192-token chunks): tp 2, 4, 8 with moe_tp = tp and tp 4, 8 with moe_ep = tp.

Mixed layouts (1 < moe_tp < tp) raise "MoE data missing" in AIC 0.12's vLLM tables and are not
recorded. Not recorded either: mistralai/Mixtral-8x7B-v0.1 (AIC ships its config.json but it is not
in DefaultHFModels, so AIC tries to download it from HuggingFace) and deepseek-ai/DeepSeek-R1 (the
same shapes as DeepSeek-V3). pp = attention-DP = 1 throughout (moe_tp × moe_ep = tp). Every priced
point of this grid is also pure measured data (``EngineHandle.last_provenance()`` is None; the
script stops otherwise). Its columns are the ones above, with four more after ``tp``:

    moe_tp          tensor-parallel size of the routed experts (1 or tp)
    moe_ep          expert-parallel size (1 or tp); moe_tp × moe_ep = tp
    weight_dtype    AIC quant mode of the linear layers and experts: bfloat16 | fp8_block (FP8 weights,
                    128 × 128 block scales); AIC keeps the embedding and LM head in BF16
    kv_dtype        AIC quant mode of the KV cache: bfloat16 | fp8
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
import math
import re
import sys
from importlib.metadata import version as pkg_version
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "benchmarks" / "data" / "aic_grid.csv"
MOE_OUT = REPO / "benchmarks" / "data" / "aic_grid_moe.csv"
TRTLLM_OUT = REPO / "benchmarks" / "data" / "aic_grid_trtllm.csv"

BACKEND = "vllm"
BACKENDS = ("vllm", "trtllm")  # --backend: the dense grid's AIC backend (the MoE grid is vLLM's only)
SYSTEMS = ("h100_sxm", "h200_sxm")
# (our registry id, AIC's bundled model id, tensor-parallel sizes)
MODELS = (
    ("meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B", (1, 2, 4, 8)),
    ("meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B", (1, 2, 4, 8)),
    ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B", (1, 2, 4)),
    ("Qwen/Qwen3-32B", "Qwen/Qwen3-32B", (1, 2, 4)),
)
PREFILL_ISL = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
DECODE_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DECODE_CONTEXT = (128, 512, 1024, 2048, 4096, 8192)
COLUMNS = ("model", "system", "tp", "kind", "batch", "context_or_isl", "aic_ms", "aic_version", "skip_reason")
# MoE grid: (our registry id, AIC's bundled model id, layouts (tp, moe_tp, moe_ep), KV dtypes: None is AIC's
# default for the checkpoint, else an AIC KVCacheQuantMode name)
MOE_MODELS = (
    ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B", ((1, 1, 1), (2, 2, 1), (2, 1, 2), (4, 4, 1), (4, 1, 4)), (None,)),
    ("Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B", ((4, 4, 1), (4, 1, 4), (8, 8, 1), (8, 1, 8)), (None,)),
    ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3", ((8, 8, 1), (8, 1, 8)), (None, "bfloat16")),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "meta-llama/Llama-4-Scout-17B-16E-Instruct",
     ((2, 2, 1), (4, 4, 1), (4, 1, 4), (8, 8, 1), (8, 1, 8)), (None,)),
)
MOE_COLUMNS = ("model", "system", "tp", "moe_tp", "moe_ep", "weight_dtype", "kv_dtype", "kind", "batch",
               "context_or_isl", "aic_ms", "aic_version", "skip_reason")
FAST_PATH_RTOL = 1e-9


class Config:
    """One (model, system, TP[, MoE layout, KV dtype]): the SDK session (latency + OOM) and the compiled
    fast-path handle. ``moe`` False (the dense grid) insists on BF16 everywhere; True takes the
    checkpoint's quant modes as AIC resolves them (``kv_dtype`` overrides the KV cache's) and
    records them in ``weight_dtype`` / ``kv_dtype``."""

    def __init__(self, aic_model: str, system: str, tp: int, moe_tp: int = 1, moe_ep: int = 1,
                 kv_dtype: str | None = None, moe: bool = False, backend: str = BACKEND) -> None:
        from aiconfigurator.sdk.backends.factory import get_backend
        from aiconfigurator.sdk.config_builders import build_model_config
        from aiconfigurator.sdk.inference_session import InferenceSession
        from aiconfigurator.sdk.models import get_model
        from aiconfigurator.sdk.perf_database import get_database_view, get_latest_database_version
        from aiconfigurator_core.sdk.engine import EngineHandle

        # Exactly what cli_estimate resolves for backend_version=None (the "current" slot), BF16.
        self.db_version = get_latest_database_version(system=system, backend=backend)
        database = get_database_view(system, backend, self.db_version, allow_missing_data=True,
                                     database_mode=None, transfer_policy=None)
        model_config = build_model_config(
            tp_size=tp, pp_size=1, attention_dp_size=1, moe_tp_size=moe_tp, moe_ep_size=moe_ep,
            gemm_quant_mode=None, kvcache_quant_mode=kv_dtype, fmha_quant_mode=None, moe_quant_mode=None,
            comm_quant_mode=None)
        model = get_model(aic_model, model_config, backend)  # infers the quant modes from the model config
        quant = {field: getattr(getattr(model_config, field), "name", None)
                 for field in ("gemm_quant_mode", "kvcache_quant_mode", "fmha_quant_mode", "moe_quant_mode")}
        expect = {"fmha_quant_mode": "bfloat16"} if moe else dict.fromkeys(
            ("gemm_quant_mode", "kvcache_quant_mode", "fmha_quant_mode"), "bfloat16")
        if moe:
            expect["moe_quant_mode"] = quant["gemm_quant_mode"]  # one weight_dtype column holds both
            if kv_dtype is not None:
                expect["kvcache_quant_mode"] = kv_dtype
        for field, want in expect.items():
            if quant[field] != want:
                raise SystemExit(f"{aic_model} on {system}: AIC resolved {field}={quant[field]}, expected {want}")
        self.weight_dtype, self.kv_dtype = quant["gemm_quant_mode"], quant["kvcache_quant_mode"]
        self.moe = moe
        self.allreduce_gpus = _allreduce_gpus(Path(database.systems_root) / database.system_spec["data_dir"],
                                              self.db_version, backend)
        self.session = InferenceSession(model, database, get_backend(backend))
        layout = {"moe_tp_size": moe_tp, "moe_ep_size": moe_ep, "kvcache_quant_mode": kv_dtype} if moe else {}
        self.handle = EngineHandle.compile(aic_model, system, backend, tp_size=tp, backend_version=self.db_version,
                                           **layout)

    def _run(self, mode: str, batch: int, isl: int) -> tuple[float | None, str]:
        from aiconfigurator.sdk.config import RuntimeConfig

        try:
            summary = self.session.run_static(runtime_config=RuntimeConfig(batch_size=batch, isl=isl, osl=2),
                                              mode=mode, stride=32)
        except Exception as exc:  # AIC raises for shapes it cannot price
            return None, f"aic-error: {type(exc).__name__}: {exc}".replace("\n", " ")[:200]
        result = summary.get_result_dict()
        ms = float(result["ttft"] if mode == "static_ctx" else result["tpot"])
        if summary.check_oom():
            mem = summary.get_memory()["total"]
            cap = summary.get_mem_capacity_bytes() / (1 << 30)
            return None, f"aic-oom: {mem:.1f} GiB >= {cap:.1f} GiB"
        if not math.isfinite(ms) or ms <= 0:
            return None, f"aic-error: non-positive latency {ms!r}"
        return ms, ""

    def prefill(self, isl: int) -> tuple[float | None, str]:
        ms, why = self._run("static_ctx", 1, isl)
        if ms is not None:
            _same(ms, self.handle.predict_prefill_latency(1, isl, 0), "prefill", isl)
            self._measured("prefill", isl)
        return ms, why

    def decode(self, batch: int, context: int) -> tuple[float | None, str]:
        ms, why = self._run("static_gen", batch, context)
        if ms is not None:
            _same(ms, self.handle.decode_step_latency(batch, context, 1), "decode", batch, context)
            self._measured("decode", batch, context)
        return ms, why

    def _measured(self, *where) -> None:
        """The handle's last answer came from measured tables only (no coarser estimate tier)."""
        if (tier := self.handle.last_provenance()) is not None:
            raise SystemExit(f"AIC fell back to estimate tier {tier!r} at {where}")


def _version_key(version: str) -> tuple[int, ...] | None:
    """A database version directory's order (1.3.0rc10 < 1.3.0rc20 < 1.3.0 < 1.3.0.post1 < 1.3.1), None for a
    name that is not a version."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:rc(\d+)|\.post(\d+))?", version)
    if match is None:
        return None
    major, minor, patch, rc, post = match.groups()
    stage = (0, int(rc)) if rc is not None else (2, int(post)) if post is not None else (1, 0)
    return (int(major), int(minor), int(patch), *stage)


def _allreduce_gpus(data_dir: Path, db_version: str, backend: str = BACKEND) -> frozenset[int]:
    """GPU counts in the system's custom all-reduce table of ``backend`` at ``db_version`` or the older version
    directories AIC backward-fills it from (AIC prices other counts by scaling a measured curve)."""
    import pandas as pd

    top = _version_key(db_version)
    gpus: set[int] = set()
    for table in data_dir.glob(f"**/{backend}/*/custom_allreduce_perf.parquet"):
        key = _version_key(table.parent.name)
        if key is not None and top is not None and key <= top:
            gpus.update(int(n) for n in pd.read_parquet(table, columns=["num_gpus"])["num_gpus"])
    return frozenset(gpus)


def _same(a: float, b: float, *where) -> None:
    if abs(a - b) > FAST_PATH_RTOL * max(abs(a), abs(b)):
        raise SystemExit(f"SDK session and EngineHandle disagree at {where}: {a!r} vs {b!r}")


def grid_passes(cfg: Config) -> list[tuple]:
    """(kind, batch, context_or_isl, ms, skip_reason) of every grid point, prefills first."""
    passes = [("prefill", 1, isl, *cfg.prefill(isl)) for isl in PREFILL_ISL]
    return passes + [("decode", batch, context, *cfg.decode(batch, context))
                     for context in DECODE_CONTEXT for batch in DECODE_BATCH]


def record(systems: tuple[str, ...], backend: str = BACKEND) -> tuple[list[dict], str]:
    aic = pkg_version("aiconfigurator-core")
    rows = []
    for ours, aic_model, tps in MODELS:
        for system in systems:
            for tp in tps:
                cfg = Config(aic_model, system, tp, backend=backend)
                tag = f"aic{aic}/{backend}{cfg.db_version}"
                base = {"model": ours, "system": system, "tp": tp, "aic_version": tag}
                passes = grid_passes(cfg)
                measured = tp == 1 or tp in cfg.allreduce_gpus
                for kind, batch, context, ms, why in passes:
                    if ms is not None and not measured:
                        ms, why = None, (f"aic-extrapolated: {system} {backend} custom all-reduce measured at "
                                         f"{'/'.join(map(str, sorted(cfg.allreduce_gpus)))} GPUs only; "
                                         f"AIC gave {ms:.6g} ms")
                    rows.append({**base, "kind": kind, "batch": batch, "context_or_isl": context, "aic_ms": ms,
                                 "skip_reason": why})
                done = [r for r in rows if r["model"] == ours and r["system"] == system and r["tp"] == tp]
                print(f"{ours:28s} {system} tp{tp}: {sum(r['aic_ms'] is not None for r in done)}/{len(done)} priced",
                      file=sys.stderr)
    return rows, aic


def record_moe(systems: tuple[str, ...]) -> list[dict]:
    aic = pkg_version("aiconfigurator-core")
    rows = []
    for ours, aic_model, layouts, kv_dtypes in MOE_MODELS:
        for system in systems:
            for tp, moe_tp, moe_ep in layouts:
                for kv_dtype in kv_dtypes:
                    cfg = Config(aic_model, system, tp, moe_tp, moe_ep, kv_dtype, moe=True)
                    base = {"model": ours, "system": system, "tp": tp, "moe_tp": moe_tp, "moe_ep": moe_ep,
                            "weight_dtype": cfg.weight_dtype, "kv_dtype": cfg.kv_dtype,
                            "aic_version": f"aic{aic}/{BACKEND}{cfg.db_version}"}
                    done = [{**base, "kind": kind, "batch": batch, "context_or_isl": context, "aic_ms": ms,
                             "skip_reason": why} for kind, batch, context, ms, why in grid_passes(cfg)]
                    rows += done
                    print(f"{ours:42s} {system} tp{tp} moe_tp{moe_tp} moe_ep{moe_ep} {cfg.weight_dtype}/"
                          f"kv {cfg.kv_dtype}: {sum(r['aic_ms'] is not None for r in done)}/{len(done)} priced",
                          file=sys.stderr)
    return rows


def to_csv(rows: list[dict], columns: tuple[str, ...] = COLUMNS) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({**r, "aic_ms": "" if r["aic_ms"] is None else f"{r['aic_ms']:.6g}"})
    return buf.getvalue()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", choices=("dense", "moe"), default="dense",
                   help="dense: benchmarks/data/aic_grid.csv (default); moe: benchmarks/data/aic_grid_moe.csv")
    p.add_argument("--out", type=Path, default=None, help="default: the grid's file under benchmarks/data")
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--backend", choices=BACKENDS, default=BACKEND,
                   help="AIC backend of the dense grid: vllm (default; aic_grid.csv) or trtllm (aic_grid_trtllm.csv)")
    args = p.parse_args(argv)
    if args.grid == "moe" and args.backend != BACKEND:
        p.error("--grid moe records vLLM's tables only")
    logging.disable(logging.WARNING)  # AIC logs data-fallback notes at WARNING
    systems = tuple(s for s in args.systems.split(",") if s)
    if args.grid == "moe":
        rows, columns, out = record_moe(systems), MOE_COLUMNS, args.out or MOE_OUT
    else:
        default_out = TRTLLM_OUT if args.backend == "trtllm" else DEFAULT_OUT
        (rows, _), columns, out = record(systems, args.backend), COLUMNS, args.out or default_out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_csv(rows, columns))
    priced = sum(r["aic_ms"] is not None for r in rows)
    print(f"wrote {out}: {len(rows)} points, {priced} priced, {len(rows) - priced} skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
