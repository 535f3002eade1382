"""An inference-perf profile's workload: its load stages and data."""

from __future__ import annotations

import math

from simmodel.config.importers.common import uniform, warn_rest
from simmodel.errors import ScenarioError


def _iperf_length(spec, name: str, warnings: list[str], defaults=(10, 1024, 512, 200)):
    """An inference-perf distribution (normal by default: drawn, clipped to [min, max], rounded)."""
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        return int(spec)
    if not isinstance(spec, dict):
        spec = {} if spec is None else dict(spec)
    lo, hi = int(spec.get("min", defaults[0])), int(spec.get("max", defaults[1]))
    mean = float(spec.get("mean", defaults[2]))
    if "std_dev" not in spec and "variance" in spec:
        std = math.sqrt(float(spec["variance"]))
    else:
        std = float(spec.get("std_dev", defaults[3]))
    kind = spec.get("type", "normal")
    warn_rest(spec, {"min", "max", "mean", "std_dev", "variance", "type"}, {"total_count"}, warnings, f"{name}.")
    if kind == "fixed":
        return int(mean)
    if kind == "uniform":
        return uniform(max(1, lo), hi)
    if kind != "normal":
        warnings.append(f"{name}.type {kind}: drawn as a normal distribution of the same mean and std_dev")
    if std <= 0:
        return max(1, min(hi, max(lo, int(round(mean)))))
    return {"distribution": "normal", "mean": mean, "std": std, "min": max(1, lo), "max": hi}


def build(args: dict, warnings: list[str]) -> dict:
    """An inference-perf profile: stages run one after the other, each sending ⌊rate × duration⌋
    requests (constant: exponential gaps scaled to span the stage; poisson: a Poisson process at the
    rate), then waiting for all of them to finish, then ``interval`` seconds; concurrent stages keep
    ``concurrency_level`` requests in flight until ``num_requests`` were sent."""
    load = args.get("load") or {}
    data = args.get("data") or {}
    if not isinstance(load, dict) or not isinstance(data, dict):
        raise ScenarioError("traffic.source.path: load and data must be mappings (an inference-perf profile)")
    kind = load.get("type", "constant")
    if load.get("sweep"):
        raise ScenarioError("traffic.source.path: load.sweep: its stages come from a saturation run on the real "
                            "server; write the stages out instead")
    raw_stages = load.get("stages") or []
    if not raw_stages:
        raise ScenarioError("traffic.source.path: load.stages: required (a list of {rate, duration} or "
                            "{num_requests, concurrency_level})")
    stages = []
    for i, st in enumerate(raw_stages):
        if kind == "concurrent":
            stages.append({"concurrency": int(st["concurrency_level"]), "requests": int(st["num_requests"])})
        elif kind in ("constant", "poisson"):
            rate, duration = float(st["rate"]), float(st["duration"])
            count = int(rate * duration)
            if count < 1:
                raise ScenarioError(f"traffic.source.path: load.stages[{i}]: rate × duration sends no request")
            # constant: the count spread over the stage; poisson: a Poisson process at the rate until
            # the count was sent (inference-perf queues ⌊rate × duration⌋ requests whatever they take)
            stages.append({"requests_per_second": rate, "duration_s": duration} if kind == "constant"
                          else {"requests_per_second": rate, "requests": count})
        else:
            raise ScenarioError(f"traffic.source.path: load.type {kind}: replays a trace of the tool's own; "
                                f"use a trace source instead")
    if kind == "poisson":
        warnings.append("load.type poisson: inference-perf draws a Poisson count per second; simulated as a "
                        "Poisson process at the stage's rate until ⌊rate × duration⌋ requests were sent")
    out = {"type": "stages", "arrivals": "fixed_count" if kind == "constant" else "poisson", "stages": stages}
    if len(stages) > 1:
        out |= {"drain": True, "pause_s": float(load.get("interval", 1.0))}
    for key in ("num_workers", "worker_max_concurrency"):
        if key in load:
            warnings.append(f"load.{key}: the client's own concurrency limits are not simulated")
    if "base_seed" in load:
        warnings.append("load.base_seed: the tool's random draws are not reproduced (engine.seed seeds the run's)")
    warn_rest(load, {"type", "stages", "interval", "num_workers", "worker_max_concurrency", "base_seed", "sweep"},
               {"request_timeout"}, warnings, "load.")
    dtype = data.get("type", "mock")
    if dtype in ("random", "synthetic"):
        source = {"type": "synthetic",
                  "input_tokens": _iperf_length(data.get("input_distribution"), "data.input_distribution", warnings),
                  "output_tokens": _iperf_length(data.get("output_distribution"), "data.output_distribution",
                                                 warnings)}
    elif dtype == "shared_prefix":
        sp = data.get("shared_prefix") or {}
        if not isinstance(sp, dict):
            raise ScenarioError("traffic.source.path: data.shared_prefix: must be a mapping")
        sp = dict(sp)
        for legacy, key in (("question_distribution", "question_len"), ("output_distribution", "output_len")):
            if legacy in sp:  # the older spelling inference-perf still reads
                sp[key] = sp.pop(legacy)
        if isinstance(sp.get("output_len"), dict):
            warnings.append("data.shared_prefix.output_len: inference-perf keeps one output length per prompt; "
                            "each simulated request draws its own from the same distribution")
        if sp.get("enable_multi_turn_chat"):
            warnings.append("data.shared_prefix.enable_multi_turn_chat: conversations are not reproduced; each "
                            "request is one prompt of the pool")
        source = {"type": "shared_prefix",
                  "num_groups": int(sp.get("num_groups", sp.get("num_unique_system_prompts", 10))),
                  "prompts_per_group": int(sp.get("num_prompts_per_group", sp.get("num_users_per_system_prompt", 10))),
                  "system_prompt_tokens": _iperf_length(sp.get("system_prompt_len", 100), "system_prompt_len", warnings),
                  "question_tokens": _iperf_length(sp.get("question_len", 50), "question_len", warnings),
                  "output_tokens": _iperf_length(sp.get("output_len", 50), "output_len", warnings)}
        warn_rest(sp, {"num_groups", "num_unique_system_prompts", "num_prompts_per_group",
                        "num_users_per_system_prompt", "system_prompt_len", "question_len", "output_len",
                        "enable_multi_turn_chat"}, set(), warnings, "data.shared_prefix.")
    else:
        raise ScenarioError(f"traffic.source.path: data.type {dtype}: its prompts are not in the profile; "
                            f"import the random, synthetic or shared_prefix data types, or replay a trace")
    warn_rest(data, {"type", "input_distribution", "output_distribution", "shared_prefix"}, {"path"}, warnings,
               "data.")
    warn_rest(args, {"load", "data"}, {"api", "server", "tokenizer", "report", "storage", "metrics",
                                        "circuit_breakers", "model_name", "base_url"}, warnings)
    return {"source": source, "load": out}
