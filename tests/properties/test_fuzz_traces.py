"""Fuzzing the trace readers: the first lines of real Mooncake, Azure and plain-CSV traces, with random
bytes, lines and fields mutated, are either read or refused with one ScenarioError line."""

from __future__ import annotations

from factories import builtin_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simmodel.errors import ScenarioError
from simmodel.traffic.traces import read_trace

CSV_SAMPLE = "arrival_s,input_tokens,output_tokens,dp_rank\n0.0,100,5,0\n0.5,2000,40,1\n1.25,7,1,0\n"


def _head(name: str, lines: int = 6) -> str:
    with builtin_trace(name).open(encoding="utf-8") as f:
        return "".join(next(f) for _ in range(lines))


SAMPLES = {"mooncake": _head("mooncake/conversation_head2000.jsonl"), "azure": _head("azure/conv_2023.csv"),
           "csv": CSV_SAMPLE}

TOKENS = st.sampled_from(["", "-1", "0", "1e400", "nan", "inf", "null", "[]", "{}", '"x"', "9" * 30, ",", ":",
                          '"', "\n", "true", "1.5", "-0.0", "\x00", "é", "[1,2", "[-5]"])


@st.composite
def mutated(draw):
    fmt = draw(st.sampled_from(sorted(SAMPLES)))
    text = SAMPLES[fmt]
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "replace", "delete", "dup_line"]))
        if kind == "insert":
            text = text[:at] + draw(TOKENS) + text[at:]
        elif kind == "replace":
            end = min(len(text), at + draw(st.integers(1, 8)))
            text = text[:at] + draw(TOKENS) + text[end:]
        elif kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 20)):]
        else:
            lines = text.splitlines(keepends=True)
            if lines:
                text += lines[draw(st.integers(0, len(lines) - 1))]
    return fmt, text, draw(st.booleans())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(mutated())
def test_mutated_traces_are_read_or_refused_in_one_line(tmp_path, case):
    fmt, text, monotone = case
    path = tmp_path / f"trace.{fmt}"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        data = read_trace(path, fmt, require_monotone=monotone)
    except ScenarioError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert len(data) >= 1 and (data.input_tokens >= 1).all() and (data.output_tokens >= 1).all()
