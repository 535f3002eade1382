"""KV-aware routing beside round robin, and beside Dynamo's mocker: speed and what the router gains.

Issue 23's benchmark: 20,000 Mooncake conversation requests on four vLLM workers (Qwen3-8B on H200, polynomial
timing, 16,384 KV blocks of 64 tokens per worker, 256 sequences, 8,192 batched tokens, prefix caching,
synchronous scheduling), routed round robin and by the KV-aware router (Dynamo's defaults). The trace is the
shipped ``builtin:mooncake/conversation_head2000.jsonl`` without the prompts Qwen3-8B cannot take (prompt and
output over 40,960 tokens; the mocker has no such limit, so both sides get the same requests), laid end to
end ten times, each copy its own conversations (hash ids offset) and starting when the one before ends.

Prints one line per router: simmodel's whole-process time, the ratio of the KV-aware run's time to round
robin's (target: at most 1.5x), the prefix-cache hit ratio and mean TTFT; with ``--peers-python`` and
``--mocker-driver`` (as ``vs_dynamo.py``) the mocker's time, reuse ratio and mean TTFT on the same trace
(``--router kv_router``: its default KvRouterConfig). ``--requests`` cuts the trace; ``--repeat`` takes the
best of N interleaved rounds. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from simmodel.config.catalog import BUILTIN_PREFIX, resolve_trace_path

MAX_TOKENS = 40_960
"""Qwen3-8B's context (max_position_embeddings)."""
TRACE_BLOCK = 512
KV_BLOCKS, BLOCK = 16_384, 64


def write_trace(path: Path, num_requests: int, max_tokens: int | None = MAX_TOKENS) -> int:
    """The tiled conversation trace (see the module; ``max_tokens``: drop the rows whose prompt and output exceed
    it, None: keep every row); returns how many rows it has."""
    source = resolve_trace_path(BUILTIN_PREFIX + "mooncake/conversation_head2000.jsonl", Path("."))
    rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    if max_tokens is not None:
        rows = [r for r in rows if r["input_length"] + r["output_length"] <= max_tokens]
    span = rows[-1]["timestamp"] + (rows[-1]["timestamp"] - rows[0]["timestamp"]) / len(rows)
    ids = 1 + max(h for r in rows for h in r["hash_ids"])
    out = []
    tile = 0
    while len(out) < num_requests:
        for r in rows:
            if len(out) == num_requests:
                break
            out.append({"timestamp": round(r["timestamp"] + tile * span, 3), "input_length": r["input_length"],
                        "output_length": r["output_length"], "hash_ids": [h + tile * ids for h in r["hash_ids"]]})
        tile += 1
    path.write_text("".join(json.dumps(r) + "\n" for r in out))
    return len(out)


def scenario(trace: Path, router: str) -> dict:
    return {"traffic": {"source": {"type": "trace", "format": "mooncake", "path": str(trace),
                                   "block_size": TRACE_BLOCK},
                        "load": {"type": "trace_timestamps"}},
            "engine": {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm",
                       "workers": {"aggregated": {
                           "parallelism": {"replicas": 4},
                           "scheduler": {"max_sequences": 256, "max_batched_tokens": 8192, "async_scheduling": False},
                           "kv_cache": {"block_size": BLOCK, "prefix_caching": True,
                                        "capacity": {"type": "fixed", "blocks": KV_BLOCKS}},
                           "timing": {"type": "polynomial"}}}},
            "router": {"type": router}}


def timed(command: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(command)}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - started, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=2, help="interleaved rounds; the best time of each is shown")
    parser.add_argument("--peers-python", default=os.environ.get("SIMMODEL_PEERS_PYTHON"))
    parser.add_argument("--mocker-driver", default=os.environ.get("SIMMODEL_DYNAMO_DRIVER"))
    args = parser.parse_args()
    peers = bool(args.peers_python) and bool(args.mocker_driver) and Path(args.mocker_driver).is_file()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trace = folder / "trace.jsonl"
        n = write_trace(trace, args.requests)
        runs: dict[str, dict] = {}
        for router in ("round_robin", "kv_aware"):
            path = folder / f"{router}.yaml"
            path.write_text(yaml.safe_dump(scenario(trace, router)))
            runs[router] = {"command": [sys.executable, "-m", "simmodel.cli", "run", "-c", str(path), "--quiet",
                                        "--format", "json"], "times": [], "mocker_times": []}
        mocker_router = {"round_robin": "round_robin", "kv_aware": "kv_router"}
        for _ in range(max(args.repeat, 1)):
            for router, run in runs.items():
                elapsed, out = timed(run["command"])
                run["times"].append(elapsed)
                run["summary"] = json.loads(out)
                if peers:
                    out_dir = folder / f"mocker_{router}"
                    command = [args.peers_python, args.mocker_driver, "--trace", str(trace), "--trace-block-size",
                               str(TRACE_BLOCK), "--block-size", str(BLOCK), "--num-gpu-blocks", str(KV_BLOCKS),
                               "--max-num-seqs", "256", "--max-num-batched-tokens", "8192", "--num-workers", "4",
                               "--router", mocker_router[router], "--timing", "polynomial", "--quiet",
                               "--out-dir", str(out_dir)]
                    run["mocker_times"].append(timed(command)[0])
                    run["mocker"] = json.loads((out_dir / "summary.json").read_text())
        print(f"{n:,} Mooncake conversation requests, 4 workers (best of {max(args.repeat, 1)} round(s))")
        print(f"{'router':<12} {'simmodel s':>10} {'hit ratio':>9} {'TTFT ms':>8}   {'mocker s':>8} {'reuse':>6} "
              f"{'TTFT ms':>8}")
        for router, run in runs.items():
            s = run["summary"]
            line = (f"{router:<12} {min(run['times']):10.2f} {s['prefix_cache_hit_ratio']:9.4f} "
                    f"{s['ttft_ms']['mean']:8.1f}")
            if peers:
                m = run["mocker"]
                line += f"   {min(run['mocker_times']):8.2f} {m['prefix_cache_reused_ratio']:6.4f} {m['ttft_ms']['mean']:8.1f}"
            print(line)
        ratio = min(runs["kv_aware"]["times"]) / min(runs["round_robin"]["times"])
        print(f"kv_aware / round_robin wall time: {ratio:.2f}x (target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")
        if not peers:
            print("Dynamo mocker: not run (give --peers-python and --mocker-driver)")


if __name__ == "__main__":
    main()
