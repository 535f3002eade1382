"""Our vLLM scheduler with a state group (Mamba / linear-attention layers) beside a full-attention one, against
golden traces recorded from vLLM 0.32.0's real ``Scheduler`` and ``AsyncScheduler`` with the same two groups and no
prefix caching (``tools/oracles/record_vllm_state_goldens.py``), with and without MTP drafts (a state block per draft
more): every pass's scheduled tokens, preemptions, finishes and emitted tokens, pass by pass."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from simmodel.perf.kv_layout import KvLayout
from tests.stepdriver import run_steps
from tests.unit.test_vllm_golden import HIT_FIELDS, _compare, _config, _nonempty, _requests

STATE_FILES = sorted((Path(__file__).resolve().parents[1] / "golden" / "vllm_state").glob("*.json"))


def test_enough_goldens() -> None:
    configs = [json.loads(p.read_text())["config"] for p in STATE_FILES]
    assert len(configs) >= 14
    assert {(c["async_scheduling"], "num_speculative_tokens" in c) for c in configs} == {
        (False, False), (False, True), (True, False), (True, True)}


@pytest.mark.parametrize("path", STATE_FILES, ids=[p.stem for p in STATE_FILES])
def test_matches_vllm_with_a_state_group(path: Path) -> None:
    golden = json.loads(path.read_text())
    cfg = golden["config"]
    k = cfg.get("num_speculative_tokens", 0)
    config = replace(_config(cfg), num_speculative_tokens=k, num_lookahead_tokens=k)
    layout = KvLayout(2, 1, full_groups=1, state_groups=1, state_blocks=1 + k)
    ours = [r for r in run_steps(_requests(golden), config, cfg["num_gpu_blocks"], cfg["block_size"], layout=layout,
                                 mean_accepted=cfg.get("mean_accepted", 0.0)) if _nonempty(r)]
    _compare(golden, ours, HIT_FIELDS)
