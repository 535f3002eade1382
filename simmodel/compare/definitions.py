"""The simulated side of a comparison: each measured figure's quantity, computed from a run the way the
tool that measured it defines it (``docs/compare.md`` says how each tool defines ITL and TPOT).

A simulated request streams one token per chunk, so "gaps between streamed chunks" are the gaps between
its tokens (speculative decoding's tokens of one step arrive together: a zero gap each).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

DEFINITIONS = {
    "ttft": "send → first token, per completed request",
    "ttft_multi_token": "send → first token, per completed request with more than one output token "
                        "(inference-perf records TTFT only for those)",
    "tpot_per_request": "(last token − first token) / (output tokens − 1) per completed request with at least "
                        "2 tokens, every request weighing the same",
    "itl_per_request_weighted": "(last token − first token) / (output tokens − 1) per completed request, "
                                "weighted by output tokens − 1 (GuideLLM's inter-token latency)",
    "tpot_guidellm": "(last token − send) / output tokens per completed request, weighted by output tokens "
                     "(GuideLLM's time per output token, TTFT included)",
    "itl_pooled": "every gap between consecutive tokens of every request, pooled",
    "ntpot": "request latency / output tokens per completed request (inference-perf's normalized TPOT)",
    "decode_step_from_means": "(mean E2E − mean TTFT) / (mean output tokens − 1) over completed requests, TTFT's "
                              "mean over those with more than one token, the tokens as the measuring tool counted "
                              "them (the decode step, from inference-perf's aggregate means, in place of its "
                              "chunk-timed TPOT and ITL)",
    "e2e": "send → last token, per completed request",
    "request_throughput": "completed requests / (first send → last token)",
    "output_throughput": "output tokens / (first send → last token)",
}


@dataclass
class SimulatedScope:
    """What a comparison reads of the run, or of one stage of it."""

    requests: pd.DataFrame
    """Every request of the scope (the definitions keep the completed ones)."""
    itl_values_ms: np.ndarray
    itl_counts: np.ndarray
    request_throughput: float | None
    output_throughput: float | None


def samples(definition: str, scope: SimulatedScope,
            tokens: float | None = None) -> tuple[np.ndarray, np.ndarray] | float | None:
    """The definition's per-request (or pooled) values and their weights, or a single value (rates).
    ``tokens``: for ``decode_step_from_means``, the measuring tool's mean output count, divided by in place
    of the simulated one (see ``measured.Figure.tokens``)."""
    if definition == "request_throughput":
        return scope.request_throughput
    if definition == "output_throughput":
        return scope.output_throughput
    if definition == "itl_pooled":
        return scope.itl_values_ms, scope.itl_counts
    done = scope.requests[scope.requests["status"] == "completed"]
    n = done["output_tokens"].to_numpy(dtype=np.float64)
    if definition == "decode_step_from_means":
        return _decode_step_from_means(done["e2e_ms"].to_numpy(dtype=np.float64),
                                       done["ttft_ms"].to_numpy(dtype=np.float64)[n > 1],
                                       float(n.mean()) if tokens is None else tokens)
    if definition == "ttft":
        values = done["ttft_ms"].to_numpy(dtype=np.float64)
    elif definition == "ttft_multi_token":
        values = done["ttft_ms"].to_numpy(dtype=np.float64)[n > 1]
    elif definition in ("tpot_per_request", "itl_per_request_weighted"):
        keep = n > 1
        values = done["tpot_ms"].to_numpy(dtype=np.float64)[keep]
        if definition == "itl_per_request_weighted":
            return values, (n[keep] - 1).astype(np.int64)
    elif definition == "tpot_guidellm":
        keep = n > 0
        values = (done["e2e_ms"].to_numpy(dtype=np.float64) / np.maximum(n, 1))[keep]
        return values, n[keep].astype(np.int64)
    elif definition == "ntpot":
        keep = n > 0
        values = (done["e2e_ms"].to_numpy(dtype=np.float64) / np.maximum(n, 1))[keep]
    elif definition == "e2e":
        values = done["e2e_ms"].to_numpy(dtype=np.float64)
    else:
        raise KeyError(definition)
    return values, np.ones(len(values), dtype=np.int64)


def _decode_step_from_means(e2e_ms: np.ndarray, ttft_ms: np.ndarray, tokens: float) -> float | None:
    """(mean E2E − mean TTFT) / (mean output tokens − 1), in ms; None without requests or tokens ≤ 1."""
    if not len(e2e_ms) or not len(ttft_ms) or tokens <= 1:
        return None
    return float((e2e_ms.mean() - ttft_ms.mean()) / (tokens - 1))


def statistic(values: np.ndarray, weights: np.ndarray, stat: str, nearest_rank: bool = False) -> float | None:
    """``mean``, ``median``, ``std`` (population), ``min``, ``max`` or ``pQ`` of ``values[i]`` counted
    ``weights[i]`` times: percentiles interpolate linearly as numpy's do on the expanded values, or take
    the nearest rank of the weighted distribution (GuideLLM)."""
    keep = weights > 0
    values, weights = values[keep].astype(np.float64), weights[keep].astype(np.float64)
    if not len(values):
        return None
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    total = weights.sum()
    mean = float(np.dot(values, weights) / total)
    if stat == "mean":
        return mean
    if stat == "std":
        return float(np.sqrt(np.dot((values - mean) ** 2, weights) / total))
    if stat == "min":
        return float(values[0])
    if stat == "max":
        return float(values[-1])
    q = 50.0 if stat == "median" else float(stat[1:])
    ends = np.cumsum(weights)
    if nearest_rank:
        return float(values[min(int(np.searchsorted(ends, q / 100 * total, side="left")), len(values) - 1)])
    pos = q / 100 * (total - 1)
    lo = int(np.floor(pos))
    hi = min(lo + 1, int(total) - 1)
    v_lo = values[np.searchsorted(ends, lo, side="right")]
    v_hi = values[np.searchsorted(ends, hi, side="right")]
    return float(v_lo + (v_hi - v_lo) * (pos - lo))
