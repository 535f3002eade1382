"""What each pool's router did, for ``summary.json``: per worker, the requests it was sent, their prompt and
output tokens (a prefill worker's: prompt tokens only), its load over the run (the mean number of requests
it ran at once; and the mean number waiting for it, but on a prefill worker), the prompt tokens its prefix
cache served and the hit ratio; and, where the router predicts it (``kv_aware``, ``scored`` with
``prefix-cache``), the cached tokens it expected.

A worker's mean running is Σ (its requests' time from admission to their end) / the run's length (Little's law:
the time average of how many it ran at once); its mean queued likewise from placement to admission. Per role:
aggregated, admitted at ``first_admitted_at`` after being placed at ``queued_at``, ending at ``finished_at``;
a prefill worker runs a request from its admission to ``prefill_done_at``; a decode worker from
``decode_admitted_at`` (placed at ``prefill_done_at``) to ``finished_at``. A request unfinished at the end
counts to the end."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simmodel.config.schema import RouterSpec
    from simmodel.engine.request import Request


SPANS = {"aggregated": ("queued_at", "first_admitted_at", "finished_at"),
         "attention": ("queued_at", "first_admitted_at", "finished_at"),
         "prefill": (None, "first_admitted_at", "prefill_done_at"),
         "decode": ("prefill_done_at", "decode_admitted_at", "finished_at")}
"""Per role, the fields a request is placed, admitted and done at on that role's worker (see the module)."""


def routing_summary(routers: dict[str, RouterSpec], pool_sizes: dict[str, int], requests: list[Request],
                    end_ns: int) -> dict:
    """Per role: the router's type and one row per worker (requests placed there; a P/D prefill worker's
    are those it prefilled, its cache figures the prefill's); the run ends at ``end_ns``."""
    out = {}
    for role, spec in routers.items():
        decode = role == "decode"
        rows = [{"worker": w, "requests": 0, "prompt_tokens": 0} for w in range(pool_sizes[role])]
        if role != "prefill":  # (a prefill worker samples no output of the client's)
            for row in rows:
                row["output_tokens"] = 0
        cached = [0] * len(rows)
        predicted = [0] * len(rows)
        running, queued = [0] * len(rows), [0] * len(rows)
        placed_at, admitted_at, done_at = SPANS[role]
        predicts = False
        for r in requests:
            w = r.prefill_worker if role == "prefill" else r.worker
            if w < 0:
                continue
            row = rows[w]
            row["requests"] += 1
            row["prompt_tokens"] += r.num_prompt_tokens
            if role != "prefill":
                row["output_tokens"] += r.num_output_tokens
            cached[w] += r.num_cached_tokens
            admitted = getattr(r, admitted_at)
            if admitted is not None:
                done = getattr(r, done_at)
                running[w] += min(end_ns, end_ns if done is None else done) - admitted
                if placed_at is not None:
                    queued[w] += admitted - getattr(r, placed_at)
            elif placed_at is not None and getattr(r, placed_at) is not None:
                queued[w] += end_ns - getattr(r, placed_at)
            if r.predicted_cached_tokens is not None and not decode:
                predicted[w] += r.predicted_cached_tokens
                predicts = True
        for row, busy, waited in zip(rows, running, queued):
            row["mean_running"] = busy / end_ns if end_ns else 0.0
            if placed_at is not None:
                row["mean_queued"] = waited / end_ns if end_ns else 0.0
        if not decode:  # (a decode worker's cache is not what served the prompt)
            for row, hits, expected in zip(rows, cached, predicted):
                row["cached_tokens"] = hits
                row["hit_ratio"] = hits / row["prompt_tokens"] if row["prompt_tokens"] else None
                if predicts:
                    row["predicted_cached_tokens"] = expected
        out[role] = {"type": spec.type, "workers": rows}
    return out
