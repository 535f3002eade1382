"""Prefix caching in whole runs: shared synthetic prefixes and trace hash ids, by hand."""

from __future__ import annotations

import json

import pytest
from factories import make_scenario, run_scenario


def test_shared_prefix_hits_after_the_first_request_of_each_group():
    """2 groups sharing 1000 prompt tokens, prompts of 1500, one request at a time (concurrency 1), ample KV.
    Requests 0 and 1 miss; each later one finds its group's ⌊1000/16⌋ = 62 full blocks = 992 tokens.
    Hit ratio = 8 · 992 / (10 · 1500) = 0.52907. A hit shortens the prefill: with fixed timing nothing
    changes in time, so check the tokens the first pass schedules instead: 1500 − 992 = 508."""
    res = run_scenario(make_scenario(
        traffic={"source": {"input_tokens": 1500, "output_tokens": 2, "shared_prefix": {"tokens": 1000, "groups": 2}},
                 "stop": {"requests": 10}}))
    assert res.requests.cached_tokens.tolist() == [0, 0] + [992] * 8
    assert res.summary["prefix_cache_hit_ratio"] == pytest.approx(8 * 992 / 15000)
    admissions = res.events[res.events.kind == "admission"].num_tokens.tolist()
    assert admissions == [1500, 1500] + [508] * 8


def test_prefix_caching_off_finds_nothing():
    res = run_scenario(make_scenario(
        traffic={"source": {"input_tokens": 1500, "output_tokens": 2, "shared_prefix": {"tokens": 1000, "groups": 2}},
                 "stop": {"requests": 4}},
        engine={"workers": {"aggregated": {"kv_cache": {"prefix_caching": False}}}}))
    assert res.requests.cached_tokens.tolist() == [0] * 4 and res.summary["prefix_cache_hit_ratio"] is None


def test_trace_hash_ids_map_onto_engine_blocks(tmp_path):
    """Mooncake rows with 512-token hash blocks: row 1 repeats row 0's first two ids (1024 tokens) then
    diverges; engine blocks of 16: the 64 blocks inside those two trace blocks hit (1024 tokens); row 2
    shares only id 0 → 512 tokens; row 3 is identical to row 0 (1100 tokens, ⌊1099/16⌋ = 68 blocks can hit,
    but its third trace block is partial (76 tokens), so only 68 full engine blocks = 1088 tokens)."""
    rows = [
        {"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2, 3]},
        {"timestamp": 100, "input_length": 1500, "output_length": 1, "hash_ids": [1, 2, 4]},
        {"timestamp": 200, "input_length": 600, "output_length": 1, "hash_ids": [1, 5]},
        {"timestamp": 300, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2, 3]},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    data = make_scenario()
    data["traffic"] = {"source": {"type": "trace", "path": str(path), "format": "mooncake"},
                       "load": {"type": "trace_timestamps"}}
    res = run_scenario(data)
    assert res.requests.cached_tokens.tolist() == [0, 1024, 512, 1088]


def test_trace_block_content_by_hand():
    """What each KV block holds, from a trace's hash ids [7, 8, 9] of 4 tokens each, prompt of 10 tokens
    (so hash 9's block is cut at token 10): with 4-token KV blocks, blocks 0 and 1 are trace blocks 7 and
    8 whole, block 2 (tokens 8–11) passes the prompt and is the request's own; with 2-token blocks, block
    1 is the second half of trace block 7 and block 4 (tokens 8–9) the first half of 9; with 8-token
    blocks, block 0 spans trace blocks 7 and 8."""
    from simmodel.engine.kv_cache import trace_block_content

    same = trace_block_content((7, 8, 9), 4, 10, 4, "u")
    assert [same(j) for j in range(3)] == [((7, 0, 4),), ((8, 0, 4),), ("u", 2)]
    half = trace_block_content((7, 8, 9), 4, 10, 2, "u")
    assert [half(j) for j in (1, 4, 5)] == [((7, 2, 4),), ((9, 0, 2),), ("u", 5)]
    double = trace_block_content((7, 8, 9), 4, 10, 8, "u")
    assert [double(j) for j in range(2)] == [((7, 0, 4), (8, 0, 4)), ("u", 1)]


def test_trace_block_content_of_mooncake_blocks_by_hand():
    """Mooncake's 512-token hash blocks under 16-token KV blocks, ids [7, 9], a 700-token prompt: 32 KV blocks
    per trace block, so block 31 is tokens 496–511 of id 7, block 32 the first 16 of id 9, block 42 tokens
    160–175 of id 9 (tokens 672–687 of the prompt), and block 43 (tokens 688–703) passes the prompt's 700.
    Trace blocks of 6 tokens under KV blocks of 4 (not a multiple): block 1 (tokens 4–7) holds the last two of
    id 7 and the first two of id 8, block 2 (tokens 8–11) tokens 2–5 of id 8."""
    from simmodel.engine.kv_cache import trace_block_content

    moon = trace_block_content((7, 9), 512, 700, 16, "u")
    assert [moon(j) for j in (0, 31, 32, 42, 43)] == [((7, 0, 16),), ((7, 496, 512),), ((9, 0, 16),),
                                                      ((9, 160, 176),), ("u", 43)]
    straddling = trace_block_content((7, 8), 6, 12, 4, "u")
    assert [straddling(j) for j in range(4)] == [((7, 0, 4),), ((7, 4, 6), (8, 0, 2)), ((8, 2, 6),), ("u", 3)]
