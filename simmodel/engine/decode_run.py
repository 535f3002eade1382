"""Coalesced decode runs: a worker's stretch of decode-only passes applied in one vectorized step.

In steady serving most passes are alike: the same running requests each decode one token, nothing
arrives, nothing is admitted. Such a pass changes only counters (one more computed and one more output
token per request, a KV block whenever a sequence crosses a block boundary), so a run of them needs no
per-request Python work per pass: ``advance`` prices the whole run with one call of the timing model,
applies every block allocation, prefix-cache insertion and finish in the order the pass-by-pass
scheduler would, and records exactly the pass rows, events and inter-token intervals it would have
recorded. A faster path that changed an answer would be a bug: ``tests/scenarios/test_decode_runs.py``
compares whole runs with coalescing on and off, byte for byte.

A run covers passes 1..m after the pass just ended — or, when the ranks have just planned a pass that runs
every running request to the end of its sequence (admitting new requests with their whole prompt), that
pass and the decodes after it — and only while nothing outside the worker can see or change it: every
pass of the run ends strictly before the next event of any other process (an arrival, a transfer,
another worker's pass end, the end of the run), so no one observes the worker mid-run and the event log,
ordered by time, is the same. It stops before a pass that would preempt (not
enough free KV blocks), before a request whose finish calls back into the simulation (closed-loop
clients, P/D handoffs) would finish, at the safety limits, and when every request has finished.
Requests finishing inside the run leave it as they would (status, blocks freed, ``FINISH`` event).

Only vLLM's scheduler without speculative decoding is coalesced (synchronous with ``advance``, async with
``advance_async``), and only from a state where every rank's queue is empty and every running request
sampled in the pass just ended (or samples its first token in the planned pass); anything else runs pass
by pass. With one-rank workers that only their own arrivals reach (``Worker.arrivals``: an open-loop load
placed by a router that reads no state), ``carried_run`` goes further: each worker's runs go on through its
arrivals, admitting each in the pass planned after it, whatever the other workers do. ``docs/speed.md`` has the details.
"""

from __future__ import annotations

from operator import attrgetter, is_
from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.clock import NS_PER_S
from simmodel.engine.recorder import PASS_INT_FIELDS, EventKind
from simmodel.engine.recorder import Event as EventRow
from simmodel.engine.request import RequestStatus
from simmodel.engine.scheduler.base import SchedulerOutput
from simmodel.engine.scheduler.vllm import VllmScheduler
from simmodel.perf.timing import (
    CONTEXT_TOKENS,
    NEW_TOKENS,
    PAIRS,
    SAMPLED,
    SEQUENCES,
    SUM_COLUMNS,
    PassSums,
    price_passes,
)

if TYPE_CHECKING:
    from simmodel.engine.worker import Worker

_FIELDS = attrgetter("num_computed_tokens", "num_prompt_tokens", "num_output_tokens", "max_tokens", "num_blocks",
                     "num_cached_blocks", "last_token_pass", "is_prefill_chunk")
_TOKENS, _PREFILL_TOKENS, _PREFILL_SEQS, _DECODES = (PASS_INT_FIELDS.index(name) for name in (
    "num_scheduled_tokens", "num_prefill_tokens", "num_prefill_seqs", "num_decode_seqs"))
_FIRST, _CALL, _LEG = attrgetter("first_token_at"), attrgetter("on_finish"), attrgetter("bootstrap")
_ASYNC = attrgetter("num_output_placeholders", "num_in_flight_tokens", "num_stale_output_tokens")

MAX_RUN = 256
"""Most passes one run covers (bounds the arrays priced at once)."""


def _cdiv(a: np.ndarray, b: int) -> np.ndarray:
    return -(-a // b)


class DecodeRun:
    """The running requests of every rank of a worker, rank after rank, as arrays, and the matrices of
    the run's candidate passes (one row per pass, one column per request)."""

    def __init__(self, worker: Worker, plans: list | None = None, asynchronous: bool = False,
                 may_wait: bool = False) -> None:
        self.worker = worker
        self.may_wait = may_wait
        """Whether requests may wait when the run starts (every sequence slot taken, or the first pass planned
        already, leaving them waiting): nothing lets one in before a request finishes, and a carried run tries
        again after each finish (``carried_run``)."""
        self.ranks = worker.ranks
        self.asynchronous = asynchronous
        """vLLM's async scheduling: ``plans`` is the pass in flight, and each pass is planned while the one
        before it runs (see ``advance_async``)."""
        self.plans = plans
        """The ranks' plans of the run's first pass when the schedulers have planned it already, or None."""
        self.requests: list = []
        self.bounds = [0]
        """Request columns of rank r: ``bounds[r]:bounds[r + 1]``."""

    def _waiting_stays(self, s: VllmScheduler) -> bool:
        """Whether the requests waiting on a rank stay waiting through the run's first plan: only if the run
        may start with requests waiting (``may_wait``), none is a preempted one whose stale output is still in
        flight (a plan steps over it), and every slot is taken or (synchronous) that plan is made already."""
        if not self.may_wait or any(q.num_stale_output_tokens for q in s.waiting):
            return False
        return len(s.running) >= s.config.max_num_seqs or (self.plans is not None and not self.asynchronous)

    def gather(self) -> bool:
        """Read every rank's running requests; False if any rank is not in a coalescable state.

        Without plans, every running request must be mid-decode. With the first pass planned (it may
        admit requests), the plan must run every running request to the end of its sequence, so that
        every one samples, and leave nothing waiting (but see ``may_wait``).
        """
        requests, plans = self.requests, self.plans
        for r, rank in enumerate(self.ranks):
            s = rank.scheduler
            if (type(s) is not VllmScheduler or s.handoffs or s.async_scheduling != self.asynchronous
                    or s.config.num_speculative_tokens or rank.has_pending_releases):
                return False
            if s.waiting and not self._waiting_stays(s):
                return False
            running = s.running
            if len(running) > s.config.max_num_batched_tokens:
                return False  # the token budget cuts the run's passes short
            if plans is not None:
                plan = plans[r]
                if (plan.preempted or plan.resumed or len(plan.requests) != len(running) or not all(plan.samples)
                        or not all(map(is_, plan.requests, running))):
                    return False
            requests.extend(running)
            self.bounds.append(len(requests))
        if not requests:
            return False
        if any(map(_LEG, requests)):
            return False  # a prefill leg hands off when it finishes
        self.stage = 0
        if self.ranks[0].recorder.staged:  # a run's intervals are recorded under one stage
            stages = {r.stage for r in requests}
            if len(stages) > 1:
                return False
            self.stage = stages.pop()
        firsts = list(map(_FIRST, requests))
        if plans is None and None in firsts:
            return False  # a request yet to sample its first token is mid-prefill
        n = len(requests)
        self.new = np.zeros(n, dtype=bool) if plans is None else np.array([f is None for f in firsts], dtype=bool)
        """Requests whose first token the run's first pass samples (planned runs only)."""
        calls = list(map(_CALL, requests))
        self.calls_back = None if calls.count(None) == n else np.array([c is not None for c in calls], dtype=bool)
        """Requests whose finish calls back into the simulation (None: no one's)."""
        if self.asynchronous:  # exactly the pass in flight has outputs to come, none stale
            state = np.array(list(map(_ASYNC, requests)), dtype=np.int64)
            planned = [k for plan in plans for k in plan.num_new_tokens]
            if np.any(state[:, 0] != 1) or np.any(state[:, 2] != 0) or state[:, 1].tolist() != planned:
                return False
        rows = np.array(list(map(_FIELDS, requests)), dtype=np.int64)
        computed, prompt, self.outputs = rows[:, 0], rows[:, 1], rows[:, 2]
        # Every rank has run as many passes as the others; a request that sampled before sampled in the
        # pass just ended (so its interval is the pass gap).
        if plans is None:  # decoding: one token left to compute, not mid-prefill (a nonzero flags a miss)
            if ((computed - prompt - self.outputs + 1) | rows[:, 7] | (rows[:, 6] - (self.ranks[0].num_passes - 1))).any():
                return False
        elif (((rows[:, 6] - (self.ranks[0].num_passes - 1)) * ~self.new)  # planned: every sequence computed
              | (computed - prompt - self.outputs)).any():  # to its end, and a request not new sampled last pass
            return False
        # As if mid-decode: pass j (from 2 on, planned runs) has computed + j − 1 tokens of context.
        self.blocks, self.cached = rows[:, 4], rows[:, 5]
        max_model_len = self.ranks[0].scheduler.config.max_model_len
        # Passes until each request stops: max_tokens outputs, or its sequence reaching max_model_len.
        self.state = np.array([prompt + self.outputs - 1, self.outputs,
                               np.minimum(rows[:, 3] - self.outputs, max_model_len - prompt - self.outputs)])
        """Rows: computed (as if mid-decode), outputs, passes left; ``computed``, ``outputs``, ``left`` view them."""
        self.computed, self.outputs, self.left = self.state
        self.rank_of = np.repeat(np.arange(len(self.ranks)), np.diff(self.bounds)) if len(self.ranks) > 1 else \
            np.zeros(len(requests), dtype=np.int64)
        return True

    def candidates(self, num_passes: int) -> None:
        """The matrices of passes 1..num_passes: who is still running, and who takes a KV block."""
        bs = self.ranks[0].pool.block_size
        j = np.arange(num_passes)[:, None]
        self.active = self.left > j
        context = self.computed + j  # tokens in KV before pass j + 1 (its one new token makes cj)
        self.context = context
        self.cj = context + 1  # computed tokens once pass j + 1 is planned
        # A pass takes a block when its token starts one (cdiv(cj) > cdiv(cj − 1)) past those held.
        self.grows = (context % bs == 0) & (context >= self.blocks * bs) & self.active
        if self.plans is not None:
            self.grows[0] = False  # the planned pass took its blocks already

    def per_rank(self, matrix: np.ndarray) -> np.ndarray:
        """Row sums of a (passes, requests) matrix per rank, shape (passes, ranks)."""
        if len(self.ranks) == 1:
            return matrix.sum(axis=1)[:, None]
        return np.stack([matrix[:, a:b].sum(axis=1) for a, b in zip(self.bounds, self.bounds[1:])], axis=1)

    def allocations(self, num_passes: int) -> np.ndarray:
        """Blocks taken per pass and rank, shape (passes, ranks)."""
        return self.per_rank(self.grows[:num_passes])


def advance(worker: Worker, horizon: int, arrival: int | None = None, plans: list | None = None) -> int | None:
    """Coalesce the decode passes that follow now; returns the end of the run's last pass, with every pass
    applied and recorded, or None if no pass qualifies.

    Every pass ends before ``horizon`` (the next event that may read or change the worker). ``arrival``, if
    given, is the next arrival, known to only append a request to a rank's queue: a pass planned before
    it may still run, since its plan could not have seen the request (but not one ending at that very
    instant, whose outputs would be recorded after the arrival). ``plans``, if given, are the ranks' plans
    of the pass starting now (the run's first pass, maybe admitting requests), made by the schedulers.
    (With one rank, ``carried_run.carry`` goes on through arrivals instead.)
    """
    now = worker.env.now
    if arrival is None:
        arrival = horizon
    typical = worker.decode_pass_ns or worker.last_pass_ns
    if plans is None and now + typical >= horizon:
        return None  # the next pass would most likely end past the horizon: not worth gathering
    run = DecodeRun(worker, plans)
    if not run.gather():
        return None
    limit = min(_pass_cap(run, now, horizon, arrival), int(run.left.max()))
    if limit < 1:
        return None
    run.candidates(limit)
    limit = _kv_limit(run, limit)
    if limit < 1:
        return None
    seconds, labels = _price(run, limit)
    busy = busy_ns(seconds)
    if busy is None:
        return None
    end = now + np.cumsum(busy[:, 0] if busy.shape[1] == 1 else busy.max(axis=1))
    start = np.concatenate(([now], end[:-1]))
    m = _run_length(worker, start, end, horizon, arrival, start)
    if m < 1:
        return None
    _apply(run, m, start[:m], end[:m], busy[:m], labels[:m])
    return int(end[m - 1])


def _pass_cap(run: DecodeRun, now: int, horizon: int, arrival: int) -> int:
    """Passes worth pricing: to the horizon at the last pass's pace (a longer run continues as the next
    one), and not past a finish that calls back (it acts at that time) or the pass limit."""
    worker = run.worker
    cap = min(MAX_RUN, (min(horizon, arrival) - now) // max(worker.decode_pass_ns or worker.last_pass_ns, 1) + 2)
    if run.calls_back is not None:
        cap = min(cap, int(run.left[run.calls_back].min()) - 1)
    if worker.limits is not None:
        cap = min(cap, worker.limits.spec.max_passes - worker.limits.num_passes)
    return int(cap)


def busy_ns(seconds: np.ndarray) -> np.ndarray | None:
    """Each pass's and rank's time in integer nanoseconds, or None where one would not fit the clock (the
    pass-by-pass path then reports it)."""
    if not (seconds.max() * NS_PER_S < 2**62 and seconds.min() >= 0):  # NaN fails both, infinities one
        return None
    return np.rint(seconds * NS_PER_S).astype(np.int64)


def _run_length(worker: Worker, planned: np.ndarray, delivered: np.ndarray, horizon: int, arrival: int,
                started: np.ndarray) -> int:
    """How many of the candidate steps the run takes: each step's outputs are delivered before ``horizon``
    and not at the arrival, its plan made before the arrival, and its pass started within the time limit;
    a last step spanning the arrival only if no later request then arrives (``_may_span``)."""
    ok = (delivered < horizon) & (planned < arrival) & (delivered != arrival)
    if worker.limits is not None:
        ok &= started <= worker.limits.max_time_ns
    m = len(ok) if ok.all() else int(np.argmin(ok))
    if m and delivered[m - 1] > arrival and not _may_span(worker, int(delivered[m - 1])):
        m -= 1  # the step spanning the arrival would end as a later request arrives (or one over the limit)
    return m


def _may_span(worker: Worker, end: int) -> bool:
    """A run may end at ``end`` after the next arrival: unless a later arrival comes at that very instant
    (it would be recorded before the pass end), or an arrival by then breaks ``limits.max_requests``."""
    return worker.arrivals is not None and worker.arrivals.quiet_until(end)


def _kv_limit(run: DecodeRun, limit: int) -> int:
    """Passes the run can take before one would need more KV blocks than its rank has free (vLLM would
    preempt there). Frees from requests finishing in the run count (only when needed), conservatively
    with prefix caching (only blocks no other request shares)."""
    run.allocs = run.allocations(limit)
    taken = run.taken = np.cumsum(run.allocs, axis=0)
    if len(run.ranks) == 1:
        free = run.ranks[0].pool.num_free_blocks
        if taken[-1, 0] <= free:
            return limit
        free = np.array([free])
    else:
        free = np.array([rank.pool.num_free_blocks for rank in run.ranks])
        if not (taken > free).any():
            return limit
    for r, rank in enumerate(run.ranks):
        short = np.nonzero(taken[:, r] > free[r])[0]
        if not short.size:
            continue
        first = int(short[0])  # the first pass short of blocks if nothing were freed
        pool, bs = rank.pool, rank.pool.block_size
        frees = np.zeros(len(taken) + 1, dtype=np.int64)  # frees[j]: blocks returned at the end of pass j
        for i in range(run.bounds[r], run.bounds[r + 1]):
            left = int(run.left[i])
            if left > first:
                continue
            final = max(int(run.blocks[i]), -(-(int(run.computed[i]) + left) // bs))
            if pool.caching:
                own = sum(1 for b in run.requests[i].block_ids if pool.ref_cnt[b] == 1)
                frees[left] += own + final - int(run.blocks[i])
            else:
                frees[left] += final
        freed = np.cumsum(frees[:-1])  # freed[j]: returned by passes 1..j, before pass j + 1 is planned
        if run.asynchronous:  # pass j + 1 is planned before pass j ends
            freed = np.concatenate(([0], freed[:-1]))
        short = np.nonzero(taken[:, r] > free[r] + freed)[0]
        if short.size:
            limit = min(limit, int(short[0]))
    return limit


def _price(run: DecodeRun, n: int) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """Seconds per pass and rank, shape (n, ranks), for passes 1..n of the run, priced from their
    per-rank totals (``PassSums``): each decoding request computes one token on its context, cj − 1
    (in a planned first pass too), and a prefill of the planned first pass is read from its plan."""
    worker, num_ranks = run.worker, len(run.ranks)
    active = run.active[:n]
    run.count = run.per_rank(active)  # requests running in each pass (and rank): they all sample
    count = run.count.ravel()
    context = run.per_rank(np.where(active, run.context[:n], 0)).ravel()
    capacity = worker.kv_capacity_tokens
    capacity = np.full(n, capacity[0]) if num_ranks == 1 else np.tile(capacity, n)
    sums = PassSums(np.zeros((n * num_ranks, len(SUM_COLUMNS))), capacity, n)
    pre, dec = sums.kinds()
    dec[:, SEQUENCES] = dec[:, NEW_TOKENS] = dec[:, SAMPLED] = count  # decodes: one new token each, all sample
    dec[:, CONTEXT_TOKENS] = context
    dec[:, PAIRS] = context + count  # query·key pairs: context + 1 per decode
    if run.plans is not None:  # the planned first pass's prefills (each samples: see ``gather``), not decodes
        first = run.context[0]
        for r, plan in enumerate(run.plans):
            for k, (q, c, d) in enumerate(zip(plan.num_new_tokens, plan.num_context_tokens, plan.is_decode)):
                if not d:
                    pre[r] += (1, q, c, q * c + q * (q + 1) // 2, 1)  # SEQUENCES … SAMPLED
                    x = int(first[run.bounds[r] + k])
                    dec[r] -= (1, 1, x, x + 1, 1)
    run.first_pass = PassSums(sums.table[:num_ranks], capacity[:num_ranks])
    return price_passes(worker.timing, sums, n)


def _apply(run: DecodeRun, m: int, start: np.ndarray, end: np.ndarray, busy: np.ndarray,
           labels: list[tuple[str, ...]]) -> None:
    """Apply passes 1..m to the ranks' requests and pools and record them as the pass-by-pass path would."""
    worker, ranks = run.worker, run.ranks
    ends = end.tolist()
    ends_at = [int(start[0]), *ends]  # ends_at[k]: when run pass k ends (k = 0: the pass before the run)
    provenance = joined(labels)
    worker.count_run(m, labels, ends[-1] - int(start[-1]))

    count = run.count[:m]
    used_before = np.array([rank.pool.num_used_blocks for rank in ranks])
    finished, returned = _pool_ops(run, m)
    # Blocks in use when each pass was planned: allocations so far, minus the frees of earlier pass ends.
    used = used_before + run.taken[:m]
    if finished:
        used[1:] -= np.cumsum(returned[1:m], axis=0)
    _deliver(run, m, ends_at, finished)
    _record(run, m, start, end, busy, provenance, count, used, finished)


def joined(labels: list[tuple[str, ...]]) -> list[str]:
    """Each pass's provenance labels joined by "+" (most runs have one set of labels for every pass)."""
    first = labels[0]
    if all(p is first for p in labels):
        return ["+".join(first)] * len(labels)
    return ["+".join(p) for p in labels]


def _deliver(run: DecodeRun, m: int, ends_at: list[int], finished: dict[int, list]) -> None:
    """The requests and schedulers once passes 1..m delivered their tokens (``ends_at[j]``: when pass j
    ended); async, the requests still running have pass m + 1 in flight."""
    ranks = run.ranks
    base = ranks[0].num_passes
    runs = np.minimum(run.left, m).tolist()
    planned = np.minimum(run.left, m + 1).tolist() if run.asynchronous else runs
    computed, outputs = run.computed.tolist(), run.outputs.tolist()
    second = ends_at[1]
    for i, request in enumerate(run.requests):
        n = runs[i]
        request.num_computed_tokens = computed[i] + planned[i]
        request.num_output_tokens = outputs[i] + n
        if run.asynchronous:
            request.num_output_placeholders = request.num_in_flight_tokens = planned[i] - n
            request.is_prefill_chunk = False
        request.num_emitted = 1
        request.num_scheduled_drafts = 0
        if request.first_token_at is None:  # the first pass samples its first token (planned runs)
            request.first_token_at = second
            if n >= 2:
                request.second_token_at = ends_at[2]
        elif request.second_token_at is None:
            request.second_token_at = second
        request.last_token_at = ends_at[n]
        request.last_token_pass = base + n - 1
    for k, done in finished.items():
        for _, request in done:
            request.finished_at = ends_at[k]
    for r, rank in enumerate(ranks):
        rank.num_passes += m
        rank.last_delivery = ends_at[m]
        sched = rank.scheduler
        sched.prefill_capacity_bound = False
        sched.finished_since_schedule = any(q == r for q, _ in finished.get(m, ()))
        if finished and run.bounds[r] < run.bounds[r + 1]:
            sched.running = [q for q in sched.running if q.status is RequestStatus.RUNNING]


def _record(run: DecodeRun, m: int, start: np.ndarray, end: np.ndarray, busy: np.ndarray, provenance: list[str],
            count: np.ndarray, used: np.ndarray, finished: dict[int, list]) -> None:
    """Record passes 1..m as the barrier records them: pass rows, inter-token intervals and events, each
    event appended when the pass-by-pass path appends it (the log is ordered by time, then by that order).

    Synchronous: per pass, each rank's begin event; then per rank its first-token and finish events and
    its end event. Asynchronous (the arrays then also hold pass m + 1, left in flight): a pass's begin
    events are appended when it is planned, during the pass before the one before it ends.
    """
    worker = run.worker
    rec = worker.ranks[0].recorder
    R = len(run.ranks)
    role, w = worker.role, worker.worker_id
    flat = count.ravel()
    n = m * R  # rows of the delivered passes
    tokens = flat.tolist()  # per row: scheduled tokens (decodes: one per sampling request)
    consecutive = tokens[:n]  # per row: requests whose token follows one sampled in the pass before
    head = None
    if run.plans is not None:  # the planned first pass: its own tokens, prefills and first tokens
        pre, dec = run.first_pass.kinds()
        pre_seqs, pre_new = pre[:, SEQUENCES].astype(np.int64).tolist(), pre[:, NEW_TOKENS].astype(np.int64).tolist()
        dec_seqs = dec[:, SEQUENCES].astype(np.int64).tolist()
        tokens[:R] = (pre[:, NEW_TOKENS] + dec[:, NEW_TOKENS]).astype(np.int64).tolist()
        head = {_TOKENS: tokens[:R], _PREFILL_TOKENS: pre_new, _PREFILL_SEQS: pre_seqs, _DECODES: dec_seqs}
        news = [int(np.count_nonzero(run.new))] if R == 1 else np.bincount(run.rank_of[run.new], minlength=R).tolist()
        for r in range(R):
            consecutive[r] -= news[r]
    gaps = (end[:m] - start[:m]).tolist()
    values, counts = rec.itl_values, rec.itl_counts
    kept = 0
    for i, c in enumerate(consecutive):
        if c > 0:
            values.append(gaps[i // R])
            counts.append(c)
            kept += 1
    if rec.staged:
        rec.itl_stages.extend([run.stage] * kept)
    first_index = run.ranks[0].num_passes - m
    if R == 1:
        per_pass = (w, 0, np.arange(first_index, first_index + m), start[:m], end[:m])
    else:
        per_pass = (w, np.tile(np.arange(R), m), np.repeat(np.arange(first_index, first_index + m), R),
                    np.repeat(start[:m], R), np.repeat(end[:m], R))
    rec.passes.extend(role, provenance[:m] if R == 1 else [p for p in provenance[:m] for _ in range(R)],
                      (*per_pass, flat[:n], 0, 0, flat[:n], flat[:n], used[:m].ravel(), 0, busy[:m].ravel()),
                      int(end[m - 1]), head)
    if not (rec.keep_events or rec.sink is not None):
        rec.num_done += sum(len(done) for done in finished.values())
        return
    firsts: list[list] = [[] for _ in range(R)]
    for i in np.flatnonzero(run.new).tolist() if run.plans is not None else ():
        firsts[run.rank_of[i]].append(run.requests[i])
    new_event = tuple.__new__
    PASS_BEGIN, PASS_END, FINISH = EventKind.PASS_BEGIN, EventKind.PASS_END, EventKind.FINISH
    FIRST_TOKEN = EventKind.FIRST_TOKEN
    rows = []
    add = rows.append
    per_pass = [tokens[k:k + R] for k in range(0, len(tokens), R)]
    starts, ends = start.tolist(), end.tolist()

    def begin(k: int) -> None:  # pass k + 1 starts
        for r in range(R):
            add(new_event(EventRow, (starts[k], PASS_BEGIN, w, r, -1, per_pass[k][r], role, first_index + k)))

    def deliver(k: int) -> None:  # pass k + 1 ends
        t1, done = ends[k], finished.get(k + 1)
        for r in range(R):
            if k == 0:
                for request in firsts[r]:
                    add(new_event(EventRow, (t1, FIRST_TOKEN, w, r, request.request_id, 1, role, -1)))
            if done:
                for q, request in done:
                    if q == r:
                        add(new_event(EventRow, (t1, FINISH, w, r, request.request_id, request.num_output_tokens,
                                                 role, -1)))
            add(new_event(EventRow, (t1, PASS_END, w, r, -1, per_pass[k][r], role, first_index + k)))

    for k in range(m):
        if run.asynchronous:  # pass k + 2 was planned (and its begin appended) before pass k + 1 ended
            begin(k + 1)
            deliver(k)
        else:
            begin(k)
            deliver(k)
    rec.add_events(rows)



# -- asynchronous scheduling ------------------------------------------------------------------------

def advance_async(worker: Worker, horizon: int, arrival: int | None, in_flight: tuple) -> tuple | None:
    """Coalesce decode passes under vLLM's async scheduling; returns the new pass in flight (as the
    worker's async loop keeps it: plans, start, cost, end) and the time the run's last outputs are
    delivered, or None if no run qualifies.

    Called at the end of pass k − 1, once its outputs are processed, with pass k in flight (``in_flight``)
    and pass k + 1 about to be planned. A run of M passes processes the outputs of passes k … k + M − 1 and
    plans passes k + 1 … k + M, each while the one before it runs, exactly as the loop would: pass j is
    planned when pass j − 2's outputs are in (its blocks are taken before pass j − 1's finishes free
    theirs), prefix-cache insertions follow the delivered tokens, and pass k + M is left in flight. Every
    output delivery ends before ``horizon``; every planning comes before ``arrival`` (a plan never sees a
    request arriving after it), and no delivery coincides with it.
    """
    now = worker.env.now
    if arrival is None:
        arrival = horizon
    if worker.launch is not None:
        return None  # launches move the planning times
    plans, first_start, (first_busy, first_provenance), first_end = in_flight
    if first_end >= horizon or first_end == arrival or now >= arrival:
        return None
    run = DecodeRun(worker, plans, asynchronous=True)
    if not run.gather():
        return None
    # M passes delivered, M + 1 planned: the last planned one must still have a request.
    limit = min(_pass_cap(run, now, horizon, arrival), int(run.left.max()) - 1)
    if limit < 1:
        return None
    run.candidates(limit + 1)
    limit = min(limit, _kv_limit(run, limit + 1) - 1)
    if limit < 1:
        return None
    seconds, labels = _price(run, limit + 1)
    busy = busy_ns(seconds)
    if busy is None:
        return None
    busy[0] = first_busy  # the pass in flight was priced when it started
    labels[0] = tuple(first_provenance.split("+")) if first_provenance else ()
    end = first_end + np.concatenate(([0], np.cumsum(busy[1:].max(axis=1))))  # end[j]: pass j + 1 ends
    # Step j plans pass j + 2 when pass j ends, then delivers pass j + 1; passes 2 … M + 1 start as the one
    # before them ends.
    delivered = end[:limit]
    m = _run_length(worker, np.concatenate(([now], end[:limit - 1])), delivered, horizon, arrival, delivered)
    if m < 1:
        return None
    start = np.concatenate(([first_start], end[:m]))
    new_in_flight = _apply_async(run, m, start, end[:m + 1], busy[:m + 1], labels[:m + 1], first_provenance)
    return new_in_flight, int(end[m - 1])


def _apply_async(run: DecodeRun, m: int, start: np.ndarray, end: np.ndarray, busy: np.ndarray,
                 labels: list[tuple[str, ...]], first_provenance: str) -> tuple:
    """Deliver passes 1..m of the run and plan passes 2..m + 1 (async order); returns the pass left in flight."""
    worker, ranks = run.worker, run.ranks
    R = len(ranks)
    ends = end.tolist()
    ends_at = [int(start[0]), *ends]  # ends_at[j]: when run pass j ends (j = 0: the pass before the run)
    provenance = [first_provenance, *joined(labels[1:])] if m else [first_provenance]
    worker.count_run(m, labels[1:], int(busy[m].max()))  # passes 2..m + 1 started in the run
    worker.open_pass_ends.remove(ends[0])
    worker.open_pass_ends.append(ends[m])

    count = run.count[:m + 1]
    allocs = run.allocs[:m + 1]
    used_now = np.array([rank.pool.num_used_blocks for rank in ranks])
    finished, returned = _pool_ops(run, m)
    # Blocks in use when pass j (2..m + 1) was planned: its allocations and earlier ones, minus the frees
    # of passes 1..j − 2 (pass j − 1 was still running).
    taken = np.cumsum(allocs, axis=0)
    freed = np.concatenate((np.zeros((2, R), np.int64), np.cumsum(returned[1:m], axis=0)))[:m + 1]
    used = used_now + taken - freed
    used[0] = [plan.kv_blocks_used for plan in run.plans]
    # Request state: outputs delivered through pass m; those still running have pass m + 1 in flight.
    _deliver(run, m, ends_at, finished)
    # The pass left in flight, as the scheduler would have planned it.
    active = run.active[m]
    contexts = run.context[m].tolist()
    new_plans = []
    for r in range(len(ranks)):
        lo, hi = run.bounds[r], run.bounds[r + 1]
        plan = SchedulerOutput()
        plan.requests = [q for q, a in zip(run.requests[lo:hi], active[lo:hi]) if a]
        n = len(plan.requests)
        plan.num_new_tokens, plan.is_decode, plan.samples = [1] * n, [True] * n, [True] * n
        plan.num_context_tokens = [c for c, a in zip(contexts[lo:hi], active[lo:hi]) if a]
        plan.kv_blocks_used = int(used[m, r])
        new_plans.append(plan)
    _record(run, m, start, end, busy, provenance, count, used, finished)
    return new_plans, ends[m - 1], (busy[m], provenance[m]), ends[m]


def _pool_ops(run: DecodeRun, m: int) -> tuple[dict[int, list], np.ndarray]:
    """Apply the run's block allocations, prefix-cache insertions and finishes in the order vLLM makes them,
    for passes 1..m delivered (and, async, pass m + 1 planned). Returns the requests finishing at the end
    of each pass (by pass number, with their rank) and the blocks returned then per rank, shape
    (m + 1, ranks).

    Synchronous: pass by pass, each request's allocation then its caching in running order, finishes at
    the pass end. Async: pass j's blocks are taken (and its delivered tokens cached) when it is planned,
    right after pass j − 2's outputs are processed; processing a pass's outputs caches the blocks its
    delivered tokens fill, then retires the finished.
    """
    ranks, requests = run.ranks, run.requests
    left = run.left
    planned = m + 1 if run.asynchronous else m
    returned = np.zeros((m + 1, len(ranks)), dtype=np.int64)
    finished: dict[int, list] = {}
    pool0 = ranks[0].pool
    if not pool0.caching:  # counted blocks: only the totals matter
        ending = np.nonzero(left <= m)[0].tolist()
        final_blocks = np.maximum(run.blocks, _cdiv(run.computed + np.minimum(left, planned), pool0.block_size))
        taken = run.allocs[:planned].sum(axis=0).tolist()
        for r, rank in enumerate(ranks):
            rank.pool.take_for_run(taken[r])
        for request, blocks in zip(requests, final_blocks.tolist()):
            request.num_blocks = blocks
        for i in ending:
            request, r, k = requests[i], int(run.rank_of[i]), int(left[i])
            returned[k, r] += request.num_blocks
            ranks[r].scheduler.retire(request)
            finished.setdefault(k, []).append((r, request))
        return finished, returned
    steps, columns = np.nonzero((_async_ops if run.asynchronous else _sync_ops)(run, m))
    # Decode each operation from its step and column (see ``_sync_ops``): code = phase × 2 + kind.
    if run.asynchronous:  # a finish at step s: in pass s
        finish_at, actions = 0, (_CACHE, _FINISH, _ALLOCATE, _CACHE_NEXT)
    else:  # a finish at step a: in pass a + 1
        finish_at, actions = 1, (_ALLOCATE, _CACHE_NEXT, _FINISH, None)
    width = 2 * len(requests)
    computed, rank_of = run.computed.tolist(), run.rank_of.tolist()
    pools = [rank.pool for rank in ranks]
    for s, c in zip(steps.tolist(), columns.tolist()):
        phase, c = divmod(c, width)
        i = c >> 1
        action = actions[2 * phase + (c & 1)]
        request, r = requests[i], rank_of[i]
        if action is _ALLOCATE:
            request.block_ids.append(pools[r].allocate_one())
            request.num_blocks = len(request.block_ids)
        elif action is _FINISH:
            pool = pools[r]
            before = pool.num_free_blocks
            ranks[r].scheduler.retire(request)
            returned[s + finish_at, r] += pool.num_free_blocks - before
            finished.setdefault(s + finish_at, []).append((r, request))
        else:  # the tokens known: computed + s, and one more once the step's pass is planned or ended
            pools[r].cache_full_blocks(request, computed[i] + s + (action is _CACHE_NEXT))
    return finished, returned


_ALLOCATE, _CACHE, _CACHE_NEXT, _FINISH = "allocate", "cache", "cache next", "finish"


def _sync_ops(run: DecodeRun, m: int) -> np.ndarray:
    """Synchronous order: step a plans pass a + 1 (phase 0: per request in running order, its allocation,
    then its caching of the tokens computed + a + 1) and ends it (phase 1: the finished retire).

    Returned as a boolean matrix, one row per step and columns [phase 0: (request, kind) interleaved;
    phase 1: likewise], so that ``np.nonzero`` lists the operations in order: step, phase, request, kind.
    """
    bs, n = run.ranks[0].pool.block_size, len(run.requests)
    cj = run.cj[:m]
    ops = np.zeros((m, 4 * n), dtype=bool)
    ops[:, 0:2 * n:2] = run.grows[:m]
    ops[:, 1:2 * n:2] = ((cj // bs) > np.maximum(run.cached, (cj - 1) // bs)) & run.active[:m]
    ops[:, 2 * n::2] = run.left == np.arange(1, m + 1)[:, None]  # finishing in pass a + 1
    return ops


def _async_ops(run: DecodeRun, m: int) -> np.ndarray:
    """Async order: at step s (0..m) the outputs of pass s are processed (phase 0: per request, its tokens
    known, computed + s, cached, then its finish) and pass s + 2 is planned (phase 1: per request, its
    block, then its delivered tokens, computed + s + 1, cached). A cache insertion happens only where it
    reaches a new block. Same matrix layout as ``_sync_ops``."""
    bs, n = run.ranks[0].pool.block_size, len(run.requests)
    computed, left = run.computed, run.left
    s = np.arange(m + 1)[:, None]
    targets = np.empty((2 * (m + 1), n), dtype=np.int64)
    targets[0::2] = np.where((s >= 1) & (s <= np.minimum(left, m)), (computed + s) // bs, -1)
    targets[1::2] = np.where(s + 2 <= np.minimum(left, m + 1), (computed + s + 1) // bs, -1)
    reach = np.maximum.accumulate(np.vstack((run.cached[None, :], targets)), axis=0)
    effective = targets > reach[:-1]
    ops = np.zeros((m + 1, 4 * n), dtype=bool)
    ops[:, 0:2 * n:2] = effective[0::2]
    ops[:, 1:2 * n:2] = left == s  # finishing in pass s, retired as its outputs are processed
    ops[:m, 2 * n::2] = run.grows[1:m + 1]  # allocations of passes 2..m + 1 (row a: planned at step a)
    ops[:, 2 * n + 1::2] = effective[1::2]
    return ops
