"""``engine.request_overhead_ms``: the time a request spends outside the engine's passes, as a delay between
the client sending it and the engine receiving it. Timelines derived by hand with the fixed timing of
``make_scenario`` (20 ms a prefill pass, 10 ms a decode pass, synchronous scheduling)."""

from __future__ import annotations

import pytest
from factories import make_scenario, run_scenario

from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError
from simmodel.perf.roofline import REQUEST_OVERHEAD_MS


def test_an_open_loop_request_reaches_the_engine_the_overhead_later():
    """Requests at 0 and 1 s (constant rate, routed ahead), 3 tokens each, 5 ms of overhead: each reaches the
    idle engine at 5 ms after it is sent, its prefill pass ends 20 ms later (first token at 25 ms), its two
    decode passes at 35 and 45 ms: TTFT 25 ms, E2E 45 ms, as sent (without the overhead: 20 and 40)."""
    for overhead, ttft, e2e in ((5.0, 25.0, 45.0), (0.0, 20.0, 40.0)):
        data = make_scenario(engine={"request_overhead_ms": overhead},
                             traffic={"source": {"output_tokens": 3},
                                      "load": {"type": "constant_rate", "requests_per_second": 1},
                                      "stop": {"requests": 2}})
        req = run_scenario(data).requests
        assert req.arrival_s.tolist() == [0.0, 1.0]
        assert req.ttft_ms.tolist() == pytest.approx([ttft, ttft]) and req.e2e_ms.tolist() == pytest.approx([e2e, e2e])


def test_a_closed_loop_client_waits_for_the_overhead_each_time():
    """One client, 3 tokens a request, 5 ms of overhead: request 0 is sent at 0, reaches the engine at 5, has
    its first token at 25 and its last at 45; the client then sends request 1 at 45, which reaches the
    engine at 50, first token at 70, last at 90."""
    data = make_scenario(engine={"request_overhead_ms": 5.0},
                         traffic={"source": {"output_tokens": 3}, "stop": {"requests": 2}})
    req = run_scenario(data).requests
    assert req.arrival_s.tolist() == pytest.approx([0.0, 0.045])
    assert req.ttft_ms.tolist() == pytest.approx([25.0, 25.0]) and req.e2e_ms.tolist() == pytest.approx([45.0, 45.0])


def test_async_scheduling_reads_a_request_from_when_the_engine_has_it():
    """Async, 15 ms of overhead, 4 tokens a request, requests sent at 0 and 20 ms. Request 0 reaches the idle
    engine at 15: its prefill P0 runs 15–35 and its first decode P1, decided at once, 35–45. Request 1 reaches
    the engine at 35, the instant P0 ends and P2 is decided: a request the engine receives at a decision's
    instant is not read by it, so P2 is request 0's decode alone (45–55), and P3, decided when P1 ends (45),
    admits request 1 with request 0's last decode (a mixed pass, 20 + 10 ms: 55–85). Request 1's first token
    is at 85 (TTFT 65), then 95, 105, 115 (E2E 95). Reading it by when it was sent (20 ms, before the
    decision) would have put its prefill in P2: first token at 75 ms."""
    data = make_scenario(engine={"request_overhead_ms": 15.0, "workers": {"aggregated": {
        "scheduler": {"async_scheduling": True}}}},
        traffic={"source": {"output_tokens": 4}, "load": {"type": "constant_rate", "requests_per_second": 50},
                 "stop": {"requests": 2}})
    req = run_scenario(data).requests
    assert req.first_admit_s.tolist() == pytest.approx([0.015, 0.045])
    assert req.ttft_ms.tolist() == pytest.approx([35.0, 65.0]) and req.e2e_ms.tolist() == pytest.approx([85.0, 95.0])


def test_under_an_open_loop_the_engine_timeline_is_the_same_only_later():
    """A constant delay before the engine shifts every engine event by it: 200 Poisson requests on the default
    timing with async scheduling (runs of passes planned ahead through the arrivals), with and without 7 ms
    of overhead: every pass starts 7 ms later, every TTFT and E2E is 7 ms longer, every arrival the same."""
    runs = {}
    for overhead in (0.0, 7.0):
        data = make_scenario(engine={"request_overhead_ms": overhead, "workers": {"aggregated": {
            "scheduler": {"async_scheduling": True}, "timing": {"type": "default"}}}},
            traffic={"source": {"input_tokens": 500, "output_tokens": 60},
                     "load": {"type": "poisson", "requests_per_second": 20}, "stop": {"requests": 200}})
        runs[overhead] = run_scenario(data)
    base, late = runs[0.0], runs[7.0]
    assert (late.requests.arrival_s == base.requests.arrival_s).all()
    assert (late.requests.ttft_ms - base.requests.ttft_ms).tolist() == pytest.approx([7.0] * 200)
    assert (late.requests.e2e_ms - base.requests.e2e_ms).tolist() == pytest.approx([7.0] * 200)
    assert len(late.passes) == len(base.passes) > 200
    assert (late.passes.start_s - base.passes.start_s).tolist() == pytest.approx([0.007] * len(base.passes))


def test_a_cutoff_counts_requests_sent_whether_or_not_the_engine_has_them_yet():
    """10 req/s at a constant rate, 500 ms of overhead, a cutoff at 0.95 s: the clients sent 10 requests (at
    0, 0.1, …, 0.9 s). The 5 sent from 0.5 s on reach the engine after the cutoff. The 5 sent before reach
    it at 0.5, 0.6, …, 0.9 s, each alone, and take 60 ms for their 5 tokens (a 20 ms prefill, four 10 ms
    decodes): the first four finish, the one received at 0.9 s would at 0.96. The routed open loop (each
    worker takes its own arrivals ahead) and the same load through the client's cap (not routed) both count
    10 requests, 4 completed."""
    counts = []
    for cap in (None, 1000):
        load = {"type": "constant_rate", "requests_per_second": 10}
        if cap is not None:
            load["max_concurrency"] = cap
        data = make_scenario(engine={"request_overhead_ms": 500.0},
                             traffic={"load": load, "stop": {"requests": None, "max_virtual_time_seconds": 0.95}})
        req = run_scenario(data).requests
        counts.append((len(req), int((req.status == "completed").sum())))
    assert counts == [(10, 4), (10, 4)]


def test_the_waiting_queue_counts_a_request_from_when_the_engine_has_it():
    """An open loop shifted by the overhead queues the same requests for as long: the waiting figures do
    not count requests in transit."""
    figures = []
    for overhead in (0.0, 500.0):
        data = make_scenario(engine={"request_overhead_ms": overhead},
                             traffic={"load": {"type": "poisson", "requests_per_second": 40}, "stop": {"requests": 200}})
        summary = run_scenario(data).summary
        figures.append((summary["num_requests_waiting_peak"], summary["num_requests_waiting_mean"]))
    (peak0, mean0), (peak1, mean1) = figures
    assert peak1 == peak0 > 0 and mean1 == pytest.approx(mean0, rel=0.05)


@pytest.mark.parametrize("value, message", [
    (-1, "engine.request_overhead_ms: must be a non-negative number at most 3.6e+06, got -1"),
    ("5", "engine.request_overhead_ms: must be a non-negative number at most 3.6e+06, got '5'"),
    (1e7, "engine.request_overhead_ms: must be a non-negative number at most 3.6e+06, got 10000000.0"),
])
def test_bad_overheads_are_refused_by_name(value, message):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(make_scenario(engine={"request_overhead_ms": value}), None)
    assert str(err.value) == message


def _engine(data: dict):
    return parse_scenario(data, None).engine


DEFAULT = {"type": "default"}


def test_the_default_timing_brings_its_frontend_cost_and_pass_only_timings_none():
    """Nothing set: the engine's overhead is the default timing's frontend cost (REQUEST_OVERHEAD_MS); the
    fixed timing prices passes only (0). The role's ``timing.request_overhead_ms`` replaces the default,
    and ``engine.request_overhead_ms`` replaces either default."""
    aggregated = {"engine": {"workers": {"aggregated": {"timing": DEFAULT}}}}
    assert _engine(make_scenario(**aggregated)).request_overhead_ms == REQUEST_OVERHEAD_MS
    assert _engine(make_scenario()).request_overhead_ms == 0.0
    own = {"engine": {"workers": {"aggregated": {"timing": {**DEFAULT, "request_overhead_ms": 7.5}}}}}
    assert _engine(make_scenario(**own)).request_overhead_ms == 7.5
    assert _engine(make_scenario(engine={"request_overhead_ms": 3, **aggregated["engine"]})).request_overhead_ms == 3.0
    assert _engine(make_scenario(engine={"request_overhead_ms": 3})).request_overhead_ms == 3.0


def _disaggregated(prefill: dict, decode: dict, **engine) -> dict:
    data = make_scenario()
    data["engine"].update({"mode": "disaggregated", "kv_transfer": {"bandwidth_gb_per_second": 50},
                           "workers": {"prefill": {"timing": prefill}, "decode": {"timing": decode}}, **engine})
    return data


def test_requests_reach_the_prefill_role_first_so_its_timing_sets_the_cost():
    """P/D: a request arrives at a prefill worker; the decode role only ever receives handoffs."""
    assert _engine(_disaggregated({**DEFAULT, "request_overhead_ms": 4}, DEFAULT)).request_overhead_ms == 4.0
    fixed = {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}
    assert _engine(_disaggregated(fixed, DEFAULT)).request_overhead_ms == 0.0  # (a pass-only timing first)
    with pytest.raises(ScenarioError) as err:
        _engine(_disaggregated(DEFAULT, {**DEFAULT, "request_overhead_ms": 4}))
    assert str(err.value) == ("engine.workers.decode.timing.request_overhead_ms: only the role requests reach "
                              "first (prefill) sets it; set it there or as engine.request_overhead_ms")


def test_the_cost_is_set_in_one_place():
    own = {"workers": {"aggregated": {"timing": {**DEFAULT, "request_overhead_ms": 7}}}}
    with pytest.raises(ScenarioError) as err:
        _engine(make_scenario(engine={"request_overhead_ms": 3, **own}))
    assert str(err.value) == ("engine.request_overhead_ms: also set by "
                              "engine.workers.aggregated.timing.request_overhead_ms; set it in one place")
    for bad, message in ((-1, "must be a non-negative number at most 1000, got -1"),
                         (2000, "must be a non-negative number at most 1000, got 2000")):
        with pytest.raises(ScenarioError) as err:
            _engine(make_scenario(engine={"workers": {"aggregated": {"timing": {**DEFAULT, "request_overhead_ms": bad}}}}))
        assert str(err.value) == f"engine.workers.aggregated.timing.request_overhead_ms: {message}"
    with pytest.raises(ScenarioError) as err:  # a timing that prices passes only has no such field
        _engine(make_scenario(engine={"workers": {"aggregated": {"timing": {
            "type": "fixed", "prefill_ms": 20, "decode_ms": 10, "request_overhead_ms": 3}}}}))
    assert str(err.value) == ("engine.workers.aggregated.timing.request_overhead_ms: unknown field (allowed here: "
                              "decode_ms, prefill_ms, type)")


def test_sglang_has_no_measured_frontend_time_unless_the_scenario_gives_one():
    """The default frontend time was fitted on vLLM's API server; SGLang's frontend stages model its own."""
    def sglang(timing: dict):
        data = make_scenario()
        data["engine"]["backend"] = "sglang"
        data["engine"]["workers"] = {"aggregated": {"kv_cache": {"capacity": {"type": "fixed", "blocks": 100_000}},
                                                    "timing": timing}}
        return _engine(data)

    assert sglang(DEFAULT).request_overhead_ms == 0.0
    assert sglang({**DEFAULT, "request_overhead_ms": 6}).request_overhead_ms == 6.0
