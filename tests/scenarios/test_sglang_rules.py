"""SGLang backend rules through the whole simulator, each timeline derived by hand.

Fixed timing throughout: a prefill (EXTEND) pass costs 20 ms, a decode pass 10 ms; SGLang's passes never
mix, and a prefill pass samples the first token. Requests come from CSV traces at their own timestamps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import _merge, make_sglang_scenario, write_csv_trace

from simmodel.config.load import parse_scenario
from simmodel.sim import Simulation


def run(tmp_path: Path, rows, **overrides):
    trace = write_csv_trace(tmp_path / "trace.csv", rows)
    data = make_sglang_scenario(**overrides)
    data["traffic"] = {"source": {"type": "trace", "path": str(trace), "format": "csv"},
                       "load": {"type": "trace_timestamps"}}
    sim = Simulation(parse_scenario(data, tmp_path))
    return sim, sim.run()


def latencies(results) -> dict[int, tuple[float, float]]:
    req = results.requests.set_index("request_id")
    return {int(i): (round(float(r.ttft_ms), 6), round(float(r.e2e_ms), 6)) for i, r in req.iterrows()}


def scheduler(**fields) -> dict:
    return {"engine": {"workers": {"aggregated": {"scheduler": fields}}}}


# -- prefill/decode interval -------------------------------------------------------------------------

# B: 50-token prompt, 6 outputs, at 0. A: 250-token prompt, 2 outputs, at 5 ms; chunk budget 100.
INTERVAL_ROWS = [(0.0, 50, 6), (0.005, 250, 2)]


def test_prefill_decode_interval_table(tmp_path: Path) -> None:
    """N = 2 reproduces the reference's table: prefill, decode, decode, prefill, ...

    round 0  t=0    prefill B          → 20  (B token 1)          blocks rounds 1, 2
    round 1  t=20   decode B           → 30  (token 2)
    round 2  t=30   decode B           → 40  (token 3)
    round 3  t=40   prefill A[0:100]   → 60                       blocks rounds 4, 5
    round 4, 5      decode B           → 70, 80 (tokens 4, 5)
    round 6  t=80   prefill A[100:200] → 100                      blocks rounds 7, 8
    round 7  t=100  decode B           → 110 (token 6: B done, E2E 110)
    round 8  t=110  blocked, nothing to decode: idle, takes no time
    round 9  t=110  prefill A[200:250] → 130 (A token 1: TTFT 130 − 5 = 125)  blocks 10, 11
    round 10 t=130  decode A           → 140 (A done: E2E 135)
    """
    _, res = run(tmp_path, INTERVAL_ROWS, **scheduler(chunked_prefill_size=100, prefill_decode_interval=2))
    assert latencies(res) == {0: (20.0, 110.0), 1: (125.0, 135.0)}
    passes = res.passes.sort_values("start_s", kind="stable")
    kinds = ["P" if p.num_prefill_seqs else "D" for p in passes.itertuples()]
    assert kinds == list("PDDPDDPDPD")


def test_without_interval_prefill_comes_first(tmp_path: Path) -> None:
    """N = 0: A's three chunks run back to back at 20–80 while B waits (prefill first); then B and A decode
    together at 80–90 (A done: TTFT 80 − 5 = 75, E2E 85) and B alone at 90–130 (E2E 130)."""
    _, res = run(tmp_path, INTERVAL_ROWS, **scheduler(chunked_prefill_size=100))
    assert latencies(res) == {0: (20.0, 130.0), 1: (75.0, 85.0)}


def test_interval_blocks_every_rank_of_the_dp_group(tmp_path: Path) -> None:
    """Two attention-DP ranks, N = 2; requests alternate ranks (R0, R2 on rank 0; R1, R3 on rank 1).

    round 0 t=0   both ranks prefill R0, R1 → 20                              blocks 1, 2
    round 1, 2    decode R0, R1 → 30, 40 (tokens 2, 3)
    round 3 t=40  rank 0 prefills R2 (arrived 5); rank 1 decodes R1 (token 4: done, E2E 60); the pass
                  lasts the slower rank's 20 ms → 60                          blocks 4, 5 on BOTH ranks
    round 4 t=60  rank 0 decodes R0 (done, E2E 70) and R2 (done: TTFT 55, E2E 65); rank 1 holds R3
                  (arrived 45) back although it ran no prefill → 70
    round 5       both idle and blocked: no time
    round 6 t=70  rank 1 prefills R3 → 90 (TTFT 45); round 7 decodes it → 100 (E2E 55)
    Were only the prefilling rank blocked, R3 would prefill in round 4 (TTFT 35).
    """
    rows = [(0.0, 50, 4), (0.0, 50, 4), (0.005, 50, 2), (0.045, 50, 2)]
    over = make_sglang_scenario(engine={"workers": {"aggregated": {
        "parallelism": {"attention_data": 2}, "scheduler": {"prefill_decode_interval": 2}}}})
    _, res = run(tmp_path, rows, engine=over["engine"])
    assert latencies(res) == {0: (20.0, 70.0), 1: (20.0, 60.0), 2: (55.0, 65.0), 3: (45.0, 55.0)}


# -- host loop ---------------------------------------------------------------------------------------

HOST_ROWS = [(0.0, 100, 5), (0.005, 100, 1)]


def test_host_loop_plans_one_iteration_ahead(tmp_path: Path) -> None:
    """Overlap loop: pass k+1 is planned when pass k−1's outputs are processed (at its end).

    pass 0 planned at 0:  prefill R0 [0, 20]
    pass 1 planned at 0:  decode R0 [20, 30] (R0 joined the batch at planning; its token is not known)
    pass 2 planned at 20: R1 (arrived 5) seen → prefill R1 [30, 50]; R0 token 1 at 20
    pass 3 planned at 30: decode R0 and R1 [50, 60]; R0 token 2 at 30
    pass 4 planned at 50: R1's token arrived at 50 (TTFT = E2E = 45), it finished: decode R0 [60, 70]
    passes 5, 6: decode R0 [70, 80], [80, 90]; R0's tokens 3, 4, 5 at 60, 70, 80 (E2E 80); pass 6 was
    planned before R0's last token was known: its slot is discarded, as is R1's in pass 3.
    """
    _, res = run(tmp_path, HOST_ROWS, engine={"workers": {"aggregated": {"host_loop": True}}})
    assert latencies(res) == {0: (20.0, 80.0), 1: (45.0, 45.0)}
    passes = res.passes.sort_values("start_s", kind="stable")
    assert len(passes) == 7
    assert list(passes.num_decode_seqs) == [0, 1, 0, 2, 1, 1, 1]
    assert list(passes.num_sampled) == [1, 1, 1, 1, 1, 1, 0]


def test_without_host_loop_arrival_joins_next_pass(tmp_path: Path) -> None:
    """Synchronous loop: R1 prefills at 20–40 (TTFT 35); R0 decodes at 40–80 (E2E 80); six passes."""
    _, res = run(tmp_path, HOST_ROWS)
    assert latencies(res) == {0: (20.0, 80.0), 1: (35.0, 35.0)}
    assert len(res.passes) == 6


# -- frontend stages ---------------------------------------------------------------------------------

def test_frontend_stage_pool_delays_the_scheduler(tmp_path: Path) -> None:
    """One stage of one worker, 5 ms per request; two requests (100 → 2) at 0 with the host loop it implies.

    R0 leaves the frontend at 5, R1 waits 5 ms and leaves at 10 (mean wait 2.5 ms, service 5 ms).
    pass 0 planned at 5: prefill R0 [5, 25]; pass 1 planned at 5: decode R0 [25, 35]
    pass 2 planned at 25 (R1 queued at 10): prefill R1 [35, 55]; R0 token 1 at 25 (TTFT from the client: 25)
    pass 3 planned at 35, R0 done (E2E 35): decode R1 [55, 65]; pass 4 planned at 55: decode R1 [65, 75]
    R1: token 1 at 55 (TTFT 55), token 2 at 65 (E2E 65).
    """
    stages = [{"name": "tokenizer", "workers": 1, "service_ms": 5}]
    sim, res = run(tmp_path, [(0.0, 100, 2), (0.0, 100, 2)],
                   engine={"workers": {"aggregated": {"frontend": {"stages": stages}}}})
    assert latencies(res) == {0: (25.0, 35.0), 1: (55.0, 65.0)}
    assert res.summary["frontend"] == [{"stage": "tokenizer", "workers": 1, "requests": 2,
                                        "mean_wait_ms": 2.5, "mean_service_ms": 5.0}]
    assert list(res.requests.sort_values("request_id").frontend_ms) == [5.0, 10.0]


def test_frontend_concurrency_scale(tmp_path: Path) -> None:
    """Two workers at 4 ms, 1.5× when both are busy: two requests at 0 leave at 4 and 6 ms."""
    stages = [{"workers": 2, "service_ms": 4, "concurrency_scale": [1.0, 1.5]}]
    _, res = run(tmp_path, [(0.0, 100, 1), (0.0, 100, 1)],
                 engine={"workers": {"aggregated": {"frontend": {"stages": stages}}}})
    assert list(res.requests.sort_values("request_id").frontend_ms) == [4.0, 6.0]


# -- disaggregated, destination-first ----------------------------------------------------------------

def disagg(backend: str = "sglang", decode_tokens: int = 100_000, latency_ms: float = 5.0) -> dict:
    kv = ({"capacity": {"type": "fixed", "blocks": decode_tokens}} if backend == "sglang"
          else {"block_size": 16, "capacity": {"type": "fixed", "blocks": 1000}})
    timing = {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}
    role = {"kv_cache": kv, "timing": timing}
    if backend == "vllm":
        role["scheduler"] = {"async_scheduling": False}
    prefill = dict(role, kv_cache=kv if backend == "vllm" else {"capacity": {"type": "fixed", "blocks": 100_000}})
    return {"engine": {"mode": "disaggregated", "backend": backend, "context_length": 300,
                       "kv_transfer": {"latency_ms": latency_ms},
                       "workers": {"prefill": prefill, "decode": role}}}


def run_disagg(tmp_path: Path, rows, data: dict):
    trace = write_csv_trace(tmp_path / "trace.csv", rows)
    base = make_sglang_scenario()
    base["engine"] = _merge({"model": base["engine"]["model"], "hardware": base["engine"]["hardware"]},
                            data["engine"])
    base["traffic"] = {"source": {"type": "trace", "path": str(trace), "format": "csv"},
                       "load": {"type": "trace_timestamps"}}
    return Simulation(parse_scenario(base, tmp_path)).run()


def test_destination_first_handoff_delivers_the_prefill_token(tmp_path: Path) -> None:
    """SGLang: the decode rank reserves at 0, the prefill runs 0–20, the KV crosses 20–25, the first decode
    pass 25–35 delivers the prefill's token and the next one together (TTFT 35, TTST 0), the last token
    at 45 (E2E 45). vLLM's source-first handoff has the same TTFT, but its first decode pass makes the
    first client token, so three tokens end at 55."""
    res = run_disagg(tmp_path, [(0.0, 100, 3)], disagg("sglang"))
    row = res.requests.iloc[0]
    assert (row.ttft_ms, row.ttst_ms, row.e2e_ms) == pytest.approx((35.0, 0.0, 45.0))
    assert (row.transfer_start_s, row.transfer_end_s) == pytest.approx((0.020, 0.025))
    vllm = run_disagg(tmp_path, [(0.0, 100, 3)], disagg("vllm")).requests.iloc[0]
    assert (vllm.ttft_ms, vllm.e2e_ms) == pytest.approx((35.0, 55.0))


def test_one_token_request_finishes_when_its_kv_arrives(tmp_path: Path) -> None:
    res = run_disagg(tmp_path, [(0.0, 100, 1)], disagg("sglang"))
    row = res.requests.iloc[0]
    assert (row.ttft_ms, row.e2e_ms) == pytest.approx((25.0, 25.0))


def test_decode_kv_back_pressure_holds_the_prefill(tmp_path: Path) -> None:
    """Decode rank of 1000 tokens; SGLang keeps R = 512 tokens free per running or incoming request.

    t=0: nothing runs, allocatable 1000. R0 (200 → 50) needs 200 + R = 712 ≤ 1000: reserved, allocatable
    288. R1 (200 → 5) needs 712 > 288: it waits, and its prefill may not start.
    R0: prefill 0–20, no link time, decode passes 20–510 (TTFT 30, E2E 510). While R0 runs, allocatable is
    1000 − (200 + k) − 512 < 712. At 510 R0 is done, R1 reserves, prefills 510–530 and decodes 530–570:
    TTFT 540, E2E 570. Source-first, R1's prefill would have run at 20–40 and held its KV there."""
    res = run_disagg(tmp_path, [(0.0, 200, 50), (0.0, 200, 5)], disagg("sglang", decode_tokens=1000, latency_ms=0))
    assert latencies(res) == {0: (30.0, 510.0), 1: (540.0, 570.0)}
    assert res.requests.set_index("request_id").loc[1, "first_admit_s"] == pytest.approx(0.510)


def test_max_prefill_tokens_exempts_the_first_request_of_a_pass(tmp_path: Path) -> None:
    """Two 100-token prompts at 0 (one output each). ``max_prefill_tokens: 50``: the first request of a pass
    is taken even above the limit (as SGLang does), the second waits: TTFT 20 and 40. Without the limit
    both prefill in one pass: 20 and 20."""
    _, res = run(tmp_path, [(0.0, 100, 1), (0.0, 100, 1)], **scheduler(max_prefill_tokens=50))
    assert latencies(res) == {0: (20.0, 20.0), 1: (40.0, 40.0)}
    _, res = run(tmp_path, [(0.0, 100, 1), (0.0, 100, 1)])
    assert latencies(res) == {0: (20.0, 20.0), 1: (20.0, 20.0)}


# -- context limit, LPM under the host loop, interval with a chunked prompt ------------------------------

def test_outputs_are_clipped_to_the_context(tmp_path: Path) -> None:
    """SGLang clips max_new_tokens to max_req_len − prompt − 1 with max_req_len = min(context_length, KV
    tokens) − 1: a 900-token prompt asking 200 tokens under context_length 1000 gets 999 − 900 − 1 = 98,
    the last at 20 + 97 × 10 = 990 ms (vLLM would stop when prompt + outputs reach 1000: 100 tokens)."""
    _, res = run(tmp_path, [(0.0, 900, 200)], engine={"context_length": 1000})
    row = res.requests.iloc[0]
    assert (row.output_tokens, row.requested_output_tokens, row.e2e_ms) == (98, 200, pytest.approx(990.0))


def test_lpm_orders_only_the_requests_the_host_loop_has_received(tmp_path: Path) -> None:
    """Host loop, LPM. R0 (128 → 10, blocks [1, 2]) at 0; R1 (128 → 2, unrelated) at 22 ms; R2 (192 → 2,
    extends R0's prompt) at 30 ms. Pass 3 is planned at 30 (the end of pass 1), when R2 has not been received
    yet: R1 is the only visible waiting request and prefills at 40–60 (TTFT 38) although R2 would sort first."""
    trace = tmp_path / "trace.jsonl"
    rows = [(0, 128, 10, [1, 2]), (22, 128, 2, [10, 11]), (30, 192, 2, [1, 2, 3])]
    trace.write_text("".join(f'{{"timestamp": {t}, "input_length": {i}, "output_length": {o}, "hash_ids": {h}}}\n'
                             for t, i, o, h in rows))
    data = make_sglang_scenario(engine={"workers": {"aggregated": {"host_loop": True,
                                                                   "scheduler": {"schedule_policy": "lpm"}}}})
    data["traffic"] = {"source": {"type": "trace", "path": str(trace), "format": "mooncake", "block_size": 64},
                       "load": {"type": "trace_timestamps"}}
    res = Simulation(parse_scenario(data, tmp_path)).run()
    assert res.requests.set_index("request_id").loc[1, "ttft_ms"] == pytest.approx(38.0)


def test_interval_decodes_between_chunks_retract_the_chunked_prompt(tmp_path: Path) -> None:
    """With prefill_decode_interval, decodes run between a prompt's chunks and may use the KV the prompt
    was admitted against (clip_max_new_tokens 1 reserves almost nothing for outputs). When a decode step
    finds no KV and only one request runs, the half-prefilled prompt is retracted (its prefix stays cached)
    instead of the run stopping."""
    _, res = run(tmp_path, [(0.0, 10, 1000), (0.001, 1000, 1)],
                 engine={"context_length": 1011, "workers": {"aggregated": {
                     "kv_cache": {"capacity": {"type": "fixed", "blocks": 1020}},
                     "scheduler": {"chunked_prefill_size": 50, "clip_max_new_tokens": 1,
                                   "prefill_decode_interval": 1}}}})
    assert res.summary["completed_requests"] == 2 and res.summary["num_retractions"] >= 1


def test_frontend_provenance_is_reported(tmp_path: Path) -> None:
    """``measured_for`` is kept with the run's results, with where the stages came from."""
    measured = {"model": "Qwen/Qwen3-VL-8B-Instruct", "frontend": "python"}
    _, res = run(tmp_path, [(0.0, 100, 1)], engine={"workers": {"aggregated": {"frontend": {
        "stages": [{"workers": 1, "service_ms": 1}], "measured_for": measured}}}})
    assert res.summary["frontend_provenance"] == {"source": "frontend", "measured_for": measured}


# -- pages (kv_cache.block_size: SGLang's --page-size) ---------------------------------------------------

def paged(page_size: int, **workers) -> dict:
    return {"engine": {"workers": {"aggregated": _merge({"kv_cache": {"block_size": page_size}}, workers)}}}


def test_pages_charge_the_chunk_budget_whole_pages(tmp_path: Path) -> None:
    """Chunk budget 40. A (30-token prompt) and B (10) arrive at 0, two outputs each.

    Page size 1: A takes 30 of the budget, B fits the 10 left: one prefill 0–20 (both TTFT 20), one decode
    20–30 (both E2E 30). Pages of 16: A is charged 2 pages (32 tokens), 8 are left, and B's one page (16)
    does not fit, nor does any whole page of it: B waits. Prefill A 0–20, prefill B 20–40 (TTFT 40), one
    decode for both 40–50 (E2E 50)."""
    rows = [(0.0, 30, 2), (0.0, 10, 2)]
    _, res = run(tmp_path, rows, **scheduler(chunked_prefill_size=40))
    assert latencies(res) == {0: (20.0, 30.0), 1: (20.0, 30.0)}
    _, res = run(tmp_path, rows, **_merge(paged(16), scheduler(chunked_prefill_size=40)))
    assert latencies(res) == {0: (20.0, 50.0), 1: (40.0, 50.0)}


def test_pages_reserve_whole_pages_at_admission(tmp_path: Path) -> None:
    """128 KV tokens, context_length 113 (with pages of 16, a rank needs ⌈(113 + 15) / 16⌉ = 8 pages); A and B
    (20-token prompts, 40 outputs) at 0.

    Page size 1: A is admitted (20 + 40 + 1 = 61 < 128), reserving 20 + 1 + 40 = 61; B's 61 < 128 − 61 = 67
    is admitted too: one prefill 0–20 (TTFT 20), 39 decodes for both 20–410 (E2E 410).
    Pages of 16 (8 pages): A's check is 20 + 40 + 16 = 76 < 128; it reserves its extend in whole pages, a
    page and its output: 32 + 16 + 40 = 88. B's 76 ≥ 128 − 88 = 40: refused, and the batch is full until A
    leaves it. A: prefill 0–20, 39 decodes to 410. B: prefill 410–430 (TTFT 430), 39 decodes to 820."""
    rows = [(0.0, 20, 40), (0.0, 20, 40)]
    one = {"engine": {"context_length": 113, "workers": {"aggregated": {
        "kv_cache": {"capacity": {"type": "fixed", "blocks": 128}}}}}}
    _, res = run(tmp_path, rows, **one)
    assert latencies(res) == {0: (20.0, 410.0), 1: (20.0, 410.0)}
    pages = _merge({"engine": {"context_length": 113}},
                   paged(16, kv_cache={"block_size": 16, "capacity": {"type": "fixed", "blocks": 8}}))
    _, res = run(tmp_path, rows, **pages)
    assert latencies(res) == {0: (20.0, 410.0), 1: (430.0, 820.0)}


def test_decode_rank_reserves_whole_pages_for_a_handoff(tmp_path: Path) -> None:
    """A decode rank of 1,232 tokens (77 pages of 16); R0 (100 → 50) and R1 (100 → 5) at 0, no link time.

    Page size 1: each needs 100 + R (512) = 612, and 612 + 612 ≤ 1,232: both are reserved at 0.
    Pages of 16: each needs 112 (7 pages) + 512 = 624; after R0, 1,232 − 624 = 608 < 624: R1 waits for R0 to
    finish (as in test_decode_kv_back_pressure_holds_the_prefill): R0 TTFT 30, E2E 510; R1 reserved at
    510, prefilled 510–530, decoded 530–570."""
    rows = [(0.0, 100, 50), (0.0, 100, 5)]
    data = disagg("sglang", decode_tokens=1232, latency_ms=0)
    res = run_disagg(tmp_path, rows, data)
    assert res.requests.set_index("request_id").loc[1, "first_admit_s"] < 0.5
    workers = data["engine"]["workers"]
    workers["decode"]["kv_cache"] = {"block_size": 16, "capacity": {"type": "fixed", "blocks": 77}}
    workers["prefill"]["kv_cache"] = {"block_size": 16, "capacity": {"type": "fixed", "blocks": 6250}}
    res = run_disagg(tmp_path, rows, data)
    assert latencies(res) == {0: (30.0, 510.0), 1: (540.0, 570.0)}
    assert res.requests.set_index("request_id").loc[1, "first_admit_s"] == pytest.approx(0.510)


# -- mixed chunks, ignore_eos, the radix cache off ---------------------------------------------------------

def test_mixed_chunk_decodes_the_running_requests_in_a_prefill_pass(tmp_path: Path) -> None:
    """A (50-token prompt, 3 outputs) at 0, B (50, 1) at 5 ms; a pass with prefill costs 20 ms and one with
    decodes 10 ms more.

    Passes never mixed: prefill A 0–20 (A's token 1), prefill B 20–40 (B done: TTFT = E2E = 35), decodes of
    A 40–50 and 50–60 (E2E 60). ``enable_mixed_chunk``: prefill A 0–20, then B's prefill with A's decode in
    one pass 20–50 (B done at 50: 45; A's token 2), A's last decode 50–60 (E2E 60)."""
    rows = [(0.0, 50, 3), (0.005, 50, 1)]
    _, res = run(tmp_path, rows)
    assert latencies(res) == {0: (20.0, 60.0), 1: (35.0, 35.0)}
    _, res = run(tmp_path, rows, **scheduler(enable_mixed_chunk=True))
    assert latencies(res) == {0: (20.0, 60.0), 1: (45.0, 45.0)}
    mixed = res.passes[(res.passes.num_prefill_seqs > 0) & (res.passes.num_decode_seqs > 0)]
    assert mixed.start_s.tolist() == [0.020]


def test_ignore_eos_reserves_a_running_requests_whole_output(tmp_path: Path) -> None:
    """170 KV tokens, context_length 150. A (20-token prompt, 100 outputs) at 0; B (60, 2) at 5 ms is tried
    at 20, after A's prefill, with A running (99 outputs left) and 170 − 20 = 150 tokens left.

    B needs 60 + 2 + 1 = 63. Without ignore_eos A is expected to need 99 × 0.7 = 69.3 (no decode has lowered
    the ratio yet): 63 < 150 − 69.3, B is admitted: prefill 20–40, A and B decode 40–50 (B done: TTFT 35,
    E2E 45), A's last token at 40 + 99 × 10 = 1030. With ``ignore_eos`` A is expected to need all 99:
    63 ≥ 150 − 99, B is refused and waits for A to leave the batch: A 20–1010, B prefill 1010–1030 (TTFT
    1025), decode 1030–1040 (E2E 1035)."""
    rows = [(0.0, 20, 100), (0.005, 60, 2)]
    kv = {"engine": {"context_length": 150, "workers": {"aggregated": {
        "kv_cache": {"capacity": {"type": "fixed", "blocks": 170}}}}}}
    _, res = run(tmp_path, rows, **kv)
    assert latencies(res) == {0: (20.0, 1030.0), 1: (35.0, 45.0)}
    _, res = run(tmp_path, rows, **_merge(kv, scheduler(ignore_eos=True)))
    assert latencies(res) == {0: (20.0, 1010.0), 1: (1025.0, 1035.0)}


def test_radix_cache_off_finds_no_prefix(tmp_path: Path) -> None:
    """Two 128-token Mooncake prompts of the same hash ids, 100 ms apart: with the radix cache the second
    finds the first's 127 tokens cached (all but the last, which is computed again); with
    ``prefix_caching: false`` (``--disable-radix-cache``) none."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(f'{{"timestamp": {t}, "input_length": 128, "output_length": 2, "hash_ids": [1, 2]}}\n'
                             for t in (0, 100)))
    data = make_sglang_scenario()
    data["traffic"] = {"source": {"type": "trace", "path": str(trace), "format": "mooncake", "block_size": 64},
                       "load": {"type": "trace_timestamps"}}
    res = Simulation(parse_scenario(data, tmp_path)).run()
    assert res.requests.sort_values("request_id").cached_tokens.tolist() == [0, 127]
    off = _merge(data, {"engine": {"workers": {"aggregated": {"kv_cache": {"prefix_caching": False}}}}})
    res = Simulation(parse_scenario(off, tmp_path)).run()
    assert res.requests.sort_values("request_id").cached_tokens.tolist() == [0, 0]
