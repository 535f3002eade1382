"""EPD's encoder pool (``engine.encoder``, ``simmodel.engine.encoder_pool``): batching, the embedding cache,
the link, and the timeline a request follows, by hand; the configuration's rules."""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_scenario, run_scenario, scenario_error

from simmodel.perf.hardware import HARDWARE
from simmodel.perf.models import MODELS
from simmodel.perf.vision import encode_seconds

TOWER = MODELS["Qwen/Qwen3-VL-8B-Instruct"].vision
# One 1024×1024 image: (1024 / 16)² = 4096 patches, 4096 / 2² = 1024 LLM tokens; its embeddings are 1024 tokens
# × 4096 (out_hidden_size) × (1 + 3 DeepStack mergers) × 2 B = 33,554,432 B, which take 671.09 µs at 50 GB/s
# plus the link's 10 µs: 681.09 µs.
TRANSFER_S = 10e-6 + 33_554_432 / 50e9


def epd(requests: int = 3, identity: str = "unique", **encoder) -> dict:
    """Qwen3-VL-8B on H100, vLLM, fixed 20 ms prefill / 10 ms decode passes, ``requests`` requests sent at once
    (a closed loop of as many clients), each 100 text tokens, one 1024×1024 image and 2 output tokens; one encoder
    worker of one GPU batching up to 2 images."""
    data = make_scenario(traffic={"stop": {"requests": requests}, "load": {"type": "concurrency",
                                                                           "concurrency": requests},
                                  "source": {"output_tokens": 2, "images": {"height": 1024, "width": 1024,
                                                                            "identity": identity}}},
                         engine={"model": "Qwen/Qwen3-VL-8B-Instruct", "context_length": 4096,
                                 "encoder": {"parallelism": {"replicas": 1, "tensor": 1}, "max_batch_images": 2,
                                             "link": {"bandwidth_gb_per_second": 50, "latency_ms": 0.01},
                                             **encoder}})
    data["engine"]["workers"]["aggregated"]["scheduler"]["max_sequences"] = 4
    return data


def test_the_encoder_batches_whole_requests_and_the_worker_waits_for_the_embeddings():
    """Three requests at 0, batches of at most 2 images: the encoder's first forward takes requests 0 and 1 (E2,
    two images), its second request 2 (E1). Each request's embeddings then take 681.09 µs. Requests 0 and 1
    reach the worker at E2 + X and prefill together (20 ms): TTFT E2 + X + 20 ms. Request 2 arrives at E2 + E1 +
    X, during that pass (E1 = 7.5 ms < 20 ms), and joins the next, a mixed pass of 20 + 10 ms: TTFT E2 + X + 50 ms.
    (E1 and E2 are the vision tower's roofline, ``perf.vision.encode_seconds``, tested on its own.)"""
    h100 = HARDWARE["h100_sxm"]
    e1 = encode_seconds(TOWER, h100, np.full(1, 4096))
    e2 = encode_seconds(TOWER, h100, np.full(2, 4096))
    assert e1 < 0.020
    results = run_scenario(epd())
    r = results.requests
    assert r["encoder_ms"].tolist() == pytest.approx([(e2 + TRANSFER_S) * 1e3] * 2 + [(e2 + e1 + TRANSFER_S) * 1e3],
                                                     rel=1e-6)
    assert r["ttft_ms"].tolist() == pytest.approx([(e2 + TRANSFER_S + 0.020) * 1e3] * 2
                                                  + [(e2 + TRANSFER_S + 0.050) * 1e3], rel=1e-6)
    enc = results.summary["encoder"]
    assert enc["images_encoded"] == 3 and enc["forwards"] == 2
    assert enc["encoder_seconds"] == pytest.approx(e1 + e2, rel=1e-6)
    assert enc["transfer_ms"] == pytest.approx(TRANSFER_S * 1e3, rel=1e-6)
    assert enc["embedding_bytes_sent"] == 3 * 33_554_432
    # The pool's GPU counts: 1 worker + 1 encoder; its energy: idle over the run and full power while encoding.
    s = results.summary
    assert s["gpu_count"] == 2 and s["roles"]["encoder"]["gpu_count"] == 1
    joules = 121.7 * s["end_time_s"] + (700 - 121.7) * (e1 + e2)
    assert s["roles"]["encoder"]["energy_kwh"] * 3.6e6 == pytest.approx(joules, rel=1e-6)


def test_shared_images_are_encoded_once_and_still_sent():
    """Every request sends the same image: the encoder encodes it for the first request; the others hit its
    embedding cache and only travel (all three in one forward of one image when the batch holds them)."""
    results = run_scenario(epd(identity="shared", max_batch_images=4))
    enc = results.summary["encoder"]
    assert enc["images_encoded"] == 1 and enc["embedding_cache_hits"] == 2
    e1 = encode_seconds(TOWER, HARDWARE["h100_sxm"], np.full(1, 4096))
    assert results.requests["encoder_ms"].tolist() == pytest.approx([(e1 + TRANSFER_S) * 1e3] * 3, rel=1e-6)


def test_two_encoder_workers_take_the_queue_in_turn():
    """Two encoder workers, batches of one image: requests 0 and 1 are encoded at once, request 2 after the
    first of them: E1 + X, E1 + X, 2 E1 + X."""
    e1 = encode_seconds(TOWER, HARDWARE["h100_sxm"], np.full(1, 4096))
    results = run_scenario(epd(parallelism={"replicas": 2}, max_batch_images=1))
    assert results.requests["encoder_ms"].tolist() == pytest.approx(
        [(e1 + TRANSFER_S) * 1e3] * 2 + [(2 * e1 + TRANSFER_S) * 1e3], rel=1e-6)
    assert results.requests["encoder_worker"].tolist() == [0, 1, 0]


def test_sglang_workers_behind_an_encoder_pool_encode_nothing():
    """SGLang: the worker prices no vision tower (its passes are the fixed 20 / 10 ms) and reads its prefill
    budget from chunked_prefill_size, as with no images."""
    data = epd()
    data["engine"]["backend"] = "sglang"
    data["engine"]["workers"]["aggregated"]["scheduler"] = {"max_sequences": 4}
    data["engine"]["workers"]["aggregated"]["kv_cache"]["block_size"] = 1
    data["engine"]["workers"]["aggregated"]["kv_cache"]["capacity"]["blocks"] = 16000
    results = run_scenario(data)
    assert "vision" not in results.summary and results.summary["encoder"]["images_encoded"] == 3
    busy = results.passes["rank_busy_ms"].tolist()
    assert set(busy) <= {20.0, 10.0, 30.0}


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["traffic"]["source"].pop("images"), "engine.encoder: encodes the requests' images; needs "
                                                     "traffic.source.images"),
    (lambda d: d["engine"]["encoder"]["parallelism"].update(attention_data=2),
     "engine.encoder.parallelism.attention_data: an encoder worker takes replicas and tensor only"),
    (lambda d: d["engine"]["encoder"].update(max_batch_images=0), "engine.encoder.max_batch_images: must be a "
                                                                  "positive integer"),
    (lambda d: d["engine"]["encoder"].update(encoder_parallel="ep"), "engine.encoder.encoder_parallel: must be one of"),
    (lambda d: d["engine"]["encoder"]["link"].update(latency_ms=-1), "engine.encoder.link.latency_ms"),
])
def test_bad_encoder_pool_is_one_line(change, message):
    data = epd()
    change(data)
    assert message in scenario_error(data)


def test_an_encoder_pool_and_the_workers_own_encoder_are_never_both():
    data = epd()
    data["engine"]["backend"] = "sglang"
    data["engine"]["workers"]["aggregated"]["scheduler"] = {"max_sequences": 4}
    data["engine"]["workers"]["aggregated"]["vision"] = {"cache_mib": 10}
    assert "engine.workers.aggregated.vision: images are encoded by the encoder pool" in scenario_error(data)


def test_encoder_tensor_shards_the_towers_heads():
    """Qwen3-VL-8B's tower has 16 heads: a TP 3 encoder cannot shard them (TP 2 can; dp takes any count)."""
    data = epd(parallelism={"tensor": 3})
    assert "engine.encoder.parallelism.tensor: the vision tower's 16 attention heads" in scenario_error(data)
    data["engine"]["encoder"]["encoder_parallel"] = "dp"
    run_scenario(data)


def test_a_replicated_tower_counts_only_the_gpus_that_encode():
    """``dp`` on 4 GPUs with batches of one image: one GPU encodes each forward, so the pool's busy GPU-seconds
    are its forwards' time, not four times it (``tp`` on 4 GPUs: all four work on each image)."""
    data = epd(parallelism={"tensor": 4}, encoder_parallel="dp", max_batch_images=1)
    s = run_scenario(data).summary
    dynamic = s["roles"]["encoder"]["energy_kwh"] * 3.6e6 - 4 * 121.7 * s["end_time_s"]
    assert dynamic == pytest.approx(578.3 * s["encoder"]["encoder_seconds"], rel=1e-6)


def test_vllm_prefix_caching_matches_the_blocks_of_shared_images():
    """vLLM behind an encoder pool, prefix caching on, every request sending the same 1024×1024 image (1024
    tokens, 64 whole blocks of 16) before its own 100 text tokens, one request after another: the second finds
    the image's 64 blocks cached (1024 tokens), none of its text; with unique images nothing is cached."""
    for identity, cached in (("shared", 1024), ("unique", 0)):
        data = epd(requests=2, identity=identity)
        data["traffic"]["load"] = {"type": "concurrency", "concurrency": 1}
        data["engine"]["workers"]["aggregated"]["kv_cache"]["prefix_caching"] = True
        assert run_scenario(data).requests["cached_tokens"].tolist() == [0, cached]
