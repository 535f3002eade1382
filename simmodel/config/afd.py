"""``engine.mode: afd``: attention workers (``engine.workers.attention``, scheduled as any worker, holding the KV
cache) and their FFN companion (``engine.workers.ffn``, priced with them, never scheduled), and the pipeline
between them (``engine.afd``). See ``simmodel.perf.afd`` and docs/afd-epd.md."""

from __future__ import annotations

from simmodel.config.bounds import MAX_INT, MAX_PARALLEL
from simmodel.config.links import parse_link
from simmodel.config.node import _Node
from simmodel.config.schema import AfdSpec, Parallelism, WorkerRole
from simmodel.config.workers import expert_layout, weight_fields
from simmodel.errors import ScenarioError
from simmodel.perf.afd import ffn_side
from simmodel.perf.deployment import DTYPE_BYTES, Deployment
from simmodel.perf.hardware import HardwareSpec
from simmodel.perf.models import ModelSpec

FFN_PARALLELISM = ("replicas", "tensor", "pipeline", "moe_tensor", "moe_expert")
"""What an FFN companion's ``parallelism`` takes: it has no attention, so no attention-DP or context
parallelism."""
MAX_MICRO_BATCHES = 16


def parse_afd(node: _Node, ffn_node: _Node, model: ModelSpec, hardware: HardwareSpec, dtype: str) -> AfdSpec:
    """``engine.afd`` and ``engine.workers.ffn``."""
    micro = node.int("micro_batches", 3, maximum=MAX_MICRO_BATCHES)
    bandwidth, latency = parse_link(node.node("link"), hardware)
    dispatch = node.choice("dispatch_dtype", ("bf16", "fp8"), "bf16")
    node.done()
    ffn = _ffn_parallelism(ffn_node.node("parallelism"), model)
    ffn_node.done()
    side = ffn_side(model)
    deployment = Deployment(side, hardware, ffn.tensor, 1, ffn.moe_tensor, ffn.moe_expert, **weight_fields(model, dtype))
    per_gpu = deployment.weight_bytes_per_gpu / ffn.pipeline
    if per_gpu > hardware.memory_bytes:
        raise ScenarioError(f"{ffn_node.at('parallelism')}: the FFN weights take {per_gpu / 1e9:.1f} GB per GPU, more "
                            f"than the {hardware.memory_bytes / 1e9:g} GB of {hardware.system_id}; raise tensor, "
                            f"pipeline or moe_expert")
    return AfdSpec(ffn, deployment, micro, bandwidth, latency, float(DTYPE_BYTES[dispatch]))


def _ffn_parallelism(node: _Node, model: ModelSpec) -> Parallelism:
    for key in node.data:
        if key not in FFN_PARALLELISM and key in Parallelism.__dataclass_fields__:
            raise ScenarioError(f"{node.at(key)}: an FFN worker runs no attention, so it has no {key}; it takes "
                                f"{', '.join(FFN_PARALLELISM)} (more FFN workers: replicas)")
    p = Parallelism(**{f: node.int(f, 1, maximum=MAX_PARALLEL.get(f, MAX_INT)) for f in FFN_PARALLELISM})
    node.done()
    name = model.model_id
    if p.pipeline > model.num_layers:
        raise ScenarioError(f"{node.at('pipeline')}: {name} has {model.num_layers} layers to spread over the "
                            f"pipeline stages, got {p.pipeline}")
    if not model.is_moe and model.intermediate_size % p.tensor:
        raise ScenarioError(f"{node.at('tensor')}: must divide the MLP's {model.intermediate_size} columns of "
                            f"{name}, got {p.tensor}", category="invalid_shape")
    return expert_layout(node, model, p, p.tensor, "tensor (a stage's GPUs)")


def check_attention_role(node: _Node, role: WorkerRole, chunked: bool, engine: _Node) -> None:
    """What the AFD pipeline prices and what it does not model, on the attention role."""
    if role.timing.type != "default":
        raise ScenarioError(f"{node.at('timing.type')}: an AFD pass is priced by the default timing's roofline on "
                            f"both sides (the pipeline of engine.afd); got {role.timing.type}")
    if role.timing.calibration is not None:
        raise ScenarioError(f"{node.at('timing.calibration')}: was fitted on a whole model's passes, not on the "
                            f"attention side of an AFD pipeline; remove it")
    if not chunked:
        raise ScenarioError(f"{engine.at('enable_chunked_prefill')}: false is not modeled with AFD (a prompt is "
                            f"split into micro-batches, not run whole); remove it")
    if role.draft_tokens:
        raise ScenarioError(f"{engine.at('nextn')}: an MTP/EAGLE drafter beside the AFD pipeline is not modeled; "
                            f"remove it")
    if role.vision is not None or role.host_loop or role.frontend is not None:
        raise ScenarioError(f"{node.path}: SGLang's host loop, frontend and vision on the worker are not modeled "
                            f"with AFD; remove them")
