"""The HTTP API (``simmodel serve``): scenario runs and OpenAI-compatible estimates, over FastAPI.

- ``GET /api/scenarios/ready``: the ready scenarios (name, model, hardware, backend, mode).
- ``POST /api/scenarios``: a deployment (``scenario`` or ``engine``) serving a shorthand workload or explicit
  requests, with optional scheduler overrides; answers the aggregate, each request, each pass (sampled above
  5,000 rows), the scheduler as run, assumptions, provenance counts and the whole summary.
- ``POST /v1/completions``, ``POST /v1/chat/completions``: one request's timing estimate in OpenAI's shapes
  (``openai``).

Bodies are checked by pydantic (422 naming the field); what only a run can tell (a context exceeded, a run past
the server's limits) is 422 too, with the field named. With a token (``--token`` or ``SIMMODEL_API_TOKEN``)
every route but the OpenAPI pages wants ``Authorization: Bearer <token>`` (401 without). Routes are plain
functions, which FastAPI runs in its worker threads: concurrent calls run side by side, each in a simulation
of its own.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from pathlib import Path
from typing import Literal

import plotly
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from simmodel.perf.hardware import HARDWARE
from simmodel.perf.models import MODELS
from simmodel.plots.charts import run_charts
from simmodel.serve import openai, results
from simmodel.serve.run import CallError, answer, simulate
from simmodel.serve.workload import (
    READY_DIR,
    ServeLimits,
    WorkloadError,
    describe,
    explicit,
    ready_scenarios,
    shorthand,
)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RequestSpec(Strict):
    id: str | None = None
    arrival_s: float = Field(ge=0, allow_inf_nan=False)
    prompt_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)


class SchedulerOverrides(Strict):
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)


class ScenarioCall(Strict):
    """``POST /api/scenarios``: one deployment selector and one workload form."""

    scenario: str | None = None
    engine: dict | None = None
    num_requests: int | None = Field(default=None, ge=1)
    prompt_tokens: int | None = Field(default=None, ge=1)
    output_tokens: int | None = Field(default=None, ge=1)
    arrival_rate_rps: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    requests: list[RequestSpec] | None = None
    scheduler: SchedulerOverrides | None = None
    charts: bool = False
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


class Message(BaseModel):
    role: str
    content: str


class CompletionCall(BaseModel):
    """The OpenAI request fields simmodel reads (others are accepted and ignored, as OpenAI servers do)."""

    model: str
    prompt: str | list[str] | None = None
    messages: list[Message] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stream: bool = False
    seed: int | None = None

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

    def authorized(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization", "")
        if not (given.startswith("Bearer ") and secrets.compare_digest(given[7:], token)):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    guard = [Depends(authorized)]

    @app.get("/api/scenarios/ready", dependencies=guard)
    def ready() -> list[dict]:
        return [describe(path) for path in ready_scenarios(folder).values()]

    @app.post("/api/scenarios", dependencies=guard)
    def run_scenario(call: ScenarioCall) -> dict:
        try:
            if call.requests is not None:
                arrivals = explicit([r.model_dump() for r in call.requests])
            else:
                arrivals = shorthand(call.num_requests, call.prompt_tokens, call.output_tokens, call.arrival_rate_rps)
            simulated = simulate(call.scenario, call.engine, arrivals,
                                 call.scheduler.model_dump() if call.scheduler else None, limits, folder)
        except (WorkloadError, CallError) as exc:
            raise _unprocessable(exc.field, exc.message) from None
        got = answer(simulated, arrivals)
        if call.charts:
            got["charts"] = figures(simulated)
        return got

    @app.get("/api/catalog", dependencies=guard)
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
        prompt = call.prompt if not isinstance(call.prompt, list) else "".join(call.prompt)
        if kind == "chat" and call.messages is None:
            raise _unprocessable("messages", "a chat completion needs messages")
        if kind == "text" and prompt is None:
            raise _unprocessable("prompt", "a completion needs a prompt")
        ready_paths = ready_scenarios(folder)
        if call.model not in ready_paths:
            raise _unprocessable("model", f"no ready scenario named {call.model!r} (ready: "
                                          f"{', '.join(ready_paths) or 'none found'})")
        model_id = describe(ready_paths[call.model])["model"]
        messages = None if call.messages is None else [m.model_dump() for m in call.messages]
        prompt_tokens, source = openai.count_prompt(model_id, prompt, messages)
        output_tokens = call.max_completion_tokens or call.max_tokens or DEFAULT_MAX_TOKENS
        try:
            arrivals = shorthand(1, prompt_tokens, output_tokens, None)
            simulated = simulate(call.model, None, arrivals, None, limits, folder)
        except (WorkloadError, CallError) as exc:
            field = {"requests[0].prompt_tokens": "max_tokens"}.get(exc.field, exc.field)
            raise _unprocessable(field, exc.message) from None
        res = simulated.results
        row = answer(simulated, arrivals)["requests"][0]
        itl = res.summary["itl_ms"]
        row |= {"itl_ms_mean": itl.get("mean"), "itl_ms_p50": itl.get("p50")}
        assumptions = [f"prompt tokens counted by {source}",
                       "the request arrives alone at time zero: no batch is shared with other calls",
                       *results.assumptions(simulated.scenario)]
        estimate_ = openai.timing(row, res.summary, prompt_tokens, source, assumptions)
        tokens = openai.placeholder(row["output_tokens"], call.seed)
        ident = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        if call.stream:
            return StreamingResponse(openai.stream(kind, ident, created, call.model, tokens, estimate_),
                                     media_type="text/event-stream")
        return openai.completion(kind, ident, created, call.model, tokens, prompt_tokens, estimate_)

    @app.post("/v1/completions", dependencies=guard)
    def completions(call: CompletionCall):
        return estimate(call, "text")

    @app.post("/v1/chat/completions", dependencies=guard)
    def chat_completions(call: CompletionCall):
        return estimate(call, "chat")

    return app


def figures(simulated) -> list[dict]:
    """The run's charts (``plots.charts.run_charts``) as plotly figure JSON."""
    res = simulated.results
    return [json.loads(fig.to_json()) for fig in run_charts(res.requests, res.passes, res.summary)]


def _unprocessable(field: str, message: str) -> HTTPException:
    """A 422 in FastAPI's own shape, naming the field."""
    return HTTPException(422, [{"loc": ["body", *field.replace("[", ".").replace("]", "").split(".")],
                                "msg": message, "type": "value_error"}])

