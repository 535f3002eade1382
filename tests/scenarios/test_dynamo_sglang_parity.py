"""The SGLang backend through the whole simulator against Dynamo's mocker (``tests/golden/dynamo_sglang``).

Each golden run becomes a scenario: a Mooncake trace written from the golden's requests (arrival, lengths,
hash ids of ``trace_block_size`` tokens), ``backend: sglang`` with the run's scheduler knobs, workers and
attention-DP ranks, a fixed KV capacity in tokens and the mocker's fixed timing (prefill pass 20 ms, decode
pass 10 ms). Every request's placement, TTFT and E2E must equal the mocker's within 1e-6 s. The runs where
the mocker departs from SGLang's real scheduler (``KNOWN_MISMATCH`` of ``tests/unit/test_sglang_golden.py``,
all under tight KV or a prefill budget) are skipped here; they are tracked there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from factories import write_golden_trace

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "unit"))

from test_sglang_golden import GOLDEN_DIR, KNOWN_MISMATCH  # noqa: E402

from simmodel.config.load import parse_scenario  # noqa: E402
from simmodel.sim import Simulation  # noqa: E402

TOL_MS = 1e-3


def _runs():
    for path in sorted(GOLDEN_DIR.glob("*.json")):
        golden = json.loads(path.read_text())
        for run in golden["runs"]:
            if (path.stem, run["label"]) in KNOWN_MISMATCH:
                continue
            yield pytest.param(path.stem, run["label"], id=f"{path.stem}-{run['label']}")


def scenario_for(golden: dict, run: dict, trace_path: Path) -> dict:
    """The scenario mapping of one golden run (the trace is written to ``trace_path``)."""
    write_golden_trace(golden["requests"], trace_path)
    eng = run["engine_args"]["engine"]
    sg = eng["sglang"]
    scheduler = {"max_sequences": eng["max_num_seqs"], "chunked_prefill_size": sg["chunked_prefill_size"],
                 "max_prefill_tokens": sg["max_prefill_tokens"],
                 "schedule_policy": "lpm" if sg["schedule_policy"] == "lpm" else "fcfs",
                 "schedule_conservativeness": sg["schedule_conservativeness"],
                 "clip_max_new_tokens": sg["clip_max_new_tokens"],
                 "prefill_decode_interval": eng["prefill_decode_interval"] or 0}
    kv = eng["num_gpu_blocks"]
    return {
        "traffic": {"source": {"type": "trace", "format": "mooncake", "path": str(trace_path),
                               "block_size": golden["config"]["trace_block_size"]}},
        "engine": {
            "model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "h200_sxm", "backend": "sglang",
            "context_length": min(kv, 131072),
            "workers": {"aggregated": {
                "parallelism": {"replicas": run["num_workers"], "attention_data": run["dp_size"]},
                "scheduler": scheduler,
                "kv_cache": {"capacity": {"type": "fixed", "blocks": kv}},
                "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10},
            }},
        },
    }


@pytest.mark.parametrize(("name", "label"), list(_runs()))
def test_simulator_matches_mocker(name: str, label: str, tmp_path: Path) -> None:
    golden = json.loads((GOLDEN_DIR / f"{name}.json").read_text())
    run = next(r for r in golden["runs"] if r["label"] == label)
    data = scenario_for(golden, run, tmp_path / "trace.jsonl")
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(data))
    sim = Simulation(parse_scenario(data, tmp_path))
    requests = sim.run().requests.set_index("request_id")
    bad = []
    for row in run["results"]:
        want = dict(zip(run["fields"], row))
        got = requests.loc[want["id"]]
        diffs = []
        if (int(got["worker"]), int(got["dp_rank"])) != (want["worker"], want["dp_rank"]):
            diffs.append(f"placement {(int(got['worker']), int(got['dp_rank']))} != {(want['worker'], want['dp_rank'])}")
        for key in ("ttft_ms", "e2e_ms"):
            if abs(float(got[key]) - want[key]) > TOL_MS:
                diffs.append(f"{key} {float(got[key]):.3f} != {want[key]:.3f}")
        if diffs:
            bad.append(f"request {want['id']}: " + ", ".join(diffs))
    assert not bad, f"{len(bad)}/{len(run['results'])} requests differ:\n" + "\n".join(bad[:10])
