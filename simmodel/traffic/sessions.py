"""Multi-turn chat sessions: each turn's prompt is the conversation so far (every earlier prompt and
answer) plus the user's new message, sent once the previous turn finished and the user's think time
passed. The conversation only grows, so a turn finds the earlier turns' KV blocks cached (prefix
caching), as a chat server does; the first message may open with a system prompt shared by all sessions.

Modelled as exact token counts: chat-template tokens around each message are not added.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simmodel.config.schema import SessionsSource
from simmodel.engine.radix_cache import OutputBlock
from simmodel.traffic.lengths import sample_lengths


@dataclass
class Session:
    """One conversation: its planned turns (new input and output tokens each) and what has happened."""

    id: int
    new_input: np.ndarray
    output: np.ndarray
    shared: int
    """Leading tokens of the first message that every session shares (a system prompt)."""
    stage: int = 0
    turn: int = 0
    """The next turn to send (0-based)."""
    history: int = 0
    """Tokens of the conversation so far: earlier prompts' new messages and the answers received."""
    parts: list = field(default_factory=list)
    """The conversation as radix-cache segments (SGLang): new messages and earlier answers in order."""

    @property
    def turns(self) -> int:
        return len(self.new_input)


class Sessions:
    """Draws sessions in the order they start (turn count and per-turn lengths from the input stream,
    outputs from the output stream) and knows which session and turn each request is."""

    def __init__(self, source: SessionsSource, input_rng: np.random.Generator,
                 output_rng: np.random.Generator) -> None:
        self.source = source
        self.input_rng, self.output_rng = input_rng, output_rng
        self.sessions: list[Session] = []
        self.of_request: dict[int, tuple[Session, int]] = {}
        """Request id → (session, turn)."""

    def start(self, stage: int) -> Session:
        src = self.source
        turns = int(sample_lengths(src.turns, self.input_rng, 1)[0])
        new_input = sample_lengths(src.new_input_tokens_per_turn, self.input_rng, turns)
        output = sample_lengths(src.output_tokens_per_turn, self.output_rng, turns)
        shared = int(src.shared_prefix_ratio * int(new_input[0]))
        session = Session(len(self.sessions), new_input, output, shared, stage)
        self.sessions.append(session)
        return session

    def next_prompt(self, session: Session) -> tuple[int, int]:
        """Prompt and output tokens of the session's next turn."""
        t = session.turn
        return session.history + int(session.new_input[t]), int(session.output[t])

    def sent(self, session: Session, request_id: int) -> None:
        t = session.turn
        self.of_request[request_id] = (session, t)
        session.parts.append((("session", session.id, "in", t), int(session.new_input[t])))
        session.history += int(session.new_input[t])
        session.turn += 1

    def answered(self, session: Session, request_id: int, num_output_tokens: int) -> None:
        """The turn's answer joins the conversation (as many tokens as the server returned)."""
        session.parts.append((OutputBlock(("out", request_id)), num_output_tokens))
        session.history += num_output_tokens

    def block_content(self, request_id: int, block_size: int):
        """KV block j of a session's conversation: the shared system prompt's, if wholly inside it, else
        the session's own block j (the same whichever turn computes it: the conversation only grows)."""
        session, _ = self.of_request[request_id]
        shared, s = session.shared, session.id

        def content(j: int) -> object:
            return (-2, 0, j) if (j + 1) * block_size <= shared else (-6, s, j)
        return content

    def segments(self, request_id: int) -> list:
        """A turn's prompt as radix-cache segments: the shared system prompt, then each earlier message
        and answer (an answer keyed as the SGLang scheduler keys that request's output), then the new
        message."""
        session, turn = self.of_request[request_id]
        parts = session.parts[:2 * turn + 1]  # the earlier messages and answers, then this turn's message
        (first_key, first_len), shared = parts[0], session.shared
        segs = [((-2, 0), shared)] if shared else []
        segs.append((first_key, first_len - shared))
        segs.extend(parts[1:])
        return [(key, n) for key, n in segs if n > 0]
