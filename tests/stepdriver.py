"""Drive one rank's scheduler the way ``../shared/oracles/vllm_sched_oracle.py`` drives vLLM's.

Steps count ``schedule()`` calls; a request is added just before the call whose index equals its
``arrival_step``; a fully idle engine jumps to the next arrival. The records have the oracle's
fields so a golden trace can be compared pass by pass.
"""

from __future__ import annotations

from collections import deque

from simmodel.engine.kv_cache import BlockPool
from simmodel.engine.request import Request
from simmodel.engine.scheduler.vllm import VllmScheduler, VllmSchedulerConfig


def run_steps(requests: list[dict], config: VllmSchedulerConfig, num_gpu_blocks: int,
              block_size: int) -> list[dict]:
    """Return one record per non-empty pass: step, scheduled {id: n}, preempted, finished, emitted."""
    pool = BlockPool(num_gpu_blocks - 1, block_size)  # vLLM's null block is not usable
    sched = VllmScheduler(config, pool)
    pending = deque(sorted(requests, key=lambda r: int(r["arrival_step"])))
    by_index: dict[int, str] = {}
    records: list[dict] = []
    step = 0
    while True:
        if not sched.has_requests():
            if not pending:
                return records
            step = max(step, int(pending[0]["arrival_step"]))
        while pending and int(pending[0]["arrival_step"]) <= step:
            spec = pending.popleft()
            req = Request(len(by_index), 0.0, int(spec["prompt_tokens"]), int(spec["output_tokens"]))
            by_index[req.request_id] = str(spec["id"])
            sched.add_request(req)
        out = sched.schedule()
        sampled, finished = sched.update_from_output(out)
        records.append({
            "step": step,
            "scheduled": {by_index[r.request_id]: n for r, n in zip(out.requests, out.num_new_tokens)},
            "preempted": sorted(by_index[r.request_id] for r in out.preempted),
            "emitted": {by_index[r.request_id]: 1 for r in sampled},
            "finished": sorted(by_index[r.request_id] for r in finished),
            "free_blocks_after_schedule": pool.num_free_blocks + sum(r.num_blocks for r in finished),
        })
        step += 1
