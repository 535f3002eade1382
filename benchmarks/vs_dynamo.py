"""Time simmodel and NVIDIA Dynamo's compiled mocker side by side on the same traces, and print a table.

Each row is one deployment run by both sides from the same trace file with the same scheduler settings
(vLLM, 256 sequences, 8,192 batched tokens, 16,384 KV blocks of 64 tokens per rank, synchronous
scheduling as the mocker runs it, Qwen3-8B on H200), each side timed as a whole process, interpreter
start-up included, in interleaved rounds (``--repeat``, best of each):

- ``1w poly`` and ``1w default/AIS``: the workload of issue 7, 10,000 Poisson requests at 8 req/s
  (``--requests``), prompts uniform in 128–2,048 tokens, outputs in 32–512, one worker with prefix caching:
  polynomial timing on both sides (Dynamo's polynomial pass-time curves), and simmodel's default timing
  (the roofline performance model) against the mocker's measured-table (AIS) timing;
- the rows of issue 20, on a 20,000-request Poisson trace at 32 req/s of the same lengths, polynomial
  timing, no prefix caching: ``4 replicas`` (round robin), ``attention_data 4`` (one worker of four
  attention-DP ranks), ``2P2D`` (two prefill and two decode workers, transfers taking no time on both
  sides), and ``1w 10k --output-dir`` (one worker, the first trace's own 10,000-request draw at 32 req/s,
  simmodel writing every table: summary.json, requests.csv, passes.csv, the event log); ``2P2D SGLang``, the
  same disaggregated deployment served by SGLang on both sides (its radix cache on, pages of one token; no
  target, shown for the record);
- ``recommend grid``: ``simmodel recommend`` on ``scenarios/recommend-aggregated.yaml`` (64 candidates of
  1,000 requests each, the local process pool), which has no mocker counterpart.

Targets (issue 20): every row at most 1.5x the mocker's polynomial time, the default-timing row at most
1x the mocker's AIS time, the recommend grid under 30 s on 2 cores.

The mocker runs in its own virtual environment with ``ai-dynamo`` 1.6.1 installed, given by ``--peers-python``
or ``SIMMODEL_PEERS_PYTHON``, through the developers' replay driver ``dynamo_replay.py`` (kept with their
oracle scripts, not in this repository), given by ``--mocker-driver`` or ``SIMMODEL_DYNAMO_DRIVER``; without
both only simmodel's times are printed.

Both sides start from compiled bytecode, as installed packages do: pip compiled the mocker's ``.pyc`` files
when it installed them, while an editable simmodel checkout, where ``PYTHONDONTWRITEBYTECODE`` is set,
would recompile its sources at every start (about 0.1 s). simmodel's commands therefore run with a
bytecode cache of their own (``PYTHONPYCACHEPREFIX`` in the temporary folder), filled by one untimed run.

    python3 benchmarks/vs_dynamo.py [--rows NAME,...] [--repeat N] [--requests N] [--backend vllm|sglang|trtllm]
        [--peers-python PATH] [--mocker-driver dynamo_replay.py]
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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
HASH_BLOCK = 64
KV_BLOCKS = 16_384
POLYNOMIAL_TARGET = 1.5
"""Every row: simmodel at most this many times the mocker's polynomial time."""
AIS_TARGET = 1.0
"""simmodel's default timing at most the mocker's measured-table (AIS) time."""
GRID_TARGET_S = 30.0
"""The 64-candidate recommend grid, on 2 cores."""


def write_trace(path: Path, num_requests: int, rate: float, seed: int = 0) -> None:
    """Poisson arrivals at ``rate`` req/s, ISL U[128, 2048], OSL U[32, 512]; unique hash ids (no shared
    prefixes)."""
    rng = np.random.default_rng(seed)
    arrivals_ms = np.cumsum(rng.exponential(1000 / rate, num_requests))
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


def worker(backend: str, timing: str, prefix_caching: bool = True, replicas: int = 1, dp: int = 1) -> dict:
    """One role's settings, as the mocker's engine arguments give them."""
    role = {"scheduler": {"max_sequences": 256},
            "kv_cache": {"capacity": {"type": "fixed", "blocks": KV_BLOCKS * (HASH_BLOCK if backend == "sglang" else 1)}},
            "timing": {"type": timing}}
    if backend == "vllm":
        role["scheduler"] |= {"max_batched_tokens": 8192, "async_scheduling": False}
        role["kv_cache"] |= {"block_size": HASH_BLOCK, "prefix_caching": prefix_caching}
    if backend == "trtllm":  # (the mocker does not cut chunks to whole blocks: chunk_unit 1)
        role["scheduler"] |= {"max_batched_tokens": 8192, "chunk_unit": 1}
        role["kv_cache"] |= {"block_size": HASH_BLOCK, "prefix_caching": prefix_caching}
    if replicas != 1 or dp != 1:
        role["parallelism"] = {"replicas": replicas, "attention_data": dp}
    return role


def scenario(trace: Path, backend: str, workers: dict, mode: str = "aggregated") -> dict:
    return {"traffic": {"source": {"type": "trace", "format": "mooncake", "path": str(trace),
                                   "block_size": HASH_BLOCK},
                        "load": {"type": "trace_timestamps"}},
            "engine": {"mode": mode, "model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": backend,
                       "workers": workers}}


@dataclass
class Row:
    """One line of the table: simmodel's command, the mocker's arguments (None: no counterpart), the
    requests every simmodel run must complete (None: not checked), and the target."""

    name: str
    simmodel: list[str]
    mocker: list[str] | None
    requests: int | None
    target: str  # "poly": <= POLYNOMIAL_TARGET x mocker; "ais": <= AIS_TARGET x mocker; "grid": < GRID_TARGET_S;
    # "none": no target (shown for the record)
    times: dict[str, list[float]] = field(default_factory=lambda: {"simmodel": [], "mocker": []})


def build_rows(folder: Path, args: argparse.Namespace) -> list[Row]:
    """Write the traces and scenarios the rows need into ``folder``, and the rows."""
    run = [sys.executable, "-m", "simmodel.cli", "run", "--format", "json", "--quiet", "-c"]
    rows: list[Row] = []

    def add(name: str, data: dict, mocker: list[str] | None, requests: int | None, target: str,
            extra: tuple[str, ...] = ()) -> None:
        path = folder / f"{name.replace(' ', '_').replace('/', '_')}.yaml"
        path.write_text(yaml.safe_dump(data))
        rows.append(Row(name, run + [str(path), *extra], mocker, requests, target))

    def mocker(trace: Path, *more: str) -> list[str]:
        return ["--trace", str(trace), "--trace-block-size", str(HASH_BLOCK), "--block-size", str(HASH_BLOCK),
                "--num-gpu-blocks", str(KV_BLOCKS), "--max-num-seqs", "256", "--max-num-batched-tokens", "8192",
                "--quiet", *more]

    issue7 = folder / "issue7.jsonl"
    write_trace(issue7, args.requests, rate=8.0)
    backend = ["--backend", args.backend]
    add("1w poly", scenario(issue7, args.backend, {"aggregated": worker(args.backend, "polynomial")}),
        mocker(issue7, *backend, "--timing", "polynomial"), args.requests, "poly")
    add("1w default/AIS", scenario(issue7, args.backend, {"aggregated": worker(args.backend, "default")}),
        mocker(issue7, *backend, "--timing", "ais", "--ais-model", "Qwen/Qwen3-8B", "--ais-system", "h200_sxm"),
        args.requests, "ais")

    issue20 = folder / "issue20.jsonl"
    write_trace(issue20, 20_000, rate=32.0)
    poly = ("--no-prefix-caching", "--timing", "polynomial")
    add("4 replicas", scenario(issue20, "vllm", {"aggregated": worker("vllm", "polynomial", False, replicas=4)}),
        mocker(issue20, "--num-workers", "4", *poly), 20_000, "poly")
    add("attention_data 4", scenario(issue20, "vllm", {"aggregated": worker("vllm", "polynomial", False, dp=4)}),
        mocker(issue20, "--dp-size", "4", *poly), 20_000, "poly")
    roles = {"prefill": worker("vllm", "polynomial", False, replicas=2),
             "decode": worker("vllm", "polynomial", False, replicas=2)}
    add("2P2D", scenario(issue20, "vllm", roles, mode="disaggregated"), mocker(issue20, "--disagg", "2,2", *poly),
        20_000, "poly")
    sglang_roles = {"prefill": worker("sglang", "polynomial", replicas=2),
                    "decode": worker("sglang", "polynomial", replicas=2)}
    add("2P2D SGLang", scenario(issue20, "sglang", sglang_roles, mode="disaggregated"),
        mocker(issue20, "--backend", "sglang", "--disagg", "2,2", "--timing", "polynomial"), 20_000, "none")
    issue20_10k = folder / "issue20_10k.jsonl"
    write_trace(issue20_10k, 10_000, rate=32.0)
    add("1w 10k --output-dir", scenario(issue20_10k, "vllm", {"aggregated": worker("vllm", "polynomial", False)}),
        mocker(issue20_10k, *poly), 10_000, "poly", ("--output-dir", str(folder / "out"), "--overwrite"))

    grid = [sys.executable, "-m", "simmodel.cli", "recommend", "-c", str(REPO / "scenarios" / "recommend-aggregated.yaml"),
            "--output-dir", str(folder / "grid"), "--overwrite", "--quiet"]
    rows.append(Row("recommend grid", grid, None, None, "grid"))
    if args.rows:
        wanted = [name.strip() for name in args.rows.split(",")]
        unknown = sorted(set(wanted) - {row.name for row in rows})
        if unknown:
            raise SystemExit(f"--rows: unknown row {', '.join(unknown)}; rows: {', '.join(r.name for r in rows)}")
        rows = [row for row in rows if row.name in wanted]
    return rows


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(command)}\n{proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def verdict(row: Row, simmodel_s: float, mocker_s: float | None) -> tuple[str, str, str]:
    """The row's ratio, target and whether it is met, as table cells."""
    if row.target == "grid":
        return "", f"< {GRID_TARGET_S:g} s", "yes" if simmodel_s < GRID_TARGET_S else "NO"
    if row.target == "none":
        return ("" if mocker_s is None else f"{simmodel_s / mocker_s:.2f}x"), "-", "-"
    limit = POLYNOMIAL_TARGET if row.target == "poly" else AIS_TARGET
    target = f"<= {limit:g}x {'poly' if row.target == 'poly' else 'AIS'}"
    if mocker_s is None:
        return "", target, "?"
    ratio = simmodel_s / mocker_s
    return f"{ratio:.2f}x", target, "yes" if ratio <= limit else "NO"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", help="comma-separated row names to run (default: all; see the module docstring)")
    parser.add_argument("--requests", type=int, default=10_000, help="requests of the issue-7 rows")
    parser.add_argument("--backend", choices=("vllm", "sglang", "trtllm"), default="vllm", help="of the issue-7 rows")
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
        rows = build_rows(folder, args)
        own_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        own_env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
        warm = folder / "warm.yaml"  # one untimed request fills the bytecode cache
        warm.write_text(yaml.safe_dump(scenario(folder / "issue7.jsonl", "vllm",
                                                {"aggregated": worker("vllm", "polynomial")})))
        timed([sys.executable, "-m", "simmodel.cli", "run", "-c", str(warm), "--quiet", "--set",
               "traffic.stop.requests=1"], own_env)
        peers = bool(args.peers_python) and bool(args.mocker_driver) and Path(args.mocker_driver).is_file()
        for _ in range(max(args.repeat, 1)):  # interleaved, so both sides see the same stretch of noise
            for row in rows:
                elapsed, out = timed(row.simmodel, own_env)
                row.times["simmodel"].append(elapsed)
                if row.requests is not None:
                    done = json.loads(out)["completed_requests"]
                    if done != row.requests:
                        raise SystemExit(f"{row.name}: {done} of {row.requests} requests completed")
                if peers and row.mocker is not None:
                    row.times["mocker"].append(timed([args.peers_python, args.mocker_driver, *row.mocker])[0])
        print(f"{'row':<22} {'simmodel s':>10} {'mocker s':>9} {'ratio':>7}  {'target':<14} met")
        for row in rows:
            simmodel_s = min(row.times["simmodel"])
            mocker_s = min(row.times["mocker"]) if row.times["mocker"] else None
            ratio, target, met = verdict(row, simmodel_s, mocker_s)
            mocker_cell = f"{mocker_s:9.2f}" if mocker_s is not None else f"{'-':>9}"
            print(f"{row.name:<22} {simmodel_s:10.2f} {mocker_cell} {ratio:>7}  {target:<14} {met}")
        print(f"(best of {max(args.repeat, 1)} round(s); every time: "
              + "; ".join(f"{row.name} " + "/".join(f"{t:.2f}" for t in row.times["simmodel"]) for row in rows) + ")")
        if not peers:
            print("Dynamo mocker: not run (give --peers-python and --mocker-driver)")


if __name__ == "__main__":
    main()
