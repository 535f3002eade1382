"""Attention-FFN disaggregation (``engine.mode: afd``, ``simmodel.perf.afd``): the pipeline's pricing by hand,
the FFN companion's GPUs and energy, and the configuration's rules."""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_scenario, run_scenario, scenario_error

from simmodel.config.load import parse_scenario
from simmodel.perf.afd import AfdLink, AfdShape, AfdTiming, attention_side, ffn_side
from simmodel.perf.deployment import Deployment
from simmodel.perf.hardware import HARDWARE
from simmodel.perf.models import MODELS
from simmodel.perf.roofline import Efficiency, HostOverhead
from simmodel.perf.timing import PassBatch, pass_sums

LLAMA = MODELS["meta-llama/Llama-3.1-8B-Instruct"]
H100 = HARDWARE["h100_sxm"]


def afd(**changes) -> dict:
    """One Llama-3.1-8B attention worker and one FFN worker on H100 (TP 1 each), one request of 100 → 3."""
    base = make_scenario(traffic={"stop": {"requests": 1}, "source": {"output_tokens": 3}})
    engine = base["engine"]
    engine["mode"] = "afd"
    engine["afd"] = {"micro_batches": 1, "link": {"bandwidth_gb_per_second": 50, "latency_ms": 0.01}}
    attention = engine["workers"].pop("aggregated")
    attention.pop("timing")
    engine["workers"] = {"attention": attention, "ffn": {"parallelism": {"tensor": 1}}}
    for key, value in changes.items():
        engine[key] = value
    return base


# One decode token of Llama-3.1-8B (hidden 4096, 32 layers, MLP 14336, 32 heads of 128, 8 KV heads, vocabulary
# 128256) on H100 at the default efficiencies (BF16 771.4 TFLOP/s, HBM 0.85 × 3.35 = 2.8475 TB/s), context 100:
# attention side, all layers: its projections' weights 32 × 41.94M × 2 B + activations 2.1 MB: 943.4 µs;
#   attention over 101 tokens of 131072 B of KV + 0.52 MB of queries: 4.83 µs; new KV 0.05 µs; norms 4.19 MB:
#   1.47 µs; the per-layer floor 32 × 31.5 = 1008 µs: a = 1957.8 / 32 = 61.18 µs a layer. Once a pass: the LM
#   head (1.0512 GB: 369.2 µs), sampling (0.54 µs) and the decode host overhead (90 µs): 459.7 µs.
# FFN side: the MLP's weights 32 × 176.16M × 2 B + activations 2.1 MB: 3960.0 µs, norms 1.47 µs (no floor):
#   f = 3961.5 / 32 = 123.80 µs a layer.
# Link: 4096 × 2 B = 8192 B each way at 50 GB/s, 0.16384 µs, plus 10 µs: c_af = c_fa = 10.16384 µs.
A_US, F_US, C_US, REST_US = 61.18, 123.80, 10.16384, 459.7


def timing(micro_batches: int, attention_per_ffn: float = 1.0, ffn_tensor: int = 1) -> AfdTiming:
    shape = AfdShape(micro_batches, 32, 4096, 1, ffn_tensor, attention_per_ffn)
    return AfdTiming(Deployment(attention_side(LLAMA), H100), Deployment(ffn_side(LLAMA), H100, tensor=ffn_tensor),
                     shape, AfdLink(50e9, 10e-6, 2.0), Efficiency(), HostOverhead())


def decode_sums(contexts: list[int]):
    n = len(contexts)
    return pass_sums(PassBatch(1, np.zeros(n, np.int64), np.ones(n, np.int64), np.array(contexts), np.ones(n, bool),
                               np.ones(n, bool), np.array([1e6])))


def test_one_micro_batch_runs_the_layers_one_after_the_other():
    """m = 1: every layer's attention, transfer, FFN and transfer back in sequence: 32 × (61.18 + 10.16 +
    123.80 + 10.16) + 459.7 = 7029.6 µs."""
    stages = timing(1).stages(decode_sums([100]))
    assert stages["a"][0] * 1e6 == pytest.approx(A_US, rel=2e-3)
    assert stages["f"][0] * 1e6 == pytest.approx(F_US, rel=2e-3)
    assert stages["c_af"][0] * 1e6 == pytest.approx(C_US, rel=1e-9)
    assert stages["c_fa"][0] * 1e6 == pytest.approx(C_US, rel=1e-9)
    assert stages["rest"][0] * 1e6 == pytest.approx(REST_US, rel=2e-3)
    seconds = timing(1).price_sums(decode_sums([100]))[0]
    assert seconds[0, 0] * 1e6 == pytest.approx(32 * (A_US + 2 * C_US + F_US) + REST_US, rel=2e-3)


def test_micro_batches_overlap_behind_the_slowest_stage():
    """m = 3 on one sequence: each micro-batch carries a third of it, but reads the weights in full, so a and f
    stay 61.0 and 123.8 µs (the attention of a third of the context is 1.6 µs less over 32 layers), c each way
    10.05 µs. The FFN is the slowest stage and covers a round trip spread over three (205 / 3 = 68 µs): the pass is
    one round trip, then 3 × 32 − 1 = 95 FFN cycles, then three LM heads (369.2 µs each: the weights read per
    micro-batch) and the host: 205.0 + 95 × 123.80 + 3 × 369.4 + 90 = 13,164 µs (against 7,030 µs with one: a
    single sequence gains nothing from the pipeline and pays the weights three times)."""
    stages = timing(3).stages(decode_sums([100]))
    a, f, c_af, c_fa, rest = (stages[k][0] * 1e6 for k in ("a", "f", "c_af", "c_fa", "rest"))
    assert f == pytest.approx(F_US, rel=2e-3) and a == pytest.approx(61.0, rel=3e-3)
    assert c_af == pytest.approx(10 + 8192 / 3 / 50e9 * 1e6, rel=1e-9)
    seconds = timing(3).price_sums(decode_sums([100]))[0][0, 0] * 1e6
    assert seconds == pytest.approx((a + c_af + f + c_fa) + 95 * f + rest, rel=1e-9)
    assert seconds == pytest.approx(13164, rel=3e-3)


def test_a_round_trip_longer_than_m_stages_sets_the_cycle():
    """A slow link (1 GB/s) and many tokens: 3000 decoding sequences in 3 micro-batches of 1000 tokens, 8.19 MB
    each way a layer: c = 10 µs + 8192 µs, far above a and f, so the cycle is the slowest stage, c."""
    t = AfdTiming(Deployment(attention_side(LLAMA), H100), Deployment(ffn_side(LLAMA), H100),
                  AfdShape(3, 32, 4096, 1, 1, 1.0), AfdLink(1e9, 10e-6, 2.0), Efficiency(), HostOverhead())
    sums = decode_sums([100] * 3000)
    st = {k: v[0] for k, v in t.stages(sums).items()}
    assert st["c_af"] == pytest.approx(10e-6 + 1000 * 8192 / 1e9, rel=1e-9)
    seconds = t.price_sums(sums)[0][0, 0]
    trip = st["a"] + st["c_af"] + st["f"] + st["c_fa"]
    assert seconds == pytest.approx(trip + 95 * st["c_af"] + st["rest"], rel=1e-9)


def test_an_ffn_worker_serves_the_tokens_of_the_attention_workers_it_is_shared_by():
    """Two attention workers per FFN worker of TP 2: the FFN micro-batch holds both workers' tokens, each FFN GPU
    receiving half of them: 2 × 1000 tokens / 2 GPUs, as many bytes as one attention GPU sends for its 1000."""
    one, shared = timing(1), timing(1, attention_per_ffn=2.0, ffn_tensor=2)
    sums = decode_sums([100] * 1000)
    assert shared.stages(sums)["c_af"][0] == pytest.approx(one.stages(sums)["c_af"][0], rel=1e-12)
    assert shared.stages(sums)["f"][0] > 0.5 * one.stages(sums)["f"][0]  # (2× the tokens on 2 GPUs, weights halved)


def test_an_afd_run_by_hand():
    """The scenario of ``afd``: its two decode passes take 7029.6 µs each (m = 1, see above); the deployment
    has 2 GPUs, the FFN role 1 with its GPU-hours over the run and its own energy."""
    results = run_scenario(afd())
    passes = results.passes
    assert passes["role"].tolist() == ["attention"] * 3
    assert (passes["rank_busy_ms"].iloc[1:] * 1000).tolist() == pytest.approx([7029.6, 7029.6], rel=2e-3)
    s = results.summary
    assert s["gpu_count"] == 2 and s["roles"]["ffn"]["gpu_count"] == 1
    assert s["roles"]["ffn"]["gpu_hours"] == pytest.approx(s["end_time_s"] / 3600, rel=1e-12)
    assert s["gpu_hours"] == pytest.approx(2 * s["end_time_s"] / 3600, rel=1e-12)
    # The FFN GPU idles at 121.7 W for the run and works, at datasheet peaks (3.35 TB/s, 989 TFLOP/s), in each
    # decode pass 11.2764 GB of MLP weights and activations (3366.1 µs), norms (1.3 µs) and 11.3 GFLOP (11.4 µs):
    # 3378.7 µs; in the prefill of 100 tokens 3366.1 + 62.0 (99 more tokens' activations) + 125.2 (norms) +
    # 1141 (FLOPs) = 4694 µs; its dynamic power is (700 − 121.7) W over that work.
    ffn_joules = 121.7 * s["end_time_s"] + 578.3 * (4.694e-3 + 2 * 3.3787e-3)
    assert s["roles"]["ffn"]["energy_kwh"] * 3.6e6 == pytest.approx(ffn_joules, rel=2e-3)


def test_the_attention_workers_hold_no_ffn_weights_so_more_kv():
    """The attention GPU holds the attention side only (0.86e9 of Llama-3.1-8B's 7.5e9 params without the MLPs),
    so the same memory fraction leaves it more KV blocks than an aggregated worker's."""
    aggregated = parse_scenario(make_scenario(engine={"workers": {"aggregated": {
        "kv_cache": {"capacity": {"type": "default"}}}}}), base_dir=__import__("pathlib").Path("."))
    data = afd()
    data["engine"]["workers"]["attention"]["kv_cache"]["capacity"] = {"type": "default"}
    split = parse_scenario(data, base_dir=__import__("pathlib").Path("."))
    saved = 32 * 176_160_768 * 2  # the MLPs' bytes
    per_block = 16 * 131072
    more = split.engine.workers["attention"].num_kv_blocks - aggregated.engine.workers["aggregated"].num_kv_blocks
    assert more == pytest.approx(saved / per_block, abs=2)


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["engine"].update(mode="aggregated", workers={"aggregated": d["engine"]["workers"]["attention"]}),
     "engine.afd: only applies to engine.mode: afd"),
    (lambda d: d["engine"]["workers"].pop("ffn"), "engine.workers.ffn: required field is missing"),
    (lambda d: d["engine"]["workers"]["ffn"]["parallelism"].update(attention_data=2),
     "engine.workers.ffn.parallelism.attention_data: an FFN worker runs no attention"),
    (lambda d: d["engine"]["workers"]["ffn"]["parallelism"].update(tensor=3),
     "engine.workers.ffn.parallelism.tensor: must divide the MLP's 14336 columns"),
    (lambda d: d["engine"]["workers"]["ffn"].update(scheduler={"max_sequences": 4}),
     "engine.workers.ffn.scheduler: unknown field"),
    (lambda d: d["engine"]["workers"]["attention"].update(timing={"type": "fixed", "prefill_ms": 1, "decode_ms": 1}),
     "engine.workers.attention.timing.type: an AFD pass is priced by the default timing"),
    (lambda d: d["engine"].update(enable_chunked_prefill=False),
     "engine.enable_chunked_prefill: false is not modeled with AFD"),
    (lambda d: d["engine"]["afd"].update(micro_batches=0), "engine.afd.micro_batches: must be a positive integer"),
    (lambda d: d["engine"]["afd"].update(dispatch_dtype="int4"), "engine.afd.dispatch_dtype: must be one of"),
    (lambda d: d["engine"]["afd"]["link"].update(bandwidth_gb_per_second=0),
     "engine.afd.link.bandwidth_gb_per_second: must be a positive number"),
    (lambda d: d["engine"]["workers"]["ffn"]["parallelism"].update(pipeline=33),
     "engine.workers.ffn.parallelism.pipeline: meta-llama/Llama-3.1-8B-Instruct has 32 layers"),
])
def test_bad_afd_configuration_is_one_line(change, message):
    data = afd()
    change(data)
    assert message in scenario_error(data)


def test_ffn_pipeline_counts_gpus_and_spreads_the_weights():
    """pipeline 2 on the FFN: 2 GPUs a worker (replicas × tensor × pipeline); the FFN of a 70B model (80 × 3 × 8192
    × 28672 × 2 B = 113 GB) fits on two H100 stages of TP 1 (56 GB each) but not on one."""
    data = afd(model="meta-llama/Llama-3.1-70B-Instruct")
    data["engine"]["workers"]["ffn"]["parallelism"] = {"tensor": 1, "pipeline": 2}
    data["engine"]["workers"]["attention"]["parallelism"] = {"tensor": 2}
    data["engine"]["context_length"] = 4096
    scenario = parse_scenario(data, base_dir=__import__("pathlib").Path("."))
    assert scenario.engine.workers["attention"].afd.ffn.gpu_count == 2
    data["engine"]["workers"]["ffn"]["parallelism"] = {"tensor": 1}
    assert "the FFN weights take 112.7 GB per GPU, more than the 80 GB" in scenario_error(data)


def test_moe_ffn_spreads_the_experts_over_a_stage():
    """Qwen3-30B-A3B's 128 experts on an FFN worker of TP 4: moe_expert 4 holds 32 experts a GPU; moe_tensor ×
    moe_expert must be the stage's 4 GPUs, and moe_expert divide the 128 experts."""
    data = afd(model="Qwen/Qwen3-30B-A3B")
    data["engine"]["workers"]["ffn"]["parallelism"] = {"tensor": 4, "moe_expert": 4}
    scenario = parse_scenario(data, base_dir=__import__("pathlib").Path("."))
    assert scenario.engine.workers["attention"].afd.ffn_deployment.moe_expert == 4
    data["engine"]["workers"]["ffn"]["parallelism"] = {"tensor": 4, "moe_expert": 2}
    assert "moe_tensor × moe_expert (1 × 2) must equal tensor (a stage's GPUs) (4)" in scenario_error(data)
    data["engine"]["workers"]["ffn"]["parallelism"] = {"tensor": 3, "moe_expert": 3}
    assert "engine.workers.ffn.parallelism.moe_expert: must divide the 128 experts" in scenario_error(data)


def test_ffn_workers_serve_or_split_whole_attention_workers():
    """Two attention workers: one FFN worker serves both, four split each one's tokens in two; three share
    nothing evenly and are refused. The replica planner, which would change the sharing, is refused."""
    data = afd()
    data["engine"]["workers"]["attention"]["parallelism"] = {"replicas": 2}
    for ffn in (1, 2, 4):
        data["engine"]["workers"]["ffn"]["parallelism"] = {"replicas": ffn}
        parse_scenario(data, base_dir=__import__("pathlib").Path("."))
    data["engine"]["workers"]["ffn"]["parallelism"] = {"replicas": 3}
    assert "engine.workers.ffn.parallelism.replicas: FFN workers either serve several attention workers each" \
        in scenario_error(data)
    data["engine"]["workers"]["ffn"]["parallelism"] = {"replicas": 1}
    data["planner"] = {"mode": "load", "pools": {"attention": {"min_replicas": 1, "max_replicas": 4}}}
    assert "planner: not modeled with engine.mode: afd" in scenario_error(data)
