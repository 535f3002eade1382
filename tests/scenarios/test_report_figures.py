"""The figures a serving engineer reads beside the latencies: KV cache usage, the waiting queue, goodput
and SLA attainment, and the printed table's columns. Fixed timing (prefill 20 ms, decode 10 ms), 1000 KV
blocks of 16 tokens, synchronous scheduling; every expected value is derived by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from factories import make_scenario, run_scenario

from simmodel.cli import format_table
from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError

ONE_AT_A_TIME = {"engine": {"workers": {"aggregated": {"scheduler": {"max_sequences": 1}}}},
                 "traffic": {"load": {"concurrency": 2}, "stop": {"requests": 6}}}
"""Six 100→5 requests, a closed loop of 2, one sequence at a time: each is served alone for 60 ms (prefill
0–20, four decodes), the other waiting. r0 0–60, r1 waits 0–60 and runs 60–120, r2 arrives at 60 (r0's
finish), waits to 120, …: TTFT 20, 80, 80, 80, 80, 80 ms; E2E 60, 120, …; the last finish at 360 ms."""


def test_kv_cache_usage_peak_and_time_weighted_mean():
    """Two 100→20 requests together. Blocks of a request after pass k: prefill 100 tokens = 7 blocks; decode
    k computes token 100 + k, 7 blocks up to k = 12 (112 tokens), 8 from k = 13 (113). Two requests: prefill
    pass (20 ms) and decodes 1–12 (120 ms) at 14 blocks, decodes 13–19 (70 ms) at 16 (the finishing pass
    still holds them). Peak 16/1000; mean over pass time (0.014 × 140 + 0.016 × 70) / 210 = 0.0146667
    (a mean per pass would be 0.0147)."""
    s = run_scenario(make_scenario(traffic={"source": {"output_tokens": 20}, "load": {"concurrency": 2},
                                            "stop": {"requests": 2}})).summary
    assert s["kv_cache_usage_peak"] == pytest.approx(0.016)
    assert s["kv_cache_usage_mean"] == pytest.approx(3.08 / 210)
    assert s["roles"]["aggregated"]["kv_cache_usage_peak"] == s["kv_cache_usage_peak"]
    assert (s["num_requests_waiting_peak"], s["num_requests_waiting_mean"]) == (0, 0.0)  # both admitted at 0


def test_waiting_queue_peak_and_time_average():
    """ONE_AT_A_TIME: one request waits at every moment from 0 to 300 ms (r1 0–60, r2 60–120, … r5 240–300),
    none after: peak 1; time average (0 + 5 × 60 ms of waiting) / 360 ms = 0.8333."""
    s = run_scenario(make_scenario(**ONE_AT_A_TIME)).summary
    assert s["num_requests_waiting_peak"] == 1
    assert s["num_requests_waiting_mean"] == pytest.approx(300 / 360)


@pytest.mark.parametrize("sla, good, met", [
    ({"ttft_ms": 50}, 1, False),                    # only r0 (20 ms); 1/6 < 0.9 (the default)
    ({"ttft_ms": 80}, 6, True),                     # bounds are inclusive: 80 ms meets 80
    ({"ttft_ms": 50, "attainment": 0.1}, 1, True),  # 1/6 = 0.167 ≥ 0.1
    ({"e2e_ms": 60, "tpot_ms": 10}, 1, False),      # E2E 60 only for r0; every TPOT is 10 ms
    ({"itl_ms": 5}, 0, False),                      # itl_ms: the earlier name of the TPOT bound; 10 > 5
])
def test_goodput_and_attainment_of_a_run(sla, good, met):
    """ONE_AT_A_TIME, its SLA varied: goodput = good requests / 0.36 s (first arrival to last token)."""
    s = run_scenario(make_scenario(**ONE_AT_A_TIME, evaluation={"sla": sla})).summary["sla"]
    assert s["goodput_rps"] == pytest.approx(good / 0.36)
    assert s["sla_attainment"] == pytest.approx(good / 6)
    assert (s["required_attainment"], s["sla_met"]) == (sla.get("attainment", 0.9), met)


def test_no_evaluation_no_sla_figures():
    assert "sla" not in run_scenario(make_scenario()).summary


@pytest.mark.parametrize("sla, message", [
    ({}, "evaluation.sla: give at least one bound of ttft_ms, tpot_ms, e2e_ms"),
    ({"ttft_ms": 100, "attainment": 1.5}, "evaluation.sla.attainment: must be a positive number at most 1"),
    ({"ttft_ms": 100, "attainment": 0}, "evaluation.sla.attainment: must be a positive number"),
    ({"tpot_ms": 10, "itl_ms": 10}, "evaluation.sla.itl_ms: the earlier name of tpot_ms"),
    ({"ttft": 100}, "evaluation.sla.ttft: unknown field"),
    ("fast", "evaluation.sla: must be a mapping"),
])
def test_bad_sla_is_one_clear_error(sla, message):
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_scenario(make_scenario(evaluation={"sla": sla}), Path("."))


def test_search_only_sections_are_still_refused_by_run():
    with pytest.raises(ScenarioError, match="optimization: read by `simmodel recommend` only"):
        parse_scenario(make_scenario(optimization={"target": "throughput"}), Path("."))


def test_table_columns_in_order_and_never_run_together():
    """A 123456789.12 ms maximum widens its column: every header still ends where its cells end, and
    each cell is one space or more from the next."""
    s = run_scenario(make_scenario(**ONE_AT_A_TIME, evaluation={"sla": {"ttft_ms": 50}})).summary
    s["ttft_ms"]["max"] = 123456789.12
    lines = format_table(s).splitlines()
    assert lines[0].split() == ["Metric", "mean", "p50", "p90", "p95", "p99", "p99.9", "min", "max", "std"]
    ends = [m.end() for m in re.finditer(r"\S+", lines[0])][1:]
    for line in lines[1:7]:
        cells = list(re.finditer(r"\S+", line))[-9:]
        assert [m.end() for m in cells] == ends
        assert all(b.start() > a.end() for a, b in zip(cells, cells[1:]))
    assert "123456789.12" in lines[1] and "20.00 123456789.12" in lines[1]  # TTFT's min, then max
    table = "\n".join(lines)
    for label in ("Prefix cache hit ratio", "KV cache usage, peak", "Waiting requests, peak",
                  "Goodput (requests/s meeting the SLA)"):
        assert label in table
    assert "16.67% (90.00% required: not met)" in table


def test_the_table_shows_draft_acceptance():
    """nextn 1, every draft accepted (fixed timing, one 100 → 9 request): 4 rounds, acceptance 1, 2 tokens a round, in
    the table as in summary.json; a run without drafts has no such rows."""
    drafted = format_table(run_scenario(make_scenario(
        traffic={"source": {"input_tokens": 100, "output_tokens": 9}, "stop": {"requests": 1}},
        engine={"nextn": 1, "nextn_accepted": 1.0})).summary)
    assert "Draft acceptance rate (mtp)                    1.0000" in drafted
    assert "Tokens per verification round                  2.0000" in drafted
    assert "Draft acceptance" not in format_table(run_scenario(make_scenario(**ONE_AT_A_TIME)).summary)
