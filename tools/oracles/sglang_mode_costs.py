#!/usr/bin/env python3
"""Drive SGLang 0.5.23's real scheduler with a cost per pass kind: a prefill (or mixed) pass costs
``--prefill-cost-s``, a decode pass ``--decode-cost-s`` (the fixed timing of Dynamo's mocker runs and of
simmodel's ``timing: fixed``). Run inside the oracle venv (``../shared/oracles/install_sglang_oracle_venv.sh``)
by ``record_sglang_goldens.py``; it builds the scheduler with the oracle's own ``build_scheduler`` and
writes the oracle's records (one JSON line per pass, then a summary), so the goldens it makes have the
same shape, but for the oracle's ``new``, ``resumed`` and ``chunked`` lists, which it does not keep.

The loop is SGLang's ``event_loop_normal`` with overlap off, as the oracle runs it: the requests whose
arrival is at or before the clock enter, ``get_next_batch_to_run`` plans a pass, ``run_batch`` and
``process_batch_result`` apply it, and the clock moves on by the pass's cost; an idle engine jumps to the
next arrival. The clock counts whole microseconds (arrivals are rounded to them), so an arrival at a pass's
end is seen by the next pass exactly. ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`` is set from ``--clip-max-new-tokens`` before
SGLang is imported.

    <venv>/bin/python tools/oracles/sglang_mode_costs.py --requests reqs.json --config cfg.json \
        --prefill-cost-s 0.02 --decode-cost-s 0.01 [--clip-max-new-tokens N] --out trace.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import deque
from pathlib import Path


def _oracle(clip: int | None):
    if clip is not None:
        os.environ["SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION"] = str(clip)
    folder = os.environ.get("SGLANG_ORACLE_DIR", str(Path(__file__).resolve().parents[3] / "shared" / "oracles"))
    sys.path.insert(0, folder)
    import sglang_sched_oracle
    return sglang_sched_oracle


def _record(s, step: int, mode: str, scheduled: dict, retracted: list, emitted: dict, finished: list,
            prefix: dict | None, t_start: int, t_end: int) -> dict:
    rec = {"step": step, "mode": mode, "scheduled": scheduled, "retracted": retracted, "emitted": emitted, "finished": {rid: None for rid in finished},
           "free_tokens": int(s.token_to_kv_pool_allocator.available_size()),
           "evictable_tokens": int(s.tree_cache.evictable_size()),
           "new_token_ratio": round(float(s.new_token_ratio_tracker.current), 6),
           "t_start": t_start / 1e6, "t_end": t_end / 1e6}
    if prefix is not None:
        rec["prefix_len"] = prefix
    return rec


def _us(seconds: float) -> int:
    return round(seconds * 1e6)


def run(oracle, requests: list[dict], cfg: dict, prefill_cost_s: float, decode_cost_s: float, out) -> None:
    s = oracle.build_scheduler(**cfg)
    pending = deque(sorted(requests, key=lambda r: _us(r["arrival_s"])))  # stable: ties keep input order
    prefill_us, decode_us = _us(prefill_cost_s), _us(decode_cost_s)
    stats = {str(r["id"]): {"first_token_step": None, "finish_step": None, "first_token_t": None,
                            "finish_t": None, "retractions": 0, "emitted_tokens": 0, "prefix_hit_tokens": 0}
             for r in requests}
    seen: set = set()
    step, clock, idle = 0, 0, 0

    def busy() -> bool:
        last = s.last_batch
        return (bool(s.waiting_queue) or not s.running_batch.is_empty() or s.chunked_req is not None
                or (last is not None and any(not r.finished() for r in last.reqs)))

    while pending or busy():
        if not busy():
            clock = max(clock, _us(pending[0]["arrival_s"]))
        arrived = []
        while pending and _us(pending[0]["arrival_s"]) <= clock:
            arrived.append(oracle.make_request(pending.popleft()))
        if arrived:
            s.process_input_requests(arrived)
        oracle._RETRACTED.clear()
        plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
        s.running_batch = plan.running_batch
        batch = plan.batch_to_run
        retracted = list(oracle._RETRACTED)
        for rid in retracted:
            stats[rid]["retractions"] += 1
        if not batch:
            s.last_batch = None
            idle += 1
            if idle > 1000:
                raise RuntimeError(f"step {step}: nothing runs with requests waiting")
            if pending and not s.running_batch.reqs:
                clock = max(clock, _us(pending[0]["arrival_s"]))
                continue
            step += 1  # (the oracle counts a round without a pass as a step)
            continue
        idle = 0
        mode, scheduled = oracle._batch_tokens(batch)
        prefix = None
        if mode != "decode":
            prefix = {r.rid: int(n) for r, n in zip(batch.reqs, batch.prefix_lens or [])}
            for rid, n in prefix.items():
                if rid not in seen:
                    stats[rid]["prefix_hit_tokens"] = n
        seen.update(scheduled)
        before = {r.rid: len(r.output_ids) for r in batch.reqs}
        start = clock
        s.process_batch_result(batch, s.run_batch(batch))
        s.last_batch = batch
        clock += decode_us if mode == "decode" else prefill_us
        emitted, finished = {}, []
        for r in batch.reqs:
            n = len(r.output_ids) - before[r.rid]
            st = stats[r.rid]
            if n > 0:
                emitted[r.rid] = n
                st["emitted_tokens"] += n
                if st["first_token_step"] is None:
                    st["first_token_step"], st["first_token_t"] = step, clock / 1e6
            if r.finished() and st["finish_step"] is None:
                finished.append(r.rid)
                st["finish_step"], st["finish_t"] = step, clock / 1e6
        rec = _record(s, step, mode, scheduled, retracted, emitted, finished, prefix, start, clock)
        out.write(json.dumps(rec) + "\n")
        step += 1
    import sglang
    summary = {"sglang_version": sglang.__version__, "clock": "arrival_s",
               "effective_max_running_requests": int(s.max_running_requests), "requests": stats}
    out.write(json.dumps({"summary": summary}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", required=True, help="JSON list of {id, arrival_s, output_tokens, "
                                                      "prompt_token_ids}")
    ap.add_argument("--config", required=True, help="JSON object of build_scheduler's arguments")
    ap.add_argument("--prefill-cost-s", type=float, required=True)
    ap.add_argument("--decode-cost-s", type=float, required=True)
    ap.add_argument("--clip-max-new-tokens", type=int, default=None)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    oracle = _oracle(a.clip_max_new_tokens)
    with open(a.out, "w") as out:
        run(oracle, json.loads(Path(a.requests).read_text()), json.loads(Path(a.config).read_text()),
            a.prefill_cost_s, a.decode_cost_s, out)
    sys.stdout.flush()
    os._exit(0)  # (SGLang leaves non-daemon helper threads behind)


if __name__ == "__main__":
    main()
