"""``engine.encoder``: the encoder pool of EPD serving (encode, prefill, decode), which runs the vision tower on
the requests' images before their prompts reach the workers (``simmodel.engine.encoder_pool``). Image traffic
takes either this path or the front worker's own encoder (SGLang's ``vision``), never both."""

from __future__ import annotations

from simmodel.config.bounds import MAX_INT, MAX_PARALLEL
from simmodel.config.links import parse_link
from simmodel.config.node import _Node
from simmodel.config.schema import EncoderSpec
from simmodel.errors import ScenarioError
from simmodel.perf.hardware import HardwareSpec
from simmodel.perf.models import ModelSpec

MAX_BATCH_IMAGES = 4096


def parse_encoder(node: _Node, hardware: HardwareSpec, model: ModelSpec) -> EncoderSpec:
    """``engine.encoder``: ``parallelism`` (``replicas``, ``tensor``), ``encoder_parallel``, ``max_batch_images``
    (SGLang's encoder server batches 8 by default, ``SGLANG_ENCODER_MAX_BATCH_SIZE``), ``cache_mib`` and
    ``link``."""
    p = node.node("parallelism")
    for key in p.data:
        if key not in ("replicas", "tensor"):
            raise ScenarioError(f"{p.at(key)}: an encoder worker takes replicas and tensor only")
    replicas = p.int("replicas", 1, maximum=MAX_INT)
    tensor = p.int("tensor", 1, maximum=MAX_PARALLEL["tensor"])
    p.done()
    layout = node.choice("encoder_parallel", ("tp", "dp"), "tp")
    tower = model.vision
    if tower is not None and layout == "tp" and tower.num_heads % tensor:
        raise ScenarioError(f"{p.at('tensor')}: the vision tower's {tower.num_heads} attention heads are sharded over "
                            f"the encoder's GPUs (encoder_parallel tp), so tensor must divide them; got {tensor}")
    batch = node.int("max_batch_images", 8, maximum=MAX_BATCH_IMAGES)
    cache = node.number("cache_mib", 100.0, maximum=1e9)
    bandwidth, latency = parse_link(node.node("link"), hardware)
    node.done()
    return EncoderSpec(replicas, tensor, layout, batch, cache, bandwidth, latency)
