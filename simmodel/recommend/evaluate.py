"""Simulate one candidate of a search and measure it against the search's targets (runs in a worker
process: everything in and out is plain data)."""

from __future__ import annotations

import math
import signal
from pathlib import Path

import numpy as np

from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError, SimulationError
from simmodel.metrics.sla import sla_figures
from simmodel.recommend.spec import SearchSpec
from simmodel.sim import Simulation


class _Timeout(BaseException):
    """Raised by the alarm: a BaseException, so no ``except Exception`` inside a run can swallow it."""


def _alarm(signum, frame):  # noqa: ARG001 (signal handler signature)
    raise _Timeout


def _largest(length) -> int | None:
    """The longest a synthetic length can be (None: unbounded)."""
    if length.distribution == "fixed":
        return length.value
    if length.values:
        return max(length.values)
    return length.max


def context_limit(config: dict, scenario) -> str | None:
    """The workers reference's rule for synthetic traffic in a disaggregated search: an explicit prefill
    ``context_length`` must hold the longest prompt plus its first token, an explicit decode one the
    longest prompt plus the longest output. Why the candidate breaks it, or None."""
    source = scenario.traffic.source
    if source.type != "synthetic" or scenario.engine.mode != "disaggregated":
        return None
    longest_in, longest_out = _largest(source.input_tokens), _largest(source.output_tokens)
    workers = config["engine"]["workers"]
    for name, need, what in (("prefill", None if longest_in is None else longest_in + 1, "input + 1"),
                             ("decode", None if None in (longest_in, longest_out) else longest_in + longest_out,
                              "input + output")):
        explicit = workers[name].get("context_length")
        if explicit is not None and need is not None and explicit < need:
            return (f"engine.workers.{name}.context_length: {explicit} is below the longest synthetic request's "
                    f"{what} ({need})")
    return None


def raw_gpu_count(config: dict) -> int | None:
    """The GPUs a candidate asks for, read from its fields as written (for candidates that are not a valid
    scenario): per role replicas × pipeline × tensor × attention_data × prefill_context; None where a field
    is not a positive integer."""
    workers = (config.get("engine") or {}).get("workers")
    if not isinstance(workers, dict):
        return None
    total = 0
    for role in workers.values():
        p = role.get("parallelism") if isinstance(role, dict) else None
        p = p if isinstance(p, dict) else {}
        for key in ("replicas", "pipeline", "tensor", "attention_data", "prefill_context"):
            value = p.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                return None
        total += p.get("replicas", 1) * p.get("pipeline", 1) * p.get("tensor", 1) * p.get("attention_data", 1) \
            * p.get("prefill_context", 1)
    return total


def check(config: dict, spec: SearchSpec, base_dir: Path):
    """Validate a candidate before simulating it: (scenario, GPU count, None), or (None, GPU count or None
    when the candidate is not a scenario, (status, category, text))."""
    try:
        scenario = parse_scenario(config, base_dir)
    except ScenarioError as exc:
        status = "infeasible" if exc.category == "kv_capacity" else "unsupported"
        return None, raw_gpu_count(config), (status, exc.category, str(exc))
    gpus = sum(role.parallelism.gpu_count for role in scenario.engine.workers.values())
    short = context_limit(config, scenario)
    if short is not None:
        return None, gpus, ("infeasible", "context_limit", short)
    if not spec.min_candidate_gpus <= gpus <= spec.max_candidate_gpus:
        return None, gpus, ("infeasible", "gpu_budget", f"{gpus} GPUs, outside the budget of "
                            f"{spec.min_candidate_gpus}–{spec.max_candidate_gpus}")
    return scenario, gpus, None


def metrics(summary: dict, requests, spec: SearchSpec) -> dict:
    """The search metrics of a finished run (goodput: completed requests meeting every SLA bound)."""
    done = requests[requests["status"] == "completed"]
    duration = summary["duration_s"]
    gpus = summary["gpu_count"]
    sla = sla_figures(spec.sla, *(done[c].to_numpy(dtype=np.float64) for c in ("ttft_ms", "tpot_ms", "e2e_ms")),
                      duration)
    goodput = sla["goodput_rps"]
    throughput = summary["output_throughput_tok_s"]

    def mean(column):
        values = done[column].to_numpy(dtype=np.float64)
        values = values[np.isfinite(values)]
        return float(values.mean()) if values.size else None

    return {
        "gpu_count": gpus, "completed_requests": summary["completed_requests"],
        "incomplete_requests": summary["incomplete_requests"], "rejected_requests": summary["rejected_requests"],
        "output_throughput_tok_s": throughput,
        "output_throughput_per_gpu": None if throughput is None else throughput / gpus,
        "throughput_per_user": summary["mean_output_token_throughput_per_user"],
        "request_throughput_rps": summary["request_throughput_rps"],
        "goodput_rps": goodput, "goodput_per_gpu": None if goodput is None else goodput / gpus,
        "sla_attainment": sla["sla_attainment"], "sla_met": sla["sla_met"],
        "mean_ttft_ms": mean("ttft_ms"), "p90_ttft_ms": summary["ttft_ms"]["p90"],
        "mean_tpot_ms": mean("tpot_ms"), "mean_e2e_ms": mean("e2e_ms"), "p90_e2e_ms": summary["e2e_latency_ms"]["p90"],
        "duration_s": duration, "num_passes": summary["num_passes"],
        "output_tokens_per_joule": summary["output_tokens_per_joule"],
        "energy_j_per_output_token": summary["energy_j_per_output_token"],
        "avg_power_w_per_gpu": summary["avg_power_w_per_gpu"],
        "cost_per_million_tokens": cost_per_million_tokens(summary, spec.gpu_hour_price),
    }


def cost_per_million_tokens(summary: dict, gpu_hour_price: float | None) -> float | None:
    """What a million output tokens cost: the run's GPU-hours at ``gpu_hour_price`` over its output tokens
    (as the summary's own figure, which a candidate, run without the search's ``evaluation``, lacks)."""
    tokens = summary["total_output_tokens"]
    if gpu_hour_price is None or not tokens:
        return None
    return summary["gpu_hours"] * gpu_hour_price / (tokens / 1e6)


def evaluate(number: int, config: dict, spec: SearchSpec, base_dir: str) -> dict:
    """One candidate's ledger entry: status, reason, metrics and score (higher is better)."""
    entry = {"id": number, "status": None, "reason_category": None, "reason": None, "gpu_count": None,
             "metrics": None, "objectives": None, "score": None}
    scenario, entry["gpu_count"], rejected = check(config, spec, Path(base_dir))
    if rejected is not None:
        entry["status"], entry["reason_category"], entry["reason"] = rejected
        return entry
    timeout = spec.candidate_timeout_seconds
    previous = signal.signal(signal.SIGALRM, _alarm) if timeout is not None else None
    try:
        try:
            if timeout is not None:
                signal.setitimer(signal.ITIMER_REAL, timeout)
            results = Simulation(scenario, keep_events=False).run()
        finally:  # disarmed before anything else; an alarm firing here is still a timeout
            if timeout is not None:
                signal.setitimer(signal.ITIMER_REAL, 0)
    except _Timeout:
        entry.update(status="timed_out", reason_category="timeout", reason=f"ran past {timeout:g} s")
        return entry
    except (SimulationError, ScenarioError) as exc:
        entry.update(status="failed", reason_category="simulation", reason=" ".join(str(exc).split()))
        return entry
    except Exception as exc:  # noqa: BLE001 (a bug in one candidate must not end the search; it is recorded)
        entry.update(status="failed", reason_category="error",
                     reason=f"{type(exc).__name__}: {' '.join(str(exc).split())}")
        return entry
    finally:
        if timeout is not None:
            signal.signal(signal.SIGALRM, previous)
    m = metrics(results.summary, results.requests, spec)
    objectives = {metric: m[metric] for metric, _ in spec.objectives}
    entry.update(metrics=m, objectives=objectives)
    missing = [k for k, v in objectives.items() if v is None or not math.isfinite(v)]
    if spec.target != "pareto" and not missing:
        metric, higher = spec.objectives[0]
        entry["score"] = m[metric] if higher else -m[metric]
    if m["incomplete_requests"] or m["rejected_requests"]:
        entry.update(status="infeasible", reason_category="incomplete",
                     reason=f"{m['incomplete_requests']} incomplete and {m['rejected_requests']} rejected requests")
    elif spec.sla.bounded and not m["sla_met"]:
        why = "strict_sla" if spec.strict_sla else "evaluation.sla.attainment"
        entry.update(status="infeasible", reason_category="sla",
                     reason=f"{m['sla_attainment'] or 0.0:.1%} of completed requests met every SLA bound, below "
                            f"the {spec.sla.attainment:.1%} required ({why})")
    elif spec.min_goodput_rps is not None and (m["goodput_rps"] or 0.0) < spec.min_goodput_rps:
        entry.update(status="infeasible", reason_category="goodput",
                     reason=f"goodput {m['goodput_rps'] or 0.0:.4g} req/s below min_goodput_rps "
                            f"{spec.min_goodput_rps:g}")
    elif missing:
        entry.update(status="infeasible", reason_category="no_objective", reason=f"no value of {missing[0]}")
    else:
        entry["status"] = "feasible"
    return entry
