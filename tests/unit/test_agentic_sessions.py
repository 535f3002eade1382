"""Agentic sessions (issue 27): a trace of LLM-call graphs, each call sent with its parents' context once they are
done and its wait has passed; per-session metrics. Expected numbers are derived by hand in each docstring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import make_scenario, run_scenario

from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError
from simmodel.sim import check_workload

TRACE = [
    {"session": "s1", "call": "a", "start_s": 0, "new_input_tokens": 100, "output_tokens": 2},
    {"session": "s1", "call": "b", "after": ["a"], "wait_ms": 50, "new_input_tokens": 30, "output_tokens": 2},
    {"session": "s1", "call": "c", "after": ["a"], "wait_ms": 100, "new_input_tokens": 40, "output_tokens": 2},
    {"session": "s1", "call": "d", "after": ["b", "c"], "wait_ms": 0, "new_input_tokens": 10, "output_tokens": 1},
]


def workload_error(data: dict) -> str:
    """The one line a bad trace gives where the workload is read (``simmodel validate``, a run's start)."""
    with pytest.raises(ScenarioError) as info:
        check_workload(parse_scenario(data, Path(".")))
    return str(info.value)


def _scenario(tmp_path, rows=TRACE, **source) -> dict:
    path = tmp_path / "agents.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = make_scenario()
    data["traffic"] = {"source": {"type": "agentic", "path": str(path), **source}}
    return data


def test_fan_out_and_join(tmp_path):
    """Prompts: a 100; b = a's context (100 + its 2-token answer) + 30 = 132; c = 102 + 40 = 142; d joins b and c:
    b's context (132 + 2), then c's own 40 + 2, then 10: 186. Fixed timing (prefill 20 ms, decode 10 ms), no prefix
    caching: a runs 0–30 (prefill, one decode); b is sent 50 ms later, at 80, and runs to 110; c at 130, to 160; d
    once both are done, at 160, prefill only (one output token): 160–180. The session: 180 ms, of which 30 + 30 +
    50 = 110 in the engine and 70 waiting on tools."""
    data = _scenario(tmp_path)
    data["engine"]["workers"]["aggregated"]["kv_cache"]["prefix_caching"] = False
    res = run_scenario(data)
    req = res.requests
    assert req.input_tokens.tolist() == [100, 132, 142, 186]
    assert req.call.tolist() == ["a", "b", "c", "d"] and set(req.session) == {"s1"}
    assert (req.arrival_s * 1000).tolist() == pytest.approx([0, 80, 130, 160])
    assert req.e2e_ms.tolist() == pytest.approx([30, 30, 30, 20])
    s = res.summary["sessions"]
    assert (s["started"], s["completed"], s["abandoned"]) == (1, 1, 0)
    assert s["session_time_s"]["mean"] == pytest.approx(0.180)
    assert s["engine_time_s"]["mean"] == pytest.approx(0.110)
    assert s["tool_wait_time_s"]["mean"] == pytest.approx(0.070)


def test_prefix_caching_finds_the_parents_context(tmp_path):
    """16-token blocks. a computes 101 tokens (its prompt and first answer token): 6 full blocks of its prompt are
    cached. b's prompt opens with a's 100 tokens: blocks 0–5 hit (96 tokens); block 6 mixes a's last 4 tokens, its
    answer and b's own, unlike a's block 6 (which holds a's answer as it went on): a miss. c likewise 96. d opens
    with b's context: b computed 133 tokens, 8 full blocks cached (128 tokens), and d's first 8 blocks hold the same
    tokens in the same order: 128. The session's hit ratio: (96 + 96 + 128) / (100 + 132 + 142 + 186) = 320 / 560."""
    res = run_scenario(_scenario(tmp_path))
    assert res.requests.cached_tokens.tolist() == [0, 96, 96, 128]
    assert res.summary["sessions"]["prefix_cache_hit_ratio"]["mean"] == pytest.approx(320 / 560)


def test_system_prompt_is_shared_across_sessions(tmp_path):
    """Two one-call sessions 1 s apart, both opening with the same 64-token system prompt, then 40 own tokens:
    the second finds the system prompt's 4 blocks cached (64 tokens); the first finds nothing."""
    rows = [{"session": n, "call": "q", "start_s": t, "system": "sys", "system_tokens": 64, "new_input_tokens": 40,
             "output_tokens": 2} for n, t in (("x", 0), ("y", 1))]
    res = run_scenario(_scenario(tmp_path, rows))
    assert res.requests.input_tokens.tolist() == [104, 104]
    assert res.requests.cached_tokens.tolist() == [0, 64]


def test_a_concurrency_load_runs_sessions_one_after_another(tmp_path):
    """Concurrency 1 over two copies of the session: the second starts as the first ends, at 180 ms, and runs the
    same 180 ms (no cache hit from the first: its calls' contents are its own)."""
    rows = TRACE + [dict(r, session="s2") for r in TRACE]
    data = _scenario(tmp_path, rows)
    data["engine"]["workers"]["aggregated"]["kv_cache"]["prefix_caching"] = False
    data["traffic"]["load"] = {"type": "concurrency", "concurrency": 1}
    res = run_scenario(data)
    assert (res.requests.arrival_s * 1000).tolist()[4:] == pytest.approx([180, 260, 310, 340])
    assert res.summary["sessions"]["session_time_s"]["max"] == pytest.approx(0.180)


@pytest.mark.parametrize("rows, message", [
    ([{"session": 1, "call": "a", "after": ["z"], "new_input_tokens": 5, "output_tokens": 1}],
     "line 1: after: 'z' is not an earlier call of session '1'"),
    ([{"session": 1, "call": "a", "new_input_tokens": 5, "output_tokens": 1, "tools": 3}],
     "line 1: tools: unknown field"),
    ([dict(TRACE[0], keeps_context=False)], "line 1: keeps_context: only a call that waits on others"),
    ([TRACE[0], dict(TRACE[0])], "line 2: call: 'a' appears twice in session 's1'"),
    ([dict(TRACE[0], output_tokens=0)], "line 1: output_tokens: required, an integer from 1"),
])
def test_bad_lines_name_the_line_and_rule(tmp_path, rows, message):
    assert message in workload_error(_scenario(tmp_path, rows))


def test_names_compare_as_text(tmp_path):
    """Session 1 and session "1" are one session (they print alike), and after: [1] names call "1"."""
    from simmodel.traffic.agent_traces import read_agent_trace

    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"session": 1, "call": "1", "start_s": 0, "new_input_tokens": 5, "output_tokens": 1},
        {"session": "1", "call": 2, "after": [1], "wait_ms": 10, "new_input_tokens": 5, "output_tokens": 1}]))
    (session,) = read_agent_trace(path, "simmodel")
    assert session.name == "1" and [(c.name, c.parents) for c in session.calls] == [("1", ()), ("2", (0,))]


def test_a_missing_wait_needs_tool_latency(tmp_path):
    rows = [TRACE[0], {k: v for k, v in TRACE[1].items() if k != "wait_ms"}]
    assert ("traffic.source.tool_latency_ms: required, since call 'b' of session 's1' gives no wait_ms"
            in workload_error(_scenario(tmp_path, rows)))
    data = _scenario(tmp_path, rows, tool_latency_ms=250)  # fixed: b is sent 250 ms after a finishes (30 ms)
    data["engine"]["workers"]["aggregated"]["kv_cache"]["prefix_caching"] = False
    assert (run_scenario(data).requests.arrival_s * 1000).tolist() == pytest.approx([0, 280])


def _dynamo_row(rid, session, start_ms, end_ms, isl, osl, parent=None):
    agent = {"session_id": session, **({"parent_session_id": parent} if parent else {})}
    return {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": end_ms,
            "agent_context": agent, "request": {"request_id": rid, "input_tokens": isl, "output_tokens": osl,
                                                "request_received_ms": start_ms}}


def test_dynamo_request_trace_lowers_to_a_session_graph(tmp_path):
    """Session main: r1 (1.0–1.4 s, 300 → 40) then r2 (2.0–2.3 s, 520 → 50); sub-agent sub (parent main): s1
    (1.5–1.9 s, 120 → 30). s1 waits on main's latest call started before it, r1, 0.1 s after r1 ended; its 120-token
    prompt is shorter than r1's 340-token context, so it keeps none of it. r2, main's first call after s1 ended,
    waits on r1 (chained) and s1 (the join): r1's context 340 plus s1's own 150 = 490 ≤ 520, so it continues them
    with 30 new tokens, 0.1 s after s1 ended. A tool row and a sink's wrapper line are read too; gzip as well."""
    import gzip

    from simmodel.traffic.agent_traces import read_agent_trace

    rows = [_dynamo_row("r1", "main", 1000, 1400, 300, 40),
            {"schema": "dynamo.request.trace.v1", "event_type": "tool_end", "event_time_unix_ms": 1450,
             "agent_context": {"session_id": "main"}, "tool": {"tool_call_id": "t1", "tool_class": "grep"}},
            {"timestamp": 5, "event": _dynamo_row("s1", "sub", 1500, 1900, 120, 30, parent="main")},
            _dynamo_row("r2", "main", 2000, 2300, 520, 50)]
    path = tmp_path / "trace.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    (session,) = read_agent_trace(path, "dynamo")
    got = [(c.name, c.parents, c.wait_s, c.keeps_context, c.new_input_tokens, c.output_tokens) for c in session.calls]
    assert got[0] == ("r1", (), None, True, 300, 40)
    assert got[1][:2] == ("s1", (0,)) and got[1][2] == pytest.approx(0.1) and got[1][3:] == (False, 120, 30)
    assert got[2][:2] == ("r2", (0, 1)) and got[2][2] == pytest.approx(0.1) and got[2][3:] == (True, 30, 50)
    assert session.name == "main" and session.start_s == pytest.approx(1.0)


def _span(span_id, start_s, end_s, isl, osl, op="chat"):
    def attr(key, value):
        kind = "intValue" if isinstance(value, int) else "stringValue"
        return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}
    return {"traceId": "t" * 32, "spanId": span_id, "name": f"{op} m", "startTimeUnixNano": str(int(start_s * 1e9)),
            "endTimeUnixNano": str(int(end_s * 1e9)),
            "attributes": [attr("gen_ai.operation.name", op), attr("gen_ai.conversation.id", "c"),
                           attr("gen_ai.usage.input_tokens", isl), attr("gen_ai.usage.output_tokens", osl)]}


def test_otel_genai_spans_fan_out_and_join(tmp_path):
    """One conversation: A 0–1 s (100 → 20); B 1.5–2.0 (150 → 10) and C 1.6–2.2 (170 → 15) both start after A
    ended, so each waits on A (fan-out): 30 and 50 new tokens over A's 120-token context, 0.5 and 0.6 s after it.
    D 3.0–3.5 (300 → 5): B and C ended before it and are no one's parents: it joins them, C first (the larger
    context, 185), plus B's own 30 + 10: 225 ≤ 300, so 75 new tokens, 0.8 s after C ended. An execute_tool span is
    not a call. One OTLP TracesData line holds A, B and the tool; C and D come as bare spans."""
    from simmodel.traffic.agent_traces import read_agent_trace

    batch = {"resourceSpans": [{"scopeSpans": [{"spans": [
        _span("A", 0.0, 1.0, 100, 20), _span("B", 1.5, 2.0, 150, 10), _span("T", 1.0, 1.4, 0, 0, "execute_tool")]}]}]}
    lines = [batch, _span("C", 1.6, 2.2, 170, 15), _span("D", 3.0, 3.5, 300, 5)]
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    (session,) = read_agent_trace(path, "otel")
    got = {c.name: (c.parents, c.keeps_context, c.new_input_tokens) for c in session.calls}
    names = [c.name for c in session.calls]
    assert names == ["A", "B", "C", "D"]
    assert got == {"A": ((), True, 100), "B": ((0,), True, 30), "C": ((0,), True, 50), "D": ((2, 1), True, 75)}
    assert [c.wait_s for c in session.calls[1:]] == pytest.approx([0.5, 0.6, 0.8])


def test_an_imported_trace_runs(tmp_path):
    """A two-call Dynamo trace as a scenario's workload: one session, r2 continuing r1's 340-token context with 40
    new tokens."""
    rows = [_dynamo_row("r1", "main", 1000, 1400, 300, 40), _dynamo_row("r2", "main", 2000, 2300, 380, 50)]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = make_scenario()
    data["traffic"] = {"source": {"type": "agentic", "path": str(path), "format": "dynamo"}}
    res = run_scenario(data)
    assert res.requests.input_tokens.tolist() == [300, 380] and res.summary["sessions"]["completed"] == 1


def test_mooncake_rows_link_by_block_hashes(tmp_path):
    """16-token blocks. r1 (0 s, 40 tokens: hash ids 1 2 3, the last block partial) starts a session; r3 (0.5 s,
    ids 6 7) shares none of it: another session; r2 (1.0 s, 60 tokens, ids 1 2 4 5) holds r1's whole-block prefix
    (1 2, two blocks): it continues r1's session, sent once r1 is done and no earlier than 1.0 s from the session's
    start. Fixed timing: r1 runs 0–60 ms (prefill and 4 decodes), so r2 goes at 1.0 s and finds r1's two whole
    blocks cached (32 tokens); r3 goes at 0.5 s."""
    from simmodel.traffic.agent_traces import read_agent_trace

    rows = [{"timestamp": 0, "input_length": 40, "output_length": 5, "hash_ids": [1, 2, 3]},
            {"timestamp": 1000, "input_length": 60, "output_length": 5, "hash_ids": [1, 2, 4, 5]},
            {"timestamp": 500, "input_length": 20, "output_length": 5, "hash_ids": [6, 7]}]
    path = tmp_path / "toolagent.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first, second = read_agent_trace(path, "mooncake", 16)
    assert [c.name for c in first.calls] == ["row1", "row2"] and first.calls[1].parents == (0,)
    assert first.calls[1].start_s == pytest.approx(1.0) and [c.name for c in second.calls] == ["row3"]
    data = make_scenario()
    data["traffic"] = {"source": {"type": "agentic", "path": str(path), "format": "mooncake", "block_size": 16}}
    res = run_scenario(data)
    assert (res.requests.arrival_s * 1000).tolist() == pytest.approx([0, 500, 1000])
    assert res.requests.cached_tokens.tolist() == [0, 0, 32]
    assert res.requests.call.tolist() == ["row1", "row3", "row2"]


def test_mooncake_hash_ids_must_cover_the_input(tmp_path):
    """40 tokens in 16-token blocks are cdiv(40, 16) = 3 blocks; 2 ids are refused (a wrong block size, say)."""
    from simmodel.traffic.agent_traces import read_agent_trace

    path = tmp_path / "toolagent.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 40, "output_length": 5, "hash_ids": [1, 2]}) + "\n")
    with pytest.raises(ScenarioError, match="row 1: hash_ids: 2 ids for input_length 40, where one per 16 tokens "
                                            "gives 3; set traffic.source.block_size"):
        read_agent_trace(path, "mooncake", 16)


@pytest.mark.parametrize("line, message", [
    ({"resourceSpans": "x"}, "resourceSpans: must be a list"),
    ({"resourceSpans": [{"scopeSpans": [{"spans": ["x"]}]}]}, "spans: each must be an object"),
    ({"resourceSpans": [5]}, "resourceSpans: each must be an object"),
    ({"attributes": 3}, "attributes: must be a list"),
])
def test_malformed_otel_lines_name_the_rule(tmp_path, line, message):
    from simmodel.traffic.agent_traces import read_agent_trace

    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(ScenarioError, match=message):
        read_agent_trace(path, "otel")


def test_importer_ties_and_repeats(tmp_path):
    """A zero-length span B at 1 s, listed after A (1–2 s), ends as A starts: in start order (ties by end) B comes
    first and A waits on it; a call id twice in a session, and two Dynamo sessions each the other's parent, are refused in one
    line; a sub-agent call starting at the very millisecond of its parent's call waits on none of it (no cycle)."""
    from simmodel.traffic.agent_traces import read_agent_trace

    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(_span("A", 1.0, 2.0, 100, 10)) + "\n" + json.dumps(_span("B", 1.0, 1.0, 50, 5)) + "\n")
    (session,) = read_agent_trace(path, "otel")
    assert [(c.name, c.parents) for c in session.calls] == [("B", ()), ("A", (0,))]
    path.write_text(json.dumps(_span("A", 1.0, 2.0, 100, 10)) + "\n" + json.dumps(_span("A", 3.0, 4.0, 50, 5)) + "\n")
    with pytest.raises(ScenarioError, match="call 'A' appears twice in session 'c'"):
        read_agent_trace(path, "otel")
    dyn = tmp_path / "dyn.jsonl"
    dyn.write_text("\n".join(json.dumps(r) for r in (_dynamo_row("a1", "a", 0, 10, 5, 1, parent="b"),
                                                      _dynamo_row("b1", "b", 20, 30, 5, 1, parent="a"))))
    with pytest.raises(ScenarioError, match="parent_session_id: sessions a → b → a are each other's parents"):
        read_agent_trace(dyn, "dynamo")
    dyn.write_text("\n".join(json.dumps(r) for r in (_dynamo_row("r1", "main", 1000, 1400, 300, 40),
                                                      _dynamo_row("s1", "sub", 1000, 1000, 100, 5, parent="main"))))
    (session,) = read_agent_trace(dyn, "dynamo")
    assert {c.name: c.parents for c in session.calls} == {"s1": (), "r1": ()}


def test_rescale_to_rate_is_refused(tmp_path):
    data = _scenario(tmp_path)
    data["traffic"]["load"] = {"type": "poisson", "requests_per_second": 1, "rescale_to_rate": True}
    data["traffic"]["stop"] = {"requests": 10}
    with pytest.raises(ScenarioError, match="rescale_to_rate: spreads N requests over N / rate"):
        parse_scenario(data, Path("."))


def test_tool_latency_with_no_call_to_apply_it_to_is_refused(tmp_path):
    """Every call of TRACE gives its wait_ms: a tool_latency_ms would change nothing."""
    message = workload_error(_scenario(tmp_path, tool_latency_ms=250))
    assert message == ("traffic.source.tool_latency_ms: every call of the trace gives its own wait, so it would "
                       "change nothing; remove it")
