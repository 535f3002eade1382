"""The per-backend configuration rules (``simmodel.config.backends``): the table is what ``engine.backend``
accepts, and each entry's numbers are its engine's."""

from __future__ import annotations

import pytest
from factories import make_scenario

from simmodel.config import backends
from simmodel.config.backends import BACKEND_RULES, VllmRules
from simmodel.config.load import parse_scenario
from simmodel.config.schedulers import SGLANG_SCHEDULER, TRTLLM_SCHEDULER, VLLM_SCHEDULER
from simmodel.config.sglang_host import SGLANG_HOST
from simmodel.engine.backends import BACKENDS
from simmodel.errors import ScenarioError


def scenario(backend: str, **worker) -> dict:
    """``make_scenario``'s (one Llama-3.1-8B worker at context_length 4,096, 1,000 KV blocks of 16, fixed timing)
    on ``backend``, its worker's fields merged with ``worker``, no scheduler field set but those given."""
    data = make_scenario(engine={"backend": backend, "workers": {"aggregated": worker}})
    scheduler = data["engine"]["workers"]["aggregated"]["scheduler"]
    if "async_scheduling" not in worker.get("scheduler", {}):
        del scheduler["async_scheduling"]  # (vLLM's field, which make_scenario sets)
    return data


def test_a_backend_outside_the_table_is_refused_naming_the_tables_entries(tmp_path):
    data = scenario("tgi")
    with pytest.raises(ScenarioError, match=r"^engine\.backend: must be one of vllm, sglang, trtllm, got 'tgi'$"):
        parse_scenario(data, tmp_path)


@pytest.mark.parametrize(("backend", "context_length", "block_size", "needed"), [
    # vLLM allocates whole blocks: 4,096 tokens / 16 = 256 blocks; 4,097 tokens take a 257th.
    ("vllm", 4096, 16, 256),
    ("vllm", 4097, 16, 257),
    # SGLang admits the longest prompt (context − 2 tokens) while it and one more page fit: ceil((4,096 + 15) / 16)
    # = ceil(256.94) = 257 pages of 16; with pages of 1 token, 4,096.
    ("sglang", 4096, 16, 257),
    ("sglang", 4096, 1, 4096),
    # TensorRT-LLM allocates whole blocks too: 4,096 / 32 = 128; 4,097 tokens take a 129th.
    ("trtllm", 4096, 32, 128),
    ("trtllm", 4097, 32, 129),
])
def test_the_kv_a_rank_needs_for_one_request_at_context_length(backend, context_length, block_size, needed):
    assert BACKEND_RULES[backend].blocks_needed(context_length, block_size) == needed


def test_each_backend_owns_its_fields_and_units():
    vllm, sglang = BACKEND_RULES["vllm"], BACKEND_RULES["sglang"]
    assert (vllm.label, vllm.kv_unit, vllm.default_block_size, vllm.encodes_images) == ("vLLM", "blocks", 16, False)
    assert (sglang.label, sglang.kv_unit, sglang.default_block_size, sglang.encodes_images) == (
        "SGLang", "pages", 1, True)
    assert vllm.scheduler_keys == VLLM_SCHEDULER and sglang.scheduler_keys == SGLANG_SCHEDULER
    assert vllm.host_keys == () and sglang.host_keys == SGLANG_HOST
    trtllm = BACKEND_RULES["trtllm"]  # (TensorRT-LLM's tokens_per_block defaults to 32)
    assert (trtllm.label, trtllm.kv_unit, trtllm.default_block_size, trtllm.encodes_images) == (
        "TensorRT-LLM", "blocks", 32, False)
    assert trtllm.scheduler_keys == TRTLLM_SCHEDULER and trtllm.host_keys == ()


def test_the_configuration_and_the_engine_name_the_same_engines_and_no_field_is_two_engines_own():
    assert list(BACKEND_RULES) == list(BACKENDS)  # (a backend the config accepts is one the simulator builds)
    assert all(rules.name == name for name, rules in BACKEND_RULES.items())
    owned = [key for rules in BACKEND_RULES.values() for key in (*rules.scheduler_keys, *rules.host_keys)]
    assert len(owned) == len(set(owned))


def test_an_engine_added_to_the_table_refuses_only_its_own_fields_on_the_others(tmp_path, monkeypatch):
    class ToyRules(VllmRules):  # a third engine with one scheduler knob of its own, vLLM's scheduler otherwise
        name, label = "toy", "Toy"
        scheduler_keys = ("toy_knob",)

    monkeypatch.setattr(backends, "BACKEND_RULES", {**BACKEND_RULES, "toy": ToyRules()})
    parse_scenario(make_scenario(), tmp_path)  # vLLM's own async_scheduling stays accepted on vLLM
    with pytest.raises(ScenarioError, match=r"scheduler\.toy_knob: Toy only; engine\.backend is vllm$"):
        parse_scenario(make_scenario(engine={"workers": {"aggregated": {"scheduler": {"toy_knob": 1}}}}), tmp_path)


@pytest.mark.parametrize(("backend", "field", "owner"), [
    ("vllm", "schedule_policy", "SGLang"),
    ("sglang", "reserve_full_isl", "vLLM"),
    ("trtllm", "async_scheduling", "vLLM"),
    ("trtllm", "schedule_policy", "SGLang"),
    ("vllm", "capacity_policy", "TensorRT-LLM"),
])
def test_the_other_engines_scheduler_field_is_refused_naming_its_owner(tmp_path, backend, field, owner):
    data = scenario(backend, scheduler={field: 1})
    with pytest.raises(ScenarioError, match=rf"^engine\.workers\.aggregated\.scheduler\.{field}: {owner} only; "
                                            rf"engine\.backend is {backend}$"):
        parse_scenario(data, tmp_path)


def test_a_capacity_too_small_for_one_request_is_named_in_the_backends_unit(tmp_path):
    # Llama-3.1-8B at context_length 4,096 with 16-token blocks: vLLM needs 256 blocks, SGLang 257 pages (above).
    for backend, blocks, unit, needed in (("vllm", 255, "blocks", 256), ("sglang", 256, "pages", 257)):
        data = scenario(backend, kv_cache={"capacity": {"type": "fixed", "blocks": blocks}})
        with pytest.raises(ScenarioError, match=rf"a rank has {blocks} KV {unit} of 16 tokens but one request at "
                                                rf"context_length 4096 needs {needed};"):
            parse_scenario(data, tmp_path)


@pytest.mark.parametrize(("worker", "engine", "message"), [
    ({"scheduler": {"capacity_policy": "fcfs"}}, {},
     r"^engine\.workers\.aggregated\.scheduler\.capacity_policy: must be one of guaranteed_no_evict, "
     r"max_utilization, static_batch, got 'fcfs'$"),
    ({"scheduler": {"chunk_unit": 0}}, {},
     r"^engine\.workers\.aggregated\.scheduler\.chunk_unit: must be a positive integer, got 0$"),
    ({"scheduler": {"max_batched_tokens": 2048}}, {"enable_chunked_prefill": False},
     r"^engine\.workers\.aggregated\.scheduler\.max_batched_tokens: with enable_chunked_prefill false "
     r"\(TensorRT-LLM's enable_chunked_context\) a whole prompt must fit one pass, so it must be >= "
     r"context_length \(4096\); got 2048$"),
    # (make_scenario's blocks are of 16 tokens)
    ({"scheduler": {"max_batched_tokens": 12}}, {},
     r"^engine\.workers\.aggregated\.scheduler\.max_batched_tokens: TensorRT-LLM cuts a prompt chunk to whole "
     r"units of 16 tokens \(scheduler\.chunk_unit, else kv_cache\.block_size\), so a pass must hold one; got 12$"),
    ({"scheduler": {"max_batched_tokens": 24, "chunk_unit": 32}}, {},
     r"units of 32 tokens .* got 24$"),
    ({"scheduler": {"chunk_unit": 24}}, {},
     r"^engine\.workers\.aggregated\.scheduler\.chunk_unit: a chunk ends on a KV block boundary, so it must be a "
     r"multiple of kv_cache\.block_size \(16\), or 1 to cut anywhere as Dynamo's mocker does; got 24$"),
    ({"scheduler": {"chunk_unit": 1, "max_batched_tokens": 8192}}, {"enable_chunked_prefill": False, "context_length": 8192},
     r"^engine\.workers\.aggregated\.scheduler\.chunk_unit: only cuts chunks of prompts, and "
     r"enable_chunked_prefill is false; remove it$"),
    ({"scheduler": {"client_max_tokens": 0}}, {},
     r"^engine\.workers\.aggregated\.scheduler\.client_max_tokens: must be output, context_length or a positive "
     r"number of tokens, got 0$"),
    ({"scheduler": {"client_max_tokens": "all"}}, {}, r"client_max_tokens: must be output, .* got 'all'$"),
    ({"kv_cache": {"host_offload": {"capacity_gib": 4}}}, {},
     r"^engine\.workers\.aggregated\.kv_cache\.host_offload: a host KV tier is not yet modeled for backend "
     r"trtllm"),
    ({}, {"speculation": {"kind": "ngram", "num_speculative_tokens": 2, "acceptance_rates": [0.5, 0.5]}},
     r"^engine\.speculation: speculative decoding is not yet modeled for backend trtllm$"),
])
def test_trtllm_knobs_and_what_it_does_not_model_are_checked(tmp_path, worker, engine, message):
    data = scenario("trtllm", **worker)
    data["engine"].update(engine)
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(data, tmp_path)


def test_trtllm_defaults(tmp_path):
    # 32-token blocks, guaranteed_no_evict, a truncated chunk cut to whole blocks (chunk_unit None: the block size),
    # planned synchronously, TensorRT-LLM's max_batch_size of 2048 sequences.
    data = scenario("trtllm")
    del data["engine"]["workers"]["aggregated"]["kv_cache"]["block_size"]  # (make_scenario's 16)
    role = parse_scenario(data, tmp_path).engine.workers["aggregated"]
    assert role.scheduler.trtllm.capacity_policy == "guaranteed_no_evict"
    assert role.scheduler.trtllm.chunk_unit is None and not role.scheduler.async_scheduling
    assert (role.scheduler.max_sequences, role.scheduler.max_batched_tokens, role.kv_cache.block_size) == (2048, 8192, 32)
    assert role.scheduler.trtllm.client_max_tokens == "output"
    data["engine"]["workers"]["aggregated"]["scheduler"]["capacity_policy"] = "MAX_UTILIZATION"  # (TRT-LLM's spelling)
    assert parse_scenario(data, tmp_path).engine.workers["aggregated"].scheduler.trtllm.capacity_policy == \
        "max_utilization"
    del data["engine"]["workers"]["aggregated"]["scheduler"]["capacity_policy"]
    for value in ("context_length", 512):
        data["engine"]["workers"]["aggregated"]["scheduler"]["client_max_tokens"] = value
        assert parse_scenario(data, tmp_path).engine.workers["aggregated"].scheduler.trtllm.client_max_tokens == value


def test_trtllm_default_timing_takes_its_own_kernel_constants(tmp_path):
    # The constants fitted on AIConfigurator's TensorRT-LLM kernels (roofline.ENGINE_KERNELS: 0.75 / 0.83, 1.30 ms
    # a prefill or mixed pass, 0 a decode pass, 35.9 µs a layer) instead of vLLM's (0.78 / 0.85, 0.79, 0.09, 31.5);
    # a GPU system fitted on its own (A100: ACHIEVED's 0.78 / 0.70) keeps its efficiencies; a scenario's value wins.
    def timing(backend, hardware="h100_sxm", **fields):
        data = scenario(backend, timing={"type": "default", **fields})
        data["engine"]["hardware"] = hardware
        return parse_scenario(data, tmp_path).engine.workers["aggregated"].timing

    trt, vllm = timing("trtllm"), timing("vllm")
    assert (trt.efficiency.compute, trt.efficiency.memory) == (0.75, 0.83)
    assert (trt.host.prefill_ms, trt.host.decode_ms, trt.host.mixed_ms, trt.host.per_layer_us) == (1.30, 0.0, 1.30, 35.9)
    assert (vllm.efficiency.compute, vllm.efficiency.memory, vllm.host.prefill_ms, vllm.host.decode_ms,
            vllm.host.per_layer_us) == (0.78, 0.85, 0.79, 0.09, 31.5)
    a100 = timing("trtllm", "a100_sxm")
    assert (a100.efficiency.compute, a100.efficiency.memory, a100.host.prefill_ms) == (0.78, 0.70, 1.30)
    mine = timing("trtllm", host_overhead_ms={"decode": 0.2}, compute_efficiency=0.7)
    assert (mine.host.decode_ms, mine.host.prefill_ms, mine.efficiency.compute) == (0.2, 1.30, 0.7)
