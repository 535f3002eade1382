"""Benchmark tools' own workload files imported as scenarios' traffic: each mapping derived by hand from
the tool's documented semantics (``docs/workloads.md``), and the run they drive."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import make_scenario, run_scenario

from simmodel.config.importers import import_workload
from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_vllm_bench_command_line(tmp_path):
    # random dataset, 1024 ± 50 % in and 256 ± 50 % out: uniform on [512, 1536] and [128, 384]; 12 req/s
    # with gamma gaps of shape 0.5 rescaled to end at 200 / 12 s; at most 64 in flight.
    path = write(tmp_path / "cmd.sh", "vllm bench serve --model m --dataset-name random --random-input-len 1024 \\\n"
                 "  --random-output-len 256 --random-range-ratio 0.5 --num-prompts 200 --request-rate 12 \\\n"
                 "  --burstiness 0.5 --max-concurrency 64 --seed 7 --num-warmups 3 --save-result\n")
    traffic, warnings = import_workload("vllm-bench", path)
    assert traffic == {
        "source": {"type": "synthetic", "input_tokens": {"distribution": "uniform", "min": 512, "max": 1536},
                   "output_tokens": {"distribution": "uniform", "min": 128, "max": 384}},
        "load": {"type": "gamma", "requests_per_second": 12.0, "burstiness": 0.5, "rescale_to_rate": True, "seed": 7,
                 "max_concurrency": 64},
        "stop": {"requests": 200}}
    assert warnings == ["cmd.sh: num_warmups 3: warm-up requests are not simulated"]


@pytest.mark.parametrize("tool", ["vllm-bench", "inference-perf", "guidellm", "aiperf"])
def test_an_empty_workload_file_is_refused_not_read_as_every_default(tmp_path, tool):
    path = write(tmp_path / "cmd.sh", "  \n\n")
    with pytest.raises(ScenarioError, match=r"cmd.sh: is empty: give the tool's command line or its saved arguments"):
        import_workload(tool, path)


def test_vllm_bench_defaults_prefix_and_an_infinite_rate(tmp_path):
    # defaults 1024 → 128, ratio 0: fixed; a 100-token prefix shared by all prompts adds to the input;
    # rate inf: everything at once, at most max_concurrency in flight (a closed loop of that many)
    path = write(tmp_path / "args.json", json.dumps({"random_prefix_len": 100, "max_concurrency": 8,
                                                     "num_prompts": 50, "some_new_flag": 1}))
    traffic, warnings = import_workload("vllm-bench", path)
    assert traffic["source"] == {"type": "synthetic", "input_tokens": 1124, "output_tokens": 128,
                                 "shared_prefix": {"tokens": 100, "groups": 1}}
    assert traffic["load"] == {"type": "concurrency", "concurrency": 8}
    assert warnings == ["args.json: some_new_flag: not reproduced by the simulation (ignored)"]
    # a --save-result file records no dataset lengths: the defaults are assumed, and said so
    result = write(tmp_path / "result.json", json.dumps({"duration": 10.0, "completed": 100, "num_prompts": 100,
                                                         "request_rate": "inf", "burstiness": 1.0,
                                                         "max_concurrency": None, "mean_ttft_ms": 12.0}))
    traffic, warnings = import_workload("vllm-bench", result)
    assert traffic["load"] == {"type": "concurrency", "concurrency": 100}
    assert [w.split(":")[1].strip() for w in warnings] == ["random_input_len", "random_output_len"]
    with pytest.raises(ScenarioError, match="dataset_name sharegpt: its prompts are not in the file"):
        import_workload("vllm-bench", write(tmp_path / "s.sh", "vllm bench serve --dataset-name sharegpt"))


def test_inference_perf_profile_by_hand(tmp_path):
    """Two constant stages of 10 s at 2 and 5 req/s: 20 and 50 requests spread over each stage; stage 1
    waits for stage 0's requests and the 2 s interval."""
    path = write(tmp_path / "profile.yaml", """
load:
  type: constant
  interval: 2
  stages: [{rate: 2, duration: 10}, {rate: 5, duration: 10}]
api: {type: completion, streaming: true}
server: {type: vllm, model_name: m, base_url: "http://localhost:8000"}
data:
  type: shared_prefix
  shared_prefix: {num_groups: 4, num_prompts_per_group: 8, system_prompt_len: 1000, question_len: 100, output_len: 20}
""")
    traffic, warnings = import_workload("inference-perf", path)
    assert traffic == {
        "source": {"type": "shared_prefix", "num_groups": 4, "prompts_per_group": 8, "system_prompt_tokens": 1000,
                   "question_tokens": 100, "output_tokens": 20},
        "load": {"type": "stages", "arrivals": "fixed_count", "drain": True, "pause_s": 2.0,
                 "stages": [{"requests_per_second": 2.0, "duration_s": 10.0},
                            {"requests_per_second": 5.0, "duration_s": 10.0}]}}
    assert warnings == []
    data = make_scenario()
    data["traffic"] = {"source": {"type": "import", "tool": "inference-perf", "path": str(path)}}
    res = run_scenario(data)
    req = res.requests
    assert (req.stage == 0).sum() == 20 and (req.stage == 1).sum() == 50
    last_finish_0 = req[req.stage == 0].finish_s.max()
    assert req[req.stage == 1].arrival_s.min() > last_finish_0 + 2.0 - 1e-9
    assert res.summary["stages"][1]["start_s"] == pytest.approx(last_finish_0 + 2.0)


def test_prompt_overhead_tokens_join_each_prompt_and_are_cached_with_it(tmp_path):
    """A pool of 2 groups × 2 prompts of 1000 + 100 tokens, 8 requests at 2 req/s, with 26 tokens of
    overhead: every prompt is 1126 tokens. The first prompt of each group finds nothing cached, the second
    its group's system prompt in whole 16-token blocks (62 · 16 = 992), and each of the 4 repeats its whole
    prompt, overhead included, but the last partial block: 70 · 16 = 1120 (without the overhead being the
    prompt's own it would be 68 · 16 = 1088)."""
    path = write(tmp_path / "profile.yaml", """
load: {type: constant, stages: [{rate: 2, duration: 4}]}
data:
  type: shared_prefix
  shared_prefix: {num_groups: 2, num_prompts_per_group: 2, system_prompt_len: 1000, question_len: 100, output_len: 20}
""")
    data = make_scenario()
    data["traffic"] = {"source": {"type": "import", "tool": "inference-perf", "path": str(path),
                                  "prompt_overhead_tokens": 26}}
    data["engine"]["workers"]["aggregated"]["kv_cache"]["capacity"]["blocks"] = 4000
    req = run_scenario(data).requests
    assert req.input_tokens.tolist() == [1126] * 8
    assert sorted(req.cached_tokens[:4].tolist()) == [0, 0, 992, 992] and req.cached_tokens[4:].tolist() == [1120] * 4
    data["traffic"]["source"]["prompt_overhead_tokens"] = -1
    with pytest.raises(ScenarioError, match="traffic.source.prompt_overhead_tokens: must be an integer >= 0, got -1"):
        parse_scenario(data, tmp_path)
    data["traffic"]["source"]["prompt_overhead_tokens"] = 3000  # 1100 + 3000 tokens: over context_length 4096
    with pytest.raises(ScenarioError, match=r"^traffic.source.prompt_overhead_tokens: with it every prompt would be "
                                            r"at or above context_length \(4096\) and rejected; got 3000$"):
        run_scenario(data)


def test_inference_perf_normal_lengths_and_concurrent_stages(tmp_path):
    path = write(tmp_path / "p.yaml", """
load: {type: concurrent, stages: [{num_requests: 30, concurrency_level: 4}], num_workers: 2}
data: {type: random, input_distribution: {mean: 300, std_dev: 50, min: 100, max: 500},
       output_distribution: {mean: 40, std_dev: 0, min: 10, max: 100}}
""")
    traffic, warnings = import_workload("inference-perf", path)
    assert traffic["source"]["input_tokens"] == {"distribution": "normal", "mean": 300.0, "std": 50.0, "min": 100,
                                                 "max": 500}
    assert traffic["source"]["output_tokens"] == 40
    assert traffic["load"]["stages"] == [{"concurrency": 4, "requests": 30}]
    assert warnings == ["p.yaml: load.num_workers: the client's own concurrency limits are not simulated"]
    with pytest.raises(ScenarioError, match="data.type shareGPT: its prompts are not in the profile"):
        import_workload("inference-perf", write(tmp_path / "q.yaml", "load: {stages: [{rate: 1, duration: 1}]}\n"
                                                                     "data: {type: shareGPT}\n"))


def test_guidellm_command_line_and_report(tmp_path):
    # two constant-rate benchmarks (2 and 4 req/s) of 30 requests each, run one after the other;
    # prompts normal(512, 128) clamped to [max(1, 512 − 5·128) = 1, 512 + 5·128 = 1152], outputs fixed 128
    path = write(tmp_path / "g.sh", 'guidellm benchmark --target http://x --rate-type constant --rate 2 --rate 4 '
                                    '--max-requests 30 --data "prompt_tokens=512,prompt_tokens_stdev=128,'
                                    'output_tokens=128"')
    traffic, warnings = import_workload("guidellm", path)
    assert traffic == {
        "source": {"type": "synthetic", "input_tokens": {"distribution": "normal", "mean": 512.0, "std": 128.0,
                                                         "min": 1, "max": 1152}, "output_tokens": 128},
        "load": {"type": "stages", "arrivals": "constant", "drain": True,
                 "stages": [{"requests_per_second": 2.0, "requests": 30}, {"requests_per_second": 4.0, "requests": 30}]}}
    assert warnings == []
    # a sweep's report: the strategies that ran (the measured rates included) are the stages
    report = write(tmp_path / "benchmarks.json", json.dumps({
        "args": {"profile": "sweep", "max_seconds": 20, "data": "prompt_tokens=256,output_tokens=64"},
        "benchmarks": [{"config": {"strategy": {"type_": "synchronous"}}},
                       {"config": {"strategy": {"type_": "throughput", "max_concurrency": 32}}},
                       {"config": {"strategy": {"type_": "constant", "rate": 3.5}}}]}))
    traffic, _ = import_workload("guidellm", report)
    assert traffic["load"]["stages"] == [{"concurrency": 1, "duration_s": 20.0}, {"concurrency": 32, "duration_s": 20.0},
                                         {"requests_per_second": 3.5, "duration_s": 20.0}]
    with pytest.raises(ScenarioError, match="profile sweep: its rates come from the server's measured throughput"):
        import_workload("guidellm", write(tmp_path / "sw.sh", "guidellm benchmark --max-requests 5 "
                                                             "--data prompt_tokens=1,output_tokens=1"))


def test_aiperf_command_line_and_export(tmp_path):
    path = write(tmp_path / "a.sh", "aiperf profile --model m --url x --streaming --concurrency 16 "
                                    "--synthetic-input-tokens-mean 550 --synthetic-input-tokens-stddev 50 "
                                    "--output-tokens-mean 200 --request-count 100")
    traffic, warnings = import_workload("aiperf", path)
    assert traffic == {"source": {"type": "synthetic", "input_tokens": {"distribution": "normal", "mean": 550.0,
                                                                        "std": 50.0, "min": 1},
                                  "output_tokens": 200},
                       "load": {"type": "concurrency", "concurrency": 16}, "stop": {"requests": 100}}
    assert warnings == []
    export = write(tmp_path / "profile_export_aiperf.json", json.dumps({"input_config": {
        "cli_command": "aiperf profile --request-rate 5 --arrival-pattern gamma --arrival-smoothness 2 "
                       "--isl 100 --osl 20 --benchmark-duration 30"}}))
    traffic, _ = import_workload("aiperf", export)
    assert traffic["load"] == {"type": "gamma", "requests_per_second": 5.0, "burstiness": 2.0}
    assert traffic["stop"] == {"max_virtual_time_seconds": 30.0}
    with pytest.raises(ScenarioError, match="output_tokens_mean .--osl.: not set"):
        import_workload("aiperf", write(tmp_path / "n.sh", "aiperf profile --concurrency 2"))


def test_import_sets_load_and_stop_and_warnings_reach_the_summary(tmp_path):
    write(tmp_path / "cmd.sh", "vllm bench serve --num-prompts 3 --random-input-len 50 --random-output-len 4 "
                                      "--request-rate inf --num-warmups 2")
    data = make_scenario()
    data["traffic"] = {"source": {"type": "import", "tool": "vllm-bench", "path": "cmd.sh"}}
    scenario = parse_scenario(data, tmp_path)  # a relative path resolves against the scenario's folder
    assert scenario.traffic.stop.requests == 3 and scenario.traffic.load.type == "concurrency"
    res = run_scenario(data, tmp_path)
    assert len(res.requests) == 3 and res.requests.input_tokens.tolist() == [50, 50, 50]
    assert res.summary["workload_warnings"] == ["cmd.sh: num_warmups 2: warm-up requests are not simulated"]
    data["traffic"]["load"] = {"type": "poisson", "requests_per_second": 1}
    with pytest.raises(ScenarioError, match="traffic.load: set by the imported vllm-bench workload; remove it"):
        parse_scenario(data, tmp_path)
    del data["traffic"]["load"]
    data["traffic"]["source"]["tool"] = "locust"
    with pytest.raises(ScenarioError, match="traffic.source.tool: must be one of"):
        parse_scenario(data, tmp_path)


def test_an_imported_workload_the_simulation_refuses_names_the_file(tmp_path):
    path = write(tmp_path / "cmd.sh", "vllm bench serve --num-prompts 0")
    data = make_scenario()
    data["traffic"] = {"source": {"type": "import", "tool": "vllm-bench", "path": str(path)}}
    with pytest.raises(ScenarioError, match=r"traffic.source.path: cmd.sh: the vllm-bench workload it describes is "
                                            r"refused: traffic.load.concurrency: must be a positive integer"):
        parse_scenario(data, tmp_path)  # an infinite rate sends all 0 prompts at once: 0 clients


@pytest.mark.parametrize(("tool", "name", "content", "message"), [
    ("inference-perf", "p.yaml", "load: {type: concurrent, stages: [{num_requests: 5}]}\ndata: {type: random}\n",
     "a inference-perf field is missing: concurrency_level"),
    ("inference-perf", "p.yaml", "load: {stages: [{rate: 1, duration: 2}]}\ndata: {type: shared_prefix, "
                                 "shared_prefix: [1]}\n", "data.shared_prefix: must be a mapping"),
    ("guidellm", "r.json", json.dumps({"args": {"max_requests": 3, "data": "prompt_tokens=1,output_tokens=1"},
                                       "benchmarks": [{"config": {"strategy": {"type_": "concurrent"}}}]}),
     "a guidellm field is missing: streams"),
    ("guidellm", "g.sh", "guidellm benchmark --profile throughput --max-seconds 30 --data prompt_tokens=5,output_tokens=5",
     "profile throughput: without --rate"),
    ("aiperf", "e.json", json.dumps({"input_config": {"input": {"prompt": {"input_tokens": "x"}}}}),
     "a aiperf value is malformed"),
])
def test_malformed_workload_files_are_one_clear_error(tmp_path, tool, name, content, message):
    with pytest.raises(ScenarioError, match=message):
        import_workload(tool, write(tmp_path / name, content))


def test_a_binary_file_is_refused(tmp_path):
    path = tmp_path / "cmd.sh"
    path.write_bytes(b"\xff\xfe\x00bench")
    with pytest.raises(ScenarioError, match="not a text file"):
        import_workload("vllm-bench", path)


def test_inference_perf_poisson_stages_send_their_count_and_data_fields_are_not_dropped(tmp_path):
    path = write(tmp_path / "p.yaml", """
load: {type: poisson, stages: [{rate: 20, duration: 5}]}
data: {type: random, input_distribution: {mean: 100, variance: 4, min: 1, max: 200, skew: 2},
       output_distribution: {mean: 10, std_dev: 0}, multimodal: {x: 1}}
""")
    traffic, warnings = import_workload("inference-perf", path)
    assert traffic["load"] == {"type": "stages", "arrivals": "poisson",
                               "stages": [{"requests_per_second": 20.0, "requests": 100}]}  # ⌊20 × 5⌋, however long
    assert traffic["source"]["input_tokens"]["std"] == pytest.approx(2.0)  # std = √variance
    assert any("data.input_distribution.skew" in w for w in warnings)
    assert any("data.multimodal" in w for w in warnings)
    data = make_scenario()
    data["traffic"] = {"source": {"type": "import", "tool": "inference-perf", "path": str(path)}}
    assert len(run_scenario(data).requests) == 100


@pytest.mark.parametrize(("tool", "content", "message"), [
    ("vllm-bench", "vllm bench serve --num-prompts inf", "a vllm-bench value is malformed"),
    ("inference-perf", "load: {stages: [{rate: 1, duration: 2}]}\ndata: {type: random, x: 2001-13-45}\n",
     "not a YAML/JSON mapping"),
])
def test_infinite_counts_and_bad_yaml_values_are_one_clear_error(tmp_path, tool, content, message):
    suffix = ".yaml" if content.startswith("load") else ".sh"
    with pytest.raises(ScenarioError, match=message):
        import_workload(tool, write(tmp_path / f"w{suffix}", content))


def test_the_importers_own_messages_are_not_rewrapped(tmp_path):
    path = write(tmp_path / "g.sh", "guidellm benchmark --profile throughput --max-seconds 30 "
                                    "--data prompt_tokens=5,output_tokens=5")
    with pytest.raises(ScenarioError) as caught:
        import_workload("guidellm", path)
    assert str(caught.value).startswith("traffic.source.path: profile throughput: without --rate")
    assert str(caught.value).endswith("give one of them")
