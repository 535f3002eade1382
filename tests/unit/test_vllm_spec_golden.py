"""Our vLLM scheduler with MTP/EAGLE drafts against golden traces recorded from vLLM 0.32.0's real ``Scheduler``
and ``AsyncScheduler`` (``tools/oracles/record_vllm_spec_goldens.py``: k drafts a pass, verified in the next one,
accepted by a fixed rule both sides apply): every pass's scheduled tokens (the drafts among them), preemptions,
finishes and emitted tokens, pass by pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.test_vllm_golden import compare_with_drafts

SPEC_FILES = sorted((Path(__file__).resolve().parents[1] / "golden" / "vllm_spec").glob("*.json"))


def test_enough_goldens() -> None:
    assert len(SPEC_FILES) >= 24
    assert {json.loads(p.read_text())["config"]["async_scheduling"] for p in SPEC_FILES} == {False, True}


@pytest.mark.parametrize("path", SPEC_FILES, ids=[p.stem for p in SPEC_FILES])
def test_matches_vllm_with_drafts(path: Path) -> None:
    golden = json.loads(path.read_text())
    assert golden["config"]["num_speculative_tokens"] > 0
    compare_with_drafts(golden)
