"""AIPerf's workload: its command line, or the configuration a profile export recorded."""

from __future__ import annotations

import shlex

from simmodel.config.importers.common import norm, number, parse_flags, warn_rest
from simmodel.errors import ScenarioError


def build(args: dict, warnings: list[str]) -> dict:
    """``aiperf profile``: lengths normal of mean and stddev (rounded, at least 1); a request rate
    (constant, poisson or gamma arrivals) with ``concurrency`` as a cap on requests in flight, or
    ``concurrency`` alone as closed-loop clients; ``request_count`` requests (default max(10, 2 ×
    concurrency)) or ``benchmark_duration`` seconds."""
    config = args.get("input_config") if isinstance(args.get("input_config"), dict) else None
    if config is not None:  # a profile export: the command that ran, or its recorded configuration
        if isinstance(config.get("cli_command"), str):
            args = parse_flags(shlex.split(config["cli_command"]))
        else:
            loadgen = config.get("loadgen") or {}
            prompt = ((config.get("input") or {}).get("prompt") or {})
            args = {**norm(loadgen),
                    "isl": (prompt.get("input_tokens") or {}).get("mean"),
                    "isl_stddev": (prompt.get("input_tokens") or {}).get("stddev"),
                    "osl": (prompt.get("output_tokens") or {}).get("mean"),
                    "osl_stddev": (prompt.get("output_tokens") or {}).get("stddev")}
            args = {k: v for k, v in args.items() if v is not None}
    args = norm(args)

    def pick(*names, default=None):
        for name in names:
            if args.get(name) is not None:
                return args[name]
        return default

    isl = number(pick("isl", "synthetic_input_tokens_mean", "prompt_input_tokens_mean", default=550), "isl")
    isl_std = number(pick("isl_stddev", "synthetic_input_tokens_stddev", "prompt_input_tokens_stddev", default=0),
                   "isl_stddev")
    osl = pick("osl", "output_tokens_mean", "prompt_output_tokens_mean")
    if osl is None:
        raise ScenarioError("traffic.source.path: output_tokens_mean (--osl): not set, so AIPerf sends no max_tokens "
                            "and answers end at the model's EOS, which the simulation cannot know")
    osl_std = number(pick("osl_stddev", "output_tokens_stddev", "prompt_output_tokens_stddev", default=0), "osl_stddev")

    def length(mean, std):
        if std <= 0:
            return max(1, int(round(mean)))
        return {"distribution": "normal", "mean": float(mean), "std": float(std), "min": 1}

    source = {"type": "synthetic", "input_tokens": length(isl, isl_std), "output_tokens": length(number(osl, "osl"),
                                                                                                 osl_std)}
    concurrency = pick("concurrency")
    rate = pick("request_rate")
    count = pick("request_count", "num_requests")
    duration = pick("benchmark_duration")
    stop: dict = {}
    if isinstance(concurrency, list):
        if rate is not None:
            raise ScenarioError("traffic.source.path: a concurrency sweep with a request rate is not imported")
        per = int(count or 10)
        load: dict = {"type": "stages", "stages": [{"concurrency": int(c), "requests": per} for c in concurrency]}
        if len(concurrency) > 1:
            load["drain"] = True
    elif rate is not None:
        pattern = pick("arrival_pattern", "request_rate_mode", default="poisson")
        pattern = {"constant": "constant_rate"}.get(pattern, pattern)
        if pattern not in ("constant_rate", "poisson", "gamma"):
            raise ScenarioError(f"traffic.source.path: arrival pattern {pattern}: not imported")
        load = {"type": pattern, "requests_per_second": number(rate, "request_rate")}
        if pattern == "gamma":
            load["burstiness"] = number(pick("arrival_smoothness", "vllm_burstiness", default=1.0), "arrival_smoothness")
        if concurrency:
            load["max_concurrency"] = int(concurrency)
            warnings.append("concurrency with request_rate: AIPerf skips a tick that finds no free slot; simulated "
                            "as arrivals waiting for a slot")
        stop["requests"] = int(count) if count else None
    else:
        load = {"type": "concurrency", "concurrency": int(concurrency or 1)}
        stop["requests"] = int(count) if count else None
    if load["type"] != "stages":
        if stop.get("requests") is None:
            if duration:
                del stop["requests"]
            else:
                stop["requests"] = max(10, 2 * int(concurrency or 1))
        if duration:
            stop["max_virtual_time_seconds"] = number(duration, "benchmark_duration")
    if duration and "benchmark_grace_period" not in args:
        warnings.append("benchmark_duration: AIPerf still counts answers within its grace period (30 s by default) "
                        "after the duration; the simulation stops at the duration")
    if "benchmark_grace_period" in args:
        warnings.append("benchmark_grace_period: answers after benchmark_duration are not simulated")
        args = {k: v for k, v in args.items() if k != "benchmark_grace_period"}
    for key in sorted(k for k in args if k.startswith("warmup")):
        warnings.append(f"{key}: warm-up requests are not simulated")
    if args.get("num_dataset_entries"):
        warnings.append("num_dataset_entries: AIPerf reuses that many prompts; every simulated request draws "
                        "its own lengths")
    if "random_seed" in args:
        warnings.append("random_seed: the tool's random draws are not reproduced (engine.seed seeds the run's)")
    warn_rest(args, {"isl", "synthetic_input_tokens_mean", "prompt_input_tokens_mean", "isl_stddev",
                      "synthetic_input_tokens_stddev", "prompt_input_tokens_stddev", "osl", "output_tokens_mean",
                      "prompt_output_tokens_mean", "osl_stddev", "output_tokens_stddev", "prompt_output_tokens_stddev",
                      "concurrency", "request_rate", "request_count", "num_requests", "benchmark_duration",
                      "arrival_pattern", "request_rate_mode", "arrival_smoothness", "vllm_burstiness",
                      "num_dataset_entries", "random_seed"} | {k for k in args if k.startswith("warmup")},
               {"model", "model_names", "url", "endpoint_type", "endpoint", "streaming", "tokenizer", "artifact_dir",
                "ui_type", "ui", "api_key", "header", "extra_inputs", "verbose",
                "log_level", "workers_max", "record_processors", "output_artifact_dir", "profile_export_file",
                "cli_command", "use_server_token_count", "use_legacy_max_tokens"}, warnings)
    traffic = {"source": source, "load": load}
    if stop:
        traffic["stop"] = stop
    return traffic
