"""Write the example agentic trace ``scenarios/traces/agent-sessions.jsonl`` (simmodel's own format,
``simmodel.traffic.agent_traces``): deterministic, from a fixed seed, so re-running rewrites the same file.

A research agent, 60 sessions starting 2 s apart on average (Poisson). Each session:
- ``plan``: a 1,800-token system prompt shared by every session, a user question of 40–400 tokens, a plan of 80–300
  tokens.
- two to four ``branch`` calls in parallel after it (sub-agents each running a tool, e.g. a search or a file read),
  each waiting for its tool (log-normal, median 900 ms) and adding the tool's result (200–2,500 tokens), answering in
  30–200 tokens.
- ``answer``: after every branch, with a 20-token instruction, answering in 200–700 tokens.
- in half the sessions, a ``followup`` turn after the answer: the user's think time (5–30 s), 20–300 new tokens,
  answering in 100–500 tokens.

Usage: python tools/make_agent_trace.py [OUT]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

SESSIONS = 60
SEED = 7


def sessions(rng: np.random.Generator) -> list[dict]:
    rows, start = [], 0.0
    for s in range(SESSIONS):
        name = f"s{s:03d}"
        rows.append({"session": name, "call": "plan", "start_s": round(start, 3), "system": "research-agent",
                     "system_tokens": 1800, "new_input_tokens": int(rng.integers(40, 401)),
                     "output_tokens": int(rng.integers(80, 301))})
        branches = [f"branch{b}" for b in range(int(rng.integers(2, 5)))]
        for b in branches:
            rows.append({"session": name, "call": b, "after": ["plan"],
                         "wait_ms": round(float(rng.lognormal(np.log(900.0), 0.6)), 1),
                         "new_input_tokens": int(rng.integers(200, 2501)), "output_tokens": int(rng.integers(30, 201))})
        rows.append({"session": name, "call": "answer", "after": branches, "wait_ms": 0, "new_input_tokens": 20,
                     "output_tokens": int(rng.integers(200, 701))})
        if rng.random() < 0.5:
            rows.append({"session": name, "call": "followup", "after": ["answer"],
                         "wait_ms": round(float(rng.uniform(5000, 30000)), 1),
                         "new_input_tokens": int(rng.integers(20, 301)), "output_tokens": int(rng.integers(100, 501))})
        start += float(rng.exponential(2.0))
    return rows


def main() -> None:
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        print(__doc__.strip().splitlines()[-1])
        raise SystemExit(0 if sys.argv[1] in ("-h", "--help") else 2)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "scenarios" / "traces" / "agent-sessions.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(row) + "\n" for row in sessions(np.random.default_rng(SEED))))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
