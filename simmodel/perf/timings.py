"""Which pass timing model a role runs with: ``TIMINGS`` maps the scenario's ``timing.type`` to the builder of
its model, so that a new model plugs in as one entry (the configuration checks the type against the same
names)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from simmodel.errors import ScenarioError
from simmodel.perf.afd import AfdFfnWork, AfdLink, AfdShape, AfdTiming, AfdWork
from simmodel.perf.drafting import DraftedTiming, DraftedWork
from simmodel.perf.energy import PassEnergy
from simmodel.perf.roofline import RooflineTiming
from simmodel.perf.timing import FixedTiming, PassTiming, PolynomialTiming

if TYPE_CHECKING:
    from simmodel.config.schema import WorkerRole


def _fixed(role: WorkerRole, backend: str) -> PassTiming:
    return FixedTiming(role.timing.prefill_ms, role.timing.decode_ms)


def _polynomial(role: WorkerRole, backend: str) -> PassTiming:
    return PolynomialTiming()


def _roofline(role: WorkerRole, backend: str) -> PassTiming:
    """The default model: the GPU roofline, with its constants fitted to measured runs where the scenario says
    so (``simmodel calibrate``)."""
    spec = role.timing
    if role.afd is not None:  # (AFD: the attention role's passes run the pipeline with its FFN companion)
        return afd_timing(role, backend)
    timing = RooflineTiming(role.deployment, spec.efficiency, spec.host, engine=backend)
    if spec.calibration is not None:
        timing.provenance = ("calibrated:roofline", *(("assumed-host",) if spec.host_assumed else ()),
                             *(("transferred",) if spec.transferred else ()))
    if role.draft_tokens:  # MTP/EAGLE: the drafter's forwards run in the pass that verifies
        return DraftedTiming(timing, role.deployment, role.draft_tokens, spec.efficiency, spec.host, backend)
    return timing


def afd_shape(role: WorkerRole) -> AfdShape:
    """What the AFD pipeline needs of an attention role and its FFN companion."""
    afd, p, model = role.afd, role.parallelism, role.deployment.model
    assert afd is not None
    return AfdShape(afd.micro_batches, model.num_layers, model.hidden_size, p.tensor, afd.ffn.tensor,
                    p.replicas / afd.ffn.replicas)


def afd_timing(role: WorkerRole, backend: str) -> AfdTiming:
    afd, spec = role.afd, role.timing
    assert afd is not None
    return AfdTiming(role.deployment, afd.ffn_deployment, afd_shape(role),
                     AfdLink(afd.link_bytes_per_s, afd.link_latency_s, afd.dispatch_bytes), spec.efficiency, spec.host,
                     backend)


def afd_ffn_work(role: WorkerRole, backend: str) -> AfdFfnWork:
    """What an AFD attention role's FFN companion works, for its energy."""
    afd = role.afd
    assert afd is not None
    return AfdFfnWork(afd.ffn_deployment, afd_shape(role), afd.ffn_gpus_per_worker, backend)


def _measured(role: WorkerRole, backend: str) -> PassTiming:
    """aiconfigurator's measured kernel tables, queried once here (a few seconds)."""
    from simmodel.perf.measured import MeasuredTiming  # (an optional dependency, imported when used)

    d = role.deployment
    shown = d.weight_format or d.expert_weight_format
    if shown not in (None, "bf16", "fp16", "fp8"):
        raise ScenarioError(f"engine.workers.{role.name}.timing.type: measured prices BF16 and FP8 weights from "
                            f"aiconfigurator's tables; {shown} weights ({d.model.model_id}, engine.dtype "
                            f"{d.weight_format or 'auto'}) are priced by the default timing")
    if d.model.num_linear_layers:
        raise ScenarioError(f"engine.workers.{role.name}.timing.type: measured has no tables for "
                            f"{d.model.model_id}'s state layers (linear attention, Mamba-2); use the default timing")
    if d.model.is_sparse:
        raise ScenarioError(f"engine.workers.{role.name}.timing.type: measured prices dense MLA attention, and "
                            f"{d.model.model_id} attends over the {d.model.index_topk} tokens its indexer picks; use "
                            f"the default timing")
    if d.model.sliding_window and d.model.num_sliding_layers:
        raise ScenarioError(f"engine.workers.{role.name}.timing.type: measured prices attention over the whole "
                            f"context, and {d.model.model_id}'s sliding-window layers attend over "
                            f"{d.model.sliding_window} tokens; use the default timing")

    try:
        return MeasuredTiming(role.deployment, backend, backend_version=role.timing.backend_version,
                              context_length=role.context_length,
                              max_batched_tokens=role.scheduler.max_batched_tokens,
                              max_sequences=role.scheduler.max_sequences)
    except ScenarioError as exc:
        raise ScenarioError(f"engine.workers.{role.name}.timing: {exc}") from None


TIMINGS: dict[str, Callable[[WorkerRole, str], PassTiming]] = {
    "default": _roofline, "fixed": _fixed, "polynomial": _polynomial, "measured": _measured}
"""``timing.type`` → the builder of the role's timing model."""


def make_timing(role: WorkerRole, backend: str = "vllm") -> PassTiming:
    """The role's pass timing model (``TIMINGS``)."""
    return TIMINGS[role.timing.type](role, backend)


def make_energy(role: WorkerRole, backend: str = "vllm") -> PassEnergy:
    """How the role's passes' energy is priced (``perf.energy``): an AFD attention role's passes run m
    micro-batches (its FFN companion's energy: ``afd_ffn_work``); an MTP/EAGLE drafter's forwards add theirs."""
    work = None
    if role.afd is not None:
        work = AfdWork(role.deployment, afd_shape(role), backend)
    elif role.draft_tokens and role.timing.type == "default":  # (only the default timing prices the drafter)
        work = DraftedWork(role.deployment, role.draft_tokens, backend)
    return PassEnergy(role.deployment, backend, work)
