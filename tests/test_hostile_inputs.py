"""Hostile inputs through the CLI: one line on stderr (no numpy RuntimeWarning, no traceback before it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from factories import make_scenario, trace_scenario, write_csv_trace

ROOT = Path(__file__).resolve().parents[1]
LLAMA_8B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32,
            "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
            "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}


def simmodel(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simmodel.cli", *args], cwd=ROOT, capture_output=True, text=True)


def run_one_line(tmp_path: Path, data: dict, command: str = "run") -> tuple[int, str]:
    """Run (or validate) the scenario; stderr must be exactly one line. Returns the exit code and the line."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    extra = ("--output-dir", str(tmp_path / "out")) if command == "run" else ()
    proc = simmodel(command, "-c", str(path), *extra)
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n"), proc.stderr
    return proc.returncode, proc.stderr.rstrip("\n")


def mooncake(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_timestamps_whose_difference_overflows(tmp_path):
    # 1e308 and -1e308 are finite; their difference is not. Row 1 of the file is on line 2 (after the header).
    trace = write_csv_trace(tmp_path / "t.csv", [(1e308, 10, 5), (-1e308, 10, 5)])
    code, line = run_one_line(tmp_path, trace_scenario(trace))
    assert code == 2 and line.endswith("t.csv:2: arrival time must be a finite number within ±1e18 s")


def test_a_token_count_beyond_int64(tmp_path):
    # 2**70 is an integer, but no int64 holds it: refused before the cast, on the row's line 3.
    trace = write_csv_trace(tmp_path / "t.csv", [(0, 10, 5), (1, 2**70, 5)])
    code, line = run_one_line(tmp_path, trace_scenario(trace))
    assert code == 2 and "t.csv:3: column input_tokens is out of range (at most 1e18 in magnitude)" in line


def test_mooncake_milliseconds_beyond_the_range(tmp_path):
    # 1e308 ms is 1e305 s, beyond ±1e18 s: the first line.
    trace = mooncake(tmp_path / "t.jsonl", [{"timestamp": 1e308, "input_length": 10, "output_length": 5},
                                            {"timestamp": -1e308, "input_length": 10, "output_length": 5}])
    data = trace_scenario(trace, traffic={"source": {"format": "mooncake"}})
    code, line = run_one_line(tmp_path, data)
    assert code == 2 and line.endswith("t.jsonl:1: arrival time must be a finite number within ±1e18 s")


def test_a_speedup_that_stretches_the_trace_past_the_clock(tmp_path):
    # Arrivals 0 and 1e9 s at speedup 1e-6: 1e9 / 1e-6 = 1e15 s of simulated time (once an OverflowError
    # turning it into integer nanoseconds).
    trace = write_csv_trace(tmp_path / "t.csv", [(0, 10, 5), (1e9, 10, 5)])
    data = trace_scenario(trace, traffic={"load": {"speedup": 1e-6}})
    code, line = run_one_line(tmp_path, data)
    assert code == 2 and line.endswith("traffic.load.speedup: the trace's arrivals span 1e+09 s, 1e+15 s of simulated "
                                       "time at speedup 1e-06; at most 1e9 s")


@pytest.mark.parametrize("command", ["run", "validate"])
def test_a_system_file_of_1e300_bytes(tmp_path, command):
    fields = {"memory_bytes": 1e300, "bf16_flops": 989e12, "fp8_flops": 1979e12, "hbm_bytes_per_s": 3.35e12,
              "intra_node_bytes_per_s": 450e9, "intra_node_latency_s": 5e-6, "pcie_bytes_per_s": 64e9,
              "nic_bytes_per_s": 50e9, "gpus_per_node": 8}
    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump(fields))
    data = make_scenario(engine={"hardware": str(tmp_path / "gpu.yaml")})
    data["engine"]["workers"]["aggregated"]["kv_cache"] = {"block_size": 16}  # KV sized from the memory
    code, line = run_one_line(tmp_path, data, command)
    assert code == 2 and "gpu.yaml: memory_bytes must be a number from 1e+06 to 1e+14" in line


@pytest.mark.parametrize("command", ["run", "validate"])
def test_a_config_json_of_a_10_to_the_200_hidden_size(tmp_path, command):
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_8B, "hidden_size": 10**200}))
    data = make_scenario(engine={"model": str(tmp_path / "config.json"),
                                 "workers": {"aggregated": {"timing": {"type": "default"}}}})
    code, line = run_one_line(tmp_path, data, command)
    assert code == 2 and "config.json: hidden_size must be at most 1,000,000,000, got 1000000" in line


def test_a_moe_model_that_routes_every_token_to_every_expert_runs(tmp_path):
    # top-k = all 8 experts: every expert is touched (once log1p(-1), a math domain error in the roofline).
    config = {**LLAMA_8B, "model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
              "num_local_experts": 8, "num_experts_per_tok": 8, "max_position_embeddings": 32768}
    (tmp_path / "config.json").write_text(json.dumps(config))
    data = make_scenario(engine={"model": str(tmp_path / "config.json"), "workers": {"aggregated": {
        "timing": {"type": "default"}, "parallelism": {"tensor": 8}}}})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = simmodel("run", "-c", str(path), "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 0 and proc.stderr == ""


def test_a_duplicate_key_through_validate(tmp_path):
    # The scenario as YAML, then `seed` written twice in engine: lines are counted in the file written here.
    text = yaml.safe_dump(make_scenario(), sort_keys=True)
    lines = text.splitlines()
    engine = lines.index("engine:")
    text = "\n".join(lines[:engine + 1] + ["  seed: 1", "  seed: 2"] + lines[engine + 1:]) + "\n"
    path = tmp_path / "s.yaml"
    path.write_text(text)
    proc = simmodel("validate", "-c", str(path))
    # "engine:" is on line engine + 1 (1-based), the first seed on engine + 2, the second on engine + 3.
    assert proc.returncode == 2 and proc.stderr == (
        f"simmodel: s.yaml: line {engine + 3}: not valid YAML (duplicate key 'seed', first set on line "
        f"{engine + 2})\n")


def test_a_billion_replicas_through_validate_and_run(tmp_path):
    data = make_scenario(engine={"workers": {"aggregated": {"parallelism": {"replicas": 1_000_000_000}}}})
    for command in ("validate", "run"):
        code, line = run_one_line(tmp_path, data, command)
        assert code == 2 and line.endswith("engine.workers.aggregated.parallelism.replicas: the deployment would use "
                                           "1,000,000,000 GPUs; at most 100,000 (replicas × tensor × pipeline × "
                                           "attention_data × prefill_context, summed over the roles)")
    assert not (tmp_path / "out").exists()


MOONCAKE_ROW = '{"timestamp": 0, "input_length": 10, "output_length": 5}'


@pytest.mark.parametrize(("content", "says"), [
    # Python converts at most 4,300 digits of text to an int: a 5,000-digit length is refused in one line.
    ('{"timestamp": 0, "input_length": ' + "9" * 5000 + ', "output_length": 5}\n',
     "t.jsonl:1: not valid JSON (a number of over 4,300 digits)"),
    # 100,000 nested arrays exhaust the parser's recursion: one line, not a RecursionError.
    (MOONCAKE_ROW + "\n" + "[" * 20_000 + "]" * 20_000 + "\n", "t.jsonl:2: not valid JSON (nested too deeply)"),
    (MOONCAKE_ROW + "\n" + '{"timestamp": 1,\n', "t.jsonl:2: not valid JSON (Expecting property name enclosed in "
                                                   "double quotes)"),
], ids=["digits", "nesting", "syntax"])
def test_a_mooncake_trace_that_is_not_json(tmp_path, content, says):
    (tmp_path / "t.jsonl").write_text(content)
    data = trace_scenario(tmp_path / "t.jsonl", traffic={"source": {"format": "mooncake"}})
    code, line = run_one_line(tmp_path, data, "validate")
    assert code == 2 and line.endswith(says), line


def test_a_mooncake_trace_of_bytes_that_are_not_utf8(tmp_path):
    # The first row, then the byte 0x80 (a UTF-8 continuation byte cannot start a character) at offset 58.
    (tmp_path / "t.jsonl").write_bytes(MOONCAKE_ROW.encode() + b"\n\x80\x81garbage\n")
    data = trace_scenario(tmp_path / "t.jsonl", traffic={"source": {"format": "mooncake"}})
    code, line = run_one_line(tmp_path, data, "validate")
    assert code == 2 and line.endswith(f"t.jsonl: not a UTF-8 text file (byte {len(MOONCAKE_ROW) + 1} is not UTF-8)")


def test_a_mooncake_trace_with_a_byte_order_mark_is_read(tmp_path):
    # Editors on Windows start UTF-8 files with U+FEFF; the trace's two rows are read as written.
    (tmp_path / "t.jsonl").write_bytes(b"\xef\xbb\xbf" + (MOONCAKE_ROW + "\n").encode() * 2)
    data = trace_scenario(tmp_path / "t.jsonl", traffic={"source": {"format": "mooncake"}})
    proc = simmodel("validate", "-c", str(_write(tmp_path, data)))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(("content", "says"), [
    ('{"hidden_size": ' + "9" * 5000 + "}", "config.json: not valid JSON (a number of over 4,300 digits)"),
    ("[" * 20_000 + "]" * 20_000, "config.json: not valid JSON (nested too deeply)"),
], ids=["digits", "nesting"])
def test_a_config_json_that_python_cannot_parse(tmp_path, content, says):
    (tmp_path / "config.json").write_text(content)
    code, line = run_one_line(tmp_path, make_scenario(engine={"model": str(tmp_path / "config.json")}), "validate")
    assert code == 2 and line.endswith(says), line


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_scenario_that_never_ends_is_refused(tmp_path):
    # /dev/zero reads for ever: past 256 MiB simmodel stops reading and says why (once it hung).
    proc = subprocess.run([sys.executable, "-m", "simmodel.cli", "validate", "-c", "/dev/zero"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == ("simmodel: zero: cannot read the scenario file (larger than 256 MiB: not a file simmodel "
                           "reads whole)\n")
