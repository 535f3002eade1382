"""Time 10,000 Poisson requests through one vLLM (or SGLang) worker and print how fast the simulator runs.

Llama-3.1-8B-Instruct on one H100 SXM, polynomial timing, default scheduler and KV cache; requests
arrive at 8 per second with prompts uniform in 128-2048 tokens and outputs uniform in 32-512 tokens.

    python3 benchmarks/poisson_10k.py [--requests N] [--seed S] [--no-events] [--backend vllm|sglang]
"""

# ruff: noqa: T201  (a benchmark script reports on stdout; print is its interface)

from __future__ import annotations

import argparse
import time
from pathlib import Path

from simmodel import Simulation
from simmodel.config.load import parse_scenario


def scenario_dict(num_requests: int, seed: int, backend: str = "vllm") -> dict:
    """The benchmark scenario, as a YAML file would give it."""
    data = {
        "traffic": {
            "source": {
                "type": "synthetic",
                "input_tokens": {"distribution": "uniform", "min": 128, "max": 2048},
                "output_tokens": {"distribution": "uniform", "min": 32, "max": 512},
            },
            "load": {"type": "poisson", "requests_per_second": 8},
            "stop": {"requests": num_requests},
        },
        "engine": {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "hardware": "h100_sxm",
            "seed": seed,
            "workers": {"aggregated": {"parallelism": {"replicas": 1}, "timing": {"type": "polynomial"}}},
        },
    }
    if backend == "sglang":  # SGLang's defaults: radix cache of single tokens, KV capacity in tokens
        data["engine"]["backend"] = "sglang"
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="requests to simulate (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="engine.seed (default 0)")
    parser.add_argument("--no-events", action="store_true",
                        help="do not keep the event log (keep_events=False); metrics are unchanged")
    parser.add_argument("--backend", choices=("vllm", "sglang"), default="vllm", help="engine.backend (default vllm)")
    args = parser.parse_args()
    if args.requests < 1:
        parser.error("--requests must be at least 1")

    started = time.perf_counter()
    scenario = parse_scenario(scenario_dict(args.requests, args.seed, args.backend), base_dir=Path.cwd())
    sim = Simulation(scenario, keep_events=not args.no_events)
    built = time.perf_counter()
    results = sim.run()
    finished = time.perf_counter()

    summary = results.summary
    run_s = finished - built                  # the event loop plus building the result tables
    loop_s = summary["wall_time_s"]           # the event loop alone
    passes = summary["num_passes"]
    print(f"requests           {summary['num_requests']} ({summary['completed_requests']} completed, "
          f"{summary['num_preemptions']} preemptions)")
    print(f"simulated time     {summary['end_time_s']:.1f} s")
    print(f"events kept        {'no' if args.no_events else 'yes'}")
    print(f"wall time          {run_s:.2f} s (event loop {loop_s:.2f} s, results {run_s - loop_s:.2f} s, "
          f"build {built - started:.2f} s)")
    print(f"passes             {passes}")
    print(f"requests / wall s  {summary['num_requests'] / run_s:,.0f}")
    print(f"passes / wall s    {passes / run_s:,.0f}")


if __name__ == "__main__":
    main()
