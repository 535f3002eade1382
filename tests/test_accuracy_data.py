"""The measured end-to-end runs the accuracy report simulates (``benchmarks/data/vllm_h100_e2e.json``): every
run with public stage rates makes a valid scenario, and the figures the report derives from the record."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from simmodel.config.load import parse_scenario

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import e2e_accuracy  # noqa: E402


def test_every_run_with_stage_rates_is_a_valid_scenario(tmp_path):
    runs = e2e_accuracy.load()["runs"]
    simulated = [r for r in runs if r["stages"] is not None]
    assert len(runs) == 16 and len(simulated) == 9
    for run in simulated:
        scenario = parse_scenario(e2e_accuracy.scenario(run, tmp_path), tmp_path)
        role = scenario.engine.workers["aggregated"]
        assert scenario.engine.model == run["model"] and role.parallelism.tensor == run["tensor"]
        assert [round(st.requests_per_second) for st in scenario.traffic.load.stages] == [
            round(s["rate"]) for s in run["stages"]]


def test_prompt_overhead_is_what_the_server_counted_beyond_the_profile():
    """The Llama-2-7B codegen run asked for 100 + 466 tokens; the server counted 591.63 in both stages:
    591.63 − 566 = 25.63 → 26. Runs without raw results do not say: 0."""
    runs = {r["id"]: r for r in e2e_accuracy.load()["runs"]}
    assert e2e_accuracy.prompt_overhead(runs["raw-20260217-155451-llama-2-7b-tp1-codegen"]) == 26
    assert e2e_accuracy.prompt_overhead(runs["tv-63"]) == 0


def test_a_stage_with_client_failures_is_saturated_and_errors_are_ratios():
    result = e2e_accuracy.StageResult("r", "m", 1, 0, 4.0, {("e2e", "mean"): 200.0}, {("e2e", "mean"): 150.0},
                                      {("e2e", "mean"): 210.0}, failed=3)
    assert result.saturated and result.error(("e2e", "mean")) == pytest.approx(-0.25)  # 150 / 200 − 1
    assert result.error(("e2e", "mean"), result.defaults) == pytest.approx(0.05)  # 210 / 200 − 1
    assert result.error(("ttft", "mean")) is None


def test_the_defaults_are_the_end_to_end_fit_on_every_run_and_each_model_has_its_held_out_fit():
    from simmodel.config.calibration import PARAMETERS

    fit = e2e_accuracy.fitted()
    models = {r["model"] for r in e2e_accuracy.load()["runs"] if r["stages"] is not None}
    assert set(fit["without"]) == models
    for name in fit["fitted"]:
        assert PARAMETERS[name][0] == round(fit["all"][name], e2e_accuracy.DEFAULT_DIGITS), name


def test_the_fit_compares_the_time_per_output_token_over_the_clients_own_count():
    """tv-63 stage 0: E2E 2449.781, TTFT 31.900, derived step 9.8644 ms (as sim-to-real scored it): the client
    counted (2449.781 − 31.900) / 9.8644 + 1 ≈ 246.11 output tokens (of 248 generated), and the fit divides the
    simulated E2E − TTFT by that same count."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import e2e_fit

    run = {r["id"]: r for r in e2e_accuracy.load()["runs"]}["tv-63"]
    m = run["measured"][0]
    figure = [f for f in e2e_fit.measurement(run).scopes[0].figures if f.definition == "decode_step_from_means"][0]
    assert figure.value == m["itl_ms_mean"] and figure.tokens == pytest.approx(246.11, abs=0.01)
    assert (m["e2e_ms"]["mean"] - m["ttft_ms"]["mean"]) / (figure.tokens - 1) == pytest.approx(m["itl_ms_mean"])
