#!/usr/bin/env python3
"""Record golden scheduler traces of pipeline parallelism from vLLM 0.32.0's real v1 schedulers: P batches in flight
under the synchronous ``Scheduler`` (``max_concurrent_batches`` = P), and P + 1 under the ``AsyncScheduler`` with
Model Runner V2 (vLLM 0.32's default on a GPU with Triton, which keeps async scheduling on with PP), whose
decodes of one request are ``decode_stagger`` = P steps apart.

Regenerate (from the repo root, with the oracle venv of ``../shared/oracles/vllm-scheduler.md``):

    <venv>/bin/python tools/oracles/record_vllm_pp_goldens.py            # e.g. /work/.venv-vllm/bin/python

The scheduler is the oracle's (``vllm_sched_oracle.build_scheduler``, one full-attention group) given what
``VllmConfig`` derives for P stages, which this one-process CPU venv cannot build: the engine's batch queue of
``max_concurrent_batches``; for the async scheduler ``use_v2_model_runner`` (the CPU venv has no Triton, so vLLM
would pick V1 here) and ``decode_stagger`` = P. The engine loop and files are ``record_vllm_spec_goldens``' (no
drafts). Writes ``tests/golden/vllm_pp/<name>.json``; its config adds ``pipeline``.
``tests/unit/test_vllm_pp_golden.py`` replays them through our scheduler and needs no vLLM.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_io import vllm_oracle_config  # noqa: E402
from record_vllm_goldens import stream  # noqa: E402
from record_vllm_spec_goldens import record_all, run  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "vllm_pp"


def build_pp(cfg: dict):
    from vllm_sched_oracle import build_scheduler

    sched = build_scheduler(**vllm_oracle_config(cfg))
    if cfg["async_scheduling"]:
        sched.use_v2_model_runner = True
        sched.pp_size = sched.decode_stagger = cfg["pipeline"]
    return sched


def queue_size(cfg: dict) -> int:
    """vLLM's ``max_concurrent_batches``: P + 1 async (Model Runner V2), P synchronous."""
    return cfg["pipeline"] + (1 if cfg["async_scheduling"] else 0)


def pp(name, pipeline, asynchronous, *args, **kw):
    name, cfg, reqs = stream(name, *args, **kw)
    cfg.update(pipeline=pipeline, async_scheduling=asynchronous, enable_prefix_caching=False)
    return name, cfg, reqs


def streams() -> list[tuple[str, dict, list[dict]]]:
    out = []
    for asynchronous, tag in ((False, "sync"), (True, "async")):
        out += [
            pp(f"{tag}_pp2_loose", 2, asynchronous, 1401, n=30, prompt=(1, 300), output=(1, 48), max_num_seqs=16,
               budget=256, arrivals="spread", span=40),
            pp(f"{tag}_pp4_burst", 4, asynchronous, 1402, n=30, prompt=(1, 200), output=(1, 32), max_num_seqs=32,
               budget=512, arrivals="burst"),
            pp(f"{tag}_pp2_tight", 2, asynchronous, 1403, n=30, prompt=(16, 160), output=(8, 64), kv_factor=2.0,
               max_num_seqs=24, budget=256, arrivals="burst"),
            pp(f"{tag}_pp3_budget32", 3, asynchronous, 1404, n=16, prompt=(5, 120), output=(1, 30), max_num_seqs=6,
               budget=32, arrivals="spread", span=30),
            pp(f"{tag}_pp2_sparse", 2, asynchronous, 1405, n=8, prompt=(1, 64), output=(1, 20), max_num_seqs=8,
               budget=64, arrivals="sparse", span=40),
            pp(f"{tag}_pp2_mml_limit", 2, asynchronous, 1406, n=20, prompt=(10, 127), output=(1, 100),
               max_model_len=128, max_num_seqs=12, budget=128, arrivals="spread", span=30),
        ]
    return out


if __name__ == "__main__":
    record_all(streams(), OUT_DIR, lambda reqs, cfg: run(reqs, cfg, sched=build_pp(cfg), queue_size=queue_size(cfg)))
