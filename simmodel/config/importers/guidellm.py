"""GuideLLM's workload: its command line or report (the benchmarks it ran and their data)."""

from __future__ import annotations

import json

from simmodel.config.importers.common import norm, uniform, warn_rest
from simmodel.errors import ScenarioError


def _guidellm_data(data, warnings: list[str]) -> dict:
    """``prompt_tokens=…,output_tokens=…`` (with _stdev, _min, _max): a normal of that mean and stdev
    clamped to [min, max] (by default mean ± 5 stdev, at least 1), uniform on [min, max] without a stdev,
    else fixed."""
    if isinstance(data, list):
        data = data[0] if len(data) == 1 else data
    if isinstance(data, str):
        try:
            data = json.loads(data) if data.strip().startswith("{") else dict(
                part.split("=", 1) for part in data.split(",") if part.strip())
        except ValueError:
            raise ScenarioError(f"traffic.source.path: data {data!r}: not key=value pairs") from None
    if not isinstance(data, dict) or "prompt_tokens" not in data:
        raise ScenarioError("traffic.source.path: data: only synthetic data (prompt_tokens=…,output_tokens=…) "
                            "is imported; a dataset's prompts are not in the file")
    data = {k.strip(): float(v) for k, v in data.items() if k.strip() not in ("source",)}

    def length(prefix: str):
        mean = data.get(f"{prefix}_tokens")
        if mean is None:
            raise ScenarioError(f"traffic.source.path: data: {prefix}_tokens required")
        std = data.get(f"{prefix}_tokens_stdev", 0.0)
        lo = data.get(f"{prefix}_tokens_min", max(1.0, mean - 5 * std) if std else mean)
        hi = data.get(f"{prefix}_tokens_max", mean + 5 * std if std else mean)
        if std:
            return {"distribution": "normal", "mean": mean, "std": std, "min": max(1, int(lo)), "max": int(hi)}
        return uniform(max(1, int(lo)), int(hi)) if lo != hi else int(mean)

    source: dict = {"type": "synthetic", "input_tokens": length("prompt"), "output_tokens": length("output")}
    prefix = int(data.get("prefix_tokens", 0))
    if prefix:
        count = int(data.get("prefix_count", 1))
        inputs = source["input_tokens"]
        if isinstance(inputs, int):
            source["input_tokens"] = inputs + prefix
        else:
            source["input_tokens"] = {**inputs, "min": inputs["min"] + prefix, "max": inputs["max"] + prefix,
                                      **({"mean": inputs["mean"] + prefix} if "mean" in inputs else {})}
        source["shared_prefix"] = {"tokens": prefix, "groups": count}
    if data.get("turns", 1) > 1:
        warnings.append("data turns: multi-turn conversations are not imported; each request is one turn "
                        "(use traffic.source.type: sessions)")
    warn_rest(data, {"prompt_tokens", "prompt_tokens_stdev", "prompt_tokens_min", "prompt_tokens_max",
                      "output_tokens", "output_tokens_stdev", "output_tokens_min", "output_tokens_max",
                      "prefix_tokens", "prefix_count", "turns"}, {"samples"}, warnings, "data ")
    return source


def build(args: dict, warnings: list[str]) -> dict:
    """GuideLLM's benchmarks one after the other (each waits for the one before to finish): synchronous
    (one request at a time), concurrent (one benchmark per stream count), throughput (everything at once,
    up to ``rate`` in flight), constant or poisson (one per rate), each ending at ``max_requests`` and/or
    ``max_seconds``. A report's recorded strategies (a sweep's measured rates too) are used as they ran."""
    args = norm(args)
    if "benchmarks" in args or "args" in args:  # a report: its arguments, and the strategies that ran
        report = args
        args = norm(report.get("args") or {})
        strategies = [((b.get("config") or {}).get("strategy") or (b.get("args") or {}).get("strategy") or {})
                      for b in report.get("benchmarks") or [] if isinstance(b, dict)]
    else:
        strategies = []
    limit_requests, limit_seconds = args.get("max_requests"), args.get("max_seconds")
    if limit_requests is None and limit_seconds is None:
        raise ScenarioError("traffic.source.path: max_requests or max_seconds required (a benchmark needs an end)")
    ends = {**({"requests": int(limit_requests)} if limit_requests else {}),
            **({"duration_s": float(limit_seconds)} if limit_seconds else {})}
    kinds = set()
    stages = []
    if strategies:
        for st in strategies:
            kind = st.get("type_", st.get("type"))
            kinds.add(kind)
            if kind == "synchronous":
                stages.append({"concurrency": 1, **ends})
            elif kind == "concurrent":
                stages.append({"concurrency": int(st["streams"]), **ends})
            elif kind == "throughput":
                stages.append({"concurrency": _throughput_cap(st.get("max_concurrency"), limit_requests), **ends})
            elif kind in ("constant", "poisson", "async"):
                stages.append({"requests_per_second": float(st["rate"]), **ends})
                kinds.add("rate")
            else:
                raise ScenarioError(f"traffic.source.path: benchmark strategy {kind}: not imported")
    else:
        profile = args.get("profile", args.get("rate_type", "sweep"))
        rates = args.get("rate")
        if isinstance(rates, str):  # --rate 2,4,8
            rates = [float(r) for r in rates.split(",") if r.strip()]
        rates = [] if rates is None else rates if isinstance(rates, list) else [rates]
        if profile == "sweep":
            raise ScenarioError("traffic.source.path: profile sweep: its rates come from the server's measured "
                                "throughput; import the report (its benchmarks record the rates that ran)")
        kinds.add(profile)
        if profile == "synchronous":
            stages.append({"concurrency": 1, **ends})
        elif profile == "concurrent":
            stages += [{"concurrency": int(r), **ends} for r in rates]
        elif profile == "throughput":
            stages.append({"concurrency": _throughput_cap(rates[0] if rates else None, limit_requests), **ends})
        elif profile in ("constant", "poisson", "async"):
            stages += [{"requests_per_second": float(r), **ends} for r in rates]
            kinds.add("rate")
        else:
            raise ScenarioError(f"traffic.source.path: profile {profile}: not one GuideLLM runs")
        if not stages:
            raise ScenarioError(f"traffic.source.path: rate: required by profile {profile}")
    arrivals = "poisson" if "poisson" in kinds else "constant"
    for key in ("warmup", "cooldown", "rampup", "warmup_percent", "cooldown_percent"):
        if args.get(key):
            warnings.append(f"{key}: not simulated (every request counts)")
    if "random_seed" in args:
        warnings.append("random_seed: the tool's random draws are not reproduced (engine.seed seeds the run's)")
    source = _guidellm_data(args.get("data"), warnings)
    warn_rest(args, {"profile", "rate_type", "rate", "max_requests", "max_seconds", "data", "warmup", "cooldown",
                      "rampup", "warmup_percent", "cooldown_percent", "random_seed"},
               {"target", "model", "backend", "backend_type", "backend_args", "backend_kwargs", "processor",
                "processor_args", "output_path", "outputs", "disable_progress", "display_scheduler_stats",
                "disable_console_outputs", "data_args", "data_sampler", "output_extras", "request_type",
                "max_errors", "max_error_rate", "max_global_error_rate", "request_formatter_kwargs"}, warnings)
    load = {"type": "stages", "arrivals": arrivals, "stages": stages}
    if limit_seconds:
        warnings.append("max_seconds: GuideLLM cancels the requests still running when a benchmark's time is up "
                        "and starts the next one; here they run to completion beside the next benchmark's")
    elif len(stages) > 1:
        load["drain"] = True  # a benchmark ends when its requests have
    return {"source": source, "load": load}


def _throughput_cap(cap, limit_requests) -> int:
    """GuideLLM's throughput profile: everything at once, at most ``cap`` in flight (its --rate)."""
    if cap:
        return int(cap)
    if limit_requests:
        return int(limit_requests)
    raise ScenarioError("traffic.source.path: profile throughput: without --rate (the most requests in flight) or "
                        "--max-requests, GuideLLM keeps an unbounded number in flight; give one of them")
