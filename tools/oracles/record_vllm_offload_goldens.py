#!/usr/bin/env python3
"""Record golden traces from vLLM 0.32.0's real v1 scheduler with its KV offloading connector (CPU tier).

Regenerate (from the repo root, /work/main), in a venv holding vllm==0.32.0 (CPU torch, the wheel installed with
``--no-deps``, as ``../shared/oracles/install_vllm_oracle_venv.sh`` builds one; e.g. ``/tmp/oracle-vllm``):

    /tmp/oracle-vllm/bin/python tools/oracles/record_vllm_offload_goldens.py            # all streams
    /tmp/oracle-vllm/bin/python tools/oracles/record_vllm_offload_goldens.py --only NAME # some
    /tmp/oracle-vllm/bin/python tools/oracles/record_vllm_offload_goldens.py --check    # compare, write nothing

Writes ``tests/golden/vllm_offload/<name>.json``. Streams come from fixed seeds: two runs give byte-identical
files. ``tests/unit/test_vllm_offload_golden.py`` replays each one through our ``VllmScheduler`` with a real
``VllmCpuOffload`` (``tests/offload_stepdriver.py``) and needs no vLLM.

What runs. vLLM's own ``Scheduler`` (sync) or ``AsyncScheduler`` with prefix caching on and
``CacheConfig(kv_offloading_size=...)``, so that vLLM's config post-init sets up the ``OffloadingConnector`` with
its native CPU backend and default extra config: one GPU block per offloaded chunk, ``offload_prompt_only`` on,
the LRU policy, no store threshold. The KV cache is one full-attention group of one layer whose page is exactly
4096 bytes (head size 1024 / block size, one KV head, bf16), so a host tier of N blocks is
``kv_offloading_size = N * 4096 / 2**30`` GiB; the script asserts vLLM's CPU manager got exactly N chunks. No GPU,
no model, no worker-side connector: a fake worker (this script) answers each step.

Engine loop (our own code, the same loop as the plain-vLLM oracle, ``../shared/oracles/vllm-scheduler.md``): sync
``S0 U0 S1 U1 ...``; async vLLM's ``step_with_batch_queue`` with a batch queue of two (``S0 S1 U0 S2 U1 ...``),
where ``Sk`` is the k-th ``schedule()`` and ``Uk`` the ``update_from_output`` of step k. ``step`` counts
``schedule()`` calls; a request is added just before the call whose index equals its ``arrival_step``; the
engine schedules while ``Scheduler.has_requests()`` (which stays true while the connector has transfer jobs in
flight, so empty steps are taken while a store or load is pending); a fully idle engine jumps to the next arrival.
The fake model runner samples token 7 for each request whose chunk reaches the end of its known tokens.

The transfer rule (the fake worker). Every step, empty or not, lasts one time unit and steps run back to back:
step k's pass ends at time k + 1, when its output is processed (``Uk``), and ``Sk`` happens at the time of the
last output processed before it (or of the idle jump). Every transfer takes less than one unit. A store job
(``store_jobs`` of step k's connector metadata) starts when step k's pass ends (time k + 1). A load job starts then
too, or at ``Sk`` itself if step k scheduled no token (no pass to wait for). A job is reported done
(``OffloadingWorkerMetadata.completed_jobs``, and ``finished_recving`` for a load) in the first output processed
after it starts; a job listed in ``jobs_to_flush`` is reported in the output of that step at the latest (vLLM's
worker waits for it before the pass). So, sync: a store or load of step k is done in ``U(k+1)``, hence readable /
admitted at ``S(k+2)``; a load made by an empty step k is done in ``Uk`` and admitted at ``S(k+1)``. Async: a store
or load of step k is done in ``U(k+1)`` and seen by ``S(k+3)`` (``S(k+2)`` precedes ``U(k+1)``); a load made by an
empty step k is done in the output of the pass then in flight, ``U(k-1)``, and admitted at ``S(k+1)``.

Why this is our engine's rule for link transfers shorter than a pass (time = step, each pass one unit): we copy a
pass's prompt blocks from its end (``Rank.finish_pass`` -> ``VllmCpuOffload.store``) and a block is readable from
the first plan after the copy lands. The pass end is also the instant of a plan (sync: the next one, S(k+1); async:
S(k+2)), which still sees the copy landing; the plan after it (S(k+2); async S(k+3)) reads the block. A load
planned with a pass starts at its end (``start_loads(plan.host_loads, pass_end)``), or at once if the plan runs no
pass, and the landed request is admitted at the next plan (``load_done``): the same steps. A lookup that reaches a
block still landing (vLLM: ``HIT_PENDING``) or being read skips the request until a later plan. Where a request
waits with nothing to run, our idle rank plans again at the instant its load lands while vLLM takes empty steps
until the load is reported; counting every step as one unit only numbers those empty steps.
``tests/offload_stepdriver.py`` drives our scheduler on exactly this clock (a step is 1,000,000 ns, the links move
any transfer in 1 ns).

Determinism. When several requests finish in one step, vLLM re-offers and refreshes their blocks in the order it
walks ``finished_req_ids``, a set of request-id strings, so the host tier's LRU order can depend on Python's string
hash seed. The script runs itself under ``PYTHONHASHSEED=0`` (unless set), and every stream below records the same
under seeds 0-8 (``PYTHONHASHSEED=n ... --check``); our model refreshes them in pass order.

Streams: generated ones (cycling prefixes, shared prefixes, multi-turn chats, from ``record_vllm_goldens_apc.py``)
and hand-made ``min_*`` ones, each the smallest stream that shows one rule, where the two models agree or not
(``tests/unit/test_vllm_offload_golden.py`` names the rules of ours that differ).

A golden file is compact JSON, one record per line, as ``tests/golden/vllm_apc`` plus the offload fields:
    {"name", "vllm_version", "config": {block_size, num_gpu_blocks (incl. vLLM's null block), host_blocks,
     max_num_seqs, max_num_batched_tokens, max_model_len, enable_chunked_prefill, long_prefill_token_threshold,
     reserve_full_isl, enable_prefix_caching (true), async_scheduling},
     "requests": [{id, arrival_step, prompt_tokens, output_tokens, segments, prompt_crc}, ...],
     "steps": [{step, scheduled {id: n}, preempted [ids], finished [ids], emitted {id: n},
                hits {id: num_computed_tokens at schedule time, for each request admitted or resumed in that step
                      (GPU cache hits plus what a finished host load brought)},
                loads {id: GPU blocks of the load job the step's schedule() created for it},
                stores {id: blocks of the store job the step's metadata holds for it}}, ...],
     "summary": {id: {emitted_tokens, num_preemptions, finish_step, hit_tokens, first_hit,
                      host_hit (tokens of the load that started at the request's first admission, else 0)}}}
Records in which nothing was scheduled, preempted, finished, emitted, loaded or stored are dropped. Prompts are
``segments`` as in ``record_vllm_goldens_apc.py`` (``prompt_crc`` checks the rebuild).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_io import emit, parse_args  # noqa: E402
from record_vllm_goldens import cdiv, dump  # noqa: E402
from record_vllm_goldens_apc import (  # noqa: E402
    cycling_requests,
    finalize,
    multiturn_requests,
    prompt_ids,
    shared_requests,
)

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "vllm_offload"
PAGE_BYTES = 4096
"""KV bytes of one GPU block (one layer, one KV head): one host chunk, already page aligned."""
SAMPLED_TOKEN = 7

# ---------------------------------------------------------------------------------------------
# vLLM's scheduler with the offloading connector
# ---------------------------------------------------------------------------------------------

_MODEL_DIR: list[str] = []


def _model_dir() -> str:
    """A one-layer llama config (no weights, no tokenizer): all ModelConfig needs."""
    if not _MODEL_DIR:
        d = tempfile.mkdtemp(prefix="offload-oracle-model-")
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
               "intermediate_size": 128, "num_attention_heads": 1, "num_key_value_heads": 1, "num_hidden_layers": 1,
               "vocab_size": 32000, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
               "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
        Path(d, "config.json").write_text(json.dumps(cfg))
        _MODEL_DIR.append(d)
    return _MODEL_DIR[0]


def build_scheduler(cfg: dict, kv_transfer_config=None):
    """vLLM's scheduler for ``cfg``. By default the native CPU tier set up by ``kv_offloading_size``; a
    ``KVTransferConfig`` given in ``kv_transfer_config`` replaces it (``record_vllm_storage_goldens.py``)."""
    import torch  # noqa: PLC0415
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: PLC0415
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: PLC0415
    from vllm.v1.core.sched.scheduler import Scheduler  # noqa: PLC0415
    from vllm.v1.kv_cache_interface import (  # noqa: PLC0415
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        KVCacheTensor,
    )
    from vllm.v1.structured_output import StructuredOutputManager  # noqa: PLC0415

    bs, nb, mml = cfg["block_size"], cfg["num_gpu_blocks"], cfg["max_model_len"]
    model = ModelConfig(model=_model_dir(), skip_tokenizer_init=True, dtype="bfloat16", max_model_len=mml, seed=0)
    sched_cfg = SchedulerConfig(
        max_num_seqs=cfg["max_num_seqs"], max_num_batched_tokens=cfg["max_num_batched_tokens"], max_model_len=mml,
        is_encoder_decoder=False, enable_chunked_prefill=cfg["enable_chunked_prefill"],
        long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
        async_scheduling=cfg["async_scheduling"], scheduler_reserve_full_isl=cfg["reserve_full_isl"], watermark=0.0)
    if kv_transfer_config is None:
        cache = CacheConfig(block_size=bs, enable_prefix_caching=True,
                            kv_offloading_size=cfg["host_blocks"] * PAGE_BYTES / 2**30)
    else:
        cache = CacheConfig(block_size=bs, enable_prefix_caching=True)
    vc = VllmConfig(model_config=model, scheduler_config=sched_cfg, cache_config=cache,
                    device_config=DeviceConfig(device="cpu"), kv_transfer_config=kv_transfer_config)
    sc = vc.scheduler_config  # (post-init may rewrite these; put ours back, then check)
    sc.max_num_seqs = cfg["max_num_seqs"]
    sc.max_num_batched_tokens = cfg["max_num_batched_tokens"]
    sc.enable_chunked_prefill = cfg["enable_chunked_prefill"]
    sc.async_scheduling = cfg["async_scheduling"]
    vc.cache_config.block_size = bs
    vc.cache_config.num_gpu_blocks = nb
    spec = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=PAGE_BYTES // (4 * bs), dtype=torch.bfloat16)
    assert spec.page_size_bytes == PAGE_BYTES, spec.page_size_bytes
    layer = "model.layers.0.self_attn.attn"
    kv = KVCacheConfig(num_blocks=nb,
                       kv_cache_tensors=[KVCacheTensor(size=PAGE_BYTES * nb, layers=[layer],
                                                       layer_stride=PAGE_BYTES * nb, block_stride=PAGE_BYTES)],
                       kv_cache_groups=[KVCacheGroupSpec([layer], spec)])
    cls = AsyncScheduler if cfg["async_scheduling"] else Scheduler
    sched = cls(vllm_config=vc, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(vc),
                block_size=bs, hash_block_size=bs, log_stats=False)
    assert vc.kv_transfer_config.kv_connector == "OffloadingConnector", vc.kv_transfer_config
    cs = sched.connector.connector_scheduler
    host = getattr(cs.manager, "primary_tier", cs.manager)  # (the tiering manager's CPU tier)
    assert host._num_chunks == cfg["host_blocks"], (host._num_chunks, cfg["host_blocks"])
    assert cs.config.blocks_per_chunk == 1 and cs.config.offload_prompt_only
    assert sched.max_num_running_reqs == cfg["max_num_seqs"]
    assert sched.max_num_scheduled_tokens == cfg["max_num_batched_tokens"]
    assert sched.block_size == bs and sched.max_model_len == mml
    assert sched.defer_block_free == cfg["async_scheduling"]
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() == nb - 1
    return sched


def run(cfg: dict, reqs: list[dict], max_idle_steps: int = 200, hook=None, build=None) -> tuple[list[dict], dict]:
    """Drive the stream through vLLM; returns (records of every schedule() call, per-request outcome).
    ``hook(step, scheduler, output)``, if given, is called before (output None) and after each ``schedule()``:
    a debugging aid. ``build(cfg)`` makes the scheduler (default ``build_scheduler``)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (  # noqa: PLC0415
        OffloadingWorkerMetadata,
    )
    from vllm.sampling_params import SamplingParams  # noqa: PLC0415
    from vllm.utils.hashing import get_hash_fn_by_name  # noqa: PLC0415
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: PLC0415
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: PLC0415
    from vllm.v1.request import Request  # noqa: PLC0415

    sched = (build or build_scheduler)(cfg)
    fn = get_hash_fn_by_name("sha256")
    init_none_hash(fn)
    hasher = get_request_block_hasher(cfg["block_size"], fn)
    pending = deque(sorted(reqs, key=lambda r: r["arrival_step"]))
    by_id: dict = {}
    jobs: dict[int, tuple[float, str, str]] = {}  # job id -> (start time, "load" | "store", request id)
    batch: deque = deque()  # (record, scheduler output, sampled ids, jobs to flush, step), newest first
    qsize = 2 if cfg["async_scheduling"] else 1
    records: list[dict] = []
    outcome = {r["id"]: {"emitted_tokens": 0, "finish_step": None} for r in reqs}
    now = 0.0
    step = 0
    idle = 0
    while True:
        if not sched.has_requests() and not batch:
            if not pending:
                break
            if pending[0]["arrival_step"] > step:
                step = now = pending[0]["arrival_step"]
        while pending and pending[0]["arrival_step"] <= step:
            spec = pending.popleft()
            req = Request(request_id=spec["id"], prompt_token_ids=prompt_ids(spec["segments"]),
                          sampling_params=SamplingParams(max_tokens=spec["output_tokens"], ignore_eos=True),
                          pooling_params=None, arrival_time=float(spec["arrival_step"]), block_hasher=hasher)
            by_id[spec["id"]] = req
            sched.add_request(req)
        if sched.has_requests():
            if hook is not None:
                hook(step, sched, None)
            so = sched.schedule()
            if hook is not None:
                hook(step, sched, so)
            meta = so.kv_connector_metadata
            executed = so.total_num_scheduled_tokens > 0
            for jid, job in meta.load_jobs.items():
                jobs[jid] = (step + 1 if executed else now, "load", job.req_id)
            for jid, job in meta.store_jobs.items():
                jobs[jid] = (step + 1, "store", job.req_id)
            hits = {nr.req_id: nr.num_computed_tokens for nr in so.scheduled_new_reqs}
            cached = so.scheduled_cached_reqs
            for rid, n in zip(cached.req_ids, cached.num_computed_tokens):
                if rid in cached.resumed_req_ids:
                    hits[rid] = n
            for rid, h in hits.items():
                assert h == sched.requests[rid].num_computed_tokens - so.num_scheduled_tokens[rid], (rid, h)
            rec = {
                "step": step,
                "scheduled": dict(so.num_scheduled_tokens),
                "preempted": sorted(so.preempted_req_ids or ()),
                "finished": [],
                "emitted": {},
                "hits": hits,
                "loads": {j.req_id: len(j.dst_spec.block_ids) for j in meta.load_jobs.values()},
                "stores": {j.req_id: len(j.src_spec.block_ids) for j in meta.store_jobs.values()},
            }
            assert len(rec["loads"]) == len(meta.load_jobs) and len(rec["stores"]) == len(meta.store_jobs)
            sampled = {r for r in so.num_scheduled_tokens if not sched.requests[r].is_prefill_chunk}
            batch.appendleft((rec, so, sampled, set(meta.jobs_to_flush), step))
            step += 1
            idle = 0 if executed or rec["loads"] or rec["stores"] else idle + 1
            if idle > max_idle_steps:
                raise RuntimeError(f"{idle} empty steps in a row at step {step}: the stream cannot progress")
            if len(batch) < qsize and (executed or sched.has_requests()):
                continue
        elif not batch:
            continue
        rec, so, sampled, flush, k = batch.pop()
        now = k + 1  # step k's pass ends
        done = {jid for jid, (start, _, _) in jobs.items() if start < now or jid in flush}
        recving = {jobs[jid][2] for jid in done if jobs[jid][1] == "load"}
        for jid in done:
            del jobs[jid]
        req_ids = list(so.num_scheduled_tokens)
        kvo = KVConnectorOutput(finished_recving=recving or None,
                                kv_connector_worker_meta=OffloadingWorkerMetadata(
                                    completed_jobs=dict.fromkeys(sorted(done), 1)) if done else None)
        mro = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=[[SAMPLED_TOKEN] if r in sampled else [] for r in req_ids],
                                kv_connector_output=kvo)
        for client in sched.update_from_output(so, mro).values():
            for o in client.outputs:
                if o.new_token_ids:
                    rec["emitted"][o.request_id] = rec["emitted"].get(o.request_id, 0) + len(o.new_token_ids)
                    outcome[o.request_id]["emitted_tokens"] += len(o.new_token_ids)
                if o.finish_reason is not None:
                    rec["finished"].append(o.request_id)
                    outcome[o.request_id]["finish_step"] = k
        rec["finished"].sort()
        records.append(rec)
    assert not jobs, jobs
    for rid, req in by_id.items():
        outcome[rid]["num_preemptions"] = req.num_preemptions
    return records, outcome


def record(name: str, cfg: dict, reqs: list[dict], vllm_version: str, run_fn=None) -> dict:
    """The golden of one stream; ``run_fn`` (default ``run``) may add fields to the records: a record is kept
    if any field but ``step`` and ``hits`` is non-empty."""
    records, outcome = (run_fn or run)(cfg, reqs)
    steps = []
    hit_total: dict[str, int] = {}
    first_hit: dict[str, int] = {}
    host_hit: dict[str, int] = {}
    preempts: dict[str, int] = {}
    bs = cfg["block_size"]
    for rec in records:
        for rid in rec["preempted"]:
            preempts[rid] = preempts.get(rid, 0) + 1
        for rid, n in rec["loads"].items():
            host_hit.setdefault(rid, n * bs)
        for rid, h in rec["hits"].items():
            hit_total[rid] = hit_total.get(rid, 0) + h
            first_hit.setdefault(rid, h)
            host_hit.setdefault(rid, 0)
        if any(v for f, v in rec.items() if f not in ("step", "hits")):  # (hits: only with scheduled)
            steps.append(rec)
    summary = {}
    for r in reqs:
        rid, o = r["id"], outcome[r["id"]]
        expect = min(r["output_tokens"], cfg["max_model_len"] - r["prompt_tokens"])
        assert o["finish_step"] is not None and o["emitted_tokens"] == expect, (name, rid, o)
        assert o["num_preemptions"] == preempts.get(rid, 0), (name, rid)
        summary[rid] = {"emitted_tokens": o["emitted_tokens"], "num_preemptions": o["num_preemptions"],
                        "finish_step": o["finish_step"], "hit_tokens": hit_total.get(rid, 0),
                        "first_hit": first_hit.get(rid, 0), "host_hit": host_hit.get(rid, 0)}
    return {"name": name, "vllm_version": vllm_version, "config": cfg, "requests": reqs, "steps": steps,
            "summary": summary}


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------

def stream(name: str, reqs: list[dict], *, block_size: int, usable: int, host_blocks: int, async_scheduling: bool,
           max_num_seqs: int = 16, budget: int = 512, max_model_len: int | None = None, chunked: bool = True,
           lpt: int = 0, reserve_full_isl: bool = True) -> tuple[str, dict, list[dict]]:
    """A stream with ``usable`` GPU blocks (vLLM's null block comes on top) and a host tier of ``host_blocks``."""
    reqs = finalize(reqs)
    mml = max_model_len or max(r["prompt_tokens"] + r["output_tokens"] for r in reqs)
    assert all(0 < r["prompt_tokens"] < mml for r in reqs), name
    need = max(cdiv(min(r["prompt_tokens"] + r["output_tokens"] - 1, mml), block_size) for r in reqs)  # (last: no KV)
    assert usable >= need, (name, usable, need)
    cfg = {"block_size": block_size, "num_gpu_blocks": usable + 1, "host_blocks": host_blocks,
           "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max(budget, mml if not chunked else 0),
           "max_model_len": mml, "enable_chunked_prefill": chunked, "long_prefill_token_threshold": lpt,
           "reserve_full_isl": reserve_full_isl, "enable_prefix_caching": True, "async_scheduling": async_scheduling}
    return name, cfg, reqs


def handmade(seed: int, spec: list[tuple[str, int, list[tuple[str, int]], int]]) -> list[dict]:
    """Requests written out: (id, arrival step, [(content name, tokens), ...], output tokens); equal content
    names give equal tokens."""
    names: dict[str, int] = {}
    return [{"id": rid, "arrival_step": arrival,
             "segments": [[seed * 1000 + names.setdefault(c, len(names)), n] for c, n in parts], "output_tokens": out}
            for rid, arrival, parts, out in spec]


def streams() -> list[tuple[str, dict, list[dict]]]:
    C, M, S, H = cycling_requests, multiturn_requests, shared_requests, handmade
    return [
        # The smallest streams that show where our model and vLLM differ (see tests/unit/test_vllm_offload_golden).
        # vLLM takes a pass's host slots when it schedules the pass: the previous pass's copies are in flight then
        # and cannot be evicted (B's blocks are not stored; ours are, at the end of B's pass).
        stream("min_store_slots_sync", H(3901, [("a", 0, [("a", 33)], 4), ("b", 1, [("b", 33)], 2)]),
               block_size=16, usable=8, host_blocks=2, async_scheduling=False),
        # vLLM refreshes a finished request's blocks in the next schedule(), after that step's stores took room:
        # R's store evicts P's block there (ours refreshes P at its finish and evicts Q's); T then re-stores it.
        stream("min_finish_touch_sync", H(3902, [("p", 0, [("p", 16), ("p1", 1)], 3), ("q", 0, [("q", 16), ("q1", 1)], 10),
                                                ("r", 3, [("r", 17)], 1), ("t", 5, [("p", 16), ("t1", 1)], 1)]),
               block_size=16, usable=16, host_blocks=2, async_scheduling=False),
        # vLLM admits a host load only if its blocks fit in the free pool less what in-flight prefills (C, waiting
        # for its own load) still need for their whole sequence: D waits; ours loads it.
        stream("min_reserved_sync", H(3903, [("a", 0, [("a", 32), ("a1", 1)], 1), ("b", 0, [("b", 48), ("b1", 1)], 1),
                                            ("e", 2, [("e", 120)], 1), ("c", 4, [("a", 32), ("c1", 60)], 1),
                                            ("d", 4, [("b", 48), ("d1", 2)], 1)]),
               block_size=16, usable=8, host_blocks=100, async_scheduling=False),
        # Hand-made paths both agree on: an offer the tier cannot make room for (E: everything else is protected;
        # C: the rest is pinned by B's load) is dropped, retried at the next pass or the finish, and fails again
        # while the pin holds; F waits (skipped) while B loads the blocks it needs, then finds them on the GPU.
        stream("min_store_fail_pinned_sync", H(3904, [("a", 0, [("a", 32), ("a1", 1)], 1), ("e", 2, [("e", 112)], 1),
                                                     ("b", 4, [("a", 32), ("b1", 1)], 2), ("f", 4, [("a", 32), ("f1", 5)], 1),
                                                     ("c", 4, [("c", 16), ("c1", 1)], 1),
                                                     ("d", 10, [("c", 16), ("d1", 1)], 1)]),
               block_size=16, usable=7, host_blocks=2, async_scheduling=False),
        # V's admission evicts X's blocks from the GPU in the step after X's pass stored them (X and Y finished
        # together, X's blocks freed first): W's host lookup reaches a block whose copy is still in flight (vLLM:
        # HIT_PENDING), so W is skipped, not blocking U behind it, and loads the block afterwards.
        stream("min_pending_sync", H(3905, [("x", 0, [("x", 32), ("x1", 1)], 1), ("y", 0, [("y", 32), ("y1", 1)], 1),
                                           ("v", 1, [("v", 48)], 1), ("w", 1, [("x", 32), ("w1", 1)], 1),
                                           ("u", 1, [("y", 32), ("u1", 1)], 1)]),
               block_size=16, usable=6, host_blocks=20, async_scheduling=False),
        stream("min_pending_async", H(3906, [("x", 0, [("x", 32), ("x1", 1)], 1), ("y", 0, [("y", 32), ("y1", 1)], 1),
                                            ("v", 2, [("v", 48)], 1), ("w", 2, [("x", 32), ("w1", 1)], 1),
                                            ("u", 2, [("y", 32), ("u1", 1)], 1)]),
               block_size=16, usable=6, host_blocks=20, async_scheduling=True),
        # Tight GPU KV, roomy host: prefixes leave the GPU cache and come back from the host.
        stream("sync_refind_bs16", C(3001, 40, block_size=16, num_prefixes=6, prefix_blocks=(2, 5), suffix=(1, 24),
                                    output=(1, 8), order="cycle", span=120),
               block_size=16, usable=20, host_blocks=200, async_scheduling=False, max_num_seqs=8, budget=256),
        stream("async_refind_bs16", C(3002, 40, block_size=16, num_prefixes=6, prefix_blocks=(2, 5), suffix=(1, 24),
                                     output=(1, 8), order="cycle", span=120),
               block_size=16, usable=20, host_blocks=200, async_scheduling=True, max_num_seqs=8, budget=256),
        stream("sync_refind_random_bs8", C(3003, 48, block_size=8, num_prefixes=8, prefix_blocks=(3, 8),
                                          suffix=(1, 20), output=(1, 10), order="random", span=100),
               block_size=8, usable=30, host_blocks=300, async_scheduling=False, max_num_seqs=8, budget=128),
        # A tiny host tier: host evictions, a finished request's prefix refreshed head last (its tail goes first),
        # partial hits. Sparse arrivals (one request at a time) and bursts.
        stream("sync_tiny_host_sparse_bs16", C(3004, 30, block_size=16, num_prefixes=5, prefix_blocks=(2, 4),
                                              suffix=(1, 16), output=(1, 4), order="random", arrivals="sparse",
                                              span=6),
               block_size=16, usable=6, host_blocks=10, async_scheduling=False, max_num_seqs=8, budget=256),
        stream("async_tiny_host_sparse_bs8", C(3015, 30, block_size=8, num_prefixes=5, prefix_blocks=(4, 8),
                                              suffix=(1, 8), output=(1, 4), order="random", arrivals="sparse",
                                              span=10),
               block_size=8, usable=12, host_blocks=20, async_scheduling=True, max_num_seqs=8, budget=256),
        stream("sync_tiny_host_bs16", C(3018, 40, block_size=16, num_prefixes=5, prefix_blocks=(2, 4), suffix=(1, 20),
                                       output=(1, 6), order="random", span=100),
               block_size=16, usable=10, host_blocks=10, async_scheduling=False, max_num_seqs=8, budget=256),
        stream("async_tiny_host_bs16", C(3005, 40, block_size=16, num_prefixes=5, prefix_blocks=(2, 4),
                                        suffix=(1, 20), output=(1, 6), order="random", span=100),
               block_size=16, usable=10, host_blocks=10, async_scheduling=True, max_num_seqs=8, budget=256),
        stream("sync_tiny_host_burst_bs8", S(3006, 24, block_size=8, output=(2, 12), groups=4, prefix=(16, 48),
                                            suffix=(2, 24), dup=0.2, arrivals="bursts", bursts=(0, 20, 40, 60)),
               block_size=8, usable=14, host_blocks=12, async_scheduling=False, max_num_seqs=8, budget=96),
        # Multi-turn chats: a turn repeats the previous prompt and its output, plus a new message.
        stream("sync_multiturn_bs16", M(3007, 5, 4, first=(20, 70), user=(4, 30), output=(2, 20), gap=(4, 20),
                                       span=20, system=32),
               block_size=16, usable=24, host_blocks=120, async_scheduling=False, max_num_seqs=8, budget=256),
        stream("async_multiturn_bs8", M(3008, 5, 4, first=(10, 50), user=(4, 24), output=(2, 16), gap=(3, 15),
                                       span=20, system=24),
               block_size=8, usable=40, host_blocks=160, async_scheduling=True, max_num_seqs=8, budget=128),
        # Bursts of shared prefixes and duplicates (block-aligned prompts: a full hit loads the last block).
        stream("sync_bursts_aligned_bs16", S(3009, 30, block_size=16, output=(1, 12), groups=3, prefix=(16, 64),
                                            suffix=(0, 40), dup=0.3, aligned=0.6, arrivals="bursts",
                                            bursts=(0, 15, 30, 45)),
               block_size=16, usable=18, host_blocks=64, async_scheduling=False, max_num_seqs=12, budget=512),
        stream("async_bursts_bs16", S(3010, 30, block_size=16, output=(1, 12), groups=3, prefix=(16, 64),
                                     suffix=(1, 40), dup=0.3, aligned=0.3, arrivals="bursts", bursts=(0, 15, 30, 45)),
               block_size=16, usable=18, host_blocks=64, async_scheduling=True, max_num_seqs=12, budget=512),
        # KV pressure under async scheduling: vLLM's "victim in flight: stop the running loop, preempt next step".
        stream("async_pressure_bs16", S(3011, 16, block_size=16, output=(16, 60), groups=2, prefix=(32, 64),
                                       suffix=(8, 40), dup=0.1, arrivals="burst"),
               block_size=16, usable=14, host_blocks=64, async_scheduling=True, max_num_seqs=8, budget=256),
        stream("sync_pressure_bs16", S(3012, 16, block_size=16, output=(16, 60), groups=2, prefix=(32, 64),
                                      suffix=(8, 40), dup=0.1, arrivals="burst"),
               block_size=16, usable=14, host_blocks=64, async_scheduling=False, max_num_seqs=8, budget=256),
        # Chunked prefills in flight while host loads are admitted (small budget, long prompts).
        stream("sync_chunked_loads_bs16", C(3013, 30, block_size=16, num_prefixes=4, prefix_blocks=(4, 8),
                                           suffix=(8, 40), output=(1, 8), order="cycle", span=60),
               block_size=16, usable=24, host_blocks=100, async_scheduling=False, max_num_seqs=8, budget=48),
        stream("async_chunked_loads_bs16", C(3014, 30, block_size=16, num_prefixes=4, prefix_blocks=(4, 8),
                                            suffix=(8, 40), output=(1, 8), order="cycle", span=60),
               block_size=16, usable=24, host_blocks=100, async_scheduling=True, max_num_seqs=8, budget=48),
    ]


def stats(golden: dict) -> str:
    steps = golden["steps"]
    n = lambda f: sum(len(s[f]) for s in steps)  # noqa: E731
    return (f"steps={len(steps):4d} preempt={n('preempted'):3d} loads={n('loads'):3d} "
            f"load_blocks={sum(sum(s['loads'].values()) for s in steps):4d} stores={n('stores'):3d} "
            f"host_hit_reqs={sum(1 for v in golden['summary'].values() if v['host_hit'])}")


def record_streams(doc: str, argv, all_streams: list, record_fn, stats_fn, out_dir: Path) -> int:
    """The recorders' command line: record every stream (or ``--only`` some) with ``record_fn`` into ``out_dir``,
    or ``--check`` them; 1 if a file is stale."""
    args = parse_args(doc, argv)
    import vllm  # noqa: PLC0415

    names = [s[0] for s in all_streams]
    assert len(names) == len(set(names))
    out_dir.mkdir(parents=True, exist_ok=True)
    stale = False
    for name, cfg, reqs in all_streams:
        if args.only and name not in args.only:
            continue
        golden = record_fn(name, cfg, reqs, vllm.__version__)
        stale |= emit(out_dir / f"{name}.json", dump(golden), args.check, stats_fn(golden))
    return 1 if stale else 0


def main(argv=None) -> int:
    return record_streams(__doc__, argv, streams(), record, stats, OUT_DIR)


if __name__ == "__main__":
    if "PYTHONHASHSEED" not in os.environ:  # vLLM walks sets of request ids (see the module docstring)
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
