"""``engine.workers.<role>``: one worker role. Its parallelism, scheduler, KV cache and its capacity in
blocks (fixed, or from the GPU memory the weights leave), timing, context length, and the rules that
join them; the ``Deployment`` (model × hardware × parallelism × dtypes) the performance model prices.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from simmodel.config.backends import BACKEND_RULES, BackendRules
from simmodel.config.bounds import MAX_INT, MAX_PARALLEL
from simmodel.config.calibration import MODEL_PARTS, identity_of, inapplicable
from simmodel.config.node import _Node
from simmodel.config.schema import (
    HICACHE_PREFETCH_POLICIES,
    HICACHE_WRITE_POLICIES,
    CapacitySpec,
    HostOffloadSpec,
    KvCacheSpec,
    Parallelism,
    SchedulerSpec,
    SglangSchedulerSpec,
    SpeculationSpec,
    StorageSpec,
    WorkerRole,
)
from simmodel.config.timing import _check_calibration, _timing
from simmodel.errors import ScenarioError
from simmodel.perf.capacity import default_kv_blocks
from simmodel.perf.deployment import DTYPE_BYTES, WEIGHT_FORMATS, Deployment
from simmodel.perf.hardware import HardwareSpec
from simmodel.perf.kv_layout import KvLayout, in_flight_tokens, kv_layout, state_block_size
from simmodel.perf.models import ModelSpec
from simmodel.perf.pipeline import stage_memory


def _context_length(node: _Node, model: ModelSpec, limit: int, default: int | None = None) -> int:
    """vLLM's ``max_model_len``: at most the model's ``max_position_embeddings``, as vLLM enforces, and at most
    one attention chunk of a model with chunked local attention (Llama 4: 8192), which is not modelled."""
    chunk = model.attention_chunk_size
    value = node.int("context_length", min(limit, chunk or limit) if default is None else default, minimum=2)
    if value > limit:
        raise ScenarioError(f"{node.at('context_length')}: {model.model_id} supports at most {limit} tokens "
                            f"(max_position_embeddings), got {value}")
    if chunk and value > chunk:
        raise ScenarioError(f"{node.at('context_length')}: {model.model_id} attends within chunks of {chunk} "
                            f"tokens on 3 of every 4 layers, which simmodel does not model; it serves at most "
                            f"{chunk} tokens of context (one chunk: full attention), got {value}")
    return value


def _parallelism(node: _Node, model: ModelSpec) -> Parallelism:
    p = Parallelism(**{f: node.int(f, 1, maximum=MAX_PARALLEL.get(f, MAX_INT))
                       for f in Parallelism.__dataclass_fields__})
    node.done()
    name = model.model_id
    if p.pipeline > model.num_layers:
        raise ScenarioError(f"{node.at('pipeline')}: each stage holds at least one of {name}'s {model.num_layers} "
                            f"layers, so at most {model.num_layers} stages; got {p.pipeline}", category="invalid_shape")
    if model.num_attention_heads % p.tensor:
        raise ScenarioError(f"{node.at('tensor')}: must divide the {model.num_attention_heads} attention "
                            f"heads of {name}, got {p.tensor}", category="invalid_shape")
    if not model.is_mla and model.num_kv_heads % p.tensor and p.tensor % model.num_kv_heads:
        raise ScenarioError(f"{node.at('tensor')}: must divide or be a multiple of the {model.num_kv_heads} "
                            f"KV heads of {name}, got {p.tensor}", category="invalid_shape")
    if model.is_mamba and (model.mamba_heads % p.tensor or (model.mamba_groups % p.tensor and model.mamba_groups > 1)):
        raise ScenarioError(f"{node.at('tensor')}: must divide the {model.mamba_heads} Mamba-2 heads of {name} and "
                            f"its {model.mamba_groups} groups (vLLM's MambaMixer2 replicates only a single group), "
                            f"got {p.tensor}", category="invalid_shape")
    if p.tensor % p.decode_context:
        raise ScenarioError(f"{node.at('decode_context')}: must divide tensor ({p.tensor}), "
                            f"got {p.decode_context}")
    if p.prefill_context > 1 and p.decode_context > 1:
        raise ScenarioError(f"{node.path}: at most one of prefill_context and decode_context may be above 1")
    # vLLM lays experts over the worker's tensor × attention_data GPUs; unset, they are tensor-sharded.
    return expert_layout(node, model, p, p.tensor * p.attention_data, "tensor × attention_data")


def expert_layout(node: _Node, model: ModelSpec, p: Parallelism, gpus: int, over: str) -> Parallelism:
    """``moe_tensor`` and ``moe_expert``: 1 for a dense model; for an MoE model their product is the ``gpus`` the
    experts are spread over (``over`` names them), tensor-sharded over all of them when both are unset, and
    ``moe_expert`` divides the experts."""
    name = model.model_id
    if not model.is_moe:
        for key in ("moe_tensor", "moe_expert"):
            if getattr(p, key) != 1:
                raise ScenarioError(f"{node.at(key)}: {name} has no MoE experts; must be 1", category="invalid_shape")
        return p
    if p.moe_tensor == 1 and p.moe_expert == 1:
        p = replace(p, moe_tensor=gpus)
    elif p.moe_tensor * p.moe_expert != gpus:
        raise ScenarioError(f"{node.path}: moe_tensor × moe_expert ({p.moe_tensor} × {p.moe_expert}) must equal "
                            f"{over} ({gpus}), the GPUs the experts are spread over", category="invalid_shape")
    if model.num_experts % p.moe_expert:
        raise ScenarioError(f"{node.at('moe_expert')}: must divide the {model.num_experts} experts of {name}, "
                            f"got {p.moe_expert}", category="invalid_shape")
    return p


def _check_chunk_unit(node: _Node, scheduler: SchedulerSpec, block_size: int, chunked: bool) -> None:
    """TensorRT-LLM cuts a truncated prompt chunk to whole KV blocks (``chunk_unit`` may ask for 1 token, as Dynamo's
    mocker cuts, or whole multiples of a block); a pass must hold one unit."""
    unit = scheduler.trtllm.chunk_unit
    if unit is not None and not chunked:
        raise ScenarioError(f"{node.at('scheduler.chunk_unit')}: only cuts chunks of prompts, and "
                            f"enable_chunked_prefill is false; remove it")
    if unit is not None and unit != 1 and unit % block_size:
        raise ScenarioError(f"{node.at('scheduler.chunk_unit')}: a chunk ends on a KV block boundary, so it must be "
                            f"a multiple of kv_cache.block_size ({block_size}), or 1 to cut anywhere as Dynamo's "
                            f"mocker does; got {unit}")
    unit = block_size if unit is None else unit
    if chunked and scheduler.max_batched_tokens < unit:
        raise ScenarioError(f"{node.at('scheduler.max_batched_tokens')}: TensorRT-LLM cuts a prompt chunk to whole "
                            f"units of {unit} tokens (scheduler.chunk_unit, else kv_cache.block_size), so a pass must "
                            f"hold one; got {scheduler.max_batched_tokens}")


def _worker(node: _Node, model: ModelSpec, hardware: HardwareSpec, dtype: str, engine_context: int,
            chunked: bool, name: str = "aggregated", speculation: SpeculationSpec | None = None,
            backend: str = "vllm", base_dir: Path | None = None) -> WorkerRole:
    startup = node.number("startup_seconds", 0.0, maximum=1e6)  # (checked against the planner: ``planner``)
    context_length = _context_length(node, model, model.max_position_embeddings, engine_context)
    parallelism = _parallelism(node.node("parallelism"), model)
    rules = BACKEND_RULES[backend]
    scheduler = rules.scheduler(node.node("scheduler"), context_length, chunked,
                                1 if name == "prefill" else 256, speculation)
    sg = scheduler.sglang
    if sg is not None and sg.enable_mixed_chunk and name != "aggregated":
        raise ScenarioError(f"{node.at('scheduler.enable_mixed_chunk')}: mixes a prefill chunk with running "
                            f"decodes, so it only applies to aggregated workers (a {name} worker never has both)")
    if sg is not None and sg.enable_mixed_chunk and sg.prefill_decode_interval:
        raise ScenarioError(f"{node.at('scheduler.enable_mixed_chunk')}: cannot be used with "
                            f"prefill_decode_interval (not modeled together); set one of them")
    if sg is not None and sg.prefill_decode_interval and name != "aggregated":
        raise ScenarioError(f"{node.at('scheduler.prefill_decode_interval')}: spaces prefills between decode "
                            f"rounds, so it only applies to aggregated workers (a {name} worker never mixes them)")
    if sg is not None and name == "decode":
        base = SglangSchedulerSpec()
        for key in ("chunked_prefill_size", "max_prefill_tokens", "schedule_policy"):
            if getattr(sg, key) != getattr(base, key):
                raise ScenarioError(f"{node.at('scheduler.' + key)}: a decode worker never prefills (its requests "
                                    f"arrive with their KV); remove it")
    if sg is not None and sg.chunked_prefill_size < parallelism.attention_data:
        raise ScenarioError(f"{node.at('scheduler.chunked_prefill_size')}: is divided over the "
                            f"{parallelism.attention_data} attention-DP ranks, so it must be at least that; got "
                            f"{sg.chunked_prefill_size}")
    host_loop, frontend, profile, vision = rules.host(node, name, parallelism)
    if sg is not None and sg.enable_mixed_chunk and host_loop:
        raise ScenarioError(f"{node.at('scheduler.enable_mixed_chunk')}: cannot be used with host_loop (the "
                            f"overlap loop with mixed passes is not modeled); set one of them")
    p = parallelism
    if scheduler.launch is not None and not scheduler.async_scheduling:
        raise ScenarioError(f"{node.at('scheduler.launch')}: models vLLM's async engine loop; needs "
                            f"async_scheduling true")
    if scheduler.launch is not None and (name != "aggregated" or p.tensor * p.pipeline * p.attention_data
                                         * p.prefill_context != 1):
        raise ScenarioError(f"{node.at('scheduler.launch')}: only one-GPU aggregated workers launch passes inside "
                            f"vLLM's engine loop (tensor, pipeline, attention_data and prefill_context of 1)")
    if scheduler.prefill_schedule_interval > 1 and parallelism.attention_data == 1:
        raise ScenarioError(f"{node.at('scheduler.prefill_schedule_interval')}: balances prefills across "
                            f"attention-DP ranks, so it needs parallelism.attention_data > 1 (got 1)")
    kv_cache = _kv_cache(node.node("kv_cache"), rules, sglang=sg is not None)
    if p.pipeline > 1:
        _check_pipeline(node, backend, name, scheduler, kv_cache, model, speculation, p)
    if kv_cache.host_offload is not None and name == "decode":
        raise ScenarioError(f"{node.at('kv_cache.host_offload')}: a decode worker receives its prompts' KV from the "
                            f"prefill pool, and a host tier beside that transfer is not modeled; give the prefill "
                            f"workers the tier instead")
    if sg is not None and name != "decode" and not (sg.ignore_eos and not kv_cache.prefix_caching):
        # (with ignore_eos and the radix cache off SGLang cuts a prompt at the budget itself, not at a page)
        _check_chunk_holds_a_page(node, scheduler, kv_cache.block_size, parallelism.attention_data, host_loop)
    if scheduler.trtllm is not None:
        _check_chunk_unit(node, scheduler, kv_cache.block_size, chunked)
    timing = _timing(node.node("timing"), base_dir, hardware.system_id if hardware.registry else None, backend)
    node.done()
    if timing.type == "default" and parallelism.prefill_context > 1:
        raise ScenarioError(f"{node.at('parallelism.prefill_context')}: prefill context parallelism is not "
                            f"modeled by the default timing; use timing fixed or polynomial, or set it to 1")
    p = parallelism
    # "auto" weights are the checkpoint's own dtype (FP8 for DeepSeek-V3; a float32 checkpoint is served
    # in 16 bits, as vLLM's dtype "auto" does); "auto" KV is the 16-bit activation dtype, as vLLM's
    # kv_cache_dtype "auto" is.
    deployment = Deployment(model, hardware, p.tensor, p.attention_data, p.moe_tensor, p.moe_expert,
                            p.prefill_context, p.decode_context,
                            kv_bytes=2 if kv_cache.dtype == "auto" else DTYPE_BYTES[kv_cache.dtype],
                            encoder_parallel="tp" if vision is None else vision.encoder_parallel,
                            **weight_fields(model, dtype))
    _check_model_terms(node, deployment)
    if deployment.weight_kind.gemm == "int8" and hardware.int8_ops is None:
        raise ScenarioError(f"engine.dtype: int8 (W8A8) runs on INT8 tensor cores, and {hardware.system_id} (the "
                            f"{name} workers' GPU) gives no int8_ops; add it to the system file or choose another dtype")
    if timing.calibration is not None:
        timing = _check_calibration(node, timing, identity_of(name, deployment, backend, p))
    speculative = speculation.num_speculative_tokens if speculation is not None else 0
    if model.num_linear_layers:
        kv_cache = _check_linear(node, kv_cache, deployment, backend, name, speculative, chunked,
                                 speculation is not None and speculation.kind == "ngram")
    layout = _check_sliding(node, kv_cache, deployment, backend, name, speculative)
    blocks = _kv_blocks(node, kv_cache, deployment, layout.block_fraction, p.pipeline)
    host = kv_cache.host_offload
    block_bytes = kv_cache.block_size * deployment.kv_bytes_per_token_per_gpu * deployment.tensor
    for field, capacity in (("capacity_gib", host and host.capacity_gib),
                            ("storage.capacity_gib", host and host.storage and host.storage.capacity_gib)):
        if capacity is not None and capacity * (1 << 30) < block_bytes:
            raise ScenarioError(f"{node.at('kv_cache.host_offload.' + field)}: holds no whole KV block (one is "
                                f"{block_bytes / (1 << 20):g} MiB over the rank's GPUs); give it at least that")
    if host is not None and host.storage is not None and host.write_policy is None and host.capacity_gib is not None:
        # vLLM reads a prompt's blocks found on storage into the host before it loads them: a prompt whose blocks
        # cannot all be on the host at once never loads (each read evicts the ones read before: a livelock).
        held, prompt = int(host.capacity_gib * (1 << 30) // block_bytes), context_length // kv_cache.block_size
        if held < prompt:
            raise ScenarioError(f"{node.at('kv_cache.host_offload.capacity_gib')}: holds {held} KV blocks, fewer than "
                                f"a prompt at context_length {context_length} fills ({prompt}); with a storage tier "
                                f"behind it, vLLM reads a prompt's blocks found on storage into the host before "
                                f"loading them, so such a prompt would never load; give it at least "
                                f"{prompt * block_bytes / (1 << 30):.3g} GiB or lower context_length")
    # (several groups: what one request takes at admission, its whole prompt in every group when vLLM reserves it
    # (a sliding group at most its admission cap), else vLLM's startup check, the sliding groups' cap)
    in_flight = in_flight_tokens(scheduler.max_batched_tokens, scheduler.async_scheduling, p.pipeline)
    cap = layout.sliding_cap(context_length, kv_cache.block_size, in_flight) if layout.sliding_groups else None
    needed = (rules.blocks_needed(context_length, kv_cache.block_size) if not layout.hybrid
              else layout.blocks(context_length, 0, kv_cache.block_size, cap) if scheduler.reserve_full_isl
              else layout.max_blocks(context_length, kv_cache.block_size, in_flight))
    if blocks < needed:
        held = f"{blocks} KV {rules.kv_unit} of {kv_cache.block_size} token{'s' if kv_cache.block_size > 1 else ''}"
        raise ScenarioError(f"{node.at('kv_cache.capacity')}: a rank has {held} but one request at "
                            f"context_length {context_length} needs {needed}; lower context_length or give the "
                            f"rank more KV", category="kv_capacity")
    drafts = speculation.num_speculative_tokens if speculation is not None and speculation.kind == "mtp" else 0
    return WorkerRole(parallelism, scheduler, kv_cache, timing, context_length, blocks, deployment, name,
                      host_loop, frontend, profile, vision, startup, speculative_tokens=speculative, draft_tokens=drafts)


def weight_fields(model: ModelSpec, dtype: str) -> dict:
    """The ``Deployment`` fields of ``engine.dtype``: ``auto`` serves the checkpoint's own weights (16-bit at most:
    a float32 checkpoint is served in 16 bits, as vLLM's dtype ``auto`` does; experts quantized on their own keep
    their bytes), any other a format of ``WEIGHT_FORMATS`` for every weight."""
    if dtype == "auto" and model.weight_format is not None:
        dtype = model.weight_format
    if dtype == "auto" and model.expert_weight_format is not None:
        return dict(weight_bytes=min(model.dtype_bytes, 2), expert_weight_format=model.expert_weight_format,
                    expert_weight_bytes=WEIGHT_FORMATS[model.expert_weight_format].bytes_per_weight)
    if dtype == "auto":
        return dict(weight_bytes=min(model.dtype_bytes, 2), expert_weight_bytes=model.expert_dtype_bytes or None)
    return dict(weight_bytes=WEIGHT_FORMATS[dtype].bytes_per_weight, weight_format=dtype)


def _check_model_terms(node: _Node, deployment: Deployment) -> None:
    """The default timing's fields for parts a deployment does not have would change nothing: refused."""
    timing = node.node("timing").data
    for key, why in inapplicable(deployment).items():
        if timing.get(key) is not None:
            raise ScenarioError(f"{node.at('timing.' + key)}: only applies to {MODEL_PARTS[key]}; {why}")


def _check_chunk_holds_a_page(node: _Node, scheduler: SchedulerSpec, page_size: int, ranks: int,
                              host_loop: bool) -> None:
    """SGLang cuts a prompt at the last whole page that fits a rank's chunk budget (the prefill budget
    divided over the attention-DP ranks): a budget below one page never prefills anything."""
    sg = scheduler.sglang
    assert sg is not None
    field, budget = (("max_batched_tokens", scheduler.max_batched_tokens) if host_loop
                     else ("chunked_prefill_size", sg.chunked_prefill_size))
    if budget // ranks < page_size:
        raise ScenarioError(f"{node.at('scheduler.' + field)}: a rank's share ({budget} // {ranks} attention-DP "
                            f"rank(s) = {budget // ranks} tokens) must hold one KV page of {page_size} tokens "
                            f"(kv_cache.block_size), or no prompt is ever prefilled; got {budget}")


def _kv_cache(node: _Node, rules: BackendRules, sglang: bool = False) -> KvCacheSpec:
    # vLLM's 16-token blocks; SGLang's --page-size (1 by default): capacity blocks are its pages.
    block_size = node.int("block_size", rules.default_block_size)
    prefix = node.bool("prefix_caching", True)
    if rules.name != "vllm" and node.raw("hybrid", None) is not None:
        raise ScenarioError(f"{node.at('hybrid')}: is vLLM's hybrid KV cache manager "
                            f"(--disable-hybrid-kv-cache-manager); {rules.label} has no such setting, so remove it")
    hybrid = node.bool("hybrid", None) if node.raw("hybrid", None) is not None else None
    dtype = node.choice("dtype", ("auto", *DTYPE_BYTES), "auto")
    cap = node.node("capacity")
    kind = cap.choice("type", ("default", "fixed"), "default")
    if kind == "default":
        capacity = CapacitySpec(kind, memory_fraction=cap.number("memory_fraction", 0.9, positive=True,
                                                                 maximum=1.0))
    else:
        capacity = CapacitySpec(kind, blocks=cap.int("blocks"))
    cap.done()
    host = None
    if node.raw("host_offload", None) is not None:  # (null: none)
        host = _host_offload(node, prefix, sglang)
    node.done()
    return KvCacheSpec(block_size, prefix, capacity, dtype, host, hybrid)


def _host_offload(kv: _Node, prefix_caching: bool, sglang: bool) -> HostOffloadSpec:
    """``kv_cache.host_offload``: a CPU tier found by the blocks' content keys (vLLM) or kept in the radix tree
    (SGLang's HiCache), so it needs prefix caching. vLLM sizes it in ``capacity_gib``; SGLang by ``ratio`` (2 by
    default, as SGLang resolves an unset ``--hicache-ratio``) or ``capacity_gib``, and has a ``write_policy``."""
    node = kv.node("host_offload")
    if not prefix_caching:
        raise ScenarioError(f"{node.path}: the host tier finds a prompt's blocks by their content keys, which "
                            f"exist only with prefix caching; set {kv.at('prefix_caching')} to true")
    ratio = write_policy = None
    if sglang:
        if node.raw("capacity_gib", None) is not None and node.raw("ratio", None) is not None:
            raise ScenarioError(f"{node.at('ratio')}: give capacity_gib or ratio, not both (both size SGLang's host "
                                f"pool; capacity_gib wins in SGLang, so one would be ignored)")
        capacity = node.number("capacity_gib", None, positive=True, maximum=1e6)
        if capacity is None:
            ratio = node.number("ratio", 2.0, positive=True, maximum=1e4)
        write_policy = node.choice("write_policy", HICACHE_WRITE_POLICIES, "write_through")
    else:
        for key in ("ratio", "write_policy"):
            if node.raw(key, None) is not None:
                raise ScenarioError(f"{node.at(key)}: is SGLang HiCache's (--hicache-{key.replace('_', '-')}); "
                                    f"vLLM's offloading connector has no such setting, so remove it")
        capacity = node.number("capacity_gib", positive=True, maximum=1e6)
    policy = node.choice("policy", ("lru",), "lru")
    link = node.number("link_gb_per_s", None, positive=True, maximum=1e6)
    latency = node.number("latency_us", 0.0, maximum=1e9)
    storage = None
    if node.raw("storage", None) is not None:  # (null: none)
        storage = _storage(node.node("storage"), sglang)
    node.done()
    return HostOffloadSpec(capacity, policy, link, latency, ratio, write_policy, storage)


SGLANG_PREFETCH = ("prefetch_policy", "prefetch_threshold", "prefetch_timeout_base_s",
                   "prefetch_timeout_per_ki_token_s")
"""The storage fields only SGLang's HiCache reads (its prefetch from storage)."""


def _storage(node: _Node, sglang: bool) -> StorageSpec:
    """``host_offload.storage``: vLLM's secondary tier behind the CPU tier (``TieringOffloadingSpec``), or SGLang's
    storage backend behind HiCache's host pool (``--hicache-storage-backend``) with its prefetch settings."""
    sizes = (node.number("capacity_gib", None, positive=True, maximum=1e9),
             node.number("read_gb_per_s", 5.0, positive=True, maximum=1e6),
             node.number("write_gb_per_s", 5.0, positive=True, maximum=1e6),
             node.number("latency_us", 100.0, maximum=1e9))
    shared = node.bool("shared", False)
    if not sglang:
        for key in SGLANG_PREFETCH:
            if node.raw(key, None) is not None:
                raise ScenarioError(f"{node.at(key)}: is SGLang HiCache's prefetch setting; vLLM reads a block found "
                                    f"on storage when a lookup finds it, so remove it")
        node.done()
        return StorageSpec(*sizes, shared=shared)
    policy = node.choice("prefetch_policy", HICACHE_PREFETCH_POLICIES, "best_effort")
    if policy != "timeout":
        for key in SGLANG_PREFETCH[2:]:
            if node.raw(key, None) is not None:
                raise ScenarioError(f"{node.at(key)}: only applies with prefetch_policy timeout (how long a request "
                                    f"waits for its prefetch); prefetch_policy is {policy}, so remove it")
    spec = StorageSpec(*sizes, policy, node.int("prefetch_threshold", 256, minimum=0, maximum=10_000_000),
                       node.number("prefetch_timeout_base_s", 1.0, maximum=1e6),
                       node.number("prefetch_timeout_per_ki_token_s", 0.25, maximum=1e6), shared)
    node.done()
    return spec


def _check_pipeline(node: _Node, backend: str, name: str, scheduler: SchedulerSpec, kv: KvCacheSpec,
                    model: ModelSpec, speculation: SpeculationSpec | None, p: Parallelism) -> None:
    """Pipeline parallelism is modelled as vLLM runs it (``perf.pipeline``): a batch queue of P synchronous, of
    P + 1 under async scheduling (Model Runner V2, vLLM 0.32's default); refused beside what that queue is not
    modelled with."""
    at = node.at("parallelism.pipeline")
    refusals = (
        (backend != "vllm", f"is modelled for vLLM's batch queue; {backend}'s pipeline loop is not, so use backend "
                            f"vllm or set it to 1"),
        (name != "aggregated", f"is modelled on aggregated workers only (P/D handoffs between pipelined workers "
                               f"are not); set it to 1 on the {name} workers"),
        (p.attention_data != 1 or p.prefill_context != 1 or p.decode_context != 1,
         "beside attention DP or context parallelism is not modelled; set those to 1"),
        (kv.host_offload is not None, "with a host KV tier is not modelled; remove kv_cache.host_offload"),
        (speculation is not None, "with speculative decoding is not modelled; remove engine.speculation"),
        (model.vision is not None, f"of a vision-language model ({model.model_id}) is not modelled"),
        (model.sliding_window > 0 and model.num_sliding_layers == model.num_layers,
         f"of a model whose every layer attends within a window ({model.model_id}) is not modelled"),
        (model.sliding_window > 0 and model.num_sliding_layers > 0 and kv.hybrid is not False,
         "with vLLM's hybrid KV cache groups (sliding-window layers) is not modelled; set kv_cache.hybrid false"),
        (model.num_linear_layers > 0, f"of a model with state layers (linear attention, Mamba-2: {model.model_id}) is "
                                      f"not modelled"),
    )
    for refused, why in refusals:
        if refused:
            raise ScenarioError(f"{at}: {why}")


def _check_linear(node: _Node, kv: KvCacheSpec, deployment: Deployment, backend: str, name: str,
                  speculative: int, chunked: bool = True, ngram: bool = False) -> KvCacheSpec:
    """A model with state layers (Qwen3-Next's linear attention, Nemotron-H's Mamba-2): served by vLLM's hybrid KV
    cache manager, its state in groups of their own (``perf.kv_layout``), with the block size vLLM raises to hold a
    layer's state (the default; a smaller ``kv_cache.block_size`` is refused); with prefix caching, its states cached
    as vLLM's ``mamba_cache_mode`` align caches them (``engine.state_kv_cache``). Refused: other engines, the manager
    off, prefix caching with n-gram drafts or without chunked prefill (vLLM requires it), KV connectors (a host tier,
    P/D) and any role but aggregated."""
    model, d = deployment.model, deployment
    kind = "Mamba-2" if model.is_mamba else "linear-attention"
    what = f"{model.model_id} has {model.num_linear_layers} {kind} layers"
    if backend != "vllm":
        raise ScenarioError(f"engine.backend: {what}, whose state is modelled as vLLM's hybrid KV cache manager "
                            f"keeps it; {backend}'s is not, so use backend vllm")
    refusals = (
        (kv.hybrid is False, "kv_cache.hybrid", "vLLM cannot serve them without its hybrid KV cache manager; "
                                                "remove it"),
        (kv.prefix_caching and ngram, "kv_cache.prefix_caching",
         "prefix caching of their states with n-gram drafts (vLLM's mamba_cache_mode align with speculative state "
         "blocks and no EAGLE block drop) is not modelled; set it to false, or use engine.nextn"),
        (kv.prefix_caching and not chunked, "kv_cache.prefix_caching",
         "vLLM caches their states (mamba_cache_mode align) only with chunked prefill; set it to false or turn "
         "engine.enable_chunked_prefill back on"),
        (kv.host_offload is not None, "kv_cache.host_offload", "a host tier beside their states is not modelled"),
        (name != "aggregated", "parallelism", f"{name} workers of such a model are not modelled (P/D handoffs "
                                              f"of their states); serve it aggregated"),
    )
    for refused, field, why in refusals:
        if refused:
            raise ScenarioError(f"{node.at(field)}: {what}: {why}")
    per_token = d.kv_bytes_per_token_per_gpu / model.num_attention_layers
    state = d.linear_state_bytes(speculative) / model.num_linear_layers
    needed = state_block_size(per_token, state)
    if node.node("kv_cache").raw("block_size", None) is None:
        return replace(kv, block_size=needed)
    if kv.block_size < needed:
        raise ScenarioError(f"{node.at('kv_cache.block_size')}: {what}; vLLM raises the block size to {needed} "
                            f"tokens so that one attention layer's block holds one layer's state "
                            f"({state / 1e6:.2f} MB); got {kv.block_size}")
    return kv


def _check_sliding(node: _Node, kv: KvCacheSpec, deployment: Deployment, backend: str, name: str,
                   speculative: int) -> KvLayout:
    """The worker's KV cache groups (``perf.kv_layout``), refusing what is not modelled with sliding-window layers:
    other engines' sliding-window pools, and, beside vLLM's hybrid KV cache manager, a host tier and P/D handoffs
    (KV connectors)."""
    model = deployment.model
    sliding = model.sliding_window > 0 and model.num_sliding_layers > 0
    at = node.at("kv_cache.hybrid")
    if not sliding:
        if kv.hybrid is not None and not model.num_linear_layers:
            raise ScenarioError(f"{at}: only applies to models with sliding-window layers, and {model.model_id} has "
                                f"none; remove it")
        return kv_layout(model, speculative_tokens=speculative)
    if backend != "vllm":
        raise ScenarioError(f"engine.backend: {model.model_id} has sliding-window layers ({model.num_sliding_layers} "
                            f"of {model.num_layers}, window {model.sliding_window}), whose KV is modelled as vLLM's "
                            f"hybrid KV cache manager keeps it; {backend}'s sliding-window KV pool is not modelled, so "
                            f"use backend vllm")
    if kv.hybrid is not None and model.num_sliding_layers == model.num_attention_layers:
        raise ScenarioError(f"{at}: every layer of {model.model_id} attends within its window, one group of one kind "
                            f"whether vLLM's hybrid KV cache manager is on or off; remove it")
    layout = kv_layout(model, kv.hybrid is not False, speculative)
    if layout.hybrid:
        why = ("kv_cache.host_offload" if kv.host_offload
               else f"{name} workers" if name in ("prefill", "decode") else None)
        if why is not None and layout.full_groups:
            raise ScenarioError(f"{at}: vLLM's hybrid KV cache manager (on by default for {model.model_id}'s "
                                f"sliding-window layers) is not modelled with {why} (KV connectors, which vLLM runs "
                                f"without it unless they support it); set kv_cache.hybrid false "
                                f"(--disable-hybrid-kv-cache-manager: their KV kept for the whole context)")
        if why is not None:
            raise ScenarioError(f"{node.at(why) if why.startswith('kv_cache') else node.path}: every layer of "
                                f"{model.model_id} attends within a {model.sliding_window}-token window, whose blocks "
                                f"vLLM frees as it goes; that is not modelled with {why} (KV connectors)")
    return layout


def _kv_blocks(node: _Node, kv: KvCacheSpec, deployment: Deployment, block_fraction: float = 1.0,
               pipeline: int = 1) -> int:
    if kv.capacity.type == "fixed":
        return kv.capacity.blocks
    blocks = default_kv_blocks(deployment, memory_fraction=kv.capacity.memory_fraction, block_size=kv.block_size,
                               block_fraction=block_fraction, pipeline=pipeline)
    if blocks <= 0:
        d = deployment
        weights = max(w for w, _ in stage_memory(d, pipeline))
        shape = f"tensor {d.tensor}" + (f", pipeline {pipeline} (its fullest stage)" if pipeline > 1 else "")
        raise ScenarioError(
            f"{node.at('kv_cache.capacity')}: {d.model.model_id} needs {weights / 1e9:.1f} GB of "
            f"weights per GPU at {shape}, leaving no KV memory on {d.hardware.system_id} at "
            f"memory_fraction {kv.capacity.memory_fraction:g}; raise tensor or use a larger GPU",
            category="kv_capacity")
    return blocks
