"""Trace readers: the real traces shipped in simmodel/data/traces, and one clear line for each kind of bad file."""

from __future__ import annotations

import pytest
from factories import builtin_trace

from simmodel.errors import ScenarioError
from simmodel.traffic.traces import read_trace


def test_mooncake_head_sample():
    """conversation_trace_head2000.jsonl: 2,000 rows; first row 6758→500 at t=0, hash ids kept."""
    trace = read_trace(builtin_trace("mooncake/conversation_head2000.jsonl"), "mooncake", require_monotone=True)
    assert len(trace) == 2000
    assert (trace.input_tokens[0], trace.output_tokens[0], trace.arrival_s[0]) == (6758, 500, 0.0)
    assert trace.hash_ids[0] == tuple(range(14))
    assert (trace.dp_rank == -1).all()


def test_azure_timestamps_are_seconds_from_the_first_row():
    """Rows 1–2 of the code trace: 18:17:03.97996 and 18:17:04.03196 → 0 and 0.052 s."""
    trace = read_trace(builtin_trace("azure/code_2023.csv"), "azure", require_monotone=True)
    assert len(trace) == 8819
    assert trace.arrival_s[:2].tolist() == pytest.approx([0.0, 0.052])
    assert (trace.input_tokens[0], trace.output_tokens[0]) == (4808, 10)


@pytest.mark.parametrize("name, text, fmt, message", [
    ("t.jsonl", '{"timestamp": 0, "input_length": 5}\n', "mooncake", "t.jsonl:1: missing field 'output_length'"),
    ("t.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 2}\nnot json\n', "mooncake",
     "t.jsonl:2: not valid JSON"),
    ("t.jsonl", '{"timestamp": 0, "input_length": -5, "output_length": 2}\n', "mooncake",
     "t.jsonl:1: input length must be a positive integer"),
    ("t.jsonl", '{"timestamp": 10, "input_length": 5, "output_length": 2}\n'
                '{"timestamp": 5, "input_length": 5, "output_length": 2}\n', "mooncake",
     "t.jsonl:2: timestamps must not decrease (0.01 then 0.005)"),
    ("t.csv", "arrival_s,input_tokens\n0,5\n", "csv", "t.csv: missing column(s) output_tokens"),
    ("t.csv", "arrival_s,input_tokens,output_tokens\n0,5,2\n1,5,0\n", "csv",
     "t.csv:3: output length must be a positive integer"),
    ("t.csv", "arrival_s,input_tokens,output_tokens\n0,5.5,2\n", "csv", "t.csv:2: column input_tokens must be an integer"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,2\n", "azure", "t.csv:2: TIMESTAMP 'yesterday'"),
    ("t.csv", "", "csv", "t.csv: not a readable CSV file"),
    ("t.jsonl", '{"timestamp": 10, "input_length": 5, "output_length": 2}\n\n'
                '{"timestamp": 5, "input_length": 5, "output_length": 2}\n', "mooncake",
     "t.jsonl:3: timestamps must not decrease"),  # blank lines still count in the line number
    ("t.csv", "arrival_s,input_tokens,output_tokens,dp_rank\n0,5,2,\n0,5,2,x\n", "csv",
     "t.csv:3: column dp_rank must be an integer, got 'x'"),
])
def test_bad_traces_fail_with_one_line(tmp_path, name, text, fmt, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        read_trace(path, fmt, require_monotone=True)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_blank_dp_rank_means_no_hint(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens,dp_rank\n0,5,2,\n0,5,2,1\n")
    assert read_trace(path, "csv", require_monotone=True).dp_rank.tolist() == [-1, 1]


def test_unordered_rows_are_fine_when_timestamps_are_not_used(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n5,10,2\n1,20,3\n")
    trace = read_trace(path, "csv", require_monotone=False)
    assert trace.input_tokens.tolist() == [10, 20]
