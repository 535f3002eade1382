"""Replay a golden run of SGLang's real scheduler (``tests/golden/sglang``) through ``SglangScheduler``.

The loop is the oracle's (``tools/oracles/record_sglang_goldens.py``: SGLang's ``event_loop_normal`` with
overlap off): before each pass the requests whose arrival (a pass index, or seconds of a clock that each
pass advances by its fixed cost, or by a cost per pass kind in whole microseconds for the ``mocker_*``
streams) is due join the queue, the scheduler plans a pass, and the pass's outputs are processed at once;
an engine with nothing to run jumps to the next arrival. A request's prompt is its shared prefix's segment
(the same ids in every request of its group) then a segment of its own, as the oracle's token ids are, or
its Mooncake ``hash_ids`` (``trace_block_size`` tokens each).
"""

from __future__ import annotations

from collections import deque

from simmodel.engine.radix_cache import mooncake_segments
from simmodel.engine.request import Request
from simmodel.engine.scheduler.sglang import SglangScheduler, SglangSchedulerConfig
from simmodel.offload.link import HostLink
from simmodel.offload.sglang_hicache import SglangHiCache


def config_of(golden: dict) -> tuple[SglangSchedulerConfig, int]:
    """The scheduler config of a golden run, and its KV capacity in tokens."""
    cfg = golden["config"]
    kv = cfg["max_total_tokens"]
    context = cfg["context_length"] if cfg["context_length"] is not None else 1 << 20  # the oracle's model
    return SglangSchedulerConfig(
        max_running_requests=golden["effective_max_running_requests"],
        chunked_prefill_size=cfg["chunked_prefill_size"],
        max_prefill_tokens=cfg["max_prefill_tokens"],
        schedule_policy=cfg["schedule_policy"],
        schedule_conservativeness=cfg["schedule_conservativeness"],
        max_req_len=min(context, kv) - 1,
        ignore_eos=golden["ignore_eos"],
        radix_cache=not cfg["disable_radix_cache"],
        mixed_chunk=cfg["enable_mixed_chunk"],
        page_size=cfg["page_size"],
        clip_max_new_tokens=golden.get("clip_max_new_tokens", 4096),
        **_hicache(cfg),
    ), kv


def _hicache(cfg: dict) -> dict:
    """A HiCache golden's host pool (in pages, as SGLang sized it) and write policy."""
    if not cfg.get("enable_hierarchical_cache"):
        return {}
    return {"host_pages": cfg["host_pool_tokens"] // cfg["page_size"], "write_policy": cfg["hicache_write_policy"]}


class _Clock:
    """The replay's clock as the host tier reads it (``env.now``): passes, or seconds of the timed streams."""

    now = 0


def _attach_hicache(sched: SglangScheduler, clock: _Clock) -> None:
    """The oracle's copies complete at once (its fake transfers): an infinitely fast link, no latency, so a
    backup is acknowledged by the next plan and a load within its pass."""
    fast = float("inf")
    sched.offload = SglangHiCache(clock, sched.cache, HostLink(fast, 0), HostLink(fast, 0), sched.page, 1.0, 1.0)


def make_request(spec: dict, index: int, golden: dict) -> Request:
    if "arrival_step" in spec:
        arrival = spec["arrival_step"]
    else:
        arrival = round(spec["arrival_s"] * 1e6) if "prefill_cost_s" in golden else spec["arrival_s"]
    req = Request(index, arrival, spec["prompt_tokens"], spec["output_tokens"])
    if "hash_ids" in spec:
        req.prompt_segments = mooncake_segments(spec["hash_ids"], spec["prompt_tokens"], golden["trace_block_size"])
        return req
    group, shared = spec.get("prefix", (0, 0))
    own = spec["prompt_tokens"] - shared
    req.prompt_segments = ([(("prefix", group), shared)] if shared else []) + [(("own", index), own)]
    return req


def pass_cost(golden: dict, plan, new_tokens: int):
    """What a pass adds to the clock: a cost per pass kind in microseconds, or a fixed cost (and a cost per
    scheduled token) in seconds."""
    if "prefill_cost_s" in golden:
        return round(1e6 * golden["decode_cost_s" if plan.is_decode[0] else "prefill_cost_s"])
    return golden["forward_cost_s"] + golden["per_token_cost_s"] * new_tokens


def replay(golden: dict) -> tuple[list[dict], dict[str, dict]]:
    """Our passes as the golden records them (step, mode, scheduled, retracted, emitted, finished,
    free_tokens, evictable_tokens), and per request its first-token and finish step and time and its
    retractions."""
    cfg, kv = config_of(golden)
    sched = SglangScheduler(cfg, kv)
    hicache = _Clock() if cfg.host_pages else None
    if hicache is not None:
        _attach_hicache(sched, hicache)
    timed = golden["clock"] == "arrival_s"
    seconds = 1e-6 if "prefill_cost_s" in golden else 1.0  # (the clock's unit)
    requests = [make_request(spec, i, golden) for i, spec in enumerate(golden["requests"])]
    ids = {r: spec["id"] for r, spec in zip(requests, golden["requests"])}
    pending = deque(sorted(requests, key=lambda r: r.arrived_at))  # stable: ties keep input order
    stats = {ids[r]: {"first_token_step": None, "finish_step": None, "first_token_t": None, "finish_t": None,
                      "retractions": 0} for r in requests}
    passes: list[dict] = []
    step, clock, idle = 0, 0, 0
    while pending or sched.has_requests():
        if not sched.has_requests():
            if timed:
                clock = max(clock, pending[0].arrived_at)
            else:
                step = max(step, pending[0].arrived_at)
        now = clock if timed else step
        while pending and pending[0].arrived_at <= now:
            sched.add_request(pending.popleft())
        if hicache is not None:
            hicache.now = now
        written_back = getattr(sched.cache, "num_written_back", 0)  # (write-back copies this step makes)
        plan = sched.schedule()
        if not plan.requests:
            if pending and not sched.running:
                if timed:
                    clock = max(clock, pending[0].arrived_at)
                else:
                    step = max(step + 1, pending[0].arrived_at)
                continue
            idle += 1  # SGLang's loop goes round without a pass (and without time)
            if idle > 1000:
                raise RuntimeError(f"step {step}: nothing to run with requests waiting")
            step += 1
            continue
        idle = 0
        mode = ("mixed" if not plan.is_decode[0] and plan.is_decode[-1]
                else "decode" if plan.is_decode[0] else "prefill")
        scheduled = {ids[r]: n for r, n in zip(plan.requests, plan.num_new_tokens)}
        retracted = [ids[r] for r in plan.preempted]
        for rid in retracted:
            stats[rid]["retractions"] += 1
        start = clock
        sampled, finished = sched.update_from_output(plan)
        clock = clock + pass_cost(golden, plan, sum(plan.num_new_tokens))
        host = {}
        if hicache is not None:
            host = _host_fields(sched, plan, ids)
            host["backed_up_tokens"] += (sched.cache.num_written_back - written_back) * sched.page
            hicache.now = clock if timed else step
            sched.offload.pass_ended(plan, hicache.now, step)
            sched.offload.flush(hicache.now)
        for r in sampled:
            st = stats[ids[r]]
            if st["first_token_step"] is None:
                st["first_token_step"], st["first_token_t"] = step, clock * seconds
        for r in finished:
            stats[ids[r]].update(finish_step=step, finish_t=clock * seconds)
        record = {"step": step, "mode": mode, "scheduled": scheduled, "retracted": retracted,
                  "emitted": {ids[r]: 1 for r in sampled}, "finished": sorted((ids[r] for r in finished),
                                                                        key=lambda rid: int(rid[1:])),
                  "free_tokens": sched.num_free_tokens, "evictable_tokens": sched.num_evictable_tokens, **host}
        if timed:
            record["t_start"], record["t_end"] = round(start * seconds, 9), round(clock * seconds, 9)
        passes.append(record)
        step += 1
    for r in requests:
        stats[ids[r]]["cached_tokens_details"] = {"device": r.num_cached_tokens, "host": r.num_host_cached_tokens}
    return passes, stats


def _host_fields(sched: SglangScheduler, plan, ids: dict) -> dict:
    """A HiCache pass as the golden records it: per admitted request the tokens loaded from the host
    (``host_hit``), the host pool's tokens in use and the tokens this pass backed up and loaded."""
    page = sched.page
    loaded = {ids[r]: n * page for r, n in plan.host_loaded or ()}
    admitted = [r for r in (*plan.admitted, *plan.resumed)]
    return {"host_hit": {ids[r]: loaded.get(ids[r], 0) for r in admitted} if admitted else {},
            "host_used_tokens": sched.cache.host_tokens * page,
            "backed_up_tokens": sum(n for _, n in sched.cache.backups) * page,
            "loaded_tokens": sum(loaded.values())}


def mismatches(golden: dict, fields: tuple[str, ...]) -> list[str]:
    """Where our replay of a golden departs from SGLang's run: pass by pass (``fields``, then the batch's order),
    the number of passes, and per request its first-token and finish pass (and times, within 1 µs) and
    retractions. One pass apart, the comparison stops there (every later pass differs too)."""
    passes, stats = replay(golden)
    if golden.get("sparse_steps"):  # (only passes that are not plain decodes were kept)
        passes = [p for p in passes if p["mode"] != "decode" or p["retracted"] or p["finished"]]
    bad = []
    for want, got in zip(golden["steps"], passes):
        diffs = [f"{field} {got.get(field)!r} != {want[field]!r}" for field in fields
                 if field in want and got.get(field) != want[field]]  # (a decode pass records no host_hit)
        if list(got["scheduled"]) != list(want["scheduled"]) and not diffs:  # (the batch's order too)
            diffs.append(f"batch order {list(got['scheduled'])} != {list(want['scheduled'])}")
        if got["step"] != want["step"]:
            diffs.insert(0, f"step {got['step']} != {want['step']}")
        if diffs:
            bad.append(f"pass {want['step']}: " + "; ".join(diffs))
            break  # one pass apart, every later pass differs too
    if len(passes) != len(golden["steps"]):
        bad.append(f"{len(passes)} passes, SGLang ran {len(golden['steps'])}")
    for rid, want in golden["summary"].items():
        got = stats[rid]
        diffs = [f"{key} {got[key]} != {want[key]}" for key in ("first_token_step", "finish_step", "retractions")
                 if got[key] != want[key]]
        if golden["clock"] == "arrival_s":
            diffs += [f"{key} {got[key]!r} != {want[key]!r}" for key in ("first_token_t", "finish_t")
                      if abs(got[key] - want[key]) > 1e-6]
        if diffs:
            bad.append(f"request {rid}: " + ", ".join(diffs))
    return bad


def assert_matches(name: str, bad: list[str], known: str | None) -> None:
    """A golden's replay matches (``bad`` empty), or, listed as a known mismatch, xfails with ``known``, and fails
    once it matches (so the list is kept exact)."""
    import pytest

    if known is not None:
        if bad:
            pytest.xfail(f"{known} ({len(bad)} differences; first: {bad[0]})")
        pytest.fail(f"{name} now matches: remove it from KNOWN_MISMATCH")
    assert not bad, f"{len(bad)} differences:\n" + "\n".join(bad[:10])
