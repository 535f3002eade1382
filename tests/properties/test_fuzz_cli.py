"""Fuzzing two more input surfaces: ``--set PATH=YAML_VALUE`` overrides, driven through the real command line
(``validate`` on the ready scenarios, ``run`` on a tiny one), and host-profile tables (JSON). Every case is
accepted, or refused with one line (exit code 2 on the command line, one ScenarioError line from Python);
never a traceback, another exit code, another exception type, or a half-written output folder."""

from __future__ import annotations

import copy
import json
import math
import tempfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from factories import make_scenario, make_sglang_scenario
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simmodel.cli import cli
from simmodel.config.load import load_scenario, parse_scenario
from simmodel.errors import ScenarioError, SimulationError
from simmodel.sim import Simulation

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
BASES = {p.stem: yaml.safe_load(p.read_text()) for p in sorted(SCENARIOS.glob("*.yaml"))}
# A run of 4 requests of 100→5 tokens at fixed timing (milliseconds of wall time), bounded by small limits so
# that no single override can make it long: reaching a limit is a one-line error.
TINY = make_scenario(limits={"max_passes": 300, "max_requests": 20, "max_virtual_time_seconds": 100})
FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                  HealthCheck.data_too_large])


def _paths(node, prefix=()):
    """Every dotted path of a scenario; list items give paths through a non-mapping (``stages.0.name``)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*prefix, str(key))
        yield from _paths(value, (*prefix, str(key)))


def _lookup(data, dotted: str):
    for key in dotted.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _flow(value) -> str:
    """A value as one line of flow-style YAML, as a user would type it after ``--set PATH=``."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**9).strip().removesuffix("...").strip()


PATHS = sorted({".".join(p) for data in [*BASES.values(), TINY] for p in _paths(data)})
ODD_PATHS = [
    "", " ", ".", "..", ".engine", "engine.", "engine..seed", "engine. .seed", "engine.seed ", " engine.seed",
    "engine.model.x", "engine.seed.x.y", "traffic.source.type.x", "limits.max_passes.x", "traffic.stop.requests.0",
    "engine.workers.aggregated.frontend.stages.0.name", "traffic.source.input_tokens.values.0", "0", "null", "~",
    "true", "-", "--", "é", "工程.种子", "engine.sééd", "a" * 5000, ".".join(["a"] * 2000), "engine.seed\n",
    "engine.\tseed", "engine.seed\r", "\x00", "engine.\x00", "\udcff", "engine.\ud800", "\u2028", "limits",
    "traffic", "engine", "engine.workers", "engine.workers.aggregated", "engine.workers.prefill", "--help",
    "-c", "traffic.source.images", "engine.workers.aggregated.host_profile", "engine.workers.aggregated.host_profile.path",
]
SEGMENTS = st.one_of(st.sampled_from(["x", "", "0", "type", "bogus", "é", " ", "-1", "stages", "path", "values"]),
                     st.text(max_size=8))
ODD_VALUES = [
    "", " ", "{", "}", "[", "]", "[1,", "{a: 1", "{a: [1, }", "!!python/object/apply:os.system [\"echo\"]",
    "!!python/name:os.system", "!!python/none", "!!binary aGVsbG8=", "!!binary x", "!!set {a, b}", "!!omap [a: 1]",
    "!!int x", "!!int 0x", "!!float x", "!!bool x", "!!timestamp x", "!!timestamp 2001-02-30", "!!null x",
    "!!str [1]", "!<tag:yaml.org,2002:int> x", "!local 1", "2001-12-14", "2001-13-45", "2001-12-14t21:59:43.10-99:00",
    "&a [*a, *a]", "&a [&b [*b]]", "&a {x: *a}", "*a", "[*a]", "&a", "1e999", "1.0e999", "-1.0e999", ".inf", "-.inf",
    ".nan", ".NaN", "~", "null", "Null", "yes", "no", "on", "off", "y", "0x10", "0o17", "017", "0b101", "1_000", "1_",
    "1:30", "190:20:30", "+1", "-0", "0.", ".5", "1e5", "1.5e3", "-1", "0", "1", "2", "4", "16", "1000", "0.5", "1.0",
    "\t", "\t1", "1\t", "a\nb", "1\n2", "{a: 1}\n{b: 2}", "---", "--- 1\n--- 2", "...", "- 1\n- 2", "a: 1\nb: 2", "? a",
    "|\n  text", ">\n folded", "'quoted", '"unterminated', '"\\x00"', '"\\ud800"', "'é'", "工程", "\x00", "\x85",
    "\u2028", "\ufeff1", "\udcff", "%YAML 1.1\n--- 1", "%YAML 2.0\n--- 1", "@", "`", "#comment", "1 # comment",
    "{a: 1, a: 2}", "{[1]: 2}", "{{a: 1}: 2}", "{<<: 1}", "{<<: [1]}", "{1: 2}", "{null: 1}", "{~: x}",
    "[" * 50 + "]" * 50, "[" * 700, "[" * 300 + "]" * 300, "{a: " * 300 + "1" + "}" * 300, "9" * 5000,
    "0x" + "f" * 5000, "-" + "9" * 4300, str(2**64), str(-(2**63) - 1), str(2**63), "1" * 30 + ".5", "x" * 100_000,
    "{type: fixed, prefill_ms: 1e9, decode_ms: 1e9}", "{type: fixed, prefill_ms: .nan, decode_ms: 1}",
    "{type: fixed, blocks: 1}", "{type: default, memory_fraction: 1e-300}", "{type: poisson, requests_per_second: 1e-6}",
    "{type: concurrency, concurrency: 1000000000}", "{requests: 1000000000}", "{max_virtual_time_seconds: 1e8}",
    "{distribution: choice, values: &a [*a]}", "{distribution: uniform, min: 1, max: 1000000000}",
    "{distribution: lognormal, mean: 1e300, std: 1e300}", "{distribution: normal, mean: 1, std: .inf}",
    "{height: 65536, width: 65536, count: 64}", "{height: 1, width: 100000}", "{path: /dev/null, frontend: python}",
    "{path: ., frontend: rust}", "{type: trace, path: /dev/null, format: csv}", "{type: trace, path: /, format: azure}",
    "{stages: [{service_ms: 1e9, workers: 100000, concurrency_scale: 1e6}]}", "{max_passes: 1000000000000000}",
    "sglang", "vllm", "disaggregated", "aggregated", "auto", "fixed", "default", "measured", "polynomial",
    "fp8", "h200_sxm", "h100_sxm", "Qwen/Qwen3-VL-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct",
    "deepseek-ai/DeepSeek-V3", "config.json", "../../elsewhere", "builtin:x.csv", "system.yaml", "/etc/passwd", ".", "/",
]
NUMBERS = st.one_of(st.integers(-(2**70), 2**70).map(str), st.floats().map(repr),
                    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: f"{x:e}"))
JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**65), 2**65), st.floats(allow_nan=False),
              st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)


@st.composite
def values(draw) -> str:
    kind = draw(st.sampled_from(["odd", "odd", "odd", "number", "text", "structure", "real", "real", "real", "joined"]))
    if kind == "odd":
        return draw(st.sampled_from(ODD_VALUES))
    if kind == "number":
        return draw(NUMBERS)
    if kind == "text":
        return draw(st.text(max_size=20))
    if kind == "structure":
        return _flow(draw(JSONISH))
    if kind == "real":  # the value some ready scenario has at some path: deeper validation runs
        data = draw(st.sampled_from([*BASES.values(), TINY]))
        return _flow(_lookup(data, draw(st.sampled_from(PATHS))))
    parts = draw(st.lists(st.one_of(st.sampled_from(ODD_VALUES[:120]), NUMBERS), min_size=2, max_size=3))
    return draw(st.sampled_from(["\n", "\t", " ", ", ", ": ", "", "\n  "])).join(parts)


@st.composite
def paths(draw, pool: list[str]) -> str:
    kind = draw(st.sampled_from(["real"] * 6 + ["odd", "odd", "extend", "parent", "insert", "text"]))
    path = draw(st.sampled_from(pool))
    if kind == "odd":
        return draw(st.sampled_from(ODD_PATHS))
    if kind == "extend":
        return f"{path}.{draw(SEGMENTS)}"
    if kind == "parent":  # replaces a whole mapping
        return path.rsplit(".", 1)[0]
    if kind == "insert":
        keys = path.split(".")
        keys.insert(draw(st.integers(0, len(keys))), draw(SEGMENTS))
        return ".".join(keys)
    if kind == "text":
        return draw(st.text(max_size=30))
    return path


SCALARS = ["~", "0", "1", "2", "4", "8", "-1", "0.5", "1.5", "100", "4096", "100000", "1e9", "true", "false", "fixed",
           "default", "sglang", "vllm", "{}", "[]", "''", "tp", "dp", "fcfs", "lpm", "png", "jpeg", "rust", "python"]
OWN_VALUES = {path: sorted({_flow(v) for data in [*BASES.values(), TINY] if (v := _lookup(data, path)) is not None})
              for path in PATHS}


@st.composite
def plausible(draw, pool: list[str]) -> str:
    """A real path set to a value some scenario has there, or to a small scalar: validation goes deep."""
    path = draw(st.sampled_from(pool if draw(st.integers(0, 4)) else PATHS))
    own = OWN_VALUES.get(path)
    if own and draw(st.booleans()):
        return f"{path}={draw(st.sampled_from(own))}"
    return f"{path}={draw(st.sampled_from(SCALARS))}"


@st.composite
def overrides(draw, pool: list[str] = PATHS) -> str:
    if draw(st.integers(0, 9)) < 6:
        return draw(plausible(pool))
    path, value = draw(paths(pool)), draw(values())
    shape = draw(st.sampled_from(["pv"] * 8 + ["path_only", "value_only", "equals", "doubled", "spaced", "long"]))
    if shape == "path_only":
        return path
    if shape == "value_only":
        return f"={value}"
    if shape == "equals":
        return "="
    if shape == "doubled":
        return f"{path}=={value}"
    if shape == "spaced":
        return f"{path} = {value}"
    if shape == "long":
        return f"{path}={value * (20_000 // max(1, len(value)))}"
    return f"{path}={value}"


def _args(items: list[str]) -> list[str]:
    return [a for item in items for a in ("--set", item)]


def _one_line_error(result) -> str:
    """A failed command: no exception but SystemExit, exactly one non-empty line on stderr (returned)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}")
    err = result.stderr
    assert err.endswith("\n") and err.count("\n") == 1 and err.strip(), repr(err)
    assert "Traceback" not in err and err.startswith("simmodel: "), repr(err)
    return err


def check_validate(scenario: Path, items: list[str]) -> None:
    result = CliRunner().invoke(cli, ["validate", "-c", str(scenario), *_args(items)])
    if result.exit_code == 0 and result.exception is None:
        # (stderr: nothing but warnings, one line each, such as a host pool no larger than the GPU's)
        assert all(line.startswith("simmodel: warning: ") for line in result.stderr.splitlines()), result.stderr
        assert ": ok (" in result.stdout or ": ok, " in result.stdout  # a search: ", N candidates"
        return
    assert result.exit_code == 2, (result.exit_code, result.exception, result.stderr)
    _one_line_error(result)


# ----------------------------------------------------------------------------------------------
# --set on the command line


@pytest.mark.parametrize("item", [
    "engine.seed=9" + "9" * 5000,                # int() refuses over 4,300 digits: ValueError, not a YAMLError
    "engine.seed=0x" + "f" * 5000,               # a hex int has no digit limit, but showing it in a message does
    "engine.seed=!!int x",                       # PyYAML's constructors raise ValueError, KeyError, AttributeError
    "engine.seed=!!bool x",
    "engine.seed=!!timestamp x",
    "engine.seed=2001-13-45",
    "engine.seed=" + "[" * 1500,                 # RecursionError while composing
    "engine.seed=" + "[" * 400 + "]" * 400,      # parses, then too deep to show or copy
    "traffic.source.input_tokens={distribution: choice, values: &a [*a]}",  # not bugs: lists that contain
    "engine.seed=&a [*a, *a]",                                              # themselves are refused cleanly
    "engine.model=" + "1e999" * 300,             # a model name too long for the OS to look up as a path
], ids=["int_5000_digits", "hex_int_5000_digits", "tag_int", "tag_bool", "tag_timestamp", "bad_date", "deep_open",
        "deep_400", "self_list_values", "self_list", "model_name_too_long"])
def test_set_reproducers(item):
    check_validate(SCENARIOS / "quickstart.yaml", [item])


@st.composite
def validate_cases(draw) -> tuple[str, list[str]]:
    name = draw(st.sampled_from(sorted(BASES)))
    own = sorted({".".join(p) for p in _paths(BASES[name])})
    return name, draw(st.lists(overrides(pool=own), min_size=1, max_size=4))


@settings(max_examples=400, **FUZZ)
@given(validate_cases())
@example(("quickstart", ["engine.seed=9" + "9" * 5000]))
@example(("qwen3-vl-sglang", ["engine.workers.aggregated.frontend.stages.0.name=x"]))
@example(("recommend-aggregated", ["engine.workers.aggregated.scheduler.max_sequences.choices=&a [*a, *a]"]))
@example(("mooncake-storage-sglang", ["engine.workers.aggregated.kv_cache.capacity={type: default}",
                                      "traffic.source.path=builtin:azure/conv_2023.csv"]))  # (a warning, then refused)
def test_validate_with_fuzzed_overrides_exits_0_or_2_in_one_line(case):
    name, items = case
    check_validate(SCENARIOS / f"{name}.yaml", items)


TINY_PATHS = sorted({".".join(p) for p in _paths(TINY)} | {"traffic.load.type", "traffic.source.images",
                                                               "engine.backend", "engine.model", "engine.hardware"})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


@settings(max_examples=250, **FUZZ)
@given(overrides(pool=TINY_PATHS))
@example("engine.seed=1")                                # accepted: all four files
@example("limits.max_passes=3")                          # the three limits reached: exit 1, one line, no folder
@example("traffic.source.output_tokens=1000")
@example("traffic.stop={max_virtual_time_seconds: 99}")
def test_run_with_a_fuzzed_override_writes_all_or_nothing(tiny, item):
    with tempfile.TemporaryDirectory(dir=tiny.parent) as tmp:
        out = Path(tmp) / "out"
        result = CliRunner().invoke(cli, ["run", "-c", str(tiny), "--set", item, "--output-dir", str(out),
                                          "--format", "json"])
        if result.exit_code == 0 and result.exception is None:
            summary = json.loads(result.stdout)
            assert summary["num_requests"] >= 1
            names = {p.name for p in out.iterdir()}
            assert {"summary.json", "requests.csv", "passes.csv"} <= names
            assert names & {"events.parquet", "events.csv"}
            return
        err = _one_line_error(result)
        # Bad input is exit 2; a limit reached (or a run the engine cannot serve) is a simulation failure,
        # exit 1 (docs/configuration.md, "Errors and exit codes"). Either way nothing is written.
        assert result.exit_code == 2 or (result.exit_code == 1 and err.startswith("simmodel: simulation failed: ")), (
            result.exit_code, err)
        assert not out.exists()
        assert sorted(p.name for p in Path(tmp).iterdir()) == []   # no staging folder left behind either


# ----------------------------------------------------------------------------------------------
# scenario files: the same values written in the file itself


@pytest.mark.parametrize("value", ["9" * 5000, "0x" + "f" * 5000, "!!int x", "!!bool x", "!!timestamp x",
                                   "2001-13-45", "[" * 1500, "[" * 400 + "]" * 400],
                         ids=["int_5000_digits", "hex_int_5000_digits", "tag_int", "tag_bool", "tag_timestamp",
                              "bad_date", "deep_open", "deep_400"])
def test_scenario_file_with_odd_values_is_refused_in_one_line(tmp_path, value):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_scenario()) + f"limits:\n  max_passes: {value}\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value).startswith("s.yaml: ") and "\n" not in str(err.value)
    check_validate(path, [])


# ----------------------------------------------------------------------------------------------
# host-profile tables

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
VL = "Qwen/Qwen3-VL-8B-Instruct"
PNG_1K = {"height": 1024, "width": 1024, "count": 1, "encoding": "png"}
SAMPLE = {"version": 1, "rows": [
    {"model": LLAMA, "frontend": "python", "transport": "shm", "image": None,
     "stages": [{"name": "tokenizer", "workers": 1, "service_ms": 3.1, "concurrency_scale": [1.0]}]},
    {"model": LLAMA, "frontend": "python", "transport": "inline", "image": None,
     "stages": [{"name": "tokenizer", "workers": 2, "service_ms": 5.0, "concurrency_scale": [1.0, 1.2]}]},
    {"model": LLAMA, "frontend": "rust", "transport": "shm", "image": None, "stages": []},
    {"model": VL, "frontend": "python", "transport": "shm", "image": PNG_1K,
     "stages": [{"name": "tokenizer", "workers": 1, "service_ms": 3.1, "concurrency_scale": [1.0]},
                {"name": "mm_processor", "workers": 2, "service_ms": 41.0, "concurrency_scale": [1.0, 1.4]}]},
]}
PROFILE_VALUES = st.one_of(
    st.sampled_from([None, True, False, 0, 1, -1, 2, 3, 10**6, 2**63, 10**30, 1e308, -1e308, math.nan, math.inf,
                     -math.inf, 0.0, -0.0, 1e-320, "", "x", "shm", "python", "rust", "png", LLAMA, VL, "a\nb", "é\x00",
                     "\u2028", [], {}, [1.0], [1.0, 1.2], [0.0], [math.nan], [math.inf], [-1.0], ["1"], [True],
                     [1.0] * 1000, {"height": 1024}, PNG_1K, {**PNG_1K, "encoding": "pn\ng"}]),
    st.floats(), st.integers(-(2**70), 2**70), st.text(max_size=8),
)
TEXT_TOKENS = [b"", b"\xff", b"\xc3", b"\x00", b"\xef\xbb\xbf", b"NaN", b"-Infinity", b"9" * 5000, b"[" * 5000,
               b"[" * 100_000, b"{", b"}", b",", b'"', b"\\", b"\\ud800", b'"\\u0000"', b"1e400", b"-", b"null"]


def _doc_paths(node, prefix=()):
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from _doc_paths(value, (*prefix, key))


@st.composite
def tables(draw) -> bytes:
    doc = copy.deepcopy(SAMPLE)
    for _ in range(draw(st.integers(0, 3))):
        found = list(_doc_paths(doc))
        if not found:
            break
        path = draw(st.sampled_from(found))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["set", "set", "set", "delete", "insert", "duplicate", "empty"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "insert" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "name", "image", "stages", "rows", "version", "workers"]))] = (
                copy.deepcopy(draw(PROFILE_VALUES)))
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
        elif action == "empty" and isinstance(parent[path[-1]], list | dict):
            parent[path[-1]].clear()
        else:
            parent[path[-1]] = copy.deepcopy(draw(PROFILE_VALUES))   # a copy: later steps mutate the document
    if draw(st.integers(0, 9)) == 0:
        doc = draw(PROFILE_VALUES)   # not a table at all
    text = json.dumps(doc).encode("utf-8")
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["truncate", "insert", "replace", "utf16"]))
        if kind == "truncate":
            text = text[:at]
        elif kind == "insert":
            text = text[:at] + draw(st.sampled_from(TEXT_TOKENS)) + text[at:]
        elif kind == "replace":
            text = text[:at] + draw(st.sampled_from(TEXT_TOKENS)) + text[at + draw(st.integers(1, 8)):]
        else:
            text = text.decode("utf-8", errors="replace").encode("utf-16")
    return text


def _stage_table(**stage) -> bytes:
    """The sample table with its first row's (text-only, python, shm) stage changed."""
    doc = copy.deepcopy(SAMPLE)
    doc["rows"][0]["stages"][0].update(stage)
    return json.dumps(doc).encode()


def _profile_scenario(images: bool, frontend: str, transport: str | None) -> dict:
    profile = {"path": "host.json", "frontend": frontend, **({} if transport is None else {"transport": transport})}
    data = make_sglang_scenario(engine={"workers": {"aggregated": {"host_profile": profile}}},
                                limits={"max_passes": 300, "max_requests": 20, "max_virtual_time_seconds": 100})
    if images:
        data["engine"].update({"model": VL, "hardware": "h200_sxm"})
        data["engine"]["workers"]["aggregated"].pop("timing")
        data["traffic"]["source"]["images"] = {"height": 1024, "width": 1024}
    return data


@settings(max_examples=500, **FUZZ)
@given(tables(), st.booleans(), st.sampled_from(["python", "rust"]), st.sampled_from([None, None, "shm", "inline"]))
@example(json.dumps({"version": 1, "rows": [{**SAMPLE["rows"][0], "frontend": "py\nthon"}]}).encode(), False,
         "python", None)
@example(json.dumps({"version": 1, "rows": [{**SAMPLE["rows"][0], "transport": "s\nhm"}]}).encode(), False,
         "rust", None)
@example(json.dumps({"version": 1, "rows": [{**SAMPLE["rows"][3], "image": {**PNG_1K, "encoding": "p\nng"}}]})
         .encode(), False, "python", None)
@example(b'{"version": 1, "rows": [' + b"9" * 5000 + b"]}", False, "python", None)
@example(b"[" * 100_000, False, "python", None)
@example(_stage_table(service_ms=1e308), False, "python", None)    # accepted, then the run overflowed
@example(_stage_table(concurrency_scale=[1e308]), False, "python", None)
@example(_stage_table(service_ms=-(10**400)), False, "python", None)  # float() of the int: OverflowError
@example(_stage_table(concurrency_scale=[10**400]), False, "python", None)
@example(_stage_table(workers=10**400), False, "python", None)
def test_mutated_host_profiles_are_accepted_or_refused_in_one_line(tmp_path, table, images, frontend, transport):
    (tmp_path / "host.json").write_bytes(table)
    data = _profile_scenario(images, frontend, transport)
    try:
        scenario = parse_scenario(data, tmp_path)
        sim = Simulation(scenario, keep_events=False)
    except ScenarioError as exc:
        message = str(exc)
        assert message and "\n" not in message and "Traceback" not in message, message
        return
    stages = scenario.engine.workers["aggregated"].frontend.stages
    assert all(s.workers >= 1 and math.isfinite(s.service_ms) and s.service_ms >= 0 for s in stages)
    # An accepted table also runs: 4 requests, or a limit reached (a one-line SimulationError).
    try:
        assert sim.run().summary["num_requests"] >= 1
    except SimulationError as exc:
        assert str(exc) and "\n" not in str(exc)
