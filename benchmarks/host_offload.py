"""A host KV tier beside the same deployment without it: speed and what the tier gains.

Issue 24's benchmark: 20,000 Mooncake conversation requests on the deployment of
``scenarios/mooncake-host-offload.yaml`` (one Llama-3.1-8B-Instruct worker of tensor parallel 4 on H200, vLLM with
prefix caching, synchronous scheduling, 12,000 GPU KV blocks of 16 tokens), with and without its host tier
(``kv_cache.host_offload``: 1,000 GiB). The trace is the shipped ``builtin:mooncake/conversation_head2000.jsonl``
laid end to end ten times, each copy its own conversations (hash ids offset) and starting when the one before
ends.

Prints one line per run: the whole process's time, the hit ratio (GPU and host) and mean TTFT, then the ratio of
the run with the tier to the run without it (target: at most 1.5x). ``--backend sglang`` runs
``scenarios/mooncake-hicache-sglang.yaml`` instead (the same deployment served by SGLang with HiCache);
``--storage`` runs ``scenarios/mooncake-storage-offload.yaml`` (vLLM, a 100 GiB host tier with storage behind it)
as the tiered run, or with ``--backend sglang`` ``scenarios/mooncake-storage-sglang.yaml`` (SGLang, a 100 GiB host
pool with storage behind it, ``prefetch_policy: timeout``).
``--queue`` runs a synthetic load instead that outruns the same model on one H200 with 4,000 GPU blocks and a
200 GiB host tier, so that the queue builds up (300–3,000 tokens in over 64 shared 1,024-token prefixes, 50–400
out, Poisson 20 requests/s; 6,000 requests by default): every run of passes then starts with hundreds of requests
waiting (docs/speed.md, the seventeenth session's figures).
``--requests`` cuts the trace; ``--repeat`` takes the best of N interleaved rounds. A benchmark, not a test: it
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml
from kv_router import timed, write_trace

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = {"vllm": REPO / "scenarios" / "mooncake-host-offload.yaml",
             "sglang": REPO / "scenarios" / "mooncake-hicache-sglang.yaml",
             "storage": REPO / "scenarios" / "mooncake-storage-offload.yaml",
             "sglang-storage": REPO / "scenarios" / "mooncake-storage-sglang.yaml"}


def scenario(trace: Path, tier: bool, backend: str) -> dict:
    data = yaml.safe_load(SCENARIOS[backend].read_text())
    data["traffic"]["source"]["path"] = str(trace)
    if not tier:
        del data["engine"]["workers"]["aggregated"]["kv_cache"]["host_offload"]
    return data


def queued(requests: int, tier: bool) -> dict:
    """``--queue``'s scenario, with or without its host tier."""
    kv_cache = {"block_size": 16, "capacity": {"type": "fixed", "blocks": 4000}, "prefix_caching": True}
    if tier:
        kv_cache["host_offload"] = {"capacity_gib": 200}
    return {"engine": {"model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "h200_sxm", "context_length": 16384,
                       "workers": {"aggregated": {"kv_cache": kv_cache, "scheduler": {"async_scheduling": False}}}},
            "traffic": {"source": {"type": "synthetic",
                                   "input_tokens": {"distribution": "uniform", "min": 300, "max": 3000},
                                   "output_tokens": {"distribution": "uniform", "min": 50, "max": 400},
                                   "shared_prefix": {"tokens": 1024, "groups": 64}},
                        "load": {"type": "poisson", "requests_per_second": 20}, "stop": {"requests": requests}}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, help="default: 20,000 (6,000 with --queue)")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds; the best time of each is shown")
    parser.add_argument("--backend", choices=("sglang", "vllm"), default="vllm")
    parser.add_argument("--storage", action="store_true", help="the tiered run has storage behind its host tier")
    parser.add_argument("--queue", action="store_true", help="a synthetic load whose queue builds up (vLLM, no storage)")
    args = parser.parse_args()
    if args.queue and (args.storage or args.backend != "vllm"):
        parser.error("--queue runs vLLM with a host tier alone")
    label = args.backend
    if args.storage:
        label = f"{args.backend} (host tier + storage)"
        args.backend = "sglang-storage" if args.backend == "sglang" else "storage"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trace = folder / "trace.jsonl"
        if args.queue:
            n = args.requests or 6_000
            what = f"{n:,} synthetic requests at 20 req/s, one vllm worker on H200 with 4,000 blocks"
        else:
            n = write_trace(trace, args.requests or 20_000, max_tokens=None)
            what = f"{n:,} Mooncake conversation requests, one TP-4 {label} worker"
        runs: dict[str, dict] = {}
        for name, tier in (("host tier", True), ("GPU only", False)):
            path = folder / f"{name.replace(' ', '_')}.yaml"
            data = queued(n, tier) if args.queue else scenario(trace, tier, args.backend)
            path.write_text(yaml.safe_dump(data))
            runs[name] = {"command": [sys.executable, "-m", "simmodel.cli", "run", "-c", str(path), "--quiet",
                                      "--format", "json"], "times": []}
        for _ in range(max(args.repeat, 1)):
            for run in runs.values():
                elapsed, out = timed(run["command"])
                run["times"].append(elapsed)
                run["summary"] = json.loads(out)
        print(f"{what} (best of {max(args.repeat, 1)} round(s))")
        print(f"{'run':<10} {'seconds':>8} {'GPU hits':>9} {'host hits':>9} {'storage':>9} {'TTFT ms':>9}")
        for name, run in runs.items():
            s = run["summary"]
            tier = s.get("kv_offload", {}).get("aggregated", {})
            print(f"{name:<10} {min(run['times']):8.2f} {s['prefix_cache_hit_ratio']:9.4f} "
                  f"{tier.get('host_hit_ratio', 0.0):9.4f} {tier.get('storage_hit_ratio') or 0.0:9.4f} "
                  f"{s['ttft_ms']['mean']:9.1f}")
        ratio = min(runs["host tier"]["times"]) / min(runs["GPU only"]["times"])
        print(f"host tier / GPU only wall time: {ratio:.2f}x (target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")


if __name__ == "__main__":
    main()
