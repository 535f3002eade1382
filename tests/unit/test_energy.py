"""The energy model (``simmodel.perf.energy``, ``simmodel.metrics.energy``): hand-derived joules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from factories import make_scenario, run_scenario, scenario_error

from simmodel.perf.energy import GpuPower, rank_pass_joules


def test_a_rank_pass_draws_idle_over_the_pass_and_dynamic_over_its_work():
    """700 W board, 100 W idle, 2 GPUs a rank. A 10 ms pass whose rank was busy 8 ms with 6 ms of work at
    peaks: 2 × (100 W × 10 ms + 600 W × 6 ms) = 2 × (1.0 + 3.6) J = 9.2 J. With 9 ms of work the busy
    fraction is capped at 1 (8 ms): 2 × (1.0 + 4.8) = 11.6 J."""
    power = GpuPower(700.0, 100.0, 2)
    joules = rank_pass_joules(power, np.array([10_000_000, 10_000_000]), np.array([8_000_000, 8_000_000]),
                              np.array([6_000_000, 9_000_000]))
    assert joules.tolist() == pytest.approx([9.2, 11.6], rel=1e-12)


# Llama-3.1-8B (hidden 4096, 32 layers, MLP 14336, 32 heads, 8 KV heads of 128, vocabulary 128256, untied) on
# one H100 SXM (989 TFLOP/s BF16, 3.35 TB/s), BF16. One decode token on a context of c tokens, at datasheet
# peaks (compute + memory of each kernel group):
#   weights: 32 × (4096 × 6144 + 4096 × 4096 + 3 × 4096 × 14336) = 6.979e9 params × 2 B = 13.958 GB; with
#     8 activation passes (2.1 MB): 4167.2 µs; their FLOPs 2 × 6.979e9 / 989e12 = 14.1 µs
#   LM head: 4096 × 128256 × 2 B = 1.0507 GB + fp32 logits 0.51 MB: 313.8 µs; 1.05 GFLOP: 1.1 µs
#   attention: (c + 1) × 131072 B of KV (32 layers × 2 × 8 heads × 128 × 2 B) + 0.52 MB of queries: at
#     c = 100, 4.1 µs; QK·V FLOPs 524288 per pair × 101 pairs: 0.05 µs
#   new KV, sampler (3 × 128256 × 4 B), norms (16 × 32 × 4096 × 2 B): 0.04 + 0.46 + 1.25 µs
# ≈ 4502.1 µs at c = 100 (each further token of context adds 0.04 µs).
DECODE_WORK_MS = 4.5021


def test_energy_of_a_small_run_by_hand():
    """One request of 100 → 3 tokens, fixed timing 20 ms prefill / 10 ms decode: a prefill pass (0–20 ms,
    its 100 tokens' 14 µs × 100 = 1.4 ms of FLOPs plus 4.5 ms of weights: 6.0 ms of work, under 20) then two
    decode passes (20–30, 30–40 ms) at ≈ 4.502 ms each. The worker lives 40 ms at 121.7 W; the passes add
    (700 − 121.7) W × their work."""
    results = run_scenario(make_scenario(traffic={"stop": {"requests": 1}, "source": {"output_tokens": 3}}))
    passes = results.passes
    assert passes["end_s"].tolist() == pytest.approx([0.020, 0.030, 0.040])
    work = passes["rank_work_ms"].tolist()
    assert work[1:] == pytest.approx([DECODE_WORK_MS, DECODE_WORK_MS], rel=2e-4)
    # The prefill of 100 tokens: 100 × 14.1 µs of linear FLOPs, 2.7 µs of attention FLOPs, 1.1 µs of LM head;
    # weights 4166.6 µs, activations 100 × 2.1 MB 62.6 µs, KV and queries 19.6 µs, new KV 3.9 µs, norms
    # 100 × 4.19 MB 125.2 µs, LM head 313.8 µs, sampler 0.5 µs: 6106 µs.
    assert work[0] == pytest.approx(6.106, rel=0.005)
    s = results.summary
    idle = 121.7 * 0.040
    joules = idle + 578.3 * sum(w / 1000 for w in work)
    assert joules == pytest.approx(4.868 + 578.3 * (0.006106 + 2 * 0.0045021), rel=1e-3)  # 13.606 J (docs/energy.md)
    assert s["energy_kwh"] == pytest.approx(joules / 3.6e6, rel=1e-9)
    assert s["energy_j_per_request"] == pytest.approx(joules, rel=1e-9)
    assert s["energy_j_per_output_token"] == pytest.approx(joules / 3, rel=1e-9)
    assert s["avg_power_w_per_gpu"] == pytest.approx(joules / 0.040, rel=1e-9)
    assert s["output_tokens_per_joule"] == pytest.approx(3 / joules, rel=1e-9)
    assert s["roles"]["aggregated"]["energy_kwh"] == s["energy_kwh"]
    # Per pass: idle over the pass and dynamic over its work, for the rank's one GPU.
    durations = [0.020, 0.010, 0.010]
    expected = [121.7 * d + 578.3 * w / 1000 for d, w in zip(durations, work)]
    assert passes["energy_j"].tolist() == pytest.approx(expected, rel=1e-9)
    assert math.fsum(passes["energy_j"]) == pytest.approx(joules, rel=1e-9)  # (no idle gap between passes)
    assert s["cost_per_million_tokens"] is None


def test_a_pass_with_more_work_than_time_draws_the_board_power():
    """Two workers of TP 2, each sent one request of 1000 → 1 tokens at 0 (round robin), fixed 10 ms passes.
    Per GPU, the prefill's work at peaks is 11.43 ms: linear FLOPs 2 × 6.979e9 / 2 × 1000 / 989e12 = 7.057 ms,
    its weight shard and activations (6.979 + 2.097 GB) 2.709 ms, norms (16 passes, 4.19 GB) 1.252 ms,
    attention 0.133 + 0.098 ms, LM head 0.158 ms, new KV 0.020 ms. That is more than the 10 ms pass, so both
    GPUs of each rank draw the full 700 W for it: 4 GPUs × 700 W × 10 ms = 28 J, 700 W on average."""
    scenario = make_scenario(
        traffic={"stop": {"requests": 2}, "source": {"input_tokens": 1000, "output_tokens": 1},
                 "load": {"type": "concurrency", "concurrency": 2}},
        engine={"workers": {"aggregated": {"parallelism": {"replicas": 2, "tensor": 2},
                                           "timing": {"type": "fixed", "prefill_ms": 10, "decode_ms": 10}}}},
        evaluation={"gpu_hour_price": 2.0})
    results = run_scenario(scenario)
    s = results.summary
    assert results.passes["rank_work_ms"].tolist() == pytest.approx([11.43, 11.43], rel=0.01)
    assert s["energy_kwh"] * 3.6e6 == pytest.approx(28.0, rel=1e-9)
    assert s["avg_power_w_per_gpu"] == pytest.approx(700.0, rel=1e-9)
    assert results.passes["energy_j"].tolist() == pytest.approx([14.0, 14.0], rel=1e-9)
    # 4 GPUs for 10 ms at 2.0 an hour, over 2 output tokens: 4 × 0.01 / 3600 × 2.0 / 2e-6.
    assert s["cost_per_million_tokens"] == pytest.approx(4 * 0.010 / 3600 * 2.0 / 2e-6, rel=1e-9)


def test_a_system_file_without_power_has_no_energy_figures(tmp_path):
    from simmodel.perf.hardware import HARDWARE, HARDWARE_FIELDS

    h100 = HARDWARE["h100_sxm"]
    path = tmp_path / "gpu.yaml"
    path.write_text("".join(f"{f}: {getattr(h100, f)}\n" for f in HARDWARE_FIELDS
                            if f not in ("system_id", "board_power_w", "idle_power_w") and getattr(h100, f) is not None))
    results = run_scenario(make_scenario(engine={"hardware": str(path)}, traffic={"stop": {"requests": 1}}))
    s = results.summary
    assert s["energy_kwh"] is None and s["avg_power_w_per_gpu"] is None and s["energy_j_per_output_token"] is None
    assert "energy_j" not in results.passes


def test_gpu_hour_price_must_be_positive():
    message = scenario_error(make_scenario(evaluation={"gpu_hour_price": 0}))
    assert "evaluation.gpu_hour_price: must be a positive number" in message


@pytest.mark.parametrize(("model", "tensor"), [("meta-llama/Llama-3.1-8B-Instruct", 1),
                                               ("meta-llama/Llama-3.1-70B-Instruct", 4)])
def test_a_dense_models_work_is_its_roofline_work_read_as_affine_terms(model, tensor):
    """``PassEnergy.work_ns`` of a dense model (one product of the sums with terms read off the model) equals
    the roofline's own FLOP and byte times (``work_seconds``) on random passes, idle rows included."""
    from simmodel.perf.deployment import Deployment
    from simmodel.perf.energy import PassEnergy
    from simmodel.perf.hardware import HARDWARE
    from simmodel.perf.models import MODELS
    from simmodel.perf.roofline import Efficiency, RooflineTiming
    from simmodel.perf.timing import PassBatch, pass_sums

    deployment = Deployment(MODELS[model], HARDWARE["h100_sxm"], tensor=tensor)
    energy = PassEnergy(deployment)
    rng = np.random.default_rng(0)
    n = 200
    rank = np.sort(rng.integers(0, 40, n))
    decode = rng.random(n) < 0.7
    new = np.where(decode, 1, rng.integers(1, 4000, n))
    batch = PassBatch(40, rank, new, rng.integers(0, 30000, n), decode, rng.random(n) < 0.8, np.full(40, 1e6))
    sums = pass_sums(batch)
    compute, memory = RooflineTiming(deployment, Efficiency(1.0, 1.0, expert=1.0)).work_seconds(sums)
    expected = np.rint((compute + memory) * 1e9)
    assert np.abs(energy.work_ns(sums) - expected).max() <= 1  # (float rounding of one ns at most)
    assert (energy.work_ns(sums)[np.bincount(rank, minlength=40) == 0] == 0).all()


def test_a_pass_of_a_few_ranks_gets_the_nanoseconds_of_many_rows():
    """``work_ns`` finishes a few rows (``FEW_ROWS``) as Python floats and more as arrays: every row of 2,000 random
    ones (idle, decode-only, prefill-only and mixed, sampling or not), priced alone and in a few, gets exactly the
    nanoseconds it gets among all of them."""
    from simmodel.perf.deployment import Deployment
    from simmodel.perf.energy import FEW_ROWS, PassEnergy
    from simmodel.perf.hardware import HARDWARE
    from simmodel.perf.models import MODELS
    from simmodel.perf.timing import PassSums

    energy = PassEnergy(Deployment(MODELS["meta-llama/Llama-3.1-8B-Instruct"], HARDWARE["h100_sxm"], tensor=1))
    rng = np.random.default_rng(7)
    n = 2000
    table = rng.integers(0, 5000, (n, 10)).astype(np.float64)
    table[rng.random((n, 10)) < 0.4] = 0.0  # (many columns zero: rows with no new token, or none sampled)
    table[: n // 10] = 0.0
    rng.shuffle(table)
    whole = energy.work_ns(PassSums(table, np.full(n, 1e6), n))
    assert FEW_ROWS < n and (whole == 0).sum() >= n // 10
    for lo in range(0, n, FEW_ROWS):
        part = table[lo:lo + FEW_ROWS]
        assert energy.work_ns(PassSums(part, np.full(len(part), 1e6), len(part))).tolist() == whole[lo:lo + FEW_ROWS].tolist()
    alone = [energy.work_ns(PassSums(table[i:i + 1], np.full(1, 1e6), 1))[0] for i in range(n)]
    assert alone == whole.tolist()
