#!/usr/bin/env python3
"""Record SGLang-scheduler goldens from NVIDIA Dynamo's mocker (offline replay, ``backend: sglang``).

Regenerate (from the repo root, /work/main; needs the peers venv of ../shared/oracles/peers.md §1):

    /work/venv-peers/bin/python tools/oracles/record_dynamo_sglang.py            # all streams
    /work/venv-peers/bin/python tools/oracles/record_dynamo_sglang.py --check    # compare, write nothing
    /work/venv-peers/bin/python tools/oracles/record_dynamo_sglang.py --only tight_kv grid_ties

It drives every request stream below through ``dynamo.replay.run_trace_replay`` (ai-dynamo 1.6.1,
whose ``_core`` statically links ``aisimulate-core`` 0.13.0; round-robin routing, virtual clock)
under several engine variants ("runs") and writes ``tests/golden/dynamo_sglang/<name>.json``.
Streams come from fixed seeds and round-robin replay is deterministic: every replay is run twice
and compared, and two runs of this script give byte-identical files. Reading the goldens needs no
Dynamo; this script only calls the installed package's public API (our own code, nothing copied).

Setup shared by every run (the issue-6 parity setting):
  * ``backend: sglang``, fixed timing: every prefill (EXTEND) pass costs 20 ms, every decode pass
    10 ms, whatever its batch or cached prefix (a pass never mixes prefill and decode);
  * ``block_size`` 1 (SGLang page size 1); ``num_gpu_blocks`` is therefore the KV capacity in
    tokens, per attention-DP rank; radix prefix caching on (SGLang cannot turn it off);
  * ``enable_chunked_prefill`` on; ``chunked_prefill_size`` 8192 and ``max_prefill_tokens`` 16384
    (SGLang defaults; the mocker divides ``chunked_prefill_size`` by ``dp_size`` and multiplies
    ``schedule_conservativeness`` by 0.3 when ``dp_size`` > 1, and ignores
    ``max_num_batched_tokens``), ``clip_max_new_tokens`` 4096, ``schedule_conservativeness`` 1.0,
    ``max_num_seqs`` 256, unless a run overrides them (``overrides`` in each run);
  * prompts are Mooncake rows: ``hash_ids`` name blocks of ``trace_block_size`` tokens (64 unless a
    stream says otherwise); the replay expands each id into that many synthetic token ids, the last
    block truncated to the prompt length, so two prompts share exactly the tokens of their common
    leading run of ids (a partial last block shares its leading tokens) and the page-1 radix tree
    then matches token by token. Output tokens are never shared between requests.

File layout (compact JSON, one record per line):
    {"name", "description", "peer": {package versions, api, router_mode, trace_format},
     "config": {timing, trace_block_size, block_size, shared engine settings},
     "requests": [{id, arrival_ms, input_tokens, output_tokens, hash_runs}, ...],
     "runs": [{"label", "num_workers", "dp_size", "overrides" (engine fields changed from the
               shared setting), "engine_args" (the mocker's normalized config, every field),
               "summary": {duration_ms, completed_requests, retracted_requests, readmissions,
                           committed_prefill_tokens, prefix_cache_reused_ratio,
                           first_admission_prefix_cache_reused_ratio},
               "fields": [...], "results": [[one row per request, in "fields" order], ...]}, ...]}
    (read a row with ``dict(zip(run["fields"], row))``).
``hash_runs`` is ``[[first_id, count], ...]``: the request's hash ids are
``range(first_id, first_id + count)`` for each run, concatenated
(``len == ceil(input_tokens / trace_block_size)``). Times are milliseconds from the first arrival
(which is 0), rounded to 1e-6 ms. Result fields:
    worker            logical worker index (round robin over workers, then over each worker's ranks)
    dp_rank           attention-DP rank inside that worker
    first_admit_ms    first time the request entered a prefill batch
    first_token_ms    end of the prefill pass that produced the first token
    last_token_ms     end of the pass that produced the last token
    ttft_ms, e2e_ms   first_token_ms / last_token_ms minus arrival_ms
    admissions        admissions into a prefill batch (1 + readmissions)
    readmissions      re-admissions after a decode retraction
    reused_input_tokens   the mocker's per-request figure: the largest radix hit over the
                          request's admissions (so the first admission's hit without retraction)
    admission_history [[at_ms, reused_input_tokens], ...] for every (re)admission: the radix-tree
                          hit at that admission (capped at sequence length - 1; at a readmission the
                          sequence includes the outputs generated before the retraction)
Requests are listed by arrival; requests that arrive together are queued in list order.
(arrival_ms, input_tokens, output_tokens) is unique per stream, which is how the mocker's records
(random uuids) are mapped back to requests.

Mocker semantics probed while writing this (details in the issue-6 notes): prefill-first passes;
a waiting request is admitted when extend + min(remaining output, clip) < available + evictable -
sum over running of min(remaining output, clip) * new_token_ratio; chunking when the extend is
larger than the pass's remaining chunk budget (one chunked request at a time, resumed first);
new_token_ratio starts at 0.7 * conservativeness, decays by (init - 0.14 * init) / 600 after every
decode pass down to 0.14 * init, is re-estimated after a retraction, and is NOT reset when the rank
goes idle; decode retraction takes the running request with the fewest output tokens (first in
running order on ties), keeps its whole sequence in the radix cache (evictable) and re-queues it at
the back; prefill_decode_interval N blocks prefill and chunk continuation for N rounds after a
round in which any rank of the DP group prefilled, idle blocked rounds taking no time; an arrival
at the instant a pass ends joins the pass that starts then.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_io import (  # noqa: E402
    REPO,
    compact,
    mocker_records,
    only_route,
    package_versions,
    parse_args,
    r6,
    record_streams,
    replay_twice,
)

OUT_DIR = REPO / "tests" / "golden" / "dynamo_sglang"

PREFILL_MS = 20.0
DECODE_MS = 10.0
BLOCK_SIZE = 1
TRACE_BLOCK_SIZE = 64
LOOSE_KV = 400_000  # tokens per rank: never binds for these streams
SHARED_ENGINE = {
    "max_num_seqs": 256,
    "enable_prefix_caching": True,
    "enable_chunked_prefill": True,
    "prefill_decode_interval": 0,
    "sglang": {"schedule_policy": "fifo", "max_prefill_tokens": 16384, "chunked_prefill_size": 8192,
               "clip_max_new_tokens": 4096, "schedule_conservativeness": 1.0},
}

RESULT_FIELDS = ("id", "worker", "dp_rank", "first_admit_ms", "first_token_ms", "last_token_ms",
                 "ttft_ms", "e2e_ms", "admissions", "readmissions", "reused_input_tokens",
                 "admission_history")


# ---------------------------------------------------------------------------------------------
# Request streams
# ---------------------------------------------------------------------------------------------

def make_requests(seed: int, n: int, prompt: tuple[int, int], output: tuple[int, int],
                  arrivals: str, span_ms: float = 1000.0, bursts: tuple[float, ...] = (0.0,),
                  grid_ms: float | None = None, osl_one_share: float = 0.0,
                  long_share: float = 0.0, long_prompt: tuple[int, int] = (0, 0),
                  groups: tuple[int, ...] = (), group_share: float = 0.0, min_prefix_frac: float = 1.0,
                  tbs: int = TRACE_BLOCK_SIZE) -> list[dict]:
    """``n`` requests; see STREAMS for what each knob is used for.

    arrivals: "poisson" (exponential gaps, mean span_ms / n), "spread" (uniform over [0, span_ms)),
    "bursts" (each request at one of ``bursts`` plus up to 3 ms), "paced" (every span_ms +- 5 ms).
    ``grid_ms`` snaps arrivals to a grid (some land exactly on pass ends). ``long_share`` of the
    prompts are drawn from ``long_prompt`` instead of ``prompt``. ``groups`` lists shared-prefix
    groups by their length in hash blocks; a request joins one with probability ``group_share`` and
    takes its first m blocks, m uniform in [ceil(min_prefix_frac * len), len], then ``prompt``
    tokens of its own. The first arrival is moved to 0 (the mocker rebases to it) and
    (arrival, prompt, output) is kept unique.
    """
    rng = random.Random(seed)
    reqs, seen = [], set()
    t = 0.0
    i = 0
    next_unique = 1
    while len(reqs) < n:
        if arrivals == "poisson":
            t += rng.expovariate(n / span_ms)
            a = t
        elif arrivals == "spread":
            a = rng.uniform(0.0, span_ms)
        elif arrivals == "bursts":
            a = rng.choice(bursts) + rng.uniform(0.0, 3.0)
        elif arrivals == "paced":
            a = i * span_ms + rng.uniform(-5.0, 5.0)
        else:
            raise ValueError(arrivals)
        a = round(a / grid_ms) * grid_ms if grid_ms else round(a, 3)
        i += 1
        prefix_runs, prefix_blocks = [], 0
        if groups and rng.random() < group_share:
            g = rng.randrange(len(groups))
            full = groups[g]
            m = rng.randint(max(1, math.ceil(min_prefix_frac * full)), full)
            prefix_runs, prefix_blocks = [[1_000_000 * (g + 1), m]], m
        lo, hi = long_prompt if rng.random() < long_share else prompt
        p = prefix_blocks * tbs + rng.randint(lo, hi)
        o = 1 if rng.random() < osl_one_share else rng.randint(*output)
        if (a, p, o) in seen:
            continue
        seen.add((a, p, o))
        own = math.ceil(p / tbs) - prefix_blocks
        runs = prefix_runs + ([[next_unique, own]] if own else [])
        next_unique += own
        reqs.append({"arrival_ms": a, "input_tokens": p, "output_tokens": o, "hash_runs": runs})
    reqs.sort(key=lambda r: r["arrival_ms"])  # stable: same-time arrivals keep generation order
    t0 = reqs[0]["arrival_ms"]
    for idx, r in enumerate(reqs):
        r["arrival_ms"] = round(r["arrival_ms"] - t0, 3)
        r["id"] = idx
    return reqs


def hash_ids(req: dict) -> list[int]:
    return [h for start, count in req["hash_runs"] for h in range(start, start + count)]


def run(label: str, num_workers: int = 1, dp_size: int = 1, **overrides) -> dict:
    return {"label": label, "num_workers": num_workers, "dp_size": dp_size, "overrides": overrides}


def sg(**kw) -> dict:
    return {"sglang": kw}


STREAMS = [
    dict(name="poisson_loose",
         description="40 requests, Poisson over 1.5 s, prompts 100-4000, outputs 1-80, no sharing, "
                     "loose KV: prefill-first passes stalling decodes, DP lockstep, interval",
         kv_tokens=LOOSE_KV,
         requests=dict(seed=601, n=40, prompt=(100, 4000), output=(1, 80), arrivals="poisson",
                       span_ms=1500),
         runs=[run("dp1"), run("dp2", dp_size=2),
               run("dp1_interval2", prefill_decode_interval=2),
               run("dp2_interval2", dp_size=2, prefill_decode_interval=2)]),
    dict(name="burst_budget",
         description="16 requests at t=0 (+0-3 ms), prompts 200-4000: several requests per prefill "
                     "pass, the request that overflows the chunk budget chunked into the rest",
         kv_tokens=LOOSE_KV,
         requests=dict(seed=602, n=16, prompt=(200, 4000), output=(1, 30), arrivals="bursts",
                       bursts=(0.0,)),
         runs=[run("dp1"), run("dp2", dp_size=2),
               run("dp1_max_prefill_4096", **sg(max_prefill_tokens=4096)),
               run("dp1_chunk_2048", **sg(chunked_prefill_size=2048))]),
    dict(name="long_prompts",
         description="14 requests over 600 ms, a third with 9000-40000-token prompts: chunked prefill "
                     "over several passes, short prompts packed behind the last chunk",
         kv_tokens=LOOSE_KV,
         requests=dict(seed=603, n=14, prompt=(50, 3000), output=(2, 40), arrivals="spread",
                       span_ms=600, long_share=0.35, long_prompt=(9000, 40000)),
         runs=[run("dp1"), run("dp2", dp_size=2),
               run("dp1_interval2", prefill_decode_interval=2)]),
    dict(name="shared_prefix_lpm",
         description="36 requests in four bursts, 80% share one of 4 prefixes (16-64 blocks of 64, "
                     "a random leading part of it): radix hits, FCFS vs longest-prefix-match order",
         kv_tokens=LOOSE_KV,
         requests=dict(seed=604, n=36, prompt=(50, 1500), output=(1, 40), arrivals="bursts",
                       bursts=(0.0, 150.0, 300.0, 450.0), groups=(16, 32, 48, 64), group_share=0.8,
                       min_prefix_frac=0.5),
         runs=[run("fcfs"), run("lpm", **sg(schedule_policy="lpm")),
               run("dp2_fcfs", dp_size=2), run("dp2_lpm", dp_size=2, **sg(schedule_policy="lpm"))]),
    dict(name="in_batch_dedup",
         description="30 requests in two bursts, 70% sharing 1-3-block prefixes that are not cached yet: "
                     "LPM defers waiting requests whose first 32 tokens repeat an earlier waiting one",
         kv_tokens=LOOSE_KV,
         requests=dict(seed=615, n=30, prompt=(600, 2500), output=(1, 20), arrivals="bursts",
                       bursts=(0.0, 400.0), groups=(1, 2, 3), group_share=0.7, min_prefix_frac=1.0),
         runs=[run("fcfs"), run("lpm", **sg(schedule_policy="lpm")),
               run("dp2_lpm", dp_size=2, **sg(schedule_policy="lpm"))]),
    dict(name="tight_kv",
         description="30 requests, Poisson over 2 s, prompts 100-800, outputs 100-500, 4000 KV tokens "
                     "per rank: admission held back by the output reservation, decode retractions",
         kv_tokens=4000,
         requests=dict(seed=606, n=30, prompt=(100, 800), output=(100, 500), arrivals="poisson",
                       span_ms=2000),
         runs=[run("dp1"), run("dp2", dp_size=2),
               run("dp1_clip64", **sg(clip_max_new_tokens=64)),
               run("dp2_clip64", dp_size=2, **sg(clip_max_new_tokens=64)),
               run("dp1_cons0.3", **sg(schedule_conservativeness=0.3)),
               run("dp1_interval2", prefill_decode_interval=2)]),
    dict(name="tight_kv_clip32",
         description="30 requests, prompts 100-800, outputs 100-500, 3000 KV tokens, "
                     "clip_max_new_tokens 32: admission over-commits, many retractions and "
                     "readmissions that reuse the retracted request's cached sequence",
         kv_tokens=3000,
         requests=dict(seed=3, n=30, prompt=(100, 800), output=(100, 500), arrivals="poisson",
                       span_ms=2000),
         runs=[run("dp1", **sg(clip_max_new_tokens=32)),
               run("dp2", dp_size=2, **sg(clip_max_new_tokens=32)),
               run("dp1_lpm", **sg(clip_max_new_tokens=32, schedule_policy="lpm"))]),
    dict(name="tight_kv_shared_prefix",
         description="32 requests, 70% share one of 3 prefixes (4-12 blocks), 5000 KV tokens: cached "
                     "prefixes evicted and re-hit under pressure, retractions",
         kv_tokens=5000,
         requests=dict(seed=607, n=32, prompt=(100, 800), output=(80, 400), arrivals="poisson",
                       span_ms=2500, groups=(4, 8, 12), group_share=0.7, min_prefix_frac=0.5),
         runs=[run("fcfs"), run("lpm", **sg(schedule_policy="lpm")),
               run("fcfs_clip64", **sg(clip_max_new_tokens=64)),
               run("lpm_clip64", **sg(clip_max_new_tokens=64, schedule_policy="lpm")),
               run("dp2_fcfs_clip64", dp_size=2, **sg(clip_max_new_tokens=64))]),
    dict(name="grid_ties",
         description="24 requests on a 10 ms grid over 300 ms: arrivals exactly on pass ends",
         kv_tokens=LOOSE_KV,
         requests=dict(seed=608, n=24, prompt=(100, 3000), output=(1, 30), arrivals="spread",
                       span_ms=300, grid_ms=10.0),
         runs=[run("dp1"), run("dp2", dp_size=2), run("dp1_interval2", prefill_decode_interval=2),
               run("dp2_interval2", dp_size=2, prefill_decode_interval=2)]),
    dict(name="interval_sweep",
         description="30 requests every ~25 ms, outputs 10-60: prefill_decode_interval 0/1/2/5, "
                     "blocked rounds decoding, idle blocked rounds free",
         kv_tokens=LOOSE_KV,
         requests=dict(seed=609, n=30, prompt=(100, 2000), output=(10, 60), arrivals="paced",
                       span_ms=25.0),
         runs=[run("interval0"), run("interval1", prefill_decode_interval=1),
               run("interval2", prefill_decode_interval=2),
               run("interval5", prefill_decode_interval=5),
               run("dp2_interval2", dp_size=2, prefill_decode_interval=2)]),
    dict(name="two_workers",
         description="32 requests, Poisson over 1 s, on 2 workers (round robin over workers, then "
                     "over each worker's DP ranks)",
         kv_tokens=LOOSE_KV,
         requests=dict(seed=610, n=32, prompt=(100, 5000), output=(1, 60), arrivals="poisson",
                       span_ms=1000),
         runs=[run("w2_dp1", num_workers=2), run("w2_dp2", num_workers=2, dp_size=2),
               run("w2_dp2_interval2", num_workers=2, dp_size=2, prefill_decode_interval=2)]),
    dict(name="osl_one_heavy",
         description="20 requests, half with a single output token (done at the prefill pass), "
                     "spread over 250 ms",
         kv_tokens=LOOSE_KV,
         requests=dict(seed=611, n=20, prompt=(100, 6000), output=(1, 12), arrivals="spread",
                       span_ms=250, osl_one_share=0.5),
         runs=[run("dp1"), run("dp2", dp_size=2), run("dp1_interval2", prefill_decode_interval=2)]),
    dict(name="idle_gaps_ratio",
         description="three bursts 20 s apart (each drains first), 5000 KV tokens: new_token_ratio "
                     "decays to its floor and is not reset while the rank idles",
         kv_tokens=5000,
         requests=dict(seed=612, n=24, prompt=(200, 1200), output=(100, 700), arrivals="bursts",
                       bursts=(0.0, 20000.0, 40000.0)),
         runs=[run("dp1"), run("dp1_cons0.5", **sg(schedule_conservativeness=0.5)),
               run("dp2", dp_size=2)]),
    dict(name="max_running",
         description="24 requests, Poisson over 600 ms: max_num_seqs 4 and 8 cap the running batch",
         kv_tokens=LOOSE_KV,
         requests=dict(seed=613, n=24, prompt=(100, 3000), output=(5, 50), arrivals="poisson",
                       span_ms=600),
         runs=[run("seqs4", max_num_seqs=4), run("seqs8", max_num_seqs=8),
               run("dp2_seqs4", dp_size=2, max_num_seqs=4)]),
    dict(name="trace_block_16",
         description="28 requests with hash blocks of 16 tokens, 80% share one of 3 prefixes "
                     "(8-40 blocks): finer sharing granularity, FCFS vs LPM",
         kv_tokens=LOOSE_KV, trace_block_size=16,
         requests=dict(seed=614, n=28, prompt=(500, 3000), output=(1, 30), arrivals="bursts",
                       bursts=(0.0, 60.0, 120.0, 180.0), groups=(8, 24, 40), group_share=0.8,
                       min_prefix_frac=0.3, tbs=16),
         runs=[run("fcfs"), run("lpm", **sg(schedule_policy="lpm"))]),
]


# ---------------------------------------------------------------------------------------------
# Mocker runs
# ---------------------------------------------------------------------------------------------

def engine_args(spec: dict, variant: dict) -> dict:
    eng = {
        "backend": "sglang",
        "block_size": BLOCK_SIZE,
        "num_gpu_blocks": spec["kv_tokens"],
        "worker_type": "aggregated",
        "timing_model": {"type": "fixed", "prefill_ms": PREFILL_MS, "decode_ms": DECODE_MS},
    }
    for key, value in SHARED_ENGINE.items():
        eng[key] = dict(value) if isinstance(value, dict) else value
    for key, value in variant["overrides"].items():
        if key == "sglang":
            eng["sglang"].update(value)
        else:
            eng[key] = value
    return {"dp_size": variant["dp_size"], "engine": eng}


def write_mooncake(reqs: list[dict], path: str) -> None:
    with open(path, "w") as fh:
        for r in reqs:
            fh.write(json.dumps({"timestamp": r["arrival_ms"], "input_length": r["input_tokens"],
                                 "output_length": r["output_tokens"], "hash_ids": hash_ids(r)}) + "\n")


def replay(reqs: list[dict], spec: dict, variant: dict, tmpdir: str):
    from dynamo.replay import run_trace_replay

    path = os.path.join(tmpdir, f"{spec['name']}_{variant['label']}.jsonl")
    write_mooncake(reqs, path)
    report = run_trace_replay(
        path,
        extra_engine_args=engine_args(spec, variant),
        num_workers=variant["num_workers"],
        router_mode="round_robin",
        trace_block_size=spec.get("trace_block_size", TRACE_BLOCK_SIZE),
        capture_per_request=True,
    )
    return report.per_request or [], report.summary


def match(reqs: list[dict], records: list[dict], dp_size: int) -> list[dict]:
    """The mocker's records as result rows, in the stream's order (``golden_io.mocker_records``)."""
    rows = []
    for rid, rec in mocker_records(reqs, records):
        worker, rank = only_route(rid, rec)
        if rec["decode_worker_idx"] != worker * dp_size + rank:
            raise SystemExit(f"request {rid}: unexpected scheduler index {rec['decode_worker_idx']}")
        history = [[r6(h["at_ms"]), h["reused_input_tokens"]] for h in rec["admission_history"]]
        if len(history) != rec["admission_count"] or history[0][0] != r6(rec["first_admit_ms"]):
            raise SystemExit(f"request {rid}: inconsistent admission history")
        rows.append({
            "id": rid, "worker": worker, "dp_rank": rank,
            "first_admit_ms": r6(rec["first_admit_ms"]),
            "first_token_ms": r6(rec["first_token_ms"]), "last_token_ms": r6(rec["last_token_ms"]),
            "ttft_ms": r6(rec["ttft_ms"]), "e2e_ms": r6(rec["e2e_latency_ms"]),
            "admissions": rec["admission_count"], "readmissions": rec.get("readmission_count", 0),
            "reused_input_tokens": rec["reused_input_tokens"], "admission_history": history,
        })
    return rows


SUMMARY_KEYS = ("duration_ms", "completed_requests", "committed_prefill_tokens",
                "prefix_cache_reused_ratio", "first_admission_prefix_cache_reused_ratio")


def record_stream(spec: dict, tmpdir: str) -> dict:
    from dynamo._core import _normalize_mocker_config

    reqs = make_requests(**spec["requests"])
    tbs = spec.get("trace_block_size", TRACE_BLOCK_SIZE)
    for r in reqs:
        if len(hash_ids(r)) != math.ceil(r["input_tokens"] / tbs):
            raise SystemExit(f"{spec['name']}: request {r['id']} has the wrong number of hash ids")
    runs = []
    for variant in spec["runs"]:
        results, summ = replay_twice(reqs, spec, variant, tmpdir, replay, match, SUMMARY_KEYS)
        summ["retracted_requests"] = sum(1 for r in results if r["readmissions"])
        summ["readmissions"] = sum(r["readmissions"] for r in results)
        runs.append({
            "label": variant["label"], "num_workers": variant["num_workers"],
            "dp_size": variant["dp_size"], "overrides": variant["overrides"],
            "engine_args": _normalize_mocker_config(engine_args(spec, variant)),
            "summary": summ, "fields": list(RESULT_FIELDS),
            "results": [[row[f] for f in RESULT_FIELDS] for row in results],
        })
    return {
        "name": spec["name"],
        "description": spec["description"],
        "peer": {**_versions(), "api": "dynamo.replay.run_trace_replay", "router_mode": "round_robin",
                 "trace_format": "mooncake"},
        "config": {
            "timing": {"type": "fixed", "prefill_ms": PREFILL_MS, "decode_ms": DECODE_MS},
            "trace_block_size": tbs,
            "block_size": BLOCK_SIZE,
            "kv_tokens_per_rank": spec["kv_tokens"],
            "shared_engine": SHARED_ENGINE,
        },
        "requests": [{k: r[k] for k in ("id", "arrival_ms", "input_tokens", "output_tokens", "hash_runs")}
                     for r in reqs],
        "runs": runs,
    }


def _versions() -> dict:
    out = package_versions("ai-dynamo", "ai-dynamo-runtime")
    out["aisimulate-core"] = "0.13.0 (statically linked into ai-dynamo-runtime)"
    return out


def dumps(golden: dict) -> str:
    """Compact JSON with one request / result per line."""
    d = compact
    lines = ["{"]
    for key in ("name", "description", "peer", "config"):
        lines.append(f"{d(key)}:{d(golden[key])},")
    lines.append('"requests":[')
    lines.append(",\n".join(d(r) for r in golden["requests"]))
    lines.append("],")
    lines.append('"runs":[')
    for i, run_ in enumerate(golden["runs"]):
        head = {k: v for k, v in run_.items() if k not in ("results", "engine_args")}
        lines.append(d(head)[:-1] + ",")
        lines.append(f'"engine_args":{d(run_["engine_args"])},')
        lines.append('"results":[')
        lines.append(",\n".join(d(r) for r in run_["results"]))
        lines.append("]}" + ("," if i < len(golden["runs"]) - 1 else ""))
    lines.append("]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    def readmissions(golden: dict) -> str:
        return "readmissions " + " ".join(f"{r['label']}:{r['summary']['readmissions']}" for r in golden["runs"])

    return record_streams(STREAMS, OUT_DIR, parse_args(__doc__, argv), record_stream, dumps, readmissions)


if __name__ == "__main__":
    sys.exit(main())
