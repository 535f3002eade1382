"""A run's GPU energy and cost, from its pass rows and its workers' lifetimes (``simmodel.perf.energy`` has the
model): every GPU at idle power for as long as its worker lives, and each rank pass's dynamic power on top.
No pandas here: the summary of a search's candidate reads only numpy columns."""

from __future__ import annotations

import math

import numpy as np

from simmodel.metrics.records import PassLog
from simmodel.perf.energy import JOULES_PER_KWH, GpuPower, dynamic_joules, rank_pass_joules


def _of_role(roles: list[str], name: str) -> np.ndarray:
    """Which of the pass rows (their ``role`` column) are the role's."""
    return np.array(roles, dtype=object) == name


def role_dynamic_joules(passes: PassLog, powers: dict[str, GpuPower]) -> dict[str, float]:
    """Per role, the joules its rank passes drew above idle (``perf.energy.dynamic_joules``), summed exactly
    (``math.fsum``) so that the figure does not depend on how the pass log happens to be split into blocks."""
    parts: dict[str, list[float]] = {name: [] for name in powers}
    for first, (busy, work) in passes.chunks(("rank_busy_ns", "rank_work_ns")):
        roles = passes.role[first:first + len(busy)]
        for name, power in powers.items():
            mine = _of_role(roles, name) if len(powers) > 1 else slice(None)
            parts[name].extend(dynamic_joules(power, busy[mine], work[mine]).tolist())
    return {name: math.fsum(part) for name, part in parts.items()}


def energy_summary(roles: dict[str, dict], powers: dict[str, GpuPower | None], passes: PassLog,
                   output_tokens: int, completed: int, gpu_hour_price: float | None,
                   busy_gpu_seconds: dict[str, float] | None = None) -> dict:
    """The run's energy figures (and each role's, added to ``roles``): every figure None where a role's GPU has
    no known power (a system file without it). Cost figures need ``gpu_hour_price``. ``busy_gpu_seconds``: per
    role that runs no passes of its own (an encoder pool), the GPU-seconds it was fully busy."""
    price_hours = sum(r["gpu_hours"] for r in roles.values())
    cost = None
    if gpu_hour_price is not None and output_tokens:
        cost = price_hours * gpu_hour_price / (output_tokens / 1e6)
    empty = {"energy_kwh": None, "energy_j_per_request": None, "energy_j_per_output_token": None,
             "output_tokens_per_joule": None, "avg_power_w_per_gpu": None,
             "cost_per_million_tokens": cost}
    if any(p is None for p in powers.values()):
        for role in roles.values():
            role.update(energy_kwh=None, avg_power_w_per_gpu=None)
        return empty
    known: dict[str, GpuPower] = {name: p for name, p in powers.items() if p is not None}
    dynamic = role_dynamic_joules(passes, known)
    total = 0.0
    for name, role in roles.items():
        gpu_seconds = role["gpu_hours"] * 3600.0
        joules = known[name].idle_w * gpu_seconds + dynamic[name]
        joules += known[name].dynamic_w * (busy_gpu_seconds or {}).get(name, 0.0)
        role.update(energy_kwh=joules / JOULES_PER_KWH,
                    avg_power_w_per_gpu=joules / gpu_seconds if gpu_seconds > 0 else None)
        total += joules
    seconds = price_hours * 3600.0
    return {"energy_kwh": total / JOULES_PER_KWH,
            "energy_j_per_request": total / completed if completed else None,
            "energy_j_per_output_token": total / output_tokens if output_tokens else None,
            "output_tokens_per_joule": output_tokens / total if total > 0 else None,
            "avg_power_w_per_gpu": total / seconds if seconds > 0 else None,
            "cost_per_million_tokens": cost}


def pass_joules(data: dict, powers: dict[str, GpuPower | None]) -> np.ndarray | None:
    """Per pass row (``pass_columns``): the joules its rank's GPUs drew over the pass, idle and dynamic; None
    where a role's GPU has no known power."""
    if any(p is None for p in powers.values()):
        return None
    roles = data["role"]
    duration = np.asarray(data["end_ns"]) - np.asarray(data["start_ns"])
    busy, work = np.asarray(data["rank_busy_ns"]), np.asarray(data["rank_work_ns"])
    out = np.zeros(len(duration))
    for name, power in powers.items():
        mine = _of_role(roles, name)
        out[mine] = rank_pass_joules(power, duration[mine], busy[mine], work[mine])
    return out
