"""TensorRT-LLM: each rank a ``TrtllmScheduler`` (capacity then micro-batch scheduling) over a paged KV block
pool, with block reuse or counted blocks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simmodel.engine.backends.vllm import VllmBackend
from simmodel.engine.kv_cache import BlockPool, PrefixCachingBlockPool
from simmodel.engine.rank import Rank
from simmodel.engine.scheduler.trtllm import TrtllmScheduler, TrtllmSchedulerConfig
from simmodel.engine.worker import Worker

if TYPE_CHECKING:
    from simmodel.config.schema import WorkerRole
    from simmodel.perf.timing import PassTiming


class TrtllmBackend(VllmBackend):
    """TensorRT-LLM's executor. Requests are placed as vLLM's are (``VllmBackend.place``): straight to the
    worker's batch manager; disaggregated, the context (prefill) leg first, then the generation (decode) rank,
    which reserves the prompt's blocks under its capacity policy when it schedules the request, pulls the KV,
    and decodes once it has arrived (source-first, as vLLM's NIXL handoff). A prompt must leave room for one
    output token within ``max_seq_len``, as vLLM's within ``max_model_len``."""

    def build_pool(self, role: WorkerRole, timing: PassTiming, count: int | None = None) -> list[Worker]:
        spec = role.scheduler.trtllm
        assert spec is not None
        config = TrtllmSchedulerConfig(
            max_batch_size=role.scheduler.max_sequences, max_num_tokens=role.scheduler.max_batched_tokens,
            max_seq_len=role.context_length, capacity_policy=spec.capacity_policy,
            enable_chunked_context=self.sim.scenario.engine.enable_chunked_prefill,
            chunk_unit=role.kv_cache.block_size if spec.chunk_unit is None else spec.chunk_unit,
            client_max_tokens={"output": 0, "context_length": role.context_length}.get(spec.client_max_tokens,
                                                                                     spec.client_max_tokens))
        pool_cls = PrefixCachingBlockPool if role.kv_cache.prefix_caching else BlockPool
        workers = []
        for w in range(role.parallelism.replicas if count is None else count):
            worker = Worker(self.sim.env, w, timing, role.name)
            worker.hands_off = role.name == "prefill"  # (``place`` puts the context legs there, and only there)
            for r in range(role.parallelism.attention_data):
                scheduler = TrtllmScheduler(config, pool_cls(role.num_kv_blocks, role.kv_cache.block_size))
                worker.add_rank(Rank(self.sim.env, worker, r, scheduler, self.sim.recorder))
            workers.append(worker)
        return workers

    def summary(self) -> dict:
        """Pauses: running requests ``max_utilization`` put back in the queue for want of a KV block."""
        return {"num_pauses": sum(rank.scheduler.num_pauses for w in self.sim.workers for rank in w.ranks)}
