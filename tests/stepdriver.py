"""Drive one rank's scheduler the way the vLLM scheduler oracle (vLLM 0.32.0's own ``Scheduler`` on a CPU with a
fake model runner, a script in the developers' shared oracle folder) drives vLLM's.

Steps count ``schedule()`` calls; a request is added just before the call whose index equals its
``arrival_step``; a fully idle engine jumps to the next arrival. The records have the oracle's
fields so a golden trace can be compared pass by pass.
"""

from __future__ import annotations

import zlib
from collections import deque

from simmodel.engine.hybrid_kv_cache import HybridPrefixCachingPool
from simmodel.engine.kv_cache import BlockKeys, BlockPool, PrefixCachingBlockPool
from simmodel.engine.request import Request
from simmodel.engine.scheduler.vllm import VllmScheduler, VllmSchedulerConfig
from simmodel.engine.speculation import MeanAcceptance
from simmodel.engine.state_kv_cache import StatePrefixCachingPool
from simmodel.perf.kv_layout import KvLayout


def run_steps(requests: list[dict], config: VllmSchedulerConfig, num_gpu_blocks: int,
              block_size: int, mean_accepted: float | None = None, layout: KvLayout | None = None,
              queue_size: int | None = None, eagle: bool = False) -> list[dict]:
    """Return one record per non-empty pass: step, scheduled {id: n}, preempted, finished, emitted.
    ``mean_accepted``: with ``config.num_speculative_tokens``, MTP drafts accepted as ``MeanAcceptance`` accepts
    them (the spec recorder's fake model runner samples by the same rule). ``layout``: vLLM's KV cache groups
    (sliding-window ones: the hybrid recorder's). ``queue_size``: the engine's batch queue (vLLM's
    ``max_concurrent_batches``; default 2 async, else 1). ``eagle``: MTP/EAGLE drafts, whose prefix hits drop their last
    block (with prefix caching)."""
    usable = num_gpu_blocks - 1  # (vLLM's null block is not usable)
    if not config.enable_prefix_caching:
        pool = BlockPool(usable, block_size, layout if layout is not None and layout.hybrid else None)
    elif layout is not None and layout.state_groups:
        pool = StatePrefixCachingPool(usable, block_size, layout, eagle)
    elif layout is not None and layout.hybrid:
        pool = HybridPrefixCachingPool(usable, block_size, layout, eagle)
    else:
        pool = PrefixCachingBlockPool(usable, block_size, eagle)
    sched = VllmScheduler(config, pool)
    if mean_accepted is not None:
        sched.accept = MeanAcceptance(mean_accepted)
    pending = deque(sorted(requests, key=lambda r: int(r["arrival_step"])))
    by_index: dict[int, str] = {}
    records: list[dict] = []
    queue: deque = deque()  # passes scheduled, not yet updated (newest first), as vLLM's batch queue
    queue_size = queue_size or (2 if config.async_scheduling else 1)
    step = 0

    def name(r) -> str:
        return by_index[r.request_id]

    while True:
        if not sched.engine_has_requests() and not queue:
            if not pending:
                return records
            step = max(step, int(pending[0]["arrival_step"]))
        while pending and int(pending[0]["arrival_step"]) <= step:
            spec = pending.popleft()
            req = Request(len(by_index), 0, int(spec["prompt_tokens"]), int(spec["output_tokens"]))
            req.block_keys = BlockKeys(_oracle_tokens(spec, block_size))
            by_index[req.request_id] = str(spec["id"])
            sched.add_request(req)
        if sched.engine_has_requests():
            out = sched.schedule()
            rec = {
                "step": step,
                "scheduled": {name(r): n for r, n in zip(out.requests, out.num_new_tokens)},
                "preempted": sorted(name(r) for r in out.preempted),
                "hits": {name(r): c for r, c, in zip(out.requests, out.num_context_tokens)
                         if r in out.admitted or r in out.resumed},
                "free_blocks_after_schedule": pool.num_free_blocks,
            }
            queue.appendleft((rec, out))
            step += 1
            executed = out.total_num_scheduled_tokens > 0
            if len(queue) < queue_size and (executed or sched.engine_has_requests()):
                continue
        elif not queue:
            continue
        rec, out = queue.pop()
        sampled, finished = sched.update_from_output(out)
        rec["emitted"] = {name(r): r.num_emitted for r in sampled}
        rec["finished"] = sorted(name(r) for r in finished)
        records.append(rec)


def _oracle_tokens(spec: dict, block_size: int):
    """Block contents of the oracle's prompt (``prompt_token_ids``, else its crc32 pattern) followed by
    sampled tokens, all id 7 (the oracle's fake sampler)."""
    prompt = spec.get("prompt_token_ids")
    if prompt is None:
        base = 1000 + (zlib.crc32(str(spec["id"]).encode()) % 20000)
        prompt = [base + (i % 7) for i in range(int(spec["prompt_tokens"]))]
    prompt = list(prompt)

    def content(j: int) -> tuple:
        lo, hi = j * block_size, (j + 1) * block_size
        return tuple(prompt[i] if i < len(prompt) else 7 for i in range(lo, hi))
    return content


def prompt_ids(segments: list[list[int]]) -> list[int]:
    """A recorder's ``[[seed, length], ...]`` as token ids (``tools/oracles/record_vllm_goldens_apc.prompt_ids``):
    seed >= 0 gives ``100 + crc32(b"<seed>:<i>") % 30000``, seed < 0 gives ``length`` copies of token ``-seed``."""
    out: list[int] = []
    for seed, length in segments:
        if seed < 0:
            out.extend([-seed] * length)
        else:
            out.extend(100 + zlib.crc32(f"{seed}:{i}".encode()) % 30000 for i in range(length))
    return out
