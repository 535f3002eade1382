"""Stepping tells the truth: a coalesced simulation (the default) paused by ``step()`` or ``run(until=...)``
shows, at every pause, the requests, queues, KV pools and event log of the pass-by-pass simulation
(``coalesce=False``) run to the same instant, and nothing stamped after ``now``.

Random small scenarios (seeded numpy draws over a fixed list of seeds, so a failure names its seed): vLLM
synchronous and async, prefix caching on and off, one worker, 2 replicas, attention_data 2, 1P1D
disaggregated, SGLang; tight KV (preemptions in a few) and loose; open and closed loop.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from factories import make_scenario, make_sglang_scenario, simpy_events_to_end

from simmodel import Simulation
from simmodel.config.load import parse_scenario
from simmodel.engine.request import Request
from simmodel.metrics.records import EventKind

DEPLOYMENTS = ("one worker, sync", "one worker, async", "replicas 2", "attention_data 2", "disaggregated", "sglang",
               "trtllm")
SEEDS = range(28)  # four of each deployment

REFERENCES = ("client", "prefill_leg")
"""Request fields that hold another request: compared by its id."""
OPAQUE = ("on_finish", "source", "block_keys", "prompt_segments")
"""Request fields that hold callables or content keys: compared by whether they are set."""


def random_scenario(seed: int) -> dict:
    """A small scenario of the deployment ``seed`` picks, its knobs drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    deployment = DEPLOYMENTS[seed % len(DEPLOYMENTS)]
    context = int(rng.integers(128, 512))
    one_worker = deployment.startswith("one worker")
    open_loop = (seed // 12) % 2 == 0 if one_worker else rng.random() < 0.7  # one worker: each way twice
    load = ({"type": "poisson", "requests_per_second": float(rng.uniform(20, 300))} if open_loop
            else {"type": "concurrency", "concurrency": int(rng.integers(1, 8))})
    source = {"type": "synthetic",
              "input_tokens": {"distribution": "uniform", "min": 1, "max": context - 1},
              "output_tokens": {"distribution": "uniform", "min": 1, "max": 40}}
    if rng.random() < 0.5:  # prompts sharing a prefix: prefix caching finds hits
        source["shared_prefix"] = {"tokens": int(rng.integers(16, 96)), "groups": 2}
    traffic = {"source": source, "load": load, "stop": {"requests": int(rng.integers(10, 40))}}
    timing = [{"type": "fixed", "prefill_ms": int(rng.choice([0, 5, 20])), "decode_ms": 3},
              {"type": "polynomial"}][int(rng.integers(2))]
    if deployment == "sglang":
        data = make_sglang_scenario(traffic=traffic, engine={"seed": seed, "context_length": context})
        data["engine"]["workers"]["aggregated"]["kv_cache"]["capacity"]["blocks"] = int(rng.integers(context, 8 * context))
        data["traffic"]["source"] = source
        return data

    if deployment == "trtllm":  # each capacity policy, block reuse off and on, a chunk unit of 16 or 1
        data = make_scenario(traffic=traffic, engine={"seed": seed, "context_length": context, "backend": "trtllm"})
        blocks = -(-context // 16)
        data["engine"]["workers"]["aggregated"] = {
            "scheduler": {"max_sequences": int(rng.integers(2, 16)), "chunk_unit": int(rng.choice([1, 16])),
                          "capacity_policy": str(rng.choice(["guaranteed_no_evict", "max_utilization",
                                                             "static_batch"]))},
            "kv_cache": {"block_size": 16, "prefix_caching": bool(rng.random() < 0.5),
                         "capacity": {"type": "fixed", "blocks": int(rng.integers(blocks, 6 * blocks))}},
            "timing": timing}
        data["traffic"]["source"] = source
        return data

    if one_worker:  # sync and async each with prefix caching off and on, open and closed loop
        async_scheduling, prefix_caching = deployment.endswith("async"), (seed // 6) % 2 == 1
    else:
        async_scheduling, prefix_caching = bool(rng.random() < 0.5), bool(rng.random() < 0.5)

    def role() -> dict:
        blocks = -(-context // 16)
        return {"parallelism": {"replicas": 2 if deployment == "replicas 2" else 1,
                                "attention_data": 2 if deployment == "attention_data 2" else 1},
                "scheduler": {"async_scheduling": async_scheduling, "max_sequences": int(rng.integers(2, 16))},
                "kv_cache": {"block_size": 16, "prefix_caching": prefix_caching,
                             "capacity": {"type": "fixed", "blocks": int(rng.integers(blocks, 6 * blocks))}},
                "timing": timing}
    data = make_scenario(traffic=traffic, engine={"seed": seed, "context_length": context})
    if deployment == "disaggregated":
        data["engine"].update({"mode": "disaggregated", "workers": {"prefill": role(), "decode": role()},
                               "kv_transfer": {"bandwidth_gb_per_second": float(rng.uniform(1, 50)),
                                               "bytes_per_token": 131072}})
    else:
        data["engine"]["workers"]["aggregated"] = role()
    data["traffic"]["source"] = source  # not merged into the factory's synthetic defaults
    return data


def request_state(request: Request) -> dict:
    state = {}
    for name in Request.__slots__:
        value = getattr(request, name, None)
        if name in REFERENCES:
            value = None if value is None else value.request_id
        elif name in OPAQUE:
            value = value is not None
        state[name] = value
    return state


def pool_state(pool) -> tuple:
    """A KV pool's blocks in use and free (SGLang's radix pool: token slots free, and cached but evictable),
    and its prefix-cache lookups and hits."""
    cache = getattr(pool, "cache", None)
    free = (cache.num_free, cache.num_evictable) if cache is not None else pool.num_free_blocks
    return pool.num_used_blocks, free, getattr(pool, "num_queries", None), getattr(pool, "num_hits", None)


def observable(sim: Simulation) -> dict:
    """What a user sees while paused: every request's fields, each rank's queues and KV pool, the event log."""
    return {
        "now": sim.now,
        "requests": [request_state(r) for r in sim.requests],
        "ranks": [(w.role, w.worker_id, rank.rank_id, [r.request_id for r in rank.running],
                   [r.request_id for r in rank.waiting], *pool_state(rank.pool))
                  for w in sim.workers for rank in w.ranks],
        # what ``sim.events`` shows (in time order, stable for ties), without building the table
        "events": sorted((e for e in sim.recorder.events if e.time_ns <= sim.env.now), key=lambda e: e.time_ns),
    }


def first_difference(seen: dict, expected: dict) -> str:
    """Where two ``observable`` states first differ, for the failure message."""
    for key, value in seen.items():
        if value != expected[key]:
            if isinstance(value, list) and len(value) == len(expected[key]):
                i, a, b = next((i, a, b) for i, (a, b) in enumerate(zip(value, expected[key])) if a != b)
                if isinstance(a, dict):
                    a, b = ({k: d[k] for k in d if a[k] != b[k]} for d in (a, b))
                return f"{key}[{i}]: {a} (pass by pass: {b})"
            return f"{key}: {len(value)} rows (pass by pass: {len(expected[key])})"
    return "none"


def assert_nothing_ahead(sim: Simulation) -> None:
    """No request, token or event-log row after ``now``. The raw log may hold one thing ahead: with async
    scheduling, the ``pass_begin`` of the pass already committed to run after the one in flight (it is
    logged when committed, stamped with its start; ``Simulation.events`` leaves it out until then)."""
    now = sim.env.now
    for r in sim.requests:
        assert r.arrived_at <= now, f"request {r.request_id} arrives at {r.arrived_at} ns, after now ({now} ns)"
        for name in ("first_admitted_at", "first_token_at", "last_token_at", "finished_at"):
            at = getattr(r, name)
            assert at is None or at <= now, f"request {r.request_id}'s {name} {at} ns is after now ({now} ns)"
    ahead = [e for e in sim.recorder.events if e.time_ns > now]
    assert all(e.kind is EventKind.PASS_BEGIN for e in ahead), ahead[:3]
    assert len({(e.role, e.worker, e.dp_rank) for e in ahead}) == len(ahead), ahead  # one per rank at most


def pause(sim: Simulation, rng: np.random.Generator) -> None:
    """Step (to the next change, or to the next pass boundary) or run a random while."""
    way = rng.integers(3)
    if way == 0:
        sim.step()
    elif way == 1:
        sim.step(passes=True)
    else:
        sim.run(until=sim.now + float(rng.exponential(0.02)))


@pytest.mark.parametrize("seed", SEEDS)
def test_every_pause_equals_the_pass_by_pass_simulation_at_that_instant(seed):
    data = random_scenario(seed)
    stepped = Simulation(parse_scenario(data, Path(".")))
    reference = Simulation(parse_scenario(data, Path(".")), coalesce=False)
    rng = np.random.default_rng([seed, 1])
    pauses = 0
    while not stepped.finished and pauses < 60:
        pause(stepped, rng)
        reference.run(until=stepped.now)
        assert_nothing_ahead(stepped)
        if pauses % 8 == 0:  # the log as a table (slow to build: not at every pause)
            assert len(stepped.events) == len(observable(stepped)["events"])
            assert (stepped.events.time_s <= stepped.now).all()
        seen, expected = observable(stepped), observable(reference)
        assert seen == expected, f"seed {seed}, pause {pauses} at {stepped.now} s: {first_difference(seen, expected)}"
        pauses += 1
    assert pauses > 3  # the run was paused inside, not only at its end
    # and pausing changed nothing: both end with the same outputs
    results = [stepped.run(), reference.run()]
    for name in ("requests", "passes", "events"):
        assert getattr(results[0], name).equals(getattr(results[1], name)), name


def test_the_default_simulation_coalesces_in_these_scenarios():
    """The comparison above is worth something only where the default simulation takes coalesced runs
    (several passes in one SimPy event): run to the end unpaused, it processes fewer events than the
    pass-by-pass simulation in many of these scenarios."""
    fewer = 0
    for seed in SEEDS:
        data = random_scenario(seed)
        default, by_pass = (simpy_events_to_end(Simulation(parse_scenario(data, Path(".")), coalesce=c))
                            for c in (True, False))
        assert default <= by_pass
        fewer += default < by_pass
    assert fewer >= len(SEEDS) // 2
