#!/usr/bin/env python3
"""Record golden scheduler traces from SGLang 0.5.23's real scheduler (overlap off).

Regenerate (from the repo root, /work/main):

    bash ../shared/oracles/install_sglang_oracle_venv.sh <venv>     # once, ~2.5 GB; e.g. /tmp/venv-sglang
    python3 tools/oracles/record_sglang_goldens.py --python <venv>/bin/python [--only NAME…] [--check]

SGLang initialises torch.distributed once per process, so each stream runs in its own process of
``../shared/oracles/sglang_sched_oracle.py`` (override the folder with ``SGLANG_ORACLE_DIR``); this script
itself needs no SGLang. The streams are generated from fixed seeds and every prompt's token ids are
given (a shared prefix is the same ids, everything else distinct), so two runs give byte-identical files.
``tests/unit/test_sglang_real_golden.py`` replays each file through our ``SglangScheduler``
(``tests/sglang_oracle_driver.py``) and needs no SGLang.

A golden file is compact JSON, one record per line:
    {"name", "sglang_version",
     "config": {max_total_tokens, page_size, max_running_requests (asked), chunked_prefill_size,
                max_prefill_tokens, schedule_policy, schedule_conservativeness, disable_radix_cache,
                enable_mixed_chunk, context_length},
     "effective_max_running_requests" (SGLang caps the slots from the KV budget), "ignore_eos",
     "clock" ("arrival_step" or "arrival_s"), "forward_cost_s", "per_token_cost_s",
     "requests": [{id, arrival_step | arrival_s, prompt_tokens, output_tokens, prefix: [group, tokens]}],
     "steps": [{step, mode, scheduled {id: n}, prefix_len {id: n} (prefill passes), new, resumed, chunked,
                retracted, emitted {id: n}, finished [ids], free_tokens, evictable_tokens, new_token_ratio,
                t_start, t_end (timed streams)}, ...],
     "summary": {id: {first_token_step, finish_step, first_token_t, finish_t, retractions, emitted_tokens,
                      prefix_hit_tokens}}}
A request's ``prefix`` [g, n] says its first n prompt tokens are those of shared prefix g (the same ids in
every request naming g); the rest of its prompt is its own.

The ``mocker_*`` streams are the runs of Dynamo's mocker in ``tests/golden/dynamo_sglang`` that one SGLang
scheduler can replay (one worker, one rank, no prefill/decode interval), driven through SGLang's real
scheduler with the mocker's fixed timing (a prefill pass 20 ms, a decode pass 10 ms:
``sglang_mode_costs.py``) and the run's ``clip_max_new_tokens``: they say where the mocker departs from
SGLang. Their requests carry ``hash_ids`` (``trace_block_size`` prompt tokens each, the last block cut),
and their goldens ``prefill_cost_s``, ``decode_cost_s`` and ``clip_max_new_tokens``. Their goldens keep
only the passes that are not plain decodes (``sparse_steps``: prefill passes, and decodes that retract or
finish a request; thousands of plain decodes would make megabytes), each with its step index.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_io import compact, emit  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ORACLE_DIR = Path(os.environ.get("SGLANG_ORACLE_DIR", REPO.parent / "shared" / "oracles"))
OUT_DIR = REPO / "tests" / "golden" / "sglang"
MOCKER_DIR = REPO / "tests" / "golden" / "dynamo_sglang"

DEFAULTS = dict(max_total_tokens=100_000, page_size=1, max_running_requests=256, chunked_prefill_size=8192,
                max_prefill_tokens=16384, schedule_policy="fcfs", schedule_conservativeness=1.0,
                disable_radix_cache=False, enable_mixed_chunk=False, context_length=None)
"""The oracle's server arguments unless a stream says otherwise (SGLang's defaults but the KV budget)."""


def make_requests(seed: int, n: int, prompt: tuple[int, int], output: tuple[int, int], arrivals: str = "burst",
                  span: int = 50, groups: int = 0, shared: tuple[int, int] = (0, 0), timed: bool = False,
                  same: bool = False) -> list[dict]:
    """``n`` requests with uniform prompt and output lengths (``same``: all equal to the lower bounds).

    arrivals: "burst" (all at 0), "spread" (uniform over [0, span)), "poisson" (exponential gaps with mean
    span / n), "sparse" (``span`` apart: the engine goes idle in between); steps, or with ``timed``
    seconds of 10 ms passes (``span`` passes). With ``groups``, each request shares the prefix of one of
    ``groups`` groups, of a length uniform in ``shared`` (shorter than its prompt).
    """
    rng = random.Random(seed)
    reqs, t = [], 0.0
    for i in range(n):
        p = prompt[0] if same else rng.randint(*prompt)
        o = output[0] if same else rng.randint(*output)
        if arrivals == "burst":
            a = 0.0
        elif arrivals == "spread":
            a = float(rng.randrange(span))
        elif arrivals == "poisson":
            t += rng.expovariate(n / span)
            a = float(int(t)) if not timed else t
        elif arrivals == "sparse":
            a = float(i * span)
        else:
            raise ValueError(arrivals)
        req = {"id": f"r{i}"}
        if timed:
            req["arrival_s"] = round(a * 0.01, 6)
        else:
            req["arrival_step"] = int(a)
        req["prompt_tokens"], req["output_tokens"] = p, o
        if groups:
            g = rng.randrange(groups)
            req["prefix"] = [g, min(rng.randint(*shared), p - 1)]
        reqs.append(req)
    return reqs


def token_ids(req: dict, index: int) -> list[int]:
    """The prompt's token ids: a shared prefix's ids (group g: 50,000 + 1,000 g + k, up to 1,000 tokens),
    then ids of this request alone (1,000,000 + 10,000 × index + k), none of them SGLang's EOS (2)."""
    g, shared = req.get("prefix", (0, 0))
    ids = [50_000 + 1_000 * g + k for k in range(shared)]
    ids += [1_000_000 + 10_000 * index + k for k in range(req["prompt_tokens"] - shared)]
    return ids


def streams() -> list[tuple[str, dict, list[dict], dict]]:
    """(name, server arguments, requests, run options) of every golden stream."""
    s = []

    def add(name, reqs, ignore_eos=False, forward_cost_s=0.01, per_token_cost_s=0.0, **cfg):
        s.append((name, {**DEFAULTS, **cfg}, reqs, dict(ignore_eos=ignore_eos, forward_cost_s=forward_cost_s,
                                                        per_token_cost_s=per_token_cost_s)))

    # KV loose: admission is bounded by the chunk, the prefill budget and the running slots only.
    add("loose_burst", make_requests(1, 12, (20, 200), (5, 40)))
    add("loose_spread_chunk64", make_requests(2, 16, (50, 300), (3, 30), "spread", 60), chunked_prefill_size=64)
    add("loose_spread_chunk128_prefill256", make_requests(3, 16, (50, 400), (3, 30), "spread", 40),
        chunked_prefill_size=128, max_prefill_tokens=256)
    add("loose_sparse_idle", make_requests(4, 8, (10, 120), (2, 20), "sparse", 30))
    add("loose_running4", make_requests(5, 12, (20, 100), (5, 30)), max_running_requests=4)
    add("loose_running8_chunk32", make_requests(6, 14, (10, 90), (2, 25), "spread", 30),
        max_running_requests=8, chunked_prefill_size=32)
    add("loose_poisson_timed", make_requests(7, 24, (20, 300), (2, 40), "poisson", 200, timed=True))
    add("loose_per_token_timed", make_requests(8, 16, (20, 300), (2, 30), "poisson", 100, timed=True),
        per_token_cost_s=0.0001)
    add("loose_ignore_eos", make_requests(9, 12, (20, 200), (5, 40), "spread", 20), ignore_eos=True)
    add("loose_one_token_outputs", make_requests(10, 10, (10, 80), (1, 2), "spread", 10))
    # Shared prefixes: the radix cache's hits, LPM's order, and the cache turned off.
    add("fcfs_shared_prefix", make_requests(11, 16, (60, 200), (2, 20), "spread", 30, groups=3, shared=(20, 60)))
    add("lpm_shared_prefix", make_requests(12, 20, (60, 200), (2, 20), "burst", groups=4, shared=(16, 80)),
        schedule_policy="lpm", chunked_prefill_size=256)
    add("lpm_shared_prefix_spread", make_requests(13, 24, (40, 160), (2, 20), "spread", 40, groups=3,
                                                  shared=(10, 40)), schedule_policy="lpm", chunked_prefill_size=128)
    add("lpm_over_threshold", make_requests(14, 140, (8, 40), (1, 6), "burst", groups=5, shared=(4, 7)),
        schedule_policy="lpm", max_prefill_tokens=512, chunked_prefill_size=512)
    add("radix_off_shared_prefix", make_requests(15, 16, (60, 200), (2, 20), "spread", 30, groups=3,
                                                 shared=(20, 60)), disable_radix_cache=True)
    # KV tight: admission checks against the reservations, retraction, the new_token_ratio.
    add("tight_identical6", make_requests(16, 6, (8, 8), (40, 40), same=True), max_total_tokens=128)
    add("tight_burst_256", make_requests(17, 10, (10, 60), (20, 80)), max_total_tokens=256)
    add("tight_spread_512", make_requests(18, 16, (20, 120), (20, 120), "spread", 40), max_total_tokens=512)
    add("tight_chunk16_256", make_requests(19, 8, (20, 80), (10, 60), "spread", 20), max_total_tokens=256,
        chunked_prefill_size=16)
    add("tight_running4_512", make_requests(20, 12, (20, 100), (20, 100), "spread", 20), max_total_tokens=512,
        max_running_requests=4)
    add("tight_conservative0.5", make_requests(21, 12, (10, 60), (20, 80), "spread", 10), max_total_tokens=384,
        schedule_conservativeness=0.5)
    add("tight_conservative2", make_requests(22, 12, (10, 60), (20, 80), "spread", 10), max_total_tokens=384,
        schedule_conservativeness=2.0)
    add("tight_ignore_eos", make_requests(23, 12, (10, 60), (20, 80), "spread", 10), ignore_eos=True,
        max_total_tokens=384)
    add("tight_ignore_eos_chunk32", make_requests(24, 10, (30, 100), (10, 60), "spread", 20), ignore_eos=True,
        max_total_tokens=320, chunked_prefill_size=32)
    add("tight_radix_off", make_requests(25, 12, (10, 60), (20, 80), "spread", 10), max_total_tokens=384,
        disable_radix_cache=True)
    add("tight_radix_off_ignore_eos", make_requests(26, 12, (10, 60), (20, 80), "spread", 10), ignore_eos=True,
        max_total_tokens=384, disable_radix_cache=True)
    add("tight_lpm_shared_prefix", make_requests(27, 16, (30, 90), (10, 50), "spread", 20, groups=3, shared=(10, 25)),
        max_total_tokens=400, schedule_policy="lpm")
    add("tight_poisson_timed", make_requests(28, 20, (20, 120), (10, 100), "poisson", 150, timed=True),
        max_total_tokens=600)
    add("tight_long_outputs", make_requests(29, 6, (10, 40), (300, 700), "spread", 50), max_total_tokens=1200)
    add("tight_slot_cap", make_requests(30, 80, (4, 12), (2, 10), "spread", 20), max_total_tokens=128)
    add("tight_prefill_tokens", make_requests(31, 12, (30, 120), (5, 40), "spread", 10), max_total_tokens=600,
        max_prefill_tokens=128)
    add("tight_retraction_chain", make_requests(32, 20, (5, 20), (30, 120), "burst"), max_total_tokens=400)
    add("context_clip", make_requests(33, 8, (60, 120), (50, 200), "spread", 10), context_length=160)
    # Retraction: a low conservativeness under-reserves the outputs of running requests.
    add("retract_burst_cons0.3", make_requests(36, 12, (5, 20), (40, 120)), max_total_tokens=300,
        schedule_conservativeness=0.3)
    add("retract_spread_chunk16_cons0.3", make_requests(37, 16, (10, 60), (30, 100), "spread", 30),
        max_total_tokens=400, chunked_prefill_size=16, schedule_conservativeness=0.3)
    add("retract_identical8_cons0.3", make_requests(38, 8, (8, 8), (60, 60), same=True), max_total_tokens=200,
        schedule_conservativeness=0.3)
    add("retract_lpm_shared_cons0.3", make_requests(39, 16, (20, 60), (30, 90), "spread", 20, groups=3,
                                                    shared=(8, 18)), max_total_tokens=400, schedule_policy="lpm",
        schedule_conservativeness=0.3)
    add("retract_poisson_timed_cons0.5", make_requests(40, 24, (10, 80), (20, 120), "poisson", 120, timed=True),
        max_total_tokens=500, schedule_conservativeness=0.5)
    add("retract_radix_off_cons0.3", make_requests(41, 12, (10, 40), (40, 100), "spread", 10), max_total_tokens=300,
        schedule_conservativeness=0.3, disable_radix_cache=True)
    # Pages of 16 and 64 tokens.
    add("page16_loose", make_requests(42, 12, (20, 200), (5, 40), "spread", 20), page_size=16)
    add("page16_tight", make_requests(43, 10, (10, 60), (20, 80), "spread", 10), page_size=16,
        max_total_tokens=512)
    add("page64_loose", make_requests(44, 12, (20, 200), (5, 40), "spread", 20), page_size=64,
        max_total_tokens=102_400)
    add("page64_tight", make_requests(45, 10, (10, 60), (20, 80), "spread", 10), page_size=64,
        max_total_tokens=1024)
    # Pages with the rest: chunks cut at a page, budgets charged whole pages, shared prefixes that end
    # mid-page, eviction and retraction in pages, the radix cache off, ignore_eos, mixed chunks.
    add("page16_chunk40_spread", make_requests(46, 14, (50, 300), (3, 30), "spread", 40), page_size=16,
        chunked_prefill_size=40)
    add("page16_prefill_budget", make_requests(47, 14, (20, 150), (3, 30), "spread", 20), page_size=16,
        chunked_prefill_size=64, max_prefill_tokens=100)
    add("page16_lpm_shared_prefix", make_requests(48, 20, (40, 200), (2, 20), "spread", 30, groups=3,
                                                  shared=(10, 60)), page_size=16, schedule_policy="lpm",
        chunked_prefill_size=128)
    add("page16_fcfs_shared_tight", make_requests(49, 16, (30, 120), (10, 50), "spread", 30, groups=3,
                                                  shared=(16, 48)), page_size=16, max_total_tokens=640)
    add("page16_retract_cons0.3", make_requests(50, 12, (5, 40), (40, 120)), page_size=16, max_total_tokens=480,
        schedule_conservativeness=0.3)
    add("page16_radix_off_tight", make_requests(51, 12, (10, 60), (20, 80), "spread", 10), page_size=16,
        max_total_tokens=512, disable_radix_cache=True)
    add("page16_radix_off_ignore_eos", make_requests(52, 12, (10, 60), (20, 80), "spread", 10), page_size=16,
        ignore_eos=True, max_total_tokens=512, disable_radix_cache=True)
    add("page16_ignore_eos_tight", make_requests(53, 12, (10, 60), (20, 80), "spread", 10), page_size=16,
        ignore_eos=True, max_total_tokens=512)
    add("page16_poisson_timed", make_requests(54, 20, (20, 120), (10, 100), "poisson", 150, timed=True),
        page_size=16, max_total_tokens=800)
    add("page16_mixed_chunk_tight", make_requests(55, 12, (20, 80), (20, 80), "spread", 20), page_size=16,
        enable_mixed_chunk=True, max_total_tokens=512, chunked_prefill_size=32)
    add("page16_context_clip", make_requests(56, 8, (60, 120), (50, 200), "spread", 10), page_size=16,
        context_length=160)
    add("page64_retract_cons0.3", make_requests(57, 12, (5, 40), (40, 120)), page_size=64, max_total_tokens=1280,
        schedule_conservativeness=0.3)
    add("page64_lpm_shared_chunk128", make_requests(58, 20, (60, 300), (2, 20), "spread", 30, groups=3,
                                                    shared=(40, 150)), page_size=64, max_total_tokens=102_400,
        schedule_policy="lpm", chunked_prefill_size=128)
    add("page8_tight_spread", make_requests(59, 16, (20, 120), (20, 120), "spread", 40), page_size=8,
        max_total_tokens=512)
    # Found by a review (helper streams): a split gives the suffix a fresh LRU time; the ignore_eos path with
    # the radix cache off cuts at the raw budget, not at a page; a mixed batch puts the new requests first.
    add("split_lru_chunk40_shared", make_requests(204, 14, (30, 150), (10, 50), "spread", 30, groups=2,
                                                  shared=(20, 60)), chunked_prefill_size=40, max_total_tokens=800)
    add("page16_split_lru_chunk40_shared", make_requests(204, 14, (30, 150), (10, 50), "spread", 30, groups=2,
                                                         shared=(20, 60)), page_size=16, chunked_prefill_size=40,
        max_total_tokens=800)
    add("page16_radix_off_ignore_eos_chunk24", make_requests(111, 10, (30, 100), (10, 60), "spread", 20),
        page_size=16, ignore_eos=True, disable_radix_cache=True, chunked_prefill_size=24, max_total_tokens=400)
    add("page32_radix_off_ignore_eos_chunk40_burst", make_requests(203, 10, (20, 120), (10, 60)), page_size=32,
        ignore_eos=True, disable_radix_cache=True, chunked_prefill_size=40, max_total_tokens=1024)
    add("mixed_chunk40_shared", make_requests(204, 14, (30, 150), (10, 50), "spread", 30, groups=2,
                                              shared=(20, 60)), enable_mixed_chunk=True, chunked_prefill_size=40,
        max_total_tokens=800)
    add("page16_mixed_chunk40_shared", make_requests(204, 14, (30, 150), (10, 50), "spread", 30, groups=2,
                                                     shared=(20, 60)), page_size=16, enable_mixed_chunk=True,
        chunked_prefill_size=40, max_total_tokens=800)
    add("mixed_chunk64_shared_b", make_requests(301, 16, (30, 150), (10, 50), "spread", 30, groups=3,
                                                shared=(20, 60)), enable_mixed_chunk=True, chunked_prefill_size=64,
        max_total_tokens=700)
    add("page16_chunk24_retract_shared", make_requests(110, 16, (20, 100), (30, 100), "spread", 20, groups=3,
                                                       shared=(10, 40)), page_size=16, chunked_prefill_size=24,
        max_total_tokens=480, schedule_conservativeness=0.3)
    add("page64_shared_tight_retract", make_requests(112, 12, (40, 200), (40, 150), "spread", 10, groups=2,
                                                     shared=(50, 130)), page_size=64, max_total_tokens=1536,
        schedule_conservativeness=0.3)
    add("page8_lpm_identical_retract", make_requests(205, 10, (20, 20), (50, 50), same=True, groups=1,
                                                     shared=(19, 19)), page_size=8, schedule_policy="lpm",
        max_total_tokens=256, schedule_conservativeness=0.3)
    # SGLang's mixed chunk: a prefill chunk and the running decodes in one pass.
    add("mixed_chunk_loose", make_requests(34, 12, (40, 300), (5, 40), "spread", 30), enable_mixed_chunk=True,
        chunked_prefill_size=64)
    add("mixed_chunk_tight", make_requests(35, 12, (20, 80), (20, 80), "spread", 20), enable_mixed_chunk=True,
        max_total_tokens=384, chunked_prefill_size=32)
    return s


def mocker_streams() -> list[tuple[str, dict, list[dict], dict]]:
    """(name, server arguments, requests, run options) of the mocker runs one SGLang scheduler replays."""
    s = []
    for path in sorted(MOCKER_DIR.glob("*.json")):
        golden = json.loads(path.read_text())
        block = golden["config"]["trace_block_size"]
        reqs = [{"id": f"r{r['id']}", "arrival_s": round(r["arrival_ms"] / 1000, 6), "prompt_tokens": r["input_tokens"],
                 "output_tokens": r["output_tokens"],
                 "hash_ids": [h for start, n in r["hash_runs"] for h in range(start, start + n)]}
                for r in golden["requests"]]
        for run in golden["runs"]:
            eng = run["engine_args"]["engine"]
            if run["num_workers"] != 1 or run["dp_size"] != 1 or eng.get("prefill_decode_interval"):
                continue
            sg = eng["sglang"]
            cfg = {**DEFAULTS, "max_total_tokens": eng["num_gpu_blocks"], "max_running_requests": eng["max_num_seqs"],
                   "chunked_prefill_size": sg["chunked_prefill_size"], "max_prefill_tokens": sg["max_prefill_tokens"],
                   "schedule_policy": "fcfs" if sg["schedule_policy"] in (None, "fifo") else sg["schedule_policy"],
                   "schedule_conservativeness": sg["schedule_conservativeness"]}
            s.append((f"mocker_{path.stem}_{run['label']}", cfg, reqs,
                      dict(ignore_eos=False, prefill_cost_s=0.02, decode_cost_s=0.01, trace_block_size=block,
                           clip_max_new_tokens=sg["clip_max_new_tokens"])))
    return s


def trace_streams() -> list[tuple[str, dict, list[dict], dict]]:
    """Streams of Mooncake-style requests (hash ids) at their own times, a prefill pass costing
    ``prefill_cost_s`` and a decode pass ``decode_cost_s`` (``sglang_mode_costs.py``)."""
    def request(i, t_ms, prompt, output, hashes):
        return {"id": f"r{i}", "arrival_s": t_ms / 1000, "prompt_tokens": prompt, "output_tokens": output,
                "hash_ids": hashes}
    # An insertion that ends inside one of SGLang's nodes splits it (the part after it gets a fresh access
    # time), which decides what a later eviction keeps (found by a review, 2026-12-06).
    split_at_insert = [request(0, 0, 48, 2, [1, 2, 3]), request(1, 100, 32, 30, [1, 2]),
                       request(2, 150, 32, 2, [10, 11]), request(3, 500, 60, 2, [20, 21, 22, 23]),
                       request(4, 700, 32, 2, [10, 11]), request(5, 800, 48, 2, [1, 2, 3])]
    opts = dict(ignore_eos=False, prefill_cost_s=0.005, decode_cost_s=0.01, trace_block_size=16,
                clip_max_new_tokens=4096)
    return [("trace_split_at_insert_end", {**DEFAULTS, "max_total_tokens": 155, "context_length": 128},
             split_at_insert, opts)]


def oracle_requests(reqs: list[dict], trace_block_size: int | None = None) -> list[dict]:
    out = []
    for i, r in enumerate(reqs):
        o = {k: v for k, v in r.items() if k not in ("prefix", "hash_ids")}
        o["prompt_token_ids"] = (token_ids(r, i) if "hash_ids" not in r
                                 else hashed_token_ids(r["hash_ids"], r["prompt_tokens"], trace_block_size))
        out.append(o)
    return out


def hashed_token_ids(hash_ids: list[int], num_tokens: int, block: int) -> list[int]:
    """A Mooncake prompt's token ids: hash id h stands for ``block`` tokens, 10,000,000 + block × h + k
    (the last block cut at the prompt's end), so prompts share exactly their common leading hash ids."""
    ids = [10_000_000 + block * h + k for h in hash_ids for k in range(block)]
    return ids[:num_tokens]


def run_oracle(name: str, cmd: list[str], inputs: dict[str, object], env: dict | None = None) -> list[dict]:
    """Run an oracle script in its own process on JSON ``inputs`` (written to ``<key>.json`` in a temporary
    folder; an argument ``{key}`` of ``cmd`` is that file's path, ``{out}`` the trace's; any other is passed as it
    is); the records it writes."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = {key: Path(tmp, f"{key}.json") for key in inputs}
        for key, value in inputs.items():
            paths[key].write_text(json.dumps(value))
        out_path = Path(tmp, "trace.jsonl")
        named = {f"{{{key}}}": str(path) for key, path in {**paths, "out": out_path}.items()}
        done = subprocess.run([named.get(arg, arg) for arg in cmd], capture_output=True, text=True, env=env)
        if done.returncode != 0 or not out_path.exists():
            raise RuntimeError(f"{name}: the oracle failed:\n{done.stderr[-3000:]}")
        return [json.loads(line) for line in out_path.read_text().splitlines()]


def record_mode_costs(python: str, name: str, cfg: dict, reqs: list[dict], opts: dict) -> dict:
    """One mocker stream through ``sglang_mode_costs.py`` in its own process; the golden's records."""
    cmd = [python, str(Path(__file__).with_name("sglang_mode_costs.py")), "--requests", "{requests}",
           "--config", "{config}", "--prefill-cost-s", repr(opts["prefill_cost_s"]),
           "--decode-cost-s", repr(opts["decode_cost_s"]), "--clip-max-new-tokens",
           str(opts["clip_max_new_tokens"]), "--out", "{out}"]
    lines = run_oracle(name, cmd, {"requests": oracle_requests(reqs, opts["trace_block_size"]), "config": cfg},
                       env={**os.environ, "SGLANG_ORACLE_DIR": str(ORACLE_DIR)})
    return golden_of(name, lines, cfg, reqs, {**opts, "forward_cost_s": None, "per_token_cost_s": None,
                                              "sparse_steps": True})


def record(python: str, name: str, cfg: dict, reqs: list[dict], opts: dict) -> dict:
    """One stream through the oracle in its own process; the golden's records."""
    cmd = [python, str(ORACLE_DIR / "sglang_sched_oracle.py"), "--requests", "{requests}", "--out", "{out}",
           "--forward-cost-s", repr(opts["forward_cost_s"]), "--per-token-cost-s", repr(opts["per_token_cost_s"])]
    for key, value in cfg.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            cmd += [flag] if value else []
        elif value is not None:
            cmd += [flag, str(value)]
    if opts["ignore_eos"]:
        cmd.append("--ignore-eos")
    return golden_of(name, run_oracle(name, cmd, {"requests": oracle_requests(reqs)}), cfg, reqs, opts)


def golden_of(name: str, lines: list[dict], cfg: dict, reqs: list[dict], opts: dict) -> dict:
    """The golden of one stream from the oracle's records."""
    summary = lines[-1]["summary"]
    keep = ("step", "mode", "scheduled", "prefix_len", "new", "resumed", "chunked", "retracted", "emitted",
            "finished", "free_tokens", "evictable_tokens", "new_token_ratio", "t_start", "t_end")
    steps = []
    for rec in lines[:-1]:
        rec["finished"] = sorted(rec["finished"], key=lambda rid: int(rid[1:]))
        if not opts.get("sparse_steps") or rec["mode"] != "decode" or rec["retracted"] or rec["finished"]:
            steps.append({k: rec[k] for k in keep if k in rec})
    per_request = {rid: {k: st[k] for k in ("first_token_step", "finish_step", "first_token_t", "finish_t",
                                            "retractions", "emitted_tokens", "prefix_hit_tokens")}
                   for rid, st in summary["requests"].items()}
    for r in reqs:
        st = per_request[r["id"]]
        assert st["finish_step"] is not None, (name, r, st)
    golden = {"name": name, "sglang_version": summary["sglang_version"], "config": cfg,
              "effective_max_running_requests": summary["effective_max_running_requests"],
              "ignore_eos": opts["ignore_eos"], "clock": summary["clock"],
              "forward_cost_s": opts["forward_cost_s"], "per_token_cost_s": opts["per_token_cost_s"]}
    for key in ("prefill_cost_s", "decode_cost_s", "clip_max_new_tokens", "trace_block_size", "sparse_steps"):
        if key in opts:
            golden[key] = opts[key]
    return {**golden, "requests": reqs, "steps": steps, "summary": per_request}


def dump(golden: dict) -> str:
    """Compact JSON, a key a line, a request or a pass a line (the files diff well)."""
    lines = ["{"]
    for key, value in golden.items():
        if key in ("requests", "steps"):
            lines.append(f'"{key}":[')
            lines.append(",\n".join(compact(v) for v in value))
            lines.append("],")
        elif key == "summary":
            lines.append('"summary":{')
            lines.append(",\n".join(f"{compact(rid)}:{compact(v)}" for rid, v in value.items()))
            lines.append("}")
        else:
            lines.append(f"{compact(key)}:{compact(value)},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="the oracle venv's python (install_sglang_oracle_venv.sh)")
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    ap.add_argument("--only", nargs="*", default=None, help="stream names to record (default: all)")
    args = ap.parse_args()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    stale = False
    for name, cfg, reqs, opts in streams() + mocker_streams() + trace_streams():
        if args.only and name not in args.only:
            continue
        golden = (record_mode_costs if "prefill_cost_s" in opts else record)(args.python, name, cfg, reqs, opts)
        stale |= emit(OUT_DIR / f"{name}.json", dump(golden), args.check,
                      f"{len(golden['steps'])} passes, {sum(len(s['retracted']) for s in golden['steps'])} "
                      f"retractions")
    sys.exit(1 if stale else 0)


if __name__ == "__main__":
    main()
