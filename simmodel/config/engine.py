"""``engine``: what serves the traffic. The mode (aggregated, disaggregated prefill and decode, or AFD's attention
workers and their FFN companion, ``simmodel.config.afd``), model,
hardware, backend (its rules: ``backends``), context length, seed and speculative decoding shared by every
worker; one worker role per mode (``simmodel.config.workers``); the P→D KV transfer; and the bounds on the
whole deployment (GPUs; the backend's own, such as prefix-caching KV blocks) summed over its roles.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from simmodel.config.afd import check_attention_role, parse_afd
from simmodel.config.backends import BACKEND_RULES, BackendRules
from simmodel.config.bounds import MAX_GPUS, deployment_total
from simmodel.config.encoder import parse_encoder
from simmodel.config.node import _Node
from simmodel.config.registries import _hardware, _model, _role_hardware
from simmodel.config.schema import Engine, KvTransferSpec, SpeculationSpec, WorkerRole
from simmodel.config.workers import _context_length, _worker
from simmodel.errors import ScenarioError
from simmodel.perf.afd import attention_side
from simmodel.perf.deployment import WEIGHT_FORMATS  # (engine.dtype's choices)

MAX_OVERHEAD_MS = 3_600_000.0
"""An hour: far above any real request's time outside the engine, and within what the clock holds."""


def _engine(node: _Node, base_dir: Path) -> Engine:
    mode = node.choice("mode", ("aggregated", "disaggregated", "afd"), "aggregated")
    model_id, model = _model(node, base_dir)
    hardware_id, hardware = _hardware(node, base_dir)
    backend = node.choice("backend", tuple(BACKEND_RULES), "vllm")
    rules = BACKEND_RULES[backend]
    dtype = node.choice("dtype", ("auto", *WEIGHT_FORMATS), "auto")
    context_length = _context_length(node, model, model.max_position_embeddings)
    chunked = node.bool("enable_chunked_prefill", True)
    rules.check_chunked(node, chunked)
    seed = node.int("seed", 0, minimum=0, maximum=2**32 - 1)
    explicit_overhead = node.number("request_overhead_ms", None, maximum=MAX_OVERHEAD_MS)
    speculation = _speculation(node, seed)
    rules.check_speculation(node, speculation)
    workers = node.node("workers", required=True)
    names = {"aggregated": ("aggregated",), "afd": ("attention",)}.get(mode, ("prefill", "decode"))
    roles = {}
    for name in names:
        role_node = workers.node(name, required=True)
        role_hardware = hardware
        if mode == "disaggregated" and role_node.raw("hardware", None) is not None:
            role_hardware = _role_hardware(role_node, base_dir)
        served = attention_side(model) if mode == "afd" else model  # (AFD: the FFN lives on the companion)
        roles[name] = _worker(role_node, served, role_hardware, dtype, context_length, chunked, name, speculation,
                              backend, base_dir)
    if mode == "afd":
        afd = parse_afd(node.node("afd"), workers.node("ffn", required=True), model, hardware, dtype)
        check_attention_role(workers.node("attention"), roles["attention"], chunked, node)
        roles["attention"] = replace(roles["attention"], afd=afd)
    elif node.has("afd"):
        raise ScenarioError(f"{node.at('afd')}: only applies to engine.mode: afd")
    overhead = _request_overhead(workers, roles, names, explicit_overhead, node.at("request_overhead_ms"), rules)
    _check_gpu_count(workers, roles)
    companion = roles[names[0]].afd
    if companion is not None:
        a, f = roles["attention"].parallelism.replicas, companion.ffn.replicas
        if a % f and f % a:
            raise ScenarioError(f"{workers.at('ffn')}.parallelism.replicas: FFN workers either serve several attention "
                                f"workers each or split each one's tokens, so one count must divide the other; "
                                f"{a} attention and {f} FFN workers")
        total = roles["attention"].parallelism.gpu_count + companion.ffn.gpu_count
        if total > MAX_GPUS:
            raise ScenarioError(f"{workers.at('ffn')}.parallelism.replicas: the deployment would use {total:,} GPUs; "
                                f"at most {MAX_GPUS:,} (the attention workers' and the FFN workers' together)")
    rules.check_roles(workers, roles, mode)
    workers.done()
    if mode != "disaggregated" and node.has("kv_transfer"):
        raise ScenarioError(f"{node.at('kv_transfer')}: only applies to engine.mode: disaggregated")
    transfer = _kv_transfer(node.node("kv_transfer")) if mode == "disaggregated" else None
    if transfer is not None and transfer.via == "storage":
        host = roles["prefill"].kv_cache.host_offload
        if host is None or host.storage is None or not host.storage.shared:
            raise ScenarioError(f"{node.node('kv_transfer').at('via')}: storage hands the KV off through a store the "
                                f"prefill workers write and the decode workers read; give the prefill role one "
                                f"(engine.workers.prefill.kv_cache.host_offload.storage with shared: true)")
    encoder = parse_encoder(node.node("encoder"), hardware, model) if node.raw("encoder", None) is not None else None
    if encoder is not None:
        total = sum(r.parallelism.gpu_count for r in roles.values()) + encoder.gpu_count + (
            companion.ffn.gpu_count if companion is not None else 0)
        if total > MAX_GPUS:
            raise ScenarioError(f"{node.at('encoder')}.parallelism.replicas: the deployment would use {total:,} GPUs; "
                                f"at most {MAX_GPUS:,} (the workers' and the encoder pool's together)")
    node.done()
    return Engine(mode, model_id, hardware_id, backend, roles[names[0]].context_length, chunked, seed, roles,
                  dtype, transfer, speculation, overhead, encoder)


def _request_overhead(workers: _Node, roles: dict[str, WorkerRole], names: tuple[str, ...],
                      explicit: float | None, at: str, rules: BackendRules) -> float:
    """Each request's time outside the passes: ``engine.request_overhead_ms`` where set, else the timing's of
    the role requests reach first: its own ``timing.request_overhead_ms`` or its calibration's, else the
    default timing's frontend cost where it was measured on this backend's API server (vLLM's; SGLang models
    its frontend with ``frontend`` stages), else 0 (the other timings price passes only). A decode role is
    reached through a handoff, never by a request's arrival: it sets none."""
    for name in names[1:]:
        timing = workers.node(name).node("timing")
        if timing.data.get("request_overhead_ms") is not None:
            raise ScenarioError(f"{timing.at('request_overhead_ms')}: only the role requests reach first "
                                f"({names[0]}) sets it; set it there or as engine.request_overhead_ms")
    entry = roles[names[0]].timing
    timing = workers.node(names[0]).node("timing")
    in_timing = timing.data.get("request_overhead_ms") is not None
    if explicit is None:
        own = in_timing or "request_overhead_ms" in entry.calibrated
        return entry.request_overhead_ms if own or rules.frontend_measured else 0.0
    if in_timing:
        raise ScenarioError(f"{at}: also set by {timing.at('request_overhead_ms')}; set it in one place")
    if "request_overhead_ms" in entry.calibrated:
        raise ScenarioError(f"{at}: also set by {timing.at('calibration')} ({entry.calibration.name}); set it in "
                            f"one place")
    return explicit


def _check_gpu_count(workers: _Node, roles: dict[str, WorkerRole]) -> None:
    """The deployment's GPUs (every role's replicas × GPUs per worker) are at most ``MAX_GPUS``; the
    message names the replicas of the role with the most GPUs, the knob that multiplies them."""
    total, largest = deployment_total(roles, lambda role: role.parallelism.gpu_count)
    if total <= MAX_GPUS:
        return
    raise ScenarioError(f"{workers.at(largest)}.parallelism.replicas: the deployment would use {total:,} GPUs; "
                        f"at most {MAX_GPUS:,} (replicas × tensor × pipeline × attention_data × prefill_context, "
                        f"summed over the roles)")


def _speculation(node: _Node, seed: int) -> SpeculationSpec | None:
    """``engine.speculation`` (n-gram drafts) or ``engine.nextn`` / ``nextn_accepted`` (MTP/EAGLE heads)."""
    if node.raw("speculation", None) is not None and node.raw("nextn", None) is not None:
        raise ScenarioError(f"{node.at('nextn')}: cannot be combined with engine.speculation (one drafter at a time)")
    if node.raw("speculation", None) is not None:
        sp = node.node("speculation")
        sp.choice("kind", ("ngram",))
        k = sp.int("num_speculative_tokens")
        if k > 5:
            raise ScenarioError(f"{sp.at('num_speculative_tokens')}: must be from 1 to 5, got {k}")
        rates = sp.raw("acceptance_rates")
        if (not isinstance(rates, list) or len(rates) != k or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1 for x in rates)):
            raise ScenarioError(f"{sp.at('acceptance_rates')}: must be {k} numbers from 0 to 1 (draft i's chance "
                                f"of acceptance given drafts before it were accepted)")
        spec = SpeculationSpec("ngram", k, tuple(float(x) for x in rates), seed=sp.int("seed", seed, minimum=0, maximum=2**32 - 1))
        sp.done()
        return spec
    if node.raw("nextn", None) is None:
        if node.raw("nextn_accepted", None) is not None:
            raise ScenarioError(f"{node.at('nextn_accepted')}: needs engine.nextn")
        return None
    k = node.int("nextn")
    if k > 5:
        raise ScenarioError(f"{node.at('nextn')}: must be from 1 to 5, got {k}")
    mean = node.number("nextn_accepted")
    if mean > k:
        raise ScenarioError(f"{node.at('nextn_accepted')}: at most nextn ({k}) drafts can be accepted, got {mean:g}")
    return SpeculationSpec("mtp", k, mean_accepted=mean)


LINK_FIELDS = ("bandwidth_gb_per_second", "latency_ms", "bytes_per_token", "contention")
"""The ``kv_transfer`` fields that describe the network link (not read by a handoff through storage)."""


def _kv_transfer(node: _Node) -> KvTransferSpec:
    via = node.choice("via", ("link", "storage"), "link")
    if via == "storage":
        for key in LINK_FIELDS:
            if node.raw(key, None) is not None:
                raise ScenarioError(f"{node.at(key)}: describes the link between the pools; with via: storage the "
                                    f"KV moves through the prefill role's storage tier at its own figures "
                                    f"(kv_cache.host_offload.storage), so remove it")
        mode = node.choice("timing_mode", ("full_prompt", "destination_missing"), "full_prompt")
        node.done()
        return KvTransferSpec(timing_mode=mode, via=via)
    bandwidth = node.number("bandwidth_gb_per_second", None, positive=True)
    latency = node.number("latency_ms", 0.0)
    per_token = node.raw("bytes_per_token", "auto")
    if per_token != "auto":
        per_token = node.number("bytes_per_token", positive=True)
    mode = node.choice("timing_mode", ("full_prompt", "destination_missing"), "full_prompt")
    contention = node.choice("contention", ("none", "shared_link"), "none")
    node.done()
    return KvTransferSpec(bandwidth, latency, None if per_token == "auto" else per_token, mode, contention)
