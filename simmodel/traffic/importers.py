"""Workloads as benchmark tools describe them (``traffic.source: {type: import, tool, path}``): the file a
user already has — a ``vllm bench serve`` command line or its saved arguments, an inference-perf profile
YAML, a GuideLLM command line or report, an AIPerf command line or profile export — becomes the
``traffic`` mapping (source, load, stop) that sends the same workload, plus a warning for every field
that shapes the workload but cannot be reproduced. Fields that only say where and how to connect (URLs,
model names, output files) are read and left alone.

Each tool's semantics (``docs/workloads.md``) follow its source: the lengths and arrival processes it
draws, the order its stages run in. The random draws themselves are the simulation's (same
distributions, not the same samples).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import yaml

from simmodel.config.load import read_text_file
from simmodel.errors import ScenarioError

TOOLS = ("vllm-bench", "inference-perf", "guidellm", "aiperf")


def import_workload(tool: str, path: Path) -> tuple[dict, list[str]]:
    """The traffic mapping the tool's workload file stands for, and the warnings."""
    text = read_text_file(path, "traffic.source.path")
    args = _arguments(text, path)
    build = {"vllm-bench": _vllm_bench, "inference-perf": _inference_perf, "guidellm": _guidellm,
             "aiperf": _aiperf}[tool]
    warnings: list[str] = []
    try:
        traffic = build(args, warnings)
    except ScenarioError:
        raise
    except KeyError as exc:
        raise ScenarioError(f"traffic.source.path: {path}: a {tool} field is missing: {exc.args[0]}") from None
    except (TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise ScenarioError(f"traffic.source.path: {path}: a {tool} value is malformed "
                            f"({' '.join(str(exc).split())[:160]})") from None
    return traffic, [f"{path.name}: {w}" for w in warnings]


# -- reading a file: a command line, or a mapping of arguments ------------------------------------------------

def _arguments(text: str, path: Path) -> dict:
    """A JSON/YAML mapping as it is, or a command line's ``--flag value`` pairs (dashes as underscores)."""
    stripped = text.strip()
    if stripped.startswith("{") or path.suffix in (".json", ".yaml", ".yml"):
        try:
            data = yaml.safe_load(stripped)
        except Exception as exc:  # noqa: BLE001 (a YAMLError, or PyYAML's constructors: `!!int x`, bad dates)
            raise ScenarioError(f"traffic.source.path: {path}: not a YAML/JSON mapping "
                                f"({' '.join(str(exc).split())[:120]})") from None
        if not isinstance(data, dict):
            raise ScenarioError(f"traffic.source.path: {path}: must hold a mapping or a command line")
        return data
    try:
        words = shlex.split(stripped.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise ScenarioError(f"traffic.source.path: {path}: not a command line ({exc})") from None
    return parse_flags(words)


def parse_flags(words: list[str]) -> dict:
    """``--name value``, ``--name=value`` and bare ``--flag`` (true) pairs; words before the first flag
    (the program and its subcommand) are skipped. Values are read as YAML scalars (numbers, inf, true)."""
    flags: dict = {}
    i = 0
    while i < len(words) and not words[i].startswith("--"):
        i += 1
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            raise ScenarioError(f"traffic.source.path: unexpected word {word!r} (flags are --name value)")
        name, eq, value = word[2:].partition("=")
        if not eq:
            if i + 1 < len(words) and not words[i + 1].startswith("--"):
                value = words[i + 1]
                i += 1
            else:
                value = "true"
        key, value = name.replace("-", "_"), _scalar(value)
        if key in flags:  # a repeated flag (GuideLLM's --rate 2 --rate 4): every value, in order
            previous = flags[key] if isinstance(flags[key], list) else [flags[key]]
            value = previous + (value if isinstance(value, list) else [value])
        flags[key] = value
        i += 1
    return flags


def _scalar(value: str):
    if value.lower() in ("inf", "+inf", "infinity"):
        return math.inf
    try:
        parsed = yaml.safe_load(value)
    except Exception:  # noqa: BLE001 (not a YAML scalar: the word as it is)
        return value
    return parsed if isinstance(parsed, (int, float, bool, list)) else value


def _norm(data: dict) -> dict:
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _num(value, name: str) -> float:
    if isinstance(value, str) and value.lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScenarioError(f"traffic.source.path: {name} must be a number, got {value!r}")
    return float(value)


def _warn_rest(args: dict, known: set, silent: set, warnings: list[str], where: str = "") -> None:
    for key in sorted(set(args) - known - silent):
        warnings.append(f"{where}{key}: not reproduced by the simulation (ignored)")


# -- vllm bench serve -----------------------------------------------------------------------------------------

_VLLM_SILENT = {
    "backend", "endpoint_type", "base_url", "host", "port", "endpoint", "model", "served_model_name", "tokenizer",
    "tokenizer_mode", "trust_remote_code", "save_result", "save_detailed", "append_result", "result_dir",
    "result_filename", "metadata", "label", "percentile_metrics", "metric_percentiles", "disable_tqdm", "profile",
    "goodput", "ignore_eos", "request_id_prefix", "ready_check_timeout_sec", "header", "logprobs", "temperature",
    "top_p", "top_k", "min_p", "use_beam_search", "disable_shuffle", "insecure",
    # what a --save-result file holds besides the arguments: results
    "date", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "request_goodput", "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
    "max_concurrent_requests", "rtfx", "model_id", "tokenizer_id", "latencies", "ttfts", "itls", "input_lens",
    "output_lens", "generated_texts", "errors", "start_times", "queue_times", "rps_change_events",
}
_VLLM_KNOWN = {"dataset_name", "num_prompts", "request_rate", "burstiness", "max_concurrency", "seed",
               "random_input_len", "random_output_len", "random_range_ratio", "random_prefix_len", "input_len",
               "output_len", "num_warmups", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"}


def _vllm_bench(args: dict, warnings: list[str]) -> dict:
    """``vllm bench serve`` with the ``random`` dataset: lengths uniform on [⌊L(1−r)⌋, ⌈L(1+r)⌉] (outputs
    at least 1), ``random_prefix_len`` shared tokens in front of every prompt; requests at gamma gaps of
    shape ``burstiness`` rescaled to end at num_prompts / rate, or all at once when the rate is inf, with
    at most ``max_concurrency`` in flight."""
    args = _norm(args)
    dataset = args.get("dataset_name", "random")
    if dataset != "random":
        raise ScenarioError(f"traffic.source.path: dataset_name {dataset}: its prompts are not in the file; "
                            f"replay the requests as a trace instead (only the random dataset is imported)")
    from_result = "duration" in args and "completed" in args
    for key, default in (("random_input_len", 1024), ("random_output_len", 128)):
        if key not in args and key.replace("random_", "") not in args and from_result:
            warnings.append(f"{key}: not recorded in a --save-result file (pass it with --metadata); vllm bench's "
                            f"default {default} assumed")
    n = int(_num(args.get("num_prompts", 1000), "num_prompts"))
    ratio = _num(args.get("random_range_ratio", 0.0), "random_range_ratio")
    if not 0 <= ratio < 1:
        raise ScenarioError(f"traffic.source.path: random_range_ratio must be in [0, 1), got {ratio}")
    length_in = int(_num(args.get("input_len", args.get("random_input_len", 1024)), "random_input_len"))
    length_out = int(_num(args.get("output_len", args.get("random_output_len", 128)), "random_output_len"))
    prefix = int(_num(args.get("random_prefix_len", 0), "random_prefix_len"))
    in_lo, in_hi = math.floor(length_in * (1 - ratio)), math.ceil(length_in * (1 + ratio))
    out_lo, out_hi = max(1, math.floor(length_out * (1 - ratio))), max(1, math.ceil(length_out * (1 + ratio)))
    source: dict = {"type": "synthetic", "input_tokens": _uniform(in_lo + prefix, in_hi + prefix),
                    "output_tokens": _uniform(out_lo, out_hi)}
    if prefix:
        source["shared_prefix"] = {"tokens": prefix, "groups": 1}
    rate = _num(args.get("request_rate", math.inf), "request_rate")
    burstiness = _num(args.get("burstiness", 1.0), "burstiness")
    cap = args.get("max_concurrency")
    if rate == math.inf:
        load: dict = {"type": "concurrency", "concurrency": int(cap) if cap else n}
    elif burstiness == math.inf:
        load = {"type": "constant_rate", "requests_per_second": rate}
        warnings.append("burstiness inf: evenly spaced requests, the first at 0 (vllm bench sends it after one gap)")
    else:
        load = {"type": "gamma", "requests_per_second": rate, "burstiness": burstiness, "rescale_to_rate": True,
                "seed": int(_num(args.get("seed", 0), "seed"))}
        if burstiness == 1.0:
            load = {**load, "type": "poisson"}
            del load["burstiness"]
    if cap and rate != math.inf:
        load["max_concurrency"] = int(cap)
    if args.get("num_warmups"):
        warnings.append(f"num_warmups {args['num_warmups']}: warm-up requests are not simulated")
    if args.get("ramp_up_strategy"):
        warnings.append(f"ramp_up_strategy {args['ramp_up_strategy']}: a rate ramp is not reproduced; the run "
                        f"uses request_rate throughout")
    statistics = {k for k in args if re.fullmatch(r"(mean|median|std|p[0-9.]+)_\w+_ms", k)}  # results
    _warn_rest(args, _VLLM_KNOWN, _VLLM_SILENT | statistics, warnings)
    return {"source": source, "load": load, "stop": {"requests": n}}


def _uniform(lo: int, hi: int):
    return lo if lo == hi else {"distribution": "uniform", "min": lo, "max": hi}


# -- inference-perf -------------------------------------------------------------------------------------------

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
    _warn_rest(spec, {"min", "max", "mean", "std_dev", "variance", "type"}, {"total_count"}, warnings, f"{name}.")
    if kind == "fixed":
        return int(mean)
    if kind == "uniform":
        return _uniform(max(1, lo), hi)
    if kind != "normal":
        warnings.append(f"{name}.type {kind}: drawn as a normal distribution of the same mean and std_dev")
    if std <= 0:
        return max(1, min(hi, max(lo, int(round(mean)))))
    return {"distribution": "normal", "mean": mean, "std": std, "min": max(1, lo), "max": hi}


def _inference_perf(args: dict, warnings: list[str]) -> dict:
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
    _warn_rest(load, {"type", "stages", "interval", "num_workers", "worker_max_concurrency", "base_seed", "sweep"},
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
        _warn_rest(sp, {"num_groups", "num_unique_system_prompts", "num_prompts_per_group",
                        "num_users_per_system_prompt", "system_prompt_len", "question_len", "output_len",
                        "enable_multi_turn_chat"}, set(), warnings, "data.shared_prefix.")
    else:
        raise ScenarioError(f"traffic.source.path: data.type {dtype}: its prompts are not in the profile; "
                            f"import the random, synthetic or shared_prefix data types, or replay a trace")
    _warn_rest(data, {"type", "input_distribution", "output_distribution", "shared_prefix"}, {"path"}, warnings,
               "data.")
    _warn_rest(args, {"load", "data"}, {"api", "server", "tokenizer", "report", "storage", "metrics",
                                        "circuit_breakers", "model_name", "base_url"}, warnings)
    return {"source": source, "load": out}


# -- GuideLLM -------------------------------------------------------------------------------------------------

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
        return _uniform(max(1, int(lo)), int(hi)) if lo != hi else int(mean)

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
    _warn_rest(data, {"prompt_tokens", "prompt_tokens_stdev", "prompt_tokens_min", "prompt_tokens_max",
                      "output_tokens", "output_tokens_stdev", "output_tokens_min", "output_tokens_max",
                      "prefix_tokens", "prefix_count", "turns"}, {"samples"}, warnings, "data ")
    return source


def _guidellm(args: dict, warnings: list[str]) -> dict:
    """GuideLLM's benchmarks one after the other (each waits for the one before to finish): synchronous
    (one request at a time), concurrent (one benchmark per stream count), throughput (everything at once,
    up to ``rate`` in flight), constant or poisson (one per rate), each ending at ``max_requests`` and/or
    ``max_seconds``. A report's recorded strategies (a sweep's measured rates too) are used as they ran."""
    args = _norm(args)
    if "benchmarks" in args or "args" in args:  # a report: its arguments, and the strategies that ran
        report = args
        args = _norm(report.get("args") or {})
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
    _warn_rest(args, {"profile", "rate_type", "rate", "max_requests", "max_seconds", "data", "warmup", "cooldown",
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


# -- AIPerf ---------------------------------------------------------------------------------------------------

def _aiperf(args: dict, warnings: list[str]) -> dict:
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
            args = {**_norm(loadgen),
                    "isl": (prompt.get("input_tokens") or {}).get("mean"),
                    "isl_stddev": (prompt.get("input_tokens") or {}).get("stddev"),
                    "osl": (prompt.get("output_tokens") or {}).get("mean"),
                    "osl_stddev": (prompt.get("output_tokens") or {}).get("stddev")}
            args = {k: v for k, v in args.items() if v is not None}
    args = _norm(args)

    def pick(*names, default=None):
        for name in names:
            if args.get(name) is not None:
                return args[name]
        return default

    isl = _num(pick("isl", "synthetic_input_tokens_mean", "prompt_input_tokens_mean", default=550), "isl")
    isl_std = _num(pick("isl_stddev", "synthetic_input_tokens_stddev", "prompt_input_tokens_stddev", default=0),
                   "isl_stddev")
    osl = pick("osl", "output_tokens_mean", "prompt_output_tokens_mean")
    if osl is None:
        raise ScenarioError("traffic.source.path: output_tokens_mean (--osl): not set, so AIPerf sends no max_tokens "
                            "and answers end at the model's EOS, which the simulation cannot know")
    osl_std = _num(pick("osl_stddev", "output_tokens_stddev", "prompt_output_tokens_stddev", default=0), "osl_stddev")

    def length(mean, std):
        if std <= 0:
            return max(1, int(round(mean)))
        return {"distribution": "normal", "mean": float(mean), "std": float(std), "min": 1}

    source = {"type": "synthetic", "input_tokens": length(isl, isl_std), "output_tokens": length(_num(osl, "osl"),
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
        load = {"type": pattern, "requests_per_second": _num(rate, "request_rate")}
        if pattern == "gamma":
            load["burstiness"] = _num(pick("arrival_smoothness", "vllm_burstiness", default=1.0), "arrival_smoothness")
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
            stop["max_virtual_time_seconds"] = _num(duration, "benchmark_duration")
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
    _warn_rest(args, {"isl", "synthetic_input_tokens_mean", "prompt_input_tokens_mean", "isl_stddev",
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
