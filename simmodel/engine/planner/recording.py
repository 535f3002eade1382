"""Recording a run's rows as the pass-by-pass loop records its passes: pass rows, events and inter-token
intervals, in the barrier's order."""

from __future__ import annotations

import numpy as np

from simmodel.engine.planner.running import joined
from simmodel.engine.recorder import Event as EventRow
from simmodel.engine.recorder import EventKind, PassEnd, PassRecord
from simmodel.perf.timing import DECODE, PREFILL


class Recording:
    """What ``run.Run`` records (its rows, columns and totals are ``Run``'s)."""

    def _record(self, m: int) -> None:
        """Record rows 0..m − 1 at once (see ``_record_rows``) and count them as started."""
        used = self._used(m)
        if self.lag:
            used[0] = [plan.kv_blocks_used for plan in self.in_flight_plans]
        self._record_rows(0, m, used)
        s = self.lag  # the passes started in the run: synchronous 0..m − 1, async 1..m
        self.worker.count_run(m, self.labels[s:m + s], int(self.busy[m - 1 + s].max()))

    def _starts(self, lo: int, hi: int) -> np.ndarray:
        """When rows lo..hi − 1 start: row 0 at ``start0``, each other one as the row before it ends."""
        if lo == 0:
            return np.concatenate(([self.start0], self.end[:hi - 1]))
        return self.end[lo - 1:hi - 1]

    def _record_rows(self, lo: int, hi: int, used: np.ndarray) -> None:
        """Record rows lo..hi − 1 of a run applied when it starts as the pass-by-pass loop records their passes
        (``used``: each one's blocks in use per rank): per row, every rank's admissions and then every rank's
        begin event, then per rank its first tokens, finishes and end event. Async, a row's begin event (and its
        admissions) is appended when it is planned, before the outputs of the row before it are delivered."""
        worker, rec, R = self.worker, self.recorder, self.num_ranks
        role, w = worker.role, worker.worker_id
        s = self.lag  # rows planned ahead of the deliveries
        cells = self.cells[lo:hi + s, :, :max(DECODE, PREFILL + 1) + 1].astype(np.int64)
        decodes = cells[:, :, DECODE]
        prefill_seqs = cells[:, :, PREFILL]
        prefill_tokens = cells[:, :, PREFILL + 1]
        tokens = decodes + prefill_tokens
        m = hi - lo
        starts = self._starts(lo, hi + s)
        ends = self.end[lo:hi]
        gaps = (ends - starts[:m]).tolist()
        values, counts = rec.itl_values, rec.itl_counts
        kept = 0
        follows = decodes[:m]  # decodes: their token follows one sampled the pass before
        if self.first_decodes[lo:hi].any():
            follows = follows - self.first_decodes[lo:hi]
        if R == 1:
            for gap, c in zip(gaps, follows[:, 0].tolist()):
                if c > 0:
                    values.append(gap)
                    counts.append(c)
                    kept += 1
        else:
            for gap, row in zip(gaps, follows.tolist()):
                for c in row:
                    if c > 0:
                        values.append(gap)
                        counts.append(c)
                        kept += 1
        if rec.staged:  # a run's intervals are all of one stage
            rec.itl_stages.extend([self.stage] * kept)
        labels = joined(self.labels[lo:hi])
        if m == 1:  # one row: appended rank by rank, as the barrier appends a pass's rows
            self._append_row(lo, int(starts[0]), int(ends[0]), tokens[0], prefill_tokens[0], prefill_seqs[0],
                             decodes[0], used[0], labels[0])
        elif R == 1:
            per_pass = (w, 0, np.arange(self.base + lo, self.base + hi), starts[:m], ends)
        else:
            labels = [label for label in labels for _ in range(R)]
            per_pass = (w, np.tile(np.arange(R), m), np.repeat(np.arange(self.base + lo, self.base + hi), R),
                        np.repeat(starts[:m], R), np.repeat(ends, R))
        if m > 1:
            sampled = decodes[:m] + prefill_seqs[:m]
            rec.passes.extend(role, labels,
                              (*per_pass, tokens[:m].ravel(), prefill_tokens[:m].ravel(), prefill_seqs[:m].ravel(),
                               decodes[:m].ravel(), sampled.ravel(), used.ravel(), 0, self.busy[lo:hi].ravel(),
                               self.works(hi)[lo:hi].ravel()),
                              int(ends[m - 1]))
        finished = self.finished
        if self.ranks[0].watcher is not None:
            self._tell_watchers(lo, hi)
        if self.ranks[0].offload is not None:
            self._tell_offloads(lo, hi)
        if not (rec.keep_events or rec.sink is not None):
            rec.num_done += sum(len(done) for k, done in finished.items() if lo <= k < hi)
            return
        new_event = tuple.__new__
        PASS_END, FIRST_TOKEN, FINISH = EventKind.PASS_END, EventKind.FIRST_TOKEN, EventKind.FINISH
        requests, rank_of, outputs, left = self.requests, self.rank_of, self.outputs, self.left
        firsts = self._first_tokens()
        rows = []
        add = rows.append
        per_row, start_list, end_list = tokens.tolist(), starts.tolist(), ends.tolist()
        for x in range(m):
            k = lo + x
            t1 = end_list[x]
            # Row k + s is planned (its begin appended) as row k − 1 ends.
            self._begin_events(k + s, start_list[x], start_list[x + s], per_row[x + s], add)
            done = finished.get(k, ())
            for r in range(R):
                for request in firsts.get((k, r), ()):
                    add(new_event(EventRow, (t1, FIRST_TOKEN, w, r, request.request_id, 1, role, -1)))
                for i in done:  # with all its outputs (a run applied as its passes end delivers them later)
                    if R == 1 or rank_of[i] == r:
                        add(new_event(EventRow, (t1, FINISH, w, r, requests[i].request_id,
                                                 int(outputs[i] + left[i]), role, -1)))
                add(new_event(EventRow, (t1, PASS_END, w, r, -1, per_row[x][r], role, self.base + k)))
        rec.add_events(rows)

    def _tell_watchers(self, lo: int, hi: int) -> None:
        """Tell the router watching the ranks (``Rank.watcher``) what rows lo..hi − 1 of a run applied when it
        starts did, row by row as the pass-by-pass loop tells it: the admissions of each row's plan (async: of
        the row planned as it starts), then per rank its first tokens and finishes. (The run ends before the
        router is asked again, at the next arrival: ``traffic.source.RoutedAtArrival``.)"""
        s, ranks, rank_of = self.lag, self.ranks, self.rank_of
        firsts, requests, finished, plans_by_row = self._first_tokens(), self.requests, self.finished, self.plans_by_row
        rows = {k - s for k in plans_by_row if lo <= k - s < hi and k not in self.recorded_rows}
        rows.update(k for k in finished if lo <= k < hi)
        rows.update(k for k, _ in firsts if lo <= k < hi)
        for k in sorted(rows):
            for rank, out in zip(ranks, () if k + s in self.recorded_rows else plans_by_row.get(k + s) or ()):
                rank.watcher.on_plan(rank, out)
            done = finished.get(k, ())
            for r, rank in enumerate(ranks):
                mine = [(requests[i], 0) for i in done if self.num_ranks == 1 or rank_of[i] == r]
                first = firsts.get((k, r), ())
                if mine or first:
                    rank.watcher.on_pass_end(rank, first, mine)

    def _tell_offloads(self, lo: int, hi: int) -> None:
        """Tell each rank's host KV tier (``Rank.offload``) of the requests rows lo..hi − 1 finish, row by row
        as ``Rank.record_pass_end`` does (its next lookup or store comes after the run, at a plan of its own),
        and that the run planned rows itself (plans that looked nothing up and stored nothing)."""
        requests, rank_of, ranks, end = self.requests, self.rank_of, self.ranks, self.end
        for k in sorted(k for k in self.finished if lo <= k < hi):
            for i in self.finished[k]:
                ranks[int(rank_of[i])].offload.finished(requests[i], int(end[k]))
        if hi > (1 if self.planned_first else 0):
            self.planned_itself()

    def planned_itself(self) -> None:
        """The run planned a row itself: each rank's host KV tier learns of it as the rank's own plan would have told
        it (``VllmCpuOffload.planned_in_run``: a plan that looked nothing up and stored nothing leaves the tiering
        manager's poll open, so the next lookup polls). A run applied as its passes end tells it as it plans each
        row (``plan_first``, ``plan_row``); a run applied ahead, as it records its rows (``_tell_offloads``)."""
        if self.ranks[0].offload is not None:
            for rank in self.ranks:
                rank.offload.planned_in_run()

    def _record_row(self, k: int, used: list[int]) -> bool:
        """Record row k of a run applied as its passes end (``used``: its blocks in use per rank), rank by rank
        as the pass barrier finishes each rank's pass (``Rank.record_pass_end``, which the pass-by-pass loop
        records through too): a finish that calls back does so as it is recorded, its request delivered first
        (``deliver_finished``). Returns whether a finish called back."""
        role, w = self.worker.role, self.worker.worker_id
        start = int(self.start0 if k == 0 else self.end[k - 1])
        end = int(self.end[k])
        index = self.base + k
        cells = self.cells[k].astype(np.int64).tolist()
        follow = [sums[DECODE] - first for sums, first in zip(cells, self.first_decodes[k].tolist())]
        busy, work = self.busy[k].tolist(), self.works(k + 1)[k].tolist()
        label = "+".join(self.labels[k])
        rec = self.recorder
        # (for the events, and for a router watching the ranks)
        firsts = self._first_tokens() if rec.keep_events or rec.sink is not None or self.ranks[0].watcher else {}
        done = self.finished.get(k, ())
        requests, rank_of, outputs, left = self.requests, self.rank_of, self.outputs, self.left
        called_back = False
        for r, rank in enumerate(self.ranks):
            sums = cells[r]
            decodes, prefill_seqs, prefill_tokens = sums[DECODE], sums[PREFILL], sums[PREFILL + 1]
            mine = done if self.num_ranks == 1 or not done else [i for i in done if rank_of[i] == r]
            # Its decodes' tokens follow ones sampled the pass before: one interval, the pass gap, for them all.
            row = PassRecord(role, w, r, index, start, end, decodes + prefill_tokens, prefill_tokens, prefill_seqs,
                             decodes, decodes + prefill_seqs, used[r], 0, busy[r], work[r], label)
            pass_end = PassEnd(row, end, [(end - start, follow[r], self.stage)], firsts.get((k, r), ()),
                               [(requests[i], int(outputs[i] + left[i])) for i in mine] if mine else ())
            hook = (lambda j, mine=mine: self.deliver_finished([mine[j]])) if mine else None
            called_back |= rank.record_pass_end(pass_end, hook)
        return called_back

    def _first_tokens(self) -> dict[tuple[int, int], list]:
        """(row, rank): the requests whose first token that row samples (kept until a column is added)."""
        n = self.n
        if self.firsts_of != n:
            firsts: dict[tuple[int, int], list] = {}
            first, rank_of, requests = self.first[:n], self.rank_of, self.requests
            for i in np.flatnonzero(self.prefills[:n]).tolist():
                firsts.setdefault((int(first[i]), int(rank_of[i])), []).append(requests[i])
            self.firsts, self.firsts_of = firsts, n
        return self.firsts

    def _append_row(self, k: int, start: int, end: int, tokens: np.ndarray, prefill_tokens: np.ndarray,
                    prefill_seqs: np.ndarray, decodes: np.ndarray, used: np.ndarray, label: str) -> None:
        """Append row k's pass rows, one per rank (the values per rank)."""
        worker, passes = self.worker, self.recorder.passes
        role, w, index = worker.role, worker.worker_id, self.base + k
        for r, (t, pt, ps, d, u, b, a) in enumerate(zip(tokens.tolist(), prefill_tokens.tolist(), prefill_seqs.tolist(),
                                                          decodes.tolist(), used.tolist(), self.busy[k].tolist(),
                                                          self.works(k + 1)[k].tolist())):
            passes.append(PassRecord(role, w, r, index, start, end, t, pt, ps, d, d + ps, u, 0, b, a, label))

    def _begin_events(self, j: int, planned_at: int, start: int, tokens: list[int], add) -> None:
        """Append row j's admissions (planned at ``planned_at``) and every rank's begin event (at ``start``,
        ``tokens`` scheduled per rank)."""
        worker = self.worker
        role, w, new_event = worker.role, worker.worker_id, tuple.__new__
        for r, out in enumerate(() if j in self.recorded_rows else self.plans_by_row.get(j) or ()):
            for request, q in zip(out.requests, out.num_new_tokens):
                add(new_event(EventRow, (planned_at, EventKind.ADMISSION, w, r, request.request_id, q, role, -1)))
        for r in range(self.num_ranks):
            add(new_event(EventRow, (start, EventKind.PASS_BEGIN, w, r, -1, tokens[r], role, self.base + j)))
