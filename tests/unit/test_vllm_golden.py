"""Our vLLM scheduler against golden traces recorded from vLLM 0.32.0's real v1 scheduler.

Three sets, all replayed through ``VllmScheduler`` by ``tests/stepdriver.run_steps`` (vLLM itself is
not needed):

* ``tests/golden/vllm/*.json`` (``tools/oracles/record_vllm_goldens.py``): sync engine, no prefix
  caching. Compared pass by pass: step index, tokens scheduled per request, preempted, finished and
  emitted requests; then per request the emitted-token and preemption totals and the finish step.
* ``tests/golden/vllm_apc/*.json`` (``tools/oracles/record_vllm_goldens_apc.py``): sync engine with
  ``enable_prefix_caching``. The same comparison plus, per pass, ``hits``: for every request admitted
  or resumed in that pass, the prompt tokens vLLM found in its prefix cache (``num_computed_tokens``
  at schedule time, 0 included), and per request the total over all admissions (``hit_tokens``) and
  the hit at first admission (``first_hit``). Shared prompts are stored as segments
  ``[[seed, length], ...]``; :func:`prompt_ids` rebuilds the token ids and each request's
  ``prompt_crc`` checks the rebuild.
* ``tests/golden/vllm_async/*.json`` (same recorder): vLLM's ``AsyncScheduler`` with and without
  prefix caching, same record format. ``run_steps`` emulates vLLM's ``EngineCore.step_with_batch_queue``
  with a batch queue of 2, as the oracle does: ``S0, S1, U0, S2, U1, S3, U2, ...`` where ``Sk`` is the
  k-th ``schedule()`` and ``Uk`` is ``update_from_output`` of pass k. A new pass is scheduled while
  the queue holds fewer than 2 passes and the last pass scheduled something (or requests remain);
  otherwise the oldest pass is updated first. ``step`` counts ``schedule()`` calls; a request is
  added just before the call whose index equals its ``arrival_step``; a fully idle engine (no
  requests, empty queue) jumps to the next arrival. A record is emitted when its pass is updated,
  in pass order. What async changes (vLLM ``AsyncScheduler`` / ``Scheduler``): each scheduled pass
  that will sample adds an output placeholder, so a running request is scheduled again before its
  previous token arrives (``num_new_tokens = num_tokens + placeholders - num_computed``); a request
  whose in-flight tokens already reach ``max_tokens`` is skipped; blocks of a finished request are
  freed only when its last pass is updated (one pass later than sync); a preempted request's
  in-flight ("stale") output is still delivered (it counts in ``emitted``) and, while it is in
  flight, admission skips that request instead of blocking behind it.

Records in which nothing was scheduled, preempted, finished or emitted are dropped on both sides of
the prefix-caching and async comparisons; the older sync set drops records with nothing scheduled.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
from stepdriver import prompt_ids, run_steps

from simmodel.engine.scheduler.vllm import VllmSchedulerConfig

GOLDEN_ROOT = Path(__file__).resolve().parents[1] / "golden"
GOLDEN_DIR = GOLDEN_ROOT / "vllm"
GOLDEN_FILES = sorted(GOLDEN_DIR.glob("*.json"))
APC_FILES = sorted((GOLDEN_ROOT / "vllm_apc").glob("*.json"))
ASYNC_FILES = sorted((GOLDEN_ROOT / "vllm_async").glob("*.json"))
FIELDS = ("step", "scheduled", "preempted", "finished", "emitted")
HIT_FIELDS = (*FIELDS, "hits")


def test_enough_goldens() -> None:
    assert len(GOLDEN_FILES) >= 20, f"only {len(GOLDEN_FILES)} golden files in {GOLDEN_DIR}"
    assert len(APC_FILES) >= 20, f"only {len(APC_FILES)} prefix-caching golden files"
    assert len(ASYNC_FILES) >= 20, f"only {len(ASYNC_FILES)} async golden files"
    size = sum(p.stat().st_size for p in APC_FILES + ASYNC_FILES)
    assert size < 2_200_000, f"prefix-caching + async goldens take {size} bytes"


def _requests(golden: dict) -> list[dict]:
    reqs = []
    for r in golden["requests"]:
        spec = {k: r[k] for k in ("id", "arrival_step", "prompt_tokens", "output_tokens")}
        if "segments" in r:
            ids = prompt_ids(r["segments"])
            assert len(ids) == r["prompt_tokens"], (golden["name"], r["id"])
            assert zlib.crc32(struct.pack(f"<{len(ids)}i", *ids)) == r["prompt_crc"], (golden["name"], r["id"])
            spec["prompt_token_ids"] = ids
        reqs.append(spec)
    return reqs


def _config(cfg: dict) -> VllmSchedulerConfig:
    kw = {}
    if cfg.get("async_scheduling"):
        kw["async_scheduling"] = True
    return VllmSchedulerConfig(
        max_num_seqs=cfg["max_num_seqs"],
        max_num_batched_tokens=cfg["max_num_batched_tokens"],
        max_model_len=cfg["max_model_len"],
        long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
        enable_chunked_prefill=cfg["enable_chunked_prefill"],
        reserve_full_isl=cfg["reserve_full_isl"],
        enable_prefix_caching=cfg.get("enable_prefix_caching", False),
        **kw,
    )


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------

def _reduce(rec: dict, fields: tuple[str, ...]) -> dict:
    out = {
        "step": rec["step"],
        "scheduled": dict(rec["scheduled"]),
        "preempted": sorted(rec["preempted"]),
        "finished": sorted(rec["finished"]),
        "emitted": dict(rec["emitted"]),
    }
    if "hits" in fields:
        out["hits"] = dict(rec["hits"])
    return out


def _nonempty(rec: dict) -> bool:
    return bool(rec["scheduled"] or rec["preempted"] or rec["finished"] or rec["emitted"])


def _summarize(records: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}

    def get(rid: str) -> dict:
        return out.setdefault(rid, {"emitted_tokens": 0, "num_preemptions": 0, "hit_tokens": 0, "first_hit": None})
    for rec in records:
        for rid, n in rec["emitted"].items():
            get(rid)["emitted_tokens"] += n
        for rid in rec["preempted"]:
            get(rid)["num_preemptions"] += 1
        for rid, h in rec.get("hits", {}).items():
            s = get(rid)
            s["hit_tokens"] += h
            if s["first_hit"] is None:
                s["first_hit"] = h
    return out


def compare_with_drafts(golden: dict, layout=None) -> None:
    """Replay a golden recorded with ``record_vllm_spec_goldens.run`` through our scheduler, with its MTP/EAGLE
    drafts if it has any (k of them: a KV slot per draft past the pass, EAGLE's block drop on a hit), on the KV
    layout given (default one full-attention group), and compare every pass and the prefix-cache hits."""
    cfg = golden["config"]
    k = cfg.get("num_speculative_tokens", 0)
    config = replace(_config(cfg), num_speculative_tokens=k, num_lookahead_tokens=k)
    ours = [r for r in run_steps(_requests(golden), config, cfg["num_gpu_blocks"], cfg["block_size"], layout=layout,
                                 mean_accepted=cfg.get("mean_accepted"), eagle=k > 0) if _nonempty(r)]
    _compare(golden, ours, HIT_FIELDS)


def _compare(golden: dict, ours: list[dict], fields: tuple[str, ...]) -> None:
    theirs = [_reduce(r, fields) for r in golden["steps"]]
    ours = [_reduce(r, fields) for r in ours]
    name = golden["name"]

    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            diff = [f for f in fields if a[f] != b[f]]
            prev = f"\n  previous vLLM record: {theirs[i - 1]}" if i else ""
            pytest.fail(f"{name}: first mismatch at record {i} (vLLM step {b['step']}, "
                        f"ours step {a['step']}), fields {diff}\n  vLLM: {b}\n  ours: {a}{prev}",
                        pytrace=False)
    if len(ours) != len(theirs):
        i = min(len(ours), len(theirs))
        pytest.fail(f"{name}: {len(ours)} passes vs vLLM's {len(theirs)}; first extra "
                    f"record: vLLM {theirs[i] if i < len(theirs) else None}, "
                    f"ours {ours[i] if i < len(ours) else None}", pytrace=False)

    mine = _summarize(ours)
    keys = ("emitted_tokens", "num_preemptions") + (("hit_tokens", "first_hit") if "hits" in fields else ())
    for rid, s in golden["summary"].items():
        got = {k: v for k, v in mine.get(rid, {}).items() if k in keys}
        got = {k: got.get(k, 0) or 0 for k in keys}
        want = {k: s[k] for k in keys}
        assert got == want, f"{name}: request {rid}: vLLM {want}, ours {got}"
        finish = max((r["step"] for r in ours if rid in r["finished"]), default=None)
        assert finish == s["finish_step"], f"{name}: request {rid} finished at {finish}, vLLM {s['finish_step']}"


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.stem for p in GOLDEN_FILES])
def test_matches_vllm(path: Path) -> None:
    golden = json.loads(path.read_text())
    cfg = golden["config"]
    ours = [r for r in run_steps(golden["requests"], _config(cfg), cfg["num_gpu_blocks"], cfg["block_size"])
            if r["scheduled"]]
    _compare(golden, ours, FIELDS)


@pytest.mark.parametrize("path", APC_FILES, ids=[p.stem for p in APC_FILES])
def test_matches_vllm_prefix_caching(path: Path) -> None:
    golden = json.loads(path.read_text())
    cfg = golden["config"]
    assert cfg["enable_prefix_caching"] and not cfg["async_scheduling"]
    ours = [r for r in run_steps(_requests(golden), _config(cfg), cfg["num_gpu_blocks"], cfg["block_size"])
            if _nonempty(r)]
    _compare(golden, ours, HIT_FIELDS)


@pytest.mark.parametrize("path", ASYNC_FILES, ids=[p.stem for p in ASYNC_FILES])
def test_matches_vllm_async(path: Path) -> None:
    golden = json.loads(path.read_text())
    cfg = golden["config"]
    assert cfg["async_scheduling"]
    ours = [r for r in run_steps(_requests(golden), _config(cfg), cfg["num_gpu_blocks"], cfg["block_size"])
            if _nonempty(r)]
    _compare(golden, ours, HIT_FIELDS)
