"""Images encoded on an SGLang worker's GPU: visual tokens, the encoder's time in the pass, the embedding
cache and the radix cache over image tokens (Qwen3-VL-8B on H200, default timing)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simmodel.config.load import parse_scenario
from simmodel.perf.models import MODELS
from simmodel.perf.roofline import RooflineTiming
from simmodel.perf.timing import PassBatch
from simmodel.perf.vision import encode_seconds
from simmodel.sim import Simulation

VL = "Qwen/Qwen3-VL-8B-Instruct"


def scenario(identity: str = "unique", requests: int = 3, cache_mib: float = 100, budget: int = 8192) -> dict:
    return {
        "traffic": {"source": {"type": "synthetic", "input_tokens": 128, "output_tokens": 4,
                               "images": {"height": 1024, "width": 1024, "identity": identity}},
                    "load": {"type": "concurrency", "concurrency": 1}, "stop": {"requests": requests}},
        "engine": {"model": VL, "hardware": "h200_sxm", "backend": "sglang", "context_length": 32768,
                   "workers": {"aggregated": {"scheduler": {"max_batched_tokens": budget},
                                              "kv_cache": {"capacity": {"type": "fixed", "blocks": 100_000}},
                                              "vision": {"cache_mib": cache_mib}}}},
    }


def run(data: dict):
    sim = Simulation(parse_scenario(data, Path(".")))
    return sim, sim.run()


def test_images_add_visual_tokens_to_the_prompt() -> None:
    """1024×1024 is a multiple of 32: 64 × 64 patches of 16 px, merged 2 × 2 → 1024 tokens; + 128 text."""
    _, res = run(scenario(requests=1))
    assert list(res.requests.input_tokens) == [1152]
    assert res.summary["vision"]["image_tokens_per_request"] == 1024


def test_the_encoder_runs_inside_the_first_prefill_pass() -> None:
    """The first pass is the model's prefill of 1152 tokens plus one image's encoder time (4096 patches)."""
    sim, res = run(scenario(requests=1))
    role = sim.scenario.engine.workers["aggregated"]
    prefill = RooflineTiming(role.deployment).price(PassBatch(
        1, np.array([0]), np.array([1152]), np.array([0]), np.array([False]), np.array([True]),
        np.array([100_000.0])))
    encoder = encode_seconds(MODELS[VL].vision, role.deployment.hardware, 4096)
    first = res.passes.sort_values("start_s").iloc[0]
    assert first.rank_busy_ms == pytest.approx((prefill.total_s[0] + encoder) * 1e3, abs=1e-6)
    assert res.summary["vision"]["encoder_seconds"] == pytest.approx(encoder)


@pytest.mark.parametrize(("identity", "encoded"), [("unique", 3), ("shared", 1)])
def test_a_shared_image_is_encoded_once(identity: str, encoded: int) -> None:
    """Three requests one after another: a shared image's tokens are found in the radix cache, so later
    prompts never compute them and the encoder does not run; unique images are each encoded."""
    _, res = run(scenario(identity))
    assert res.summary["vision"]["images_encoded"] == encoded
    cached = list(res.requests.sort_values("request_id").cached_tokens)
    assert cached == ([0, 0, 0] if identity == "unique" else [0, 1024, 1024])


@pytest.mark.parametrize(("cache_mib", "encoded", "hits"), [(100, 1, 1), (0, 2, 0)])
def test_embedding_cache_spares_the_second_chunk(cache_mib: float, encoded: int, hits: int) -> None:
    """A 512-token prefill budget cuts the 1024 image tokens over two chunks. The second chunk finds the
    image's embeddings in the cache (one encode, one hit); with ``cache_mib: 0`` it encodes them again."""
    _, res = run(scenario(requests=1, cache_mib=cache_mib, budget=512))
    vision = res.summary["vision"]
    assert (vision["images_encoded"], vision["embedding_cache_hits"]) == (encoded, hits)
