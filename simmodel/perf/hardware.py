"""GPU systems by id: the datasheet figures the simulator prices and sizes KV with.

Figures are NVIDIA SXM datasheet values (dense BF16 TFLOPS without sparsity, HBM bandwidth and
capacity in decimal units), as in the reference's "Datasheet assumptions" table: H100 SXM and H200
SXM from the H100/H200 product briefs, A100 SXM 80GB from the A100 datasheet.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HardwareSpec:
    """One GPU of a system."""

    system_id: str
    memory_bytes: float
    bf16_flops: float
    hbm_bytes_per_s: float


HARDWARE: dict[str, HardwareSpec] = {
    "a100_sxm": HardwareSpec("a100_sxm", 80e9, 312e12, 2.039e12),
    "h100_sxm": HardwareSpec("h100_sxm", 80e9, 989e12, 3.35e12),
    "h200_sxm": HardwareSpec("h200_sxm", 141e9, 989e12, 4.8e12),
}
