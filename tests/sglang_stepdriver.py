"""Replay a Dynamo-mocker SGLang golden run (``tests/golden/dynamo_sglang``) through ``SglangScheduler``.

Discrete time, no SimPy, the mocker's fixed timing: a prefill pass costs 20 ms, a decode pass 10 ms.
Each worker's attention-DP ranks run in lockstep: a round plans every rank, lasts as long as the
slowest rank's pass, and idle ranks wait. Requests are placed round robin over workers, then over
each worker's ranks; a request joins the first round that starts at or after its arrival.
``prefill_decode_interval`` N: after a round in which any rank prefilled, the next N rounds cannot
prefill or continue a chunk (they still decode); a blocked round with nothing to decode takes no time.
Times are integer microseconds inside and milliseconds in the result.
"""

from __future__ import annotations

from collections import deque

from simmodel.engine.request import Request
from simmodel.engine.scheduler.sglang import SglangScheduler, SglangSchedulerConfig

PREFILL_US = 20_000
DECODE_US = 10_000


def config_for_run(golden: dict, run: dict) -> tuple[SglangSchedulerConfig, int]:
    """The scheduler config of one golden run, and the KV capacity in tokens per rank."""
    eng = run["engine_args"]["engine"]
    sg = eng["sglang"]
    policy = sg.get("schedule_policy") or "fcfs"
    cfg = SglangSchedulerConfig(
        max_running_requests=eng["max_num_seqs"],
        chunked_prefill_size=sg["chunked_prefill_size"],
        max_prefill_tokens=sg["max_prefill_tokens"],
        schedule_policy="fcfs" if policy == "fifo" else policy,
        schedule_conservativeness=sg["schedule_conservativeness"],
        clip_max_new_tokens=sg["clip_max_new_tokens"],
        attention_data=run["dp_size"],
        prefill_decode_interval=eng.get("prefill_decode_interval") or 0,
        trace_block_size=golden["config"]["trace_block_size"],
    )
    return cfg, eng["num_gpu_blocks"]


def hash_ids(req: dict) -> tuple[int, ...]:
    return tuple(h for start, count in req["hash_runs"] for h in range(start, start + count))


def replay(golden: dict, run: dict) -> dict[int, dict]:
    """Per request id: worker, dp_rank, first/last token, ttft, e2e (ms), admissions, admission_history
    ([(at_ms, radix hit), ...])."""
    cfg, kv = config_for_run(golden, run)
    num_workers, dp = run["num_workers"], run["dp_size"]
    reqs = sorted(golden["requests"], key=lambda r: r["arrival_ms"])  # stable: list order on ties
    per_worker: list[list[tuple[Request, int]]] = [[] for _ in range(num_workers)]
    placed: dict[int, tuple[int, int]] = {}
    counters = [0] * num_workers
    for i, r in enumerate(reqs):
        w = i % num_workers
        rank = counters[w] % dp
        counters[w] += 1
        req = Request(r["id"], round(r["arrival_ms"] * 1000), r["input_tokens"], r["output_tokens"],
                      hash_ids=hash_ids(r))
        per_worker[w].append((req, rank))
        placed[r["id"]] = (w, rank)
    results: dict[int, dict] = {}
    for w in range(num_workers):
        for req, t_first, t_last, admissions in _run_worker(per_worker[w], cfg, kv, dp):
            first_ms, last_ms, arr = t_first / 1000, t_last / 1000, req.arrived_at / 1000
            results[req.request_id] = {
                "worker": w, "dp_rank": placed[req.request_id][1], "first_token_ms": first_ms,
                "last_token_ms": last_ms, "ttft_ms": first_ms - arr, "e2e_ms": last_ms - arr,
                "admissions": len(admissions), "readmissions": req.num_preemptions,
                "admission_history": admissions,
            }
    return results


def _run_worker(placed: list[tuple[Request, int]], cfg: SglangSchedulerConfig, kv: int, dp: int):
    scheds = [SglangScheduler(cfg, kv) for _ in range(dp)]
    pending = deque(placed)
    first: dict[Request, int] = {}
    admissions: dict[Request, list[tuple[float, int]]] = {}
    done: list[tuple[Request, int, int, list[tuple[float, int]]]] = []
    interval = cfg.prefill_decode_interval
    blocked = 0
    t = 0
    while pending or any(s.has_requests() for s in scheds):
        while pending and pending[0][0].arrived_at <= t:
            req, rank = pending.popleft()
            scheds[rank].add_request(req)
        if not any(s.has_requests() for s in scheds):
            t = pending[0][0].arrived_at
            continue
        is_blocked = blocked > 0
        plans = [s.schedule(prefill_blocked=is_blocked) for s in scheds]
        busy = [p for p in plans if p.requests]
        if is_blocked:
            blocked -= 1
        if not busy:
            if is_blocked:
                continue  # an idle blocked round takes no time
            if not pending:
                raise RuntimeError("SGLang replay stuck: requests wait but nothing can run")
            t = max(t, pending[0][0].arrived_at)
            continue
        prefilled = any(not p.is_decode[0] for p in busy)
        for p in busy:
            for r in p.admitted + p.resumed:
                admissions.setdefault(r, []).append((t / 1000, p.num_context_tokens[p.requests.index(r)]))
        t += max(PREFILL_US if not p.is_decode[0] else DECODE_US for p in busy)
        for s, p in zip(scheds, plans):
            if not p.requests:
                continue
            sampled, finished = s.update_from_output(p)
            for r in sampled:
                first.setdefault(r, t)
            for r in finished:
                done.append((r, first[r], t, admissions[r]))
        if prefilled and interval:
            blocked = interval
    return done
