#!/usr/bin/env python3
"""Record disaggregated-serving goldens from NVIDIA Dynamo's mocker (offline replay, vLLM backend).

Regenerate (from the repo root, /work/main; needs the peers venv of ../shared/oracles/peers.md §1):

    /work/venv-peers/bin/python tools/oracles/record_dynamo_disagg.py            # all streams
    /work/venv-peers/bin/python tools/oracles/record_dynamo_disagg.py --check    # compare, write nothing
    /work/venv-peers/bin/python tools/oracles/record_dynamo_disagg.py --backend trtllm   # the mocker's TRT-LLM
                                                  # policy on both pools: tests/golden/dynamo_disagg_trtllm/

It drives every request stream below through ``dynamo.replay.run_trace_replay`` (ai-dynamo 1.6.1,
round-robin routing, virtual clock) on several topologies (1P1D, 2P1D, 1P2D, 2P2D) and writes
``tests/golden/dynamo_disagg/<name>.json``. Streams come from fixed seeds and the round-robin replay
is deterministic, so two runs give byte-identical files (each replay is also run twice and compared).
The goldens need no Dynamo to be read; our code only talks to the installed package's public API.

Setup shared by every stream (the issue-4 parity setting): vLLM backend on both pools, fixed timing
(every prefill pass 20 ms, every decode pass 10 ms), prefix caching off, chunked prefill on (budget 8192),
64-token blocks, 16384 blocks per worker (no KV pressure, no preemption), max_num_seqs 256, KV transfer
``full_prompt`` over a link of ``bandwidth`` decimal GB/s at ``bytes_per_token`` bytes per prompt token,
no per-transfer latency and no link contention (the mocker has neither).

The mocker semantics these files pin down (probed by hand; see the issue-4 notes):
  * transfer_ms = input_tokens * bytes_per_token / (bandwidth * 1e9) * 1e3, unrounded float;
  * a decode worker only touches handoffs between passes: a handoff that reaches it mid-pass is
    reserved at a pass end, one reservation per pass end plus one per destination activation applied
    there (and one per handoff that reaches an idle worker); the transfer starts at reservation; a
    transfer that ends mid-pass is activated at the next pass end and joins that next pass;
  * the prefill side holds the prompt's KV until the activation is applied on its own worker
    (deferred to its next pass end while it runs a pass);
  * at one instant, pass ends and transfer ends are handled (and new passes started) before
    arrivals: a request that arrives exactly when its busy prefill worker ends a pass waits for the
    pass after (it starts at once only if the worker has nothing else to run).

File layout (compact JSON, one record per line):
    {"name", "description", "peer": {package versions, api, router_mode},
     "config": {timing, kv_transfer, block_size, num_gpu_blocks, max_num_seqs, max_num_batched_tokens,
                enable_prefix_caching, enable_chunked_prefill,
                prefill_engine_args, decode_engine_args (the mocker's normalized configs, every field)},
     "requests": [{id, arrival_ms, input_tokens, output_tokens, kv_transfer_ms (derived)}, ...],
     "runs": [{"topology", "num_prefill_workers", "num_decode_workers", "duration_ms",
               "fields": ["id", "prefill_worker_idx", "decode_worker_idx", "prefill_admit_ms",
                          "source_held_ms", "destination_reserved_ms", "destination_activated_ms",
                          "decode_admit_ms", "source_released_ms", "first_token_ms", "last_token_ms",
                          "ttft_ms", "e2e_ms"],
               "results": [[one row per request, in "fields" order], ...]}, ...]}
    (read a row with ``dict(zip(run["fields"], row))``).
Times are milliseconds from the first arrival (which is 0), rounded to 1e-6 ms. Per result:
    prefill_admit_ms         first scheduled on its prefill worker
    source_held_ms           end of the prefill pass that completed the prompt (prefill done)
    destination_reserved_ms  decode worker reserved the prompt's KV; the transfer starts here
    destination_activated_ms transfer over and applied on the decode worker (>= reserved + transfer)
    decode_admit_ms          first scheduled into a decode pass on the decode worker
    source_released_ms       prefill worker freed the prompt's KV
    first_token_ms           end of the first decode pass (the client's first token);
                             ttft_ms = first_token_ms - arrival_ms, e2e_ms = last_token_ms - arrival_ms
Requests are listed by arrival; requests that arrive together are queued in list order.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_io import REPO, compact, mocker_records, package_versions, parse_args, r6, record_streams  # noqa: E402

OUT_DIRS = {"vllm": REPO / "tests" / "golden" / "dynamo_disagg",
            "trtllm": REPO / "tests" / "golden" / "dynamo_disagg_trtllm"}
"""Per ``--backend``: where its goldens go. TRT-LLM's runs the same streams and settings under the mocker's
TRT-LLM scheduler (``guaranteed_no_evict``; chunks not cut to whole blocks), whose handoff is the same
source-first order; its decode side reserves a handoff's KV only if its whole sequence fits."""

PREFILL_MS = 20.0
DECODE_MS = 10.0
BLOCK_SIZE = 64
NUM_GPU_BLOCKS = 16384
MAX_NUM_SEQS = 256
MAX_NUM_BATCHED_TOKENS = 8192
BYTES_PER_TOKEN = 131072
TOPOLOGIES = ((1, 1), (2, 1), (1, 2), (2, 2))

RESULT_FIELDS = (
    ("prefill_worker_idx", "prefill_worker_idx"),
    ("decode_worker_idx", "decode_worker_idx"),
    ("prefill_admit_ms", "prefill_admit_ms"),
    ("source_held_ms", "source_held_ms"),
    ("destination_reserved_ms", "destination_reserved_ms"),
    ("destination_activated_ms", "destination_activated_ms"),
    ("decode_admit_ms", "decode_admit_ms"),
    ("source_released_ms", "source_released_ms"),
    ("first_token_ms", "first_token_ms"),
    ("last_token_ms", "last_token_ms"),
    ("ttft_ms", "ttft_ms"),
    ("e2e_ms", "e2e_latency_ms"),
)


# ---------------------------------------------------------------------------------------------
# Request streams
# ---------------------------------------------------------------------------------------------

def make_requests(seed: int, n: int, prompt: tuple[int, int], output: tuple[int, int],
                  arrivals: str, span_ms: float = 500.0, bursts: tuple[float, ...] = (0.0,),
                  grid_ms: float | None = None, osl_one_share: float = 0.0) -> list[dict]:
    """``n`` requests with uniform prompt/output lengths.

    arrivals: "poisson" (exponential gaps, mean span_ms / n), "spread" (uniform over [0, span_ms)),
    "bursts" (each request at one of ``bursts``), "sparse" (every span_ms, the system drains in
    between), "paced" (every span_ms ± 5 ms, with many requests decoding at once). ``grid_ms`` snaps arrivals to a grid (so some land exactly on pass ends); otherwise
    they keep 0.001 ms. ``osl_one_share`` of the requests get a single output token. The first
    arrival is moved to 0 (the mocker rebases to it) and (arrival, prompt, output) is kept unique so
    the mocker's records map back to requests without ambiguity.
    """
    rng = random.Random(seed)
    reqs = []
    seen = set()
    t = 0.0
    i = 0
    while len(reqs) < n:
        if arrivals == "poisson":
            t += rng.expovariate(n / span_ms)
            a = t
        elif arrivals == "spread":
            a = rng.uniform(0.0, span_ms)
        elif arrivals == "bursts":
            a = rng.choice(bursts)
        elif arrivals == "sparse":
            a = i * span_ms
        elif arrivals == "paced":  # one every span_ms, ±5 ms jitter: prefill finishes land apart
            a = i * span_ms + rng.uniform(-5.0, 5.0)
        else:
            raise ValueError(arrivals)
        a = round(a / grid_ms) * grid_ms if grid_ms else round(a, 3)
        p = rng.randint(*prompt)
        o = 1 if rng.random() < osl_one_share else rng.randint(*output)
        i += 1
        if (a, p, o) in seen:
            continue
        seen.add((a, p, o))
        reqs.append({"arrival_ms": a, "input_tokens": p, "output_tokens": o})
    reqs.sort(key=lambda r: r["arrival_ms"])  # stable: same-time arrivals keep generation order
    t0 = reqs[0]["arrival_ms"]
    for idx, r in enumerate(reqs):
        r["arrival_ms"] = round(r["arrival_ms"] - t0, 3)
        r["id"] = idx
    return reqs


STREAMS = [
    dict(name="spread_small",
         description="8 requests, Poisson arrivals over ~400 ms, short prompts; light load, idle gaps",
         bandwidth_gbps=50.0,
         requests=dict(seed=11, n=8, prompt=(100, 2000), output=(1, 20), arrivals="poisson", span_ms=400)),
    dict(name="burst_mixed",
         description="12 requests at t=0, prompts up to 6000: chunked prefill batches on the prefill "
                     "worker, handoffs bunched at pass ends on the decode worker",
         bandwidth_gbps=50.0,
         requests=dict(seed=22, n=12, prompt=(100, 6000), output=(1, 40), arrivals="bursts", bursts=(0.0,))),
    dict(name="three_bursts",
         description="20 requests in three bursts (0, 150, 400 ms), long prompts and outputs",
         bandwidth_gbps=50.0,
         requests=dict(seed=33, n=20, prompt=(500, 6000), output=(5, 60), arrivals="bursts",
                       bursts=(0.0, 150.0, 400.0))),
    dict(name="poisson_40",
         description="40 requests, Poisson at ~40 req/s, mixed sizes; sustained overlap of transfers "
                     "and decode passes",
         bandwidth_gbps=50.0,
         requests=dict(seed=44, n=40, prompt=(100, 4000), output=(1, 60), arrivals="poisson", span_ms=1000)),
    dict(name="grid_ties",
         description="24 requests on a 5 ms grid over 300 ms: arrivals that land exactly on prefill "
                     "pass ends",
         bandwidth_gbps=50.0,
         requests=dict(seed=55, n=24, prompt=(100, 3000), output=(1, 30), arrivals="spread",
                       span_ms=300, grid_ms=5.0)),
    dict(name="osl_one_heavy",
         description="16 requests, half with a single output token (decode produces it), spread arrivals",
         bandwidth_gbps=50.0,
         requests=dict(seed=66, n=16, prompt=(100, 6000), output=(1, 8), arrivals="spread", span_ms=250,
                       osl_one_share=0.5)),
    dict(name="slow_link_bursts",
         description="16 requests in two bursts over an 8 GB/s link: transfers of 2-100 ms that span "
                     "several decode passes and overlap each other",
         bandwidth_gbps=8.0,
         requests=dict(seed=77, n=16, prompt=(100, 6000), output=(1, 40), arrivals="bursts",
                       bursts=(0.0, 60.0))),
    dict(name="sparse_long",
         description="6 long prompts (4000-6000) every 120 ms: each request mostly alone, exact "
                     "single-request arithmetic",
         bandwidth_gbps=50.0,
         requests=dict(seed=88, n=6, prompt=(4000, 6000), output=(1, 12), arrivals="sparse", span_ms=120)),
    # Paced streams: at most one prefill finishes between two decode pass ends, so the mocker's
    # one-reservation-per-pass-boundary simplification never binds (see test_dynamo_disagg_parity.py).
    dict(name="paced_overlap",
         description="25 requests every ~31.7 ms, outputs 10-60: many requests decode together",
         bandwidth_gbps=50.0,
         requests=dict(seed=101, n=25, prompt=(100, 8000), output=(10, 60), arrivals="paced", span_ms=31.7)),
    dict(name="paced_osl_mix",
         description="30 requests every ~27.3 ms, outputs 1-80",
         bandwidth_gbps=50.0,
         requests=dict(seed=102, n=30, prompt=(100, 6000), output=(1, 80), arrivals="paced", span_ms=27.3)),
    dict(name="paced_slow_link",
         description="20 requests every ~43.1 ms over an 8 GB/s link: transfers overlap decode passes",
         bandwidth_gbps=8.0,
         requests=dict(seed=103, n=20, prompt=(100, 8000), output=(5, 50), arrivals="paced", span_ms=43.1)),
    dict(name="paced_long_outputs",
         description="20 requests every ~33.3 ms with 50-120 outputs: a deep decode batch",
         bandwidth_gbps=50.0,
         requests=dict(seed=104, n=20, prompt=(100, 4000), output=(50, 120), arrivals="paced", span_ms=33.3)),
    dict(name="paced_chunked",
         description="12 requests every ~53.9 ms with 9000-15000-token prompts: two prefill chunks each",
         bandwidth_gbps=50.0,
         requests=dict(seed=105, n=12, prompt=(9000, 15000), output=(5, 30), arrivals="paced", span_ms=53.9)),
]


# ---------------------------------------------------------------------------------------------
# Mocker runs
# ---------------------------------------------------------------------------------------------

def engine_args(worker_type: str, bandwidth_gbps: float, backend: str = "vllm") -> dict:
    return {
        "dp_size": 1,
        "engine": {
            "backend": backend,
            "block_size": BLOCK_SIZE,
            "num_gpu_blocks": NUM_GPU_BLOCKS,
            "max_num_seqs": MAX_NUM_SEQS,
            "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
            "enable_prefix_caching": False,
            "enable_chunked_prefill": True,
            "worker_type": worker_type,
            "kv_transfer_bandwidth": bandwidth_gbps,
            "kv_transfer_bytes_per_token": BYTES_PER_TOKEN,
            "kv_transfer_timing_mode": "full_prompt",
            "timing_model": {"type": "fixed", "prefill_ms": PREFILL_MS, "decode_ms": DECODE_MS},
        },
    }


def write_mooncake(reqs: list[dict], path: str) -> None:
    """Mooncake JSONL; hash_ids are required by the replay, so give every block a fresh id."""
    next_id = 1
    with open(path, "w") as fh:
        for r in reqs:
            nblocks = math.ceil(r["input_tokens"] / BLOCK_SIZE)
            fh.write(json.dumps({
                "timestamp": r["arrival_ms"],
                "input_length": r["input_tokens"],
                "output_length": r["output_tokens"],
                "hash_ids": list(range(next_id, next_id + nblocks)),
            }) + "\n")
            next_id += nblocks


def replay(reqs: list[dict], n_p: int, n_d: int, bandwidth_gbps: float, tmpdir: str,
           backend: str = "vllm") -> tuple[list, float]:
    from dynamo.replay import run_trace_replay

    path = os.path.join(tmpdir, f"trace_{n_p}p{n_d}d.jsonl")
    write_mooncake(reqs, path)
    report = run_trace_replay(
        path,
        prefill_engine_args=engine_args("prefill", bandwidth_gbps, backend),
        decode_engine_args=engine_args("decode", bandwidth_gbps, backend),
        num_prefill_workers=n_p,
        num_decode_workers=n_d,
        router_mode="round_robin",
        trace_block_size=BLOCK_SIZE,
        capture_per_request=True,
    )
    return report.per_request or [], float(report.summary["duration_ms"])


def match(reqs: list[dict], records: list[dict]) -> list[dict]:
    """The mocker's records as result rows, in the stream's order (``golden_io.mocker_records``)."""
    rows = []
    for rid, rec in mocker_records(reqs, records):
        if rec.get("readmission_count"):
            raise SystemExit(f"request {rid} was preempted; the goldens assume no KV pressure")
        row = {"id": rid}
        for ours, theirs in RESULT_FIELDS:
            v = rec.get(theirs)
            row[ours] = v if ours.endswith("_idx") else r6(v)
        rows.append(row)
    return rows


def record_stream(spec: dict, tmpdir: str, backend: str = "vllm") -> dict:
    from dynamo._core import _normalize_mocker_config

    reqs = make_requests(**spec["requests"])
    bw = spec["bandwidth_gbps"]
    requests = [{"id": r["id"], "arrival_ms": r["arrival_ms"], "input_tokens": r["input_tokens"],
                 "output_tokens": r["output_tokens"],
                 "kv_transfer_ms": r6(r["input_tokens"] * BYTES_PER_TOKEN / (bw * 1e9) * 1e3)}
                for r in reqs]
    runs = []
    for n_p, n_d in TOPOLOGIES:
        records, duration = replay(reqs, n_p, n_d, bw, tmpdir, backend)
        again, duration2 = replay(reqs, n_p, n_d, bw, tmpdir, backend)
        results = match(reqs, records)
        if match(reqs, again) != results or duration2 != duration:
            raise SystemExit(f"{spec['name']} {n_p}P{n_d}D: two replays differ (nondeterministic)")
        fields = list(results[0])
        runs.append({"topology": f"{n_p}P{n_d}D", "num_prefill_workers": n_p, "num_decode_workers": n_d,
                     "duration_ms": r6(duration), "fields": fields,
                     "results": [[row[f] for f in fields] for row in results]})
    return {
        "name": spec["name"],
        "description": spec["description"],
        "peer": {**_versions(), "api": "dynamo.replay.run_trace_replay", "router_mode": "round_robin",
                 "trace_format": "mooncake", "trace_block_size": BLOCK_SIZE},
        "config": {
            "timing": {"type": "fixed", "prefill_ms": PREFILL_MS, "decode_ms": DECODE_MS},
            "kv_transfer": {"bandwidth_gb_per_second": bw, "bytes_per_token": BYTES_PER_TOKEN,
                            "timing_mode": "full_prompt", "latency_ms": 0.0, "contention": "none"},
            "block_size": BLOCK_SIZE,
            "num_gpu_blocks": NUM_GPU_BLOCKS,
            "max_num_seqs": MAX_NUM_SEQS,
            "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
            "enable_prefix_caching": False,
            "enable_chunked_prefill": True,
            "prefill_engine_args": _normalize_mocker_config(engine_args("prefill", bw, backend)),
            "decode_engine_args": _normalize_mocker_config(engine_args("decode", bw, backend)),
        },
        "requests": requests,
        "runs": runs,
    }


def _versions() -> dict:
    out = package_versions("ai-dynamo", "ai-dynamo-runtime")
    return out


def dumps(golden: dict) -> str:
    """Compact JSON with one request / result per line."""
    d = compact
    lines = ["{"]
    for key in ("name", "description", "peer"):
        lines.append(f"{d(key)}:{d(golden[key])},")
    cfg = golden["config"]
    lines.append('"config":{')
    items = list(cfg.items())
    for i, (k, v) in enumerate(items):
        lines.append(f"{d(k)}:{d(v)}" + ("," if i < len(items) - 1 else ""))
    lines.append("},")
    lines.append('"requests":[')
    lines.append(",\n".join(d(r) for r in golden["requests"]))
    lines.append("],")
    lines.append('"runs":[')
    for i, run in enumerate(golden["runs"]):
        head = {k: v for k, v in run.items() if k != "results"}
        lines.append(d(head)[:-1] + ',"results":[')
        lines.append(",\n".join(d(r) for r in run["results"]))
        lines.append("]}" + ("," if i < len(golden["runs"]) - 1 else ""))
    lines.append("]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    backend = "vllm"
    if "--backend" in argv:  # (the shared command line has --check and --only; this recorder adds --backend)
        at = argv.index("--backend")
        backend = argv[at + 1]
        del argv[at:at + 2]
        if backend not in OUT_DIRS:
            raise SystemExit(f"--backend: one of {', '.join(OUT_DIRS)}, got {backend!r}")
    return record_streams(STREAMS, OUT_DIRS[backend], parse_args(__doc__, argv),
                          lambda spec, tmpdir: record_stream(spec, tmpdir, backend), dumps)


if __name__ == "__main__":
    sys.exit(main())
