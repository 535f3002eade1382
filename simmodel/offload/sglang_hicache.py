"""SGLang's HiCache on one rank: the copies between the radix tree's GPU and host pages, and when they end.

The tree (``engine.hiradix_cache.HiRadixCache``) decides what is backed up, demoted, evicted and loaded; this
class times the copies on the rank's host link (``link.HostLink``, one queue each way) and applies their
acknowledgements, following SGLang 0.5.23 (``docs/research/sglang-hicache.md``):

- **backups** (GPU to host) an insertion made are copied behind the pass that computed the KV: every backup
  made processing one pass's outputs is one copy, queued on the store link then (``flush``). The path of each
  stays locked on the GPU until the copy has landed *and* a plan has reaped it (SGLang polls its copies at the
  start of every plan: ``reap``), so freshly written KV cannot be evicted meanwhile.
- **write-back** copies made while evicting stall the scheduler: the next pass starts once they have landed.
- **loads** (host to GPU) are taken at admission and copied *during* the pass that admits them, layer by layer
  beside its forward pass: the pass lasts as long as the longer of the two (``pass_ns``). The loaded nodes
  stay locked until a plan after that pass reaps the load.

Nothing here is on a request's path but loads and write-back stalls; a load never makes a request wait in
the queue (SGLang admits it into the very pass that reads the KV). With a storage tier behind the host pool
(``sglang_storage.SglangStorage``, ``l3``) every acknowledged copy is written on to it, and a request may wait
for its prefetch from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simmodel.engine.recorder import EventKind
from simmodel.offload.link import HostLink
from simmodel.offload.protocol import PassBytes

if TYPE_CHECKING:
    import simpy

    from simmodel.engine.hiradix_cache import HiRadixCache
    from simmodel.engine.radix_cache import RadixNode
    from simmodel.engine.recorder import Recorder
    from simmodel.engine.request import Request
    from simmodel.engine.scheduler.base import SchedulerOutput
    from simmodel.offload.sglang_storage import SglangStorage


class SglangHiCache:
    """One rank's HiCache copies: its tree's host tier timed on the rank's two host-link queues."""

    retrying = False
    """(The host-tier protocol of ``Worker``'s runs: nothing here retries a lookup.)"""

    def __init__(self, env: simpy.Environment, cache: HiRadixCache, load_link: HostLink, store_link: HostLink,
                 page_tokens: int, page_bytes: float, gpu_page_bytes: float, l3: SglangStorage | None = None) -> None:
        self.env, self.cache = env, cache
        self.load_link, self.store_link = load_link, store_link
        self.block_size = page_tokens
        self.block_bytes = page_bytes
        """Bytes of one page over the rank's GPUs (what the summary reports)."""
        self.gpu_page_bytes = gpu_page_bytes
        """One GPU's share of a page: what one GPU copies over its own link (they copy at once)."""
        self.plan_at: int | None = None
        """The time of the plan being made, when not now (``Rank.plan``)."""
        self.on_loaded = self.on_wake = None
        self.l3 = l3
        """The storage tier behind the host pool (``--hicache-storage-backend``), or None; it logs through ``event``."""
        if l3 is not None:
            l3.on_event = self.event
        self.recorder: Recorder | None = None
        self.where: tuple[int, int, str] = (0, 0, "")
        self._acks: list[tuple[int, list[RadixNode], list[int], int]] = []
        """Copies queued, in the order they land: (when, the nodes each unlocks once reaped, the tree's loads
        it completes, the pages a backup copies)."""
        self._loads: list[tuple[RadixNode, int]] = []
        """Loads for the pass being planned or run (node, the tree's load number), reaped by a plan after it."""
        self.num_hit_tokens = 0
        """Prompt tokens loaded from the host at first admissions (the summary's host hits)."""
        self.num_storage_hit_tokens = 0
        self.pass_bytes = PassBytes()
        self.storage = None if l3 is None else l3.storage
        self._wake: int | None = None
        self.pages_loaded = self.pages_stored = 0
        self.num_loads = 0

    def event(self, at: int, kind: EventKind, request_id: int, tokens: int, pass_index: int = -1) -> None:
        """Log an event of the rank's tier (request −1: a pass's copy), if the rank records events."""
        if self.recorder is not None:
            worker, rank, role = self.where
            self.recorder.event(at, kind, worker, rank, request_id, tokens, role, pass_index)

    # -- time ---------------------------------------------------------------------------------------
    def _now(self) -> int:
        return self.env.now if self.plan_at is None else self.plan_at

    def next_event_ns(self, waiting: bool = False, at: int = 0) -> float:
        """(Nothing here acts on its own between passes: a run of passes needs no bound from it.)"""
        return float("inf")

    def reap(self) -> None:
        """A plan starts: the copies that have landed by now are acknowledged and their nodes unlocked; the
        storage tier's own acknowledgements are drained."""
        acks, l3 = self._acks, self.l3
        if not acks and l3 is None:
            return
        now, cache = self._now(), self.cache
        k = 0
        while k < len(acks) and acks[k][0] <= now:
            for node in acks[k][1]:
                cache.unlock(node)
            for load in acks[k][2]:
                cache.load_acked(load)
            k += 1
        if k:
            del acks[:k]
        if l3 is not None:
            l3.drain(now)

    @property
    def waking(self) -> bool:
        """Whether the rank will plan again when a copy lands (``stalled``)."""
        return self._wake is not None

    def settle(self) -> None:
        """The rank is idle (no request, no pass): the copies landed by now are reaped, as SGLang's idle loop
        polls them."""
        self.reap()

    def cold_start(self) -> None:
        """The worker left (its tree emptied by the scheduler, ``reset_prefix_cache``): nothing is in flight, and
        its storage tier (a local disk) leaves with it."""
        self._acks.clear()
        self._loads.clear()
        if self.l3 is not None:
            self.l3.clear(self.env.now)

    def pages_in_flight(self) -> int:
        """Pages whose copies to the host are queued and not reaped (each locks its node's path on the GPU)."""
        return sum(ack[3] for ack in self._acks)

    def stalled(self) -> None:
        """The rank planned nothing while requests wait, some of its KV locked by copies in flight: it plans again
        when the next one lands (SGLang's loop polls; its next plan reaps the copy and may admit then)."""
        at = self._acks[0][0] if self._acks else float("inf")
        if self.l3 is not None:  # (or when a request skipped for its prefetch may be taken)
            at = min(at, self.l3.next_event_ns(self._now()))
        if at != float("inf") and (self._wake is None or at < self._wake):
            self._wake = at
            self.env.timeout(max(at - self.env.now, 0)).callbacks.append(self._woken)

    def _woken(self, _) -> None:
        self._wake = None
        self.on_wake()

    def planned_in_run(self) -> None:
        """(Its copies are reaped by the plans it makes: nothing to note.)"""

    def carried_by_run(self, plan: SchedulerOutput) -> bool:
        """(Its runs are SGLang's decode passes, planned by themselves: none starts with a plan of the ranks that
        copies.)"""
        return False

    def fenced_blocks(self, now: int) -> set[int]:
        """(Its copies hold the tree's nodes, not freed blocks: none.)"""
        return set()

    def storage_mark(self, now: int) -> tuple:
        """(Its runs never go on past waiting requests: the store's version will do.)"""
        storage = self.storage
        if storage is None:
            return ()
        storage.catch_up(now)
        return (storage.version,)

    def flush(self, at: int, pass_index: int = -1) -> None:
        """Pass ``pass_index``'s outputs were processed at ``at``: the backups made since the last flush (its
        insertions, and its plan's re-insertion of a chunk) are queued on the store link then, as one copy
        (SGLang merges a step's backups in one operation)."""
        cache = self.cache
        backups = cache.backups
        if not backups:
            return
        pages = sum(n for _, n in backups)
        nodes = [node for node, _ in backups]
        backups.clear()
        copied = None
        if cache.copied is not None:
            copied, cache.copied["backup"] = cache.copied["backup"], []
        self.pages_stored += pages
        self.pass_bytes.add(pass_index, 0, pages * self.block_bytes)
        _, done = self.store_link.transfer(at, pages * self.gpu_page_bytes)
        self._acks.append((done, nodes, [], pages))
        if copied:  # (written on to storage from its landing: an idle SGLang polls it at once)
            self.l3.write(copied, done, at, pass_index)
        if len(self._acks) > 1 and self._acks[-2][0] > done:  # (a load's acknowledgement may come later)
            self._acks.sort(key=lambda ack: ack[0])
        self.event(at, EventKind.HOST_STORE, -1, pages * self.block_size, pass_index)

    # -- prefetches from storage (``l3``), for the scheduler ---------------------------------------------
    def prefetch(self, request: Request, segments: list, limit: int) -> None:
        """``request`` reaches the scheduler: its pages after the GPU and host match (up to ``limit``) are looked
        up on storage."""
        assert self.l3 is not None
        self.l3.issue(request, segments, limit, self._now())

    def prefetch_due(self, waiting: list[Request]) -> list[Request]:
        """The waiting requests whose refused lookups are made again now."""
        assert self.l3 is not None
        return self.l3.due(waiting)

    def prefetch_ready(self, request: Request) -> bool:
        """Whether the scheduler may take ``request`` now, or skips it for its prefetch (``prefetch_policy``)."""
        assert self.l3 is not None
        return self.l3.ready(request, self._now())

    def retracted(self, request: Request) -> None:
        assert self.l3 is not None
        self.l3.retracted(request)

    # -- loads at admission -------------------------------------------------------------------------
    def loaded(self, request: Request, node: RadixNode, load: int, pages: int, first: bool) -> None:
        """The scheduler loads ``pages`` host pages ending at ``node`` (locked for the load) into the pass being
        planned (the tree's load number ``load``), for ``request`` (``first``: at its first admission, a host
        hit)."""
        self._loads.append((node, load))
        self.pages_loaded += pages
        self.num_loads += 1
        if first:
            self.num_hit_tokens += pages * self.block_size
            request.num_host_cached_tokens = pages * self.block_size

    def admitted(self, request: Request, start: int, loaded: int, first: bool) -> None:
        """``request`` is taken into the pass being planned, its pages ``start``..``start + loaded`` loaded from the
        host: of those, the ones its own prefetch brought from storage count as storage hits (at its first
        admission)."""
        assert self.l3 is not None
        lo, hi = self.l3.admitted(request)
        pages = min(hi, start + loaded) - max(lo, start)
        if first and pages > 0:
            tokens = pages * self.block_size
            request.num_storage_cached_tokens = tokens
            self.num_storage_hit_tokens += tokens

    # -- passes -------------------------------------------------------------------------------------
    def pass_ns(self, plan: SchedulerOutput, start: int, busy_ns: int, pass_index: int = -1) -> int:
        """How long a pass starting at ``start`` that computes for ``busy_ns`` lasts with its host copies: the
        write-back copies its plan waited for first, then the forward pass beside its loads (which start when
        the stall ends, behind earlier loads)."""
        at = start
        if plan.host_synced_pages:
            self.pass_bytes.add(pass_index, 0, plan.host_synced_pages * self.block_bytes)
            _, at = self.store_link.transfer(start, plan.host_synced_pages * self.gpu_page_bytes)
            copied = self.cache.copied
            if copied is not None and copied["synced"]:  # (written on to storage from its landing)
                self.l3.write(copied["synced"], at, start, pass_index)
                copied["synced"] = []
            self.event(start, EventKind.HOST_STORE, -1, plan.host_synced_pages * self.block_size, pass_index)
        end = at + busy_ns
        if plan.host_loaded:
            pages = sum(n for _, n in plan.host_loaded)
            self.pass_bytes.add(pass_index, pages * self.block_bytes, 0)
            begin, landed = self.load_link.transfer(at, pages * self.gpu_page_bytes)
            end = max(end, landed)
            for request, n in plan.host_loaded:
                if request.host_load_start_at is None and request.num_host_cached_tokens:
                    request.host_load_start_at, request.host_load_end_at = begin, landed
                self.event(begin, EventKind.HOST_LOAD_START, request.request_id, n * self.block_size)
                self.event(landed, EventKind.HOST_LOAD_END, request.request_id, n * self.block_size)
        return end - start

    def pass_ended(self, plan: SchedulerOutput, end: int, pass_index: int) -> None:
        """The pass's loads are over: a later plan reaps them (their nodes are unlocked then)."""
        if self._loads:
            self._acks.append((end, [node for node, _ in self._loads], [load for _, load in self._loads], 0))
            self._acks.sort(key=lambda ack: ack[0])
            self._loads = []

    def planned(self, plan: SchedulerOutput, at: int) -> None:
        """(Loads were taken by the scheduler itself; nothing to do at a plan.)"""

    def finished(self, request: Request, at: int) -> None:
        """(A finished request's KV went in the tree at its finish, backed up by the insertion.) Its prefetch
        records go."""
        if self.l3 is not None:
            self.l3.forget(request)

    def storage_figures(self, end_ns: int) -> dict:
        """What the storage tier held and moved (``sglang_storage.SglangStorage.figures``)."""
        assert self.l3 is not None
        return self.l3.figures(end_ns)

    def figures(self, end_ns: int) -> dict:
        """What the tier held and moved, its links' busy time counted up to ``end_ns``."""
        cache = self.cache
        return {"capacity_blocks": cache.host_capacity, "blocks_held": cache.host_tokens, "loads": self.num_loads,
                "blocks_loaded": self.pages_loaded, "blocks_stored": self.pages_stored + cache.num_written_back,
                "blocks_evicted": cache.num_host_evicted, "stores_failed": cache.num_backup_failed,
                "blocks_written_back": cache.num_written_back, "blocks_demoted": cache.num_demoted,
                "bytes_loaded": round(self.pages_loaded * self.block_bytes),
                "bytes_stored": round((self.pages_stored + cache.num_written_back) * self.block_bytes),
                "load_link_busy_ns": self.load_link.busy_until(end_ns),
                "store_link_busy_ns": self.store_link.busy_until(end_ns)}
