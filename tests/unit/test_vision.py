"""Vision-language serving pieces: Qwen-VL's image → token rule, the vision-encoder roofline under TP and DP,
and SGLang's multimodal embedding cache, against hand arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from simmodel.engine.embedding_cache import DEFAULT_CAPACITY_BYTES, EmbeddingCache
from simmodel.perf.hardware import HARDWARE, HardwareSpec
from simmodel.perf.models import MODELS, VisionTower
from simmodel.perf.roofline import Efficiency
from simmodel.perf.vision import (
    embedding_bytes,
    encode_seconds,
    image_patches,
    tower_parameters,
    tower_weight_bytes,
    visual_tokens,
)

QWEN3_VL = MODELS["Qwen/Qwen3-VL-8B-Instruct"]
TOWER = QWEN3_VL.vision
# A toy tower with round numbers: 2 blocks, hidden 8, MLP 16, patch 2, merge 2, temporal 2, out 8, 3 channels,
# no position table, no DeepStack. Per patch: patch embedding 2·(3·2·2²)·8 = 384 FLOPs, blocks 2·2·(4·8² + 2·8·16)
# = 2048, merger 2·(32·32 + 32·8) / 4 patches per token = 640: 3072 in all. Attention: 4·2·8·n² = 64·n² per image.
TOY = VisionTower(depth=2, hidden_size=8, intermediate_size=16, num_heads=2, patch_size=2, spatial_merge_size=2,
                  temporal_patch_size=2, out_hidden_size=8)
# 1e12 FLOP/s, HBM so fast that every group is compute-bound, a 1e11 B/s link with 1 µs per collective step.
GPU = HardwareSpec("toy_gpu", 1e12, 1e12, 2e12, 1e18, 1e11, 1e-6, 1e10, 1e10, 8)
HALF = Efficiency(compute=0.5, memory=1.0, link=1.0)


def toy_seconds(patches, **kw) -> float:
    return encode_seconds(TOY, GPU, patches, efficiency=HALF, **kw)


# -- the registry entry -----------------------------------------------------------------------------

def test_qwen3_vl_8b_is_qwen3_8b_text_plus_its_tower():
    """config.json: text_config = Qwen3-8B's shape with 262144 positions; vision_config depth 27, hidden 1152,
    MLP 4304, 16 heads, patch 16, merge 2, temporal 2, out 4096, 3 DeepStack mergers."""
    qwen3 = MODELS["Qwen/Qwen3-8B"]
    text = {f: getattr(qwen3, f) for f in qwen3.__slots__ if f not in ("model_id", "max_position_embeddings", "vision")}
    assert {f: getattr(QWEN3_VL, f) for f in text} == text
    assert QWEN3_VL.max_position_embeddings == 262144
    assert (TOWER.depth, TOWER.hidden_size, TOWER.intermediate_size, TOWER.num_heads) == (27, 1152, 4304, 16)
    assert (TOWER.patch_size, TOWER.spatial_merge_size, TOWER.temporal_patch_size) == (16, 2, 2)
    assert (TOWER.out_hidden_size, TOWER.num_deepstack_mergers) == (4096, 3)
    assert qwen3.vision is None


def test_tower_parameters_and_weight_bytes():
    """Block: 4·1152² + 2·1152·4304 + 9·1152 + 4304 = 15,239,504, ×27 = 411,466,608. Patch embedding
    1536·1152 + 1152 = 1,770,624; positions 2304·1152 = 2,654,208. Merger 4608² + 4608 + 4608·4096 + 4096
    + 2·1152 = 40,119,040; each DeepStack merger the same with a 4608-wide norm: 40,125,952 (×3).
    Total 576,388,336; with Qwen3-8B's 8,190,726,144 that is the model card's 8.77 B.
    TP 2 halves all but the 4,424,832 replicated embedding parameters: (4,424,832 + 285,981,752)·2 B."""
    assert tower_parameters(TOWER) == 576_388_336
    assert QWEN3_VL.num_parameters + tower_parameters(TOWER) == pytest.approx(8.77e9, rel=1e-3)
    assert tower_weight_bytes(TOWER) == 576_388_336 * 2
    assert tower_weight_bytes(TOWER, 2, "tp") == 580_813_168
    assert tower_weight_bytes(TOWER, 2, "dp") == tower_weight_bytes(TOWER)


# -- image size → tokens ----------------------------------------------------------------------------

@pytest.mark.parametrize(("height", "width", "tokens"), [
    (1024, 1024, 1024),     # multiples of 32: 64×64 patches = 4096, /2² = 1024
    (1000, 700, 682),       # 31.25 → 31·32 = 992, 21.875 → 22·32 = 704: 62×44 = 2728 patches → 682
    (1040, 1024, 1024),     # 1040/32 = 32.5 rounds half to even → 32 → 1024
    (1072, 1024, 1088),     # 1072/32 = 33.5 → 34 → 1088: 68×64 patches → 1088
    (300, 200, 70),         # 288×192 < 65,536 px: ×√(65536/60000) → ceil to 320×224: 20×14 = 280 → 70
    (8192, 8192, 16384),    # 8192² > 4096² px: ÷2 → 4096×4096: 256×256 = 65,536 patches → 16,384
])
def test_visual_tokens_follow_smart_resize(height, width, tokens):
    assert visual_tokens(TOWER, height, width) == tokens
    assert image_patches(TOWER, height, width) == tokens * 4


def test_visual_tokens_vectorized_limits_and_aspect_ratio():
    """A tower without pixel limits (0) only rounds: 8192² → 4096² patches of 2 → 4,194,304 / 4 tokens."""
    assert visual_tokens(TOWER, np.array([1024, 1000]), np.array([1024, 700])).tolist() == [1024, 682]
    assert visual_tokens(TOY, 8192, 8192) == 4096 * 4096 // 4
    with pytest.raises(ValueError, match="aspect ratio"):
        visual_tokens(TOWER, 10_000, 40)


def test_embedding_bytes_carry_deepstack_features():
    """1024 tokens × 4096 × (1 + 3 DeepStack) × 2 B = 32 MiB: the 100 MiB default cache holds three."""
    assert embedding_bytes(TOWER, 1024) == 32 * 2**20
    assert DEFAULT_CAPACITY_BYTES // embedding_bytes(TOWER, 1024) == 3


# -- the encoder roofline ---------------------------------------------------------------------------

def test_encode_one_image_is_compute_bound_by_hand():
    """One image of 16 patches on one GPU: 3072·16 + 64·16² = 49,152 + 16,384 = 65,536 FLOPs,
    at 0.5 × 1e12 FLOP/s = 1.31072e-7 s. No images: no time."""
    assert toy_seconds(16) == pytest.approx(65_536 / 0.5e12, rel=1e-12)
    assert toy_seconds(np.array([], dtype=np.int64)) == 0.0


def test_encode_time_grows_with_patches_and_attention_is_per_image():
    """Attention is per image: one image of 32 patches (64·32² = 65,536 attention FLOPs) costs more than two
    of 16 (2·64·16² = 32,768) for the same 3072·32 linear FLOPs."""
    sizes = [4, 16, 64, 256, 1024]
    times = [toy_seconds(n) for n in sizes]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert toy_seconds(32) - toy_seconds([16, 16]) == pytest.approx(32_768 / 0.5e12, rel=1e-9)


def test_tp_halves_sharded_flops_and_adds_all_reduces():
    """TP 2, one image of 16 patches: patch embedding 384·16 = 6144 stays, the rest (2688·16 = 43,008 linear,
    16,384 attention) halves: 35,840 FLOPs → 7.168e-8 s. All-reduces: 2·2 blocks × (1 µs + 16·8·2 B ·
    2·(1/2) / 1e11) + 1 merger × (1 µs + 4·8·2 B / 1e11) = 4 × 1.00256e-6 + 1.00064e-6 = 5.01088e-6 s."""
    assert toy_seconds(16, tensor=2, encoder_parallel="tp") == pytest.approx(7.168e-8 + 5.01088e-6, rel=1e-9)


def test_a_scenario_collective_latency_replaces_the_encoder_step_latency():
    """As above with timing.collective_latency_us 3: each of the 5 all-reduces pays 3 µs instead of the toy
    GPU's 1 µs (one-shot between 2 GPUs, one step): 4 × (3 µs + 2.56 ns) + (3 µs + 0.64 ns) = 15.01088e-6 s."""
    assert toy_seconds(16, tensor=2, encoder_parallel="tp", collective_us=3.0) == pytest.approx(
        7.168e-8 + 15.01088e-6, rel=1e-9)


def test_dp_splits_images_over_gpus_and_all_gathers_embeddings():
    """DP 2, two images of 16: each GPU encodes one (half the 2.62144e-7 s of both on one GPU), then one
    all-gather of 4 tokens × 8 × 2 B per GPU: 1 µs + 64 / 1e11."""
    one_gpu = toy_seconds([16, 16])
    assert toy_seconds([16, 16], tensor=2, encoder_parallel="dp") == pytest.approx(one_gpu / 2 + 1e-6 + 6.4e-10)
    # Largest first to the least-loaded GPU: [64 | 16, 16, 16] — the 64-patch image alone sets the pace.
    slowest = toy_seconds(64)
    assert toy_seconds([16, 64, 16, 16], tensor=2, encoder_parallel="dp") == pytest.approx(
        slowest + 1e-6 + 16 * 8 * 2 / 1e11)


def test_the_encoder_reduces_at_its_engines_measured_all_reduce():
    """Qwen3-VL-8B's tower (depth 27, hidden 1152, out 4096, 3 DeepStack mergers) on 2 H100s, one image of
    4096 patches: 54 block all-reduces of 4096 · 1152 · 2 = 9,437,184 B and 4 merger all-reduces of
    1024 · 4096 · 2 = 8,388,608 B, one-shot between 2 GPUs. SGLang (2.6 µs, 0.66 · 450 GB/s = 297 GB/s):
    54 · (2.6 + 31.77503) + 4 · (2.6 + 28.24447) = 1979.630 µs; vLLM's figures (4.2 µs, 234 GB/s):
    54 · (4.2 + 40.32985) + 4 · (4.2 + 35.84875) = 2564.807 µs. The encoder runs in SGLang, its default."""
    h100 = HARDWARE["h100_sxm"]
    sglang = encode_seconds(TOWER, h100, 4096, tensor=2)
    assert encode_seconds(TOWER, h100, 4096, tensor=2, engine="sglang") == sglang
    vllm = encode_seconds(TOWER, h100, 4096, tensor=2, engine="vllm")
    assert vllm - sglang == pytest.approx((2564.807 - 1979.630) * 1e-6, rel=1e-5)


def test_tp_and_dp_on_a_real_gpu_beat_one_gpu():
    """Qwen3-VL-8B on H100, four 1024² images: both splits over 2 GPUs are faster than one GPU."""
    h100, images = HARDWARE["h100_sxm"], [4096] * 4
    one = encode_seconds(TOWER, h100, images)
    assert encode_seconds(TOWER, h100, images, tensor=2, encoder_parallel="dp") < one
    assert encode_seconds(TOWER, h100, images, tensor=2, encoder_parallel="tp") < one
    with pytest.raises(ValueError, match="encoder_parallel"):
        encode_seconds(TOWER, h100, images, encoder_parallel="ep")


# -- the embedding cache ----------------------------------------------------------------------------

def test_cache_hits_refresh_recency_and_evict_lru_first():
    """Capacity 100: a(40), b(40); a hit makes b the LRU; c(40) evicts b, not a."""
    cache = EmbeddingCache(100)
    assert not cache.lookup("a") and cache.insert("a", 40)
    assert cache.insert("b", 40)
    assert cache.lookup("a")
    assert cache.insert("c", 40)
    assert cache.keys_lru_first() == ["a", "c"] and cache.num_used_bytes == 80
    assert not cache.lookup("b")
    assert (cache.num_hits, cache.num_misses) == (1, 2)


def test_cache_insert_evicts_as_many_as_needed():
    cache = EmbeddingCache(100)
    for key in "abcd":
        cache.insert(key, 25)
    assert cache.insert("big", 60)       # a, b out still leaves 50 + 60 > 100, so c goes too
    assert cache.keys_lru_first() == ["d", "big"] and cache.num_used_bytes == 85
    assert cache.insert("d", 25) and cache.keys_lru_first() == ["big", "d"]   # present: refreshed only


def test_cache_capacity_zero_disables_it():
    cache = EmbeddingCache(0)
    assert not cache.insert("a", 0) and not cache.insert("b", 10)
    assert not cache.lookup("a") and cache.num_entries == 0 and cache.num_misses == 1


def test_cache_oversize_entry_is_not_stored_and_empties_the_cache():
    """SGLang's MultiModalStaticCache.set evicts LRU entries until the cache is empty, then gives up."""
    cache = EmbeddingCache(100)
    cache.insert("a", 30)
    assert not cache.insert("huge", 101)
    assert "huge" not in cache and cache.num_entries == 0 and cache.num_used_bytes == 0
