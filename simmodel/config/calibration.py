"""The performance model's named parameters a calibration fits, and the calibration file.

The parameters are the roofline's own assumptions (``simmodel.perf.roofline``): the fractions of the
datasheet's peaks that kernels reach (the MoE experts' grouped GEMMs apart), the fixed time each pass adds by
kind, per layer and per MoE layer, and the frontend's time per request outside the passes. A
calibration file records the values fitted and the deployments (model, hardware, backend, parallelism)
whose runs they were fitted on; a scenario uses it with ``timing: {type: default, calibration: FILE}``
(``allow_transfer: true`` to use it on another deployment, marked ``transferred`` in provenance).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from simmodel.config.files import read_text_file
from simmodel.config.yaml_safe import problem_line, safe_load
from simmodel.errors import ScenarioError
from simmodel.perf.roofline import LINK_EFFICIENCY, REQUEST_OVERHEAD_MS, Efficiency, HostOverhead

MAX_REQUEST_OVERHEAD_MS = 1000.0
"""A calibration's bound: a second per request is far above any real frontend's cost."""

# name: (default, lower bound, upper bound, unit)
PARAMETERS = {
    "compute_efficiency": (None, 0.01, 1.0, "fraction of the dense BF16/FP8 peak; default: the GPU's own "
                                            "(ACHIEVED), else 0.78"),
    "memory_efficiency": (None, 0.01, 1.0, "fraction of HBM bandwidth; default: the GPU's own (ACHIEVED), else 0.85"),
    "link_efficiency": (None, 0.01, 1.0, "fraction of the GPU link's bandwidth a collective's bytes reach; "
                                         "default: the GPU system's measured all-reduce's for the group size "
                                         "(ALL_REDUCE), else 0.72"),
    "host_prefill_ms": (HostOverhead().prefill_ms, 0.0, 100.0, "ms a prefill pass adds"),
    "host_decode_ms": (HostOverhead().decode_ms, 0.0, 100.0, "ms a decode pass adds"),
    "host_mixed_ms": (HostOverhead().mixed_ms, 0.0, 100.0, "ms a mixed pass adds"),
    "per_layer_us": (HostOverhead().per_layer_us, 0.0, 1000.0, "µs each layer adds to a pass"),
    "collective_latency_us": (None, 0.0, 1000.0, "µs each step of a collective takes (two tensor-parallel all-reduces "
                                                 "a layer, one step one-shot or two two-shot, and each MoE exchange, "
                                                 "one step); default: the GPU system's measured all-reduce's for the "
                                                 "group size (ALL_REDUCE), else the link's"),
    "expert_efficiency": (Efficiency().expert, 0.01, 1.0, "fraction of the experts' dtype peak their grouped GEMMs "
                                                        "reach (MoE models)"),
    "moe_layer_us": (HostOverhead().moe_layer_us, 0.0, 1000.0, "µs each MoE layer adds to a pass (MoE models)"),
    "block_fp8_gemm_us": (HostOverhead().block_fp8_gemm_us, 0.0, 1000.0,
                          "µs each block-scaled FP8 GEMM adds to a pass (DeepSeek-V3's checkpoint)"),
    "request_overhead_ms": (REQUEST_OVERHEAD_MS, 0.0, MAX_REQUEST_OVERHEAD_MS,
                            "ms the frontend adds to each request outside the passes (HTTP, tokenization, "
                            "detokenization, streaming); priced by the role requests reach first"),
}
ENTRY_ONLY = ("request_overhead_ms",)
"""Parameters of the role requests reach first (aggregated, or prefill): a decode role has none."""
START = {"collective_latency_us": 5.0, "compute_efficiency": Efficiency().compute, "memory_efficiency": Efficiency().memory,
         "link_efficiency": LINK_EFFICIENCY}
"""Where a fit starts for a parameter whose default is the hardware's own value."""
IDENTITY = ("role", "model", "hardware", "backend", "weight_bytes", "kv_bytes", "tensor", "attention_data",
            "moe_tensor", "moe_expert", "pipeline")
HOST = ("host_prefill_ms", "host_decode_ms", "host_mixed_ms", "per_layer_us")
"""The parameters of the fixed time per pass: while one is not calibrated, it stays an assumption."""


FIELD_PATHS = {name: ("host_overhead_ms", name[5:-3]) if name.startswith("host_") else (name,) for name in PARAMETERS}
"""Each parameter's place in a scenario's ``timing`` mapping (``host_prefill_ms``: ``host_overhead_ms.prefill``)."""


MODEL_PARTS = {"expert_efficiency": "mixture-of-experts models", "moe_layer_us": "mixture-of-experts models",
               "block_fp8_gemm_us": "block-scaled FP8 weights (DeepSeek-V3's checkpoint at engine.dtype auto or fp8)"}
"""The parameters of a part only some models have, and what has it."""


def inapplicable(deployment) -> dict[str, str]:
    """The parameters of ``MODEL_PARTS`` a deployment has no part for, each with why: the MoE ones on a dense
    model, the block-FP8 one on weights without block scales."""
    model = deployment.model.model_id
    moe = None if deployment.model.is_moe else f"{model} has no experts"
    block = None if deployment.block_scaled else f"{model} at {deployment.weight_bytes:g}-byte weights has none"
    return {name: why for name, why in (("expert_efficiency", moe), ("moe_layer_us", moe),
                                        ("block_fp8_gemm_us", block)) if why is not None}


def timing_fields(values: dict[str, float]) -> dict:
    """The ``timing`` mapping fields (``type: default``) that set these parameter values."""
    fields: dict = {}
    for name, value in values.items():
        *outer, last = FIELD_PATHS[name]
        target = fields
        for key in outer:
            target = target.setdefault(key, {})
        target[last] = value
    return fields


def apply(values: dict[str, float], efficiency: Efficiency, host: HostOverhead) -> tuple[Efficiency, HostOverhead]:
    """Efficiency and host overhead with the calibrated values in place of the given ones."""
    v = {**{"compute_efficiency": efficiency.compute, "memory_efficiency": efficiency.memory,
            "link_efficiency": efficiency.link, "expert_efficiency": efficiency.expert,
            "host_prefill_ms": host.prefill_ms, "host_decode_ms": host.decode_ms, "host_mixed_ms": host.mixed_ms,
            "per_layer_us": host.per_layer_us, "collective_latency_us": host.collective_us,
            "moe_layer_us": host.moe_layer_us, "block_fp8_gemm_us": host.block_fp8_gemm_us},
         **values}
    return (Efficiency(v["compute_efficiency"], v["memory_efficiency"], v["link_efficiency"], v["expert_efficiency"]),
            HostOverhead(v["host_prefill_ms"], v["host_decode_ms"], v["host_mixed_ms"], v["per_layer_us"],
                         v["collective_latency_us"], v["moe_layer_us"], v["block_fp8_gemm_us"]))


@dataclass(frozen=True)
class Calibration:
    """A calibration file: fitted values and the deployments they were fitted on."""

    path: Path
    values: dict[str, float]
    fitted_on: tuple[dict, ...]

    def matches(self, identity: dict) -> bool:
        return any(all(d.get(k) == identity.get(k) for k in IDENTITY) for d in self.fitted_on)


def read_calibration(path: Path, at: str) -> Calibration:
    """Read and check a calibration file; ``at`` names the scenario field in errors."""
    text = read_text_file(path, at)
    try:
        data = safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{at}: {path}: not YAML ({problem_line(exc)})") from None
    except Exception as exc:  # noqa: BLE001 (PyYAML's constructors: `!!int x`)
        raise ScenarioError(f"{at}: {path}: not YAML ({' '.join(str(exc).split())[:120]})") from None
    body = data.get("calibration") if isinstance(data, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("parameters"), dict) \
            or not isinstance(body.get("fitted_on"), list) or not body["fitted_on"]:
        raise ScenarioError(f"{at}: {path}: not a calibration file (calibration.parameters and "
                            f"calibration.fitted_on, as simmodel calibrate writes them)")
    if not body["parameters"]:
        raise ScenarioError(f"{at}: {path}: calibration.parameters: empty (nothing was calibrated)")
    values = {}
    for name, value in body["parameters"].items():
        if name not in PARAMETERS:
            raise ScenarioError(f"{at}: {path}: calibration.parameters.{name}: unknown parameter")
        _, lo, hi, _ = PARAMETERS[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
            raise ScenarioError(f"{at}: {path}: calibration.parameters.{name}: must be a number in [{lo:g}, {hi:g}], "
                                f"got {value!r}")
        values[name] = float(value)
    fitted_on = []
    for i, d in enumerate(body["fitted_on"]):
        if not isinstance(d, dict) or set(IDENTITY) - set(d):
            raise ScenarioError(f"{at}: {path}: calibration.fitted_on[{i}]: must give {', '.join(IDENTITY)}")
        for key in IDENTITY:
            value = d[key]
            kind = str if key in ("role", "model", "hardware", "backend") else float if key.endswith("bytes") else int
            ok = isinstance(value, str) if kind is str else (
                isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
                and (kind is float or float(value).is_integer()))
            if not ok:
                raise ScenarioError(f"{at}: {path}: calibration.fitted_on[{i}].{key}: must be "
                                    f"{'a string' if kind is str else 'a positive number'}, got {value!r}")
        fitted_on.append({k: d[k] for k in IDENTITY})
    return Calibration(path, values, tuple(fitted_on))


def identity_of(role: str, deployment, backend: str, parallelism) -> dict:
    """What a calibration is tied to: the worker role, the model, the GPU system, the backend, the weight
    and KV-cache bytes per element, and the worker's shape."""
    p, d = parallelism, deployment
    return {"role": role, "model": d.model.model_id, "hardware": d.hardware.system_id, "backend": backend,
            "weight_bytes": float(d.weight_bytes), "kv_bytes": float(d.kv_bytes), "tensor": p.tensor,
            "attention_data": p.attention_data, "moe_tensor": p.moe_tensor, "moe_expert": p.moe_expert,
            "pipeline": p.pipeline}


def describe(identity: dict) -> str:
    return (f"the {identity['role']} role of {identity['model']} on {identity['hardware']} ({identity['backend']}, "
            f"{identity['weight_bytes']:g}-byte weights, {identity['kv_bytes']:g}-byte KV, tensor {identity['tensor']}, "
            f"attention_data {identity['attention_data']}, moe {identity['moe_tensor']}×{identity['moe_expert']}, "
            f"pipeline {identity['pipeline']})")
