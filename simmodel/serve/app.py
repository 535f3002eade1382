"""The HTTP API (``simmodel serve``): scenario runs and OpenAI-compatible estimates, over FastAPI.

- ``GET /api/scenarios/ready``: the ready scenarios (name, model, hardware, backend, mode).
- ``POST /api/scenarios``: a deployment (``scenario`` or ``engine``) serving a shorthand workload or explicit
  requests, with optional scheduler overrides; answers the aggregate, each request, each pass (sampled above
  5,000 rows), the scheduler as run, assumptions, provenance counts and the whole summary.
- ``POST /v1/completions``, ``POST /v1/chat/completions``: one request's timing estimate in OpenAI's shapes
  (``openai``).

Bodies are checked by pydantic (422 naming the field); what only a run can tell (a context exceeded, a run past
the server's limits) is 422 too, with the field named. With a token (``--token`` or ``SIMMODEL_API_TOKEN``)
every route but the page, its files and the OpenAPI pages wants ``Authorization: Bearer <token>`` (401
without). Routes are plain
functions, which FastAPI runs in its worker threads: concurrent calls run side by side, each in a simulation
of its own.
"""

from __future__ import annotations

import json
import math
import secrets
import time
import uuid
from pathlib import Path
from typing import Annotated, Literal

import plotly
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from simmodel.perf.hardware import HARDWARE
from simmodel.perf.models import MODELS
from simmodel.plots.charts import run_charts
from simmodel.serve import openai, results
from simmodel.serve.run import CallError, answer, ready_path, simulate, usable_scenarios
from simmodel.serve.workload import READY_DIR, ServeLimits, WorkloadError, check_size, describe, explicit, shorthand


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


Count = Annotated[StrictInt, Field(ge=1, le=10**9)]
"""A positive whole number (``true`` is not one) up to a billion."""


def _utf8(text: str) -> str:
    """A string JSON can carry back (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("holds a lone surrogate, which is not text") from None
    return text


Text = Annotated[str, AfterValidator(_utf8)]


class RequestSpec(Strict):
    id: Text | None = Field(default=None, min_length=1)
    arrival_s: float = Field(ge=0, allow_inf_nan=False, strict=True)
    prompt_tokens: Count
    output_tokens: Count


class SchedulerOverrides(Strict):
    max_num_seqs: Count | None = None
    max_num_batched_tokens: Count | None = None


class ScenarioCall(Strict):
    """``POST /api/scenarios``: one deployment selector and one workload form."""

    scenario: str | None = None
    engine: dict | None = None
    num_requests: Count | None = None
    prompt_tokens: Count | None = None
    output_tokens: Count | None = None
    arrival_rate_rps: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    requests: list[RequestSpec] | None = None
    scheduler: SchedulerOverrides | None = None
    charts: StrictBool = False
    """Whether the answer carries the run's charts as plotly figures (``charts``: what the web page draws)."""

    @model_validator(mode="after")
    def _one_of_each(self) -> ScenarioCall:
        if (self.scenario is None) == (self.engine is None):
            raise ValueError("give exactly one deployment: scenario (a ready scenario's name) or engine")
        short = [self.num_requests, self.prompt_tokens, self.output_tokens, self.arrival_rate_rps]
        if self.requests is not None and any(v is not None for v in short):
            raise ValueError("give the shorthand (num_requests, prompt_tokens, output_tokens, arrival_rate_rps) or "
                             "requests, not both")
        if self.requests is None and None in short[:3]:
            raise ValueError("give requests, or the shorthand's num_requests, prompt_tokens and output_tokens")
        return self


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    """A chat message: its text (a string or text parts, as OpenAI takes them; none for an assistant's tool
    calls); its other fields (``name``, ``tool_calls`` …) are accepted and not counted."""

    role: str
    content: str | list[TextPart] | None = None

    @property
    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class StreamOptions(BaseModel):
    include_usage: StrictBool = False


class CompletionCall(BaseModel):
    """The OpenAI request fields simmodel reads. Sampling fields (``temperature``, ``top_p`` …) are accepted and
    change nothing (the text is placeholder words, the lengths are ``max_tokens``), as the docs say."""

    model: str
    prompt: str | list[str] | None = None
    messages: list[Message] | None = Field(default=None, min_length=1)
    max_tokens: Count | None = None
    max_completion_tokens: Count | None = None
    n: StrictInt | None = 1
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    seed: StrictInt | None = None

    @field_validator("n")
    @classmethod
    def _one(cls, n: int | None) -> int | None:
        if n not in (None, 1):
            raise ValueError(f"n is {n}: simmodel estimates one completion a call; send n: 1")
        return n

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, prompt: str | list[str] | None) -> str | list[str] | None:
        if isinstance(prompt, list) and len(prompt) != 1:
            raise ValueError(f"holds {len(prompt)} prompts: simmodel estimates one a call")
        if prompt is not None and not (prompt if isinstance(prompt, str) else prompt[0]):
            raise ValueError("prompt is empty")
        return prompt

    @field_validator("messages")
    @classmethod
    def _some_text(cls, messages: list[Message] | None) -> list[Message] | None:
        if messages is not None and not any(m.text for m in messages):
            raise ValueError("the messages hold no text")
        return messages

    @model_validator(mode="after")
    def _lengths(self) -> CompletionCall:
        if (self.max_tokens is not None and self.max_completion_tokens is not None
                and self.max_tokens != self.max_completion_tokens):
            raise ValueError(f"max_tokens ({self.max_tokens}) and max_completion_tokens "
                             f"({self.max_completion_tokens}) disagree; give one")
        return self


STATIC = Path(__file__).parent / "static"
"""The web page's files, shipped in the package (no build step, no network)."""
ASSETS = ("app.js", "app.css")

DEFAULT_MAX_TOKENS = 16
"""OpenAI's ``max_tokens`` default for completions, taken for both routes when neither length is given."""


def create_app(token: str | None = None, limits: ServeLimits | None = None, folder: Path = READY_DIR) -> FastAPI:
    """The API, its routes wanting ``token`` if one is given, runs held to ``limits``, ready scenarios read from
    ``folder``."""
    limits = limits or ServeLimits()
    app = FastAPI(title="simmodel", description="GPU-free LLM serving simulation: scenario runs and timing "
                                                "estimates.")

    @app.middleware("http")
    async def bearer(request: Request, call_next):
        """With a token, every route but the page, its files and the OpenAPI pages wants it (checked before the
        body is read: a caller without it learns nothing of the body's rules)."""
        path = request.url.path
        if token is not None and path not in OPEN_PATHS and not path.startswith("/static/"):
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), token.encode()):
                return JSONResponse({"detail": "missing or wrong bearer token"}, 401,
                                    headers={"WWW-Authenticate": "Bearer"})
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """FastAPI's 422, with what it echoes made JSON (a NaN or Infinity sent is shown as text)."""
        return JSONResponse({"detail": _json_safe(exc.errors())}, 422)

    @app.get("/api/scenarios/ready")
    def ready() -> list[dict]:
        """The ready scenarios a call can run (not a search, nor one that needs its own traffic or planner)."""
        return [describe(path) for path in usable_scenarios(folder).values()]

    @app.post("/api/scenarios")
    def run_scenario(call: ScenarioCall) -> dict:
        short = call.requests is None
        try:
            if short:
                check_size(call.num_requests, call.num_requests * (call.prompt_tokens + call.output_tokens), limits,
                           "num_requests", "num_requests")
                arrivals = shorthand(call.num_requests, call.prompt_tokens, call.output_tokens, call.arrival_rate_rps)
            else:
                check_size(len(call.requests), sum(r.prompt_tokens + r.output_tokens for r in call.requests), limits,
                           "requests", "requests")
                arrivals = explicit([r.model_dump() for r in call.requests])
            ready = None if call.scenario is None else ready_path(call.scenario, folder)
            simulated = simulate(ready, call.engine, arrivals,
                                 call.scheduler.model_dump() if call.scheduler else None, limits)
        except (WorkloadError, CallError) as exc:
            field = _shorthand_field(exc.field) if short else exc.field
            raise _unprocessable(field, exc.message) from None
        got = answer(simulated, arrivals)
        if call.charts:
            got["charts"] = figures(simulated)
        return got

    @app.get("/api/catalog")
    def catalog() -> dict:
        """The model and GPU system ids the registries know (what an engine block may name)."""
        return {"models": sorted(MODELS), "systems": sorted(HARDWARE)}

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/static/{name}", include_in_schema=False)
    def asset(name: str) -> FileResponse:
        if name == "plotly.min.js":  # (plotly's own copy: the page works offline)
            return FileResponse(Path(plotly.__file__).parent / "package_data" / "plotly.min.js")
        if name not in ASSETS:
            raise HTTPException(404, "no such asset")
        return FileResponse(STATIC / name)

    def estimate(call: CompletionCall, kind: Literal["text", "chat"]):
        prompt = call.prompt[0] if isinstance(call.prompt, list) else call.prompt
        if kind == "chat" and (call.messages is None or call.prompt is not None):
            raise _unprocessable("messages", "a chat completion takes messages (and no prompt)")
        if kind == "text" and (prompt is None or call.messages is not None):
            raise _unprocessable("prompt", "a completion takes a prompt (and no messages)")
        messages = None if call.messages is None else [{"role": m.role, "content": m.text} for m in call.messages]
        try:
            ready = ready_path(call.model, folder)
            prompt_tokens, source = openai.count_prompt(describe(ready)["model"], prompt, messages)
            output_tokens = call.max_completion_tokens or call.max_tokens or DEFAULT_MAX_TOKENS
            arrivals = shorthand(1, prompt_tokens, output_tokens, None)
            simulated = simulate(ready, None, arrivals, None, limits)
        except (WorkloadError, CallError) as exc:
            field = {"requests[0].prompt_tokens": "max_tokens", "scenario": "model"}.get(exc.field, exc.field)
            raise _unprocessable(field, exc.message) from None
        res = simulated.results
        row = results.request_rows(res.requests, arrivals, simulated.order)[0]
        assumptions = [f"prompt tokens counted by {source}",
                       "the request arrives alone at time zero: no batch is shared with other calls",
                       *results.assumptions(simulated.scenario)]
        estimate_ = openai.timing(row, res.summary, prompt_tokens, source, assumptions)
        tokens = openai.placeholder(row["output_tokens"], call.seed)
        ident = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        if call.stream:
            usage = call.stream_options is not None and call.stream_options.include_usage  # (then usage: null
            # in every chunk before the usage chunk, as OpenAI sends it)
            return StreamingResponse(openai.stream(kind, ident, created, call.model, tokens, estimate_,
                                                   prompt_tokens if usage else None),
                                     media_type="text/event-stream")
        return openai.completion(kind, ident, created, call.model, tokens, prompt_tokens, estimate_)

    @app.post("/v1/completions")
    def completions(call: CompletionCall):
        return estimate(call, "text")

    @app.post("/v1/chat/completions")
    def chat_completions(call: CompletionCall):
        return estimate(call, "chat")

    return app


def figures(simulated) -> list[dict]:
    """The run's charts (``plots.charts.run_charts``) as plotly figure JSON."""
    res = simulated.results
    return [json.loads(fig.to_json()) for fig in run_charts(res.requests, res.passes, res.summary)]


OPEN_PATHS = frozenset({"/", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
"""Served without the token: the page (it holds no data; its calls carry the token) and the OpenAPI pages."""


def _shorthand_field(field: str) -> str:
    """The shorthand field an error about the requests it made is about."""
    if field.startswith("requests["):
        rest = field.split(".", 1)[1] if "." in field else "num_requests"
        return "arrival_rate_rps" if rest == "arrival_s" else rest
    return "num_requests" if field == "requests" else field


def _json_safe(value):
    """``value`` as JSON can hold it: non-finite numbers and other objects (an exception in ``ctx``) as text."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):  # (a lone surrogate escaped; a long echo cut)
        text = value.encode("utf-8", "backslashreplace").decode("utf-8")
        return text if len(text) <= ECHO else text[:ECHO] + f"… ({len(text):,} characters)"
    if value is None or isinstance(value, (int, bool)):
        return value
    return _json_safe(str(value))


ECHO = 200
"""The most characters of a value a 422 echoes back."""


def _unprocessable(field: str, message: str) -> HTTPException:
    """A 422 in FastAPI's own shape, naming the field (list positions as numbers, as pydantic gives them)."""
    parts = field.replace("[", ".").replace("]", "").split(".")
    return HTTPException(422, [{"loc": ["body", *(int(p) if p.isdigit() else p for p in parts)], "msg": message,
                                "type": "value_error"}])

