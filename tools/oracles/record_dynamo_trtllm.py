#!/usr/bin/env python3
"""Record TensorRT-LLM-scheduler goldens from NVIDIA Dynamo's mocker (offline replay, ``backend: trtllm``).

Regenerate (from the repo root; needs the peers venv of ../shared/oracles/peers.md §1, here /work/.venv-peers):

    /work/.venv-peers/bin/python tools/oracles/record_dynamo_trtllm.py            # all streams
    /work/.venv-peers/bin/python tools/oracles/record_dynamo_trtllm.py --check    # compare, write nothing
    /work/.venv-peers/bin/python tools/oracles/record_dynamo_trtllm.py --only tight_kv

Every request stream below is driven through ``dynamo.replay.run_trace_replay`` (ai-dynamo 1.6.1, whose
``_core`` statically links ``aisimulate-core`` 0.13.0; round-robin routing, virtual clock) under several engine
variants ("runs"), and written to ``tests/golden/dynamo_trtllm/<name>.json``. Streams come from fixed seeds
(``record_dynamo_sglang.make_requests``) and the replay is deterministic: each is replayed twice and compared,
and two runs of this script give byte-identical files. Only the installed package's public API is called.

Setup shared by every run:
  * ``backend: trtllm`` with its one capacity policy in the mocker, ``guaranteed_no_evict`` (it refuses
    ``max_utilization`` and ``static_batch``); fixed timing: a pass that prefills costs 20 ms, one that
    decodes 10 ms, a pass doing both 30 ms;
  * KV blocks of 32 tokens (TensorRT-LLM's ``tokens_per_block``), block reuse on, chunked context on,
    ``max_num_batched_tokens`` 8192 and ``max_num_seqs`` 256 unless a run overrides them (``overrides``);
  * prompts are Mooncake rows whose ``hash_ids`` name blocks of ``trace_block_size`` tokens (64 unless a stream
    says otherwise); two prompts share exactly the tokens of their common leading run of ids.

What the mocker's TRT-LLM policy does, as probed while writing this (docs/trtllm.md): running requests first in
the order they started (a decode one token, a prompt being chunked min(rest, budget left), not cut to whole
blocks: the simulator's ``chunk_unit: 1``), then FCFS starts while the budget and a sequence slot last; a request
starts only if ceil((prompt + output) / 32) blocks, less the hit blocks another request holds, fit in the free
blocks (evictable cached ones counting as free) less what every running request still needs until it
completes; the first that does not blocks the queue. The streams keep clear of where the mocker departs from
TensorRT-LLM itself: every prompt has tokens of its own after any shared prefix (never wholly cached, so the
mocker's zero-token prefill of a fully cached prompt never arises), and every request fits the pool and
``max_seq_len`` (the mocker clamps the output to the pool, TensorRT-LLM does not).

File layout (compact JSON, one record per line, written by ``record_dynamo_sglang.dumps``) as that script's, with
``block_size`` and ``kv_blocks_per_rank`` in ``config``; result fields: worker, dp_rank, first_admit_ms, first_token_ms,
last_token_ms, ttft_ms, e2e_ms, admissions, reused_input_tokens.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_io import (  # noqa: E402
    REPO,
    mocker_records,
    only_route,
    package_versions,
    parse_args,
    r6,
    record_streams,
    replay_twice,
)
from record_dynamo_sglang import dumps, hash_ids, make_requests, write_mooncake  # noqa: E402

OUT_DIR = REPO / "tests" / "golden" / "dynamo_trtllm"

PREFILL_MS = 20.0
DECODE_MS = 10.0
BLOCK_SIZE = 32
TRACE_BLOCK_SIZE = 64
LOOSE_KV = 8192  # blocks of 32 tokens per rank (262,144 tokens): never binds for these streams
SHARED_ENGINE = {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "enable_prefix_caching": True,
                 "enable_chunked_prefill": True, "trtllm": {"capacity_scheduler_policy": "guaranteed_no_evict"}}

RESULT_FIELDS = ("id", "worker", "dp_rank", "first_admit_ms", "first_token_ms", "last_token_ms",
                 "ttft_ms", "e2e_ms", "admissions", "reused_input_tokens")


def run(label: str, num_workers: int = 1, dp_size: int = 1, **overrides) -> dict:
    return {"label": label, "num_workers": num_workers, "dp_size": dp_size, "overrides": overrides}


STREAMS = [
    dict(name="poisson_loose",
         description="40 requests, Poisson over 1.5 s, prompts 100-4000, outputs 1-80, no sharing, loose KV: "
                     "decodes first, then starts packed into the budget, the last one chunked",
         kv_blocks=LOOSE_KV,
         requests=dict(seed=701, n=40, prompt=(100, 4000), output=(1, 80), arrivals="poisson", span_ms=1500),
         runs=[run("dp1"), run("dp2", dp_size=2), run("budget2048", max_num_batched_tokens=2048),
               run("unchunked_budget4096", enable_chunked_prefill=False, max_num_batched_tokens=4096)]),
    dict(name="burst_budget",
         description="16 requests at t=0 (+0-3 ms), prompts 200-4000: several starts per pass, the one that "
                     "overflows the budget chunked into the rest",
         kv_blocks=LOOSE_KV,
         requests=dict(seed=702, n=16, prompt=(200, 4000), output=(1, 30), arrivals="bursts", bursts=(0.0,)),
         runs=[run("dp1"), run("budget4096", max_num_batched_tokens=4096),
               run("budget1000", max_num_batched_tokens=1000), run("dp2_budget3000", dp_size=2,
                                                                    max_num_batched_tokens=3000),
               run("unchunked_budget8192", enable_chunked_prefill=False)]),
    dict(name="long_prompts",
         description="14 requests over 600 ms, a third with 9000-40000-token prompts: a context chunked over "
                     "several passes while decodes go on, short prompts behind its last chunk",
         kv_blocks=LOOSE_KV,
         requests=dict(seed=703, n=14, prompt=(50, 3000), output=(2, 40), arrivals="spread", span_ms=600,
                       long_share=0.35, long_prompt=(9000, 40000)),
         runs=[run("dp1"), run("dp2", dp_size=2), run("budget2048", max_num_batched_tokens=2048)]),
    dict(name="shared_prefix",
         description="36 requests in four bursts, 80% share one of 4 prefixes (16-64 blocks of 64, a random "
                     "leading part of it): block reuse, hits on blocks running requests hold",
         kv_blocks=LOOSE_KV,
         requests=dict(seed=704, n=36, prompt=(50, 1500), output=(1, 40), arrivals="bursts",
                       bursts=(0.0, 150.0, 300.0, 450.0), groups=(16, 32, 48, 64), group_share=0.8,
                       min_prefix_frac=0.5),
         runs=[run("dp1"), run("dp2", dp_size=2), run("no_reuse", enable_prefix_caching=False)]),
    dict(name="tight_kv",
         description="30 requests, Poisson over 2 s, prompts 100-800, outputs 100-500, 200 blocks (6,400 "
                     "tokens) per rank: starts held back by the running requests' blocks to completion",
         kv_blocks=200,
         requests=dict(seed=705, n=30, prompt=(100, 800), output=(100, 500), arrivals="poisson", span_ms=2000),
         runs=[run("dp1"), run("dp2", dp_size=2), run("seqs8", max_num_seqs=8),
               run("no_reuse", enable_prefix_caching=False)]),
    dict(name="tight_kv_shared_prefix",
         description="32 requests, 70% share one of 3 prefixes (4-12 blocks of 64), 160 blocks: cached prefixes "
                     "evicted and hit again under pressure, hits on held blocks lowering a start's need",
         kv_blocks=160,
         requests=dict(seed=706, n=32, prompt=(100, 800), output=(80, 400), arrivals="poisson", span_ms=2500,
                       groups=(4, 8, 12), group_share=0.7, min_prefix_frac=0.5),
         runs=[run("dp1"), run("dp2", dp_size=2)]),
    dict(name="grid_ties",
         description="24 requests on a 10 ms grid over 300 ms: arrivals exactly on pass ends",
         kv_blocks=LOOSE_KV,
         requests=dict(seed=707, n=24, prompt=(100, 3000), output=(1, 30), arrivals="spread", span_ms=300,
                       grid_ms=10.0),
         runs=[run("dp1"), run("dp2", dp_size=2)]),
    dict(name="two_workers",
         description="32 requests, Poisson over 1 s, on 2 workers (round robin over workers, then ranks)",
         kv_blocks=LOOSE_KV,
         requests=dict(seed=708, n=32, prompt=(100, 5000), output=(1, 60), arrivals="poisson", span_ms=1000),
         runs=[run("w2_dp1", num_workers=2), run("w2_dp2", num_workers=2, dp_size=2)]),
    dict(name="osl_one_heavy",
         description="20 requests, half with a single output token (done at their last prompt chunk), spread "
                     "over 250 ms",
         kv_blocks=LOOSE_KV,
         requests=dict(seed=709, n=20, prompt=(100, 6000), output=(1, 12), arrivals="spread", span_ms=250,
                       osl_one_share=0.5),
         runs=[run("dp1"), run("dp2", dp_size=2)]),
    dict(name="max_running",
         description="24 requests, Poisson over 600 ms: max_num_seqs 4 and 8 cap the running requests",
         kv_blocks=LOOSE_KV,
         requests=dict(seed=710, n=24, prompt=(100, 3000), output=(5, 50), arrivals="poisson", span_ms=600),
         runs=[run("seqs4", max_num_seqs=4), run("seqs8", max_num_seqs=8), run("dp2_seqs4", dp_size=2,
                                                                                 max_num_seqs=4)]),
    dict(name="small_budget",
         description="40 requests over 400 ms, prompts 50-600, outputs 30-120, budgets of 24 and 64 tokens: the "
                     "decodes alone can spend the budget (the running requests after it wait a pass)",
         kv_blocks=LOOSE_KV,
         requests=dict(seed=711, n=40, prompt=(50, 600), output=(30, 120), arrivals="spread", span_ms=400),
         runs=[run("budget24", max_num_batched_tokens=24), run("budget64", max_num_batched_tokens=64)]),
    dict(name="trace_block_16",
         description="28 requests with hash blocks of 16 tokens (two per KV block), 80% sharing one of 3 "
                     "prefixes (8-40 hash blocks): reuse up to the last whole KV block of the shared part",
         kv_blocks=LOOSE_KV, trace_block_size=16,
         requests=dict(seed=712, n=28, prompt=(500, 3000), output=(1, 30), arrivals="bursts",
                       bursts=(0.0, 60.0, 120.0, 180.0), groups=(8, 24, 40), group_share=0.8,
                       min_prefix_frac=0.3, tbs=16),
         runs=[run("dp1"), run("dp2", dp_size=2)]),
]


def engine_args(spec: dict, variant: dict) -> dict:
    eng = {"backend": "trtllm", "block_size": BLOCK_SIZE, "num_gpu_blocks": spec["kv_blocks"],
           "worker_type": "aggregated",
           "timing_model": {"type": "fixed", "prefill_ms": PREFILL_MS, "decode_ms": DECODE_MS}}
    for key, value in SHARED_ENGINE.items():
        eng[key] = dict(value) if isinstance(value, dict) else value
    eng.update(variant["overrides"])
    return {"dp_size": variant["dp_size"], "engine": eng}


def replay(reqs: list[dict], spec: dict, variant: dict, tmpdir: str):
    from dynamo.replay import run_trace_replay

    path = os.path.join(tmpdir, f"{spec['name']}_{variant['label']}.jsonl")
    write_mooncake(reqs, path)
    report = run_trace_replay(path, extra_engine_args=engine_args(spec, variant), num_workers=variant["num_workers"],
                              router_mode="round_robin", trace_block_size=spec.get("trace_block_size", TRACE_BLOCK_SIZE),
                              capture_per_request=True)
    return report.per_request or [], report.summary


def match(reqs: list[dict], records: list[dict], dp_size: int) -> list[dict]:
    """The mocker's records as result rows, in the stream's order (``golden_io.mocker_records``)."""
    rows = []
    for rid, rec in mocker_records(reqs, records):
        worker, rank = only_route(rid, rec)
        if rec["admission_count"] != 1:
            raise SystemExit(f"request {rid}: admitted {rec['admission_count']} times (guaranteed_no_evict never "
                             f"evicts)")
        rows.append({"id": rid, "worker": worker, "dp_rank": rank, "first_admit_ms": r6(rec["first_admit_ms"]),
                     "first_token_ms": r6(rec["first_token_ms"]), "last_token_ms": r6(rec["last_token_ms"]),
                     "ttft_ms": r6(rec["ttft_ms"]), "e2e_ms": r6(rec["e2e_latency_ms"]),
                     "admissions": rec["admission_count"], "reused_input_tokens": rec["reused_input_tokens"]})
    return rows


SUMMARY_KEYS = ("duration_ms", "completed_requests", "committed_prefill_tokens", "prefix_cache_reused_ratio")


def record_stream(spec: dict, tmpdir: str) -> dict:
    from dynamo._core import _normalize_mocker_config

    reqs = make_requests(**spec["requests"])
    tbs = spec.get("trace_block_size", TRACE_BLOCK_SIZE)
    pool_tokens = spec["kv_blocks"] * BLOCK_SIZE
    for r in reqs:
        if len(hash_ids(r)) != math.ceil(r["input_tokens"] / tbs):
            raise SystemExit(f"{spec['name']}: request {r['id']} has the wrong number of hash ids")
        if r["input_tokens"] + r["output_tokens"] > pool_tokens:
            raise SystemExit(f"{spec['name']}: request {r['id']} does not fit the pool (the mocker would clamp it)")
    runs = []
    for variant in spec["runs"]:
        results, summ = replay_twice(reqs, spec, variant, tmpdir, replay, match, SUMMARY_KEYS)
        runs.append({"label": variant["label"], "num_workers": variant["num_workers"], "dp_size": variant["dp_size"],
                     "overrides": variant["overrides"],
                     "engine_args": _normalize_mocker_config(json.dumps(engine_args(spec, variant))),
                     "summary": summ, "fields": list(RESULT_FIELDS),
                     "results": [[row[f] for f in RESULT_FIELDS] for row in results]})
    versions = package_versions("ai-dynamo", "ai-dynamo-runtime")
    versions["aisimulate-core"] = "0.13.0 (statically linked into ai-dynamo-runtime)"
    return {"name": spec["name"], "description": spec["description"],
            "peer": {**versions, "api": "dynamo.replay.run_trace_replay", "router_mode": "round_robin",
                     "trace_format": "mooncake"},
            "config": {"timing": {"type": "fixed", "prefill_ms": PREFILL_MS, "decode_ms": DECODE_MS},
                       "trace_block_size": tbs, "block_size": BLOCK_SIZE, "kv_blocks_per_rank": spec["kv_blocks"],
                       "shared_engine": SHARED_ENGINE},
            "requests": [{k: r[k] for k in ("id", "arrival_ms", "input_tokens", "output_tokens", "hash_runs")}
                         for r in reqs],
            "runs": runs}


def main(argv=None) -> int:
    return record_streams(STREAMS, OUT_DIR, parse_args(__doc__, argv), record_stream, dumps)


if __name__ == "__main__":
    sys.exit(main())
