"""``vllm bench serve``'s workload: its command line, or its saved arguments."""

from __future__ import annotations

import math
import re

from simmodel.config.importers.common import norm, number, uniform, warn_rest
from simmodel.errors import ScenarioError

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


def build(args: dict, warnings: list[str]) -> dict:
    """``vllm bench serve`` with the ``random`` dataset: lengths uniform on [⌊L(1−r)⌋, ⌈L(1+r)⌉] (outputs
    at least 1), ``random_prefix_len`` shared tokens in front of every prompt; requests at gamma gaps of
    shape ``burstiness`` rescaled to end at num_prompts / rate, or all at once when the rate is inf, with
    at most ``max_concurrency`` in flight."""
    args = norm(args)
    dataset = args.get("dataset_name", "random")
    if dataset != "random":
        raise ScenarioError(f"traffic.source.path: dataset_name {dataset}: its prompts are not in the file; "
                            f"replay the requests as a trace instead (only the random dataset is imported)")
    from_result = "duration" in args and "completed" in args
    for key, default in (("random_input_len", 1024), ("random_output_len", 128)):
        if key not in args and key.replace("random_", "") not in args and from_result:
            warnings.append(f"{key}: not recorded in a --save-result file (pass it with --metadata); vllm bench's "
                            f"default {default} assumed")
    n = int(number(args.get("num_prompts", 1000), "num_prompts"))
    ratio = number(args.get("random_range_ratio", 0.0), "random_range_ratio")
    if not 0 <= ratio < 1:
        raise ScenarioError(f"traffic.source.path: random_range_ratio must be in [0, 1), got {ratio}")
    length_in = int(number(args.get("input_len", args.get("random_input_len", 1024)), "random_input_len"))
    length_out = int(number(args.get("output_len", args.get("random_output_len", 128)), "random_output_len"))
    prefix = int(number(args.get("random_prefix_len", 0), "random_prefix_len"))
    in_lo, in_hi = math.floor(length_in * (1 - ratio)), math.ceil(length_in * (1 + ratio))
    out_lo, out_hi = max(1, math.floor(length_out * (1 - ratio))), max(1, math.ceil(length_out * (1 + ratio)))
    source: dict = {"type": "synthetic", "input_tokens": uniform(in_lo + prefix, in_hi + prefix),
                    "output_tokens": uniform(out_lo, out_hi)}
    if prefix:
        source["shared_prefix"] = {"tokens": prefix, "groups": 1}
    rate = number(args.get("request_rate", math.inf), "request_rate")
    burstiness = number(args.get("burstiness", 1.0), "burstiness")
    cap = args.get("max_concurrency")
    if rate == math.inf:
        load: dict = {"type": "concurrency", "concurrency": int(cap) if cap else n}
    elif burstiness == math.inf:
        load = {"type": "constant_rate", "requests_per_second": rate}
        warnings.append("burstiness inf: evenly spaced requests, the first at 0 (vllm bench sends it after one gap)")
    else:
        load = {"type": "gamma", "requests_per_second": rate, "burstiness": burstiness, "rescale_to_rate": True,
                "seed": int(number(args.get("seed", 0), "seed"))}
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
    warn_rest(args, _VLLM_KNOWN, _VLLM_SILENT | statistics, warnings)
    return {"source": source, "load": load, "stop": {"requests": n}}
