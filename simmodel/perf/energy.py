"""GPU energy of a run: what each GPU draws while a pass runs on it and while it waits.

A GPU held by a serving process draws its idle power (``HardwareSpec.idle_power_w``: context loaded, nothing
running) all the time, and on top of it, while a pass runs, dynamic power in proportion to how busy the
pass keeps its compute units and its memory. The busyness is the pass's own work at datasheet peaks: the
time its kernels' FLOPs would take at the GPU's peak FLOP/s plus the time their bytes would take at its
peak memory bandwidth (``RooflineTiming.work_seconds`` with every efficiency at 1), over the time the rank's
forward actually took, capped at 1:

    u = min(1, (FLOPs / peak FLOP/s + bytes / peak bandwidth) / forward time)
    energy of a rank's pass = GPUs of the rank × (idle × pass time + (board − idle) × u × forward time)

so a pass that keeps both compute and memory saturated, or either one fully, draws the board power limit
(``board_power_w``, the TDP), and a memory-bound decode pass draws in proportion to the bandwidth it uses.
Compute and memory are summed, not the larger one taken: the SMs and the HBM each draw power while they
work, and on the published H100 points (docs/energy.md) the sum is the closer of the two. Collectives,
per-layer floors and the host's share of the pass count as idle time.

The energy comes from the pass's content (its sequences' tokens and context), whichever timing model
priced its duration, so that a fixed or polynomial timing still gets energy figures; it is only as right
as the roofline's FLOPs and bytes and the duration the timing model gives.

Not modelled: host CPUs, DRAM, NICs and switches, cooling (PUE); the KV transfer links and host tiers;
the vision encoder's share of a pass, which counts as fully busy; power capping and clock changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from simmodel.perf.deployment import Deployment
from simmodel.perf.roofline import Efficiency, RooflineTiming
from simmodel.perf.timing import DECODE, NEW_TOKENS, PREFILL, SAMPLED, SUM_COLUMNS, PassSums

JOULES_PER_KWH = 3.6e6


class PassWork(Protocol):
    """Prices the work at datasheet peaks of each row (a rank of a pass) of ``PassSums``, in whole ns."""

    def work_ns(self, sums: PassSums) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class GpuPower:
    """One GPU's board power limit and idle power, W, and how many GPUs a rank of the worker has."""

    board_w: float
    idle_w: float
    gpus_per_rank: int

    @property
    def dynamic_w(self) -> float:
        """What a fully busy GPU draws above idle."""
        return self.board_w - self.idle_w


def gpu_power(deployment: Deployment) -> GpuPower | None:
    """The deployment's GPU power, its rank being ``tensor × prefill_context`` GPUs; None where the GPU system's
    power is not known."""
    hw = deployment.hardware
    if hw.board_power_w is None or hw.idle_power_w is None:
        return None
    return GpuPower(hw.board_power_w, hw.idle_power_w, deployment.tensor * deployment.prefill_context)


FEW_ROWS = 8
"""Rows ``PassEnergy.work_ns`` finishes one by one as Python floats (a pass of a few ranks, pass by pass), as many
as ``engine.clock.clock_ns`` converts that way."""


class PassEnergy:
    """Prices the work of a worker's passes at datasheet peaks (``work_ns``) and turns pass rows into joules.

    ``work_ns`` runs as a pass is priced (the same ``PassSums`` the timing model gets, every rank of every
    pass of a run at once); the joules are computed from the pass rows at the end (``rank_pass_joules``).
    """

    def __init__(self, deployment: Deployment, engine: str = "vllm", work: PassWork | None = None) -> None:
        """``work``: what prices a pass's work instead of the deployment's roofline (an AFD attention rank's,
        which adds its FFN companion's: ``perf.afd.AfdWork``)."""
        self.power = gpu_power(deployment)
        """None where the GPU's power is not known (a system file without it)."""
        self._work = work
        self._peaks = RooflineTiming(deployment, Efficiency(compute=1.0, memory=1.0, expert=1.0), engine=engine)
        self._affine = (None if self._peaks.moe_flops_per_token or self._peaks.window or work is not None
                        else self._affine_terms())

    def _affine_terms(self) -> tuple[np.ndarray, float, float]:
        """A dense model's work is affine in a row's ten sums, plus the weights read by any row that runs a token
        and the LM head's by any row that samples (``RooflineTiming._kernels``). Its terms, read off the model
        itself: each sum's slope (the work of 2 units less that of 1: the fixed terms cancel), then the two fixed
        terms (the work of one unit less its slope), so that ``work_ns`` is one product per pass run."""
        def work(row: np.ndarray) -> float:
            compute, memory = self._peaks.work_seconds(PassSums(row[None, :], np.ones(1)))
            return float(compute[0] + memory[0])

        basis = np.eye(len(SUM_COLUMNS))
        slopes = np.array([work(2 * e) - work(e) for e in basis])
        weights = work(basis[PREFILL + NEW_TOKENS]) - slopes[PREFILL + NEW_TOKENS]
        head = work(basis[PREFILL + SAMPLED]) - slopes[PREFILL + SAMPLED]
        return slopes, weights, head

    def work_ns(self, sums: PassSums) -> np.ndarray:
        """Per row of ``sums``: its compute time plus its memory time at datasheet peaks, whole ns (int64)."""
        if self._work is not None:
            return self._work.work_ns(sums)
        if self._affine is None:  # (MoE: the experts a pass touches grow with the worker's tokens, not affinely)
            compute, memory = self._peaks.work_seconds(sums)
            seconds = compute + memory
        else:
            slopes, weights, head = self._affine
            table = sums.table
            seconds = table @ slopes
            if len(table) <= FEW_ROWS:
                return _few_rows_ns(table, seconds, weights, head)
            seconds += weights * ((table[:, PREFILL + NEW_TOKENS] + table[:, DECODE + NEW_TOKENS]) > 0)
            seconds += head * ((table[:, PREFILL + SAMPLED] + table[:, DECODE + SAMPLED]) > 0)
        return np.rint(seconds * 1e9).astype(np.int64)


def _few_rows_ns(table: np.ndarray, seconds: np.ndarray, weights: float, head: float) -> np.ndarray:
    """``PassEnergy.work_ns`` of a dense model's few rows (a pass of a few ranks; ``seconds``: the product of their
    sums with the slopes; ``weights``, ``head``: the affine terms a row adds when it has new tokens, when it
    samples): the same float64 operations as Python floats, without the arrays' fixed cost (a term not added is one
    the arrays add as 0.0; both round half to even)."""
    ns = []
    for s, row in zip(seconds.tolist(), table.tolist()):
        if row[PREFILL + NEW_TOKENS] + row[DECODE + NEW_TOKENS] > 0:
            s += weights
        if row[PREFILL + SAMPLED] + row[DECODE + SAMPLED] > 0:
            s += head
        ns.append(round(s * 1e9))
    return np.array(ns, np.int64)


def rank_pass_joules(power: GpuPower, duration_ns: np.ndarray, busy_ns: np.ndarray,
                     work_ns: np.ndarray) -> np.ndarray:
    """Joules of rank passes: the rank's GPUs at idle power over the pass (``duration_ns``: the worker's
    pass, the slowest rank's), plus dynamic power over the busy fraction of the rank's own forward
    (``busy_ns``), the fraction being ``work_ns`` over it, at most 1."""
    return power.gpus_per_rank * power.idle_w * duration_ns.astype(np.float64) / 1e9 + dynamic_joules(
        power, busy_ns, work_ns)


def dynamic_joules(power: GpuPower, busy_ns: np.ndarray, work_ns: np.ndarray) -> np.ndarray:
    """Joules rank passes drew above idle: the rank's GPUs at the dynamic power over the busy fraction of the
    rank's forward (``busy_ns``), the fraction being ``work_ns`` over it, at most 1."""
    return power.gpus_per_rank * power.dynamic_w * np.minimum(busy_ns, work_ns).astype(np.float64) / 1e9
