#!/usr/bin/env python3
"""Record golden scheduler traces of speculative decoding from vLLM 0.32.0's real v1 schedulers: MTP/EAGLE drafts
(``engine.nextn``) verified by the synchronous ``Scheduler`` and by the ``AsyncScheduler`` (vLLM's zero-bubble
async scheduling with drafts, its default with MTP).

Regenerate (from the repo root, with the oracle venv of ``../shared/oracles/vllm-scheduler.md``):

    <venv>/bin/python tools/oracles/record_vllm_spec_goldens.py          # e.g. /work/.venv-vllm/bin/python

It builds each scheduler with ``build_scheduler`` and ``make_request`` of ``../shared/oracles/vllm_sched_oracle.py``
(override the folder with ``VLLM_ORACLE_DIR``) and drives it with its own engine loop, since that oracle runs no
drafts. An MTP drafter needs a draft model's config, which this CPU-only venv cannot load, so the scheduler is
given what ``VllmConfig`` derives for one (``num_speculative_tokens`` k): ``num_spec_tokens`` = k,
``num_lookahead_tokens`` = k (``VllmConfig.num_lookahead_tokens`` for EAGLE/MTP), ``use_eagle``, the async
scheduler's k draft placeholders and its ``_spec_decode_step_blocks``; no ``speculative_config`` (no draft slots,
as EAGLE's and MTP's ``max_num_new_slots_for_drafting`` is 0); with prefix caching, its KV cache manager rebuilt as
``Scheduler.__init__`` builds it for EAGLE/MTP (``use_eagle_block_drop``: a hit drops its last block).

The engine loop follows ``EngineCore``: synchronous, each step's update then ``update_draft_token_ids`` with k
drafts for every request the step sampled (the drafter proposes after each sampled token); async, a batch queue
of two and no draft updates (the placeholders stand for them). The fake model runner samples, for a request whose
chunk reaches its end, 1 + a tokens where a is the drafts it accepts: round r of the request's verifications
accepts min(drafts, ⌊(r+1)·m⌋ − ⌊r·m⌋) of them (m the stream's mean; simmodel's ``MeanAcceptance`` is the same
rule, stated in ``engine/speculation.py``), except the placeholders vLLM pads an admission with (token id −1,
which no target token matches): none of those.

Writes ``tests/golden/vllm_spec/<name>.json`` in ``record_vllm_goldens``'s format, its config with
``num_speculative_tokens``, ``mean_accepted`` and ``async_scheduling``. ``tests/unit/test_vllm_spec_golden.py``
replays them through our ``VllmScheduler`` and needs no vLLM.
"""

from __future__ import annotations

import math
import os
import sys
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_io import vllm_oracle_config  # noqa: E402
from record_vllm_goldens import dump, stream  # noqa: E402
from record_vllm_goldens_apc import apc_stream, prompt_ids, shared_requests  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ORACLE_DIR = Path(os.environ.get("VLLM_ORACLE_DIR", REPO.parent / "shared" / "oracles"))
OUT_DIR = REPO / "tests" / "golden" / "vllm_spec"
SAMPLED = 7


def accepted(rounds: int, drafts: int, mean: float) -> int:
    return min(drafts, math.floor((rounds + 1) * mean + 1e-9) - math.floor(rounds * mean + 1e-9))


def build(cfg: dict, k: int, sched=None):
    """vLLM's scheduler for ``cfg`` (the oracle's, one full-attention group, unless ``sched`` is given), given
    what ``VllmConfig`` derives for k MTP drafts (none for k = 0)."""
    from vllm.utils.math_utils import cdiv
    from vllm_sched_oracle import build_scheduler

    if sched is None:
        sched = build_scheduler(**vllm_oracle_config(cfg))
    if not k:
        return sched
    sched.num_spec_tokens = sched.num_lookahead_tokens = k
    sched.use_eagle = sched.use_eagle_block_drop = True
    if sched.cache_config.enable_prefix_caching:  # (the KV cache manager as ``Scheduler.__init__`` builds it then)
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        sched.kv_cache_manager = KVCacheManager(
            kv_cache_config=sched.kv_cache_config, max_model_len=sched.max_model_len,
            max_in_flight_tokens=sched.vllm_config.max_in_flight_tokens, enable_caching=True, use_eagle=True,
            num_prefill_lookahead=sched.num_prefill_lookahead, log_stats=sched.log_stats,
            enable_kv_cache_events=sched.enable_kv_cache_events, dcp_world_size=sched.dcp_world_size, pcp_world_size=1,
            scheduler_block_size=sched.block_size, hash_block_size=sched.hash_block_size,
            metrics_collector=sched.kv_metrics_collector, watermark=sched.scheduler_config.watermark)
    if hasattr(sched, "_spec_token_placeholders"):
        sched._spec_token_placeholders = [-1] * k
    sched._spec_decode_step_blocks = sum(cdiv(1 + 2 * k, m.block_size)
                                         for m in sched.kv_cache_manager.coordinator.single_type_managers)
    return sched


def run(reqs: list[dict], cfg: dict, max_idle_steps: int = 50, sched=None,
        queue_size: int | None = None) -> tuple[list[dict], dict]:
    """Drive ``reqs`` through vLLM's scheduler for ``cfg`` (built here unless ``sched`` is given) as ``EngineCore``
    does, with a batch queue of ``queue_size`` (default: 2 async, else 1); returns the steps and the summary."""
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
    from vllm_sched_oracle import _block_hasher, make_request

    k, mean, asynchronous = cfg.get("num_speculative_tokens", 0), cfg.get("mean_accepted", 0), cfg["async_scheduling"]
    sched = build(cfg, k, sched)
    hasher = _block_hasher(cfg["block_size"], cfg.get("enable_prefix_caching", False))
    pending = deque(sorted(reqs, key=lambda r: int(r["arrival_step"])))
    by_id, rounds, emitted, finish_step, steps = {}, {}, {}, {}, []
    queue: deque = deque()
    queue_size = queue_size or (2 if asynchronous else 1)
    step = idle = 0

    def process():
        rec, so = queue.pop()
        req_ids = list(so.num_scheduled_tokens)
        # An admission with drafts is one vLLM padded to 1 + k with placeholders (token id −1): none is accepted.
        admitted = {nr.req_id for nr in so.scheduled_new_reqs} | set(so.scheduled_cached_reqs.resumed_req_ids)
        sampled = []
        for rid in req_ids:
            if rid not in rec["sampling"]:
                sampled.append([])
                continue
            drafts = len(so.scheduled_spec_decode_tokens.get(rid, ()))
            a = 0
            if drafts and rid not in admitted:
                a = accepted(rounds.get(rid, 0), drafts, mean)
                rounds[rid] = rounds.get(rid, 0) + 1
            sampled.append([SAMPLED] * (1 + a))
        out = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=sampled)
        eco = sched.update_from_output(so, out)
        got, finished = {}, []
        for client in eco.values():
            for o in client.outputs:
                if o.new_token_ids:
                    got[o.request_id] = got.get(o.request_id, 0) + len(o.new_token_ids)
                    emitted[o.request_id] = emitted.get(o.request_id, 0) + len(o.new_token_ids)
                if o.finish_reason is not None:
                    finished.append(o.request_id)
                    finish_step[o.request_id] = rec["step"]
        if k and not asynchronous:
            live = [r for r in rec["sampling"] if r in sched.requests and not sched.requests[r].is_finished()]
            if live:
                sched.update_draft_token_ids(DraftTokenIds(live, [[SAMPLED] * k for _ in live]))
        if rec["scheduled"] or rec["preempted"] or finished or got:  # (a plan may only preempt)
            steps.append({"step": rec["step"], "scheduled": rec["scheduled"], "preempted": rec["preempted"],
                          "finished": sorted(finished), "emitted": got, "hits": rec["hits"]})

    while True:
        if not sched.has_requests() and not queue:
            if not pending:
                break
            step = max(step, int(pending[0]["arrival_step"]))
        while pending and int(pending[0]["arrival_step"]) <= step:
            spec = pending.popleft()
            if "segments" in spec:
                spec = {**spec, "prompt_token_ids": prompt_ids(spec["segments"])}
            req = make_request(spec, hasher, arrival_time=float(spec["arrival_step"]))
            by_id[req.request_id] = req
            sched.add_request(req)
        if sched.has_requests():
            so = sched.schedule()
            sampling = [r for r in so.num_scheduled_tokens if not sched.requests[r].is_prefill_chunk]
            # The tokens each admitted or resumed request found computed (its prefix-cache hit), from vLLM's output.
            hits = {nr.req_id: nr.num_computed_tokens for nr in so.scheduled_new_reqs}
            cached = so.scheduled_cached_reqs
            for rid, n in zip(cached.req_ids, cached.num_computed_tokens):
                if rid in cached.resumed_req_ids:
                    hits[rid] = n
            rec = {"step": step, "scheduled": dict(so.num_scheduled_tokens),
                   "preempted": sorted(so.preempted_req_ids or ()), "sampling": set(sampling), "hits": hits}
            queue.appendleft((rec, so))
            step += 1
            executed = so.total_num_scheduled_tokens > 0
            idle = 0 if executed else idle + 1
            if idle > max_idle_steps:
                raise RuntimeError(f"no progress at step {step}")
            if len(queue) < queue_size and (executed or sched.has_requests()):
                continue
        elif not queue:
            continue
        process()
    hit_tokens: dict[str, int] = {}
    first_hit: dict[str, int] = {}
    for s in steps:
        for rid, h in s["hits"].items():
            hit_tokens[rid] = hit_tokens.get(rid, 0) + h
            first_hit.setdefault(rid, h)
    summary = {r["id"]: {"emitted_tokens": emitted.get(r["id"], 0), "num_preemptions": by_id[r["id"]].num_preemptions,
                         "finish_step": finish_step.get(r["id"]), "hit_tokens": hit_tokens.get(r["id"], 0),
                         "first_hit": first_hit.get(r["id"])} for r in reqs}
    return steps, summary


def spec_stream(name, seed, *, k, mean, asynchronous, **kw):
    name, cfg, reqs = stream(name, seed, **kw)
    cfg.update(num_speculative_tokens=k, mean_accepted=mean, async_scheduling=asynchronous)
    return name, cfg, reqs


def one_past_blocks(reqs: list[dict], block_size: int) -> list[dict]:
    """Each prompt lengthened (its last segment) to one token past a block boundary, so that a prompt cached whole
    would leave exactly one token to compute (the waiting request vLLM pads to 1 + k with placeholder drafts), had
    EAGLE's block drop not given back the hit's last block."""
    for r in reqs:
        r["segments"][-1][1] += (1 - sum(n for _, n in r["segments"])) % block_size
    return reqs


def apc_spec_stream(name, reqs, *, k, mean, asynchronous, **kw):
    name, cfg, reqs = apc_stream(name, reqs, async_scheduling=asynchronous, **kw)
    cfg.update(num_speculative_tokens=k, mean_accepted=mean)
    return name, cfg, reqs


def one_token_after_an_admission(name: str, asynchronous: bool):
    """A 5-token and a 1-token prompt arriving together on an idle engine: the second, admitted after the first
    with no running request in the pass and nothing computed, is not padded."""
    name, cfg, _ = spec_stream(name, 1110, k=2, mean=1.0, asynchronous=asynchronous, n=2, prompt=(5, 5),
                               output=(4, 4), max_num_seqs=8, budget=64, arrivals="burst")
    reqs = [{"id": "r0", "arrival_step": 0, "prompt_tokens": 5, "output_tokens": 4},
            {"id": "r1", "arrival_step": 0, "prompt_tokens": 1, "output_tokens": 4}]
    return name, cfg, reqs


def streams() -> list[tuple[str, dict, list[dict]]]:
    out = []
    S = shared_requests
    for asynchronous, tag in ((False, "sync"), (True, "async")):
        out += [
            apc_spec_stream(f"{tag}_apc_k2_dups", one_past_blocks(S(1201, 30, block_size=8, output=(2, 24), groups=3,
                                                                    prefix=(16, 64), suffix=(1, 30), dup=0.5,
                                                                    arrivals="spread", span=40), 8),
                            k=2, mean=1.0, asynchronous=asynchronous, block_size=8, max_num_seqs=16, budget=256),
            apc_spec_stream(f"{tag}_apc_k3_tight", one_past_blocks(S(1202, 30, block_size=4, output=(4, 32), groups=3,
                                                                     prefix=(8, 40), suffix=(1, 20), dup=0.4,
                                                                     arrivals="burst"), 4),
                            k=3, mean=1.5, asynchronous=asynchronous, block_size=4, kv_factor=2.0, max_num_seqs=16,
                            budget=128),
        ]
    for asynchronous, tag in ((False, "sync"), (True, "async")):
        out += [
            spec_stream(f"{tag}_k2_loose", 1101, k=2, mean=1.0, asynchronous=asynchronous, n=30, prompt=(1, 200),
                        output=(1, 40), max_num_seqs=16, budget=256, arrivals="spread", span=40),
            spec_stream(f"{tag}_k3_mean_1_5", 1102, k=3, mean=1.5, asynchronous=asynchronous, n=30, prompt=(1, 150),
                        output=(1, 48), max_num_seqs=16, budget=128, arrivals="poisson", span=60),
            spec_stream(f"{tag}_k2_tight", 1103, k=2, mean=0.7, asynchronous=asynchronous, n=30, prompt=(16, 160),
                        output=(8, 64), kv_factor=2.0, max_num_seqs=24, budget=256, arrivals="burst"),
            spec_stream(f"{tag}_k1_bs4_tight", 1104, k=1, mean=0.5, asynchronous=asynchronous, n=20, prompt=(4, 60),
                        output=(4, 40), block_size=4, kv_factor=1.5, max_num_seqs=12, budget=96, arrivals="burst"),
            spec_stream(f"{tag}_k4_budget32", 1105, k=4, mean=2.5, asynchronous=asynchronous, n=16, prompt=(5, 120),
                        output=(1, 30), max_num_seqs=6, budget=32, arrivals="spread", span=30),
            spec_stream(f"{tag}_k2_mml_limit", 1106, k=2, mean=2.0, asynchronous=asynchronous, n=20, prompt=(10, 127),
                        output=(1, 100), max_model_len=128, max_num_seqs=12, budget=128, arrivals="spread", span=30),
            spec_stream(f"{tag}_k2_lpt", 1107, k=2, mean=1.2, asynchronous=asynchronous, n=24, prompt=(8, 200),
                        output=(2, 32), kv_factor=1.8, max_num_seqs=16, budget=96, lpt=24, arrivals="poisson",
                        span=40),
            spec_stream(f"{tag}_k3_sparse", 1108, k=3, mean=3.0, asynchronous=asynchronous, n=8, prompt=(1, 64),
                        output=(1, 30), max_num_seqs=8, budget=64, arrivals="sparse", span=40),
            # One-token prompts admitted together: only those after a running request's are padded.
            spec_stream(f"{tag}_k2_one_token_prompts", 1109, k=2, mean=1.0, asynchronous=asynchronous, n=12,
                        prompt=(1, 3), output=(1, 10), max_num_seqs=8, budget=64, arrivals="bursts",
                        bursts=(0, 3, 6)),
            one_token_after_an_admission(f"{tag}_k2_one_token_after_an_admission", asynchronous),
        ]
    return out


def record_all(all_streams: list[tuple[str, dict, list[dict]]], out_dir: Path, run_stream=None) -> None:
    """Record every stream into ``out_dir/<name>.json`` with ``run_stream(reqs, cfg)`` (default ``run``), checking
    that every request ends with its tokens (or at ``max_model_len``)."""
    sys.path.insert(0, str(ORACLE_DIR))
    import vllm  # noqa: PLC0415  (needs the vLLM venv)

    out_dir.mkdir(parents=True, exist_ok=True)
    for name, cfg, reqs in all_streams:
        steps, summary = (run_stream or run)(reqs, cfg)
        for r in reqs:
            s = summary[r["id"]]
            expect = min(r["output_tokens"], cfg["max_model_len"] - r["prompt_tokens"])
            assert s["finish_step"] is not None and s["emitted_tokens"] == expect, (name, r, s)
        golden = {"name": name, "vllm_version": vllm.__version__, "config": cfg, "requests": reqs,
                  "steps": steps, "summary": summary}
        (out_dir / f"{name}.json").write_text(dump(golden))
        pre = sum(s["num_preemptions"] for s in summary.values())
        print(f"{name:24s} reqs={len(reqs):3d} steps={len(steps):4d} preemptions={pre:3d}")


if __name__ == "__main__":
    record_all(streams(), OUT_DIR)
