"""Our vLLM scheduler under pipeline parallelism against golden traces recorded from vLLM 0.32.0's real schedulers
(``tools/oracles/record_vllm_pp_goldens.py``): P batches in flight with the synchronous ``Scheduler``, P + 1 with
the ``AsyncScheduler`` of Model Runner V2, whose decodes of one request are P steps apart; pass by pass."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.stepdriver import run_steps
from tests.unit.test_vllm_golden import HIT_FIELDS, _compare, _config, _nonempty, _requests

PP_FILES = sorted((Path(__file__).resolve().parents[1] / "golden" / "vllm_pp").glob("*.json"))


def test_enough_goldens() -> None:
    configs = [json.loads(p.read_text())["config"] for p in PP_FILES]
    assert len(configs) >= 12 and {c["async_scheduling"] for c in configs} == {False, True}


@pytest.mark.parametrize("path", PP_FILES, ids=[p.stem for p in PP_FILES])
def test_matches_vllm_with_pipeline_stages(path: Path) -> None:
    golden = json.loads(path.read_text())
    cfg = golden["config"]
    stages, asynchronous = cfg["pipeline"], cfg["async_scheduling"]
    config = replace(_config(cfg), decode_stagger=stages if asynchronous else 1)
    ours = [r for r in run_steps(_requests(golden), config, cfg["num_gpu_blocks"], cfg["block_size"],
                                 queue_size=stages + (1 if asynchronous else 0)) if _nonempty(r)]
    _compare(golden, ours, HIT_FIELDS)
