"""What the SLA planner observes of a pool over its last interval: the requests that arrived (their rate and mean
prompt), the mean output of those that finished, and the pool's own passes, fitted (``sla.fit_passes``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from simmodel.scaling.sla import PassFit, fit_passes

if TYPE_CHECKING:
    from simmodel.engine.request import Request

FIELDS = ("start_ns", "end_ns", "num_decode_seqs", "num_prefill_tokens")


class Observation(NamedTuple):
    rate: float
    """Requests a second that arrived in the interval."""
    isl: float
    osl: float
    fit: PassFit
    ttft_s: float | None
    """Mean time to first token of the requests whose first token came in the interval (None: none did)."""


def observe(role: str, requests: list[Request], passes, t0: int, t1: int) -> Observation | None:
    """The interval [t0, t1) as the planner sees it, or None when it cannot tell (no arrival, no finish, or too
    few of the pool's passes to fit)."""
    arrived = [r for r in requests if t0 <= r.arrived_at < t1]
    finished = [r for r in requests if r.finished_at is not None and t0 <= r.finished_at < t1
                and r.num_output_tokens > 0]
    if not arrived or not finished:
        return None
    roles = passes.role
    rows: list[list[np.ndarray]] = [[] for _ in FIELDS]
    for first, arrays in passes.chunks(FIELDS):
        end = arrays[1]
        mine = (end >= t0) & (end < t1)
        if not mine.any():
            continue
        mine &= np.fromiter((name == role for name in roles[first:first + len(end)]), bool, len(end))
        for column, array in zip(rows, arrays):
            column.append(array[mine])
    if not rows[0]:
        return None
    start, end, decodes, tokens = (np.concatenate(column) for column in rows)
    fit = fit_passes(decodes, tokens, (end - start) / 1e9)
    if fit is None:
        return None
    firsts = [r.first_token_at - r.arrived_at for r in requests
              if r.first_token_at is not None and t0 <= r.first_token_at < t1]
    return Observation(len(arrived) / ((t1 - t0) / 1e9), float(np.mean([r.num_prompt_tokens for r in arrived])),
                       float(np.mean([r.num_output_tokens for r in finished])), fit,
                       float(np.mean(firsts)) / 1e9 if firsts else None)
