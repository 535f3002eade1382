"""``engine.workers.<role>.scheduler``: the knobs of vLLM's scheduler (token budget, sequence limit, long
prefill threshold, async scheduling, full-prompt reservation, prefill schedule interval, pass launch), of
SGLang's (chunked prefill size, prefill token cap, schedule policy and conservativeness, new-token ratio) and
of TensorRT-LLM's (capacity policy, chunk unit, the clients' max_tokens); ``backends`` picks one by ``engine.backend`` and refuses the
others' fields.
"""

from __future__ import annotations

from simmodel.config.node import _Node
from simmodel.config.schema import LaunchSpec, SchedulerSpec, SglangSchedulerSpec, SpeculationSpec, TrtllmSchedulerSpec
from simmodel.errors import ScenarioError

SGLANG_SCHEDULER = ("chunked_prefill_size", "max_prefill_tokens", "schedule_policy", "schedule_conservativeness",
                    "new_token_ratio", "clip_max_new_tokens", "prefill_decode_interval", "enable_mixed_chunk",
                    "ignore_eos")
"""The ``scheduler`` fields only SGLang reads."""
VLLM_SCHEDULER = ("long_prefill_token_threshold", "async_scheduling", "reserve_full_isl", "prefill_schedule_interval",
                  "launch")
"""The ``scheduler`` fields only vLLM reads."""
TRTLLM_SCHEDULER = ("capacity_policy", "chunk_unit", "client_max_tokens")
"""The ``scheduler`` fields only TensorRT-LLM reads."""
CAPACITY_POLICIES = ("guaranteed_no_evict", "max_utilization", "static_batch")
"""TensorRT-LLM's ``CapacitySchedulerPolicy`` values (``simmodel.engine.scheduler.trtllm.CAPACITY_POLICIES``)."""
DEFAULT_BATCHED_TOKENS = SchedulerSpec().max_batched_tokens
"""``max_batched_tokens`` when unset (vLLM's ``max_num_batched_tokens`` as simmodel defaults it; SGLang's
host loop takes it as its chunked prefill size)."""
SGLANG_SPECULATIVE_MAX_RUNNING = 48
"""SGLang's ``max_running_requests`` when unset with EAGLE/MTP speculative decoding (``_handle_eagle_family``,
sglang 0.5.23 ``arg_groups/speculative_hook.py``)."""


def sglang_scheduler(node: _Node, max_sequences: int, speculation: SpeculationSpec | None = None) -> SchedulerSpec:
    """SGLang's scheduler (its own knobs in ``SchedulerSpec.sglang``); it never schedules asynchronously here.
    With EAGLE/MTP drafts, ``max_sequences`` unset is 48, SGLang's ``max_running_requests`` then
    (``_handle_eagle_family``)."""
    if speculation is not None and max_sequences != 1:
        max_sequences = SGLANG_SPECULATIVE_MAX_RUNNING
    spec = SchedulerSpec(max_batched_tokens=node.int("max_batched_tokens", DEFAULT_BATCHED_TOKENS),
                         max_sequences=node.int("max_sequences", max_sequences), async_scheduling=False,
                         sglang=_sglang_knobs(node))
    node.done()
    return spec


def trtllm_scheduler(node: _Node, context_length: int, chunked: bool, max_sequences: int) -> SchedulerSpec:
    """TensorRT-LLM's scheduler: ``max_batched_tokens`` is its ``max_num_tokens``, ``max_sequences`` its
    ``max_batch_size``; planned synchronously (its overlap scheduler is not modelled)."""
    spec = SchedulerSpec(max_batched_tokens=node.int("max_batched_tokens", DEFAULT_BATCHED_TOKENS),
                         max_sequences=node.int("max_sequences", max_sequences), async_scheduling=False,
                         trtllm=TrtllmSchedulerSpec(
                             capacity_policy=_capacity_policy(node),
                             chunk_unit=node.int("chunk_unit", None),
                             client_max_tokens=_client_max_tokens(node)))
    node.done()
    if not chunked and spec.max_batched_tokens < context_length:
        raise ScenarioError(f"{node.at('max_batched_tokens')}: with enable_chunked_prefill false (TensorRT-LLM's "
                            f"enable_chunked_context) a whole prompt must fit one pass, so it must be >= "
                            f"context_length ({context_length}); got {spec.max_batched_tokens}")
    return spec


def _capacity_policy(node: _Node) -> str:
    """``capacity_policy``, in simmodel's spelling or TensorRT-LLM's own (``GUARANTEED_NO_EVICT``)."""
    value = node.raw("capacity_policy", "guaranteed_no_evict")
    if isinstance(value, str) and value.lower() in CAPACITY_POLICIES:
        return value.lower()
    return node.choice("capacity_policy", CAPACITY_POLICIES)  # (refused, naming the choices)


def _client_max_tokens(node: _Node) -> int | str:
    """``client_max_tokens``: ``output``, ``context_length`` or a positive number of tokens."""
    value = node.raw("client_max_tokens", "output")
    if value in ("output", "context_length"):
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ScenarioError(f"{node.at('client_max_tokens')}: must be output, context_length or a positive number "
                            f"of tokens, got {value!r}")
    return node.int("client_max_tokens")


def vllm_scheduler(node: _Node, context_length: int, chunked: bool, max_sequences: int,
                   speculation: SpeculationSpec | None) -> SchedulerSpec:
    """vLLM's scheduler, with the bounds vLLM itself enforces."""
    # vLLM 0.32 schedules asynchronously by default, also with MTP/EAGLE drafts (their placeholders stand for the
    # drafts of the pass in flight), but turns it off with CPU n-gram drafts, and refuses it when asked for.
    ngram = speculation is not None and speculation.kind == "ngram"
    asynchronous = node.bool("async_scheduling", not ngram)
    if asynchronous and ngram:
        raise ScenarioError(f"{node.at('async_scheduling')}: true cannot be used with n-gram speculative decoding "
                            f"(vLLM runs n-gram drafts synchronously); leave it unset or false")
    spec = SchedulerSpec(
        max_batched_tokens=node.int("max_batched_tokens", DEFAULT_BATCHED_TOKENS),
        max_sequences=node.int("max_sequences", max_sequences),
        long_prefill_token_threshold=node.int("long_prefill_token_threshold", 0, minimum=0),
        async_scheduling=asynchronous,
        reserve_full_isl=node.bool("reserve_full_isl", True),
        prefill_schedule_interval=node.int("prefill_schedule_interval", 1),
        launch=_launch(node) if node.raw("launch", None) is not None else None,
    )
    node.done()
    if spec.max_batched_tokens < spec.max_sequences:
        raise ScenarioError(f"{node.at('max_batched_tokens')}: must be >= max_sequences "
                            f"({spec.max_sequences}), as vLLM requires; got {spec.max_batched_tokens}")
    if not chunked and spec.max_batched_tokens < context_length:
        raise ScenarioError(f"{node.at('max_batched_tokens')}: with enable_chunked_prefill false a whole "
                            f"prompt must fit one pass, so vLLM requires it >= context_length "
                            f"({context_length}); got {spec.max_batched_tokens}")
    return spec


def _launch(node: _Node) -> LaunchSpec:
    ln = node.node("launch")
    spec = LaunchSpec(ln.number("decode_ms"), ln.number("piecewise_ms"), ln.number("eager_ms"),
                      ln.int("max_cudagraph_capture_size", 512), ln.number("eager_queue_fraction", 0.0, maximum=1.0))
    ln.done()
    return spec


def _sglang_knobs(node: _Node) -> SglangSchedulerSpec:
    ratio = node.node("new_token_ratio")
    base = SglangSchedulerSpec()
    spec = SglangSchedulerSpec(
        chunked_prefill_size=node.int("chunked_prefill_size", base.chunked_prefill_size),
        max_prefill_tokens=node.int("max_prefill_tokens", base.max_prefill_tokens),
        schedule_policy=node.choice("schedule_policy", ("fcfs", "lpm"), base.schedule_policy),
        schedule_conservativeness=node.number("schedule_conservativeness", base.schedule_conservativeness,
                                              positive=True, maximum=100.0),
        init_new_token_ratio=ratio.number("init", base.init_new_token_ratio, maximum=1.0),
        min_new_token_ratio_factor=ratio.number("min_factor", base.min_new_token_ratio_factor, maximum=1.0),
        new_token_ratio_decay_steps=ratio.int("decay_steps", base.new_token_ratio_decay_steps),
        clip_max_new_tokens=node.int("clip_max_new_tokens", base.clip_max_new_tokens),
        prefill_decode_interval=node.int("prefill_decode_interval", 0, minimum=0),
        enable_mixed_chunk=node.bool("enable_mixed_chunk", False),
        ignore_eos=node.bool("ignore_eos", False),
    )
    ratio.done()
    return spec
