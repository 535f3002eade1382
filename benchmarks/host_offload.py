"""A host KV tier beside the same deployment without it: speed and what the tier gains.

Issue 24's benchmark: 20,000 Mooncake conversation requests on the deployment of
``scenarios/mooncake-host-offload.yaml`` (one Llama-3.1-8B-Instruct worker of tensor parallel 4 on H200, vLLM with
prefix caching, synchronous scheduling, 12,000 GPU KV blocks of 16 tokens), with and without its host tier
(``kv_cache.host_offload``: 1,000 GiB). The trace is the shipped ``builtin:mooncake/conversation_head2000.jsonl``
laid end to end ten times, each copy its own conversations (hash ids offset) and starting when the one before
ends.

Prints one line per run: the whole process's time, the hit ratio (GPU and host) and mean TTFT, then the ratio of
the run with the tier to the run without it (target: at most 1.5x). ``--requests`` cuts the trace; ``--repeat``
takes the best of N interleaved rounds. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from simmodel.config.catalog import BUILTIN_PREFIX, resolve_trace_path

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "mooncake-host-offload.yaml"


def write_trace(path: Path, num_requests: int) -> int:
    """The tiled conversation trace (see the module); returns how many rows it has."""
    source = resolve_trace_path(BUILTIN_PREFIX + "mooncake/conversation_head2000.jsonl", Path("."))
    rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    span = rows[-1]["timestamp"] + (rows[-1]["timestamp"] - rows[0]["timestamp"]) / len(rows)
    ids = 1 + max(h for r in rows for h in r["hash_ids"])
    out: list[dict] = []
    tile = 0
    while len(out) < num_requests:
        for r in rows[:num_requests - len(out)]:
            out.append({"timestamp": round(r["timestamp"] + tile * span, 3), "input_length": r["input_length"],
                        "output_length": r["output_length"], "hash_ids": [h + tile * ids for h in r["hash_ids"]]})
        tile += 1
    path.write_text("".join(json.dumps(r) + "\n" for r in out))
    return len(out)


def scenario(trace: Path, tier: bool) -> dict:
    data = yaml.safe_load(SCENARIO.read_text())
    data["traffic"]["source"]["path"] = str(trace)
    if not tier:
        del data["engine"]["workers"]["aggregated"]["kv_cache"]["host_offload"]
    return data


def timed(command: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(command)}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - started, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds; the best time of each is shown")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trace = folder / "trace.jsonl"
        n = write_trace(trace, args.requests)
        runs: dict[str, dict] = {}
        for name, tier in (("host tier", True), ("GPU only", False)):
            path = folder / f"{name.replace(' ', '_')}.yaml"
            path.write_text(yaml.safe_dump(scenario(trace, tier)))
            runs[name] = {"command": [sys.executable, "-m", "simmodel.cli", "run", "-c", str(path), "--quiet",
                                      "--format", "json"], "times": []}
        for _ in range(max(args.repeat, 1)):
            for run in runs.values():
                elapsed, out = timed(run["command"])
                run["times"].append(elapsed)
                run["summary"] = json.loads(out)
        print(f"{n:,} Mooncake conversation requests, one TP-4 worker (best of {max(args.repeat, 1)} round(s))")
        print(f"{'run':<10} {'seconds':>8} {'GPU hits':>9} {'host hits':>9} {'TTFT ms':>9}")
        for name, run in runs.items():
            s = run["summary"]
            host = s.get("kv_offload", {}).get("aggregated", {}).get("host_hit_ratio", 0.0)
            print(f"{name:<10} {min(run['times']):8.2f} {s['prefix_cache_hit_ratio']:9.4f} {host:9.4f} "
                  f"{s['ttft_ms']['mean']:9.1f}")
        ratio = min(runs["host tier"]["times"]) / min(runs["GPU only"]["times"])
        print(f"host tier / GPU only wall time: {ratio:.2f}x (target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")


if __name__ == "__main__":
    main()
