"""Fuzzing the scenario surface: mutated copies of the ready scenarios are either accepted (and a model can
be built from them) or refused with one ScenarioError line, never another exception."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError, SimulationError
from simmodel.sim import Simulation

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
BASES = {p.stem: yaml.safe_load(p.read_text()) for p in sorted(SCENARIOS.glob("*.yaml"))}

VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["", "auto", "x", "1e5", "sglang", "vllm",
                                                                        "trtllm", "static_batch", "tp", "dp", "lpm",
                                                                        "fixed", "default", "afd", "fp4", "int4",
                                                                        "int8", "mxfp4"]),
    st.lists(st.integers(-2, 5), max_size=3), st.dictionaries(st.sampled_from(["a", "type", "blocks"]),
                                                               st.integers(-1, 3), max_size=2),
)


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield (*prefix, i)
            yield from _paths(value, (*prefix, i))


@st.composite
def mutated(draw):
    name = draw(st.sampled_from(sorted(BASES)))
    data = copy.deepcopy(BASES[name])
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(data))
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["set", "set", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            keys = ["bogus", "backend", "host_loop", "vision", "images", "limits", "dtype", "nextn", "encoder", "afd",
                    "mode"]
            parent[draw(st.sampled_from(keys))] = draw(VALUES)
        else:
            parent[path[-1]] = draw(VALUES)
    return name, data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_scenarios_are_accepted_or_refused_in_one_line(case):
    name, data = case
    try:
        scenario = parse_scenario(data, SCENARIOS)
        Simulation(scenario, keep_events=False)
    except ScenarioError as exc:
        message = str(exc)
        assert message and "\n" not in message and "Traceback" not in message
    except SimulationError:
        pytest.fail("building a model must not raise SimulationError")
