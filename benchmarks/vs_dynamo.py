"""Time simmodel and NVIDIA Dynamo's compiled mocker side by side on the same trace, and print the ratios.

The workload of issue 7: 10,000 Poisson requests at 8 req/s, prompts uniform in 128–2,048 tokens and outputs
in 32–512 (seed 0), through one worker with the same scheduler settings on both sides (vLLM or SGLang,
256 sequences, 8,192 batched tokens, 16,384 KV blocks of 64 tokens, prefix caching on, synchronous
scheduling as the mocker runs it). Each side is timed as a whole process, interpreter start-up included,
in interleaved rounds (``--repeat``, best of each):

- polynomial timing on both sides (Dynamo's polynomial pass-time curves);
- simmodel's default timing (the roofline performance model) against the mocker's measured-table (AIS)
  timing for Qwen3-8B on H200.

The mocker runs in its own virtual environment with ``ai-dynamo`` 1.6.1 installed, given by ``--peers-python``
or ``SIMMODEL_PEERS_PYTHON``, through the developers' replay driver ``dynamo_replay.py`` (kept with their
oracle scripts, not in this repository), given by ``--mocker-driver`` or ``SIMMODEL_DYNAMO_DRIVER``; without
both only simmodel's times are printed.

Both sides start from compiled bytecode, as installed packages do: pip compiled the mocker's ``.pyc`` files
when it installed them, while an editable simmodel checkout, where ``PYTHONDONTWRITEBYTECODE`` is set,
would recompile its sources at every start (about 0.1 s). simmodel's commands therefore run with a
bytecode cache of their own (``PYTHONPYCACHEPREFIX`` in the temporary folder), filled by one untimed run.

    python3 benchmarks/vs_dynamo.py [--requests N] [--backend vllm|sglang] [--repeat N] [--peers-python PATH]
        [--mocker-driver dynamo_replay.py]
"""

# ruff: noqa: T201  (a benchmark script reports on stdout; print is its interface)

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
HASH_BLOCK = 64
KV_BLOCKS = 16_384


def write_trace(path: Path, num_requests: int, seed: int = 0) -> None:
    """Poisson arrivals at 8 req/s, ISL U[128, 2048], OSL U[32, 512]; unique hash ids (no shared prefixes)."""
    rng = np.random.default_rng(seed)
    arrivals_ms = np.cumsum(rng.exponential(1000 / 8, num_requests))
    isl = rng.integers(128, 2049, num_requests)
    osl = rng.integers(32, 513, num_requests)
    next_hash = 0
    with path.open("w") as f:
        for t, i, o in zip(arrivals_ms, isl, osl):
            blocks = -(-int(i) // HASH_BLOCK)
            hashes = list(range(next_hash, next_hash + blocks))
            next_hash += blocks
            f.write(json.dumps({"timestamp": round(float(t), 3), "input_length": int(i), "output_length": int(o),
                                "hash_ids": hashes}) + "\n")


def scenario(trace: Path, backend: str, timing: str) -> dict:
    worker = {"scheduler": {"max_sequences": 256},
              "kv_cache": {"capacity": {"type": "fixed", "blocks": KV_BLOCKS * (HASH_BLOCK if backend == "sglang" else 1)}},
              "timing": {"type": timing}}
    if backend == "vllm":
        worker["scheduler"] |= {"max_batched_tokens": 8192, "async_scheduling": False}
        worker["kv_cache"]["block_size"] = HASH_BLOCK
    return {"traffic": {"source": {"type": "trace", "format": "mooncake", "path": str(trace),
                                   "block_size": HASH_BLOCK},
                        "load": {"type": "trace_timestamps"}},
            "engine": {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": backend,
                       "workers": {"aggregated": worker}}}


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(command)}\n{proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--backend", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds; each round runs every command once, in turn, and each time reported is the "
                             "best of the rounds (a shared machine's noise only ever adds time)")
    parser.add_argument("--peers-python", default=os.environ.get("SIMMODEL_PEERS_PYTHON"),
                        help="python of the venv with ai-dynamo (default $SIMMODEL_PEERS_PYTHON)")
    parser.add_argument("--mocker-driver", default=os.environ.get("SIMMODEL_DYNAMO_DRIVER"),
                        help="dynamo_replay.py, the script that replays a trace through the mocker "
                             "(default $SIMMODEL_DYNAMO_DRIVER)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trace = folder / "trace.jsonl"
        write_trace(trace, args.requests)
        commands: dict[str, list[str]] = {}
        for timing in ("polynomial", "default"):
            path = folder / f"{timing}.yaml"
            path.write_text(yaml.safe_dump(scenario(trace, args.backend, timing)))
            commands[f"simmodel {timing}"] = [sys.executable, "-m", "simmodel.cli", "run", "-c", str(path),
                                              "--format", "json"]
        own_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        own_env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
        # One untimed request fills the bytecode cache.
        timed(commands["simmodel polynomial"] + ["--set", "traffic.stop.requests=1"], own_env)
        peers = bool(args.peers_python) and bool(args.mocker_driver) and Path(args.mocker_driver).is_file()
        if peers:
            base = [args.peers_python, args.mocker_driver, "--trace", str(trace), "--trace-block-size", str(HASH_BLOCK),
                    "--block-size", str(HASH_BLOCK), "--num-gpu-blocks", str(KV_BLOCKS), "--backend", args.backend,
                    "--quiet"]
            commands["mocker polynomial"] = base + ["--timing", "polynomial"]
            commands["mocker ais"] = base + ["--timing", "ais", "--ais-model", "Qwen/Qwen3-8B", "--ais-system",
                                             "h200_sxm"]
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(max(args.repeat, 1)):  # interleaved, so both sides see the same stretch of noise
            for name, command in commands.items():
                elapsed, out = timed(command, own_env if name.startswith("simmodel") else None)
                times[name].append(elapsed)
                if name.startswith("simmodel"):
                    done = json.loads(out)["completed_requests"]
                    if done != args.requests:
                        raise SystemExit(f"{name}: {done} of {args.requests} requests completed")
        best = {name: min(t) for name, t in times.items()}
        for name, t in times.items():
            print(f"{name:<20} {best[name]:7.2f} s   (best of {', '.join(f'{x:.2f}' for x in t)})")
        if not peers:
            print("Dynamo mocker: not run (give --peers-python and --mocker-driver)")
            return
        print(f"polynomial: simmodel / mocker = {best['simmodel polynomial'] / best['mocker polynomial']:.2f}x "
              "(target <= 2x)")
        print(f"default vs measured-table: simmodel / mocker = {best['simmodel default'] / best['mocker ais']:.2f}x "
              "(target <= 1x)")


if __name__ == "__main__":
    main()
