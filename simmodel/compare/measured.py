"""Benchmark result files read as they are: ``vllm bench serve --save-result`` JSON, inference-perf's
``summary_lifecycle_metrics.json`` (with its ``stage_N_lifecycle_metrics.json`` beside it), GuideLLM's
report JSON and AIPerf's ``profile_export_aiperf.json``.

Each file becomes ``Measurement``: scopes (the whole run, or one stage / one GuideLLM benchmark each),
each a list of ``Figure`` rows — the tool's own metric name and statistic, its value in milliseconds
(latencies) or per second (rates), and the definition (``simmodel.compare.definitions``) under which
the simulated side computes the same thing. Units are converted here: inference-perf writes seconds,
GuideLLM seconds for ``request_latency`` and ms for the rest, vLLM and AIPerf ms.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from simmodel.config.json_safe import parse_json
from simmodel.config.load import read_text_file
from simmodel.errors import ScenarioError

TOOLS = ("vllm-bench", "inference-perf", "guidellm", "aiperf")


@dataclass(frozen=True)
class Figure:
    metric: str
    """The tool's name for it (e.g. ``p99_ttft_ms``'s metric ``ttft``, inference-perf's
    ``time_to_first_token``)."""
    stat: str
    """``mean``, ``median``, ``std``, ``min``, ``max`` or ``pQ`` (``p99``, ``p99.9``)."""
    value: float
    definition: str
    """Which simulated quantity it is (a key of ``definitions.DEFINITIONS``)."""
    tokens: float | None = None
    """``decode_step_from_means``: the mean output count the tool divided by, as it counted the streamed
    text; the simulated side divides by the same count, so the two compare the time from first token to
    last, whatever the tool's count (inference-perf re-tokenizes the text, which can give fewer tokens
    than the server generated)."""


@dataclass
class Scope:
    name: str
    stage: int | None
    """The scenario's stage it is compared with, None for the whole run."""
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What of the file's figures is not compared, and why."""


@dataclass
class Measurement:
    tool: str
    path: Path
    scopes: list[Scope]
    requests: int | None = None
    """Requests the measured run sent, where the file says (to check a scenario describes the same run)."""


def detect(data) -> str | None:
    """Which tool wrote a parsed result file, from its keys."""
    if isinstance(data, dict):
        if "benchmarks" in data and isinstance(data["benchmarks"], list):
            return "guidellm"
        if "successes" in data and "load_summary" in data:
            return "inference-perf"
        if "mean_ttft_ms" in data or ("duration" in data and "completed" in data):
            return "vllm-bench"
        if isinstance(data.get("time_to_first_token"), dict) or isinstance(data.get("request_latency"), dict):
            return "aiperf"
    return None


def read_measured(path: Path, tool: str | None = None) -> Measurement:
    """Read a result file; ``tool`` is detected from its keys when not given."""
    text = read_text_file(path, "--measured")
    try:
        data = parse_json(text, f"--measured {path}")
    except ScenarioError as whole:
        lines = [line for line in text.splitlines() if line.strip()]  # vllm bench --append-result: one per line
        try:
            data = parse_json(lines[-1], "") if len(lines) > 1 else None
        except ScenarioError:
            data = None
        if data is None:
            raise whole from None
    found = detect(data)
    if tool is None:
        if found is None:
            raise ScenarioError(f"--measured {path}: not a result file of {', '.join(TOOLS)}; give --tool")
        tool = found
    elif found is not None and found != tool:
        raise ScenarioError(f"--measured {path}: looks like a {found} result, not {tool}")
    if not isinstance(data, dict) or (tool == "guidellm" and not isinstance(data.get("benchmarks"), list)):
        raise ScenarioError(f"--measured {path}: not a {tool} result file"
                            + (" (no benchmarks list)" if tool == "guidellm" else " (not a JSON object)"))
    reader = {"vllm-bench": _vllm_bench, "inference-perf": _inference_perf, "guidellm": _guidellm,
              "aiperf": _aiperf}[tool]
    scopes = reader(data, path)
    for scope in scopes:  # statistics this comparison computes; anything else is not compared
        scope.figures = [f for f in scope.figures if known_stat(f.stat)]
    if not any(scope.figures for scope in scopes):
        raise ScenarioError(f"--measured {path}: no metric this comparison knows was found in the {tool} file")
    return Measurement(tool, path, scopes, _request_count(tool, data))


def _request_count(tool: str, data: dict) -> int | None:
    """The number of requests sent, as each tool records it (None where it does not)."""
    def integer(value):
        return int(value) if _number(value) is not None and float(value).is_integer() and value >= 0 else None

    def mapping(value) -> dict:
        return value if isinstance(value, dict) else {}
    if tool == "vllm-bench":
        done, failed = integer(data.get("completed")), integer(data.get("failed"))
        return None if done is None else done + (failed or 0)
    if tool == "inference-perf":
        return integer(mapping(data.get("load_summary")).get("count"))
    if tool == "guidellm":
        totals = [integer(mapping(mapping(mapping(b).get("metrics")).get("request_totals")).get("total"))
                  for b in data["benchmarks"]]
        return sum(totals) if totals and None not in totals else None
    return integer(mapping(data.get("request_count")).get("avg"))


def _number(value) -> float | None:
    """A finite number, or None (NaN and infinities are not measured values)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def known_stat(stat: str) -> bool:
    """``value`` (a rate), ``mean``, ``median``, ``std``, ``min``, ``max``, or a percentile ``pQ`` with Q in
    [0, 100]."""
    if stat in ("value", "mean", "median", "std", "min", "max"):
        return True
    m = re.fullmatch(r"p(\d+(?:\.\d+)?)", stat)
    return m is not None and 0 <= float(m.group(1)) <= 100


# -- vllm bench serve ------------------------------------------------------------------------------------------

_VLLM = {"ttft": "ttft", "tpot": "tpot_per_request", "itl": "itl_pooled", "e2el": "e2e"}
_VLLM_KEY = re.compile(r"^(mean|median|std|p[0-9.]+)_(ttft|tpot|itl|e2el)_ms$")


def _vllm_bench(data: dict, path: Path) -> list[Scope]:
    scope = Scope("run", None)
    for key, value in data.items():
        m = _VLLM_KEY.match(key)
        if m and _number(value) is not None:
            scope.figures.append(Figure(m.group(2), m.group(1), float(value), _VLLM[m.group(2)]))
    for key, definition in (("request_throughput", "request_throughput"), ("output_throughput", "output_throughput")):
        if _number(data.get(key)) is not None:
            scope.figures.append(Figure(key, "value", float(data[key]), definition))
    return [scope]


# -- inference-perf ------------------------------------------------------------------------------------------

_IPERF = {"time_to_first_token": "ttft_multi_token", "normalized_time_per_output_token": "ntpot",
          "request_latency": "e2e"}
_IPERF_CHUNKED = ("time_per_output_token", "inter_token_latency")
"""inference-perf's figures timed from the streamed chunks: a server that sends several chunks per token
(vLLM sends about two) makes them shorter than the decode step, which the simulation cannot see."""
DERIVED_TPOT = "derived_time_per_output_token"


def _iperf_scope(data: dict, name: str, stage: int | None) -> Scope:
    scope = Scope(name, stage)
    successes = data.get("successes") if isinstance(data.get("successes"), dict) else {}
    latency = successes.get("latency") if isinstance(successes.get("latency"), dict) else {}
    for metric, definition in _IPERF.items():
        block = latency.get(metric)
        if isinstance(block, dict):
            for stat, value in block.items():
                if _number(value) is not None:
                    scope.figures.append(Figure(metric, stat, float(value) * 1000.0, definition))  # s → ms
    chunked = [m for m in _IPERF_CHUNKED if isinstance(latency.get(m), dict)]
    if chunked:
        derived = _iperf_decode_step(latency, successes.get("output_len"))
        counted = successes["output_len"].get("mean") if derived is not None else None
        scope.notes.append(
            f"{name}: {' and '.join(chunked)} not compared: inference-perf times them from the streamed chunks, "
            f"shorter than the decode step when the server sends several chunks per token; "
            + (f"compared instead: {DERIVED_TPOT} = (mean request_latency − mean time_to_first_token) / "
               f"(mean output_len − 1)" if derived is not None else
               f"{DERIVED_TPOT} needs the means of request_latency, time_to_first_token and output_len (> 1)"))
        if derived is not None:
            scope.figures.append(Figure(DERIVED_TPOT, "mean", derived, "decode_step_from_means", float(counted)))
    throughput = successes.get("throughput") if isinstance(successes.get("throughput"), dict) else {}
    for metric, definition in (("requests_per_sec", "request_throughput"), ("output_tokens_per_sec", "output_throughput")):
        if _number(throughput.get(metric)) is not None:
            scope.figures.append(Figure(metric, "value", float(throughput[metric]), definition))
    return scope


def _iperf_decode_step(latency: dict, output_len) -> float | None:
    """The mean decode step, in ms, from inference-perf's aggregate means (its summary files give no
    per-request values): (mean E2E − mean TTFT) / (mean output tokens − 1); None where one is missing."""
    def mean(block) -> float | None:
        return _number(block.get("mean")) if isinstance(block, dict) else None
    e2e, ttft, tokens = mean(latency.get("request_latency")), mean(latency.get("time_to_first_token")), mean(output_len)
    if e2e is None or ttft is None or tokens is None or tokens <= 1:
        return None
    return (e2e - ttft) * 1000.0 / (tokens - 1)  # s → ms


def _inference_perf(data: dict, path: Path) -> list[Scope]:
    scopes = [_iperf_scope(data, "run", None)]
    stage_files = sorted((int(m.group(1)), p) for p in path.parent.iterdir()
                         if (m := re.fullmatch(r"stage_(\d+)_lifecycle_metrics\.json", p.name)))
    for k, stage_path in stage_files:
        stage = parse_json(read_text_file(stage_path, "--measured"), f"--measured {stage_path}")
        if not isinstance(stage, dict):
            raise ScenarioError(f"--measured {stage_path}: not a stage file (not a JSON object)")
        scopes.append(_iperf_scope(stage, f"stage {k}", k))
    return scopes


# -- GuideLLM ------------------------------------------------------------------------------------------------

# metric: (definition, value scale to ms or /s, weighting)
_GUIDELLM = {
    "time_to_first_token_ms": ("ttft", 1.0),
    "inter_token_latency_ms": ("itl_per_request_weighted", 1.0),
    "time_per_output_token_ms": ("tpot_guidellm", 1.0),
    "request_latency": ("e2e", 1000.0),  # seconds
    "requests_per_second": ("request_throughput", 1.0),
    "output_tokens_per_second": ("output_throughput", 1.0),
}


def _guidellm(data: dict, path: Path) -> list[Scope]:
    benchmarks = data["benchmarks"]
    scopes = []
    for k, bench in enumerate(benchmarks):
        if not isinstance(bench, dict):
            raise ScenarioError(f"--measured {path}: benchmarks[{k}] is not a mapping")
        scope = Scope("run" if len(benchmarks) == 1 else f"benchmark {k}", None if len(benchmarks) == 1 else k)
        metrics = bench.get("metrics") if isinstance(bench.get("metrics"), dict) else {}
        if not metrics:
            raise ScenarioError(f"--measured {path}: benchmarks[{k}].metrics: missing")
        for metric, (definition, scale) in _GUIDELLM.items():
            block = metrics.get(metric)
            block = block.get("successful") if isinstance(block, dict) else None
            if not isinstance(block, dict):
                continue
            rate = definition.endswith("throughput")
            for stat in ("mean", "median", "std_dev", "min", "max"):
                if _number(block.get(stat)) is not None and not (rate and stat != "mean"):
                    name = "value" if rate else "std" if stat == "std_dev" else stat
                    scope.figures.append(Figure(metric, name, float(block[stat]) * scale, definition))
            percentiles = block.get("percentiles") if isinstance(block.get("percentiles"), dict) else {}
            for name, value in percentiles.items():
                m = re.fullmatch(r"p(\d{2,3})", name)  # p01 … p99 and p001 … p999
                if m and _number(value) is not None and not rate:
                    digits = m.group(1)  # p001 → 0.1, p01 → 1, p05 → 5, p50 → 50, p999 → 99.9
                    q = float(digits) / 10 if len(digits) == 3 else float(digits)
                    scope.figures.append(Figure(metric, f"p{q:g}", float(value) * scale, definition))
        scopes.append(scope)
    return scopes


# -- AIPerf --------------------------------------------------------------------------------------------------

_AIPERF = {"time_to_first_token": "ttft", "inter_token_latency": "tpot_per_request",
           "inter_chunk_latency": "itl_pooled", "request_latency": "e2e",
           "request_throughput": "request_throughput", "output_token_throughput": "output_throughput"}
_SCALE = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "us": 1e-3, "ns": 1e-6}


def _aiperf(data: dict, path: Path) -> list[Scope]:
    scope = Scope("run", None)
    for metric, definition in _AIPERF.items():
        block = data.get(metric)
        if not isinstance(block, dict):
            continue
        rate = definition.endswith("throughput")
        scale = 1.0 if rate else _SCALE.get(str(block.get("unit", "ms")))
        if scale is None:
            raise ScenarioError(f"--measured {path}: {metric}.unit {block.get('unit')!r} is not a time unit")
        for stat, value in block.items():
            if stat == "unit" or _number(value) is None or (rate and stat != "avg"):
                continue
            if not re.fullmatch(r"avg|min|max|std|p[0-9.]+", stat):
                continue  # adj_p99 and the like: failure-adjusted percentiles, not compared
            name = {"avg": "mean", "p50": "median"}.get(stat, stat)
            scope.figures.append(Figure(metric, "value" if rate else name, float(value) * scale, definition))
    return [scope]
