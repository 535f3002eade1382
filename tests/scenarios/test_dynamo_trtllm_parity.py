"""The TensorRT-LLM backend through the whole simulator against Dynamo's mocker (``tests/golden/dynamo_trtllm``,
recorded by ``tools/oracles/record_dynamo_trtllm.py``).

Each golden run becomes a scenario: a Mooncake trace written from the golden's requests, ``backend: trtllm`` with
the run's budget, sequence limit, block reuse, workers and attention-DP ranks, a fixed KV capacity in blocks of
32 tokens and the mocker's fixed timing (prefill 20 ms, decode 10 ms, a mixed pass both). The mocker does not cut
a truncated context chunk to whole blocks as TensorRT-LLM does, so the scenarios set ``chunk_unit: 1``. Every
request's placement, first start, TTFT, E2E and reused prompt tokens must equal the mocker's (times within 1 µs),
but on the runs where the mocker credits shared cached blocks toward a start (``KNOWN_MISMATCH``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import write_golden_trace

from simmodel.config.load import parse_scenario
from simmodel.engine.kv_cache import cdiv
from simmodel.engine.scheduler.trtllm import GuaranteedNoEvict
from simmodel.sim import Simulation

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden" / "dynamo_trtllm"
TOL_MS = 1e-3
KNOWN_MISMATCH = {("tight_kv_shared_prefix", "dp1"), ("tight_kv_shared_prefix", "dp2")}
"""Runs where the mocker departs from TensorRT-LLM: under KV pressure it credits a starting request with the
cached prefix blocks another request holds; TensorRT-LLM's ``getRemainingBlocksToCompletion`` counts the new
request's whole sequence (``test_the_known_mismatches_are_the_mockers_reuse_credit``)."""


def _runs(known: bool = False):
    for path in sorted(GOLDEN_DIR.glob("*.json")):
        for run in json.loads(path.read_text())["runs"]:
            if ((path.stem, run["label"]) in KNOWN_MISMATCH) == known:
                yield pytest.param(path.stem, run["label"], id=f"{path.stem}-{run['label']}")


def scenario_for(golden: dict, run: dict, trace_path: Path) -> dict:
    """The scenario mapping of one golden run (the trace is written to ``trace_path``)."""
    write_golden_trace(golden["requests"], trace_path)
    eng = run["engine_args"]["engine"]
    blocks = eng["num_gpu_blocks"]
    return {
        "traffic": {"source": {"type": "trace", "format": "mooncake", "path": str(trace_path),
                               "block_size": golden["config"]["trace_block_size"]}},
        "engine": {
            "model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "h200_sxm", "backend": "trtllm",
            # (unchunked, TensorRT-LLM needs a whole prompt to fit one pass: max_seq_len within the budget)
            "context_length": min(blocks * eng["block_size"], 131072, *(
                () if eng["enable_chunked_prefill"] else (eng["max_num_batched_tokens"],))),
            "enable_chunked_prefill": eng["enable_chunked_prefill"],
            "workers": {"aggregated": {
                "parallelism": {"replicas": run["num_workers"], "attention_data": run["dp_size"]},
                "scheduler": {"max_sequences": eng["max_num_seqs"], "max_batched_tokens": eng["max_num_batched_tokens"],
                              "capacity_policy": eng["trtllm"]["capacity_scheduler_policy"],
                              **({"chunk_unit": 1} if eng["enable_chunked_prefill"] else {})},
                "kv_cache": {"block_size": eng["block_size"], "prefix_caching": eng["enable_prefix_caching"],
                             "capacity": {"type": "fixed", "blocks": blocks}},
                "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10},
            }},
        },
    }


@pytest.mark.parametrize(("name", "label"), list(_runs()))
def test_simulator_matches_mocker(name: str, label: str, tmp_path: Path) -> None:
    assert_matches(name, label, tmp_path)


@pytest.mark.parametrize(("name", "label"), list(_runs(known=True)))
def test_the_known_mismatches_are_the_mockers_reuse_credit(name: str, label: str, tmp_path: Path, monkeypatch) -> None:
    """With the mocker's rule in place of TensorRT-LLM's (a starting request needs its blocks to completion less
    the cached prefix blocks another request holds), the run matches the mocker: that rule is the only
    difference; with TensorRT-LLM's it does not."""
    def mockers_fits(scheduler, request):
        pool = scheduler.pool
        hits = pool.find_hits(request) if pool.caching and request.num_computed_tokens == 0 else []
        held = len(hits) - pool.num_evictable(hits) if hits else 0
        needed = cdiv(scheduler.final_tokens(request), scheduler.block_size) - held
        return needed <= pool.num_free_blocks - scheduler.promised_blocks()

    with pytest.raises(AssertionError, match="differences"):
        assert_matches(name, label, tmp_path)
    monkeypatch.setattr(GuaranteedNoEvict, "fits", staticmethod(mockers_fits))
    assert_matches(name, label, tmp_path)


def assert_matches(name: str, label: str, tmp_path: Path) -> None:
    golden = json.loads((GOLDEN_DIR / f"{name}.json").read_text())
    run = next(r for r in golden["runs"] if r["label"] == label)
    sim = Simulation(parse_scenario(scenario_for(golden, run, tmp_path / "trace.jsonl"), tmp_path))
    got = sim.run().requests.set_index("request_id")
    bad = []
    for row in run["results"]:
        want = dict(zip(run["fields"], row))
        mine = got.loc[want["id"]]
        t0 = mine["arrival_s"] * 1000 - golden["requests"][want["id"]]["arrival_ms"]  # (the first arrival)
        pairs = {"worker": (mine["worker"], want["worker"]), "dp_rank": (mine["dp_rank"], want["dp_rank"]),
                 "reused": (mine["cached_tokens"], want["reused_input_tokens"]),
                 "ttft": (mine["ttft_ms"], want["ttft_ms"]), "e2e": (mine["e2e_ms"], want["e2e_ms"]),
                 "first_admit": (mine["first_admit_s"] * 1000 - t0, want["first_admit_ms"])}
        for what, (a, b) in pairs.items():
            if abs(float(a) - float(b)) > (TOL_MS if what in ("ttft", "e2e", "first_admit") else 0):
                bad.append(f"request {want['id']} {what}: simmodel {a}, mocker {b}")
    assert not bad, f"{len(bad)} differences, first: " + "; ".join(bad[:8])
