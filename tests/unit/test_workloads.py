"""Workload shapes benchmark tools generate: staged loads (rate and concurrency stages) and gamma
arrivals with vLLM's burstiness."""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_scenario, run_scenario

from simmodel.config.load import parse_scenario
from simmodel.config.schema import LoadStage
from simmodel.errors import ScenarioError
from simmodel.sim import Simulation
from simmodel.traffic.arrivals import rate_gaps, stage_arrivals


def staged(stages: list[dict], arrivals: str = "constant", **load) -> dict:
    data = make_scenario(traffic={"load": {"type": "stages", "arrivals": arrivals, "stages": stages, **load}})
    del data["traffic"]["stop"]
    return data


def test_a_constant_stage_of_r_per_second_for_d_seconds_sends_r_times_d_requests_from_its_start():
    # 2 req/s for 3 s: 0, 0.5, …, 2.5 (6 = 2·3); then 1 req/s for 2 s from 3 s: 3, 4 (2 = 1·2).
    res = run_scenario(staged([{"requests_per_second": 2, "duration_s": 3}, {"requests_per_second": 1, "duration_s": 2}]))
    assert res.requests.arrival_s.tolist() == pytest.approx([0, 0.5, 1, 1.5, 2, 2.5, 3, 4])
    assert res.requests.stage.tolist() == [0] * 6 + [1] * 2
    # 3 req/s for 0.5 s: 1.5 requests, rounded up: at 0 and 1/3
    assert list(stage_arrivals(LoadStage(0.5, requests_per_second=3), 0.0, "constant", 1.0,
                               np.random.default_rng(0))) == pytest.approx([0, 1 / 3])


def test_poisson_and_gamma_stages_start_at_the_stage_start_and_stay_inside_it():
    rng = np.random.default_rng(5)
    for kind in ("poisson", "gamma"):
        times = np.array(list(stage_arrivals(LoadStage(400.0, requests_per_second=5), 100.0, kind, 0.25, rng)))
        assert times[0] == 100.0 and times[-1] < 500.0 and np.all(np.diff(times) >= 0)
        assert len(times) == pytest.approx(5 * 400, rel=0.1)  # mean rate kept (±10 %: 2,000 draws, CV² 4)


def test_gamma_gaps_keep_the_mean_rate_and_have_variance_one_over_rate_squared_times_burstiness():
    # vLLM bench: shape = burstiness b, scale = 1 / (r·b): mean 1/r, variance b / (r·b)² = 1 / (r²·b).
    r = 4.0
    for b in (0.25, 1.0, 4.0):
        g = rate_gaps("gamma", r, b, np.random.default_rng(7), 400_000)
        assert g.mean() == pytest.approx(1 / r, rel=0.01)
        assert g.var() == pytest.approx(1 / (r * r * b), rel=0.03)


def test_gamma_load_runs_from_zero_with_its_own_seed():
    data = make_scenario(traffic={"load": {"type": "gamma", "requests_per_second": 5, "burstiness": 0.5, "seed": 3},
                                  "stop": {"requests": 6}})
    a, b = run_scenario(data), run_scenario({**data, "engine": {**data["engine"], "seed": 42}})
    assert a.requests.arrival_s.iloc[0] == 0.0
    assert a.requests.arrival_s.tolist() == b.requests.arrival_s.tolist()
    # the stream's first draw is the gap before request 0, which arrives at 0 instead: request i arrives
    # after draws 1..i of gamma(shape 0.5, scale 1 / (5 · 0.5)) from the load's seed
    draws = np.random.default_rng(3).gamma(0.5, 1 / (5 * 0.5), 1024)
    assert a.requests.arrival_s.to_numpy()[1:] == pytest.approx(np.cumsum(draws[1:6]), abs=1e-9)  # ns rounding


def test_a_concurrency_stage_keeps_its_clients_busy_until_it_ends():
    """Fixed timing, 100 → 5 tokens: a request takes one 20 ms prefill pass and four 10 ms decodes, so
    two clients' requests sent at 0 finish at 60 ms; 60 ms < 100 ms, so both send again (finishing at
    120 ms, after the stage: no more). The rate stage then sends 10/s for 0.25 s from 0.1 s: ⌈2.5⌉ = 3
    requests, at 0.1, 0.2, 0.3."""
    res = run_scenario(staged([{"concurrency": 2, "duration_s": 0.1}, {"requests_per_second": 10, "duration_s": 0.25}]))
    assert res.requests.arrival_s.tolist() == pytest.approx([0, 0, 0.06, 0.06, 0.1, 0.2, 0.3])
    assert res.requests.stage.tolist() == [0, 0, 0, 0, 1, 1, 1]
    # the second pair: prefill 60–80 ms, decodes to 90 and 100 ms; request 4 arrives at 100 ms and its
    # prefill joins their next pass (20 + 10 ms: 100–130), the last decode ends at 140: e2e 80 ms
    assert res.requests.e2e_ms.tolist()[:4] == pytest.approx([60, 60, 80, 80])
    passes = res.passes
    assert (passes.stage == (passes.start_s >= 0.1 - 1e-12).astype(int)).all()  # a pass's stage: at its start
    blocks = res.summary["stages"]
    assert [b["num_requests"] for b in blocks] == [4, 3]
    assert [(b["start_s"], b["end_s"], b["concurrency"], b["requests_per_second"]) for b in blocks] == [
        (0.0, 0.1, 2, None), (0.1, pytest.approx(0.35), None, 10.0)]
    # stage 0's intervals: 4 of 10 ms for each of the first pair; 10, 10, 30, 10 ms for the second
    assert blocks[0]["itl_ms"]["mean"] == pytest.approx((8 * 10 + 2 * (10 + 10 + 30 + 10)) / 16)
    assert blocks[0]["e2e_latency_ms"]["mean"] == pytest.approx(70.0)


def test_per_stage_itl_counts_the_stage_requests_intervals():
    data = staged([{"requests_per_second": 20, "duration_s": 1}, {"concurrency": 6, "duration_s": 1},
                   {"requests_per_second": 40, "duration_s": 0.5}], arrivals="poisson", seed=1)
    data["engine"]["workers"]["aggregated"]["timing"] = {"type": "polynomial"}
    sim = Simulation(parse_scenario(data, None))
    res = sim.run()
    counts = np.frombuffer(sim.recorder.itl_counts, dtype=np.int64)
    stages = np.frombuffer(sim.recorder.itl_stages, dtype=np.int64)
    req = res.requests
    for k in range(3):
        mine = req[req.stage == k]
        assert counts[stages == k].sum() == (mine.output_tokens - 1).clip(lower=0).sum()
    assert counts.sum() == (req.output_tokens - 1).clip(lower=0).sum()


@pytest.mark.parametrize("asynchronous", [False, True])
def test_staged_runs_are_the_same_coalesced_or_pass_by_pass(asynchronous):
    data = staged([{"requests_per_second": 30, "duration_s": 1}, {"concurrency": 8, "duration_s": 0.5},
                   {"requests_per_second": 60, "duration_s": 0.5}], arrivals="gamma", burstiness=0.3, seed=2)
    data["engine"]["workers"]["aggregated"]["scheduler"]["async_scheduling"] = asynchronous
    data["engine"]["workers"]["aggregated"]["timing"] = {"type": "polynomial"}
    fast = Simulation(parse_scenario(data, None)).run()
    slow = Simulation(parse_scenario(data, None), coalesce=False).run()
    assert fast.requests.equals(slow.requests)
    assert fast.passes.equals(slow.passes)
    for key in ("stages", "itl_ms", "ttft_ms", "num_passes"):
        assert fast.summary[key] == slow.summary[key]


@pytest.mark.parametrize(("load", "message"), [
    ({"type": "stages", "stages": []}, "traffic.load.stages: must be a list of 1 to 1000 stages"),
    ({"type": "stages", "stages": [{"requests_per_second": 1, "concurrency": 2, "duration_s": 1}]},
     "traffic.load.stages[0]: give exactly one of requests_per_second and concurrency"),
    ({"type": "stages", "stages": [{"requests_per_second": 1}]},
     "traffic.load.stages[0]: give duration_s, requests, or both"),
    ({"type": "stages", "arrivals": "fixed_count", "stages": [{"requests_per_second": 1, "requests": 3}]},
     "traffic.load.stages[0].duration_s: required by arrivals: fixed_count"),

    ({"type": "stages", "stages": [{"requests_per_second": 1, "duration_s": 1, "rate": 2}]},
     "traffic.load.stages[0]"),
    ({"type": "stages", "burstiness": 2, "stages": [{"requests_per_second": 1, "duration_s": 1}]},
     "traffic.load.burstiness: only applies to arrivals: gamma"),
    ({"type": "gamma", "requests_per_second": 1, "burstiness": 0}, "traffic.load.burstiness: must be a positive"),
])
def test_bad_staged_and_gamma_loads_name_the_field(load, message):
    data = make_scenario(traffic={"load": load})
    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_scenario(data, None)


def shared_prefix(**source) -> dict:
    return make_scenario(traffic={"source": {"type": "shared_prefix", "num_groups": 1, "prompts_per_group": 2,
                                             "system_prompt_tokens": 64, "question_tokens": 32, "output_tokens": 5,
                                             **source}, "stop": {"requests": 3}})


def test_shared_prefix_prompts_reuse_their_groups_blocks_by_hand():
    """One group of two 96-token prompts (a 64-token system prompt, then a 32-token question), 16-token
    blocks, one client: request 0 finds nothing cached; request 1 (the other prompt) finds the 4 blocks
    of the system prompt (64 tokens); request 2 repeats request 0's prompt (the pool of 2 wraps around)
    and finds it all but the last token, which vLLM always recomputes: ⌊95 / 16⌋ = 5 blocks, 80 tokens.
    Hit ratio: (0 + 64 + 80) / (3 × 96) = 0.5."""
    res = run_scenario(shared_prefix())
    assert res.requests.input_tokens.tolist() == [96, 96, 96]
    assert res.requests.cached_tokens.tolist() == [0, 64, 80]
    assert res.summary["prefix_cache_hit_ratio"] == pytest.approx(0.5)


def test_shared_prefix_groups_do_not_share_and_lengths_are_drawn_per_group_and_prompt():
    # two groups of one prompt each: different system prompts, so the second request finds nothing
    res = run_scenario(shared_prefix(num_groups=2, prompts_per_group=1))
    assert res.requests.cached_tokens.tolist()[:2] == [0, 0]
    data = shared_prefix(num_groups=3, prompts_per_group=4,
                         system_prompt_tokens={"distribution": "uniform", "min": 100, "max": 400},
                         question_tokens={"distribution": "uniform", "min": 10, "max": 20})
    data["traffic"]["stop"]["requests"] = 24
    res = run_scenario(data)
    lengths = res.requests.input_tokens.tolist()
    assert lengths[:12] == lengths[12:]  # the pool of 12 prompts, sent twice in the same shuffled order
    assert len(set(lengths[:12])) > 3  # each prompt its own question length


def test_shared_prefix_source_rules():
    with pytest.raises(ScenarioError, match="traffic.source.num_groups: must be a positive integer"):
        parse_scenario(shared_prefix(num_groups=0), None)
    with pytest.raises(ScenarioError, match="traffic.source.groups: unknown field"):
        parse_scenario(shared_prefix(groups=2), None)


def sessions(**source) -> dict:
    return make_scenario(traffic={"source": {"type": "sessions", "turns": 2, "new_input_tokens_per_turn": 64,
                                             "output_tokens_per_turn": 5, "inter_turn_delay_ms": 100, **source},
                                  "stop": {"requests": 4}})


def test_a_turn_is_the_conversation_so_far_sent_after_the_answer_and_the_delay_by_hand():
    """Fixed timing (20 ms prefill pass, 10 ms decode pass), 16-token blocks, one session at a time, two
    turns of a 64-token message and a 5-token answer, 100 ms think time:

    - session 0, turn 0: sent at 0, prefill 0–20 ms, four decodes to 60 ms;
    - turn 1 at 60 + 100 = 160 ms: 64 + 5 + 64 = 133 tokens, of which turn 0's computed tokens (its
      prompt and 4 of its 5 answer tokens: 68) hold 4 full blocks, 64 tokens, cached; prefill 160–180,
      done at 220 ms;
    - session 1 starts at 220 ms (one client): a new conversation, nothing cached; its turn 1 at
      220 + 60 + 100 = 380 ms finds its own 64 tokens.
    """
    res = run_scenario(sessions())
    req = res.requests
    assert req.arrival_s.tolist() == pytest.approx([0, 0.16, 0.22, 0.38])
    assert req.input_tokens.tolist() == [64, 133, 64, 133]
    assert req.cached_tokens.tolist() == [0, 64, 0, 64]
    assert req.session.tolist() == [0, 0, 1, 1] and req.turn.tolist() == [0, 1, 0, 1]
    assert req.e2e_ms.tolist() == pytest.approx([60, 60, 60, 60])


def test_a_shared_system_prompt_is_reused_across_sessions():
    # shared_prefix_ratio 0.5 of a 64-token first message: 32 tokens, 2 blocks every session shares
    res = run_scenario(sessions(shared_prefix_ratio=0.5))
    assert res.requests.cached_tokens.tolist() == [0, 64, 32, 64]


def test_sglang_turns_reuse_the_conversation_in_the_radix_cache():
    data = sessions()
    data["engine"]["backend"] = "sglang"
    data["engine"]["workers"]["aggregated"] = {"timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}}
    cached = run_scenario(data).requests.cached_tokens.tolist()
    # turn 1 finds at least turn 0's whole prompt (64), at most its prompt and answer (69)
    assert cached[0] == 0 and cached[2] == 0 and 64 <= cached[1] <= 69 and 64 <= cached[3] <= 69


def test_turns_never_start_before_the_previous_answer_plus_the_think_time():
    data = sessions(turns={"distribution": "uniform", "min": 1, "max": 5},
                    new_input_tokens_per_turn={"distribution": "uniform", "min": 20, "max": 400},
                    output_tokens_per_turn={"distribution": "uniform", "min": 2, "max": 50}, inter_turn_delay_ms=7)
    data["traffic"]["load"] = {"type": "poisson", "requests_per_second": 20, "seed": 4}
    data["traffic"]["stop"]["requests"] = 120
    data["engine"]["workers"]["aggregated"]["timing"] = {"type": "polynomial"}
    req = run_scenario(data).requests
    for _, turns in req.groupby("session"):
        turns = turns.sort_values("turn")
        assert turns.turn.tolist() == list(range(len(turns)))
        gaps = turns.arrival_s.to_numpy()[1:] - turns.finish_s.to_numpy()[:-1]
        assert gaps == pytest.approx(np.full(len(gaps), 0.007), abs=1e-9)
        # each prompt is the previous prompt, its answer, and a new message of 20–400 tokens
        grown = turns.input_tokens.to_numpy()[1:] - (turns.input_tokens + turns.output_tokens).to_numpy()[:-1]
        assert ((grown >= 20) & (grown <= 400)).all()


def test_max_concurrency_holds_arrivals_at_the_client_until_a_slot_frees():
    """Arrivals every 10 ms, one request in flight at most, each taking 60 ms (a 20 ms prefill pass and
    four 10 ms decodes): request 0 is sent at 0; the arrivals at 10 and 20 ms wait, and are sent as the
    slot frees, at 60 and 120 ms (their TTFT counts from then, as vllm bench measures it)."""
    data = make_scenario(traffic={"load": {"type": "constant_rate", "requests_per_second": 100,
                                           "max_concurrency": 1}, "stop": {"requests": 3}})
    req = run_scenario(data).requests
    assert req.arrival_s.tolist() == pytest.approx([0, 0.06, 0.12])
    assert req.e2e_ms.tolist() == pytest.approx([60, 60, 60])
    # without the cap the three arrive at 0, 10 and 20 ms and share passes
    del data["traffic"]["load"]["max_concurrency"]
    assert run_scenario(data).requests.arrival_s.tolist() == pytest.approx([0, 0.01, 0.02])


def test_drained_stages_with_request_caps_and_a_pause_by_hand():
    """Stage 0 sends 2 requests at 100/s (0 and 10 ms); stage 1 is one client sending 2 requests; with
    drain, stage 1 waits for stage 0's requests, then the 50 ms pause. By hand (20 ms prefill, 10 ms
    decode passes, 5 tokens each): request 0 prefills 0–20 ms; request 1 joins the next pass, which
    also decodes request 0 (20 + 10 ms: 20–50); then decodes of 10 ms: request 0 ends at 80 ms, request 1
    at 90. Stage 1 starts at 90 + 50 = 140 ms: its requests go 140–200 and 200–260 ms."""
    data = staged([{"requests_per_second": 100, "requests": 2}, {"concurrency": 1, "requests": 2}],
                  drain=True, pause_s=0.05)
    res = run_scenario(data)
    req = res.requests
    assert req.arrival_s.tolist() == pytest.approx([0, 0.01, 0.14, 0.20])
    assert req.finish_s.tolist() == pytest.approx([0.08, 0.09, 0.20, 0.26])
    assert req.stage.tolist() == [0, 0, 1, 1]
    blocks = res.summary["stages"]
    assert [(b["start_s"], b["end_s"]) for b in blocks] == [(0.0, pytest.approx(0.01)),
                                                            (pytest.approx(0.14), pytest.approx(0.20))]
    assert (res.passes.stage == (res.passes.start_s >= 0.14 - 1e-12)).all()
    # without drain, stage 1 starts when stage 0 stops sending (10 ms) plus the pause: 60 ms
    data["traffic"]["load"]["drain"] = False
    assert run_scenario(data).requests.arrival_s.tolist()[2] == pytest.approx(0.06)


def test_fixed_count_stages_spread_rate_times_duration_requests_over_the_stage():
    times = list(stage_arrivals(LoadStage(2.0, requests_per_second=5), 10.0, "fixed_count", 1.0,
                                np.random.default_rng(1)))
    assert len(times) == 10 and times[-1] == pytest.approx(12.0) and 10.0 < times[0]
    assert times == sorted(times)
    capped = list(stage_arrivals(LoadStage(2.0, 4, requests_per_second=5), 10.0, "fixed_count", 1.0,
                                 np.random.default_rng(1)))
    assert capped == times[:4]


def test_rescale_to_rate_ends_the_schedule_at_n_over_rate():
    # vllm bench serve: 20 requests at 10/s: the last is sent at exactly 20 / 10 = 2 s, the first after
    # its own gap (not at 0)
    data = make_scenario(traffic={"load": {"type": "gamma", "requests_per_second": 10, "burstiness": 0.5, "seed": 3,
                                           "rescale_to_rate": True}, "stop": {"requests": 20}})
    arrivals = run_scenario(data).requests.arrival_s.to_numpy()
    assert arrivals[-1] == pytest.approx(2.0) and arrivals[0] > 0
    draws = np.cumsum(np.random.default_rng(3).gamma(0.5, 1 / (10 * 0.5), 20))
    assert arrivals == pytest.approx(draws * 2.0 / draws[-1], abs=1e-9)


def test_rescale_to_rate_needs_a_request_count():
    data = make_scenario(traffic={"load": {"type": "poisson", "requests_per_second": 1, "rescale_to_rate": True},
                                  "stop": {"max_virtual_time_seconds": 10}})
    del data["traffic"]["stop"]["requests"]
    with pytest.raises(ScenarioError, match="traffic.load.rescale_to_rate: needs traffic.stop.requests"):
        parse_scenario(data, None)


@pytest.mark.parametrize(("load", "message"), [
    ({"type": "stages", "seed": 3, "arrivals": "constant", "stages": [{"requests_per_second": 2, "duration_s": 1}]},
     "traffic.load.seed: no stage draws random arrivals"),
    ({"type": "stages", "drain": True, "stages": [{"concurrency": 2, "duration_s": 1}]},
     "traffic.load.drain: applies between stages; there is one stage"),
])
def test_stage_knobs_without_effect_are_refused(load, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(staged([])  | {"traffic": {"source": make_scenario()["traffic"]["source"], "load": load}}, None)


def test_sessions_refuse_a_client_cap_under_any_open_loop_load():
    data = sessions()
    data["traffic"]["load"] = {"type": "constant_rate", "requests_per_second": 5, "max_concurrency": 1}
    with pytest.raises(ScenarioError, match="traffic.load.max_concurrency: not with sessions"):
        parse_scenario(data, None)


def test_a_stage_block_keeps_its_target_duration_beside_the_measured_one():
    res = run_scenario(staged([{"requests_per_second": 10, "duration_s": 0.5}]))
    block = res.summary["stages"][0]
    assert block["target_duration_s"] == 0.5 and block["duration_s"] != 0.5
