"""Routers that read the pool (``router.type``): hand-derived decisions on a three-request trace, and the same
outputs planned in runs as pass by pass.

The trace (Mooncake format, 16-token hash blocks = the KV block size, so block j of a prompt is keyed by its
first j + 1 hash ids), on two workers with fixed 20 ms prefill / 10 ms decode passes (a mixed pass 30 ms),
prefix caching on, 1,000 blocks a worker:

- R0 at 0 ms: 64 tokens (4 blocks, hashes 1 2 3 4), 50 outputs;
- R1 at 105 ms: 64 tokens (hashes 1 2 3 5: its first 3 blocks are R0's), 2 outputs;
- R2 at 205 ms: 32 tokens (hashes 9 10), 2 outputs.

Arrivals fall between pass ends (worker passes end at multiples of 10 ms), so no tie of instants decides
anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import make_scenario, scenario_error
from test_decode_runs import assert_same, pool_state, with_async

from simmodel.config.load import parse_scenario
from simmodel.routing.routers import KvAware
from simmodel.sim import Simulation

ROWS = [(0, 64, 50, [1, 2, 3, 4]), (105, 64, 2, [1, 2, 3, 5]), (205, 32, 2, [9, 10])]


def mooncake(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h}) + "\n"
                            for t, i, o, h in rows))
    return path


def two_workers(trace: Path, router: dict | None, timing: dict | None = None, **role) -> dict:
    data = make_scenario(engine={"workers": {"aggregated": {
        "parallelism": {"replicas": 2}, "kv_cache": {"prefix_caching": True}, **role}}})
    if timing is not None:
        data["engine"]["workers"]["aggregated"]["timing"] = timing
    data["traffic"] = {"source": {"type": "trace", "format": "mooncake", "path": str(trace), "block_size": 16},
                       "load": {"type": "trace_timestamps"}}
    if router is not None:
        data["router"] = router
    return data


def run(data: dict, coalesce: bool = True):
    sim = Simulation(parse_scenario(data, Path(".")), coalesce=coalesce)
    return sim, sim.run()


def test_kv_aware_sends_a_shared_prefix_where_it_is_cached(tmp_path):
    """Costs (overlap_score_weight 1): w × max(0, (prefill tokens routed, not yet prefilled + prompt) / 16 −
    cached blocks) + active blocks + (prompt blocks − those leading the rank's active prompts).

    - R0: both ranks empty, cost 64/16 + 0 + 4 = 8 each; the tie goes to worker 0. Its 4 blocks are cached on
      worker 0 when its prefill is planned (t = 0); its prefill is done at 20 ms.
    - R1 at 105: worker 0 caches R0's blocks 1 2 3 (3 of R1's 4) and has R0's 4 blocks active, of which R1
      leads with 3: 1 × (64/16 − 3) + 4 + (4 − 3) = 6; worker 1: 4 + 0 + 4 = 8 → worker 0, predicting 48 cached
      tokens; vLLM finds the same 3 blocks (at most (64 − 1) // 16 of them). Worker 0's pass 100–110 is in
      flight: R1 joins the pass planned at 110, a mixed pass of 30 ms, so its first token comes at 140 (TTFT
      35 ms) and its second at 150.
    - R2 at 205: nothing cached; worker 0 has R0's 4 blocks active (R1 finished at 150): 32/16 + 4 + 2 = 8;
      worker 1: 2 + 0 + 2 = 4 → worker 1, prefilled 205–225 (TTFT 20 ms).
    """
    trace = mooncake(tmp_path / "t.jsonl", ROWS)
    sim, results = run(two_workers(trace, {"type": "kv_aware"}))
    table = results.requests.set_index("request_id")
    assert table["worker"].tolist() == [0, 0, 1]
    assert table["predicted_cached_tokens"].tolist() == [0, 48, 0]
    assert table["cached_tokens"].tolist() == [0, 48, 0]
    assert table["ttft_ms"].tolist() == pytest.approx([20.0, 35.0, 20.0])
    workers = results.summary["routing"]["aggregated"]["workers"]
    assert [(w["requests"], w["cached_tokens"], w["predicted_cached_tokens"]) for w in workers] == [(2, 48, 48),
                                                                                                    (1, 0, 0)]
    # Load over the run (0–530 ms: R0 runs 0–530, its 50th token 20 ms late for R1's mixed pass): worker 0 runs
    # R0 for 530 ms and R1 110–150 ms, and R1 waited 105–110; worker 1 runs R2 205–235.
    assert [v for w in workers for v in (w["mean_running"], w["mean_queued"])] == pytest.approx(
        [570 / 530, 5 / 530, 30 / 530, 0.0])
    # round robin sends R1 to the other worker, where nothing is cached
    _, rr = run(two_workers(trace, {"type": "round_robin"}))
    rr_table = rr.requests.set_index("request_id")
    assert rr_table["worker"].tolist() == [0, 1, 0]
    assert rr_table["cached_tokens"].tolist() == [0, 0, 0]
    assert "predicted_cached_tokens" not in rr_table
    assert rr.summary["routing"]["aggregated"]["type"] == "round_robin"


def test_kv_aware_sees_block_events_late_with_an_event_lag(tmp_path):
    """event_lag_ms 200: at 105 ms the router has not seen R0's blocks (stored at 0, seen at 200), so worker 0's
    cost for R1 is 1 × 64/16 + 4 + (4 − 3) = 9 (its active blocks are the router's own bookkeeping) against
    worker 1's 8 → worker 1, predicting and finding nothing cached."""
    trace = mooncake(tmp_path / "t.jsonl", ROWS)
    _, results = run(two_workers(trace, {"type": "kv_aware", "event_lag_ms": 200}))
    table = results.requests.set_index("request_id")
    assert table["worker"].tolist()[:2] == [0, 1]
    assert table.loc[1, "predicted_cached_tokens"] == 0
    assert table.loc[1, "cached_tokens"] == 0


@pytest.mark.parametrize(("ttl_s", "worker"), [(120.0, 0), (0.1, 1)])
def test_approximate_kv_aware_remembers_its_routes_for_ttl(tmp_path, ttl_s, worker):
    """approximate: R0's 4 blocks count as cached on worker 0 from its routing at 0 for ttl_s. With 120 s R1
    sees 3 of them (cost 6 against 8, as with events); with 0.1 s they expired at 100 ms, before R1 at 105
    (cost 9 against 8)."""
    trace = mooncake(tmp_path / "t.jsonl", ROWS)
    _, results = run(two_workers(trace, {"type": "kv_aware", "approximate": True, "ttl_s": ttl_s}))
    table = results.requests.set_index("request_id")
    assert table.loc[1, "worker"] == worker
    assert table.loc[1, "predicted_cached_tokens"] == (48 if worker == 0 else 0)


def test_least_loaded_counts_active_then_queued(tmp_path):
    """Active sequences (running or queued), ties by queued. R0 → worker 0 (both idle: lowest index). R1 at 105:
    worker 0 runs R0, worker 1 nothing → worker 1 (prefilled 105–125, its last token at 135). R2 at 205: worker 0
    still runs R0, worker 1 nothing → worker 1."""
    trace = mooncake(tmp_path / "t.jsonl", ROWS)
    _, results = run(two_workers(trace, {"type": "least_loaded"}))
    assert results.requests.set_index("request_id")["worker"].tolist() == [0, 1, 1]


def test_scored_weighs_prefix_queue_and_kv_use(tmp_path):
    """llm-d's default weights (prefix-cache 3, queue-depth 2, kv-utilization 2), 1,000 blocks a worker.

    - R0: prefix 0, queues equal (2 each), no block used (2 each): tie → worker 0.
    - R1 at 105: prefix 3 × 3/4 = 2.25 on worker 0; queues equal (nothing waits): 2 each; worker 0 holds R0's
      5 blocks (the pass planned at 100 decodes its 9th output: 64 + 9 tokens) → 2 × (1 − 5/1000) = 1.99,
      worker 1 2: 6.24 against 4 → worker 0.
    - R2 at 205: prefix 0; queues equal; R0's 6 blocks on worker 0 (its 18th output planned at 200, 64 + 17
      tokens; R1's freed blocks count as free): 2 + 2 × 0.994 = 3.988 against 4 → worker 1.
    """
    trace = mooncake(tmp_path / "t.jsonl", ROWS)
    _, results = run(two_workers(trace, {"type": "scored"}))
    table = results.requests.set_index("request_id")
    assert table["worker"].tolist() == [0, 0, 1]
    assert table["predicted_cached_tokens"].tolist() == [0, 48, 0]


def test_scored_queue_depth_alone_ties_to_the_lowest_index(tmp_path):
    """queue-depth alone: nothing ever waits here (every arrival is admitted at the next plan, before the next
    arrival), so every rank scores 1 and every request goes to worker 0."""
    trace = mooncake(tmp_path / "t.jsonl", ROWS)
    _, results = run(two_workers(trace, {"type": "scored", "weights": {"queue-depth": 1}}))
    assert results.requests["worker"].tolist() == [0, 0, 0]


def test_temperature_draws_a_softmax_over_the_costs():
    """Costs 6 and 8 at temperature 1: weights exp(0) = 1 and exp(−(8 − 6) / ((8 − 6) × 1)) = e^−1 (sum
    1.3679); a uniform draw u × 1.3679 below 1 picks the first, at or above it the second."""

    class Draw:
        def __init__(self, u):
            self.u = u

        def random(self):
            return self.u

    router = KvAware.__new__(KvAware)
    router.spec = type("Spec", (), {"temperature": 1.0})()
    for u, expected in ((0.70, 0), (0.74, 1), (0.0, 0), (0.999, 1)):
        router._rng = Draw(u)
        assert router._pick_cost([6.0, 8.0]) == expected
    router._rng = Draw(0.5)  # equal costs: uniform
    assert router._pick_cost([3.0, 3.0, 3.0]) == 1
    router._rng = None  # temperature 0: the first lowest
    assert router._pick_cost([5.0, 3.0, 3.0]) == 1


POLY = {"type": "polynomial"}


def random_rows(n: int, seed: int) -> list:
    """Conversations sharing prefixes: each of 6 conversations grows by a block or two a turn."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows, t, convo = [], 0.0, {c: [1000 * c] for c in range(6)}
    for _ in range(n):
        t += float(rng.exponential(40.0))
        c = int(rng.integers(6))
        convo[c] = convo[c] + [int(x) for x in rng.integers(10**6, size=int(rng.integers(1, 3)))]
        rows.append((round(t, 3), 16 * len(convo[c]) - int(rng.integers(0, 8)), int(rng.integers(2, 60)),
                     list(convo[c])))
    return rows


ROUTERS = [{"type": "kv_aware"}, {"type": "kv_aware", "event_lag_ms": 30}, {"type": "kv_aware", "temperature": 0.5,
                                                                         "seed": 3},
           {"type": "kv_aware", "approximate": True, "ttl_s": 1.5}, {"type": "least_loaded"}, {"type": "scored"},
           {"type": "random", "seed": 7}]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("router", ROUTERS, ids=lambda r: "-".join(str(v) for v in r.values()))
def test_runs_of_passes_change_no_routing(tmp_path, router, asynchronous):
    """80 requests of 6 growing conversations on 3 workers of 2 attention-DP ranks (polynomial timing, which
    runs of passes are priced from), 64 blocks a rank so that caches evict: planned in runs and pass by
    pass, every output and every pool's final state is the same; every request is served exactly once, and
    every block is back in its pool (context_length 1,024: a rank holds one whole request)."""
    trace = mooncake(tmp_path / "t.jsonl", random_rows(80, seed=len(str(router))))
    data = with_async(two_workers(trace, router, POLY, parallelism={"replicas": 3, "attention_data": 2},
                                  kv_cache={"prefix_caching": True, "capacity": {"type": "fixed", "blocks": 64}}),
                      asynchronous)
    data["engine"]["context_length"] = 1024
    sim_a, a = run(data)
    sim_b, b = run(data, coalesce=False)
    assert_same(a, b)
    assert pool_state(sim_a) == pool_state(sim_b)
    table = a.requests
    assert sorted(table["request_id"]) == list(range(80)) and (table["status"] == "completed").all()
    assert all(rank.pool.num_used_blocks == 0 for w in sim_a.workers for rank in w.ranks)
    assert len(set(zip(table["worker"], table["dp_rank"]))) > 1


def test_router_rules_are_checked(tmp_path):
    trace = mooncake(tmp_path / "t.jsonl", ROWS)
    base = two_workers(trace, None)

    def error(router: dict, **engine) -> str:
        data = json.loads(json.dumps(base))
        data["router"] = router
        data["engine"].update(engine)
        return scenario_error(data)

    assert "router.type: must be one of round_robin, random, least_loaded, kv_aware, scored" in error({"type": "x"})
    assert "router.seed: a least_loaded router does not read it" in error({"type": "least_loaded", "seed": 1})
    assert "router.seed: a kv_aware router draws only with temperature above 0" in error({"type": "kv_aware",
                                                                                           "seed": 1})
    assert "router.ttl_s: only read with approximate: true" in error({"type": "kv_aware", "ttl_s": 5})
    assert "router.event_lag_ms: an approximate kv_aware router reads no KV events" in error(
        {"type": "kv_aware", "approximate": True, "event_lag_ms": 5})
    assert "router.weights.foo: unknown scorer" in error({"type": "scored", "weights": {"foo": 1}})
    assert "router.weights.queue-depth: must be a positive number" in error({"type": "scored",
                                                                            "weights": {"queue-depth": 0}})
    assert "router.event_lag_ms: only the prefix-cache scorer reads KV events" in error(
        {"type": "scored", "weights": {"queue-depth": 1}, "event_lag_ms": 5})
    assert "router.weights.session-affinity: needs sessions" in error({"type": "scored",
                                                                       "weights": {"session-affinity": 1}})
    assert "router.temperature: must be a non-negative number" in error({"type": "kv_aware", "temperature": -1})
    assert "router.bogus: unknown field" in error({"type": "kv_aware", "bogus": 1})
    assert scenario_error_free(base, {"type": "kv_aware", "seed": None, "ttl_s": None})  # null is absent
    assert scenario_error_free(base, {"type": "scored", "weights": None})  # llm-d's defaults
    no_cache = json.loads(json.dumps(base))
    no_cache["engine"]["workers"]["aggregated"]["kv_cache"]["prefix_caching"] = False
    no_cache["router"] = {"type": "kv_aware"}
    assert ("router.type: a kv_aware router reads the workers' prefix caches, but "
            "engine.workers.aggregated.kv_cache.prefix_caching is false") in scenario_error(no_cache)


def role(**fields) -> dict:
    return {"parallelism": {"replicas": 2}, "timing": POLY, "scheduler": {"async_scheduling": False},
            "kv_cache": {"block_size": 16, "prefix_caching": True, "capacity": {"type": "fixed", "blocks": 64}},
            **fields}


def test_disaggregated_pools_each_take_their_own_router(tmp_path):
    """P/D with a KV-aware prefill router and a least-loaded decode router: the same outputs in runs as pass by
    pass; the routing summary has both pools (cache figures and predictions for the prefill pool only), and
    the predicted cached tokens are the prefill router's."""
    trace = mooncake(tmp_path / "t.jsonl", random_rows(60, seed=5))
    data = two_workers(trace, {"prefill": {"type": "kv_aware"}, "decode": {"type": "least_loaded"}})
    data["engine"].update(mode="disaggregated", context_length=1024,
                          workers={"prefill": role(), "decode": role()})
    _, a = run(data)
    _, b = run(data, coalesce=False)
    assert_same(a, b)
    routing = a.summary["routing"]
    assert (routing["prefill"]["type"], routing["decode"]["type"]) == ("kv_aware", "least_loaded")
    assert "cached_tokens" in routing["prefill"]["workers"][0] and "output_tokens" not in routing["prefill"]["workers"][0]
    assert "cached_tokens" not in routing["decode"]["workers"][0]
    assert "mean_queued" not in routing["prefill"]["workers"][0] and "mean_queued" in routing["decode"]["workers"][0]
    assert all(w["mean_running"] > 0 for pool in routing.values() for w in pool["workers"])
    assert sum(w["requests"] for w in routing["decode"]["workers"]) == 60
    table = a.requests
    assert (table["predicted_cached_tokens"] >= 0).all() and table["cached_tokens"].sum() > 0
    assert [w["cached_tokens"] for w in routing["prefill"]["workers"]] == [
        int(table.loc[table["prefill_worker"] == w, "cached_tokens"].sum()) for w in (0, 1)]


@pytest.mark.parametrize("router", [{"type": "least_loaded"}, {"type": "random", "seed": 2},
                                    {"type": "scored", "weights": {"queue-depth": 1, "kv-utilization": 1}}],
                         ids=lambda r: r["type"])
def test_sglang_workers_take_routers_that_do_not_read_the_cache(tmp_path, router):
    """SGLang workers (2 of 2 attention-DP ranks): the same outputs in runs as pass by pass, every request served
    once; a router reading the prefix cache is refused there."""
    trace = mooncake(tmp_path / "t.jsonl", random_rows(40, seed=9))
    data = two_workers(trace, router, POLY, parallelism={"replicas": 2, "attention_data": 2},
                       kv_cache={"prefix_caching": True, "block_size": 1, "capacity": {"type": "fixed", "blocks": 4096}})
    data["engine"].update(backend="sglang", context_length=1024)
    data["engine"]["workers"]["aggregated"]["scheduler"] = {}
    _, a = run(data)
    _, b = run(data, coalesce=False)
    assert_same(a, b)
    assert sorted(a.requests["request_id"]) == list(range(40)) and (a.requests["status"] == "completed").all()
    data["router"] = {"type": "kv_aware"}
    assert "a kv_aware router follows vLLM's KV block events" in scenario_error(data)


def test_session_affinity_keeps_a_conversation_on_its_rank():
    """Two sessions of 4 turns (a closed loop of 2 clients, both first turns sent at 0), two workers, scored by
    session-affinity and queue-depth (weight 1 each). Session 0's first turn finds both workers idle (a tie:
    worker 0) and is queued there; session 1's then finds worker 0 with the most queued (score 0) and worker 1
    with none (1): worker 1. A later turn is sent once its session's previous turn finished, so the worker of
    that turn holds none of the session's requests: its queue is the shortest or tied (queue-depth 1), and
    session-affinity adds 1 there: each conversation stays where it began."""
    data = make_scenario(engine={"workers": {"aggregated": {"parallelism": {"replicas": 2},
                                                            "kv_cache": {"prefix_caching": True}}}},
                         traffic={"source": {"type": "sessions", "turns": 4, "new_input_tokens_per_turn": 64,
                                             "output_tokens_per_turn": 5},
                                  "load": {"type": "concurrency", "concurrency": 2}, "stop": {"requests": 8}})
    data["router"] = {"type": "scored", "weights": {"session-affinity": 1, "queue-depth": 1}}
    _, results = run(data)
    table = results.requests
    by_session = table.groupby("session")["worker"].agg(["nunique", "first"])
    assert by_session["nunique"].tolist() == [1, 1]
    assert by_session["first"].tolist() == [0, 1]
    assert table["cached_tokens"].sum() > 0  # later turns reuse their conversation's blocks


def scenario_error_free(base: dict, router: dict) -> bool:
    data = json.loads(json.dumps(base))
    data["router"] = router
    parse_scenario(data, Path("."))
    return True


def test_disaggregated_routers_are_one_spec_or_one_per_pool(tmp_path):
    trace = mooncake(tmp_path / "t.jsonl", ROWS)
    data = two_workers(trace, {"prefill": {"type": "kv_aware"}, "type": "least_loaded"})
    data["engine"].update(mode="disaggregated", context_length=1024, workers={"prefill": role(), "decode": role()})
    assert ("router.type: give one router for every pool (type, …) or one per pool (prefill, decode), not both"
            in scenario_error(data))


@pytest.mark.parametrize("router", [{"type": "least_loaded"}, {"type": "random", "seed": 3}], ids=lambda r: r["type"])
def test_trtllm_workers_take_routers_that_do_not_read_the_cache(tmp_path, router):
    """TensorRT-LLM workers (2 of 2 attention-DP ranks) routed as each request arrives: the same outputs in runs as
    pass by pass, every request served once; a router reading the prefix cache is refused, naming the engine."""
    trace = mooncake(tmp_path / "t.jsonl", random_rows(40, seed=9))
    data = two_workers(trace, router, POLY, parallelism={"replicas": 2, "attention_data": 2},
                       kv_cache={"prefix_caching": True, "block_size": 16, "capacity": {"type": "fixed", "blocks": 300}})
    data["engine"].update(backend="trtllm", context_length=1024)
    data["engine"]["workers"]["aggregated"]["scheduler"] = {"max_sequences": 16}
    _, a = run(data)
    _, b = run(data, coalesce=False)
    assert_same(a, b)
    assert sorted(a.requests["request_id"]) == list(range(40)) and (a.requests["status"] == "completed").all()
    data["router"] = {"type": "kv_aware"}
    assert "TensorRT-LLM's cache events are not modelled yet" in scenario_error(data)
