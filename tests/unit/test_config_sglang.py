"""Scenario validation for ``engine.backend: sglang``: every SGLang rule ends in one ScenarioError naming the
dotted path of the field, then the rule; valid SGLang scenarios parse to SGLang's defaults."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from factories import make_scenario

from simmodel.config.load import load_scenario, parse_scenario
from simmodel.config.schema import SglangSchedulerSpec
from simmodel.errors import ScenarioError
from simmodel.frontend.stages import StageSpec

AGG = "engine.workers.aggregated"
PRE = "engine.workers.prefill"
DEC = "engine.workers.decode"
VL_MODEL = "Qwen/Qwen3-VL-8B-Instruct"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
FIXED_TIMING = {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}
ONE_STAGE = {"stages": [{"name": "tokenizer", "service_ms": 3}]}
PROFILE = {"path": "host.json", "frontend": "python"}


def _merge(base: dict, extra: dict) -> dict:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def sglang_scenario(**overrides) -> dict:
    """``make_scenario``'s traffic and Llama-3.1-8B on H100, served by one SGLang worker: fixed 20 ms prefill /
    10 ms decode passes, 100,000 KV tokens (page size 1), SGLang's scheduler defaults."""
    data = make_scenario()
    data["engine"]["backend"] = "sglang"
    data["engine"]["workers"] = {"aggregated": {"kv_cache": {"capacity": {"type": "fixed", "blocks": 100_000}},
                                                "timing": dict(FIXED_TIMING)}}
    return _merge(data, overrides)


def sglang_worker(**fields) -> dict:
    """An SGLang scenario whose aggregated worker also has ``fields``."""
    return sglang_scenario(engine={"workers": {"aggregated": fields}})


def vllm_worker(**fields) -> dict:
    return make_scenario(engine={"workers": {"aggregated": fields}})


def disaggregated(prefill: dict | None = None, decode: dict | None = None, backend: str = "sglang") -> dict:
    """1P1D with fixed timing and 100,000 KV tokens per role; ``prefill`` / ``decode`` merge into the roles."""
    role = {"kv_cache": {"capacity": {"type": "fixed", "blocks": 100_000}}, "timing": dict(FIXED_TIMING)}
    data = make_scenario()
    data["engine"].update({"backend": backend, "mode": "disaggregated", "kv_transfer": {},
                           "workers": {"prefill": _merge(copy.deepcopy(role), prefill or {}),
                                       "decode": _merge(copy.deepcopy(role), decode or {})}})
    return data


def image_scenario(**overrides) -> dict:
    """Qwen3-VL-8B on H200 (context 4096), one SGLang worker at the default timing (images are priced by the
    vision tower's roofline), each request carrying one 512×512 PNG."""
    data = sglang_scenario()
    data["engine"].update({"model": VL_MODEL, "hardware": "h200_sxm"})
    data["engine"]["workers"]["aggregated"] = {"kv_cache": {"capacity": {"type": "fixed", "blocks": 100_000}}}
    data["traffic"]["source"]["images"] = {"height": 512, "width": 512}
    return _merge(data, overrides)


def image_worker(**fields) -> dict:
    return image_scenario(engine={"workers": {"aggregated": fields}})


def error_of(data: dict, base_dir: Path = Path(".")) -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, base_dir)
    return str(info.value)


def assert_error(data: dict, path: str, rule: str, base_dir: Path = Path(".")) -> str:
    """One line, ``path: ...rule...``."""
    message = error_of(data, base_dir)
    assert "\n" not in message, message
    assert message.startswith(f"{path}: "), message
    assert rule in message, message
    return message


TEXT_ROW = {"model": LLAMA, "frontend": "python", "transport": "shm", "image": None,
            "stages": [{"name": "tokenizer", "workers": 1, "service_ms": 3.1, "concurrency_scale": [1.0]}]}
TEXT_INLINE_ROW = {"model": LLAMA, "frontend": "python", "transport": "inline", "image": None,
                   "stages": [{"name": "tokenizer", "workers": 1, "service_ms": 5.0, "concurrency_scale": [1.0]}]}
IMAGE_ROW = {"model": VL_MODEL, "frontend": "rust", "transport": "shm",
             "image": {"height": 512, "width": 512, "count": 1, "encoding": "png"},
             "stages": [{"name": "tokenizer", "workers": 1, "service_ms": 2.0, "concurrency_scale": [1.0]},
                        {"name": "mm_processor", "workers": 2, "service_ms": 41.0, "concurrency_scale": [1.0, 1.4]}]}


def write_profile(path: Path, rows: list[dict] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "rows": [TEXT_ROW, TEXT_INLINE_ROW, IMAGE_ROW] if rows is None
                                else rows}))
    return path


# ----------------------------------------------------------------------------------------------
# valid scenarios


def test_minimal_sglang_scenario_has_sglang_defaults():
    scenario = parse_scenario(sglang_scenario(), Path("."))
    role = scenario.engine.workers["aggregated"]
    assert scenario.engine.backend == "sglang" and scenario.engine.enable_chunked_prefill
    sg = role.scheduler.sglang
    assert sg == SglangSchedulerSpec()
    assert (sg.chunked_prefill_size, sg.max_prefill_tokens, sg.schedule_policy) == (8192, 16384, "fcfs")
    assert (sg.schedule_conservativeness, sg.prefill_decode_interval) == (1.0, 0)
    assert (role.kv_cache.block_size, role.kv_cache.prefix_caching, role.num_kv_blocks) == (1, True, 100_000)
    assert (role.scheduler.max_batched_tokens, role.scheduler.max_sequences) == (8192, 256)
    assert not role.scheduler.async_scheduling  # vLLM's async loop is not SGLang's; host_loop is
    assert (role.host_loop, role.frontend, role.vision) == (False, None, None)


def test_vllm_scenario_has_no_sglang_scheduler():
    role = parse_scenario(make_scenario(), Path(".")).engine.workers["aggregated"]
    assert role.scheduler.sglang is None and role.kv_cache.block_size == 16


def test_sglang_scheduler_fields_are_read():
    data = sglang_worker(kv_cache={"block_size": 1}, scheduler={
        "chunked_prefill_size": 4096, "max_prefill_tokens": 8192, "schedule_policy": "lpm",
        "schedule_conservativeness": 0.5, "clip_max_new_tokens": 1024, "prefill_decode_interval": 3,
        "new_token_ratio": {"init": 0.5, "min_factor": 0.2, "decay_steps": 100}, "max_sequences": 64})
    role = parse_scenario(data, Path(".")).engine.workers["aggregated"]
    assert role.scheduler.sglang == SglangSchedulerSpec(4096, 8192, "lpm", 0.5, 0.5, 0.2, 100, 1024, 3)
    assert role.scheduler.max_sequences == 64 and role.kv_cache.block_size == 1


def test_disaggregated_sglang_parses_with_host_loop_on_prefill():
    data = disaggregated(prefill={"host_loop": True, "scheduler": {"max_batched_tokens": 4096,
                                                                    "prefill_decode_interval": 0}})
    workers = parse_scenario(data, Path(".")).engine.workers
    assert workers["prefill"].host_loop and not workers["decode"].host_loop
    assert workers["prefill"].scheduler.max_batched_tokens == 4096
    assert workers["prefill"].scheduler.max_sequences == 1 and workers["decode"].scheduler.max_sequences == 256


def test_max_batched_tokens_is_the_budget_with_host_loop_or_images():
    role = parse_scenario(sglang_worker(host_loop=True, scheduler={"max_batched_tokens": 4096}),
                          Path(".")).engine.workers["aggregated"]
    assert role.host_loop and role.scheduler.max_batched_tokens == 4096
    role = parse_scenario(image_worker(scheduler={"max_batched_tokens": 4096}), Path(".")).engine.workers["aggregated"]
    assert not role.host_loop and role.scheduler.max_batched_tokens == 4096
    # the default value is accepted anywhere (it changes nothing)
    parse_scenario(sglang_worker(scheduler={"max_batched_tokens": 8192}), Path("."))


def test_frontend_turns_the_host_loop_on_and_expands_a_scalar_scale():
    data = sglang_worker(frontend={"stages": [
        {"name": "tokenizer", "workers": 2, "service_ms": 3, "concurrency_scale": 0.5},
        {"service_ms": 1.5}]})
    role = parse_scenario(data, Path(".")).engine.workers["aggregated"]
    assert role.host_loop and role.frontend.source == "frontend"
    assert role.frontend.stages == (StageSpec("tokenizer", 2, 3.0, (1.0, 1.5)),
                                    StageSpec("stage1", 1, 1.5, (1.0,)))


def test_images_and_vision_parse_on_a_vision_language_model():
    scenario = parse_scenario(image_worker(vision={"cache_mib": 50, "encoder_parallel": "dp"}), Path("."))
    role = scenario.engine.workers["aggregated"]
    assert (role.vision.cache_mib, role.vision.encoder_parallel) == (50.0, "dp")
    assert role.timing.type == "default" and role.deployment.model.vision is not None
    images = scenario.traffic.source.images
    assert (images.height, images.width, images.count, images.encoding, images.identity) == (
        512, 512, 1, "png", "unique")


# ----------------------------------------------------------------------------------------------
# engine-level rules


@pytest.mark.parametrize("engine, path, rule", [
    ({"enable_chunked_prefill": False}, "engine.enable_chunked_prefill", "SGLang always chunks long prompts"),
    ({"speculation": {"kind": "ngram", "num_speculative_tokens": 2, "acceptance_rates": [0.5, 0.5]}},
     "engine.speculation", "n-gram speculative decoding is not yet modeled for backend sglang"),
], ids=["chunked_prefill_off", "ngram"])
def test_engine_rules(engine, path, rule):
    assert_error(sglang_scenario(engine=engine), path, rule)


# ----------------------------------------------------------------------------------------------
# one backend's fields on the other


@pytest.mark.parametrize("field, value", [
    ("async_scheduling", False),
    ("prefill_schedule_interval", 2),
    ("launch", {"decode_ms": 1, "piecewise_ms": 1, "eager_ms": 1}),
    ("long_prefill_token_threshold", 100),
    ("reserve_full_isl", False),
])
def test_vllm_scheduler_fields_fail_on_sglang(field, value):
    assert_error(sglang_worker(scheduler={field: value}), f"{AGG}.scheduler.{field}", "vLLM only; engine.backend is sglang")


@pytest.mark.parametrize("field, value", [
    ("chunked_prefill_size", 4096),
    ("max_prefill_tokens", 8192),
    ("schedule_policy", "lpm"),
    ("schedule_conservativeness", 0.5),
    ("new_token_ratio", {"init": 0.5}),
    ("clip_max_new_tokens", 1024),
    ("prefill_decode_interval", 2),
    ("prefill_decode_interval", 0),  # set at all, even to the default
    ("enable_mixed_chunk", True),
    ("ignore_eos", False),
])
def test_sglang_scheduler_fields_fail_on_vllm(field, value):
    assert_error(vllm_worker(scheduler={field: value}), f"{AGG}.scheduler.{field}", "SGLang only; engine.backend is vllm")


@pytest.mark.parametrize("field, value", [
    ("host_loop", True),
    ("host_loop", False),
    ("frontend", ONE_STAGE),
    ("host_profile", PROFILE),
    ("vision", {"cache_mib": 50}),
])
def test_sglang_worker_fields_fail_on_vllm(field, value):
    assert_error(vllm_worker(**{field: value}), f"{AGG}.{field}", "SGLang only; engine.backend is vllm")


def test_sglang_worker_fields_fail_on_a_vllm_decode_role():
    assert_error(disaggregated(decode={"host_loop": True}, backend="vllm"), f"{DEC}.host_loop",
                 "SGLang only; engine.backend is vllm")


# ----------------------------------------------------------------------------------------------
# kv_cache and the SGLang scheduler's own fields


@pytest.mark.parametrize("worker, path, rule", [
    ({"kv_cache": {"block_size": 0}}, f"{AGG}.kv_cache.block_size", "must be a positive integer, got 0"),
    ({"kv_cache": {"prefix_caching": "no"}}, f"{AGG}.kv_cache.prefix_caching", "must be true or false, got 'no'"),
    ({"scheduler": {"enable_mixed_chunk": 1}}, f"{AGG}.scheduler.enable_mixed_chunk", "must be true or false, got 1"),
    ({"scheduler": {"ignore_eos": "yes"}}, f"{AGG}.scheduler.ignore_eos", "must be true or false, got 'yes'"),
    ({"scheduler": {"enable_mixed_chunk": True, "prefill_decode_interval": 2}}, f"{AGG}.scheduler.enable_mixed_chunk",
     "cannot be used with prefill_decode_interval"),
    ({"scheduler": {"enable_mixed_chunk": True}, "host_loop": True}, f"{AGG}.scheduler.enable_mixed_chunk",
     "cannot be used with host_loop"),
    ({"scheduler": {"schedule_policy": "lifo"}}, f"{AGG}.scheduler.schedule_policy",
     "must be one of fcfs, lpm, got 'lifo'"),
    ({"scheduler": {"new_token_ratio": {"inti": 0.5}}}, f"{AGG}.scheduler.new_token_ratio.inti",
     "unknown field (allowed here: decay_steps, init, min_factor)"),
    ({"scheduler": {"new_token_ratio": 0.5}}, f"{AGG}.scheduler.new_token_ratio", "must be a mapping, got 0.5"),
    ({"scheduler": {"new_token_ratio": {"init": 2}}}, f"{AGG}.scheduler.new_token_ratio.init",
     "must be a non-negative number at most 1, got 2"),
    ({"scheduler": {"new_token_ratio": {"min_factor": -0.1}}}, f"{AGG}.scheduler.new_token_ratio.min_factor",
     "must be a non-negative number at most 1"),
    ({"scheduler": {"new_token_ratio": {"decay_steps": 0}}}, f"{AGG}.scheduler.new_token_ratio.decay_steps",
     "must be a positive integer, got 0"),
    ({"scheduler": {"schedule_conservativeness": 0}}, f"{AGG}.scheduler.schedule_conservativeness",
     "must be a positive number at most 100, got 0"),
    ({"scheduler": {"prefill_decode_interval": -1}}, f"{AGG}.scheduler.prefill_decode_interval",
     "must be an integer >= 0, got -1"),
    ({"scheduler": {"chunked_prefill_size": 0}}, f"{AGG}.scheduler.chunked_prefill_size",
     "must be a positive integer, got 0"),
    ({"scheduler": {"max_prefill_tokens": True}}, f"{AGG}.scheduler.max_prefill_tokens",
     "must be a positive integer, got true"),
    ({"scheduler": {"clip_max_new_tokens": 0}}, f"{AGG}.scheduler.clip_max_new_tokens",
     "must be a positive integer, got 0"),
    ({"scheduler": {"chunk_size": 4096}}, f"{AGG}.scheduler.chunk_size", "unknown field"),
    ({"host_loop": "yes"}, f"{AGG}.host_loop", "must be true or false, got 'yes'"),
    ({"vision": {"encoder_parallel": "ep"}}, f"{AGG}.vision.encoder_parallel", "must be one of tp, dp, got 'ep'"),
    ({"vision": {"cache_mib": -1}}, f"{AGG}.vision.cache_mib", "must be a non-negative number"),
    ({"vision": {"cache": 1}}, f"{AGG}.vision.cache", "unknown field"),
])
def test_sglang_worker_field_rules(worker, path, rule):
    assert_error(sglang_worker(**worker), path, rule)


# ----------------------------------------------------------------------------------------------
# disaggregated roles


def test_block_size_is_the_page_size_and_capacity_counts_pages():
    """SGLang's --page-size: capacity blocks are pages. An empty rank must admit the longest prompt,
    context_length − 2 tokens, while it and one page stay below the KV tokens: context_length + 15 tokens
    with pages of 16. 300 pages hold context_length 4,096 (4,111 tokens, 257 pages); 100 pages do not hold
    context_length 2,000, which needs ⌈2,015 / 16⌉ = 126."""
    role = parse_scenario(sglang_worker(kv_cache={"block_size": 16, "capacity": {"type": "fixed", "blocks": 300}}),
                          Path(".")).engine.workers["aggregated"]
    assert (role.kv_cache.block_size, role.num_kv_blocks, role.context_length) == (16, 300, 4096)
    assert_error(sglang_scenario(engine={"context_length": 2000, "workers": {"aggregated": {
        "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 100}}}}}),
        f"{AGG}.kv_cache.capacity", "a rank has 100 KV pages of 16 tokens but one request at context_length 2000 "
                                    "needs 126")


def test_a_ranks_chunk_budget_holds_a_page():
    """SGLang cuts a prompt at the last whole page of a rank's chunk budget: 64 // 8 ranks = 8 tokens hold no
    page of 16, so nothing would ever be prefilled."""
    assert_error(sglang_worker(kv_cache={"block_size": 16}, parallelism={"attention_data": 8},
                               scheduler={"chunked_prefill_size": 64}),
                 f"{AGG}.scheduler.chunked_prefill_size", "a rank's share (64 // 8 attention-DP rank(s) = 8 tokens) "
                                                          "must hold one KV page of 16 tokens")
    assert_error(sglang_worker(kv_cache={"block_size": 64}, host_loop=True, scheduler={"max_batched_tokens": 32}),
                 f"{AGG}.scheduler.max_batched_tokens", "= 32 tokens) must hold one KV page of 64 tokens")
    # With ignore_eos and the radix cache off, SGLang's add_one_req_ignore_eos cuts at the budget itself.
    parse_scenario(sglang_worker(kv_cache={"block_size": 16, "prefix_caching": False},
                                 scheduler={"chunked_prefill_size": 8, "ignore_eos": True}), Path("."))


def test_radix_cache_off_mixed_chunk_and_ignore_eos_are_read():
    data = sglang_worker(kv_cache={"prefix_caching": False},
                         scheduler={"enable_mixed_chunk": True, "ignore_eos": True})
    role = parse_scenario(data, Path(".")).engine.workers["aggregated"]
    assert role.kv_cache.prefix_caching is False
    assert (role.scheduler.sglang.enable_mixed_chunk, role.scheduler.sglang.ignore_eos) == (True, True)


def test_mixed_chunk_only_on_aggregated_workers():
    assert_error(disaggregated(prefill={"scheduler": {"enable_mixed_chunk": True}}),
                 f"{PRE}.scheduler.enable_mixed_chunk", "only applies to aggregated workers (a prefill worker")
    assert_error(disaggregated(decode={"scheduler": {"enable_mixed_chunk": True}}),
                 f"{DEC}.scheduler.enable_mixed_chunk", "only applies to aggregated workers (a decode worker")


def test_prefill_decode_interval_only_on_aggregated_workers():
    assert_error(disaggregated(prefill={"scheduler": {"prefill_decode_interval": 2}}),
                 f"{PRE}.scheduler.prefill_decode_interval", "only applies to aggregated workers (a prefill worker")
    assert_error(disaggregated(decode={"scheduler": {"prefill_decode_interval": 2}}),
                 f"{DEC}.scheduler.prefill_decode_interval", "only applies to aggregated workers (a decode worker")


@pytest.mark.parametrize("field, value", [
    ("host_loop", True),
    ("host_loop", False),
    ("frontend", ONE_STAGE),
    ("vision", {}),
    ("host_profile", PROFILE),
])
def test_host_fields_go_on_the_prefill_role(field, value):
    assert_error(disaggregated(decode={field: value}), f"{DEC}.{field}", "goes on workers.prefill in disaggregated mode")


def test_max_batched_tokens_on_a_decode_role():
    assert_error(disaggregated(decode={"scheduler": {"max_batched_tokens": 4096}}), f"{DEC}.scheduler.max_batched_tokens",
                 "has no effect on an SGLang decode worker")


def test_max_batched_tokens_on_a_prefill_role_needs_the_host_loop():
    assert_error(disaggregated(prefill={"scheduler": {"max_batched_tokens": 4096}}),
                 f"{PRE}.scheduler.max_batched_tokens", "set chunked_prefill_size instead")


# ----------------------------------------------------------------------------------------------
# host loop and the prefill budget


def test_max_batched_tokens_without_host_loop_or_images():
    assert_error(sglang_worker(scheduler={"max_batched_tokens": 4096}), f"{AGG}.scheduler.max_batched_tokens",
                 "SGLang takes its prefill budget from scheduler.chunked_prefill_size unless host_loop is on")
    assert_error(sglang_worker(host_loop=False, scheduler={"max_batched_tokens": 4096}),
                 f"{AGG}.scheduler.max_batched_tokens", "set chunked_prefill_size instead")


@pytest.mark.parametrize("data", [
    sglang_worker(host_loop=True, scheduler={"chunked_prefill_size": 4096}),
    sglang_worker(frontend=ONE_STAGE, scheduler={"chunked_prefill_size": 4096}),
    image_worker(scheduler={"chunked_prefill_size": 4096}),
    disaggregated(prefill={"host_loop": True, "scheduler": {"chunked_prefill_size": 4096}}),
], ids=["host_loop", "frontend", "images", "disaggregated_prefill"])
def test_chunked_prefill_size_with_host_loop_or_images(data):
    path = PRE if data["engine"].get("mode") == "disaggregated" else AGG
    assert_error(data, f"{path}.scheduler.chunked_prefill_size",
                 "with host_loop or images encoded on the worker, max_batched_tokens is the worker's "
                 "chunked_prefill_size")


# ----------------------------------------------------------------------------------------------
# frontend and host_profile


def test_frontend_and_host_profile_exclude_each_other():
    assert_error(sglang_worker(frontend=ONE_STAGE, host_profile=PROFILE), f"{AGG}.host_profile",
                 "cannot be combined with frontend")


@pytest.mark.parametrize("worker", [{"frontend": ONE_STAGE}, {"host_profile": PROFILE}], ids=["frontend", "host_profile"])
def test_host_loop_false_with_a_frontend(worker):
    assert_error(sglang_worker(host_loop=False, **worker), f"{AGG}.host_loop",
                 "a frontend feeds SGLang's host loop; it cannot be false")


STAGES = f"{AGG}.frontend.stages"


@pytest.mark.parametrize("frontend, path, rule", [
    ({"stages": []}, STAGES, "must be a non-empty list"),
    ({"stages": {"service_ms": 1}}, STAGES, "must be a non-empty list"),
    ({}, STAGES, "required field is missing"),
    ({"stages": [3]}, f"{STAGES}[0]", "must be a mapping, got 3"),
    ({"stages": [{"workers": 2, "service_ms": 1, "concurrency_scale": [1.0]}]}, f"{STAGES}[0].concurrency_scale",
     "must be a list of 2 positive numbers"),
    ({"stages": [{"workers": 1, "service_ms": 1, "concurrency_scale": [0]}]}, f"{STAGES}[0].concurrency_scale",
     "positive numbers"),
    ({"stages": [{"workers": 1, "service_ms": 1, "concurrency_scale": "x"}]}, f"{STAGES}[0].concurrency_scale",
     "positive numbers"),
    ({"stages": [{"service_ms": -1}]}, f"{STAGES}[0].service_ms", "must be a non-negative number at most 1e+09, got -1"),
    ({"stages": [{"workers": 1}]}, f"{STAGES}[0].service_ms", "required field is missing"),
    ({"stages": [{"service_ms": 1, "threads": 2}]}, f"{STAGES}[0].threads",
     "unknown field (allowed here: concurrency_scale, name, service_ms, workers)"),
    ({"stages": [{"service_ms": 1, "name": ""}]}, f"{STAGES}[0].name", "must be a non-empty string"),
    ({"stages": [{"service_ms": 1, "workers": 0}]}, f"{STAGES}[0].workers", "must be a positive integer, got 0"),
    ({"stages": [{"service_ms": 1}, {"service_ms": 1, "workers": 100_001}]}, f"{STAGES}[1].workers",
     "must be at most 100,000"),
    ({**ONE_STAGE, "source": "x"}, f"{AGG}.frontend.source", "unknown field (allowed here: measured_for, stages)"),
    ({**ONE_STAGE, "measured_for": 3}, f"{AGG}.frontend.measured_for", "must be a mapping"),
], ids=["empty", "not_list", "missing", "not_mapping", "scale_length", "scale_zero", "scale_text", "negative_service",
        "no_service", "unknown_stage_field", "empty_name", "no_workers", "too_many_workers", "unknown_field",
        "measured_for"])
def test_frontend_rules(frontend, path, rule):
    assert_error(sglang_worker(frontend=frontend), path, rule)


@pytest.mark.parametrize("parallelism, key", [
    ({"attention_data": 2}, "attention_data"),
    ({"tensor": 2, "prefill_context": 2}, "prefill_context"),
    ({"tensor": 2, "decode_context": 2}, "decode_context"),
])
def test_host_profile_needs_no_data_or_context_parallelism(parallelism, key):
    assert_error(sglang_worker(host_profile=PROFILE, parallelism=parallelism), f"{AGG}.host_profile",
                 f"host profiles are measured on workers with pipeline, attention_data and context parallelism of 1; "
                 f"parallelism.{key} is 2")


@pytest.mark.parametrize("profile, path, rule", [
    ({"path": "host.json", "frontend": "go"}, f"{AGG}.host_profile.frontend", "must be one of python, rust, got 'go'"),
    ({"path": "host.json"}, f"{AGG}.host_profile.frontend", "required field is missing"),
    ({"frontend": "python"}, f"{AGG}.host_profile.path", "required field is missing"),
    ({"path": 3, "frontend": "python"}, f"{AGG}.host_profile.path", "must be a file path, got 3"),
    ({"path": "", "frontend": "python"}, f"{AGG}.host_profile.path", "must be a file path"),
    ({**PROFILE, "transport": 1}, f"{AGG}.host_profile.transport", "must be a transport name, got 1"),
    ({**PROFILE, "image": None}, f"{AGG}.host_profile.image", "unknown field (allowed here: frontend, path, transport)"),
    ("host.json", f"{AGG}.host_profile", "must be a mapping, got 'host.json'"),
], ids=["frontend_go", "no_frontend", "no_path", "path_number", "path_empty", "transport_number", "unknown_field",
        "not_mapping"])
def test_host_profile_field_rules(profile, path, rule):
    assert_error(sglang_worker(host_profile=profile), path, rule)


def test_host_profile_resolves_to_the_row_of_the_workload(tmp_path):
    write_profile(tmp_path / "host.json")
    role = parse_scenario(sglang_worker(host_profile=PROFILE), tmp_path).engine.workers["aggregated"]
    assert role.host_loop and role.frontend.source == "host_profile:host.json"
    assert role.frontend.stages == (StageSpec("tokenizer", 1, 3.1, (1.0,)),)  # first python row: shm
    assert role.frontend.measured_for == {"model": LLAMA, "frontend": "python", "transport": "shm", "image": None}
    role = parse_scenario(sglang_worker(host_profile={**PROFILE, "transport": "inline"}),
                          tmp_path).engine.workers["aggregated"]
    assert role.frontend.stages == (StageSpec("tokenizer", 1, 5.0, (1.0,)),)


def test_host_profile_row_for_images(tmp_path):
    write_profile(tmp_path / "host.json")
    data = image_worker(host_profile={"path": "host.json", "frontend": "rust"})
    role = parse_scenario(data, tmp_path).engine.workers["aggregated"]
    assert [s.name for s in role.frontend.stages] == ["tokenizer", "mm_processor"]
    assert role.frontend.stages[1] == StageSpec("mm_processor", 2, 41.0, (1.0, 1.4))
    assert role.frontend.measured_for["image"] == "512x512 png x1"


def test_host_profile_on_the_prefill_role(tmp_path):
    write_profile(tmp_path / "host.json")
    workers = parse_scenario(disaggregated(prefill={"host_profile": PROFILE}), tmp_path).engine.workers
    assert workers["prefill"].frontend.stages == (StageSpec("tokenizer", 1, 3.1, (1.0,)),)
    assert workers["decode"].frontend is None


@pytest.mark.parametrize("data, wanted", [
    (sglang_worker(host_profile={**PROFILE, "frontend": "rust"}),
     f"no row for model '{LLAMA}', frontend 'rust', image none (text only); add that row"),
    (sglang_worker(host_profile={**PROFILE, "transport": "tcp"}),
     f"no row for model '{LLAMA}', frontend 'python', transport 'tcp', image none (text only)"),
    (image_scenario(traffic={"source": {"images": {"height": 1024}}},
                    engine={"workers": {"aggregated": {"host_profile": {"path": "host.json", "frontend": "rust"}}}}),
     f"no row for model '{VL_MODEL}', frontend 'rust', image 1024x512 png x1"),
], ids=["frontend", "transport", "image"])
def test_host_profile_missing_row_names_the_row_needed(tmp_path, data, wanted):
    write_profile(tmp_path / "host.json")
    message = assert_error(data, f"{AGG}.host_profile", wanted, tmp_path)
    assert "(it has: " in message


def test_host_profile_relative_path_resolves_against_base_dir(tmp_path):
    write_profile(tmp_path / "profiles" / "host.json")
    data = sglang_worker(host_profile={"path": "profiles/host.json", "frontend": "python"})
    role = parse_scenario(data, tmp_path).engine.workers["aggregated"]
    assert role.frontend.source == "host_profile:profiles/host.json" and len(role.frontend.stages) == 1
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert_error(data, f"{AGG}.host_profile", "cannot read", elsewhere)
    # an absolute path does not depend on base_dir
    absolute = sglang_worker(host_profile={"path": str(tmp_path / "profiles" / "host.json"), "frontend": "python"})
    assert parse_scenario(absolute, elsewhere).engine.workers["aggregated"].frontend.stages


def test_host_profile_relative_to_the_scenario_file(tmp_path):
    write_profile(tmp_path / "profiles" / "host.json")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sglang_worker(host_profile={"path": "profiles/host.json", "frontend": "python"})))
    role = load_scenario(path).engine.workers["aggregated"]
    assert role.frontend.stages == (StageSpec("tokenizer", 1, 3.1, (1.0,)),)


@pytest.mark.parametrize("content, rule", [
    ("{not json", "not valid JSON"),
    (json.dumps({"version": 2, "rows": []}), 'expected a JSON object with "version": 1'),
    (json.dumps({"version": 1, "rows": {}}), '"rows" must be a list'),
    (json.dumps({"version": 1, "rows": [{**TEXT_ROW, "stages": [{**TEXT_ROW["stages"][0], "workers": 0}]}]}),
     "rows[0].stages[0]: stage 'tokenizer': workers must be >= 1"),
    (json.dumps({"version": 1, "rows": [{**TEXT_ROW, "stages": [{**TEXT_ROW["stages"][0], "service_ms": -1}]}]}),
     "service_ms must be finite and >= 0"),
    (json.dumps({"version": 1, "rows": [{k: v for k, v in TEXT_ROW.items() if k != "image"}]}),
     "rows[0].image is missing"),
], ids=["json", "version", "rows", "workers", "service_ms", "image"])
def test_malformed_host_profile(tmp_path, content, rule):
    (tmp_path / "host.json").write_text(content)
    assert_error(sglang_worker(host_profile=PROFILE), f"{AGG}.host_profile", rule, tmp_path)


def test_missing_host_profile_file(tmp_path):
    assert_error(sglang_worker(host_profile=PROFILE), f"{AGG}.host_profile", "host profile", tmp_path)
    assert "cannot read" in error_of(sglang_worker(host_profile=PROFILE), tmp_path)


# ----------------------------------------------------------------------------------------------
# images and vision


def test_images_need_backend_sglang():
    data = make_scenario(engine={"model": VL_MODEL, "hardware": "h200_sxm"},
                         traffic={"source": {"images": {"height": 512, "width": 512}}})
    assert_error(data, "traffic.source.images", "images are encoded by SGLang workers only; set engine.backend: sglang")


def test_images_need_a_vision_tower():
    data = image_scenario(engine={"model": LLAMA})
    assert_error(data, "engine.model", f"{LLAMA} has no vision tower in the registry")


@pytest.mark.parametrize("timing", [FIXED_TIMING, {"type": "polynomial"}], ids=["fixed", "polynomial"])
def test_images_need_the_default_timing(timing):
    assert_error(image_worker(timing=timing), f"{AGG}.timing.type",
                 f"images encoded on the worker are priced by the default timing (the vision tower's roofline); "
                 f"got {timing['type']}")


def test_images_on_the_prefill_role_need_the_default_timing():
    data = disaggregated()
    data["engine"].update({"model": VL_MODEL, "hardware": "h200_sxm"})
    data["traffic"]["source"]["images"] = {"height": 512, "width": 512}
    assert_error(data, f"{PRE}.timing.type", "priced by the default timing")
    del data["engine"]["workers"]["prefill"]["timing"]
    parse_scenario(data, Path("."))  # the decode role encodes no image: any timing


def test_vision_needs_images():
    assert_error(sglang_worker(vision={}), f"{AGG}.vision", "needs traffic.source.images")
    assert_error(disaggregated(prefill={"vision": {}}), f"{PRE}.vision", "needs traffic.source.images")


@pytest.mark.parametrize("images, path, rule", [
    ({"height": 0}, "height", "must be a positive integer, got 0"),
    ({"width": 0}, "width", "must be a positive integer, got 0"),
    ({"height": 70_000}, "height", "must be at most 65,536, got 70000"),
    ({"count": 0}, "count", "must be a positive integer, got 0"),
    ({"count": 65}, "count", "must be at most 64, got 65"),
    ({"encoding": "gif"}, "encoding", "must be one of png, jpeg, got 'gif'"),
    ({"identity": "other"}, "identity", "must be one of unique, shared, got 'other'"),
    ({"format": "png"}, "format", "unknown field (allowed here: count, encoding, height, identity, width)"),
], ids=["height", "width", "height_max", "count", "count_max", "encoding", "identity", "unknown"])
def test_image_field_rules(images, path, rule):
    assert_error(image_scenario(traffic={"source": {"images": images}}), f"traffic.source.images.{path}", rule)


def test_images_need_height_and_a_mapping():
    data = image_scenario()
    data["traffic"]["source"]["images"] = {"width": 512}
    assert_error(data, "traffic.source.images.height", "required field is missing")
    data["traffic"]["source"]["images"] = "512x512"
    assert_error(data, "traffic.source.images", "must be a mapping")


# -- rules added after review ----------------------------------------------------------------------

def test_chunked_prefill_size_must_cover_every_dp_rank():
    """Each rank gets chunked_prefill_size // attention_data tokens: 1 // 2 would be a zero budget."""
    assert_error(sglang_scenario(**sglang_worker(scheduler={"chunked_prefill_size": 1},
                                                 parallelism={"attention_data": 2})),
                 f"{AGG}.scheduler.chunked_prefill_size", "must be at least that; got 1")


@pytest.mark.parametrize("field, value", [("chunked_prefill_size", 4096), ("max_prefill_tokens", 4096),
                                          ("schedule_policy", "lpm")])
def test_prefill_fields_fail_on_a_decode_role(field, value):
    assert_error(disaggregated(decode={"scheduler": {field: value}}),
                 f"engine.workers.decode.scheduler.{field}", "a decode worker never prefills")


def test_images_must_leave_room_under_the_context_length():
    """Four 8192×8192 images exceed Qwen3-VL's 4096² pixel cap: each is resized to 4096×4096, i.e.
    256 × 256 patches merged 2 × 2 = 16,384 tokens, 65,536 for four: above a 32,768 context."""
    data = image_scenario(traffic={"source": {"images": {"height": 8192, "width": 8192, "count": 4}}})
    data["engine"]["context_length"] = 32768
    assert_error(data, "traffic.source.images", "65536 visual tokens per request, leaving no room")


def test_unknown_scheduler_field_lists_only_this_backends_fields():
    message = error_of(sglang_scenario(**sglang_worker(scheduler={"foo": 1})))
    assert "foo: unknown field" in message and "async_scheduling" not in message


def test_sglang_decode_rank_needs_room_for_a_prompt_and_its_reserve():
    """Context 4096: the longest prompt is 4095 tokens, reserved with 512 more for decoding = 4607."""
    data = disaggregated(decode={"kv_cache": {"capacity": {"type": "fixed", "blocks": 4600}}})
    data["engine"]["context_length"] = 4096
    assert_error(data, "engine.workers.decode.kv_cache.capacity", "needs at least 4607 tokens")


def test_images_the_processor_refuses():
    """Qwen-VL's processor refuses an aspect ratio above 200:1 (found by the scenario fuzzer)."""
    data = image_scenario(traffic={"source": {"images": {"height": 1, "width": 1024}}})
    assert_error(data, "traffic.source.images", "aspect ratio must be at most 200:1")
