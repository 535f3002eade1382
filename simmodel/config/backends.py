"""``engine.backend``: the configuration rules that differ between serving engines, one entry per engine in
``BACKEND_RULES`` (the engine side has its own table, ``simmodel.engine.backends.BACKENDS``, with the same keys).

What differs is what a scenario may set and what it must hold: the scheduler's knobs (vLLM's or SGLang's;
one engine's knob set under another is refused, since it would have no effect), the worker fields only one
engine reads (SGLang's host loop, frontend and vision), the KV unit and its default size (vLLM's 16-token
blocks, SGLang's pages of ``--page-size`` 1), how many units one request at ``context_length`` needs, and
the rules on the engine and the whole deployment. A new engine is one more subclass of ``BackendRules`` and
one more entry here and there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from simmodel.config.bounds import MAX_CACHED_BLOCKS, deployment_total
from simmodel.config.node import _backend_only, _Node
from simmodel.config.schedulers import (
    DEFAULT_BATCHED_TOKENS,
    SGLANG_SCHEDULER,
    TRTLLM_SCHEDULER,
    VLLM_SCHEDULER,
    sglang_scheduler,
    trtllm_scheduler,
    vllm_scheduler,
)
from simmodel.config.schema import (
    Engine,
    FrontendSpec,
    HostProfileSpec,
    Parallelism,
    SchedulerSpec,
    SglangSchedulerSpec,
    SpeculationSpec,
    VisionSpec,
    WorkerRole,
)
from simmodel.config.sglang_host import SGLANG_HOST, _sglang_host
from simmodel.errors import ScenarioError
from simmodel.perf.capacity import cdiv

if TYPE_CHECKING:
    from simmodel.config.schema import Traffic

HostSide = tuple[bool, FrontendSpec | None, HostProfileSpec | None, VisionSpec | None]
"""A worker's ``host_loop``, ``frontend``, ``host_profile`` and ``vision``."""


class BackendRules:
    """One serving engine's configuration rules. A subclass names its engine and gives its scheduler and the KV
    one request needs; what it does not override, the engine has none of (no own worker fields, no images,
    no rule on the engine or deployment beyond the shared ones)."""

    name: str
    """Its ``engine.backend`` value."""
    label: str
    """Its name in messages."""
    kv_unit = "blocks"
    """What ``kv_cache.capacity.blocks`` counts."""
    default_block_size: int
    """``kv_cache.block_size`` when unset."""
    scheduler_keys: tuple[str, ...] = ()
    """``scheduler`` fields only this engine reads."""
    host_keys: tuple[str, ...] = ()
    """Worker fields only this engine reads."""
    encodes_images = False
    """Whether its workers encode a request's images themselves (``traffic.source.images``)."""
    frontend_measured = False
    """Whether the default timing's frontend time per request (``REQUEST_OVERHEAD_MS``) was measured on this
    engine's API server; where not, a request's time outside the passes is 0 unless the scenario sets it."""

    def scheduler(self, node: _Node, context_length: int, chunked: bool, max_sequences: int,
                  speculation: SpeculationSpec | None) -> SchedulerSpec:
        """``scheduler``: this engine's knobs (the other engines' are refused first)."""
        raise NotImplementedError

    def blocks_needed(self, context_length: int, block_size: int) -> int:
        """KV units a rank needs to hold one request at ``context_length``."""
        raise NotImplementedError

    def refuse_others(self, node: _Node, keys_of: Callable[[BackendRules], tuple[str, ...]]) -> None:
        """Refuse the fields that only another engine reads (``keys_of``: which of its field sets)."""
        for other in BACKEND_RULES.values():
            if other is not self:
                _backend_only(node, keys_of(other), self.name, other.label)

    def host(self, node: _Node, name: str, p: Parallelism) -> HostSide:
        """The ``name`` worker's host side: none modeled (the other engines' host fields refused)."""
        self.refuse_others(node, lambda rules: rules.host_keys)
        return False, None, None, None

    def check_chunked(self, node: _Node, chunked: bool) -> None:
        """``engine.enable_chunked_prefill``: either value is accepted."""

    def check_speculation(self, node: _Node, speculation: SpeculationSpec | None) -> None:
        """``engine.speculation`` / ``engine.nextn``: modeled."""

    def check_roles(self, workers: _Node, roles: dict[str, WorkerRole], mode: str) -> None:
        """Rules on the deployment as a whole (its roles read): none of its own."""

    def check_with_traffic(self, engine: Engine, traffic: Traffic, front: str) -> None:
        """Rules that need the traffic too (``front``: the role requests arrive at): none of its own."""


class VllmRules(BackendRules):
    """vLLM's: its scheduler's knobs, KV in whole blocks of 16 tokens by default, and its prefix-caching pools
    bounded in memory."""

    name, label, default_block_size = "vllm", "vLLM", 16
    scheduler_keys = VLLM_SCHEDULER
    frontend_measured = True  # (fitted on vLLM 0.15.1's OpenAI server: benchmarks/e2e_fit.py)

    def scheduler(self, node: _Node, context_length: int, chunked: bool, max_sequences: int,
                  speculation: SpeculationSpec | None) -> SchedulerSpec:
        self.refuse_others(node, lambda rules: rules.scheduler_keys)
        return vllm_scheduler(node, context_length, chunked, max_sequences, speculation)

    def blocks_needed(self, context_length: int, block_size: int) -> int:
        """vLLM allocates whole blocks."""
        return cdiv(context_length, block_size)

    def check_roles(self, workers: _Node, roles: dict[str, WorkerRole], mode: str) -> None:
        _bound_cached_blocks(workers, roles)


class SglangRules(BackendRules):
    """SGLang's: its scheduler's knobs, its host side, KV in pages (of one token by default), and what it cannot
    run."""

    name, label, default_block_size = "sglang", "SGLang", 1
    kv_unit = "pages"
    scheduler_keys = SGLANG_SCHEDULER
    host_keys = SGLANG_HOST
    encodes_images = True

    def scheduler(self, node: _Node, context_length: int, chunked: bool, max_sequences: int,
                  speculation: SpeculationSpec | None) -> SchedulerSpec:
        self.refuse_others(node, lambda rules: rules.scheduler_keys)
        return sglang_scheduler(node, max_sequences, speculation)

    def blocks_needed(self, context_length: int, block_size: int) -> int:
        """An empty rank admits the longest prompt (context − 2 tokens) while it and a page fit its KV tokens."""
        return cdiv(context_length + block_size - 1, block_size)

    def host(self, node: _Node, name: str, p: Parallelism) -> HostSide:
        self.refuse_others(node, lambda rules: rules.host_keys)
        return _sglang_host(node, name, p)

    def check_chunked(self, node: _Node, chunked: bool) -> None:
        if not chunked:
            raise ScenarioError(f"{node.at('enable_chunked_prefill')}: SGLang always chunks long prompts "
                                f"(chunked_prefill_size); false is only accepted with backend vllm")

    def check_speculation(self, node: _Node, speculation: SpeculationSpec | None) -> None:
        """EAGLE/MTP drafts (``engine.nextn``) are modelled; SGLang's n-gram drafter is not."""
        if speculation is not None and speculation.kind == "ngram":
            raise ScenarioError(f"{node.at('speculation')}: n-gram speculative decoding is not yet modeled for "
                                f"backend sglang; use engine.nextn (EAGLE/MTP drafts), or backend vllm")

    def check_roles(self, workers: _Node, roles: dict[str, WorkerRole], mode: str) -> None:
        """A P/D decode rank reserves a whole prompt's KV, in pages, plus SGLang's reserved decode tokens.
        Speculative decoding is modelled on aggregated workers without a host tier or mixed chunks (SGLang keeps mixed
        chunks with EAGLE, its running requests decoding one token in a mixed pass: not modelled)."""
        for name, role in roles.items():
            if not role.draft_tokens:
                continue
            if mode != "aggregated":
                raise ScenarioError(f"engine.mode: speculative decoding (engine.nextn) with a {mode} SGLang "
                                    f"deployment is not yet modeled; use engine.mode aggregated or backend vllm")
            if role.scheduler.sglang is not None and role.scheduler.sglang.enable_mixed_chunk:
                raise ScenarioError(f"{workers.at(name)}.scheduler.enable_mixed_chunk: mixed chunks with EAGLE/MTP "
                                    f"speculative decoding (engine.nextn; SGLang's running requests then decode one "
                                    f"token in a mixed pass) are not yet modeled; remove one of them")
            if role.kv_cache.host_offload is not None:
                raise ScenarioError(f"{workers.at(name)}.kv_cache.host_offload: HiCache with speculative decoding "
                                    f"(engine.nextn) is not yet modeled for backend sglang; remove one of them")
            reserve = 2 * (role.draft_tokens + 1)  # (``get_alloc_reserve_per_decode`` with topk 1)
            page = role.kv_cache.block_size
            needed = cdiv(role.context_length + reserve, page) * page
            if role.kv_tokens_per_rank < needed:
                raise ScenarioError(f"{workers.at(name)}.kv_cache.capacity: with EAGLE/MTP drafts (engine.nextn "
                                    f"{role.draft_tokens}) an SGLang request keeps 2 (k + 1) = {reserve} tokens "
                                    f"allocated past its KV at each decode, so one request at context_length "
                                    f"{role.context_length} needs {needed} tokens; a rank has "
                                    f"{role.kv_tokens_per_rank}: lower context_length or give the rank more KV")
        if mode != "disaggregated":
            return
        dec = roles["decode"]
        longest = min(role.context_length for role in roles.values()) - 1
        page = dec.kv_cache.block_size
        needed = cdiv(longest, page) * page + 512
        if dec.kv_tokens_per_rank < needed:
            raise ScenarioError(f"{workers.at('decode')}.kv_cache.capacity: an SGLang decode rank reserves a prompt's "
                                f"KV (in whole pages) plus 512 tokens for its decoding "
                                f"(SGLANG_NUM_RESERVED_DECODE_TOKENS), so it needs at least {needed} tokens for a "
                                f"{longest}-token prompt; it has {dec.kv_tokens_per_rank}")

    def check_with_traffic(self, engine: Engine, traffic: Traffic, front: str) -> None:
        """Which budget field an SGLang worker reads: ``max_batched_tokens`` with the host loop or images encoded
        on the worker, else ``chunked_prefill_size``; the other one set would have no effect."""
        # (images the worker encodes itself: not those of an encoder pool)
        images = getattr(traffic.source, "images", None) if engine.encoder is None else None
        role, where = engine.workers[front], f"engine.workers.{front}"
        sg = role.scheduler
        chunk_default = SglangSchedulerSpec().chunked_prefill_size
        if ((role.host_loop or images is not None) and sg.sglang is not None
                and sg.sglang.chunked_prefill_size != chunk_default):
            raise ScenarioError(f"{where}.scheduler.chunked_prefill_size: with host_loop or images encoded on the "
                                f"worker, max_batched_tokens is the worker's chunked_prefill_size; set that instead")
        if sg.max_batched_tokens != DEFAULT_BATCHED_TOKENS and not role.host_loop and images is None:
            raise ScenarioError(f"{where}.scheduler.max_batched_tokens: SGLang takes its prefill budget from "
                                f"scheduler.chunked_prefill_size unless host_loop is on or images are encoded on "
                                f"the worker; set chunked_prefill_size instead")
        for name, other in engine.workers.items():
            if name != front and other.scheduler.max_batched_tokens != DEFAULT_BATCHED_TOKENS:
                raise ScenarioError(f"engine.workers.{name}.scheduler.max_batched_tokens: has no effect on an "
                                    f"SGLang {name} worker; remove it")


class TrtllmRules(BackendRules):
    """TensorRT-LLM's: its scheduler's knobs, KV in blocks of 32 tokens by default (``tokens_per_block``), and what
    is not modelled for it yet (host KV tiers, speculative decoding)."""

    name, label, default_block_size = "trtllm", "TensorRT-LLM", 32
    scheduler_keys = TRTLLM_SCHEDULER

    def scheduler(self, node: _Node, context_length: int, chunked: bool, max_sequences: int,
                  speculation: SpeculationSpec | None) -> SchedulerSpec:
        """``max_sequences`` unset is TensorRT-LLM's ``max_batch_size`` default, 2048 (a prefill role's stays 1,
        as for every engine)."""
        self.refuse_others(node, lambda rules: rules.scheduler_keys)
        return trtllm_scheduler(node, context_length, chunked, max_sequences if max_sequences == 1 else 2048)

    def blocks_needed(self, context_length: int, block_size: int) -> int:
        """TensorRT-LLM allocates whole blocks."""
        return cdiv(context_length, block_size)

    def check_speculation(self, node: _Node, speculation: SpeculationSpec | None) -> None:
        if speculation is not None:
            key = "speculation" if speculation.kind == "ngram" else "nextn"
            raise ScenarioError(f"{node.at(key)}: speculative decoding is not yet modeled for backend trtllm")

    def check_roles(self, workers: _Node, roles: dict[str, WorkerRole], mode: str) -> None:
        for name, role in roles.items():
            if role.kv_cache.host_offload is not None:
                raise ScenarioError(f"{workers.at(name)}.kv_cache.host_offload: a host KV tier is not yet modeled "
                                    f"for backend trtllm; remove it, or use backend vllm or sglang")
        _bound_cached_blocks(workers, roles)


def _bound_cached_blocks(workers: _Node, roles: dict[str, WorkerRole]) -> None:
    """The deployment's prefix-caching KV blocks (replicas × attention_data × blocks per rank, summed over the roles
    that cache) are at most ``MAX_CACHED_BLOCKS``: a run that would hold more is refused here instead of running
    out of memory (each block's state is kept, as vLLM's and TensorRT-LLM's block pool keeps it)."""
    def blocks(role: WorkerRole) -> int:
        p = role.parallelism
        return p.replicas * p.attention_data * role.num_kv_blocks if role.kv_cache.prefix_caching else 0

    total, largest = deployment_total(roles, blocks)
    if total <= MAX_CACHED_BLOCKS:
        return
    raise ScenarioError(f"{workers.at(largest)}.parallelism.replicas: the deployment's prefix-caching KV pools "
                        f"would hold {total:,} blocks (replicas × attention_data × blocks per rank); simmodel "
                        f"keeps each block's state in memory (about 100 bytes), so at most {MAX_CACHED_BLOCKS:,} "
                        f"(about 10 GB): fewer replicas, a smaller kv_cache.capacity or a larger "
                        f"kv_cache.block_size")


BACKEND_RULES: dict[str, BackendRules] = {rules.name: rules for rules in (VllmRules(), SglangRules(), TrtllmRules())}
"""The rules of each ``engine.backend`` value (its accepted values, in this order)."""
