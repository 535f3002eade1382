"""What a router knows of its pool's load, per attention-DP rank: the bookkeeping a serving router keeps of the
requests it routed.

A router in front of real workers learns of their requests from its own decisions and from what the workers
report back (admissions, first tokens, finishes): Dynamo's KV router keeps, per worker and rank
(``ActiveSequences``), the prompt tokens still to prefill and the prompt blocks of the requests it routed until
they finish; llm-d reads each endpoint's queue length. ``PoolLoads`` keeps both, told by the ranks as the
pass-by-pass loop records each plan and pass end (``Rank.watcher``), so it is never ahead of the clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simmodel.engine.rank import Rank
    from simmodel.engine.request import Request
    from simmodel.engine.scheduler.base import SchedulerOutput
    from simmodel.engine.worker import Worker


class PoolLoads:
    """Per rank of the pool (``ranks``, worker after worker): requests queued (routed, not admitted, or preempted)
    and running (admitted, not finished); prompt tokens routed there and not prefilled yet (each request's prompt
    less the tokens the router expected cached); and the full prompt blocks of the requests routed there and not
    finished, counted once per distinct block (``block_refs``: block key → requests holding it)."""

    def __init__(self, workers: list[Worker]) -> None:
        self.ranks: list[Rank] = [rank for worker in workers for rank in worker.ranks]
        self.index = {id(rank): c for c, rank in enumerate(self.ranks)}
        n = len(self.ranks)
        self.queued = [0] * n
        self.running = [0] * n
        self.prefill_tokens = [0] * n
        self.block_refs: list[dict] = [{} for _ in range(n)]
        self._active: dict[Request, list] = {}
        """Request → [rank index, prompt tokens still counted as to prefill, its block keys, running]."""
        for rank in self.ranks:
            rank.watcher = self

    def routed(self, request: Request, c: int, prefill_tokens: int = 0, keys: list = ()) -> None:
        """``request`` goes to rank ``c``, with ``prefill_tokens`` to compute and its full prompt blocks ``keys``."""
        self.queued[c] += 1
        self.prefill_tokens[c] += prefill_tokens
        refs = self.block_refs[c]
        for key in keys:
            refs[key] = refs.get(key, 0) + 1
        self._active[request] = [c, prefill_tokens, keys, False]

    def active_depth(self, c: int, keys: list, n: int) -> int:
        """How many of the first ``n`` blocks ``keys`` lead the blocks active on rank ``c`` (Dynamo's prefix
        depth of a prompt against the rank's active prompts)."""
        refs = self.block_refs[c]
        for j in range(n):
            if keys[j] not in refs:
                return j
        return n

    def on_plan(self, rank: Rank, plan: SchedulerOutput) -> None:
        """A plan of ``rank`` was recorded: its admissions, resumptions and preemptions."""
        active, c = self._active, self.index[id(rank)]
        for request in plan.preempted:
            entry = active.get(request)
            if entry is not None and entry[3]:
                entry[3] = False
                self.running[c] -= 1
                self.queued[c] += 1
        for group in (plan.admitted, plan.resumed):
            for request in group:
                entry = active.get(request)
                if entry is not None and not entry[3]:
                    entry[3] = True
                    self.queued[c] -= 1
                    self.running[c] += 1

    def on_pass_end(self, rank: Rank, first_tokens, finished) -> None:
        """A pass of ``rank`` ended: the requests that sampled their first token are prefilled; the finished
        ones leave the rank with their blocks."""
        active = self._active
        for request in first_tokens:
            entry = active.get(request)
            if entry is not None and entry[1]:
                self.prefill_tokens[entry[0]] -= entry[1]
                entry[1] = 0
        for request, _ in finished:
            entry = active.pop(request, None)
            if entry is None:
                continue
            c, prefill, keys, running = entry
            self.prefill_tokens[c] -= prefill
            if running:
                self.running[c] -= 1
            else:  # (a handoff done with its one token before the rank admitted it)
                self.queued[c] -= 1
            refs = self.block_refs[c]
            for key in keys:
                left = refs[key] - 1
                if left:
                    refs[key] = left
                else:
                    del refs[key]
