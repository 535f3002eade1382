"""GPU systems by id: the datasheet figures the performance model prices and sizes KV with.

Peaks are dense (no sparsity) and decimal (1 TB/s = 1e12 B/s), per GPU, from the vendors' datasheets:
NVIDIA A100 (80 GB SXM), H100 SXM5, H200 SXM, HGX/DGX B200, GB200 NVL72 and L40S product briefs; AMD
Instinct MI300X data sheet. Link bandwidths are per GPU and per direction (NVLink 4: 900 GB/s both ways
→ 450 GB/s each way). A100 has no FP8 units, so FP8 runs at its BF16 rate there.

A system file (``engine.hardware: ./my_gpu.yaml``) gives the same fields; see docs/configuration.md.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class HardwareSpec:
    """One GPU of a system, and the links between GPUs."""

    system_id: str
    memory_bytes: float
    bf16_flops: float
    fp8_flops: float
    hbm_bytes_per_s: float
    intra_node_bytes_per_s: float
    """NVLink / xGMI bandwidth per GPU and direction (PCIe where the GPUs have no such link)."""
    intra_node_latency_s: float
    """Latency of one collective step over that link."""
    pcie_bytes_per_s: float
    nic_bytes_per_s: float
    gpus_per_node: int

    def peak_flops(self, dtype_bytes: float) -> float:
        """Dense tensor-core peak for a GEMM whose operands are ``dtype_bytes`` wide."""
        return self.fp8_flops if dtype_bytes <= 1 else self.bf16_flops


HARDWARE_FIELDS = tuple(f.name for f in fields(HardwareSpec))

_GB, _TB, _TF = 1e9, 1e12, 1e12
# NVLink collectives pay a few microseconds per step (NCCL's low-latency protocol on one node).
_NVLINK_LATENCY_S = 3e-6
_PCIE_LATENCY_S = 10e-6

HARDWARE: dict[str, HardwareSpec] = {h.system_id: h for h in (
    HardwareSpec("a100_sxm", 80 * _GB, 312 * _TF, 312 * _TF, 2.039 * _TB, 300 * _GB, _NVLINK_LATENCY_S,
                 32 * _GB, 25 * _GB, 8),
    HardwareSpec("h100_sxm", 80 * _GB, 989 * _TF, 1979 * _TF, 3.35 * _TB, 450 * _GB, _NVLINK_LATENCY_S,
                 64 * _GB, 50 * _GB, 8),
    HardwareSpec("h200_sxm", 141 * _GB, 989 * _TF, 1979 * _TF, 4.8 * _TB, 450 * _GB, _NVLINK_LATENCY_S,
                 64 * _GB, 50 * _GB, 8),
    HardwareSpec("b200_sxm", 180 * _GB, 2250 * _TF, 4500 * _TF, 8.0 * _TB, 900 * _GB, _NVLINK_LATENCY_S,
                 64 * _GB, 50 * _GB, 8),
    HardwareSpec("gb200", 186 * _GB, 2500 * _TF, 5000 * _TF, 8.0 * _TB, 900 * _GB, _NVLINK_LATENCY_S,
                 64 * _GB, 50 * _GB, 72),
    HardwareSpec("l40s", 48 * _GB, 362 * _TF, 733 * _TF, 0.864 * _TB, 32 * _GB, _PCIE_LATENCY_S,
                 32 * _GB, 25 * _GB, 8),
    HardwareSpec("mi300x", 192 * _GB, 1307 * _TF, 2615 * _TF, 5.3 * _TB, 448 * _GB, _NVLINK_LATENCY_S,
                 64 * _GB, 50 * _GB, 8),
)}
