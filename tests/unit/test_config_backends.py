"""The per-backend configuration rules (``simmodel.config.backends``): the table is what ``engine.backend``
accepts, and each entry's numbers are its engine's."""

from __future__ import annotations

import pytest
from factories import make_scenario

from simmodel.config import backends
from simmodel.config.backends import BACKEND_RULES, VllmRules
from simmodel.config.load import parse_scenario
from simmodel.config.schedulers import SGLANG_SCHEDULER, VLLM_SCHEDULER
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
    data = scenario("trtllm")
    with pytest.raises(ScenarioError, match=r"^engine\.backend: must be one of vllm, sglang, got 'trtllm'$"):
        parse_scenario(data, tmp_path)


@pytest.mark.parametrize(("backend", "context_length", "block_size", "needed"), [
    # vLLM allocates whole blocks: 4,096 tokens / 16 = 256 blocks; 4,097 tokens take a 257th.
    ("vllm", 4096, 16, 256),
    ("vllm", 4097, 16, 257),
    # SGLang admits the longest prompt (context − 2 tokens) while it and one more page fit: ceil((4,096 + 15) / 16)
    # = ceil(256.94) = 257 pages of 16; with pages of 1 token, 4,096.
    ("sglang", 4096, 16, 257),
    ("sglang", 4096, 1, 4096),
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
