"""Vision encoders run on the worker's GPUs: image sizes to tokens, and the roofline of one encoder pass.

Mirrors SGLang serving a Qwen-VL model (``models/qwen3_vl.py``; ``multimodal/processors/qwen_vl.py``):

- **Tokens.** The processor resizes each image with Qwen-VL's ``smart_resize``: height and width rounded to
  multiples of ``patch_size × spatial_merge_size`` (32 for Qwen3-VL), the area kept within the processor's
  ``[min_pixels, max_pixels]`` (Qwen3-VL's preprocessor_config.json: ``size`` {shortest_edge 65536,
  longest_edge 16777216}, i.e. 256² to 4096² pixels). The ViT then sees (H'/patch)·(W'/patch) patches and
  the LLM (H'/patch)·(W'/patch)/merge² tokens. SGLang first shrinks images above
  ``SGLANG_IMAGE_MAX_PIXELS`` (12,845,056 = 16384·28² by default) with the same rule; that only matters
  above 12.8 MP and is left out here.
- **Encoder pass.** Per block, per patch: q/k/v and output projections (4h² weights) and the plain GELU
  MLP (fc1, fc2: 2·h·i), 2 FLOPs per weight; attention is full (not causal) within each image, QKᵀ and AV
  = 4·n²·h per block for an image of n patches; the Conv3d patch embedding is a (C·T·P²)×h GEMM per patch;
  each merger (the final one and the DeepStack ones) is a 4h→4h→out MLP per merged token. The weights are
  read once per pass.
- **Parallelism over the rank's ``tensor`` GPUs.** ``"tp"`` (SGLang's default): blocks and mergers are
  sharded as in the LLM (column-, then row-parallel), so each GPU does 1/tensor of their FLOPs and reads
  1/tensor of their weights, and pays two all-reduces per block (after the attention projection and fc2,
  patches × h values each) plus one per merger; the patch embedding and position table are replicated.
  ``"dp"`` (``--mm-enable-dp-encoder``): every GPU holds the whole tower; the pass's images go to GPUs by
  SGLang's ``get_load_balance_assignment`` (largest first, each to the least-loaded GPU by patches), and
  the embeddings, padded to the largest share, are all-gathered. Time is that of the slowest GPU.

Collectives are priced as ``RooflineTiming`` prices tensor parallelism's: the all-reduces one- or two-shot
(``roofline.all_reduce_seconds``), the all-gather one step plus its bytes, at the step latency and achieved
bandwidth of ``roofline.collective`` (SGLang's all-reduce as measured on the GPU system for the group's
size inside a node, the NIC beyond).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np

from simmodel.perf.hardware import HardwareSpec
from simmodel.perf.models import VisionTower
from simmodel.perf.roofline import LINEAR_ACTIVATION_PASSES, Efficiency, all_reduce_seconds, collective

if TYPE_CHECKING:
    from simmodel.config.schema import ImageSpec
    from simmodel.perf.deployment import Deployment

__all__ = ["VisionTower", "embedding_bytes", "encode_seconds", "image_grid", "image_patches", "image_tokens",
           "smart_resize", "tower_parameters", "tower_weight_bytes", "visual_tokens"]

EncoderParallel = Literal["tp", "dp"]
MAX_ASPECT_RATIO = 200  # transformers' smart_resize refuses longer sides beyond 200:1
ATTENTION_PASSES = 4    # read Q, K, V and write the output once per block (flash attention)
_EFFICIENCY = Efficiency()


# -- image size → patches and tokens -------------------------------------------------------------------

def smart_resize(height: np.ndarray | int, width: np.ndarray | int, factor: int, min_pixels: int,
                 max_pixels: int) -> tuple[np.ndarray, np.ndarray]:
    """Resize as transformers' Qwen2-VL ``smart_resize``: sides multiples of ``factor``, area within limits.

    Sides round half to even (Python's ``round``, as transformers does); an area above ``max_pixels`` scales
    down and floors, one below ``min_pixels`` scales up and ceils, keeping the aspect ratio. A limit of 0
    is no limit.

    Raises:
        ValueError: a side is not positive, or the aspect ratio exceeds 200:1.
    """
    h = np.asarray(height, dtype=np.float64)
    w = np.asarray(width, dtype=np.float64)
    if np.any(h <= 0) or np.any(w <= 0):
        raise ValueError(f"image sides must be positive, got {height}×{width}")
    if np.any(np.maximum(h, w) / np.minimum(h, w) > MAX_ASPECT_RATIO):
        raise ValueError(f"image aspect ratio must be at most {MAX_ASPECT_RATIO}:1, got {height}×{width}")
    h_bar, w_bar = np.rint(h / factor) * factor, np.rint(w / factor) * factor
    shrink = np.sqrt(h * w / max(max_pixels, 1))
    grow = np.sqrt(min_pixels / (h * w))
    too_big, too_small = (max_pixels > 0) & (h_bar * w_bar > max_pixels), h_bar * w_bar < min_pixels
    h_bar = np.where(too_big, np.maximum(factor, np.floor(h / shrink / factor) * factor),
                     np.where(too_small, np.ceil(h * grow / factor) * factor, h_bar))
    w_bar = np.where(too_big, np.maximum(factor, np.floor(w / shrink / factor) * factor),
                     np.where(too_small, np.ceil(w * grow / factor) * factor, w_bar))
    return h_bar.astype(np.int64), w_bar.astype(np.int64)


def image_grid(tower: VisionTower, height: np.ndarray | int, width: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Patch rows and columns of each image after the processor's resize (``image_grid_thw``'s h, w)."""
    h_bar, w_bar = smart_resize(height, width, tower.patch_size * tower.spatial_merge_size, tower.min_pixels,
                                tower.max_pixels)
    return h_bar // tower.patch_size, w_bar // tower.patch_size


def image_patches(tower: VisionTower, height: np.ndarray | int, width: np.ndarray | int) -> np.ndarray | int:
    """Patches each image feeds the ViT: (H'/patch)·(W'/patch), one temporal patch of 2 duplicated frames."""
    rows, cols = image_grid(tower, height, width)
    return _like(rows * cols, height, width)


def visual_tokens(tower: VisionTower, height: np.ndarray | int, width: np.ndarray | int) -> np.ndarray | int:
    """LLM tokens each image becomes: its patches / spatial_merge_size². An int for scalar sides."""
    rows, cols = image_grid(tower, height, width)
    return _like(rows * cols // tower.spatial_merge_size**2, height, width)


def image_tokens(deployment: Deployment, images: ImageSpec) -> int:
    """Prompt tokens the images of one request add."""
    tower = deployment.model.vision
    assert tower is not None
    return int(visual_tokens(tower, images.height, images.width)) * images.count


def _like(values: np.ndarray, height: np.ndarray | int, width: np.ndarray | int) -> np.ndarray | int:
    return int(values) if np.ndim(height) == 0 and np.ndim(width) == 0 else values


def embedding_bytes(tower: VisionTower, num_tokens: np.ndarray | int, dtype_bytes: float = 2) -> np.ndarray | float:
    """Bytes of the embeddings an image's tokens carry to the LLM (and into the embedding cache).

    Each token holds the merger's output and one DeepStack feature per DeepStack merger, all of
    ``out_hidden_size`` (SGLang concatenates them: ``[tokens, out_hidden × (1 + deepstack)]``).
    """
    return num_tokens * tower.out_hidden_size * (1 + tower.num_deepstack_mergers) * dtype_bytes


# -- weights ---------------------------------------------------------------------------------------

def _patch_embed_params(tower: VisionTower) -> int:
    """Conv3d kernel (C·T·P² → h, with bias) and the learned position table: replicated under TP."""
    h = tower.hidden_size
    kernel = tower.in_channels * tower.temporal_patch_size * tower.patch_size**2
    return kernel * h + h + tower.num_position_embeddings * h


def _block_params(tower: VisionTower) -> int:
    """One ViT block: qkv and proj with biases, fc1 and fc2 with biases, two LayerNorms (weight and bias)."""
    h, i = tower.hidden_size, tower.intermediate_size
    return (3 * h * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h) + 4 * h


def _merger_params(tower: VisionTower) -> int:
    """All mergers: LayerNorm, fc1 (4h → 4h) and fc2 (4h → out), with biases. The final merger normalizes
    before the 2×2 shuffle (h wide), the DeepStack ones after it (4h wide)."""
    h, out = tower.hidden_size, tower.out_hidden_size
    merged = h * tower.spatial_merge_size**2
    mlp = merged * merged + merged + merged * out + out
    return (mlp + 2 * h) + tower.num_deepstack_mergers * (mlp + 2 * merged)


def tower_parameters(tower: VisionTower) -> int:
    """Every weight of the vision encoder: patch embedding, position table, blocks and mergers."""
    return _patch_embed_params(tower) + tower.depth * _block_params(tower) + _merger_params(tower)


def tower_weight_bytes(tower: VisionTower, tensor: int = 1, encoder_parallel: EncoderParallel = "tp",
                       dtype_bytes: float = 2) -> float:
    """Vision-encoder weight bytes on each GPU of a rank (to take off the memory left for KV).

    ``"tp"`` shards blocks and mergers over the ``tensor`` GPUs and replicates the patch embedding and
    position table; ``"dp"`` keeps the whole tower on every GPU.
    """
    sharded = tower.depth * _block_params(tower) + _merger_params(tower)
    split = tensor if encoder_parallel == "tp" else 1
    return (_patch_embed_params(tower) + sharded / split) * dtype_bytes


# -- one encoder pass ------------------------------------------------------------------------------

def encode_seconds(tower: VisionTower, hardware: HardwareSpec, patches_per_image: np.ndarray | int, *, tensor: int = 1,
                   encoder_parallel: EncoderParallel = "tp", efficiency: Efficiency = _EFFICIENCY,
                   dtype_bytes: float = 2, activation_bytes: float = 2, collective_us: float | None = None,
                   engine: str = "sglang") -> float:
    """Seconds one rank's GPUs take to encode a pass's images (see the module docstring).

    Args:
        tower: the vision encoder.
        hardware: one GPU of the rank.
        patches_per_image: ViT patches of each image this rank encodes in the pass (``image_patches()``);
            attention runs within each entry. An int is one image.
        tensor: GPUs of the rank the encoder runs on.
        encoder_parallel: ``"tp"`` (sharded tower) or ``"dp"`` (whole tower per GPU, images split).
        efficiency: fractions of peak FLOP/s, HBM and link bandwidth reached.
        dtype_bytes: bytes per weight; activation_bytes: bytes per activation value.
        collective_us: the step latency of each collective (the scenario's ``timing.collective_latency_us``);
            None takes the GPU system's (``roofline.collective``).
        engine: whose measured all-reduce prices the collectives (SGLang's: its encoder runs in SGLang).

    Returns:
        Seconds of the slowest GPU, 0.0 for no images.
    """
    if encoder_parallel not in ("tp", "dp"):
        raise ValueError(f"encoder_parallel must be 'tp' or 'dp', got {encoder_parallel!r}")
    patches = np.atleast_1d(np.asarray(patches_per_image, dtype=np.int64))
    patches = patches[patches > 0]
    if patches.size == 0:
        return 0.0
    if encoder_parallel == "dp" and tensor > 1:
        shares = _load_balance(patches, tensor)
        compute = max(_gpu_seconds(tower, hardware, share, 1, efficiency, dtype_bytes, activation_bytes)
                      for share in shares if share.size)
        return compute + _all_gather_seconds(tower, hardware, shares, tensor, efficiency, activation_bytes,
                                             collective_us, engine)
    return (_gpu_seconds(tower, hardware, patches, tensor, efficiency, dtype_bytes, activation_bytes)
            + _all_reduce_seconds(tower, hardware, patches, tensor, efficiency, activation_bytes, collective_us,
                                  engine))


def _gpu_seconds(tower: VisionTower, hw: HardwareSpec, patches: np.ndarray, tp: int, eff: Efficiency,
                 dtype_bytes: float, act: float) -> float:
    """Roofline of one GPU running ``patches`` (one entry per image) through a 1/``tp`` shard of the tower."""
    h, i, out = tower.hidden_size, tower.intermediate_size, tower.out_hidden_size
    merged = h * tower.spatial_merge_size**2
    num_patches = float(patches.sum())
    num_tokens = num_patches / tower.spatial_merge_size**2
    kernel = tower.in_channels * tower.temporal_patch_size * tower.patch_size**2
    block_flops = 2 * tower.depth * (4 * h * h + 2 * h * i) * num_patches
    merger_flops = 2 * (1 + tower.num_deepstack_mergers) * (merged * merged + merged * out) * num_tokens
    linear_flops = 2 * kernel * h * num_patches + (block_flops + merger_flops) / tp
    linear_bytes = (tower_weight_bytes(tower, tp, "tp", dtype_bytes)
                    + LINEAR_ACTIVATION_PASSES * tower.depth * h * act * num_patches)
    linear_s = max(linear_flops / (eff.compute * hw.peak_flops(dtype_bytes)),
                   linear_bytes / (eff.memory * hw.hbm_bytes_per_s))
    # Full attention within each image: QKᵀ and AV over n² patch pairs, 2·h FLOPs each, heads split over tp.
    attention_flops = 4 * tower.depth * h / tp * float(np.square(patches.astype(np.float64)).sum())
    attention_bytes = ATTENTION_PASSES * tower.depth * h / tp * act * num_patches
    attention_s = max(attention_flops / (eff.compute * hw.bf16_flops),
                      attention_bytes / (eff.memory * hw.hbm_bytes_per_s))
    return linear_s + attention_s


def _all_reduce_seconds(tower: VisionTower, hw: HardwareSpec, patches: np.ndarray, tp: int, eff: Efficiency,
                        act: float, collective_us: float | None, engine: str) -> float:
    """TP's all-reduces: two per block over patches × h, one per merger over tokens × out_hidden."""
    if tp <= 1:
        return 0.0
    link, latency = collective(hw, eff, tp, collective_us, engine)
    inside = tp <= hw.gpus_per_node
    num_patches = float(patches.sum())
    num_tokens = num_patches / tower.spatial_merge_size**2
    blocks = 2 * tower.depth * all_reduce_seconds(num_patches * tower.hidden_size * act, tp, link, latency, inside)
    mergers = (1 + tower.num_deepstack_mergers) * all_reduce_seconds(num_tokens * tower.out_hidden_size * act, tp,
                                                                     link, latency, inside)
    return blocks + mergers


def _all_gather_seconds(tower: VisionTower, hw: HardwareSpec, shares: list[np.ndarray], tp: int, eff: Efficiency,
                        act: float, collective_us: float | None, engine: str) -> float:
    """DP's one all-gather of the embeddings, each GPU's share padded to the largest (as SGLang pads)."""
    link, latency = collective(hw, eff, tp, collective_us, engine)
    largest = max(float(share.sum()) for share in shares) / tower.spatial_merge_size**2
    return latency + (tp - 1) * embedding_bytes(tower, largest, act) / link


def _load_balance(patches: np.ndarray, num_gpus: int) -> list[np.ndarray]:
    """Images per GPU as SGLang's ``get_load_balance_assignment``: largest first, each to the least-loaded GPU
    (by patches; ties to the lowest GPU)."""
    loads = [0] * num_gpus
    shares: list[list[int]] = [[] for _ in range(num_gpus)]
    for n in sorted(patches.tolist(), reverse=True):
        gpu = loads.index(min(loads))
        shares[gpu].append(n)
        loads[gpu] += n
    return [np.array(share, dtype=np.int64) for share in shares]
