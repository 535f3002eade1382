"""What the golden recorders in this folder share: their command line, compact JSON, and writing or
checking a golden file. Run by the recorders (each in its own venv), never imported by simmodel."""

from __future__ import annotations

import argparse
import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def parse_args(doc: str | None, argv=None) -> argparse.Namespace:
    """``--check`` (compare with the files on disk, write nothing) and ``--only NAME…``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    ap.add_argument("--only", nargs="*", default=None, help="stream names to record (default: all)")
    return ap.parse_args(argv)


def compact(x) -> str:
    """One JSON value on one line, keys in insertion order."""
    return json.dumps(x, separators=(",", ":"), sort_keys=False)


def package_versions(*packages: str) -> dict:
    out = {}
    for pkg in packages:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def emit(path: Path, text: str, check: bool, note: str = "") -> bool:
    """Write ``text`` to ``path``, or with ``check`` compare it; returns True when the file is stale."""
    if check:
        same = path.exists() and path.read_text() == text
        print(f"{'ok   ' if same else 'DIFF '} {path.relative_to(REPO)}")
        return not same
    path.write_text(text)
    print(f"wrote {path.relative_to(REPO)} ({len(text)} bytes{'; ' + note if note else ''})")
    return False


def vllm_oracle_config(cfg: dict) -> dict:
    """The keyword arguments of ``vllm_sched_oracle.run`` for a golden stream's config (sync and
    without prefix caching unless the config says otherwise)."""
    return dict(
        block_size=cfg["block_size"],
        num_gpu_blocks=cfg["num_gpu_blocks"],
        max_num_seqs=cfg["max_num_seqs"],
        max_num_batched_tokens=cfg["max_num_batched_tokens"],
        max_model_len=cfg["max_model_len"],
        enable_chunked_prefill=cfg["enable_chunked_prefill"],
        async_scheduling=cfg.get("async_scheduling", False),
        enable_prefix_caching=cfg.get("enable_prefix_caching", False),
        long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
        scheduler_reserve_full_isl=cfg["reserve_full_isl"],
    )
