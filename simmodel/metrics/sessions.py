"""Per-session metrics of an agentic workload (``traffic.source.type: agentic``).

A session's time runs from its start to its last call's answer. Its engine time is the time with at least one of
its calls sent and not answered; the rest is spent waiting on tools and on the user (the trace's waits). Its
prefix-cache hit ratio is the prompt tokens its calls found cached over all its calls' prompt tokens: what makes
or breaks such workloads, since each call resends the session's context.
"""

from __future__ import annotations

import numpy as np

from simmodel.metrics.summarize import weighted_stats


def session_summary(states: list, prompt_tokens: dict[int, int], cached_tokens: dict[int, int]) -> dict:
    """The ``sessions`` block of the summary from the sessions' states (``traffic.agents.SessionState``) and each
    request's prompt and cached tokens (by request id)."""
    done = [s for s in states if s.finished_at is not None and not s.abandoned]
    seconds = np.array([(s.finished_at - s.started_at) / 1e9 for s in done])
    engine = np.array([s.engine_ns / 1e9 for s in done])
    ratios = []
    for s in done:
        ids = [r for r in s.request_of if r >= 0]
        asked = sum(prompt_tokens[r] for r in ids)
        ratios.append(sum(cached_tokens[r] for r in ids) / asked if asked else 0.0)
    ones = np.ones(len(done), dtype=np.int64)
    calls = sum(sum(1 for r in s.request_of if r >= 0) for s in done)
    return {
        "started": len(states),
        "completed": len(done),
        "abandoned": sum(1 for s in states if s.abandoned),
        "calls_per_session_mean": calls / len(done) if done else None,
        "session_time_s": weighted_stats(seconds, ones),
        "engine_time_s": weighted_stats(engine, ones),
        "tool_wait_time_s": weighted_stats(seconds - engine, ones),
        "engine_time_share": float(engine.sum() / seconds.sum()) if done and seconds.sum() > 0 else None,
        "prefix_cache_hit_ratio": weighted_stats(np.array(ratios), ones),
    }
