"""Importers of recorded agent traces into session graphs (``traffic.source.format`` of an agentic source).

A recorded trace gives each LLM call's start and end, its whole prompt and its output, grouped by session, but
not (or not always) what each call waited on. ``lower`` turns such calls into ``AgentSession``s:

- a call waits on its parents (the importer's rule picks them) and is sent, once they are all done, after the gap
  the trace shows between the last of them ending and it starting (the tool's run and the user's think time);
- it continues its first parent's context when its prompt is at least that context (the parent's prompt and
  answer, a join adding its other parents' own tokens and answers): its new tokens are the rest; a shorter prompt
  (a compacted or reset context, a sub-agent's first call) keeps none of it and sends its whole prompt as its own.

Formats (docs/research/agentic-trace-formats.md has their sources):

- ``dynamo``: NVIDIA Dynamo's request trace (``dynamo.request.trace.v1`` JSON lines, raw or as a sink's
  ``{"timestamp", "event"}`` wrapper, plain or gzip). One call per ``request_end`` row; every row needs
  ``agent_context.session_id``. Calls of a session are chained in start order (Dynamo's own lowering); a session
  with ``parent_session_id`` is a sub-agent: its first call waits on the parent session's latest call started
  before it, and the parent's first call started at or after the sub-agent's last end waits on that end too.
  Tool rows are not needed: the gaps carry their time.
- ``mooncake``: Mooncake's FAST'25 traces (the tool-and-agent one above all), sessions inferred from the rows'
  block hashes (``read_mooncake``).
- ``otel``: OpenTelemetry GenAI spans, one JSON object a line: an OTLP ``TracesData`` (``resourceSpans`` →
  ``scopeSpans`` → ``spans``) or a single span. One call per span whose ``gen_ai.operation.name`` is ``chat``,
  ``text_completion`` or ``generate_content``; tokens from ``gen_ai.usage.input_tokens`` / ``output_tokens``
  (or the older ``prompt_tokens`` / ``completion_tokens``); session: ``gen_ai.conversation.id``, else the trace
  id. A call waits on the calls of its session that ended before it started and that no other such call waits
  on (so parallel calls fan out and the next call joins them), the largest context first.
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass, field
from pathlib import Path

from simmodel.config.json_safe import parse_json
from simmodel.errors import ScenarioError
from simmodel.traffic.agents import AgentCall, AgentSession

MAX_TOKENS = 1_000_000_000


@dataclass
class TracedCall:
    """One recorded LLM call."""

    session: str
    name: str
    start_s: float
    end_s: float
    input_tokens: int
    output_tokens: int
    parents: list[str] = field(default_factory=list)
    """Names of the calls (of its session) it waits on, the one whose context it continues first; set by the
    importer's rule."""


def lower(calls: list[TracedCall], where: Path) -> list[AgentSession]:
    """Sessions from recorded calls whose ``parents`` are set (see the module docstring); ``where``: the file, named
    by the errors (a call id twice in a session, a call waiting on one that does not come before it)."""
    by_session: dict[str, list[TracedCall]] = {}
    for c in calls:
        by_session.setdefault(c.session, []).append(c)
    sessions = []
    for name, members in by_session.items():
        members.sort(key=lambda c: (c.start_s, c.end_s))
        index: dict[str, int] = {}
        for k, c in enumerate(members):
            if index.setdefault(c.name, k) != k:
                raise ScenarioError(f"{where}: call {c.name!r} appears twice in session {name!r}")
        context: list[int] = []  # tokens of each call's context (prompt + answer)
        own: list[int] = []  # tokens each call adds itself (new + answer)
        out = []
        first = members[0].start_s
        for k, c in enumerate(members):
            parents = tuple(index[p] for p in c.parents)
            if any(p >= k for p in parents):
                raise ScenarioError(f"{where}: call {c.name!r} of session {name!r} would wait on a call that starts with "
                                    f"or after it (their times tie); the calls' order cannot be told")
            keeps = False
            new = c.input_tokens
            if parents:
                inherited = context[parents[0]] + sum(own[p] for p in parents[1:])
                keeps = c.input_tokens >= inherited
                new = c.input_tokens - inherited if keeps else c.input_tokens
                wait = max(0.0, c.start_s - max(members[p].end_s for p in parents))
                out.append(AgentCall(c.name, parents, wait, new, c.output_tokens, keeps_context=keeps))
            else:
                out.append(AgentCall(c.name, (), None, new, c.output_tokens, c.start_s - first))
            context.append(c.input_tokens + c.output_tokens)
            own.append(new + c.output_tokens)
        sessions.append(AgentSession(name, first, tuple(out)))
    return sessions


def _lines(path: Path):
    """(line number, parsed object) of a JSON-lines file, gzip or plain."""
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read ({exc})") from None
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield n, parse_json(line, f"{path}: line {n}")


def _tokens(where: str, value, key: str, minimum: int = 0) -> int:
    if isinstance(value, str) and value.isdigit():  # (OTLP JSON writes int64 values as strings)
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_TOKENS:
        raise ScenarioError(f"{where}: {key}: must be an integer from {minimum} to {MAX_TOKENS:,}, got {value!r}")
    return value


def _time(where: str, value, key: str, scale: float) -> float:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ScenarioError(f"{where}: {key}: must be a non-negative time, got {value!r}")
    return value * scale


# -- Dynamo's request trace ------------------------------------------------------------------------------------

def read_dynamo(path: Path, block_size: int = 512) -> list[AgentSession]:
    calls: list[TracedCall] = []
    parent_of: dict[str, str] = {}
    for n, row in _lines(path):
        where = f"{path}: line {n}"
        if isinstance(row, dict) and "event" in row and "schema" not in row:
            row = row["event"]  # (a sink's wrapper line)
        if not isinstance(row, dict):
            raise ScenarioError(f"{where}: must be a JSON object")
        if row.get("schema") != "dynamo.request.trace.v1":
            raise ScenarioError(f"{where}: schema: must be dynamo.request.trace.v1, got {row.get('schema')!r}")
        if row.get("event_type") != "request_end":
            continue  # (tool rows: the gaps between calls carry their time)
        agent, request = row.get("agent_context"), row.get("request")
        if not isinstance(agent, dict) or not isinstance(agent.get("session_id"), str):
            raise ScenarioError(f"{where}: agent_context.session_id: every request_end row needs one (the trace must "
                                f"be recorded with session headers, X-Dynamo-Session-ID)")
        if not isinstance(request, dict):
            raise ScenarioError(f"{where}: request: must be a JSON object")
        session = agent["session_id"]
        if isinstance(agent.get("parent_session_id"), str):
            parent_of[session] = agent["parent_session_id"]
        replay = request.get("replay") if isinstance(request.get("replay"), dict) else {}
        isl = request.get("input_tokens", replay.get("input_length"))
        end = _time(where, row.get("event_time_unix_ms"), "event_time_unix_ms", 1e-3)
        if request.get("request_received_ms") is not None:
            start = _time(where, request["request_received_ms"], "request.request_received_ms", 1e-3)
        else:
            start = end - _time(where, request.get("total_time_ms"), "request.total_time_ms", 1e-3)
        calls.append(TracedCall(session, str(request.get("request_id", f"line{n}")), start, max(start, end),
                                _tokens(where, isl, "request.input_tokens", 1),
                                max(1, _tokens(where, request.get("output_tokens", 1), "request.output_tokens"))))
    if not calls:
        raise ScenarioError(f"{path}: no request_end rows")
    _chain_dynamo(calls, parent_of, path)
    return lower(calls, path)


def _chain_dynamo(calls: list[TracedCall], parent_of: dict[str, str], where: Path) -> None:
    """Chain each session's calls in start order; hang sub-agent sessions on their root session (see the module
    docstring), renaming their calls into it. A sub-agent's first call waits on its parent's latest call that
    started strictly before it; the parent's first call that starts after the sub-agent's last call started and
    ended waits on the sub-agent's last call to end."""
    def root(session: str) -> str:
        seen = [session]
        while session in parent_of:
            session = parent_of[session]
            if session in seen:
                raise ScenarioError(f"{where}: agent_context.parent_session_id: sessions {' → '.join(seen)} → "
                                    f"{session} are each other's parents")
            seen.append(session)
        return session

    by_session: dict[str, list[TracedCall]] = {}
    for c in sorted(calls, key=lambda c: (c.start_s, c.end_s)):
        by_session.setdefault(c.session, []).append(c)
    for members in by_session.values():
        for prev, c in zip(members, members[1:]):
            c.parents = [prev.name]
    for child, parent in parent_of.items():
        kids, elders = by_session.get(child), by_session.get(parent)
        if not kids or not elders:
            continue
        before = [c for c in elders if c.start_s < kids[0].start_s]
        if before:
            kids[0].parents = [before[-1].name]
        last = max(kids, key=lambda c: c.end_s)
        after = [c for c in elders if c.start_s >= last.end_s and c.start_s > kids[-1].start_s]
        if after:
            after[0].parents = [*after[0].parents, last.name]
    for c in calls:
        c.session = root(c.session)


# -- OpenTelemetry GenAI spans ---------------------------------------------------------------------------------

_LLM_OPERATIONS = ("chat", "text_completion", "generate_content")


def _attributes(where: str, span: dict) -> dict:
    """A span's attributes as a flat dict: OTLP's ``[{key, value: {stringValue | intValue | ...}}]`` or already
    flat."""
    attrs = span.get("attributes") or {}
    if isinstance(attrs, dict):
        return attrs
    if not isinstance(attrs, list):
        raise ScenarioError(f"{where}: attributes: must be a list of {{key, value}} objects or an object")
    flat = {}
    for item in attrs:
        if isinstance(item, dict) and isinstance(item.get("value"), dict) and item["value"]:
            flat[item.get("key")] = next(iter(item["value"].values()))
    return flat


def _list(where: str, value, key: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ScenarioError(f"{where}: {key}: must be a list, got {type(value).__name__}")
    return value


def _spans(where: str, row: dict) -> list[dict]:
    """The spans of one line: an OTLP ``TracesData`` (``resourceSpans`` → ``scopeSpans`` → ``spans``) or one span."""
    if "resourceSpans" not in row:
        return [row]
    spans = []
    for rs in _list(where, row["resourceSpans"], "resourceSpans"):
        if not isinstance(rs, dict):
            raise ScenarioError(f"{where}: resourceSpans: each must be an object")
        for ss in _list(where, rs.get("scopeSpans"), "scopeSpans"):
            if not isinstance(ss, dict):
                raise ScenarioError(f"{where}: scopeSpans: each must be an object")
            for span in _list(where, ss.get("spans"), "spans"):
                if not isinstance(span, dict):
                    raise ScenarioError(f"{where}: spans: each must be an object")
                spans.append(span)
    return spans


def read_otel(path: Path, block_size: int = 512) -> list[AgentSession]:
    calls: list[TracedCall] = []
    for n, row in _lines(path):
        where = f"{path}: line {n}"
        if not isinstance(row, dict):
            raise ScenarioError(f"{where}: must be a JSON object (an OTLP TracesData or a span)")
        for span in _spans(where, row):
            attrs = _attributes(where, span)
            if attrs.get("gen_ai.operation.name") not in _LLM_OPERATIONS:
                continue
            isl = attrs.get("gen_ai.usage.input_tokens", attrs.get("gen_ai.usage.prompt_tokens"))
            osl = attrs.get("gen_ai.usage.output_tokens", attrs.get("gen_ai.usage.completion_tokens"))
            session = attrs.get("gen_ai.conversation.id") or span.get("traceId") or span.get("trace_id")
            if not isinstance(session, str):
                raise ScenarioError(f"{where}: gen_ai.conversation.id or traceId: a span needs one to find its session")
            start = _time(where, span.get("startTimeUnixNano"), "startTimeUnixNano", 1e-9)
            end = _time(where, span.get("endTimeUnixNano"), "endTimeUnixNano", 1e-9)
            calls.append(TracedCall(session, str(span.get("spanId", f"line{n}.{len(calls)}")), start, max(start, end),
                                    _tokens(where, isl, "gen_ai.usage.input_tokens", 1),
                                    max(1, _tokens(where, osl, "gen_ai.usage.output_tokens"))))
    if not calls:
        raise ScenarioError(f"{path}: no GenAI inference spans (gen_ai.operation.name chat, text_completion or "
                            f"generate_content)")
    _frontier(calls)
    return lower(calls, path)


def _frontier(calls: list[TracedCall]) -> None:
    """Each call waits on the calls of its session that ended before it started and that no other of those waits
    on (directly or not); the one with the largest context first."""
    by_session: dict[str, list[TracedCall]] = {}
    for c in sorted(calls, key=lambda c: (c.start_s, c.end_s)):
        by_session.setdefault(c.session, []).append(c)
    for members in by_session.values():
        ancestors: dict[str, set[str]] = {}
        for k, c in enumerate(members):
            done = [d for d in members[:k] if d.end_s <= c.start_s]  # (earlier in start order: already placed)
            below = set().union(*(ancestors[d.name] for d in done)) if done else set()
            leaves = [d for d in done if d.name not in below]
            leaves.sort(key=lambda d: -(d.input_tokens + d.output_tokens))
            c.parents = [d.name for d in leaves]
            ancestors[c.name] = below | {d.name for d in leaves}


# -- Mooncake's traces (the tool-and-agent trace) ---------------------------------------------------------------

def read_mooncake(path: Path, block_size: int = 512) -> list[AgentSession]:
    """Sessions inferred from a Mooncake trace's block hashes, which carry no session: a row continues the earlier
    row whose whole-block prefix (its ``hash_ids`` less a last partial block) is the longest prefix of its own,
    at least two blocks long and not also a prefix of another session's rows (a system prompt every session
    shares, which would link unrelated sessions); otherwise it starts a session. Each call's prompt is its row's
    exact blocks (the trace's hash ids, as a ``trace`` source keys them); it is sent once its parent has finished,
    and no earlier than its recorded arrival from its session's start. The trace records no end times, so the
    parent's time to answer and the client's time after it cannot be told apart: the recorded arrival stands for
    both."""
    from simmodel.traffic.traces import read_trace

    trace = read_trace(path, "mooncake", require_monotone=False)
    for i, hashes in enumerate(trace.hash_ids):  # (the links below read a row's whole blocks off its ids)
        blocks = -(-int(trace.input_tokens[i]) // block_size)
        if hashes is not None and len(hashes) != blocks:
            raise ScenarioError(f"{path}: row {i + 1}: hash_ids: {len(hashes)} ids for input_length "
                                f"{int(trace.input_tokens[i])}, where one per {block_size} tokens gives {blocks}; "
                                f"set traffic.source.block_size to the trace's block size")
    order = sorted(range(len(trace)), key=lambda i: trace.arrival_s[i])
    ends: dict[int, int] = {}  # a row's last whole-block id → the latest row ending its whole-block prefix there
    owner: dict[int, int] = {}  # block id → the session of the first row holding it, −1 once two sessions do
    session_of: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    parent_of: dict[int, int] = {}
    for i in order:
        hashes = trace.hash_ids[i] or ()
        parent = None
        for k in range(len(hashes) - 1, 0, -1):  # a prefix of k + 1 ≥ 2 blocks ending at hashes[k]
            j = ends.get(hashes[k])
            if j is not None:
                if owner.get(hashes[k], -1) >= 0:
                    parent = j
                break
        session = session_of[parent] if parent is not None else i
        session_of[i] = session
        members.setdefault(session, []).append(i)
        if parent is not None:
            parent_of[i] = parent
        for h in hashes:
            seen = owner.setdefault(h, session)
            if seen != session:
                owner[h] = -1
        whole = len(hashes) - (1 if trace.input_tokens[i] % block_size else 0)
        if whole >= 2:
            ends[hashes[whole - 1]] = i
    sessions = []
    for session, rows in members.items():
        index = {r: k for k, r in enumerate(rows)}
        first = float(trace.arrival_s[rows[0]])
        calls = tuple(AgentCall(f"row{r + 1}", (index[parent_of[r]],) if r in parent_of else (), 0.0 if r in parent_of
                                else None, int(trace.input_tokens[r]), max(1, int(trace.output_tokens[r])),
                                float(trace.arrival_s[r]) - first, hash_ids=trace.hash_ids[r] or (),
                                hash_block_size=block_size) for r in rows)
        sessions.append(AgentSession(f"row{session + 1}", first, calls))
    return sessions


IMPORTERS = {"dynamo": read_dynamo, "otel": read_otel, "mooncake": read_mooncake}
"""``traffic.source.format`` of an agentic source → its importer, called with the file and the tokens per hash id
(``traffic.source.block_size``, read by ``mooncake`` only); simmodel's own format is read by ``agent_traces``."""

