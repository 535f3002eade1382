"""What one API call asks to simulate: a deployment and a list of requests, turned into a scenario.

``POST /api/scenarios`` and the OpenAI-compatible estimates describe a deployment by a ready scenario's name
(``scenarios/<name>.yaml``) or by an ``engine`` block as in YAML, and a workload either as the shorthand
(``num_requests`` of ``prompt_tokens`` in and ``output_tokens`` out, arriving all at zero or at ``i / rate``)
or as explicit requests. Both forms become one CSV trace of exact lengths replayed at its own timestamps, so
what is simulated is exactly what was asked (no length distribution, no sampling). Nothing here knows HTTP: a
bad call raises ``WorkloadError`` naming the field, which the server answers with 422.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

import simmodel

READY_DIR = Path(simmodel.__file__).resolve().parents[1] / "scenarios"
"""The ready scenarios beside the package (a checkout, or an editable install of one)."""


class WorkloadError(ValueError):
    """A call asks for something the rules refuse: ``field`` names it (``requests[3].arrival_s``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True)
class ServeLimits:
    """What one call may ask for, so that no call can hold a worker for long (``simmodel serve`` options)."""

    max_requests: int = 4096
    max_total_tokens: int = 1_000_000
    """Prompt plus output tokens over all the call's requests."""
    max_passes: int = 100_000
    """Passes the simulation may run (``limits.max_passes``): a run that needs more is refused, not finished."""
    max_arrival_s: float = 1e9


@dataclass(frozen=True)
class Arrival:
    """One request of a call: its id, arrival instant and exact lengths."""

    id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


def ready_scenarios(folder: Path = READY_DIR) -> dict[str, Path]:
    """The ready scenarios by name (file stem); a ``recommend`` search's is its base deployment."""
    if not folder.is_dir():
        return {}
    found = {}
    for path in sorted(folder.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and "engine" in data:
            found[path.stem] = path
    return found


def describe(path: Path) -> dict:
    """A ready scenario's name, model, hardware, backend and mode, as its YAML gives them (defaults filled)."""
    engine = yaml.safe_load(path.read_text())["engine"]
    return {"name": path.stem, "model": engine.get("model"), "hardware": engine.get("hardware"),
            "backend": engine.get("backend", "vllm"), "mode": engine.get("mode", "aggregated")}


def deployment(ready: Path | None, engine: dict | None) -> tuple[dict, Path]:
    """The scenario mapping to build on (its traffic replaced later) and the folder its paths are relative to: a
    ready scenario's file (``run.ready_path``: its planner, evaluation, limits and search left out) or a bare one
    around an ``engine`` block sent over HTTP (registry ids only, not nested too deep). One of the two is given."""
    assert (ready is None) != (engine is None)
    if ready is not None:
        data = yaml.safe_load(ready.read_text())
        for key in ("planner", "evaluation", "sla", "limits", "optimization", "optimizer"):
            data.pop(key, None)  # (a call's run is its requests alone, on its deployment, under the server's limits)
        return data, ready.parent
    _registry_ids_only(engine)
    if _depth(engine) > MAX_DEPTH:
        raise WorkloadError("engine", f"nested deeper than {MAX_DEPTH} levels; an engine block is a few levels deep")
    return {"engine": copy.deepcopy(engine)}, Path(".")


MAX_DEPTH = 16
"""How deep an engine block sent over HTTP may nest (a real one is five or six levels)."""


def _depth(value, level: int = 0) -> int:
    """How deeply ``value`` nests mappings and lists (stopping once past ``MAX_DEPTH``)."""
    if level > MAX_DEPTH or not isinstance(value, (dict, list)):
        return level
    items = value.values() if isinstance(value, dict) else value
    return max((_depth(v, level + 1) for v in items), default=level + 1)


def _registry_ids_only(engine: dict) -> None:
    """An engine block sent over HTTP names models and systems by registry id, and no file: a path would let a
    caller read the server's files (and learn which exist)."""
    from simmodel.perf.hardware import HARDWARE
    from simmodel.perf.models import MODELS

    if not isinstance(engine, dict):
        raise WorkloadError("engine", "must be a mapping (an engine block as in YAML)")
    model = engine.get("model")
    if model is not None and not isinstance(model, str):
        raise WorkloadError("engine.model", "must be a model's registry id (a string)")
    if model is not None and model not in MODELS:
        raise WorkloadError("engine.model", f"unknown model {model!r}: over HTTP give a registry id (GET /api/catalog)")
    places = [("engine.hardware", engine.get("hardware"))]
    workers = engine.get("workers")
    for name, role in (workers.items() if isinstance(workers, dict) else ()):
        if isinstance(role, dict):
            places.append((f"engine.workers.{name}.hardware", role.get("hardware")))
            if "host_profile" in role:
                raise WorkloadError(f"engine.workers.{name}.host_profile", "names a file; not taken over HTTP")
            timing = role.get("timing")
            if isinstance(timing, dict) and "calibration" in timing:
                raise WorkloadError(f"engine.workers.{name}.timing.calibration", "names a file; not taken over HTTP")
    for field, value in places:
        if value is not None and not isinstance(value, str):
            raise WorkloadError(field, "must be a GPU system's registry id (a string)")
        if value is not None and value not in HARDWARE:
            raise WorkloadError(field, f"unknown system {value!r}: over HTTP give a registry id (GET /api/catalog)")


def check_size(count: int, total_tokens: int, limits: ServeLimits, count_field: str, tokens_field: str) -> None:
    """A call's request count and prompt + output tokens within the limits, checked before any list is built."""
    if count > limits.max_requests:
        raise WorkloadError(count_field, f"{count} requests; the server takes at most {limits.max_requests} a call")
    if total_tokens > limits.max_total_tokens:
        raise WorkloadError(tokens_field, f"{total_tokens:,} prompt + output tokens in all; the server takes at most "
                                          f"{limits.max_total_tokens:,} a call")


def shorthand(num_requests: int, prompt_tokens: int, output_tokens: int,
              arrival_rate_rps: float | None) -> list[Arrival]:
    """``num_requests`` alike: all at zero (no rate, or 0), else the i-th at ``i / rate`` seconds."""
    rate = arrival_rate_rps or 0.0
    return [Arrival(f"request-{i}", i / rate if rate > 0 else 0.0, prompt_tokens, output_tokens)
            for i in range(num_requests)]


def explicit(rows: list[dict]) -> list[Arrival]:
    """Explicit requests (``id`` defaults to ``request-<index>``; ids must be unique)."""
    arrivals, seen = [], set()
    for i, row in enumerate(rows):
        ident = row.get("id") or f"request-{i}"
        if ident in seen:
            raise WorkloadError(f"requests[{i}].id", f"{ident!r} is given twice; ids must be unique")
        seen.add(ident)
        arrivals.append(Arrival(ident, float(row["arrival_s"]), int(row["prompt_tokens"]), int(row["output_tokens"])))
    return arrivals


def check(arrivals: list[Arrival], limits: ServeLimits, context_length: int) -> None:
    """The server's limits and the model's context: each request's arrival finite and within 0 … the limit,
    prompt + output within the context, and the call's totals within the limits."""
    if not arrivals:
        raise WorkloadError("requests", "must hold at least one request")
    total = 0
    for i, a in enumerate(arrivals):
        if not math.isfinite(a.arrival_s) or not 0 <= a.arrival_s <= limits.max_arrival_s:
            raise WorkloadError(f"requests[{i}].arrival_s", f"must be a finite number of seconds within 0 … "
                                                            f"{limits.max_arrival_s:g}, got {a.arrival_s!r}")
        if a.prompt_tokens + a.output_tokens > context_length:
            raise WorkloadError(f"requests[{i}].prompt_tokens", f"prompt + output = {a.prompt_tokens + a.output_tokens} "
                                                                f"tokens exceeds the deployment's context length "
                                                                f"({context_length})")
        total += a.prompt_tokens + a.output_tokens
    check_size(len(arrivals), total, limits, "requests", "requests")


def with_requests(data: dict, trace: Path, arrivals: list[Arrival], scheduler: dict | None,
                  limits: ServeLimits) -> dict:
    """``data`` serving ``arrivals`` (written to ``trace`` as a CSV of exact lengths, in arrival order), with the
    scheduler overrides applied to every role and the pass limit set."""
    lines = ["arrival_s,input_tokens,output_tokens"]
    lines += [f"{arrivals[i].arrival_s!r},{arrivals[i].prompt_tokens},{arrivals[i].output_tokens}"
              for i in arrival_order(arrivals)]
    trace.write_text("\n".join(lines) + "\n")
    data = copy.deepcopy(data)
    data["traffic"] = {"source": {"type": "trace", "path": str(trace), "format": "csv"},
                       "load": {"type": "trace_timestamps"}}
    # (the run starts at the first arrival and may reach the last, up to 1e9 s later: the most the limit allows)
    data["limits"] = {"max_passes": limits.max_passes, "max_virtual_time_seconds": 1e9}
    if scheduler:
        renamed = {"max_num_seqs": "max_sequences", "max_num_batched_tokens": "max_batched_tokens"}
        for role in data["engine"].get("workers", {}).values():
            role.setdefault("scheduler", {}).update({renamed[k]: v for k, v in scheduler.items() if v is not None})
    return data


def arrival_order(arrivals: list[Arrival]) -> list[int]:
    """Which of ``arrivals`` each simulated request id is (the trace lists them by arrival time)."""
    return sorted(range(len(arrivals)), key=lambda i: (arrivals[i].arrival_s, i))
