"""OpenAI-compatible timing estimates: ``/v1/completions`` and ``/v1/chat/completions`` for one request.

A call names a ready scenario as its ``model`` and sends a prompt (or chat messages) and ``max_tokens``: the
request is simulated alone on that deployment, arriving at zero (no other call's requests share its batch),
and the answer is an OpenAI completion object whose text is **placeholder tokens**, drawn from ``seed`` so that
the same call gives the same text: simmodel estimates timing, it generates nothing. The estimate is in the
answer's ``simmodel`` object.

The prompt's tokens are counted with the model's own tokenizer when ``transformers`` and the tokenizer's files
are on this machine (a chat through its chat template); otherwise they are estimated as
``max(1, ceil(UTF-8 bytes / 4))`` of the prompt (chat messages joined with newlines). Which way was used is
reported (``prompt_token_source``).
"""

from __future__ import annotations

import json
import math
import random

PLACEHOLDER_WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do",
                     "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua")
"""The placeholder text's words, one per output token."""


def count_prompt(model_id: str, prompt: str | None, messages: list[dict] | None) -> tuple[int, str]:
    """The prompt's tokens and how they were counted: ``tokenizer``, ``tokenizer:chat_template``,
    ``tokenizer:joined`` (messages the template refused, joined with newlines) or ``estimated:utf8-bytes/4``."""
    joined = prompt if messages is None else "\n".join(str(m.get("content", "")) for m in messages)
    tokenizer = _local_tokenizer(model_id)
    if tokenizer is not None:
        if messages is None:
            return len(tokenizer.encode(joined)), "tokenizer"
        try:
            return len(tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)), \
                "tokenizer:chat_template"
        except (ValueError, TypeError, KeyError):
            return len(tokenizer.encode(joined)), "tokenizer:joined"
    return max(1, math.ceil(len(joined.encode("utf-8", "surrogatepass")) / 4)), "estimated:utf8-bytes/4"


def _local_tokenizer(model_id: str):
    """The model's tokenizer from files already on this machine: through ``transformers`` (which knows its chat
    template), else its ``tokenizer.json`` in the Hugging Face cache through ``tokenizers``; None if neither is
    installed or the files are not here (nothing is downloaded)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return _cached_tokenizer_json(model_id)
    try:
        return AutoTokenizer.from_pretrained(model_id, local_files_only=True)
    except (OSError, ValueError):
        return _cached_tokenizer_json(model_id)


class _FastTokenizer:
    """A ``tokenizers.Tokenizer`` with the one method counting needs (it has no chat template)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def apply_chat_template(self, messages, **_) -> list[int]:
        raise ValueError("no chat template without transformers")


def _cached_tokenizer_json(model_id: str):
    try:
        from huggingface_hub import try_to_load_from_cache
        from tokenizers import Tokenizer
    except ImportError:
        return None
    path = try_to_load_from_cache(model_id, "tokenizer.json")
    if not isinstance(path, str):
        return None
    try:
        return _FastTokenizer(Tokenizer.from_file(path))
    except Exception:  # (tokenizers raises its own errors on a corrupt file: count by bytes, and say so)
        return None


def placeholder(n: int, seed: int | None) -> list[str]:
    """``n`` placeholder tokens (words, each after a space), the same for the same seed."""
    rng = random.Random(0 if seed is None else seed)
    return [" " + rng.choice(PLACEHOLDER_WORDS) for _ in range(n)]


def timing(row: dict, summary: dict, prompt_tokens: int, source: str, assumptions: list[str]) -> dict:
    """The ``simmodel`` object: the request's TTFT, inter-token latencies (mean and p50 over its own intervals:
    the run's, as it ran alone), E2E, token counts, how the prompt was counted, the passes' provenance and the
    assumptions."""
    itl = summary["itl_ms"]
    return {"ttft_ms": row["ttft_ms"], "itl_ms_mean": itl.get("mean"), "itl_ms_p50": itl.get("p50"),
            "e2e_ms": row["e2e_ms"], "prompt_tokens": prompt_tokens, "output_tokens": row["output_tokens"],
            "prompt_token_source": source, "provenance_counts": summary.get("provenance_counts", {}),
            "assumptions": assumptions, "note": "timing estimate only: the text is placeholder tokens, not generated"}


def completion(kind: str, ident: str, created: int, model: str, tokens: list[str], prompt_tokens: int,
               estimate: dict) -> dict:
    """The whole answer (``kind``: ``text`` or ``chat``)."""
    text = "".join(tokens)
    if kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        obj = "text_completion"
    return {"id": ident, "object": obj, "created": created, "model": model, "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(tokens),
                      "total_tokens": prompt_tokens + len(tokens)},
            "simmodel": estimate}


def stream(kind: str, ident: str, created: int, model: str, tokens: list[str], estimate: dict,
           prompt_tokens: int | None = None):
    """The answer as server-sent events: one chunk per token, a last chunk with the finish reason and the
    ``simmodel`` estimate, with ``prompt_tokens`` (``stream_options.include_usage``) a chunk of no choices
    carrying ``usage``, then ``[DONE]``."""
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"

    usage_key = {} if prompt_tokens is None else {"usage": None}

    def chunk(delta: dict, finish: str | None, extra: dict | None = None) -> str:
        if kind == "chat":
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": delta.get("content", ""), "logprobs": None, "finish_reason": finish}
        body = {"id": ident, "object": obj, "created": created, "model": model, "choices": [choice], **usage_key,
                **(extra or {})}
        return f"data: {json.dumps(body)}\n\n"

    if kind == "chat":
        yield chunk({"role": "assistant"}, None)
    for token in tokens:
        yield chunk({"content": token}, None)
    yield chunk({}, "length", {"simmodel": estimate})
    if prompt_tokens is not None:
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(tokens),
                 "total_tokens": prompt_tokens + len(tokens)}
        body = {"id": ident, "object": obj, "created": created, "model": model, "choices": [], "usage": usage}
        yield f"data: {json.dumps(body)}\n\n"
    yield "data: [DONE]\n\n"
