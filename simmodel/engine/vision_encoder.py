"""Images encoded on a rank's GPUs inside its prefill passes (SGLang serving a vision-language model).

A request's images are laid out first in its prompt, ``visual_tokens`` tokens each. SGLang computes an
image's embeddings in the extend forward whose chunk first covers any of its tokens, unless its embedding
cache (``SGLANG_VLM_CACHE_SIZE_MB``, keyed by the image's content) still holds them; a radix-cache hit
over an image's tokens skips it altogether (those tokens are not recomputed). The vision tower's time is
added to that rank's pass, priced by the performance model (``simmodel.perf.vision.encode_seconds``).
"""

from __future__ import annotations

import numpy as np

from simmodel.config.schema import ImageSpec, VisionSpec
from simmodel.engine.embedding_cache import EmbeddingCache
from simmodel.engine.scheduler.base import SchedulerOutput
from simmodel.perf.deployment import Deployment
from simmodel.perf.roofline import Efficiency
from simmodel.perf.vision import embedding_bytes, encode_seconds, image_patches, visual_tokens
from simmodel.perf.vision import image_tokens as image_tokens  # re-exported: it lives with the image processor

MIB = 1 << 20


class RankVision:
    """One rank's vision encoder and embedding cache."""

    def __init__(self, deployment: Deployment, images: ImageSpec, vision: VisionSpec | None,
                 efficiency: Efficiency, collective_us: float | None = None) -> None:
        tower = deployment.model.vision
        assert tower is not None
        vision = vision or VisionSpec()
        self.deployment, self.images, self.vision, self.efficiency = deployment, images, vision, efficiency
        self.collective_us = collective_us
        """The scenario's step latency of each collective (``timing.collective_latency_us``), else None."""
        self.tokens_per_image = int(visual_tokens(tower, images.height, images.width))
        self.patches_per_image = int(image_patches(tower, images.height, images.width))
        self.entry_bytes = int(embedding_bytes(tower, self.tokens_per_image))
        self.cache = EmbeddingCache(int(vision.cache_mib * MIB))
        self.num_images_encoded = 0
        self.encode_s = 0.0

    def _key(self, request_id: int, k: int) -> tuple:
        return ("image", k) if self.images.identity == "shared" else ("image", request_id, k)

    def pass_seconds(self, plan: SchedulerOutput) -> float:
        """Encoder time this pass adds on the rank (images first covered by a prefill chunk, not cached)."""
        per, count = self.tokens_per_image, self.images.count
        end = per * count
        encode = 0
        for r, ctx, new, dec in zip(plan.requests, plan.num_context_tokens, plan.num_new_tokens, plan.is_decode):
            if dec or ctx >= end or new <= 0:
                continue
            for k in range(ctx // per, min(count - 1, (ctx + new - 1) // per) + 1):
                key = self._key(r.request_id, k)
                if self.cache.lookup(key):
                    continue
                self.cache.insert(key, self.entry_bytes)
                encode += 1
        if not encode:
            return 0.0
        d = self.deployment
        assert d.model.vision is not None
        seconds = encode_seconds(d.model.vision, d.hardware, np.full(encode, self.patches_per_image),
                                 tensor=d.tensor, encoder_parallel=self.vision.encoder_parallel,
                                 efficiency=self.efficiency, collective_us=self.collective_us)
        self.num_images_encoded += encode
        self.encode_s += seconds
        return seconds
