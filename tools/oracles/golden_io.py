"""What the golden recorders in this folder share: their command line, compact JSON, and writing or
checking a golden file. Run by the recorders (each in its own venv), never imported by simmodel."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def parse_args(doc: str | None, argv=None) -> argparse.Namespace:
    """``--check`` (compare with the files on disk, write nothing) and ``--only NAME…``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    ap.add_argument("--only", nargs="*", default=None, help="stream names to record (default: all)")
    return ap.parse_args(argv)


def mocker_records(reqs: list[dict], records: list[dict]) -> list[tuple[int, dict]]:
    """Dynamo's per-request records (random uuids) mapped back to the stream's requests by (arrival, prompt,
    output), each checked to have completed with all its outputs: (request id, record) in the stream's order."""
    by_key = {(r["arrival_ms"], r["input_tokens"], r["output_tokens"]): r["id"] for r in reqs}
    out = {}
    for rec in records:
        key = (round(rec["arrival_time_ms"], 3), rec["input_length"], rec["requested_output_length"])
        rid = by_key.get(key)
        if rid is None or rid in out:
            raise SystemExit(f"cannot match mocker record {key}")
        if rec["terminal_status"] != "completed" or rec["output_length"] != rec["requested_output_length"]:
            raise SystemExit(f"request {rid} did not complete: {rec['terminal_status']}")
        out[rid] = rec
    if len(out) != len(reqs):
        raise SystemExit(f"{len(reqs) - len(out)} requests missing from the mocker's records")
    return [(r["id"], out[r["id"]]) for r in reqs]


def only_route(rid: int, rec: dict) -> tuple[int, int]:
    """The (logical worker, attention-DP rank) of a record's one routing decision."""
    routing = rec.get("routing_history") or []
    if len(routing) != 1:
        raise SystemExit(f"request {rid}: expected one routing decision, got {len(routing)}")
    return routing[0]["logical_worker_id"], routing[0]["dp_rank"]


def r6(x):
    """A time or ratio to 6 decimals (None stays None), as every golden file stores them."""
    return None if x is None else round(float(x), 6)


def replay_twice(reqs: list[dict], spec: dict, variant: dict, tmpdir: str, replay: Callable, match: Callable,
                 summary_keys: tuple[str, ...]) -> tuple[list[dict], dict]:
    """Replay one run of a stream twice on the mocker (``replay(reqs, spec, variant, tmpdir)`` → records and
    summary; ``match(reqs, records, dp_size)`` → result rows): its rows and the summary's ``summary_keys`` (floats
    to 6 decimals), refusing a run whose two replays differ."""
    records, summary = replay(reqs, spec, variant, tmpdir)
    again, summary2 = replay(reqs, spec, variant, tmpdir)
    results = match(reqs, records, variant["dp_size"])
    if match(reqs, again, variant["dp_size"]) != results or summary2["duration_ms"] != summary["duration_ms"]:
        raise SystemExit(f"{spec['name']} {variant['label']}: two replays differ (nondeterministic)")
    return results, {k: (r6(summary.get(k)) if isinstance(summary.get(k), float) else summary.get(k))
                     for k in summary_keys}


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


def record_streams(streams: list[dict], out_dir: Path, args: argparse.Namespace, record: Callable[[dict, str], dict],
                   render: Callable[[dict], str], note: Callable[[dict], str] | None = None) -> int:
    """Record every stream ``args.only`` names (all by default) with ``record(spec, tmpdir)``, render it, check the
    rendering reads back as what was recorded, and write it to ``out_dir/<name>.json`` (``--check``: compare);
    returns the exit status, 1 if a file is stale."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stale = 0
    with tempfile.TemporaryDirectory(prefix="golden_") as tmpdir:
        for spec in streams:
            if args.only and spec["name"] not in args.only:
                continue
            golden = record(spec, tmpdir)
            text = render(golden)
            if json.loads(text) != json.loads(json.dumps(golden)):
                raise SystemExit(f"{spec['name']}: serialization round trip failed")
            stale += emit(out_dir / f"{spec['name']}.json", text, args.check, note(golden) if note else "")
    return 1 if stale else 0
