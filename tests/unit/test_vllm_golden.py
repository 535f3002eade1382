"""Our vLLM scheduler against golden traces recorded from vLLM 0.32.0's real v1 scheduler.

Each ``tests/golden/vllm/*.json`` (written by ``tools/oracles/record_vllm_goldens.py``) holds one
request stream, the scheduler configuration and vLLM's per-pass records. The stream is replayed
through ``VllmScheduler`` by ``tests/stepdriver.run_steps`` and must match pass by pass: step
index, tokens scheduled per request, preempted, finished and emitted requests; then per request
the emitted-token and preemption totals. vLLM itself is not needed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stepdriver import run_steps

from simmodel.engine.scheduler.vllm import VllmSchedulerConfig

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden" / "vllm"
GOLDEN_FILES = sorted(GOLDEN_DIR.glob("*.json"))
FIELDS = ("step", "scheduled", "preempted", "finished", "emitted")


def test_enough_goldens() -> None:
    assert len(GOLDEN_FILES) >= 20, f"only {len(GOLDEN_FILES)} golden files in {GOLDEN_DIR}"


def _reduce(rec: dict) -> dict:
    return {
        "step": rec["step"],
        "scheduled": dict(rec["scheduled"]),
        "preempted": sorted(rec["preempted"]),
        "finished": sorted(rec["finished"]),
        "emitted": dict(rec["emitted"]),
    }


def _summarize(records: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for rec in records:
        for rid, n in rec["emitted"].items():
            out.setdefault(rid, {"emitted_tokens": 0, "num_preemptions": 0})["emitted_tokens"] += n
        for rid in rec["preempted"]:
            out.setdefault(rid, {"emitted_tokens": 0, "num_preemptions": 0})["num_preemptions"] += 1
    return out


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.stem for p in GOLDEN_FILES])
def test_matches_vllm(path: Path) -> None:
    golden = json.loads(path.read_text())
    cfg = golden["config"]
    config = VllmSchedulerConfig(
        max_num_seqs=cfg["max_num_seqs"],
        max_num_batched_tokens=cfg["max_num_batched_tokens"],
        max_model_len=cfg["max_model_len"],
        long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
        enable_chunked_prefill=cfg["enable_chunked_prefill"],
        reserve_full_isl=cfg["reserve_full_isl"],
    )
    ours = [_reduce(r) for r in run_steps(golden["requests"], config, cfg["num_gpu_blocks"],
                                          cfg["block_size"]) if r["scheduled"]]
    theirs = [_reduce(r) for r in golden["steps"]]
    name = golden["name"]

    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            diff = [f for f in FIELDS if a[f] != b[f]]
            prev = f"\n  previous vLLM record: {theirs[i - 1]}" if i else ""
            pytest.fail(f"{name}: first mismatch at record {i} (vLLM step {b['step']}, "
                        f"ours step {a['step']}), fields {diff}\n  vLLM: {b}\n  ours: {a}{prev}",
                        pytrace=False)
    if len(ours) != len(theirs):
        i = min(len(ours), len(theirs))
        pytest.fail(f"{name}: {len(ours)} non-empty passes vs vLLM's {len(theirs)}; first extra "
                    f"record: vLLM {theirs[i] if i < len(theirs) else None}, "
                    f"ours {ours[i] if i < len(ours) else None}", pytrace=False)

    mine = _summarize(ours)
    for rid, s in golden["summary"].items():
        got = mine.get(rid, {"emitted_tokens": 0, "num_preemptions": 0})
        want = {"emitted_tokens": s["emitted_tokens"], "num_preemptions": s["num_preemptions"]}
        assert got == want, f"{name}: request {rid}: vLLM {want}, ours {got}"
        finish = max((r["step"] for r in ours if rid in r["finished"]), default=None)
        assert finish == s["finish_step"], f"{name}: request {rid} finished at {finish}, vLLM {s['finish_step']}"
