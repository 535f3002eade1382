"""Our vLLM scheduler with prefix caching of a state group (vLLM's ``mamba_cache_mode`` align, its default retention)
beside a full-attention group, against golden traces recorded from vLLM 0.32.0's real ``Scheduler`` and
``AsyncScheduler`` (``tools/oracles/record_vllm_state_goldens.py align``): a gated DeltaNet's group, whose prompts are
cut at their replay boundary, and a Mamba-2 group, which writes a checkpoint instead; every pass's scheduled tokens,
preemptions, finishes and emitted tokens, pass by pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simmodel.perf.kv_layout import KvLayout
from tests.unit.test_vllm_golden import compare_with_drafts

FILES = sorted((Path(__file__).resolve().parents[1] / "golden" / "vllm_state_apc").glob("*.json"))


def test_enough_goldens() -> None:
    configs = [json.loads(p.read_text())["config"] for p in FILES]
    assert len(configs) >= 12
    assert {(c["async_scheduling"], c["state_checkpoint"]) for c in configs} == {
        (False, False), (False, True), (True, False), (True, True)}


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_matches_vllm_caching_a_state_group(path: Path) -> None:
    golden = json.loads(path.read_text())
    cfg = golden["config"]
    k = cfg.get("num_speculative_tokens", 0)  # (MTP drafts: a speculative state block each)
    compare_with_drafts(golden, KvLayout(2, 1, full_groups=1, state_groups=1, state_blocks=1 + k,
                                         state_checkpoint=cfg["state_checkpoint"]))
