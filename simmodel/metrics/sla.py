"""Goodput and SLA attainment: which completed requests met every latency bound of an ``Sla``.

One computation for ``simmodel run``'s summary (a scenario's ``evaluation.sla``) and for a search's
candidates (``simmodel recommend``), so that both call the same requests good.
"""

from __future__ import annotations

import numpy as np

from simmodel.config.schema import Sla

CLOCK_MS = 1e-6
"""The simulated clock's resolution (1 ns) in ms: a latency over a bound by less than that is the float
error of taking it from times in seconds (0.14 − 0.06 s is 80.00000000000001 ms), not a miss."""
TOLERANCE = 1e-12
"""Attainment within this of the required fraction meets it (9 of 10 is 0.9, whatever its last bit)."""


def good_requests(sla: Sla, ttft_ms: np.ndarray, tpot_ms: np.ndarray, e2e_ms: np.ndarray) -> np.ndarray:
    """Which completed requests meet every bound (inclusive), given their latencies in ms. A request
    with no such value (one output token: no TPOT) meets that bound; so does one over it by less than the
    clock's resolution (``CLOCK_MS``)."""
    good = np.ones(len(ttft_ms), dtype=bool)
    for bound, values in ((sla.ttft_ms, ttft_ms), (sla.tpot_ms, tpot_ms), (sla.e2e_ms, e2e_ms)):
        if bound is not None:
            good &= ~(np.asarray(values, dtype=np.float64) > bound + CLOCK_MS)
    return good


def sla_figures(sla: Sla, ttft_ms: np.ndarray, tpot_ms: np.ndarray, e2e_ms: np.ndarray,
                duration_s: float) -> dict:
    """Goodput (good requests per second of ``duration_s``, the run's first arrival to its last token;
    None when 0), attainment (the good fraction of the completed requests given; None when there are
    none), the required fraction, and whether attainment meets it."""
    good = good_requests(sla, ttft_ms, tpot_ms, e2e_ms)
    attainment = float(good.mean()) if len(good) else None
    return {
        "goodput_rps": int(good.sum()) / duration_s if duration_s else None,
        "sla_attainment": attainment,
        "required_attainment": sla.attainment,
        "sla_met": attainment is not None and attainment >= sla.attainment - TOLERANCE,
    }


def sla_summary(sla: Sla, requests, duration_s: float) -> dict:
    """The summary's ``sla`` object: the targets, then ``sla_figures`` over the completed requests of a
    ``RequestTable``."""
    done = requests.column("status") == "completed"
    figures = sla_figures(sla, *(requests.column(c)[done] for c in ("ttft_ms", "tpot_ms", "e2e_ms")), duration_s)
    return {"ttft_ms": sla.ttft_ms, "tpot_ms": sla.tpot_ms, "e2e_ms": sla.e2e_ms, **figures}
