"""SGLang HiCache's storage tier (L3, ``--hicache-storage-backend``) behind one rank's host pool.

Follows SGLang 0.5.23 in its default "cache" host-memory mode (``UnifiedRadixCache`` with its cache controller;
the rules and their sources are in ``docs/research/sglang-hicache.md`` §3):

- **writes**: every copy to the host (a write-through backup, or a ``write_back`` copy made while evicting) is
  written on to storage from when it lands (SGLang hands it on when it acknowledges the copy, which an idle
  engine does at once; a busy one at its next plan, up to a pass later: not modeled), in batches of 128 pages on
  the rank's storage write queue; its nodes stay pinned on the host (never evicted from it) from the copy until
  a plan finds the write ended. Storage holds a page once its write ends.
- **prefetch**: when a request reaches the scheduler (and when it comes back retracted), its prompt is matched
  on the GPU and the host; if the match ends on a node backed up on the host (or at the root), the whole pages
  after it up to the longest prefix a match may take are looked up on storage, unless they are fewer than
  ``prefetch_threshold`` tokens or the prefetches in flight already hold half the host pool (then it is looked
  up again later, below). The lookup (existence queries of 128 pages, a job's latency each, stopping at the first
  miss, one lookup after another on a query queue; one stopped before its queries start takes no time there)
  answers what storage holds when it is made. The first plan after the answer takes host pages for the pages
  found (without room for all, evicting host-only leaves for as many pages again; fewer are taken if that is all
  there is, at least the threshold) and queues the read, 128 pages a batch on the storage read queue, one
  prefetch after another; a find below the threshold, or no host room, is dropped. The first plan after the last batch lands puts the pages in the tree as
  host-only nodes; the request then finds them as a host hit and loads them into the pass that admits it.
- **termination** (``prefetch_policy``, ``--hicache-storage-prefetch-policy``): when the scheduler comes to a
  request whose prefetch is not done, ``best_effort`` stops it there (the batches landed are kept, the request
  goes on), ``wait_complete`` skips the request (later ones may be admitted), and ``timeout`` skips it until
  ``prefetch_timeout_base_s + prefetch_timeout_per_ki_token_s × requested tokens / 1024`` after the first plan
  that skipped it, then stops it; the wait is the request's until it is admitted (a lookup made again keeps it,
  and one that ran out stops its lookups until then). A stopped read gives up its batches not started.
- **re-issue**: a request whose lookup was refused for the host pool's share, stopped by ``best_effort`` before
  its answer, found too little or found no host room is looked up again after 8 plans, at most 8 times, as
  SGLang's ``StoragePrefetchRetries`` paces it; never while it heads the queue.

Not modeled: the host-memory "buffer" mode, a lookup re-issued because the GPU match shrank while queued, write
failures and storage back-pressure, and the lookup's answer changing while it is in flight.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from itertools import repeat
from typing import TYPE_CHECKING

from simmodel.config.schema import HICACHE_PREFETCH_POLICIES as PREFETCH_POLICIES
from simmodel.engine.radix_cache import PageRun
from simmodel.engine.recorder import EventKind

if TYPE_CHECKING:
    from simmodel.engine.hiradix_cache import HiRadixCache
    from simmodel.engine.radix_cache import RadixNode
    from simmodel.engine.request import Request
    from simmodel.offload.storage import StorageTier

BATCH_PAGES = 128
"""Pages per storage job (SGLang's ``STORAGE_BATCH_SIZE``)."""
RETRY_INTERVAL = 8
"""Plans between a refused lookup and its re-issue (``hicache_storage_prefetch_retry_poll_interval``)."""
RETRY_MAX_ATTEMPTS = 8
"""Re-issues of one request's lookup at most (``hicache_storage_prefetch_retry_max_attempts``)."""
PREFETCH_SHARE = 0.5
"""Share of the host pool the prefetches in flight may hold before new lookups are refused
(``prefetch_capacity_limit``)."""


def _unlogged(*_) -> None:
    """(No event log.)"""


class _Prefetch:
    """One request's prefetch: looked up, then reading into host pages, until it is done or stopped."""

    __slots__ = ("request", "anchor", "segments", "start", "end", "keys", "found", "issued_at", "queries",
                 "asked_at", "answer_at", "pages", "queued_at", "begin", "batch_ends")

    def __init__(self, request: Request, anchor: RadixNode, segments: list, start: int, end: int, keys: list,
                 issued_at: int, queries: int) -> None:
        self.request, self.anchor, self.segments = request, anchor, segments
        self.start, self.end = start, end
        """The pages looked up: ``start``..``end`` of the request's sequence."""
        self.keys, self.found = keys, len(keys)
        """The keys of the pages found on storage (up to the first it lacks)."""
        self.issued_at, self.queries = issued_at, queries
        self.asked_at: int | None = None
        self.answer_at = 0
        """When its existence queries start and end on the query queue (``SglangStorage._lay_out_queries``)."""
        self.pages = 0
        """Host pages taken for the read (0: not reading yet)."""
        self.queued_at = self.begin = 0
        self.batch_ends: list[int] = []
        """When each batch lands (laid out by ``SglangStorage._lay_out``)."""


def unit_keys(block: Hashable, start: int, end: int, page: int) -> Iterator[tuple]:
    """Storage keys of the tree units ``start``..``end`` of ``block``: a page's first token (which, in simmodel's
    workloads, names its prefix too: trace hash ids are chained, synthetic prompts share only leading segments),
    so the same page has one key whatever node holds it."""
    if isinstance(block, PageRun):
        base, offset = block
        return zip(repeat(base, end - start), range(offset + start * page, offset + end * page, page))
    return zip(repeat(block, end - start), range(start, end))


def segment_keys(segments: Sequence[tuple[Hashable, int]], start: int, end: int, page: int) -> Iterator[tuple]:
    """Storage keys of the units ``start``..``end`` of a sequence given as segments, in order."""
    base = 0
    for block, length in segments:
        lo, hi = max(start - base, 0), min(length, end - base)
        if lo < hi:
            yield from unit_keys(block, lo, hi, page)
        base += length
        if base >= end:
            return


class SglangStorage:
    """One rank's storage tier behind its HiCache host pool: writes, prefetches, their termination and re-issue."""

    def __init__(self, cache: HiRadixCache, storage: StorageTier, query_ns: int, page_tokens: int,
                 policy: str, threshold_tokens: int, timeout_base_ns: int, timeout_per_page_ns: float) -> None:
        if policy not in PREFETCH_POLICIES:
            raise ValueError(f"unknown prefetch policy {policy!r}")
        self.cache, self.storage = cache, storage
        self.query_ns = query_ns
        """One existence query's time (of up to 128 pages): the storage tier's latency."""
        self.page = page_tokens
        self.policy = policy
        self.threshold = -(-threshold_tokens // page_tokens)
        """Pages a lookup must find, and a read take, to go on (``prefetch_threshold`` tokens, in whole pages)."""
        self.timeout_base_ns, self.timeout_per_page_ns = timeout_base_ns, timeout_per_page_ns
        cache.copied = {"backup": [], "synced": []}
        self.limit = int(PREFETCH_SHARE * cache.host_capacity)
        """Host pages the prefetches in flight may hold before new lookups are refused."""
        self.occupied = 0
        """Pages the prefetches in flight asked for (SGLang's ``prefetch_tokens_occupied``, in pages)."""
        self.ops: dict[Request, _Prefetch] = {}
        """Prefetches in flight, in the order they were issued."""
        self._asking: deque[_Prefetch] = deque()
        """Prefetches whose answer a plan has not taken yet, in the order their queries run (one query queue)."""
        self._reading: deque[_Prefetch] = deque()
        """Reads queued on the storage read queue, in order (the first may be under way)."""
        self._writes: deque[tuple[int, list]] = deque()
        """Storage writes not acknowledged: (when they end, the nodes pinned for them), in the order they end."""
        self.fetched: dict[Request, tuple[int, int]] = {}
        """The pages (first, end) a finished prefetch brought into the tree for a request not admitted yet."""
        self._retries: dict[Request, int | None] = {}
        """Requests to look up again, and the plan they are due at (None: from the next plan that sees them)."""
        self._attempts: dict[Request, int] = {}
        self._waits: dict[Request, tuple[int, float]] = {}
        """``timeout``: (the first plan that skipped the request for its prefetch, how long it may wait), kept across
        its lookups until it is admitted (SGLang's ``_storage_prefetch_wait``)."""
        self._expired: set[Request] = set()
        """``timeout``: requests whose wait ran out, looked up no more until they are admitted."""
        self._free_at = 0
        """When the storage read queue is done with the reads that left it."""
        self._query_free = 0
        """When the query queue is done with the queries of lookups stopped while they ran."""
        self._plans = 0
        self.on_event: Callable[..., None] = _unlogged
        """Logs an event of the tier: ``(at, kind, request_id, tokens, pass_index)`` (``SglangHiCache.event``)."""
        self.read_busy: list[tuple[int, int]] = []
        """(start, end) of the batches read."""
        self.num_prefetches = self.num_stopped = self.num_refused = 0

    # -- writes -------------------------------------------------------------------------------
    def write(self, spans_of: list[tuple[list, list]], at: int, queued_at: int, pass_index: int = -1) -> None:
        """Copies to the host (each its nodes and spans) queued at ``queued_at`` and landing at ``at`` are written
        on to storage from then, in batches; their nodes stay pinned until a plan finds the write ended."""
        keys, nodes = [], []
        for chain, spans in spans_of:
            nodes.extend(chain)
            for block, start, end in spans:
                keys.extend(unit_keys(block, start, end, self.page))
        end = at
        for k in range(0, len(keys), BATCH_PAGES):
            end = self.storage.write(keys[k:k + BATCH_PAGES], at)
        self._writes.append((end, nodes))
        if keys:
            self.on_event(queued_at, EventKind.STORAGE_STORE, -1, len(keys) * self.page, pass_index)

    # -- a plan's polls -------------------------------------------------------------------------
    def drain(self, now: int) -> None:
        """SGLang's ``check_hicache_events`` at a plan: writes ended are acknowledged (their pins go), lookups
        answered take host pages and queue their reads, reads landed put their pages in the tree."""
        cache = self.cache
        writes = self._writes
        while writes and writes[0][0] <= now:
            for node in writes.popleft()[1]:
                cache.unpin_host(node)
        asking = self._asking
        while asking and asking[0].answer_at <= now:
            self._take_hit(asking.popleft(), now)
        reading = self._reading
        while reading and reading[0].batch_ends[-1] <= now:
            self._finish(reading[0], len(reading[0].batch_ends), now)

    def _take_hit(self, op: _Prefetch, now: int) -> None:
        """A lookup's answer is drained: host pages for what it found, and its read queued; or it is dropped
        (too little found, no host room) and looked up again later."""
        taken = self.cache.reserve_host(op.found, self.threshold) if op.found >= self.threshold else 0
        if not taken:
            self._drop(op, retry=True)
            return
        op.pages, op.queued_at = taken, now
        self._reading.append(op)
        self._lay_out(now)

    def _batch_ns(self, pages: int) -> int:
        return self.storage.read_link.duration_ns(pages * self.storage.block_bytes)

    def _lay_out(self, now: int) -> None:
        """When each queued read's batches land: one read after another on the storage read queue, from when the
        reads that left it are done (``_free_at``); a read already under way keeps its times."""
        free = self._free_at
        for op in self._reading:
            if op.batch_ends and op.begin <= now:
                free = op.batch_ends[-1]
                continue
            op.begin = t = max(free, op.queued_at)
            ends = []
            for k in range(0, op.pages, BATCH_PAGES):
                t += self._batch_ns(min(BATCH_PAGES, op.pages - k))
                ends.append(t)
            op.batch_ends = ends
            free = t

    def _lay_out_queries(self, now: int) -> None:
        """When each unanswered lookup's existence queries run: one lookup after another on the query queue, none
        before it was made; those under way keep their times (a lookup stopped before its queries start takes
        none: ``_drop``)."""
        free = max(now, self._query_free)
        for op in self._asking:
            if op.asked_at is not None and op.asked_at <= now:  # (under way, or done and not drained yet)
                free = max(free, op.answer_at)
                continue
            op.asked_at = max(free, op.issued_at)
            op.answer_at = free = op.asked_at + op.queries * self.query_ns

    # -- admission ------------------------------------------------------------------------------
    def issue(self, request: Request, segments: list, limit: int, now: int) -> None:
        """SGLang's ``_prefetch_kvcache`` for a request reaching the scheduler: look its pages after the GPU and
        host match up on storage."""
        self._retries.pop(request, None)
        if request in self.ops or request in self._expired:
            return
        cache = self.cache
        matched, node = cache.match(segments, limit)
        if not (node is cache.root or node.host):
            return  # (a match ending on a node not backed up: nothing after it can be on storage)
        span = limit - matched
        if span < self.threshold:
            return
        if self.occupied >= self.limit:
            self.num_refused += 1
            self._retries[request] = None
            return
        storage = self.storage
        storage.catch_up(now)
        held = storage.blocks
        keys = []  # (the pages found, up to the first storage lacks: all a read may take)
        for key in segment_keys(segments, matched, limit, self.page):
            if key not in held:
                break
            keys.append(key)
        queries = min(len(keys) // BATCH_PAGES + 1, -(-span // BATCH_PAGES))
        if node is not cache.root:
            cache.pin_host(node)
        op = self.ops[request] = _Prefetch(request, node, segments, matched, limit, keys, now, queries)
        self._asking.append(op)
        self._lay_out_queries(now)
        self.occupied += span
        self.num_prefetches += 1

    def ready(self, request: Request, now: int) -> bool:
        """SGLang's ``check_prefetch_progress``: whether the scheduler may take ``request`` now (its prefetch, if
        any, done or stopped here by the policy), or must skip it."""
        op = self.ops.get(request)
        if op is None:
            return True
        if self.policy == "wait_complete":
            return False
        if self.policy == "timeout":
            wait = self._waits.get(request)
            if wait is None:  # (the wait starts at the first plan that skips it, for as long as this lookup asks)
                self._waits[request] = (now, self.timeout_base_ns + (op.end - op.start) * self.timeout_per_page_ns)
                return False
            if now - wait[0] <= wait[1]:
                return False
            self._expired.add(request)  # (no lookup again until it is admitted)
        self._stop(op, now, retry=self.policy == "best_effort")
        return True

    def _stop(self, op: _Prefetch, now: int, retry: bool) -> None:
        """The policy stops ``op`` at a plan at ``now``: the batches landed are kept, the one under way goes on
        (its pages are not kept), the rest are not read. Not answered or not reading yet: dropped (``retry``: to
        be looked up again)."""
        self.num_stopped += 1
        if op.pages == 0:  # (its answer not taken yet: it may have come at this very instant, made after the drain)
            self._asking.remove(op)
            if op.answer_at > now:  # (the query under way ends, those not started never run: the later ones move up)
                if op.asked_at <= now and self.query_ns:
                    running = min((now - op.asked_at) // self.query_ns + 1, op.queries)
                    self._query_free = max(self._query_free, op.asked_at + running * self.query_ns)
                self._lay_out_queries(now)
            self._drop(op, retry)
            return
        ends = op.batch_ends
        done = sum(1 for end in ends if end <= now)
        if op.begin > now:
            op.batch_ends = []
        elif done < len(ends):
            op.batch_ends = ends[:done + 1]
        self._finish(op, done, now)

    def _finish(self, op: _Prefetch, done: int, now: int) -> None:
        """The read of ``op`` ends with its first ``done`` batches landed: their pages join the tree, the host
        pages it took and did not fill go back."""
        pages = min(done * BATCH_PAGES, op.pages)
        ends = op.batch_ends
        t = op.begin
        for end in ends:  # (the batches that ran, for the read queue's busy time)
            self.read_busy.append((t, end))
            t = end
        if ends:
            self._free_at = max(self._free_at, ends[-1])
        self._reading.remove(op)
        self._lay_out(now)
        self.storage.fetched(op.keys[:pages])
        added = self.cache.insert_host(op.segments, op.start, op.start + pages, op.pages)
        request = op.request
        if added:  # (the pages that joined are the last ones read)
            self.fetched[request] = (op.start + pages - added, op.start + pages)
        if pages:
            end = ends[done - 1]
            request.storage_load_start_at, request.storage_load_end_at = op.begin, end
            self.on_event(op.begin, EventKind.STORAGE_LOAD_START, request.request_id, pages * self.page, -1)
            self.on_event(end, EventKind.STORAGE_LOAD_END, request.request_id, pages * self.page, -1)
        self._release(op)

    def _drop(self, op: _Prefetch, retry: bool) -> None:
        if retry:
            self._retries[op.request] = None
        self._release(op)

    def _release(self, op: _Prefetch) -> None:
        if op.anchor is not self.cache.root:
            self.cache.unpin_host(op.anchor)
        self.occupied -= op.end - op.start
        del self.ops[op.request]

    # -- re-issue -------------------------------------------------------------------------------
    def due(self, waiting: Sequence[Request]) -> list[Request]:
        """SGLang's ``StoragePrefetchRetries.pop_ready`` at a plan: the waiting requests to look up again now, in
        queue order (a refused lookup is due ``RETRY_INTERVAL`` plans after the first plan that saw it; the
        queue's head never waits for one)."""
        self._plans += 1
        retries = self._retries
        if not waiting or not retries:
            return []
        retries.pop(waiting[0], None)
        step = self._plans
        if not any(due is None or due <= step for due in retries.values()):
            return []
        ready = []
        for request in waiting:
            if request not in retries:
                continue
            if self._attempts.get(request, 0) >= RETRY_MAX_ATTEMPTS:
                del retries[request]
                continue
            due = retries[request]
            if due is None:
                due = retries[request] = step + RETRY_INTERVAL
            if due > step:
                continue
            del retries[request]
            self._attempts[request] = self._attempts.get(request, 0) + 1
            ready.append(request)
        return ready

    def admitted(self, request: Request) -> int:
        """``request`` is taken into a pass: the pages its prefetch brought into the tree (SGLang's
        ``pop_prefetch_loaded_span``), and it leaves the re-issue lists."""
        self._retries.pop(request, None)
        self._attempts.pop(request, None)
        self._waits.pop(request, None)
        self._expired.discard(request)
        return self.fetched.pop(request, (0, 0))

    def forget(self, request: Request) -> None:
        """``request`` finished: nothing is kept for it."""
        self._expired.discard(request)
        self._waits.pop(request, None)
        self.fetched.pop(request, None)

    def retracted(self, request: Request) -> None:
        """``request`` went back to the queue: its count of re-issues starts again."""
        self._attempts.pop(request, None)

    # -- time -----------------------------------------------------------------------------------
    def next_event_ns(self, now: int) -> float:
        """When a plan would next find something changed for a request it skips: a lookup answered, a read
        landed, a ``timeout`` passed."""
        times = [op.answer_at for op in self._asking]
        times += [int(at + wait) + 1 for request, (at, wait) in self._waits.items() if request in self.ops]
        if self._reading:
            times.append(self._reading[0].batch_ends[-1])
        return min((t for t in times if t > now), default=float("inf"))

    def clear(self, at: int) -> None:
        """The worker left at ``at``: nothing is in flight, and its storage goes with it (a local disk)."""
        self.ops.clear()
        self._asking.clear()
        self._reading.clear()
        self._writes.clear()
        self.fetched.clear()
        self._retries.clear()
        self._attempts.clear()
        self._expired.clear()
        self._waits.clear()
        self._query_free = 0
        self.occupied = 0
        self.storage.clear(at)

    def figures(self, end_ns: int) -> dict:
        """The tier's figures (``StorageTier.figures``, its reads timed here), and the prefetches'."""
        reads = sum(min(end, end_ns) - start for start, end in self.read_busy if start < end_ns)
        return {**self.storage.figures(end_ns, reads), "storage_prefetches": self.num_prefetches,
                "storage_prefetches_stopped": self.num_stopped, "storage_prefetches_refused": self.num_refused}
