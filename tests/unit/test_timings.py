"""``perf.timings``: the scenario's ``timing.type`` picks the role's timing model from one table, and the
configuration accepts exactly the types the table builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError
from simmodel.perf.roofline import RooflineTiming
from simmodel.perf.timing import FixedTiming, PolynomialTiming
from simmodel.perf.timings import TIMINGS, make_timing


def role_with(timing: dict):
    data = {"engine": {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm",
                       "workers": {"aggregated": {"timing": timing}}},
            "traffic": {"source": {"type": "synthetic", "input_tokens": 8, "output_tokens": 2},
                        "load": {"type": "concurrency", "concurrency": 1}, "stop": {"requests": 1}}}
    return parse_scenario(data, Path.cwd()).engine.workers["aggregated"]


def test_each_type_builds_its_model():
    fixed = make_timing(role_with({"type": "fixed", "prefill_ms": 12.0, "decode_ms": 3.0}))
    assert isinstance(fixed, FixedTiming) and (fixed.prefill_s, fixed.decode_s) == (0.012, 0.003)
    assert isinstance(make_timing(role_with({"type": "polynomial"})), PolynomialTiming)
    default = make_timing(role_with({}))
    # Not fitted to measured runs: the roofline's own labels, not "calibrated:roofline".
    assert isinstance(default, RooflineTiming) and default.provenance == ("extrapolated:roofline", "assumed-host")


def test_the_configuration_accepts_the_types_of_the_table_and_no_other():
    assert set(TIMINGS) == {"default", "fixed", "polynomial", "measured"}
    with pytest.raises(ScenarioError, match=r"timing\.type: must be one of default, fixed, polynomial, measured"):
        role_with({"type": "roofline"})
