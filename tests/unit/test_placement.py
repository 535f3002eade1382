"""Routers and the routes they give ahead (``engine/placement.py``), and the backend table."""

from __future__ import annotations

import pytest

from simmodel.engine.backends import BACKENDS
from simmodel.engine.backends.sglang import SglangBackend
from simmodel.engine.backends.trtllm import TrtllmBackend
from simmodel.engine.backends.vllm import VllmBackend
from simmodel.engine.placement import ArrivalRoutes, RoundRobin, prefill_leg
from simmodel.engine.request import Request


class Stub:
    """A stand-in worker: routers only hand workers back."""

    def __init__(self, name: str) -> None:
        self.name = name


def test_round_robin_takes_the_workers_in_turn():
    workers = [Stub("a"), Stub("b"), Stub("c")]
    router = RoundRobin(workers)
    assert [router.pick(None).name for _ in range(7)] == ["a", "b", "c", "a", "b", "c", "a"]


def test_routes_ahead_skip_refused_requests():
    """Requests 1 and 4 are refused before placement: they take no turn. Placed in order 0, 2, 3, 5, 6 on
    two workers: 0 → 0, 2 → 1, 3 → 0, 5 → 1, 6 → 0."""
    router = RoundRobin([Stub("a"), Stub("b")])
    routes = ArrivalRoutes(router, lambda i: i in (1, 4), limit=7)
    assert [routes.worker_index(i) for i in range(7)] == [0, -1, 1, 0, -1, 1, 0]
    assert [routes.request_of(0, p) for p in range(4)] == [0, 3, 6, None]
    assert [routes.request_of(1, p) for p in range(3)] == [2, 5, None]
    with pytest.raises(IndexError):
        routes.worker_index(7)


def test_routes_ahead_go_on_for_an_unbounded_load():
    """No request limit: routes are found chunk after chunk (1,024 at a time) as far as asked."""
    routes = ArrivalRoutes(RoundRobin([Stub("a"), Stub("b"), Stub("c")]), lambda i: False, limit=None)
    assert routes.worker_index(5000) == 5000 % 3
    assert routes.request_of(2, 2000) == 3 * 2000 + 2


def test_a_router_that_reads_state_cannot_route_ahead():
    class Reads(RoundRobin):
        reads_state = True

    with pytest.raises(ValueError, match="reads no state"):
        ArrivalRoutes(Reads([Stub("a")]), lambda i: False, limit=None)


def test_a_prefill_leg_is_a_one_token_bootstrap_of_its_client():
    client = Request(7, 123, 500, 40)
    client.prefill_dp_rank_hint = 1

    def handoff(leg: Request) -> None:
        pass

    leg = prefill_leg(client, handoff)
    assert (leg.request_id, leg.arrived_at, leg.num_prompt_tokens, leg.max_tokens) == (7, 123, 500, 1)
    assert leg.dp_rank_hint == 1 and leg.bootstrap and leg.client is client and leg.on_finish is handoff
    assert client.prefill_leg is leg and client.kv_transferred


def test_the_backend_table_names_each_engine():
    assert BACKENDS == {"vllm": VllmBackend, "sglang": SglangBackend, "trtllm": TrtllmBackend}
    # vLLM's NIXL connector and TensorRT-LLM's generation side reserve on the decode side at the transfer's start;
    # SGLang before the prefill.
    assert not VllmBackend.destination_first and not TrtllmBackend.destination_first
    assert SglangBackend.destination_first
    # vLLM's and TensorRT-LLM's arrivals go straight to the scheduler (SGLang's may pass frontend stages first).
    assert VllmBackend.routes_ahead and TrtllmBackend.routes_ahead and not SglangBackend.routes_ahead
