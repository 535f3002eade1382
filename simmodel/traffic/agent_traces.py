"""Reading agentic session traces (``traffic.source.type: agentic``) into ``AgentSession`` graphs.

simmodel's own format is JSON lines, one LLM call a line, a session's calls in an order where every call comes
after the calls it waits on::

    {"session": "s1", "call": "plan", "start_s": 0.0, "new_input_tokens": 1800, "output_tokens": 220}
    {"session": "s1", "call": "search", "after": ["plan"], "wait_ms": 850, "new_input_tokens": 640, "output_tokens": 90}
    {"session": "s1", "call": "fetch", "after": ["plan"], "wait_ms": 1200, "new_input_tokens": 900, "output_tokens": 60}
    {"session": "s1", "call": "answer", "after": ["search", "fetch"], "new_input_tokens": 40, "output_tokens": 400}

- ``session``, ``call``: names (strings or integers, compared as text: 1 and "1" are one name); a call's name is
  unique within its session.
- ``after``: the calls of its session it waits for (default none: a root).
- ``wait_ms``: how long it waits once they are done (a tool's run, a user's think time); absent: drawn from
  ``traffic.source.tool_latency_ms`` (0 for a root without one).
- ``start_s``: a root's send time in the trace's clock (default 0); on a call that waits, the earliest it is
  sent (it goes at the later of that and its wait after its parents).
- ``new_input_tokens``: tokens the call adds to its context (at least 1 on a root); ``output_tokens``: its answer
  (at least 1).
- ``system``, ``system_tokens``: a root may open with a system prompt shared by every session naming it (its
  tokens counted once per name).
- ``keeps_context``: false for a call that waits on its parents without their context in its prompt (a
  sub-agent's first call, a compacted context): it sends its system prompt and new tokens only.

A session starts at its first root's ``start_s``; sessions are taken in order of their start (ties in file
order). Bad lines give one error naming the file, the line and the rule.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from simmodel.config.json_safe import parse_json
from simmodel.config.schema import AGENT_FORMATS
from simmodel.errors import ScenarioError
from simmodel.paths import is_file
from simmodel.traffic.agent_importers import IMPORTERS
from simmodel.traffic.agents import AgentCall, AgentSession

_KEYS = {"session", "call", "after", "wait_ms", "start_s", "new_input_tokens", "output_tokens", "system",
         "system_tokens", "keeps_context"}
MAX_TOKENS = 1_000_000_000
MAX_SECONDS = 1e9
MAX_WAIT_MS = 1e10
"""The longest wait a call may give (115 days): a session's waits stay inside the simulated clock's default
``traffic.stop.max_virtual_time_seconds``."""


def read_agent_trace(path: Path, fmt: str = "simmodel", block_size: int = 512) -> list[AgentSession]:
    """The sessions of an agentic trace of format ``fmt`` (``AGENT_FORMATS``), by start; ``block_size``: tokens
    per hash id of a ``mooncake`` trace."""
    if not is_file(path):
        raise ScenarioError(f"{path}: trace file not found")
    sessions = _READERS[fmt](path, block_size)
    if not sessions:
        raise ScenarioError(f"{path}: trace has no calls")
    order = sorted(range(len(sessions)), key=lambda i: sessions[i].start_s)
    return [sessions[i] for i in order]


def _read_simmodel(path: Path, block_size: int = 512) -> list[AgentSession]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read ({exc})") from None
    by_session: dict[str, list] = {}  # name → [calls, names → index, first line]
    systems: dict[str, int] = {}  # system prompt name → index
    lengths: dict[int, int] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}: line {n}"
        row = parse_json(line, where)
        if not isinstance(row, dict):
            raise ScenarioError(f"{where}: must be a JSON object")
        unknown = sorted(set(row) - _KEYS)
        if unknown:
            raise ScenarioError(f"{where}: {unknown[0]}: unknown field (the fields are {', '.join(sorted(_KEYS))})")
        session, call = _name(where, row, "session"), _name(where, row, "call")
        calls, names, _ = by_session.setdefault(session, ([], {}, n))
        if call in names:
            raise ScenarioError(f"{where}: call: {call!r} appears twice in session {session!r}")
        after = row.get("after", [])
        if not isinstance(after, list):
            raise ScenarioError(f"{where}: after: must be a list of call names, got {after!r}")
        parents = []
        for p in after:
            p = _as_name(where, "after", p)
            if p not in names:
                raise ScenarioError(f"{where}: after: {p!r} is not an earlier call of session {session!r} (a call "
                                    f"comes after the calls it waits on)")
            if names[p] in parents:
                raise ScenarioError(f"{where}: after: {p!r} is listed twice")
            parents.append(names[p])
        wait = _number(where, row, "wait_ms")
        start = _number(where, row, "start_s")
        keeps = row.get("keeps_context", True)
        if not isinstance(keeps, bool):
            raise ScenarioError(f"{where}: keeps_context: must be true or false, got {keeps!r}")
        if not keeps and not parents:
            raise ScenarioError(f"{where}: keeps_context: only a call that waits on others may drop their context")
        own = not parents or not keeps
        new = _count(where, row, "new_input_tokens", 1 if own else 0)
        out = _count(where, row, "output_tokens", 1)
        system, system_tokens = -1, 0
        if row.get("system") is not None or row.get("system_tokens") is not None:
            if not own:
                raise ScenarioError(f"{where}: system: only a call that starts a context (a root, or keeps_context "
                                    f"false) opens with a system prompt")
            system = systems.setdefault(_name(where, row, "system"), len(systems))
            system_tokens = _count(where, row, "system_tokens", 1)
            if lengths.setdefault(system, system_tokens) != system_tokens:
                raise ScenarioError(f"{where}: system_tokens: system prompt {row['system']!r} has "
                                    f"{lengths[system]} tokens on an earlier line; got {system_tokens}")
        calls.append(AgentCall(call, tuple(parents), None if wait is None else wait / 1000.0, new, out,
                               start or 0.0, keeps_context=keeps, system=system,
                               system_tokens=system_tokens))
        names[call] = len(calls) - 1
    sessions = []
    for name, (calls, _, _) in by_session.items():
        first = min(c.start_s for c in calls if not c.parents)
        calls = [replace(c, start_s=max(c.start_s - first, 0.0)) for c in calls]
        sessions.append(AgentSession(name, first, tuple(calls)))
    return sessions


_READERS = {"simmodel": _read_simmodel, **IMPORTERS}
"""A reader per ``AGENT_FORMATS`` entry: file → sessions (simmodel's own, and the importers of
``agent_importers``)."""
assert set(_READERS) == set(AGENT_FORMATS)


def _name(where: str, row: dict, key: str) -> str:
    """A session, call or system prompt name, as text: 1 and "1" name the same one (they print alike)."""
    return _as_name(where, key, row.get(key))


def _as_name(where: str, key: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise ScenarioError(f"{where}: {key}: required, a string or an integer; got {value!r}")
    return str(value)


def _number(where: str, row: dict, key: str) -> float | None:
    value = row.get(key)
    if value is None:
        return None
    limit = MAX_WAIT_MS if key == "wait_ms" else MAX_SECONDS
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
            or value > limit):
        raise ScenarioError(f"{where}: {key}: must be a number from 0 to {limit:g}, got {value!r}")
    return float(value)


def _count(where: str, row: dict, key: str, minimum: int) -> int:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_TOKENS:
        raise ScenarioError(f"{where}: {key}: required, an integer from {minimum} to {MAX_TOKENS:,}; got {value!r}")
    return value
