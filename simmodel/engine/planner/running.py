"""The state a run of passes starts from: the running requests of every rank of a worker, as arrays.

In steady serving most passes are alike: the same running requests each decode one token. Such a pass
changes only counters (one more computed and one more output token per request, a KV block whenever a
sequence crosses a block boundary), so the pass planner (``planner``) plans a whole run of them from
these arrays, with one call of the timing model, instead of request by request. ``RunningRequests.gather`` reads
them, and says whether the worker is in a state such a run may start from: a scheduler this planner serves
(``planner == "vllm"``: vLLM's without speculative decoding or sliding-window KV cache groups, TensorRT-LLM's),
every running request mid-decode (or sampling in the pass just planned), nothing
waiting (unless the run admits it itself), no prefill leg, no KV released at a pass end. Anything else
runs pass by pass.
"""

from __future__ import annotations

from operator import attrgetter, is_
from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.scheduler.vllm import VllmScheduler

if TYPE_CHECKING:
    from simmodel.engine.worker import Worker

_FIELDS = attrgetter("num_computed_tokens", "num_prompt_tokens", "num_output_tokens", "max_tokens", "num_blocks",
                     "num_cached_blocks", "last_token_pass", "is_prefill_chunk")
_FIRST, _CALL = attrgetter("first_token_at"), attrgetter("on_finish")
_ASYNC = attrgetter("num_output_placeholders", "num_in_flight_tokens", "num_stale_output_tokens")

MAX_RUN = 1024
"""Most passes one run covers (bounds the arrays priced at once)."""

PRICED_AHEAD = 64
"""Rows a run prices at a time (``Run.priced_further`` prices more when it reaches them): the requests it takes
(arrivals; P/D handoffs and a closed loop's next requests, placed on the worker meanwhile) become new columns every
few rows, and each prices the rows after it again."""


class RunningRequests:
    """The running requests of every rank of a worker, rank after rank, as arrays (one entry per request)."""

    def __init__(self, worker: Worker, plans: list | None = None, asynchronous: bool = False,
                 may_wait: bool = False) -> None:
        self.worker = worker
        self.may_wait = may_wait
        """Whether requests may wait when the run starts (every sequence slot taken, or the first pass planned
        already, leaving them waiting): nothing lets one in before a request finishes, and a run tries
        again after each finish (``planner``)."""
        self.ranks = worker.ranks
        self.asynchronous = asynchronous
        """vLLM's async scheduling: ``plans`` is the pass in flight, and each pass is planned while the one
        before it runs (see ``planner.async_run``)."""
        self.plans = plans
        """The ranks' plans of the run's first pass when the schedulers have planned it already, or None."""
        self.requests: list = []
        self.bounds = [0]
        """Request columns of rank r: ``bounds[r]:bounds[r + 1]``."""

    def _waiting_stays(self, s: VllmScheduler, plan) -> bool:
        """Whether the requests waiting on a rank stay waiting through the run's first plan: only if the run
        may start with requests waiting (``may_wait``), none is a preempted one whose stale output is still in
        flight (a plan steps over it), and every slot is taken or (synchronous) that plan, ``plan``, is made
        already and spent no token budget on prefill (else the budget is back in the pass after it).

        So do the requests whose prefix landed from a host KV tier (``handoffs``, every one of them ``loading``):
        the plan tries them first, with no lookup (their blocks are theirs already), so they wait for the same
        slot, blocks or budget. A P/D handoff never does (its first pass is a decode the run would have to
        admit)."""
        if not self.may_wait or any(q.num_stale_output_tokens for q in s.waiting):
            return False
        if s.handoffs and not s.loading.issuperset(s.handoffs):
            return False
        if len(s.running) >= s.config.max_num_seqs:
            return True
        return plan is not None and not self.asynchronous and all(plan.is_decode)

    def gather(self) -> bool:
        """Read every rank's running requests; False if any rank is not in a coalescable state.

        Without plans, every running request must be mid-decode. With the first pass planned (it may
        admit requests), the plan must run every running request to the end of its sequence, so that
        every one samples, and leave nothing waiting (but see ``may_wait``).
        """
        requests, plans = self.requests, self.plans
        for r, rank in enumerate(self.ranks):
            s = rank.scheduler
            if (s.planner != "vllm" or s.async_scheduling != self.asynchronous
                    or s.config.num_speculative_tokens or rank.has_pending_releases or s.pool.sliding
                    or s.pool.states):
                return False  # (KV cache groups that free blocks behind a window or a state: pass by pass)
            if (s.waiting or s.handoffs) and not self._waiting_stays(s, None if plans is None else plans[r]):
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

    def per_rank(self, matrix: np.ndarray) -> np.ndarray:
        """Row sums of a (passes, requests) matrix per rank, shape (passes, ranks)."""
        return per_rank_sums(matrix, self.bounds)


def per_rank_sums(matrix: np.ndarray, bounds: list[int]) -> np.ndarray:
    """Row sums of a (passes, requests) matrix per rank, the requests of rank r in columns
    ``bounds[r]:bounds[r + 1]``; shape (passes, ranks)."""
    if len(bounds) == 2:
        return matrix.sum(axis=1)[:, None]
    return np.stack([matrix[:, a:b].sum(axis=1) for a, b in zip(bounds, bounds[1:])], axis=1)


def rows_within(end: np.ndarray, rows: int, horizon: float, limits, start: int) -> int:
    """Of a run's first ``rows`` rows (their passes ending at ``end``, the first starting at ``start``), how
    many it may take: each ends before ``horizon`` and starts within the time limit of ``limits``."""
    end = end[:rows]
    last = end[rows - 1] if rows else None  # (a search only where the last row reaches a bound)
    v = rows
    if last is not None and last >= horizon:
        v = int(end.searchsorted(horizon, side="left"))
    if limits is not None:
        if start > limits.max_time_ns:
            return 0
        if last is not None and last > limits.max_time_ns:
            v = min(v, 1 + int(end.searchsorted(limits.max_time_ns, side="right")))
    return v


def joined(labels: list[tuple[str, ...]]) -> list[str]:
    """Each pass's provenance labels joined by "+" (most runs have one set of labels for every pass)."""
    first = labels[0]
    if all(p is first for p in labels):
        return ["+".join(first)] * len(labels)
    return ["+".join(p) for p in labels]
