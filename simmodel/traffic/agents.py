"""Agentic sessions: each session a graph of LLM calls, sent as their dependencies finish.

An agent's call sends the session's context so far plus new tokens (a tool's result, a user's message), once the
calls it waits on have finished and its own wait has passed (the tool's run, the user's think time). Calls that
wait on one call fan out (parallel tool calls, sub-agents) and a call waiting on several joins them.

What a call's prompt holds (its context), as segments of known content, so that prefix caching finds what an
earlier call computed:

- a call with no parent (or one that keeps no context of its parents: a sub-agent's first call, a reset context):
  its system prompt, if any (the same content in every session naming it), then its own new tokens;
- a call with parents: the first parent's context, then each other parent's own new tokens and answer (those
  not in it already), then its own new tokens;
- a call's context for its children: its prompt, then its answer (as many tokens as the server returned).

Sessions come from a trace (``traffic.agent_traces``). Modelled as exact token counts: chat-template tokens
around each message are not added.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simmodel.engine.kv_cache import trace_block_content
from simmodel.engine.radix_cache import OutputBlock
from simmodel.traffic.lengths import sample_lengths


@dataclass(frozen=True, slots=True)
class AgentCall:
    """One LLM call of a session, as the trace gives it."""

    name: str
    parents: tuple[int, ...]
    """Calls (indices in the session) it waits for; none: a root, sent at ``start_s``."""
    wait_s: float | None
    """After its last parent finished (a root: after the session's start), how long it waits (a tool's run, the
    user's think time); None: drawn from ``traffic.source.tool_latency_ms``."""
    new_input_tokens: int
    output_tokens: int
    start_s: float = 0.0
    """When it is sent, from the session's start: a root then; a call with parents no earlier (0: as soon as its
    wait after them ends)."""
    hash_ids: tuple[int, ...] | None = None
    """A call from a trace of block hashes (Mooncake's): its prompt is ``new_input_tokens`` whose blocks of
    ``hash_block_size`` tokens hold what these ids say (shared with every call, of any session, naming them);
    its parents then only set when it is sent."""
    hash_block_size: int = 512
    keeps_context: bool = True
    """Whether its prompt holds its parents' context (else only its own tokens: a sub-agent's first call, a
    context the agent compacted or reset); either way it waits for them."""
    system: int = -1
    """A root: the shared system prompt it opens with (an index of the trace's ``system`` names), −1: none."""
    system_tokens: int = 0


@dataclass(frozen=True, slots=True)
class AgentSession:
    name: str
    start_s: float
    """When the session starts, in the trace's clock (the first root's send time)."""
    calls: tuple[AgentCall, ...]
    """In an order where every call's parents come before it."""


@dataclass
class SessionState:
    """One session as it runs."""

    id: int
    session: AgentSession
    stage: int
    started_at: int
    waiting: list[int] = field(default_factory=list)
    """Per call: parents not finished yet."""
    request_of: list[int] = field(default_factory=list)
    """Per call: its request id (−1: not sent)."""
    context: list[list | None] = field(default_factory=list)
    """Per call: its context as segments (key, tokens), once it finished."""
    prompt: list[list | None] = field(default_factory=list)
    """Per call: its prompt's segments, once sent."""
    own: list[list] = field(default_factory=list)
    """Per call: its own new tokens and answer, as segments (the part a join adds)."""
    left: int = 0
    """Calls not finished."""
    in_engine: int = 0
    """Calls sent and not finished."""
    engine_since: int = 0
    engine_ns: int = 0
    """Time with at least one call sent and not finished."""
    finished_at: int | None = None
    abandoned: bool = False
    """A call was refused (or the run's request cap reached): the session ends, its calls in flight finish."""


class AgentSessions:
    """The trace's sessions, started in order (``start``), and what each request is."""

    def __init__(self, sessions: list[AgentSession], tool_latency_ms, rng: np.random.Generator) -> None:
        self.sessions = sessions
        self.tool_latency_ms = tool_latency_ms
        """A ``LengthSpec`` of milliseconds for calls whose trace gives no wait, or None."""
        self.rng = rng
        self.states: list[SessionState] = []
        self.of_request: dict[int, tuple[SessionState, int]] = {}
        """Request id → (session, call)."""

    @property
    def num_sessions(self) -> int:
        return len(self.sessions)

    def start(self, stage: int, now: int) -> SessionState:
        """Start the next session of the trace."""
        session = self.sessions[len(self.states)]
        n = len(session.calls)
        state = SessionState(len(self.states), session, stage, now, [len(c.parents) for c in session.calls],
                             [-1] * n, [None] * n, [None] * n, [[] for _ in range(n)], n)
        self.states.append(state)
        return state

    def roots(self, state: SessionState) -> list[tuple[int, float]]:
        """The calls the session sends with no parent: (call, seconds from the session's start)."""
        return [(k, c.start_s + (c.wait_s or 0.0)) for k, c in enumerate(state.session.calls) if not c.parents]

    def wait_s(self, call: AgentCall) -> float:
        """How long a call waits once its parents are done: the trace's, else drawn."""
        if call.wait_s is not None:
            return call.wait_s
        return float(sample_lengths(self.tool_latency_ms, self.rng, 1)[0]) / 1000.0

    def prompt(self, state: SessionState, k: int, request_id: int) -> int:
        """Build call ``k``'s prompt (its parents' contexts and its new tokens) as it is sent as ``request_id``;
        returns its tokens."""
        call = state.session.calls[k]
        state.request_of[k] = request_id
        self.of_request[request_id] = (state, k)
        if call.hash_ids is not None:  # the trace's blocks, as its hash ids say (a trace source's keys)
            size, left = call.hash_block_size, call.new_input_tokens
            segs = [((-3, h), min(size, left - j * size)) for j, h in enumerate(call.hash_ids) if j * size < left]
            known = len(segs) * size
            if known < left:
                segs.append(((-7, state.id, k, 0), left - known))
            state.prompt[k] = segs
            state.own[k].append(((-7, state.id, k, 0), left))
            return left
        new = ((-7, state.id, k, 0), call.new_input_tokens)
        segs: list = [((-9, call.system), call.system_tokens)] if call.system_tokens else []
        if call.parents and call.keeps_context:
            first, *others = call.parents
            segs = list(state.context[first])
            present = {key for key, _ in segs}
            for p in others:
                segs.extend(s for s in state.own[p] if s[0] not in present)
                present.update(key for key, _ in state.own[p])
        segs.append(new)
        state.own[k].append(new)
        state.prompt[k] = segs
        return sum(n for _, n in segs)

    def sent(self, state: SessionState, now: int) -> None:
        if not state.in_engine:
            state.engine_since = now
        state.in_engine += 1

    def answered(self, request_id: int, num_output_tokens: int, now: int) -> tuple[SessionState, list[int]]:
        """The call's answer joins its context; returns its session and the calls now free to go (all their parents
        finished; none once the session was abandoned)."""
        state, k = self.of_request[request_id]
        if state.abandoned:  # (its time was counted up to the end)
            return state, []
        answer = ((-8, request_id), num_output_tokens)
        state.own[k].append(answer)
        state.context[k] = state.prompt[k] + [answer]
        state.left -= 1
        state.in_engine -= 1
        if not state.in_engine:
            state.engine_ns += now - state.engine_since
        if not state.left:
            state.finished_at = now
        ready = []
        for c, call in enumerate(state.session.calls):
            if k in call.parents:
                state.waiting[c] -= 1
                if not state.waiting[c]:
                    ready.append(c)
        return state, ready

    def abandon(self, state: SessionState, now: int) -> None:
        """The session ends now, unfinished: a call was refused (counted as sent: it leaves the engine at once), or
        the run may create no more requests. Its calls in flight still finish; nothing after them is sent."""
        if state.in_engine:
            state.engine_ns += now - state.engine_since
        state.in_engine = 0
        state.finished_at = now
        state.abandoned = True

    def block_content(self, request_id: int, block_size: int):
        """KV block j of a call's sequence: the pieces of its prompt's segments (then its own answer) it covers,
        the same for any call whose context holds those segments in that order."""
        state, k = self.of_request[request_id]
        call = state.session.calls[k]
        if call.hash_ids is not None:
            return trace_block_content(call.hash_ids, call.hash_block_size, call.new_input_tokens, block_size,
                                       (-1, request_id))
        segs = state.prompt[k] + [((-8, request_id), 1 << 40)]  # (its answer, as long as it will be)
        bounds = np.cumsum([0] + [n for _, n in segs])

        def content(j: int) -> object:
            lo, hi = j * block_size, (j + 1) * block_size
            first = int(np.searchsorted(bounds, lo, side="right")) - 1
            pieces = []
            i = first
            while i < len(segs) and bounds[i] < hi:
                pieces.append((segs[i][0], max(lo, int(bounds[i])) - int(bounds[i]), min(hi, int(bounds[i + 1])) - int(bounds[i])))
                i += 1
            return tuple(pieces)
        return content

    def segments(self, request_id: int) -> list:
        """A call's prompt as radix-cache segments (SGLang), an earlier call's answer keyed as the SGLang scheduler
        keys that request's output."""
        state, k = self.of_request[request_id]
        return [(OutputBlock(("out", key[1])) if key[0] == -8 else key, n) for key, n in state.prompt[k] if n > 0]
