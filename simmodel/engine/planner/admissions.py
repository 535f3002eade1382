"""Admissions inside a run: each rank's own scheduler admits, as ``schedule()`` would after planning the
running requests, and what it admits becomes new columns of the run (``run.Run``)."""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.scheduler.base import SchedulerOutput
from simmodel.perf.timing import DECODE, PREFILL

if TYPE_CHECKING:
    from simmodel.engine.request import Request


class Admissions:
    """What ``run.Run`` does when a row's plan admits requests (its columns, totals and KV operations are
    ``Run``'s)."""

    def admit(self, k: int, arrived_before: int | None = None) -> list[SchedulerOutput]:
        """Every rank's admissions when row k is planned (its decodes planned already), as ``schedule()`` makes
        them after planning the running requests (async: seeing the requests ``arrived_before``)."""
        outs = []
        for r, (sched, pool) in enumerate(zip(self.scheds, self.pools)):
            if self.finishes[r]:  # the scheduler's list, as the passes before left it
                sched.drop_finished()
                self.finishes[r] = False
            cfg = sched.config
            eligible = len(sched.running) + len(sched.waiting) + len(sched.handoffs)
            threshold = cfg.long_prefill_token_threshold if eligible > 1 else 0
            out = SchedulerOutput()
            sched.start_plan()
            used = pool.num_used_blocks
            budget = cfg.max_num_batched_tokens - int(self.cells[k, r, DECODE])  # after the row's decodes
            skipped = self.skipped[r] = sched.admit_waiting(budget, threshold, out, arrived_before)
            self.admitted_blocks[k, r] += pool.num_used_blocks - used
            self.capacity_bound[r] = len(sched.waiting) + len(sched.handoffs) > skipped
            outs.append(out)
        self.plans_by_row[k] = outs
        self.worker.mark_planned()
        return outs

    def take(self, k: int, outs: list[SchedulerOutput], admitted_at: int) -> bool:
        """Add the requests admitted in row k (planned at ``admitted_at``) as columns and price the rows from
        k again; False if the admission is not whole prompts alone (the row is then handed over: ``refused``)."""
        taken = self._take(k, outs, admitted_at)
        if not taken:
            self.refused = k
        return taken

    def _take(self, k: int, outs: list[SchedulerOutput], admitted_at: int) -> bool:
        self.last_admission = k
        waits = [bool(sched.waiting) for sched in self.scheds]
        admitted = any([out.admitted for out in outs])
        reserved = any(self.admitted_blocks[k].tolist())  # a P/D decode rank reserved blocks for incoming KV
        if not admitted and not any(waits) and not reserved:
            return False
        for r, (sched, out, skipped) in enumerate(zip(self.scheds, outs, self.skipped)):
            if (sched.handoffs or out.resumed or skipped or not all(out.samples)
                    or len(sched.running) > sched.config.max_num_batched_tokens):
                return False
            if (waits[r] and len(sched.running) < sched.config.max_num_seqs
                    and (out.admitted or self.cells[k, r, PREFILL + 1])):
                return False  # budget spent on prefill is back in the next row, which may admit the next one
        self.waits = waits
        if not admitted:  # the row only decodes: the first waiting request does not fit yet, or its KV is
            self._kv_check(k + 1)  # still to come (its blocks reserved)
            return True
        max_model_len, bs = self.scheds[0].config.max_model_len, self.bs
        staged = self.recorder.staged
        callback_ends_run = not self.calls_back_inside
        for out in outs:
            for request, decode in zip(out.requests, out.is_decode):
                if (min(request.max_tokens, max_model_len - request.num_prompt_tokens) < 1
                        or callback_ends_run and request.on_finish is not None
                        or request.num_output_tokens or request.bootstrap
                        or request.kv_transferred is not decode or (staged and request.stage != self.stage)):
                    return False  # (a received P/D handoff is admitted as a decode, a prompt as a prefill)
        cells, rows = self.cells, self.rows
        for r, out in enumerate(outs):
            prefill = cells[k, r]
            for request, q, c, decode in zip(out.requests, out.num_new_tokens, out.num_context_tokens,
                                             out.is_decode):
                prompt, blocks = request.num_prompt_tokens, request.num_blocks
                left = min(request.max_tokens, max_model_len - prompt)
                context = prompt - 1
                self._column(request, r, context, left, k, blocks, request.num_cached_blocks)
                if decode:  # a received handoff: its first pass decodes the prompt's last token, sampling the
                    request.decode_admitted_at = admitted_at  # client's first token (which follows none)
                    self.first_decodes[k, r] += 1
                    lo = k
                else:
                    request.first_admitted_at = admitted_at
                    prefill[PREFILL] += 1  # its prefill: q new tokens on c cached, sampling its first token
                    prefill[PREFILL + 1] += q
                    prefill[PREFILL + 2] += c
                    prefill[PREFILL + 3] += q * c + q * (q + 1) // 2
                    prefill[PREFILL + 4] += 1
                    lo = k + 1
                hi = min(k + left, rows)
                if lo < hi:  # its decodes: context + j − k tokens in KV in row j
                    cells[lo:hi, r, DECODE:DECODE + 5] += self.ramp[lo:hi]
                    cells[lo:hi, r, DECODE + 2:DECODE + 4] += context - k
                    positions = (blocks - self.fixed_blocks) // self.position_blocks
                    j = k + max(-(-(context + 1) // bs), positions) * bs - context  # its first block boundary
                    if j < hi:
                        self.allocations[j:hi:bs, r] += self.position_blocks
                        self.total_allocations[r] += self.position_blocks * len(range(j, hi, bs))
                if k + left > self.last:
                    self.last = k + left
        self._kv_check(k + 1)
        return self.price_from(k)

    def slot_decision(self, valid: int) -> int | None:
        """While requests wait on a rank (``waits``): the first decision that retires a request there since the
        last admission (a request is retired at the decision ending its last row, which plans row
        d + 1 + lag; an admission into row k saw the decisions before k − lag), if it comes before the run's
        last delivery (synchronous: the row it plans is delivered too); None: none."""
        if not any(self.waits):
            return None
        since = self.last_admission - self.lag  # (it only grows: the rows before it are dropped for good)
        d = None
        for heap, waits in zip(self.last_rows, self.waits):
            if waits:
                while heap and heap[0] < since:
                    heappop(heap)
                if heap and (d is None or heap[0] < d):
                    d = heap[0]
        return d if d is not None and d < valid - 1 + self.lag else None

    def _column(self, request: Request, r: int, context: int, left: int, first: int, blocks: int,
                cached: int) -> None:
        """Add a request admitted on rank r in row ``first`` (its prefill) as the last column."""
        i = self.n
        if i == len(self.left):
            for name in ("context", "outputs", "left", "first", "blocks", "cached", "rank_of", "prefills"):
                array = getattr(self, name)
                setattr(self, name, np.concatenate((array, np.zeros_like(array))))
        self.context[i], self.left[i], self.first[i], self.blocks[i], self.cached[i] = (
            context, left, first, blocks, cached)
        self.outputs[i], self.prefills[i], self.rank_of[i] = 0, True, r
        self.requests.append(request)
        self.n = i + 1
        heappush(self.last_rows[r], first + left - 1)
        self._schedule_ops(i, first, left, context, blocks, cached, True)
