"""``engine.workers.<role>.timing``: how a pass is priced. Fixed times, the fitted polynomial, measured
tables, or the default roofline with its efficiencies, host overhead and frontend time per request,
optionally taken from a calibration file (``simmodel.config.calibration``) fitted on this deployment.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from simmodel.config.calibration import (
    HOST,
    MAX_REQUEST_OVERHEAD_MS,
    apply,
    describe,
    read_calibration,
    timing_fields,
)
from simmodel.config.node import _Node, _show
from simmodel.config.schema import TimingSpec
from simmodel.errors import ScenarioError
from simmodel.perf.roofline import ACHIEVED, ENGINE_KERNELS, REQUEST_OVERHEAD_MS, Efficiency, HostOverhead
from simmodel.perf.timings import TIMINGS


def _timing(node: _Node, base_dir: Path | None = None, system_id: str | None = None,
            backend: str = "vllm") -> TimingSpec:
    """The role's timing; the default one starts from the fractions of its GPU's peaks that its kernels were
    measured to reach (``ACHIEVED``, by ``system_id``: given for the registry's own systems only, never for a
    system file), else the H100-fitted ``Efficiency``, and ``HostOverhead``'s fixed times (both the engine's own
    where its kernels were fitted apart: ``ENGINE_KERNELS``); its link fraction, unset, is the GPU system's
    measured all-reduce's (``roofline.collective``)."""
    kind = node.choice("type", tuple(TIMINGS), "default")
    if kind == "fixed":
        spec = TimingSpec(kind, prefill_ms=node.number("prefill_ms"), decode_ms=node.number("decode_ms"))
    elif kind == "default":
        host = node.node("host_overhead_ms")
        eff, base = ENGINE_KERNELS.get(backend, (Efficiency(), HostOverhead()))
        overhead = HostOverhead(host.number("prefill", base.prefill_ms), host.number("decode", base.decode_ms),
                                host.number("mixed", base.mixed_ms), node.number("per_layer_us", base.per_layer_us),
                                node.number("collective_latency_us", None, maximum=1000.0),
                                node.number("moe_layer_us", base.moe_layer_us, maximum=1000.0),
                                node.number("block_fp8_gemm_us", base.block_fp8_gemm_us, maximum=1000.0))
        host.done()
        if system_id in ACHIEVED:
            eff = replace(eff, **dict(zip(("compute", "memory"), ACHIEVED[system_id], strict=True)))
        efficiency = Efficiency(_fraction(node, "compute_efficiency", eff.compute),
                                _fraction(node, "memory_efficiency", eff.memory),
                                _fraction(node, "link_efficiency", eff.link),
                                _fraction(node, "expert_efficiency", eff.expert))
        request = node.number("request_overhead_ms", REQUEST_OVERHEAD_MS, maximum=MAX_REQUEST_OVERHEAD_MS)
        calibration, transfer, host_assumed, calibrated = None, node.bool("allow_transfer", False), True, ()
        if node.raw("calibration", None) is not None:
            raw = node.raw("calibration")
            if not isinstance(raw, str) or not raw:
                raise ScenarioError(f"{node.at('calibration')}: must be a calibration file's path, got {_show(raw)}")
            calibration = Path(raw) if Path(raw).is_absolute() else (base_dir or Path(".")) / raw
            cal = read_calibration(calibration, node.at("calibration"))
            fields = timing_fields(cal.values)
            for key, value in fields.items():
                clash = [f"{key}.{k}" for k in value if k in (node.raw(key, None) or {})] if isinstance(value, dict) \
                    else ([key] if node.raw(key, None) is not None else [])
                if clash:
                    raise ScenarioError(f"{node.at(clash[0])}: set by the calibration {calibration.name}; remove it")
            efficiency, overhead = apply(cal.values, efficiency, overhead)
            host_assumed = not all(name in cal.values for name in HOST)
            calibrated = tuple(sorted(cal.values))
            request = cal.values.get("request_overhead_ms", request)
        elif transfer:
            raise ScenarioError(f"{node.at('allow_transfer')}: only applies with a calibration")
        spec = TimingSpec(kind, efficiency=efficiency, host=overhead, calibration=calibration, transferred=transfer,
                          host_assumed=host_assumed, request_overhead_ms=request, calibrated=calibrated)
    elif kind == "measured":
        version = node.raw("backend_version", None)
        if version is not None and not isinstance(version, str):
            raise ScenarioError(f"{node.at('backend_version')}: must be a version string such as '0.24.0', "
                                f"got {_show(version)}")
        spec = TimingSpec(kind, backend_version=version)
    else:
        spec = TimingSpec(kind)
    node.done()
    return spec


def _fraction(node: _Node, key: str, default: float) -> float:
    return node.number(key, default, positive=True, maximum=1.0)


def _check_calibration(node: _Node, timing: TimingSpec, identity: dict) -> TimingSpec:
    """A calibration applies to the roles and deployments it was fitted on; elsewhere only with
    ``allow_transfer`` (then marked transferred)."""
    cal = read_calibration(timing.calibration, node.at("timing.calibration"))
    if cal.matches(identity):
        return replace(timing, transferred=False)
    if not timing.transferred:
        raise ScenarioError(f"{node.at('timing.calibration')}: {cal.path.name} was fitted on "
                            f"{'; '.join(describe(d) for d in cal.fitted_on)}, not on this one: "
                            f"{describe(identity)}; set timing.allow_transfer: true to use it anyway (its passes "
                            f"are then marked transferred)")
    return timing
