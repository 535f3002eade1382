"""Drive one rank's ``VllmScheduler`` with a real ``VllmCpuOffload`` the way
``tools/oracles/record_vllm_offload_goldens.py`` drives vLLM 0.32.0's scheduler with its offloading connector.

The engine loop is ``tests/stepdriver.run_steps``'s (vLLM's ``EngineCore.step`` / ``step_with_batch_queue``): ``Sk``
is the k-th ``schedule()``, ``Uk`` applies its outputs; sync ``S0 U0 S1 U1 ...``, async ``S0 S1 U0 S2 U1 ...``. The
offload hooks are called as ``Rank`` calls them: after ``Sk``, ``planned(plan, now)`` (the tier takes the slots of
what the pass computes, and of what requests finished before still owe it, and refreshes the finished ones;
with no pass, the copies start at once); at ``Uk`` (``Rank.finish_pass``), ``pass_ended(plan, pass_end, k)``
queues the copies, ``update_from_output`` runs, then ``finished(request, pass_end)`` for each request that
finished (``Rank.record_pass_end``).

Time (the recorder's transfer rule): a step lasts ``STEP_NS``, empty or not, back to back; step k's pass ends at
(k + 1) * STEP_NS, when ``Uk`` runs, and ``Sk`` runs at the time of the output processed last before it (or of the
arrival an idle engine jumps to). Both host links move any transfer in 1 ns, so every copy lands long before the
next step ends. The connector's ``env`` is ``FakeEnv``: ``now`` and ``timeout(delay)``; the driver fires the
callbacks of each timeout (a landed load: ``load_done``; a wake) before the first ``S`` or ``U`` at or after its
instant. The engine keeps stepping while a request is queued, running or loading, or a store has not landed (vLLM
steps while its connector has a transfer job in flight).

Each record: step, scheduled {id: n}, preempted, finished, emitted, hits (tokens computed at admission or
resumption, host loads included), loads {id: blocks} (the loads the step's plan made), stores {id: blocks} (the
blocks the tier took slots for in the step's plan: what its pass computes, and what requests that finished
before it still owed).
"""

from __future__ import annotations

import heapq
import struct
import zlib
from collections import deque

from simmodel.engine.kv_cache import BlockKeys, PrefixCachingBlockPool
from simmodel.engine.recorder import EventKind
from simmodel.engine.request import Request
from simmodel.engine.scheduler.vllm import VllmScheduler, VllmSchedulerConfig
from simmodel.offload import HostLink, HostTier, StorageTier, StoredBlocks, VllmCpuOffload

STEP_NS = 1_000_000
"""One step (a pass, or an empty step) of the golden clock."""


def prompt_crc(ids: list[int]) -> int:
    return zlib.crc32(struct.pack(f"<{len(ids)}i", *ids))


class _Timeout:
    __slots__ = ("callbacks",)

    def __init__(self) -> None:
        self.callbacks: list = []


class FakeEnv:
    """What ``VllmCpuOffload`` reads of a SimPy environment: ``now`` and ``timeout(delay).callbacks``."""

    def __init__(self) -> None:
        self.now = 0
        self._queue: list = []
        self._seq = 0

    def timeout(self, delay: int = 0) -> _Timeout:
        event = _Timeout()
        self._seq += 1
        heapq.heappush(self._queue, (self.now + delay, self._seq, event))
        return event

    @property
    def pending(self) -> bool:
        return bool(self._queue)

    def run_until(self, at: int) -> None:
        """Fire, in time order, the callbacks of every timeout due at or before ``at``; then ``now`` is ``at``."""
        queue = self._queue
        while queue and queue[0][0] <= at:
            when, _, event = heapq.heappop(queue)
            self.now = when
            for callback in event.callbacks:
                callback(event)
        self.now = max(self.now, at)


class _StoreLog:
    """The connector's recorder, keeping only its stores (tokens per request, into ``target``), its reads from
    storage (tokens per request, into ``promotions``) and the tokens it wrote to storage (``cascaded``)."""

    def __init__(self, name) -> None:
        self.name = name
        self.target: dict = {}
        self.promotions: dict = {}
        self.cascaded = 0

    def event(self, at, kind, worker, rank, request_id, tokens, role, pass_index=-1) -> None:
        if kind is EventKind.HOST_STORE:
            rid = self.name(request_id)
            self.target[rid] = self.target.get(rid, 0) + tokens
        elif kind is EventKind.STORAGE_LOAD_START:
            rid = self.name(request_id)
            self.promotions[rid] = self.promotions.get(rid, 0) + tokens
        elif kind is EventKind.STORAGE_STORE:
            self.cascaded += tokens


def run_offload_steps(requests: list[dict], config: VllmSchedulerConfig, num_gpu_blocks: int, block_size: int,
                      host_blocks: int, max_idle_steps: int = 200, hook=None, storage: bool = False) -> list[dict]:
    """One record per ``schedule()`` call (empty ones included), in step order; if more than ``max_idle_steps``
    steps in a row do nothing while requests wait, the records so far. ``hook(step, scheduler, offload,
    plan)``, if given, is called before (plan None) and after each ``schedule()``: a debugging aid. With
    ``storage``, an unbounded storage tier behind the host whose reads and writes take no time (vLLM's ``example``
    secondary tier), and each record adds ``promotions`` {id: blocks the plan's lookups read from storage for
    it}; the last record adds ``cascaded``, the blocks written to storage in all, and ``storage_hits`` {id: tokens
    of its first admission's load read from storage for it}."""
    pool = PrefixCachingBlockPool(num_gpu_blocks - 1, block_size)  # vLLM's null block is not usable
    sched = VllmScheduler(config, pool)
    env = FakeEnv()
    tier = StorageTier(StoredBlocks(None), HostLink(1e9, 0), HostLink(1e9, 0), 0.0) if storage else None
    offload = VllmCpuOffload(env, HostTier(host_blocks), HostLink(1e9, 1), HostLink(1e9, 1), block_size, 0.0, 0.0,
                             tier, pool)
    sched.offload = offload
    offload.on_loaded = sched.load_done
    offload.on_wake = lambda: None
    by_index: dict[int, str] = {}
    made: list[Request] = []

    def name(r) -> str:
        return by_index[r.request_id if isinstance(r, Request) else r]

    log = offload.recorder = _StoreLog(name)
    pending = deque(sorted(requests, key=lambda r: int(r["arrival_step"])))
    records: list[dict] = []
    batch: deque = deque()  # (record, plan, step), newest first
    qsize = 2 if config.async_scheduling else 1
    step = idle = 0

    def busy() -> bool:
        return (sched.engine_has_requests() or env.pending or bool(offload.queued)
                or offload.store_link.free_at > env.now)

    while True:
        if not busy() and not batch:
            if not pending:
                break
            if int(pending[0]["arrival_step"]) > step:
                step = int(pending[0]["arrival_step"])
                env.run_until(step * STEP_NS)
        while pending and int(pending[0]["arrival_step"]) <= step:
            spec = pending.popleft()
            req = Request(len(by_index), 0, int(spec["prompt_tokens"]), int(spec["output_tokens"]))
            ids = spec["prompt_token_ids"]
            req.block_keys = BlockKeys(_content(ids, block_size))
            by_index[req.request_id] = str(spec["id"])
            made.append(req)
            sched.add_request(req)
        if busy():
            if hook is not None:
                hook(step, sched, offload, None)
            log.promotions = promotions = {}
            plan = sched.schedule()  # (Rank.plan)
            if hook is not None:
                hook(step, sched, offload, plan)
            loads = {name(r): len(keys) for r, keys, _ in offload.queued}
            stores: dict = {}
            log.target = stores  # (a plan that runs no pass copies at once)
            offload.planned(plan, env.now)
            flushed = plan.host_flush[1] if plan.host_flush else ()
            for request, keys, *_ in [*(plan.host_stores or ()), *flushed]:
                stores[name(request)] = stores.get(name(request), 0) + len(keys) * block_size
            if plan.host_flush:  # (Worker._start: copies it flushes start with the pass, after the one before)
                log.target = {}  # (counted as the plan took them)
                offload.pass_ns(plan, max(env.now, step * STEP_NS), STEP_NS, step)
            rec = {
                "step": step,
                "scheduled": {name(r): n for r, n in zip(plan.requests, plan.num_new_tokens)},
                "preempted": sorted(name(r) for r in plan.preempted),
                "hits": {name(r): c for r, c in zip(plan.requests, plan.num_context_tokens)
                         if r in plan.admitted or r in plan.resumed},
                "loads": loads,
                "stores": stores,
            }
            if storage:
                rec["promotions"] = {rid: tokens // block_size for rid, tokens in promotions.items()}
            batch.appendleft((rec, plan, step))
            step += 1
            executed = not plan.is_empty
            idle = 0 if executed or loads or rec["stores"] else idle + 1
            if idle > max_idle_steps:  # stuck for good (the records so far show where it went wrong)
                return records
            if len(batch) < qsize and (executed or busy()):
                continue
        elif not batch:
            continue
        rec, plan, k = batch.pop()
        pass_end = (k + 1) * STEP_NS
        env.run_until(pass_end)
        if plan.host_stores or plan.host_loads:  # (Rank.finish_pass)
            log.target = {}  # (counted as the plan took them)
            offload.pass_ended(plan, pass_end, k)
        sampled, finished = sched.update_from_output(plan)
        for request in finished:  # (Rank.record_pass_end)
            offload.finished(request, pass_end)
        rec["emitted"] = {name(r): r.num_emitted for r in sampled}
        rec["finished"] = sorted(name(r) for r in finished)
        rec["stores"] = {rid: tokens // block_size for rid, tokens in rec["stores"].items()}
        records.append(rec)
    if storage and records:
        records[-1]["cascaded"] = log.cascaded // block_size
        records[-1]["storage_hits"] = {name(r): r.num_storage_cached_tokens for r in made}
    return records


def _content(prompt: list[int], block_size: int):
    """Block contents: the prompt's token ids, then the fake sampler's tokens (id 7)."""
    def content(j: int) -> tuple:
        lo, hi = j * block_size, (j + 1) * block_size
        return tuple(prompt[i] if i < len(prompt) else 7 for i in range(lo, hi))
    return content
