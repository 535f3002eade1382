"""What each pool's router did, for ``summary.json``: per worker, the requests it was sent, their prompt and
output tokens (a prefill worker's: prompt tokens only), the prompt tokens its prefix cache served and the hit ratio; and, where the router predicts
it (``kv_aware``, ``scored`` with ``prefix-cache``), the cached tokens it expected."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simmodel.config.schema import RouterSpec
    from simmodel.engine.request import Request


def routing_summary(routers: dict[str, RouterSpec], pool_sizes: dict[str, int], requests: list[Request]) -> dict:
    """Per role: the router's type and one row per worker (requests placed there; a P/D prefill worker's
    are those it prefilled, its cache figures the prefill's)."""
    out = {}
    for role, spec in routers.items():
        decode = role == "decode"
        rows = [{"worker": w, "requests": 0, "prompt_tokens": 0} for w in range(pool_sizes[role])]
        if role != "prefill":  # (a prefill worker samples no output of the client's)
            for row in rows:
                row["output_tokens"] = 0
        cached = [0] * len(rows)
        predicted = [0] * len(rows)
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
            if r.predicted_cached_tokens is not None and not decode:
                predicted[w] += r.predicted_cached_tokens
                predicts = True
        if not decode:  # (a decode worker's cache is not what served the prompt)
            for row, hits, expected in zip(rows, cached, predicted):
                row["cached_tokens"] = hits
                row["hit_ratio"] = hits / row["prompt_tokens"] if row["prompt_tokens"] else None
                if predicts:
                    row["predicted_cached_tokens"] = expected
        out[role] = {"type": spec.type, "workers": rows}
    return out
