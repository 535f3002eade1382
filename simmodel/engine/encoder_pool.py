"""EPD serving's encoder pool: workers that run the vision tower on the requests' images before their prompts
reach the workers that prefill them (SGLang's encoder servers, ``--encoder-only``; vLLM's disaggregated encoder).

A request with images joins one FIFO queue of the pool. A free encoder worker takes the requests at its head,
whole, while their images fit ``max_batch_images`` (always at least the first), looks each image up in its
embedding cache (``EmbeddingCache``, keyed by the image's identity), and encodes those it does not hold in one
forward priced by the performance model (``perf.vision.encode_seconds``: the tower's roofline on the
encoder's GPUs, sharded over them or split among them). When the forward ends, each request's embeddings
(``visual_tokens × out_hidden_size × 2`` bytes an image, cached or not) travel to the deployment over the
link: its latency plus the bytes over its bandwidth, each request on its own (the link is not shared). The
request then reaches the front worker (``deliver``), whose prefill runs the image tokens as prompt tokens:
it encodes nothing itself.

Each encoder worker is a SimPy process; the queue is plain Python. Not modeled: splitting one request's images
over several encoder workers, and the pool's own frontend (the image download and preprocessing).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator

import numpy as np
import simpy

from simmodel.config.schema import EncoderSpec, ImageSpec
from simmodel.engine.clock import to_ns
from simmodel.engine.embedding_cache import MIB, EmbeddingCache
from simmodel.engine.request import Request
from simmodel.perf.deployment import Deployment
from simmodel.perf.roofline import Efficiency
from simmodel.perf.vision import embedding_bytes, encode_seconds, image_patches, visual_tokens


class EncoderWorker:
    """One encoder worker: its embedding cache and what it did."""

    def __init__(self, worker_id: int, cache_bytes: int) -> None:
        self.worker_id = worker_id
        self.cache = EmbeddingCache(cache_bytes)
        self.busy_ns = 0
        self.gpu_busy_ns = 0
        """GPU-ns its GPUs worked: every GPU of a sharded tower (``tp``) for the forward; of a replicated one
        (``dp``), only as many as there were images (the slowest one's time each: an upper bound)."""
        self.num_images_encoded = 0
        self.num_forwards = 0


class EncoderPool:
    """The encoder workers of ``engine.encoder`` and their queue (see the module docstring)."""

    def __init__(self, env: simpy.Environment, spec: EncoderSpec, deployment: Deployment, images: ImageSpec,
                 efficiency: Efficiency, deliver: Callable[[Request], None]) -> None:
        tower = deployment.model.vision
        assert tower is not None
        self.env, self.spec, self.deployment, self.images = env, spec, deployment, images
        self.efficiency, self.deliver = efficiency, deliver
        self.tokens_per_image = int(visual_tokens(tower, images.height, images.width))
        self.patches_per_image = int(image_patches(tower, images.height, images.width))
        self.entry_bytes = int(embedding_bytes(tower, self.tokens_per_image))
        self.transfer_ns = to_ns(spec.link_latency_s + self.entry_bytes * images.count / spec.link_bytes_per_s)
        """How long a request's embeddings take over the link."""
        self.workers = [EncoderWorker(w, int(spec.cache_mib * MIB)) for w in range(spec.replicas)]
        self.queue: deque[Request] = deque()
        self._idle: list[simpy.Event] = []
        self.num_sent = 0
        for worker in self.workers:
            env.process(self._run(worker))

    def submit(self, request: Request) -> None:
        """A request arrives at the pool: queued, and a waiting worker woken."""
        self.queue.append(request)
        if self._idle:
            self._idle.pop(0).succeed()

    def _key(self, request_id: int, k: int) -> tuple:
        return ("image", k) if self.images.identity == "shared" else ("image", request_id, k)

    def _take(self) -> list[Request]:
        """The requests at the head of the queue whose images fit one forward (at least the first)."""
        count, batch = self.images.count, [self.queue.popleft()]
        while self.queue and (len(batch) + 1) * count <= self.spec.max_batch_images:
            batch.append(self.queue.popleft())
        return batch

    def _run(self, worker: EncoderWorker) -> Generator:
        env, spec = self.env, self.spec
        tower = self.deployment.model.vision
        while True:
            if not self.queue:
                wake = env.event()
                self._idle.append(wake)
                yield wake
                continue
            batch = self._take()
            encode = 0
            for request in batch:
                request.encoder_worker = worker.worker_id
                request.encode_start_at = env.now
                for k in range(self.images.count):
                    key = self._key(request.request_id, k)
                    if not worker.cache.lookup(key):
                        worker.cache.insert(key, self.entry_bytes)
                        encode += 1
            if encode:
                seconds = encode_seconds(tower, self.deployment.hardware, np.full(encode, self.patches_per_image),
                                         tensor=spec.tensor, encoder_parallel=spec.encoder_parallel,
                                         efficiency=self.efficiency)
                took = to_ns(seconds)
                worker.busy_ns += took
                worker.gpu_busy_ns += took * (spec.tensor if spec.encoder_parallel == "tp" else min(encode, spec.tensor))
                worker.num_images_encoded += encode
                worker.num_forwards += 1
                yield env.timeout(took)
            for request in batch:
                env.process(self._send(request))

    def _send(self, request: Request) -> Generator:
        """A request's embeddings over the link, then the request to the deployment."""
        yield self.env.timeout(self.transfer_ns)
        request.embeddings_at = self.env.now
        self.num_sent += 1
        self.deliver(request)

    def summary(self, end_ns: int) -> dict:
        """The pool's figures over a run that ended at ``end_ns``."""
        hits = sum(w.cache.num_hits for w in self.workers)
        misses = sum(w.cache.num_misses for w in self.workers)
        busy = sum(w.busy_ns for w in self.workers)
        return {
            "workers": len(self.workers), "gpu_count": self.spec.gpu_count,
            "images_encoded": sum(w.num_images_encoded for w in self.workers),
            "forwards": sum(w.num_forwards for w in self.workers),
            "encoder_seconds": busy / 1e9,
            "utilization": busy / (len(self.workers) * end_ns) if end_ns > 0 else None,
            "embedding_cache_hits": hits, "embedding_cache_misses": misses,
            "embedding_cache_hit_ratio": hits / (hits + misses) if hits + misses else None,
            "embedding_bytes_sent": self.num_sent * self.entry_bytes * self.images.count,
            "transfer_ms": self.transfer_ns / 1e6,
        }
