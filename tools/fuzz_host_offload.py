"""Runs of passes against the pass-by-pass simulation, with a host KV tier, on random scenarios.

Each seed draws a scenario (a rate, closed-loop, chat-session or Mooncake trace load; sync or async scheduling;
attention-DP ranks, replicas, a prefill schedule interval, a chunking threshold; small to large GPU caches and
host tiers; slow to fast links; fixed or default timing), runs it planned as runs of passes (the default) and
pass by pass (``coalesce=False``), and prints one line: ``ok`` if every request, pass, event and tier figure is
the same, else which tables differ. Exits 1 if any seed differs. A check for whoever changes how a worker with
a tier plans its runs (``docs/speed.md``); ``tests/scenarios/test_host_offload.py`` keeps four such scenarios.
``--backend sglang`` draws SGLang workers with HiCache instead (``tests/scenarios/test_hicache.py`` keeps six);
``--storage`` puts a random storage tier behind each host tier (``tests/scenarios/test_storage_tier.py`` keeps
such vLLM scenarios, ``tests/scenarios/test_sglang_storage.py`` SGLang ones, with each prefetch policy);
``--shared`` makes that tier one store shared by two or three replicas (``tests/scenarios/test_shared_storage.py``).

    python tools/fuzz_host_offload.py 0 300
    python tools/fuzz_host_offload.py 0 100 --backend sglang
    python tools/fuzz_host_offload.py 0 100 --storage
    python tools/fuzz_host_offload.py 0 100 --backend sglang --storage
    python tools/fuzz_host_offload.py 0 100 --storage --shared
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from simmodel.config.load import parse_scenario
from simmodel.sim import Simulation

MOONCAKE = "builtin:mooncake/conversation_head2000.jsonl"


def traffic(rng: random.Random) -> tuple[str, dict]:
    kind = rng.choice(["poisson", "concurrency", "sessions", "mooncake", "sessions_rate", "gamma"])
    stop = {"requests": rng.choice([60, 120, 200])}
    if kind == "mooncake":
        return kind, {"source": {"type": "trace", "path": MOONCAKE, "format": "mooncake", "block_size": 512},
                      "load": {"type": "trace_timestamps", "speedup": rng.choice([1, 3, 10])}, "stop": stop}
    if kind.startswith("sessions"):
        load = ({"type": "concurrency", "concurrency": rng.choice([2, 8, 16, 32])} if kind == "sessions"
                else {"type": "poisson", "requests_per_second": rng.choice([1, 4, 10])})
        source = {"type": "sessions", "turns": {"distribution": "uniform", "min": 2, "max": 6},
                  "new_input_tokens_per_turn": {"distribution": "uniform", "min": 50, "max": 900},
                  "output_tokens_per_turn": {"distribution": "uniform", "min": 5, "max": 200},
                  "inter_turn_delay_ms": rng.choice([0, 100, 2000]), "shared_prefix_ratio": rng.choice([0, 0.5])}
        return kind, {"source": source, "load": load, "stop": stop}
    source = {"type": "synthetic", "input_tokens": {"distribution": "uniform", "min": 50, "max": 2000},
              "output_tokens": {"distribution": "uniform", "min": 1, "max": 200},
              "shared_prefix": {"tokens": rng.choice([200, 1000]), "groups": rng.choice([2, 8])}}
    if kind == "gamma":
        load = {"type": "gamma", "requests_per_second": rng.choice([5, 20, 60]), "burstiness": 0.3}
    elif kind == "concurrency":
        load = {"type": "concurrency", "concurrency": rng.choice([1, 4, 16, 64])}
    else:
        load = {"type": "poisson", "requests_per_second": rng.choice([5, 20, 60])}
    return kind, {"source": source, "load": load, "stop": stop}


def scenario(seed: int) -> dict:
    rng = random.Random(seed)
    kind, load = traffic(rng)
    ranks = rng.choice([1, 1, 2])
    context = 65536 if kind == "mooncake" else 16384
    blocks = rng.choice([300, 600, 1500, 5000])
    if kind == "mooncake":
        blocks = max(blocks, context // 16 + 1)
    else:
        context = min(context, blocks * 16)
    scheduler = {"async_scheduling": rng.choice([False, True]), "max_batched_tokens": rng.choice([512, 2048, 8192]),
                 "max_sequences": rng.choice([8, 64, 256]), "long_prefill_token_threshold": rng.choice([0, 0, 256])}
    if ranks > 1 and rng.random() < 0.5:
        scheduler["prefill_schedule_interval"] = 2
    host = {"capacity_gib": rng.choice([0.01, 0.1, 0.5, 4, 100]), "link_gb_per_s": rng.choice([None, 0.2, 1, 8]),
            "latency_us": rng.choice([0, 50, 5000])}
    worker = {"parallelism": {"attention_data": ranks, "replicas": rng.choice([1, 1, 2])}, "scheduler": scheduler,
              "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": blocks}, "host_offload": host},
              "timing": rng.choice([{"type": "default"}, {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}])}
    return {"traffic": load, "engine": {"model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "h100_sxm",
                                        "context_length": context, "workers": {"aggregated": worker}}}


def sglang_scenario(seed: int) -> dict:
    """The seed's draw served by SGLang with HiCache: pages of 1 or 16 tokens, a host pool by ratio or size, each
    write policy, attention-DP ranks, the overlap loop, slow to fast links."""
    rng = random.Random(seed)
    kind, load = traffic(rng)
    page = rng.choice([1, 16])
    context = 16384
    tokens = rng.choice([8000, 17000, 40000]) if kind != "mooncake" else rng.choice([70000, 140000])
    context = 65536 if kind == "mooncake" else min(context, tokens - 2 * page)
    host = rng.choice([{"ratio": rng.choice([0.5, 2, 8])}, {"capacity_gib": rng.choice([0.05, 1, 40])}])
    host |= {"write_policy": rng.choice(["write_through", "write_through", "write_through_selective",
                                         "write_back"]),
             "link_gb_per_s": rng.choice([None, 4, 16]), "latency_us": rng.choice([0, 50])}
    worker = {"parallelism": {"attention_data": rng.choice([1, 1, 2]), "replicas": rng.choice([1, 1, 2])},
              "host_loop": rng.random() < 0.25,
              "kv_cache": {"block_size": page, "capacity": {"type": "fixed", "blocks": tokens // page},
                           "host_offload": host},
              "timing": rng.choice([{"type": "default"}, {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}])}
    return {"traffic": load, "engine": {"backend": "sglang", "model": "meta-llama/Llama-3.1-8B-Instruct",
                                        "hardware": "h100_sxm", "context_length": context,
                                        "workers": {"aggregated": worker}}}


def with_storage(data: dict, seed: int, shared: bool = False) -> dict:
    """``data`` with a storage tier behind its host tier, drawn from its own generator (the rest of the scenario
    is the seed's as without ``--storage``); ``shared``: one store for two or three replicas, routed round robin
    or to the least loaded."""
    rng = random.Random(f"storage-{seed}")
    worker = data["engine"]["workers"]["aggregated"]
    host = worker["kv_cache"]["host_offload"]
    storage = host["storage"] = {"capacity_gib": rng.choice([None, None, 0.05, 1, 20]),
                                 "read_gb_per_s": rng.choice([0.2, 2, 20]), "write_gb_per_s": rng.choice([0.2, 2, 20]),
                                 "latency_us": rng.choice([0, 100, 5000])}
    if shared:
        storage["shared"] = True
        worker["parallelism"]["replicas"] = rng.choice([2, 3])
        data["router"] = {"type": rng.choice(["round_robin", "least_loaded"])}
    if "write_policy" in host:  # SGLang: a host pool that evicts to storage yet holds reads until admission
        host.pop("capacity_gib", None)
        host["ratio"] = rng.choice([0.5, 1, 2])
        if data["traffic"]["source"]["type"] not in ("sessions", "trace"):  # (loads whose prefixes come back)
            data["traffic"]["source"] = {
                "type": "sessions", "turns": {"distribution": "uniform", "min": 3, "max": 8},
                "new_input_tokens_per_turn": {"distribution": "uniform", "min": 200, "max": 1500},
                "output_tokens_per_turn": {"distribution": "uniform", "min": 5, "max": 100},
                "inter_turn_delay_ms": rng.choice([500, 3000])}
            data["traffic"]["load"] = {"type": "concurrency", "concurrency": rng.choice([16, 48])}
        storage["write_gb_per_s"] = rng.choice([2, 20])  # (slower writes pin the host pool full: no reads at all)
        policy = rng.choice(["best_effort", "wait_complete", "timeout", "timeout"])
        storage |= {"prefetch_policy": policy, "prefetch_threshold": rng.choice([256, 256, 16])}
        if policy == "timeout":
            storage |= {"prefetch_timeout_base_s": rng.choice([1.0, 0.01]),
                        "prefetch_timeout_per_ki_token_s": rng.choice([0.25, 0.0])}
        return data
    # (a host tier that holds one prompt, or not much more: lookups go on to storage; vLLM needs the one prompt)
    prompt_gib = data["engine"]["context_length"] * 131072 / 2**30
    host["capacity_gib"] = max(host["capacity_gib"], prompt_gib * rng.choice([1, 1.5, 4]))
    return data


def differences(data: dict) -> tuple[list[str], dict]:
    """The tables that differ between runs of passes and pass by pass, and the tier's figures."""
    runs, single = (Simulation(parse_scenario(data, Path(".")), coalesce=coalesce).run() for coalesce in (True, False))
    differ = [] if runs.summary["kv_offload"] == single.summary["kv_offload"] else ["kv_offload"]
    differ += [table for table in ("requests", "passes", "events")
               if not getattr(runs, table).equals(getattr(single, table))]
    return differ, runs.summary["kv_offload"]["aggregated"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=int)
    parser.add_argument("end", type=int)
    parser.add_argument("--backend", choices=("vllm", "sglang"), default="vllm",
                        help="sglang: SGLang workers with HiCache (sglang_scenario)")
    parser.add_argument("--storage", action="store_true", help="a storage tier behind the host tier")
    parser.add_argument("--shared", action="store_true", help="with --storage: one store for two or three replicas")
    args = parser.parse_args()
    failed = 0
    draw = sglang_scenario if args.backend == "sglang" else scenario
    for seed in range(args.first, args.end):
        data = draw(seed)
        differ, tier = differences(with_storage(data, seed, args.shared) if args.storage else data)
        failed += bool(differ)
        print(seed, "DIFF " + ",".join(differ) if differ else "ok", "loads", tier["loads"], "evicted",
              tier["blocks_evicted"], "stores_failed", tier["stores_failed"],
              *(("storage_hits", tier["storage_hit_tokens"]) if args.storage else ()), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
