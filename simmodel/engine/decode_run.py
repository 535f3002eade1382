"""Coalesced decode runs: a worker's stretch of decode-only passes applied in one vectorized step.

In steady serving most passes are alike: the same running requests each decode one token, nothing
arrives, nothing is admitted. Such a pass changes only counters (one more computed and one more output
token per request, a KV block whenever a sequence crosses a block boundary), so a run of them needs no
per-request Python work per pass: ``advance`` prices the whole run with one call of the timing model,
applies every block allocation, prefix-cache insertion and finish in the order the pass-by-pass
scheduler would, and records exactly the pass rows, events and inter-token intervals it would have
recorded. A faster path that changed an answer would be a bug: ``tests/scenarios/test_decode_runs.py``
compares whole runs with coalescing on and off, byte for byte.

A run covers passes 1..m after the pass just ended, and only while nothing outside the worker can see
or change it: every pass of the run ends strictly before the next event of any other process (an
arrival, a transfer, another worker's pass end, the end of the run), so no one observes the worker
mid-run and the event log, ordered by time, is the same. It stops before a pass that would preempt (not
enough free KV blocks), before a request whose finish calls back into the simulation (closed-loop
clients, P/D handoffs) would finish, at the safety limits, and when every request has finished.
Requests finishing inside the run leave it as they would (status, blocks freed, ``FINISH`` event).

Only vLLM's synchronous scheduler without speculative decoding is coalesced, and only from a state
where every rank's queue is empty and every running request sampled in the pass just ended; anything
else runs pass by pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.clock import NS_PER_S
from simmodel.engine.request import RequestStatus
from simmodel.engine.scheduler.vllm import VllmScheduler
from simmodel.metrics.records import Event as EventRow
from simmodel.metrics.records import EventKind
from simmodel.perf.timing import PassBatch, price_passes

if TYPE_CHECKING:
    from simmodel.engine.worker import Worker

MAX_RUN = 256
"""Most passes one run covers (bounds the arrays priced at once)."""
FIRST_CHUNK = 8
"""Passes priced first when the run's length cannot be told in advance; later chunks double."""


def _cdiv(a: np.ndarray, b: int) -> np.ndarray:
    return -(-a // b)


class _Rank:
    """One rank's running requests as arrays, in running order."""

    __slots__ = ("rank", "requests", "computed", "prompt", "outputs", "blocks", "cached", "left")

    def __init__(self, rank, requests: list) -> None:
        self.rank, self.requests = rank, requests


def _gather(worker: Worker) -> list[_Rank] | None:
    """Each rank's running requests as arrays, or None if any rank is not in a coalescable state."""
    out = []
    for rank in worker.ranks:
        s = rank.scheduler
        if (type(s) is not VllmScheduler or s.waiting or s.handoffs or s.async_scheduling
                or s.config.num_speculative_tokens or rank._pending_releases):
            return None
        running = s.running
        if len(running) > s.config.max_num_batched_tokens:
            return None  # the token budget cuts the run's passes short
        state = _Rank(rank, running)
        if running:
            last_pass = rank.num_passes - 1
            rows = np.array([(r.num_computed_tokens, r.num_prompt_tokens, r.num_output_tokens, r.max_tokens,
                              r.num_blocks, r.num_cached_blocks, r.last_token_pass, r.is_prefill_chunk)
                             for r in running], dtype=np.int64)
            computed, prompt, outputs = rows[:, 0], rows[:, 1], rows[:, 2]
            # Decoding: one token left to compute, sampled in the pass just ended (so its interval is the
            # pass gap), and not mid-prefill.
            if (np.any(computed != prompt + outputs - 1) or np.any(rows[:, 6] != last_pass)
                    or np.any(rows[:, 7]) or any(r.bootstrap for r in running)):
                return None
            state.computed, state.prompt, state.outputs = computed, prompt, outputs
            state.blocks, state.cached = rows[:, 4], rows[:, 5]
            # Passes until each request stops: max_tokens outputs, or its sequence reaching max_model_len.
            state.left = np.minimum(rows[:, 3] - outputs, s.config.max_model_len - prompt - outputs)
        out.append(state)
    return out


def advance(worker: Worker, horizon: int, arrival: int | None = None) -> int | None:
    """Coalesce the decode passes that follow now; returns the end of the run's last pass, with every pass
    applied and recorded, or None if no pass qualifies.

    Every pass ends before ``horizon`` (the next event that may read or change the worker). ``arrival``, if
    given, is the next arrival, known to only append a request to a rank's queue: a pass planned before
    it may still run, since its plan could not have seen the request (but not one ending at that very
    instant, whose outputs would be recorded after the arrival).
    """
    now = worker.env.now
    if arrival is None:
        arrival = horizon
    if now + (worker.decode_pass_ns or worker.last_pass_ns) >= horizon:
        return None  # the next pass would most likely end past the horizon: not worth gathering
    ranks = _gather(worker)
    if ranks is None:
        return None
    live = [s for s in ranks if s.requests]
    if not live:
        return None
    # A request whose finish calls back must finish in a pass of its own (the callback acts at that time).
    limit = min(MAX_RUN, max(int(s.left.max()) for s in live))
    for s in live:
        for i, request in enumerate(s.requests):
            if request.on_finish is not None:
                limit = min(limit, int(s.left[i]) - 1)
    if worker.limits is not None:
        limit = min(limit, worker.limits.spec.max_passes - worker.limits.num_passes)
    limit = _kv_limit(ranks, limit)
    if limit < 1:
        return None
    # Price passes chunk by chunk until one crosses the horizon; the first chunk is sized from the last
    # pass's duration.
    ends: list[np.ndarray] = []
    busy_chunks: list[np.ndarray] = []
    labels: list[tuple[str, ...]] = []
    priced, start = 0, now
    rows = (np.concatenate([np.full(len(s.requests), r) for r, s in enumerate(ranks) if s.requests]),
            np.concatenate([s.computed for s in live]), np.concatenate([s.left for s in live]))
    typical = worker.decode_pass_ns or worker.last_pass_ns
    chunk = max(2, (min(horizon, arrival) - now) // max(typical, 1) + 2)
    while priced < limit:
        n = int(min(chunk, limit - priced))
        seconds, provenance = _price(worker, rows, len(ranks), priced + 1, n)
        if not np.all(np.isfinite(seconds)) or seconds.max() * NS_PER_S >= 2**62 or seconds.min() < 0:
            break  # the pass-by-pass path reports it
        busy = np.rint(seconds * NS_PER_S).astype(np.int64)
        chunk_ends = start + np.cumsum(busy.max(axis=1))
        chunk_starts = np.concatenate(([start], chunk_ends[:-1]))
        ok = (chunk_ends < horizon) & (chunk_starts < arrival) & (chunk_ends != arrival)
        keep = n if ok.all() else int(np.argmin(ok))
        ends.append(chunk_ends[:keep])
        busy_chunks.append(busy[:keep])
        labels.extend(provenance[:keep])
        priced += keep
        if keep < n:
            break
        start = int(chunk_ends[-1])
        chunk *= 2
    m = priced
    if worker.limits is not None and m:
        starts = np.concatenate(([now], np.concatenate(ends)[:-1]))
        m = min(m, int(np.searchsorted(starts, worker.limits._max_time_ns, side="right")))
    if m < 1:
        return None
    end = np.concatenate(ends)[:m]
    busy = np.concatenate(busy_chunks)[:m]
    _apply(worker, ranks, m, now, end, busy, labels[:m])
    return int(end[-1])


def _kv_limit(ranks: list[_Rank], limit: int) -> int:
    """Passes the run can take before one would need more KV blocks than its rank has free (vLLM would
    preempt there). Frees from requests finishing in the run count (only when needed), conservatively
    with prefix caching (only blocks no other request shares)."""
    for s in ranks:
        if not s.requests or limit < 1:
            continue
        pool, bs = s.rank.pool, s.rank.pool.block_size
        j = np.arange(1, limit + 1)[:, None]
        c = s.computed[None, :]
        grows = (_cdiv(c + j, bs) > np.maximum(s.blocks[None, :], _cdiv(c + j - 1, bs))) & (s.left[None, :] >= j)
        taken = np.cumsum(grows.sum(axis=1))
        free = pool.num_free_blocks
        if taken[-1] <= free:
            continue
        short = int(np.argmax(taken > free))  # the first pass short of blocks if nothing were freed
        final_blocks = np.maximum(s.blocks, _cdiv(s.computed + s.left, bs))
        frees = np.zeros(limit + 1, dtype=np.int64)  # frees[j]: blocks returned at the end of pass j
        for i in np.nonzero(s.left <= short)[0].tolist():
            if pool.caching:
                own = sum(1 for b in s.requests[i].block_ids if pool.ref_cnt[b] == 1)
                returned = own + int(final_blocks[i] - s.blocks[i])
            else:
                returned = int(final_blocks[i])
            frees[int(s.left[i])] += returned
        freed = np.cumsum(frees[:-1])  # freed[j-1]: returned before pass j is planned
        short = np.nonzero(taken > free + freed)[0]
        if short.size:
            limit = int(short[0])
    return limit


def _price(worker: Worker, rows: tuple[np.ndarray, np.ndarray, np.ndarray], num_ranks: int, first: int,
           n: int) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """Seconds per pass and rank, shape (n, ranks), for passes ``first``..``first+n-1`` of the run.
    ``rows`` holds every rank's running requests, rank after rank: rank, computed tokens, passes left."""
    rank, computed, left = rows
    j = np.arange(first - 1, first + n - 1)[:, None]
    active = left[None, :] > j
    ctx = (computed[None, :] + j)[active]  # row-major: by pass, then rank, then running order
    vrank = (np.arange(n)[:, None] * num_ranks + rank[None, :])[active]
    flags = np.ones(ctx.size, dtype=bool)
    capacity = worker._kv_capacity_tokens
    batch = PassBatch(n * num_ranks, vrank, np.ones(ctx.size, dtype=np.int64), ctx, flags, flags,
                      np.tile(capacity, n) if num_ranks > 1 else np.full(n, capacity[0]))
    return price_passes(worker.timing, batch, n)


def _apply(worker: Worker, ranks: list[_Rank], m: int, now: int, end: np.ndarray, busy: np.ndarray,
           labels: list[tuple[str, ...]]) -> None:
    """Apply passes 1..m to the ranks' requests and pools and record them as the pass-by-pass path would."""
    rec = worker.ranks[0].recorder
    start = np.concatenate(([now], end[:-1]))
    starts, ends = start.tolist(), end.tolist()
    gaps = (end - start).tolist()
    role, w = worker.role, worker.worker_id
    provenance = ["+".join(p) for p in labels]
    for p in labels:
        for label in p:
            worker.provenance_counts[label] = worker.provenance_counts.get(label, 0) + 1
    if worker.limits is not None:
        worker.limits.num_passes += m
    worker._wave_step += m
    worker.num_passes += m
    worker.last_pass_ns = worker.decode_pass_ns = int(gaps[-1])

    # Per rank: pool operations in scheduler order, then request state.
    ends_at = [now, *ends]  # ends_at[k]: when run pass k ends (k = 0: the pass before the run)
    counts, used, finishes = [], [], []
    for s in ranks:
        rank = s.rank
        if not s.requests:
            counts.append([0] * m)
            used.append([rank.pool.num_used_blocks] * m)
            finishes.append({})
            continue
        j = np.arange(1, m + 1)
        counts.append((s.left[None, :] >= j[:, None]).sum(axis=1).tolist())
        used_at_plan, done = _pool_ops(s, m, ends_at)
        used.append(used_at_plan)
        finishes.append(done)

    base = ranks[0].rank.num_passes
    for r, s in enumerate(ranks):
        s.rank.num_passes += m
        s.rank._last_delivery = ends[-1]
        sched = s.rank.scheduler
        sched.prefill_capacity_bound = False
        sched.finished_since_schedule = bool(finishes[r].get(m))
        if s.requests:
            sched.running = [q for q in s.requests if q.status is RequestStatus.RUNNING]

    # Records as the barrier makes them, pass by pass: each rank's begin event; then per rank its
    # inter-token interval, finish events, pass row and end event.
    R = len(ranks)
    count = np.array(counts, dtype=np.int64).T  # (passes, ranks)
    gap = end - start
    itl = count.ravel() > 0
    rec.itl_values.extend(np.repeat(gap, R)[itl].tolist())
    rec.itl_counts.extend(count.ravel()[itl].tolist())
    zeros = np.zeros(m * R, dtype=np.int64)
    flat = count.ravel()
    rec.passes.extend(role, provenance if R == 1 else [p for p in provenance for _ in range(R)], {
        "worker": np.full(m * R, w), "dp_rank": np.tile(np.arange(R), m),
        "pass_index": np.repeat(base + np.arange(m), R), "start_ns": np.repeat(start, R),
        "end_ns": np.repeat(end, R), "num_scheduled_tokens": flat, "num_prefill_tokens": zeros,
        "num_prefill_seqs": zeros, "num_decode_seqs": flat, "num_sampled": flat,
        "kv_blocks_used": np.array(used, dtype=np.int64).T.ravel(), "num_preempted": zeros,
        "rank_busy_ns": busy.ravel()})
    if not (rec.keep_events or rec.sink is not None):
        rec.num_done += sum(len(done) for per_rank in finishes for done in per_rank.values())
        return
    new_event = tuple.__new__
    PASS_BEGIN, PASS_END, FINISH = EventKind.PASS_BEGIN, EventKind.PASS_END, EventKind.FINISH
    rows = []
    add = rows.append
    per_pass = count.tolist()
    for k in range(m):
        t0, t1, n = starts[k], ends[k], per_pass[k]
        for r in range(R):
            add(new_event(EventRow, (t0, PASS_BEGIN, w, r, -1, n[r], role)))
        for r in range(R):
            done = finishes[r].get(k + 1)
            if done:
                for request in done:
                    add(new_event(EventRow, (t1, FINISH, w, r, request.request_id, request.num_output_tokens, role)))
            add(new_event(EventRow, (t1, PASS_END, w, r, -1, n[r], role)))
    rec.add_events(rows)


def _pool_ops(s: _Rank, m: int, ends_at: list[int]) -> tuple[list[int], dict[int, list]]:
    """Apply the run's block allocations, prefix-cache insertions and finishes on one rank in the order
    vLLM makes them (pass by pass; in a pass, each request's allocation then its caching, in running
    order; finishes at the pass end). Returns the blocks in use when each pass was planned, and the
    requests finishing at the end of each pass (by pass number)."""
    rank, requests = s.rank, s.requests
    pool, sched = rank.pool, rank.scheduler
    bs = pool.block_size
    c, left, blocks0 = s.computed, s.left, s.blocks
    j = np.arange(1, m + 1)[:, None]
    active = left[None, :] >= j
    cj = c[None, :] + j
    grows = (_cdiv(cj, bs) > np.maximum(blocks0[None, :], _cdiv(cj - 1, bs))) & active
    allocs = grows.sum(axis=1)
    runs = np.minimum(left, m)
    finished_now = np.nonzero(left <= m)[0].tolist()
    done: dict[int, list] = {}
    returned = np.zeros(m + 1, dtype=np.int64)
    if pool.caching:
        caches = ((cj // bs) > np.maximum(s.cached[None, :], (cj - 1) // bs)) & active
        # Operations as (pass, phase, position, kind): phase 0 is scheduling, 1 the pass end.
        ga, gi = np.nonzero(grows)
        ca, ci = np.nonzero(caches)
        fi = np.array(finished_now, dtype=np.int64)
        fa = left[fi] - 1 if fi.size else fi
        passes = np.concatenate((ga, ca, fa))
        phase = np.concatenate((np.zeros(ga.size + ca.size, np.int64), np.ones(fi.size, np.int64)))
        position = np.concatenate((gi, ci, fi))
        kind = np.concatenate((np.zeros(ga.size, np.int64), np.ones(ca.size, np.int64), np.full(fi.size, 2)))
        order = np.lexsort((kind, position, phase, passes))
        for k in order.tolist():
            a, i, op = int(passes[k]), int(position[k]), int(kind[k])
            request = requests[i]
            if op == 0:
                request.block_ids.extend(pool.allocate_ids(1))
                request.num_blocks = len(request.block_ids)
            elif op == 1:
                pool.cache_full_blocks(request, int(c[i]) + a + 1)
            else:
                before = pool.num_free_blocks
                _finish(sched, request)
                returned[a + 1] += pool.num_free_blocks - before
                done.setdefault(a + 1, []).append(request)
    else:
        final_blocks = np.maximum(blocks0, _cdiv(c + runs, bs))
        for i, request in enumerate(requests):
            request.num_blocks = int(final_blocks[i])
        pool.num_free_blocks -= int(allocs.sum())
        for i in finished_now:
            request = requests[i]
            returned[int(left[i])] += request.num_blocks
            _finish(sched, request)
            done.setdefault(int(left[i]), []).append(request)
    # Blocks in use at each planning: allocations so far, minus the frees of earlier pass ends.
    used0 = pool.num_blocks - (pool.num_free_blocks + int(allocs.sum()) - int(returned.sum()))
    used = used0 + np.cumsum(allocs) - np.concatenate(([0], np.cumsum(returned[1:m])))
    # Request state after the run (finished ones as of their last pass).
    for i, request in enumerate(requests):
        n = int(runs[i])
        request.num_computed_tokens = int(c[i]) + n
        request.num_output_tokens = int(s.outputs[i]) + n
        request.num_emitted = 1
        request.num_scheduled_drafts = 0
        if request.second_token_at is None:
            request.second_token_at = ends_at[1]
        request.last_token_at = ends_at[n]
        request.last_token_pass = rank.num_passes + n - 1
    for a, finished in done.items():
        for request in finished:
            request.finished_at = ends_at[a]
    return used.tolist(), done


def _finish(sched: VllmScheduler, request) -> None:
    """A request reaching its stop in the run: as ``update_from_output`` retires it."""
    request.num_draft_tokens = 0
    request.status = RequestStatus.FINISHED
    sched._free(request)
