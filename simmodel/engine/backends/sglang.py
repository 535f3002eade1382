"""SGLang: each rank an ``SglangScheduler`` over a paged radix cache, behind optional frontend stages."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simmodel.engine.placement import prefill_leg
from simmodel.engine.rank import Rank
from simmodel.engine.scheduler.sglang import SglangScheduler, SglangSchedulerConfig
from simmodel.engine.speculation import MeanAcceptance
from simmodel.engine.vision_encoder import RankVision
from simmodel.engine.worker import Worker
from simmodel.frontend.stages import Frontend
from simmodel.offload import attach as attach_host_tier
from simmodel.offload import host_blocks

if TYPE_CHECKING:
    from simmodel.config.schema import Scenario, WorkerRole
    from simmodel.engine.request import Request
    from simmodel.perf.timing import PassTiming
    from simmodel.sim import Simulation


class SglangBackend:
    """SGLang's server: a request is tokenized (and its images processed) by the frontend stages of its
    front worker, when it has some, then reaches the scheduler; disaggregated, destination-first (the decode
    rank reserves the prompt's KV, then the prefill leg is placed)."""

    destination_first = True
    routes_ahead = False

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    @staticmethod
    def max_prompt_tokens(scenario: Scenario) -> int:
        """SGLang refuses a prompt at ``max_req_len = min(context_length, KV tokens) − 1``."""
        return min(min(role.context_length, role.kv_tokens_per_rank) - 1 for role in scenario.engine.workers.values())

    def build_pool(self, role: WorkerRole, timing: PassTiming, count: int | None = None) -> list[Worker]:
        """The per-pass prefill budget is SGLang's ``chunked_prefill_size`` (8192), or the role's
        ``max_batched_tokens`` with the host loop or images encoded on the worker."""
        sim = self.sim
        spec = role.scheduler.sglang
        assert spec is not None
        images = (getattr(sim.scenario.traffic.source, "images", None) is not None
                  and sim.scenario.engine.encoder is None)  # (an encoder pool encodes them: EPD)
        on_worker = images and role.name == sim.front_role  # images are encoded on the front role
        chunk = role.scheduler.max_batched_tokens if (role.host_loop or on_worker) else spec.chunked_prefill_size
        trace_block = getattr(sim.scenario.traffic.source, "block_size", 64)
        kv_tokens = role.kv_tokens_per_rank  # (pages of block_size tokens)
        cfg = SglangSchedulerConfig(
            max_running_requests=role.scheduler.max_sequences, chunked_prefill_size=chunk,
            max_prefill_tokens=spec.max_prefill_tokens, schedule_policy=spec.schedule_policy,
            schedule_conservativeness=spec.schedule_conservativeness, clip_max_new_tokens=spec.clip_max_new_tokens,
            attention_data=role.parallelism.attention_data, prefill_decode_interval=spec.prefill_decode_interval,
            trace_block_size=trace_block, base_new_token_ratio=spec.init_new_token_ratio,
            min_new_token_ratio_factor=spec.min_new_token_ratio_factor,
            new_token_ratio_decay_steps=spec.new_token_ratio_decay_steps, overlap=role.host_loop,
            max_req_len=min(role.context_length, kv_tokens) - 1, ignore_eos=spec.ignore_eos,
            page_size=role.kv_cache.block_size, radix_cache=role.kv_cache.prefix_caching,
            mixed_chunk=spec.enable_mixed_chunk, num_speculative_steps=role.draft_tokens, **_hicache(role))
        workers = []
        for w in range(role.parallelism.replicas if count is None else count):
            worker = Worker(sim.env, w, timing, role.name, async_scheduling=role.host_loop,
                            prefill_decode_interval=spec.prefill_decode_interval)
            for r in range(role.parallelism.attention_data):
                scheduler = SglangScheduler(cfg, kv_tokens)
                if role.draft_tokens:
                    scheduler.accept = MeanAcceptance(sim.scenario.engine.speculation.mean_accepted)
                rank = Rank(sim.env, worker, r, scheduler, sim.recorder)
                attach_host_tier("sglang", rank, role, sim.shared_stores)
                worker.add_rank(rank)
            if sim.images is not None and sim.scenario.engine.encoder is None and role.name == sim.front_role:
                worker.vision = [RankVision(role.deployment, sim.images, role.vision, role.timing.efficiency,
                                            role.timing.host.collective_us)
                                 for _ in worker.ranks]
            if role.frontend is not None:
                sim.frontends[w] = Frontend(sim.env, role.frontend.stages)
            workers.append(worker)
        return workers

    def place(self, request: Request, at: int | None) -> Rank | None:
        """The prompt's radix segments (images first), then through the front worker's frontend stages when it
        has some (placed when they are done: returns None)."""
        sim = self.sim
        i = request.request_id
        text = sim.source.stream.prompt_segments(i, request.num_prompt_tokens - sim.image_tokens)
        images = sim.images
        if images is not None:
            per = sim.image_tokens // images.count
            shared = images.identity == "shared"
            text = [((-4, k) if shared else (-4, i, k), per) for k in range(images.count)] + text
        request.prompt_segments = text
        front = sim.routers[sim.front_role].pick(request)
        frontend = sim.frontends.get(front.worker_id)
        if frontend is None:
            return self._route(request, front)

        def done() -> None:
            request.frontend_ns = sim.env.now - request.arrived_at
            self._route(request, front)
        frontend.submit(i, done)
        return None

    def _route(self, request: Request, front: Worker) -> Rank:
        sim = self.sim
        if sim.transfer is None:
            return front.place(request)
        leg = prefill_leg(request, sim.transfer.leg_finished)
        leg.prompt_segments = request.prompt_segments
        target = sim.pick_decode(request)
        sim.transfer.expect(target, request, front.place)  # the decode side reserved: the leg may queue
        target.add_prealloc(request)
        target.worker.notify()
        return target

    def summary(self) -> dict:
        """Retractions: running requests SGLang's decode put back in the queue for want of KV."""
        workers = self.sim.workers
        return {"num_retractions": sum(rank.scheduler.num_retractions for w in workers for rank in w.ranks)}


def _hicache(role: WorkerRole) -> dict:
    """The scheduler's HiCache settings from the role's ``kv_cache.host_offload`` (none without one)."""
    spec = role.kv_cache.host_offload
    if spec is None:
        return {}
    assert spec.write_policy is not None
    return {"host_pages": host_blocks(role)[0], "write_policy": spec.write_policy}
