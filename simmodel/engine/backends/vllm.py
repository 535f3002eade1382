"""vLLM: each rank a v1 ``VllmScheduler`` over a paged KV block pool (with prefix caching, or counted blocks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.hybrid_kv_cache import HybridPrefixCachingPool
from simmodel.engine.kv_cache import BlockKeys, BlockPool, PrefixCachingBlockPool
from simmodel.engine.placement import prefill_leg
from simmodel.engine.rank import Rank
from simmodel.engine.scheduler.vllm import VllmScheduler, VllmSchedulerConfig
from simmodel.engine.speculation import ConditionalAcceptance, MeanAcceptance
from simmodel.engine.state_kv_cache import StatePrefixCachingPool
from simmodel.engine.worker import Worker
from simmodel.offload import attach as attach_host_tier
from simmodel.perf.pipeline import PipelineStages, pipeline_shape

if TYPE_CHECKING:
    from simmodel.config.schema import Scenario, WorkerRole
    from simmodel.engine.request import Request
    from simmodel.perf.timing import PassTiming
    from simmodel.sim import Simulation


class VllmBackend:
    """vLLM's engine: a request goes straight from the API server to its worker's scheduler; disaggregated,
    its prefill leg goes to the prefill pool and its KV is reserved on the decode side when the transfer
    starts (NIXL's pull)."""

    destination_first = False
    routes_ahead = True

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._num_spec_ranks = 0

    @staticmethod
    def max_prompt_tokens(scenario: Scenario) -> int:
        """vLLM refuses a prompt at ``max_model_len``."""
        return min(role.context_length for role in scenario.engine.workers.values())

    def build_pool(self, role: WorkerRole, timing: PassTiming, count: int | None = None) -> list[Worker]:
        engine, sim = self.sim.scenario.engine, self.sim
        sched_cfg = VllmSchedulerConfig(
            max_num_seqs=role.scheduler.max_sequences,
            max_num_batched_tokens=role.scheduler.max_batched_tokens,
            max_model_len=role.context_length,
            long_prefill_token_threshold=role.scheduler.long_prefill_token_threshold,
            enable_chunked_prefill=engine.enable_chunked_prefill,
            reserve_full_isl=role.scheduler.reserve_full_isl,
            enable_prefix_caching=role.kv_cache.prefix_caching,
            async_scheduling=role.scheduler.async_scheduling,
            num_speculative_tokens=0 if engine.speculation is None else engine.speculation.num_speculative_tokens,
            # (MTP/EAGLE heads write a draft's KV past the pass's tokens; n-gram lookups write none)
            num_lookahead_tokens=(engine.speculation.num_speculative_tokens
                                  if engine.speculation is not None and engine.speculation.kind == "mtp" else 0),
            # (Model Runner V2 under async scheduling: a request's decodes a stage count of steps apart)
            decode_stagger=role.parallelism.pipeline if role.scheduler.async_scheduling else 1,
        )
        eagle = role.draft_tokens > 0  # (MTP/EAGLE drafts: a prefix hit drops its last block)
        workers = []
        for w in range(role.parallelism.replicas if count is None else count):
            worker = Worker(sim.env, w, timing, role.name, role.scheduler.async_scheduling,
                            role.scheduler.prefill_schedule_interval, role.scheduler.launch)
            worker.hands_off = role.name == "prefill"  # (``place`` puts the prefill legs there, and only there)
            if role.parallelism.pipeline > 1:  # (its passes go through the stages one by one: never a run)
                d = role.deployment
                worker.stages = PipelineStages(pipeline_shape(d, role.parallelism.pipeline, d.activation_bytes))
                worker.coalesce = False
            for r in range(role.parallelism.attention_data):
                layout = role.kv_layout
                if not layout.hybrid:
                    pool = (PrefixCachingBlockPool(role.num_kv_blocks, role.kv_cache.block_size, eagle)
                            if role.kv_cache.prefix_caching else BlockPool(role.num_kv_blocks, role.kv_cache.block_size))
                elif layout.state_groups and role.kv_cache.prefix_caching:  # (states cached: vLLM's align mode)
                    pool = StatePrefixCachingPool(role.num_kv_blocks, role.kv_cache.block_size, layout, eagle)
                elif role.kv_cache.prefix_caching:  # (vLLM's hybrid KV cache manager with sliding-window groups)
                    pool = HybridPrefixCachingPool(role.num_kv_blocks, role.kv_cache.block_size, layout, eagle)
                else:
                    pool = BlockPool(role.num_kv_blocks, role.kv_cache.block_size, layout)
                scheduler = VllmScheduler(sched_cfg, pool)
                scheduler.accept = self._acceptance()
                rank = Rank(sim.env, worker, r, scheduler, sim.recorder)
                attach_host_tier("vllm", rank, role, sim.shared_stores)
                worker.add_rank(rank)
            workers.append(worker)
        return workers

    def _acceptance(self):
        """Each rank's draft-acceptance model, with its own seeded stream (ranks in build order)."""
        spec = self.sim.scenario.engine.speculation
        if spec is None:
            return None
        if spec.kind == "mtp":
            return MeanAcceptance(spec.mean_accepted)
        self._num_spec_ranks += 1
        seed = np.random.SeedSequence([spec.seed, self._num_spec_ranks])
        return ConditionalAcceptance(spec.acceptance_rates, np.random.default_rng(seed))

    def place(self, request: Request, at: int | None) -> Rank:
        """To the worker its router (or the routes known ahead) names; disaggregated, its prefill leg to the
        prefill pool, which hands it off when it finishes."""
        sim = self.sim
        if sim.transfer is None:
            request.block_keys = self._block_keys(request, sim.front_role)
            if sim.routes is not None:
                return sim.routes.worker(request.request_id).place(request, at)
            return sim.routers[sim.front_role].pick(request).place(request)
        leg = prefill_leg(request, sim.transfer.leg_finished)
        leg.block_keys = self._block_keys(request, "prefill")
        request.block_keys = self._block_keys(request, "decode")
        worker = sim.routers["prefill"].pick(leg)
        assert worker.hands_off  # (it never plans runs, which would not hand the legs off)
        return worker.place(leg)

    def _block_keys(self, request: Request, role: str) -> BlockKeys | None:
        """The prompt's KV block keys for prefix caching. A request's images lead its prompt (their embeddings
        from an encoder pool): a block wholly inside them holds those images, the same for every request that
        sends the same ones (vLLM keys such blocks by the images' content hash); the blocks after them hold the
        request's own text."""
        sim = self.sim
        kv = sim.scenario.engine.workers[role].kv_cache
        if not kv.prefix_caching:
            return None
        i, size = request.request_id, kv.block_size
        content = sim.source.stream.block_content(i, request.num_prompt_tokens, size)
        if sim.images is not None and sim.image_tokens:
            images, text = sim.image_tokens, content
            owner = (-7,) if sim.images.identity == "shared" else (-7, i)

            def content(j: int) -> object:
                return (*owner, j) if (j + 1) * size <= images else text(j)
        return BlockKeys(content)

    def summary(self) -> dict:
        return {}
