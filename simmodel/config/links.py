"""A link between two pools of GPUs that is not a P/D KV transfer: ``{bandwidth_gb_per_second, latency_ms}``, as
AFD's activations (``engine.afd.link``) and an encoder pool's embeddings (``engine.encoder.link``) travel."""

from __future__ import annotations

from simmodel.config.node import _Node
from simmodel.perf.hardware import HardwareSpec

DEFAULT_LINK_LATENCY_MS = 0.01
"""An RDMA message's latency (assumed, as the default timing's collective over the NIC)."""


def parse_link(node: _Node, hardware: HardwareSpec) -> tuple[float, float]:
    """(bytes/s per GPU and direction, latency in s): by default the GPU's NIC and ``DEFAULT_LINK_LATENCY_MS``."""
    bandwidth = node.number("bandwidth_gb_per_second", hardware.nic_bytes_per_s / 1e9, positive=True, maximum=1e6)
    latency = node.number("latency_ms", DEFAULT_LINK_LATENCY_MS, maximum=1e3)
    node.done()
    return bandwidth * 1e9, latency / 1000.0
