"""GPU systems by id: the datasheet figures the performance model prices and sizes KV with.

Peaks are dense (no sparsity) and decimal (1 TB/s = 1e12 B/s), per GPU. Link bandwidths are per GPU and
per direction (NVLink 4: 900 GB/s both ways → 450 GB/s each way; PCIe Gen5 x16: 128 → 64 GB/s). Sources:

- ``a100_sxm``: NVIDIA A100 datasheet (80 GB SXM): 312 TF BF16, 2,039 GB/s, NVLink 3 600 GB/s, PCIe Gen4.
  A100 has no FP8 units, so FP8 runs at its BF16 rate.
- ``h100_sxm`` / ``h200_sxm``: NVIDIA H100 and H200 product briefs (SXM): 989 TF BF16, 1,979 TF FP8;
  80 GB at 3.35 TB/s and 141 GB at 4.8 TB/s; NVLink 4 900 GB/s; PCIe Gen5.
- ``b200_sxm``: NVIDIA HGX B200 specifications, per GPU: 4.5 PF FP16/BF16 and 9 PF FP8 *with sparsity*
  (2.25 and 4.5 PF dense), 180 GB HBM3e at 7.7 TB/s (62 TB/s for 8 GPUs; the earlier DGX B200
  datasheet's 64 TB/s would give 8 TB/s), NVLink 5 1.8 TB/s.
- ``gb200``: NVIDIA GB200 NVL72 specifications, per GPU: 5 PF BF16 and 10 PF FP8 with sparsity (2.5 and
  5 PF dense), 186 GB HBM3e at 8 TB/s, NVLink 5 1.8 TB/s across the 72-GPU NVLink domain.
- ``l40s``: NVIDIA L40S datasheet: 362 TF BF16 and 733 TF FP8 dense (733 / 1,466 with sparsity), 48 GB
  GDDR6 at 864 GB/s; no NVLink, so GPUs talk over PCIe Gen4 x16 (64 GB/s both ways).
- ``mi300x``: AMD Instinct MI300X data sheet: 1,307 TF BF16 and 2,615 TF FP8 dense, 192 GB HBM3 at
  5.3 TB/s; Infinity Fabric (xGMI) 7 peer links × 128 GB/s both ways = 896 → 448 GB/s each way.

NIC bandwidth is one 400 Gb/s ConnectX-7 per GPU (200 Gb/s HDR on A100 and L40S systems), as in the DGX
reference designs. Link latencies are assumptions, not datasheet values.

Board and idle power (``POWER``) are for the energy model (``simmodel.perf.energy``).

A system file (``engine.hardware: ./my_gpu.yaml``) gives the same fields; see ``hardware_from_yaml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from simmodel.config.yaml_safe import problem_line, safe_load
from simmodel.errors import ScenarioError


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
    int8_ops: float | None = None
    """Dense INT8 tensor-core peak (OP/s), for W8A8 weights (``engine.dtype: int8``); None: not known."""
    fp4_flops: float | None = None
    """Dense FP4 tensor-core peak (FLOP/s), for NVFP4 and MXFP4 weights on GPUs that have FP4 units (Blackwell);
    None: none, so FP4 weights are dequantized to BF16 in the GEMM (weight-only)."""
    board_power_w: float | None = None
    """The GPU's board power limit (TDP / TBP), W: what a pass whose kernels keep the GPU's compute and memory
    fully busy draws (``perf.energy``). None: not known (a system file without it has no energy figures)."""
    idle_power_w: float | None = None
    """What the GPU draws, W, while a serving process holds it (its CUDA context and weights loaded) and runs
    nothing: between passes, and on a worker with no work."""
    registry: bool = False
    """One of the registry's own systems (``HARDWARE``), whose measured figures the default timing uses where
    it has them (``roofline.ACHIEVED``, ``roofline.ALL_REDUCE``); a system file's is not, whatever its
    ``system_id`` and figures."""

    def peak_flops(self, dtype_bytes: float) -> float:
        """Dense tensor-core peak for a GEMM whose operands are ``dtype_bytes`` wide."""
        return self.fp8_flops if dtype_bytes <= 1 else self.bf16_flops

    def gemm_peak(self, kind: str) -> float | None:
        """Dense tensor-core peak of a GEMM kind (``bf16``, ``fp8``, ``int8``, ``fp4``); None: no such units."""
        return {"bf16": self.bf16_flops, "fp8": self.fp8_flops, "int8": self.int8_ops, "fp4": self.fp4_flops}[kind]


HARDWARE_FIELDS = tuple(f.name for f in fields(HardwareSpec) if f.name != "registry")
"""The fields of a system file."""
POWER_FIELDS = ("board_power_w", "idle_power_w")
"""The fields a system file may leave out (both or neither): without them its runs have no energy figures."""
OPTIONAL_FIELDS = ("int8_ops", "fp4_flops", *POWER_FIELDS)
"""The fields a system file may leave out: a GPU without INT8 or FP4 units, or whose power is not known."""

_GB, _TB, _TF = 1e9, 1e12, 1e12
# Not datasheet values: a small all-reduce over NVLink / xGMI costs about 5 µs (vLLM's custom all-reduce,
# 4.2–6.6 µs up to 64 KB at TP 2–8 in aiconfigurator's H100/H200 tables); PCIe peer-to-peer more (assumed).
# The default timing uses them only for systems whose all-reduce was not measured (``roofline.ALL_REDUCE``
# has the measured ones, a step latency and a link fraction by group size).
_LINK_S, _PCIE_S = 5e-6, 10e-6

LOW_PRECISION: dict[str, tuple[float, float | None]] = {
    "a100_sxm": (624 * _TF, None),
    "h100_sxm": (1979 * _TF, None),
    "h200_sxm": (1979 * _TF, None),
    "b200_sxm": (4500 * _TF, 9000 * _TF),
    "gb200": (5000 * _TF, 10000 * _TF),
    "l40s": (733 * _TF, None),
    "mi300x": (2615 * _TF, None),
}
"""Per system: dense INT8 tensor-core OP/s and dense FP4 FLOP/s (None: no FP4 units), from the same data sheets
as the peaks above, each the half of the "with sparsity" figure: A100 624 TOPS (1,248 sparse), H100 and H200
1,979 (3,958), L40S 733 (1,466), MI300X 2,615 (5,230); HGX B200 4.5 POPS INT8 and 9 PFLOPS FP4 (9 and 18
sparse), GB200 NVL72 5 and 10 (10 and 20 sparse) per GPU. Hopper, Ampere, Ada and CDNA3 have no FP4 units."""

POWER: dict[str, tuple[float, float]] = {
    "a100_sxm": (400.0, 80.0),
    "h100_sxm": (700.0, 121.7),
    "h200_sxm": (700.0, 121.7),
    "b200_sxm": (1000.0, 174.0),
    "gb200": (1200.0, 209.0),
    "l40s": (350.0, 102.0),
    "mi300x": (750.0, 130.0),
}
"""Per system: (board power limit, idle power) in W (docs/research/energy-sources.md has every source).
Board power from the data sheets: A100 SXM 400 W, H100 and H200 SXM 700 W, L40S 350 W, MI300X 750 W;
HGX B200 1,000 W and GB200 NVL72 1,200 W per GPU (NVIDIA's Blackwell data sheet as summarised by
G. Klockwood, the B200 figure also in the ML.ENERGY Leaderboard and an MLPerf v6.0 system description).
No data sheet gives idle power. Measured with a CUDA context held (S. S. Vadari, "The Model Parking Tax",
arXiv:2605.23918): H100 121.7 W, A100 80.0 W, L40S 102.0 W. H200 takes H100's (the same GH100 die and 700 W
board; a vendor page's 80.3 W did not say how it was taken). B200, GB200 and MI300X: no measurement found;
H100's fraction of its limit (17.4 %) is assumed, an assumption a system file can replace."""

HARDWARE: dict[str, HardwareSpec] = {h.system_id: replace(h, registry=True, board_power_w=POWER[h.system_id][0],
                                                          idle_power_w=POWER[h.system_id][1],
                                                          int8_ops=LOW_PRECISION[h.system_id][0],
                                                          fp4_flops=LOW_PRECISION[h.system_id][1]) for h in (
    #            id          memory     BF16        FP8         HBM          GPU link   latency  PCIe      NIC      GPUs
    HardwareSpec("a100_sxm", 80 * _GB,  312 * _TF,  312 * _TF,  2.039 * _TB, 300 * _GB, _LINK_S, 32 * _GB, 25 * _GB, 8),
    HardwareSpec("h100_sxm", 80 * _GB,  989 * _TF,  1979 * _TF, 3.35 * _TB,  450 * _GB, _LINK_S, 64 * _GB, 50 * _GB, 8),
    HardwareSpec("h200_sxm", 141 * _GB, 989 * _TF,  1979 * _TF, 4.8 * _TB,   450 * _GB, _LINK_S, 64 * _GB, 50 * _GB, 8),
    HardwareSpec("b200_sxm", 180 * _GB, 2250 * _TF, 4500 * _TF, 7.7 * _TB,   900 * _GB, _LINK_S, 64 * _GB, 50 * _GB, 8),
    HardwareSpec("gb200",    186 * _GB, 2500 * _TF, 5000 * _TF, 8 * _TB,     900 * _GB, _LINK_S, 64 * _GB, 50 * _GB, 72),
    HardwareSpec("l40s",     48 * _GB,  362 * _TF,  733 * _TF,  0.864 * _TB, 32 * _GB,  _PCIE_S, 32 * _GB, 25 * _GB, 8),
    HardwareSpec("mi300x",   192 * _GB, 1307 * _TF, 2615 * _TF, 5.3 * _TB,   448 * _GB, _LINK_S, 64 * _GB, 50 * _GB, 8),
)}


def hardware_from_yaml(path: Path) -> HardwareSpec:
    """Read a user system file: a YAML mapping of every ``HardwareSpec`` field.

    Units are the dataclass's: bytes, FLOP/s, bytes/s, seconds. ``system_id`` is optional (default: the
    file's stem). Numbers must be finite and within each field's physical range (``_RANGES``: memory
    1 MB to 100 TB, peaks 1 GFLOP/s to 1 EFLOP/s, bandwidths 1 MB/s to 1 PB/s, latency 1 ns to 1 s);
    ``gpus_per_node`` an integer from 1 to 100,000. A number YAML reads as text
    (``989e12``, which YAML 1.1 does not take for a float) is accepted.

    Raises:
        ScenarioError: one line naming the file and the field at fault.
    """
    where = str(path)
    try:
        data = safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(f"{where}: system file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{where}: cannot read the system file ({exc})") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{where}: not valid YAML ({problem_line(exc)})") from None
    except Exception as exc:  # noqa: BLE001 (PyYAML's constructors: `!!int x`, 5,000 digits, nesting too deep)
        raise ScenarioError(f"{where}: not valid YAML ({' '.join(str(exc).split())[:120]})") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: a system file must be a YAML mapping of {', '.join(HARDWARE_FIELDS)}")
    unknown = sorted(str(k) for k in data if k not in HARDWARE_FIELDS)
    if unknown:
        raise ScenarioError(f"{where}: unknown field {unknown[0]} (fields: {', '.join(HARDWARE_FIELDS)})")
    system_id = data.get("system_id", path.stem)
    if not isinstance(system_id, str) or not system_id:
        raise ScenarioError(f"{where}: system_id must be a non-empty string, got {system_id!r}")
    values: dict[str, Any] = {"system_id": system_id}
    for name in HARDWARE_FIELDS[1:]:
        if name not in data:
            if name in OPTIONAL_FIELDS:
                continue
            raise ScenarioError(f"{where}: missing {name}")
        values[name] = _positive(where, name, data[name], integer=name == "gpus_per_node")
    given = [name for name in POWER_FIELDS if name in values]
    if len(given) == 1:
        missing = next(name for name in POWER_FIELDS if name not in values)
        raise ScenarioError(f"{where}: {given[0]} needs {missing} too (both, or neither: no energy figures)")
    if given and values["idle_power_w"] > values["board_power_w"]:
        raise ScenarioError(f"{where}: idle_power_w ({values['idle_power_w']:g}) must not exceed board_power_w "
                            f"({values['board_power_w']:g})")
    return HardwareSpec(**values)


# Each field's physical range: (lowest, highest, how the message says it). Generous on both sides (a
# 2026 GPU has ~0.2 TB, ~5e15 FLOP/s, ~8e12 B/s) so every real or planned system fits, while a typo of
# many orders of magnitude (1e300 bytes, 1e-300 B/s) fails here instead of overflowing the model's sums.
_RANGES: dict[str, tuple[float, float, str]] = {
    "memory_bytes": (1e6, 1e14, "bytes per GPU, 1 MB to 100 TB"),
    "bf16_flops": (1e9, 1e18, "FLOP/s, 1 GFLOP/s to 1 EFLOP/s"),
    "fp8_flops": (1e9, 1e18, "FLOP/s, 1 GFLOP/s to 1 EFLOP/s"),
    "hbm_bytes_per_s": (1e6, 1e15, "bytes/s, 1 MB/s to 1 PB/s"),
    "intra_node_bytes_per_s": (1e6, 1e15, "bytes/s, 1 MB/s to 1 PB/s"),
    "intra_node_latency_s": (1e-9, 1.0, "seconds, 1 ns to 1 s"),
    "pcie_bytes_per_s": (1e6, 1e15, "bytes/s, 1 MB/s to 1 PB/s"),
    "nic_bytes_per_s": (1e6, 1e15, "bytes/s, 1 MB/s to 1 PB/s"),
    "gpus_per_node": (1, 100_000, "GPUs in one GPU-link domain, 1 to 100,000"),
    "int8_ops": (1e9, 1e18, "OP/s, 1 GOP/s to 1 EOP/s"),
    "fp4_flops": (1e9, 1e18, "FLOP/s, 1 GFLOP/s to 1 EFLOP/s"),
    "board_power_w": (1.0, 1e5, "W, 1 W to 100 kW"),
    "idle_power_w": (0.1, 1e5, "W, 0.1 W to 100 kW"),
}


def _positive(where: str, name: str, value: Any, *, integer: bool) -> float | int:
    """Check one field: a finite number within its physical range (an integer for counts)."""
    low, high, rule = _RANGES[name]
    if integer:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ScenarioError(f"{where}: {name} must be an integer from {low:,} to {high:,} ({rule}), "
                                f"got {_shown(value)}")
        return value
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if (isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number)
            or not low <= number <= high):
        raise ScenarioError(f"{where}: {name} must be a number from {low:g} to {high:g} ({rule}), "
                            f"got {_shown(value)}")
    return float(number)


def _shown(value: Any) -> str:
    """A value for a message, cut short (an integer of 5,000 digits is not printed whole)."""
    try:
        text = repr(value)
    except ValueError:  # an int above Python's 4,300-digit str limit
        return "a value too large to show"
    return text if len(text) <= 60 else text[:57] + "..."
