"""Small scenario builders with overridable defaults, and a one-call runner."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from simmodel.config.catalog import BUILTIN_PREFIX, resolve_trace_path
from simmodel.config.load import parse_scenario
from simmodel.sim import Results, Simulation


def builtin_trace(name: str) -> Path:
    """The shipped trace ``builtin:name`` (``simmodel/data/traces/``), found as a scenario finds it."""
    return resolve_trace_path(BUILTIN_PREFIX + name, Path("."))


def _merge(base: dict, extra: dict) -> dict:
    for key, value in extra.items():
        # A mapping that names a new ``type`` replaces the variant instead of merging into it.
        if isinstance(value, dict) and isinstance(base.get(key), dict) and "type" not in value:
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def make_scenario(**overrides) -> dict:
    """Llama-3.1-8B on H100, one worker, fixed 20 ms prefill / 10 ms decode, 4 requests of 100→5,
    synchronous scheduling (``async_scheduling: false``: every hand-derived timeline assumes an arrival
    joins the next pass).

    Keyword arguments are nested dicts merged into the mapping, e.g.
    ``make_scenario(engine={"workers": {"aggregated": {"parallelism": {"replicas": 2}}}})``.
    """
    base = {
        "traffic": {
            "source": {"type": "synthetic", "input_tokens": 100, "output_tokens": 5},
            "load": {"type": "concurrency", "concurrency": 1},
            "stop": {"requests": 4},
        },
        "engine": {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "hardware": "h100_sxm",
            "context_length": 4096,
            "workers": {"aggregated": {
                "scheduler": {"async_scheduling": False},
                "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 1000}},
                "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10},
            }},
        },
    }
    return _merge(copy.deepcopy(base), overrides)


def write_csv_trace(path: Path, rows: list[tuple[float, int, int]] | list[tuple[float, int, int, int]]) -> Path:
    """A plain CSV trace: (arrival_s, input_tokens, output_tokens[, dp_rank]) per row."""
    header = "arrival_s,input_tokens,output_tokens" + (",dp_rank" if rows and len(rows[0]) == 4 else "")
    path.write_text(header + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    return path


def trace_scenario(trace: Path, **overrides) -> dict:
    """``make_scenario`` fed by a CSV trace at its own timestamps."""
    scenario = make_scenario(**overrides)
    scenario["traffic"] = _merge({"source": {"type": "trace", "path": str(trace), "format": "csv"},
                                  "load": {"type": "trace_timestamps"}}, overrides.get("traffic", {}))
    return scenario


def scenario_error(data: dict, base_dir: Path = Path(".")) -> str:
    """The one-line ``ScenarioError`` message ``parse_scenario`` raises for ``data`` (it must raise one)."""
    import pytest

    from simmodel.errors import ScenarioError

    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, base_dir)
    return str(info.value)


def simpy_events_to_end(sim: Simulation) -> int:
    """SimPy events the simulation processes from here to its end (``Simulation.step`` plans pass by pass,
    so counting steps cannot tell coalesced runs from single passes)."""
    n = 0
    while sim.env.peek() != float("inf"):
        sim.env.step()
        n += 1
    return n


def run_scenario(data: dict, base_dir: Path = Path(".")) -> Results:
    return Simulation(parse_scenario(data, base_dir)).run()


def make_sglang_scenario(**overrides) -> dict:
    """``make_scenario`` served by SGLang: one aggregated worker, fixed 20 ms prefill / 10 ms decode passes,
    100,000 KV tokens per rank (page size 1), SGLang's scheduler defaults."""
    base = make_scenario()
    base["engine"]["backend"] = "sglang"
    base["engine"]["workers"] = {"aggregated": {
        "kv_cache": {"capacity": {"type": "fixed", "blocks": 100_000}},
        "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10},
    }}
    return _merge(base, overrides)


CHAT_SESSIONS = {"source": {"type": "sessions", "turns": {"distribution": "uniform", "min": 3, "max": 6},
                            "new_input_tokens_per_turn": {"distribution": "uniform", "min": 200, "max": 800},
                            "output_tokens_per_turn": {"distribution": "uniform", "min": 50, "max": 200},
                            "inter_turn_delay_ms": 2000},
                 "load": {"type": "concurrency", "concurrency": 16}, "stop": {"requests": 200}}
"""Closed-loop multi-turn chat: 16 sessions of 3–6 turns, 200 requests; each turn's prompt repeats the
conversation so far (the host-tier tests' load: prefixes come back after the GPU cache evicted them)."""


def host_tier_timeline(tmp_path: Path, host: dict, rows: list[tuple[float, int]], context_length: int = 640) -> dict:
    """The hand-derived host-tier timelines' set-up (``tests/scenarios/test_host_offload.py``): vLLM, Llama-3.1-8B on
    one H100, 40 GPU blocks of 16 tokens, a host tier (``host`` over a 32 GB/s link with 100 µs a copy), and one
    request per ``(timestamp ms, hash id)`` row, 512 tokens in and 2 out, whose one hash id says its content."""
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 512, "output_length": 2, "hash_ids": [h]})
                            + "\n" for t, h in rows))
    data = make_scenario(engine={"context_length": context_length, "workers": {"aggregated": {"kv_cache": {
        "capacity": {"type": "fixed", "blocks": 40},
        "host_offload": {"link_gb_per_s": 32, "latency_us": 100, **host}}}}})
    data["traffic"] = {"source": {"type": "trace", "path": str(path), "format": "mooncake"},
                       "load": {"type": "trace_timestamps"}}
    return data


def run_both_ways(data: dict) -> tuple[Results, list[str]]:
    """The scenario planned as runs of passes (the default), and the tables and host-tier figures that differ
    from the pass-by-pass run (``coalesce=False``): none, where runs are right."""
    runs, single = (Simulation(parse_scenario(data, Path(".")), coalesce=coalesce).run() for coalesce in (True, False))
    differ = [] if runs.summary.get("kv_offload") == single.summary.get("kv_offload") else ["kv_offload"]
    return runs, differ + [table for table in ("requests", "passes", "events")
                           if not getattr(runs, table).equals(getattr(single, table))]


def write_golden_trace(requests: list[dict], path: Path) -> None:
    """A Mooncake trace of a Dynamo golden's requests (``tools/oracles/record_dynamo_*.py``): arrival, lengths and
    hash ids, given there as runs ``[[first_id, count], ...]``."""
    with path.open("w") as f:
        for r in requests:
            hashes = [h for start, count in r["hash_runs"] for h in range(start, start + count)]
            f.write(json.dumps({"timestamp": r["arrival_ms"], "input_length": r["input_tokens"],
                                "output_length": r["output_tokens"], "hash_ids": hashes}) + "\n")
