"""Our vLLM scheduler with a sliding-window KV cache group beside a full-attention one (vLLM's hybrid KV cache
manager, gpt-oss's layout) against golden traces recorded from vLLM 0.32.0's real ``Scheduler`` and
``AsyncScheduler`` with the same two groups (``tools/oracles/record_vllm_hybrid_goldens.py``), with and without
prefix caching: every pass's scheduled tokens, preemptions, finishes and emitted tokens, pass by pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simmodel.perf.kv_layout import KvLayout
from tests.unit.test_vllm_golden import compare_with_drafts

HYBRID_FILES = sorted((Path(__file__).resolve().parents[1] / "golden" / "vllm_hybrid").glob("*.json"))


def test_enough_goldens() -> None:
    configs = [json.loads(p.read_text())["config"] for p in HYBRID_FILES]
    assert len(configs) >= 12
    assert {(c["async_scheduling"], c["enable_prefix_caching"]) for c in configs} == {
        (False, False), (False, True), (True, False), (True, True)}


@pytest.mark.parametrize("path", HYBRID_FILES, ids=[p.stem for p in HYBRID_FILES])
def test_matches_vllm_with_a_sliding_group(path: Path) -> None:
    golden = json.loads(path.read_text())
    compare_with_drafts(golden, KvLayout(2, 1, full_groups=1, sliding_groups=1,
                                         window=golden["config"]["sliding_window"]))
