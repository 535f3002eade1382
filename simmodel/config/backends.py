"""``engine.backend``: the configuration rules that differ between serving engines, one entry per engine in
``BACKEND_RULES`` (the engine side has its own table, ``simmodel.engine.backends.BACKENDS``).

What differs is what a scenario may set and what it must hold: the scheduler's knobs (vLLM's or SGLang's;
one engine's knob set under another is refused, since it would have no effect), the worker fields only one
engine reads (SGLang's host loop, frontend and vision), the KV unit and its default size (vLLM's 16-token
blocks, SGLang's pages of ``--page-size`` 1), how many units one request at ``context_length`` needs, and
the rules on the engine and the whole deployment. A new engine is one more entry here and one there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simmodel.config.bounds import MAX_CACHED_BLOCKS
from simmodel.config.node import _backend_only, _Node
from simmodel.config.schedulers import SGLANG_SCHEDULER, VLLM_SCHEDULER, sglang_scheduler, vllm_scheduler
from simmodel.config.schema import Engine, Parallelism, SchedulerSpec, SpeculationSpec, WorkerRole
from simmodel.config.sglang_host import SGLANG_HOST, _sglang_host
from simmodel.errors import ScenarioError
from simmodel.perf.capacity import cdiv

if TYPE_CHECKING:
    from simmodel.config.schema import Traffic


class BackendRules:
    """One serving engine's configuration rules (the defaults here are vLLM's; see ``SglangRules``)."""

    name = "vllm"
    label = "vLLM"
    kv_unit = "blocks"
    """What ``kv_cache.capacity.blocks`` counts."""
    default_block_size = 16
    """``kv_cache.block_size`` when unset."""
    scheduler_keys: tuple[str, ...] = VLLM_SCHEDULER
    """``scheduler`` fields only this engine reads."""
    host_keys: tuple[str, ...] = ()
    """Worker fields only this engine reads."""
    encodes_images = False
    """Whether its workers encode a request's images themselves (``traffic.source.images``)."""

    def refuse_others(self, node: _Node, keys: str) -> None:
        """Refuse the fields (``keys``: ``scheduler_keys`` or ``host_keys``) that only another engine reads."""
        for other in BACKEND_RULES.values():
            if other is not self:
                _backend_only(node, getattr(other, keys), self.name, other.label)

    def scheduler(self, node: _Node, context_length: int, chunked: bool, max_sequences: int,
                  speculation: SpeculationSpec | None) -> SchedulerSpec:
        """``scheduler``: this engine's knobs."""
        self.refuse_others(node, "scheduler_keys")
        return vllm_scheduler(node, context_length, chunked, max_sequences, speculation)

    def host(self, node: _Node, name: str, p: Parallelism) -> tuple:
        """The worker's host side (``host_loop``, ``frontend``, ``host_profile``, ``vision``): vLLM models none."""
        self.refuse_others(node, "host_keys")
        return False, None, None, None

    def blocks_needed(self, context_length: int, block_size: int) -> int:
        """KV units a rank needs to hold one request at ``context_length``: vLLM allocates whole blocks."""
        return cdiv(context_length, block_size)

    def check_engine(self, node: _Node, chunked: bool, speculation: SpeculationSpec | None) -> None:
        """Rules on the ``engine`` node's shared fields (vLLM takes every setting)."""

    def check_roles(self, workers: _Node, roles: dict[str, WorkerRole], mode: str) -> None:
        """Rules on the deployment as a whole: vLLM's prefix-caching pools are bounded in memory."""
        _check_cached_blocks(workers, roles)

    def check_with_traffic(self, engine: Engine, traffic: Traffic, front: str) -> None:
        """Rules that need the traffic too (``front``: the role requests arrive at)."""


class SglangRules(BackendRules):
    """SGLang's: its scheduler's knobs, its host side, KV in pages, and what it cannot run."""

    name = "sglang"
    label = "SGLang"
    kv_unit = "pages"
    default_block_size = 1
    scheduler_keys = SGLANG_SCHEDULER
    host_keys = SGLANG_HOST
    encodes_images = True

    def scheduler(self, node: _Node, context_length: int, chunked: bool, max_sequences: int,
                  speculation: SpeculationSpec | None) -> SchedulerSpec:
        self.refuse_others(node, "scheduler_keys")
        return sglang_scheduler(node, max_sequences)

    def host(self, node: _Node, name: str, p: Parallelism) -> tuple:
        self.refuse_others(node, "host_keys")
        return _sglang_host(node, name, p)

    def blocks_needed(self, context_length: int, block_size: int) -> int:
        """An empty rank admits the longest prompt (context − 2 tokens) while it and a page fit its KV tokens."""
        return cdiv(context_length + block_size - 1, block_size)

    def check_engine(self, node: _Node, chunked: bool, speculation: SpeculationSpec | None) -> None:
        if not chunked:
            raise ScenarioError(f"{node.at('enable_chunked_prefill')}: SGLang always chunks long prompts "
                                f"(chunked_prefill_size); false is only accepted with backend vllm")
        if speculation is not None:
            key = "speculation" if speculation.kind == "ngram" else "nextn"
            raise ScenarioError(f"{node.at(key)}: speculative decoding is not yet modeled for backend sglang")

    def check_roles(self, workers: _Node, roles: dict[str, WorkerRole], mode: str) -> None:
        """A P/D decode rank reserves a whole prompt's KV, in pages, plus SGLang's reserved decode tokens."""
        if mode != "disaggregated":
            return
        dec = roles["decode"]
        longest = min(role.context_length for role in roles.values()) - 1
        page = dec.kv_cache.block_size
        needed = -(-longest // page) * page + 512
        if dec.kv_tokens_per_rank < needed:
            raise ScenarioError(f"engine.workers.decode.kv_cache.capacity: an SGLang decode rank reserves a prompt's "
                                f"KV (in whole pages) plus 512 tokens for its decoding "
                                f"(SGLANG_NUM_RESERVED_DECODE_TOKENS), so it needs at least {needed} tokens for a "
                                f"{longest}-token prompt; it has {dec.kv_tokens_per_rank}")

    def check_with_traffic(self, engine: Engine, traffic: Traffic, front: str) -> None:
        """Which budget field an SGLang worker reads: ``max_batched_tokens`` with the host loop or images encoded
        on the worker, else ``chunked_prefill_size``; the other one set would have no effect."""
        images = getattr(traffic.source, "images", None)
        role, where = engine.workers[front], f"engine.workers.{front}"
        sg = role.scheduler
        if (role.host_loop or images is not None) and sg.sglang is not None and sg.sglang.chunked_prefill_size != 8192:
            raise ScenarioError(f"{where}.scheduler.chunked_prefill_size: with host_loop or images encoded on the "
                                f"worker, max_batched_tokens is the worker's chunked_prefill_size; set that instead")
        if sg.max_batched_tokens != 8192 and not role.host_loop and images is None:
            raise ScenarioError(f"{where}.scheduler.max_batched_tokens: SGLang takes its prefill budget from "
                                f"scheduler.chunked_prefill_size unless host_loop is on or images are encoded on "
                                f"the worker; set chunked_prefill_size instead")
        for name, other in engine.workers.items():
            if name != front and other.scheduler.max_batched_tokens != 8192:
                raise ScenarioError(f"engine.workers.{name}.scheduler.max_batched_tokens: has no effect on an "
                                    f"SGLang {name} worker; remove it")


def deployment_total(roles: dict[str, WorkerRole], count) -> tuple[int, str]:
    """``count`` summed over the roles, and the role that holds the most (the one a message names)."""
    counts = {name: count(role) for name, role in roles.items()}
    return sum(counts.values()), max(counts, key=counts.__getitem__)


def _check_cached_blocks(workers: _Node, roles: dict[str, WorkerRole]) -> None:
    """The deployment's prefix-caching KV blocks (replicas × attention_data × blocks per rank, summed over
    the roles that cache) are at most ``MAX_CACHED_BLOCKS``: a run that would hold more is refused here
    instead of running out of memory (each block's state is kept: vLLM's pool of blocks)."""
    def blocks(role: WorkerRole) -> int:
        p = role.parallelism
        return p.replicas * p.attention_data * role.num_kv_blocks if role.kv_cache.prefix_caching else 0

    total, largest = deployment_total(roles, blocks)
    if total <= MAX_CACHED_BLOCKS:
        return
    raise ScenarioError(f"{workers.at(largest)}.parallelism.replicas: the deployment's prefix-caching KV pools "
                        f"would hold {total:,} blocks (replicas × attention_data × blocks per rank); simmodel keeps "
                        f"each block's state in memory (about 100 bytes), so at most {MAX_CACHED_BLOCKS:,} (about "
                        f"10 GB): fewer replicas, a smaller kv_cache.capacity or a larger kv_cache.block_size")


BACKEND_RULES: dict[str, BackendRules] = {"vllm": BackendRules(), "sglang": SglangRules()}
"""The rules of each ``engine.backend`` value (its accepted values, in this order)."""
