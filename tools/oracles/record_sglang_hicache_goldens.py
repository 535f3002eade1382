#!/usr/bin/env python3
"""Record golden scheduler traces from SGLang 0.5.23's real scheduler with HiCache (hierarchical KV cache).

Regenerate (from the repo root, /work/main):

    bash ../shared/oracles/install_sglang_oracle_venv.sh <venv>     # once; e.g. /tmp/venv-sglang
    python3 tools/oracles/record_sglang_hicache_goldens.py --python <venv>/bin/python [--only NAME…] [--check]

Each stream runs in its own process of ``sglang_hicache_oracle.py`` (this folder), which runs the shared
scheduler oracle (``../shared/oracles/sglang_sched_oracle.py``; ``SGLANG_ORACLE_DIR`` overrides the folder)
with ``--enable-hierarchical-cache`` on CPU; that file says what is real, what is faked (host pinning and the
D<->H copies, which complete at once: an infinitely fast host link) and where each field below is read.
``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python`` in the environment picks SGLang's Python tree core
instead of its default Rust one (``tree_core`` in the file says which ran). Streams come from fixed seeds
and ``record_sglang_goldens.make_requests``; prompts have explicit token ids (a shared prefix is the same
ids in every request of its group), so two runs give byte-identical files.

A golden file has the format of ``tests/golden/sglang`` (``record_sglang_goldens.py``: compact JSON, a
request or a pass a line) with these additions:
    "config": the plain goldens' keys + enable_hierarchical_cache (true), hicache_ratio, hicache_write_policy
              (the server arguments asked), host_pool_tokens (``mem_pool_host.size``: SGLang's
              int(device tokens x ratio) // page_size + 1 pages, in tokens), device_pool_tokens
              (``scheduler.max_total_num_tokens``), tree_core, io_backend, mem_layout (SGLang's defaults),
              load_back_threshold (``tree_cache.load_back_threshold``), write_through_threshold.
    "steps" (every pass that ran a batch; read at the end of the pass, after process_batch_result, and
             counting everything since the previous recorded pass):
        device_prefix {id: n} (prefill/mixed passes, requests admitted this pass by PrefillAdder.add_one_req):
            ``req.prefix_len`` on entry to add_one_req = the device part of ``match_kv_cache``'s match;
        host_match {id: n}: ``req.host_hit_length`` on entry = the host-only part of the match (tokens
            after the device prefix, up to the max prefix);
        host_hit {id: n}: ``req.host_loaded_length`` on exit = tokens the load-back committed (0 when the
            match had no host part, when it was under ``load_back_threshold`` (10) and so recomputed, or when
            no device room could be made); prefix_len[id] = device_prefix + host_hit for such a request;
        host_used_tokens: host pool tokens in use (``mem_pool_host.size - available_size()``);
        protected_tokens: ``tree_cache.protected_size()`` (tree tokens locked: running requests' paths and
            write-through paths until their ack is reaped at the next get_next_batch_to_run);
        backed_up_tokens: tokens given host slots by ``cache_controller.write`` (write-through inserts after a
            prefill/chunk/finish; write-back at device eviction);
        loaded_tokens: tokens given device slots by ``cache_controller.load`` (H->D load-backs);
        device_evicted_tokens: device tokens freed by tree eviction (``_evict``'s count: demoted or deleted);
        dropped_tokens: of those, freed with no host copy (deleted; ``unbacked_tokens`` of the tree core's
            eviction steps, plus write-back host-pressure drops); demoted = device_evicted - dropped;
        host_evicted_tokens: host tokens freed by ``tree_cache.evict_host`` (host-leaf eviction).
    "summary" per request: the plain fields + cached_tokens (``req.cached_tokens``), cached_tokens_details
        ({device, host} from ``output_streamer.get_cached_tokens_details(req)``, null when nothing was cached),
        host_hit_tokens (sum of its host_hit), admissions (times add_one_req admitted it: 1 + resumptions).
What the recorded runs show (write-through unless said): a prefill pass backs up the inserted prompt part
not yet on the host in that pass (the first output token is not in the KV yet); a chunk of a chunked prefill
is inserted when the scheduler stashes the chunked request at the start of the *next* get_next_batch_to_run,
so its backup shows in the next pass; a finishing decode backs up its output tokens but the last; the path
stays protected until the next pass's check_hicache_events. Selective backs a node up at the second insert
that walks through it (the group's second request), write-back only at device eviction (same schedule as
write-through here). A host match under 10 tokens is not loaded (host_hit 0) and is recomputed: it is in
neither prefix_len nor cached_tokens. cached_tokens is set once (first extend): a retracted request's
host hit at resumption is not in it. The host pool's padding page is usable (host_used reaches
host_pool_tokens). SGLang's Python tree core gave byte-identical goldens for every stream.
Streams are built in waves: each wave a few requests spread over ``span`` steps, waves ``gap`` steps
apart, a wave drawing its shared prefixes from its own groups, so other waves' traffic evicts a group's
prefix from the device before the group returns and (mostly) loads it back from the host.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_io import emit  # noqa: E402
from record_sglang_goldens import DEFAULTS, ORACLE_DIR, dump, golden_of, make_requests, oracle_requests, run_oracle  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "sglang_hicache"
ORACLE = Path(__file__).with_name("sglang_hicache_oracle.py")
HICACHE = dict(enable_hierarchical_cache=True, hicache_ratio=2.0, hicache_write_policy="write_through")

STEP_KEYS = ("device_prefix", "host_match", "host_hit", "host_used_tokens", "protected_tokens",
             "backed_up_tokens", "loaded_tokens", "device_evicted_tokens", "dropped_tokens", "host_evicted_tokens")
SUMMARY_KEYS = ("cached_tokens", "cached_tokens_details", "host_hit_tokens", "admissions")


def waves(seed: int, plan: list[list[tuple]], gap: int, timed: bool = False) -> list[dict]:
    """Requests of waves ``gap`` steps (or, timed, ``gap`` 10 ms passes) apart. ``plan[w]`` lists wave w's
    parts (n, prompt, output, span, first_group, groups, shared): n requests of ``make_requests`` spread over
    ``span``, each sharing the prefix of one of groups first_group … first_group + groups - 1."""
    reqs = []
    for w, parts in enumerate(plan):
        for p, (n, prompt, output, span, first, groups, shared) in enumerate(parts):
            for r in make_requests(seed * 1000 + 10 * w + p, n, prompt, output, "spread", span, groups=groups,
                                   shared=shared, timed=timed):
                r["id"] = f"r{len(reqs)}"
                if timed:
                    r["arrival_s"] = round(r["arrival_s"] + w * gap * 0.01, 6)
                else:
                    r["arrival_step"] += w * gap
                r["prefix"][0] += first
                reqs.append(r)
    return reqs


def reload_plan(n: int = 5, prompt=(120, 200), output=(4, 16), shared=(80, 110), rounds: int = 3) -> list:
    """Groups 0-1 and groups 2-3 take turns, ``rounds`` waves each."""
    return [[(n, prompt, output, 20, 2 * (w % 2), 2, shared)] for w in range(2 * rounds)]


def streams() -> list[tuple[str, dict, list[dict], dict]]:
    """(name, server arguments, requests, run options) of every golden stream."""
    s = []

    def add(name, reqs, ignore_eos=False, forward_cost_s=0.01, per_token_cost_s=0.0, **cfg):
        s.append((name, {**DEFAULTS, **HICACHE, **cfg}, reqs,
                  dict(ignore_eos=ignore_eos, forward_cost_s=forward_cost_s, per_token_cost_s=per_token_cost_s)))

    reload = waves(1, reload_plan(), 60)
    add("wt_reload", reload, max_total_tokens=700)
    add("wts_reload", reload, max_total_tokens=700, hicache_write_policy="write_through_selective")
    add("wb_reload", reload, max_total_tokens=700, hicache_write_policy="write_back")
    add("wt_host_evict", waves(2, reload_plan(rounds=4), 60), max_total_tokens=700, hicache_ratio=1.2)
    add("wt_page16", waves(3, reload_plan(), 60), max_total_tokens=768, page_size=16)
    # Groups 0-1 share 4-9 tokens (a host hit under the load-back threshold), groups 2-3 80-110.
    short = [[(3, (40, 120), (4, 16), 20, 4 * (w % 2), 2, (4, 9)),
              (3, (120, 200), (4, 16), 20, 4 * (w % 2) + 2, 2, (80, 110))] for w in range(6)]
    add("wt_short_hits", waves(4, short, 60), max_total_tokens=700)
    add("wt_chunked", waves(5, reload_plan(prompt=(150, 260), shared=(100, 140)), 60), max_total_tokens=800,
        chunked_prefill_size=64)
    # Near-bursts of short prompts and long outputs on a tight pool, under-reserved (conservativeness 0.3):
    # decode retraction, and a retracted request's prompt coming back from the host when it resumes.
    add("wt_retract", waves(13, [[(10, (20, 60), (20, 60), 2, 2 * (w % 2), 2, (12, 30))] for w in range(4)], 70),
        max_total_tokens=320, schedule_conservativeness=0.3)
    add("wt_timed_poisson", waves(7, reload_plan(n=6), 50, timed=True), max_total_tokens=700)
    add("wt_timed_lpm", waves(8, reload_plan(n=6, prompt=(60, 200), shared=(30, 110)), 40, timed=True),
        max_total_tokens=600, schedule_policy="lpm", per_token_cost_s=0.0001)
    return s


def record(python: str, name: str, cfg: dict, reqs: list[dict], opts: dict, env: dict | None = None) -> dict:
    """One stream through the HiCache oracle in its own process; the golden's records."""
    cmd = [python, str(ORACLE), "--requests", "{requests}", "--config", "{config}", "--out", "{out}",
           "--forward-cost-s", repr(opts["forward_cost_s"]), "--per-token-cost-s", repr(opts["per_token_cost_s"])]
    if opts["ignore_eos"]:
        cmd.append("--ignore-eos")
    env = {**os.environ, "SGLANG_ORACLE_DIR": str(ORACLE_DIR), **(env or {})}
    lines = run_oracle(name, cmd, {"requests": oracle_requests(reqs), "config": cfg}, env=env)
    golden = golden_of(name, lines, cfg, reqs, opts)
    summary = lines[-1]["summary"]
    golden["config"] = {**cfg, **summary["hicache"]}
    by_step = {rec["step"]: rec for rec in lines[:-1]}
    for step in golden["steps"]:
        rec = by_step[step["step"]]
        step.update({k: rec[k] for k in STEP_KEYS if k in rec})
    for rid, st in golden["summary"].items():
        st.update({k: summary["requests"][rid][k] for k in SUMMARY_KEYS})
    return golden


def overview(golden: dict) -> str:
    steps = golden["steps"]
    hits = [n for st in steps for n in st.get("host_hit", {}).values() if n > 0]
    skipped = sum(1 for st in steps for rid, n in st.get("host_match", {}).items() if n > 0 and st["host_hit"][rid] == 0)
    return (f"{len(golden['requests'])} requests, {len(steps)} passes, host_hit {sum(hits)} tokens in {len(hits)} "
            f"admissions ({skipped} host matches not loaded), backed up {sum(st['backed_up_tokens'] for st in steps)}, "
            f"demoted {sum(st['device_evicted_tokens'] - st['dropped_tokens'] for st in steps)}, "
            f"dropped {sum(st['dropped_tokens'] for st in steps)}, "
            f"host evicted {sum(st['host_evicted_tokens'] for st in steps)}, "
            f"max host_used {max(st['host_used_tokens'] for st in steps)}/{golden['config']['host_pool_tokens']}, "
            f"retractions {sum(len(st['retracted']) for st in steps)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="the oracle venv's python (install_sglang_oracle_venv.sh)")
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    ap.add_argument("--only", nargs="*", default=None, help="stream names to record (default: all)")
    args = ap.parse_args()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    stale = False
    for name, cfg, reqs, opts in streams():
        if args.only and name not in args.only:
            continue
        golden = record(args.python, name, cfg, reqs, opts)
        note = overview(golden)
        stale |= emit(OUT_DIR / f"{name}.json", dump(golden), args.check, note)
        if args.check:
            print(f"      {name}: {note}")
    sys.exit(1 if stale else 0)


if __name__ == "__main__":
    main()
