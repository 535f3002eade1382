"""Pipeline parallelism (issue 27) as vLLM runs it: layers split over stages, each stage's weights and KV, the
fewest blocks of any stage, and batches overlapping in the stages (a queue of P batches, a request in at most
one). Expected numbers are derived by hand in each docstring (docs/research/vllm-pipeline-parallel.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_scenario, run_scenario, scenario_error, trace_scenario, write_csv_trace

from simmodel.config.load import parse_scenario
from simmodel.perf.deployment import Deployment
from simmodel.perf.hardware import HARDWARE
from simmodel.perf.models import MODELS
from simmodel.perf.pipeline import PipelineShape, PipelineStages, pipeline_shape, stage_layers, stage_memory

L405 = MODELS["meta-llama/Llama-3.1-405B-Instruct"]


def test_stage_layers_follow_get_pp_indices():
    """L // P layers each, the remainder one each to stages −2, −3, … (never the last): 126 over 2 is 63 + 63; 10
    over 4 is 2 each and 2 more for stages 2 and 1: (2, 3, 3, 2); 7 over 3: (2, 3, 2)."""
    assert stage_layers(126, 2) == (63, 63)
    assert stage_layers(10, 4) == (2, 3, 3, 2)
    assert stage_layers(7, 3) == (2, 3, 2)


def test_405b_stages_on_two_nodes():
    """Llama-3.1-405B TP 8 × PP 2, BF16: a layer is 2·16384·16384 + 2·16384·1024 attention + 3·16384·53248 MLP
    weights over 8 GPUs at 2 B, plus two norms of 16384; the first stage adds the embedding (128256 × 16384 / 8 ×
    2 B), the last the LM head and the final norm: together the whole model's bytes at TP 8 (untied). KV per token
    per GPU: 63 layers × 2 × 1 KV head × 128 × 2 B = 32,256 B. The boundary crosses the two nodes (8 GPUs each):
    the NIC, 2 × 16384 × 2 B / 8 = 8192 B a token per GPU pair."""
    d = Deployment(L405, HARDWARE["h100_sxm"], tensor=8)
    (w0, kv0), (w1, kv1) = stage_memory(d, 2)
    layer = (2 * 16384 * 16384 + 2 * 16384 * 1024 + 3 * 16384 * 53248) / 8 * 2 + 2 * 16384 * 2
    embedding = 128256 * 16384 / 8 * 2
    assert w0 == pytest.approx(63 * layer + embedding, rel=1e-12)
    assert w1 == pytest.approx(63 * layer + embedding + 16384 * 2, rel=1e-12)
    assert w0 + w1 == pytest.approx(d.weight_bytes_per_gpu, rel=1e-12)
    assert kv0 == kv1 == 32_256
    shape = pipeline_shape(d, 2, 2)
    hw = HARDWARE["h100_sxm"]
    assert shape.fractions == (0.5, 0.5) and shape.bytes_per_token == 8192
    assert shape.link_bytes_per_s == (hw.nic_bytes_per_s,)


def test_405b_pp2_runs_from_yaml():
    """The KV blocks are the fewer of the two stages': at memory_fraction 0.9, (0.9 × 80 GB − stage weights −
    1 GiB) // (16 × 32,256 B), the last stage (63 layers, the LM head and the final norm, as derived above) the
    fuller by 32 KB; the worker has 16 GPUs."""
    data = make_scenario(engine={"model": "meta-llama/Llama-3.1-405B-Instruct", "context_length": 8192,
                                 "workers": {"aggregated": {"parallelism": {"tensor": 8, "pipeline": 2},
                                                            "kv_cache": {"capacity": {"type": "default"}}}}})
    role = parse_scenario(data, Path(".")).engine.workers["aggregated"]
    budget = HARDWARE["h100_sxm"].memory_bytes * 0.9 - (1 << 30)
    layer = (2 * 16384 * 16384 + 2 * 16384 * 1024 + 3 * 16384 * 53248) / 8 * 2 + 2 * 16384 * 2
    last = 63 * layer + 128256 * 16384 / 8 * 2 + 16384 * 2
    assert role.num_kv_blocks == int((budget - last) // (16 * 32_256))
    assert role.parallelism.gpus_per_worker == 16
    assert run_scenario(data).summary["completed_requests"] == 4


def test_stages_overlap_batches():
    """Two stages of half a pass each, 1 µs a token between them (and no latency). A (20 ms, 10 tokens) from 0:
    stage 0 to 10 ms, stage 1 from 10.01 to 20.01. B (20 ms, 10 tokens) handed in at 0 starts when stage 0 frees at
    10, leaves it at 20 and, stage 1 free at 20.01 and its activations there at 20.01, ends at 30.01. C (10 ms, 1
    token) at 20.01: stage 0 to 25.01, stage 1 busy with B until 30.01: ends 35.01."""
    stages = PipelineStages(PipelineShape((0.5, 0.5), 1000.0, (1e9,), (0.0,)))
    ms = 1_000_000
    assert stages.place(stages.ready_at(0), 20 * ms, 10) == 20 * ms + 10_000
    assert stages.ready_at(0) == 10 * ms
    assert stages.place(stages.ready_at(0), 20 * ms, 10) == 30 * ms + 10_000
    start = stages.ready_at(20 * ms + 10_000)
    assert start == 20 * ms + 10_000
    assert stages.place(start, 10 * ms, 1) == 35 * ms + 10_000


def test_two_cohorts_fill_the_pipeline(tmp_path):
    """Llama-3.1-8B, TP 1 × PP 2 (one node: NVLink, 5 µs and 450 GB/s; 2 × 4096 × 2 B = 16,384 B a token), fixed
    timing 20 ms prefill / 10 ms decode, budget 100 tokens: A and B (100→3) arrive at 0. x(n) = 5 µs + n × 16,384 B
    / 450 GB/s: x(100) = 8,641 ns, x(1) = 5,036 ns. Batch 1 (A's prefill) runs stage 0 0–10, stage 1 10+x–20+x;
    batch 2 (B's prefill; A is in flight, skipped) follows at 10–20, then 20+x–30+x: TTFT 20 + x(100) and
    30 + x(100). A's first decode is planned at 20 + x(100) (queue of 2 full until then), 5 ms on stage 0, then waits
    for stage 1 until B's prefill leaves it: ends 35 + x(100). B's decode, planned at 30 + x(100): ends 40 + x(100)
    + x(1). A's last, planned at 35 + x(100): ends 45 + x(100) + x(1); B's last, planned at 40 + x(100) + x(1):
    stage 1 ready at 45 + x(100) + 2·x(1), ends 50 + x(100) + 2·x(1). Two cohorts each decode every 10 ms."""
    data = trace_scenario(write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 3), (0.0, 100, 3)]),
                          engine={"workers": {"aggregated": {"parallelism": {"pipeline": 2},
                                                             "scheduler": {"max_batched_tokens": 100, "max_sequences": 4}}}})
    res = run_scenario(data)
    x100, x1 = 8_641e-6, 5_036e-6
    assert res.requests.ttft_ms.tolist() == pytest.approx([20 + x100, 30 + x100], abs=1e-9)
    assert res.requests.e2e_ms.tolist() == pytest.approx([45 + x100 + x1, 50 + x100 + 2 * x1], abs=1e-9)


def test_two_cohorts_under_async_scheduling(tmp_path):
    """The same two requests under async scheduling (Model Runner V2): a queue of P + 1 = 3 batches, and a
    request's decodes P = 2 scheduler steps apart. At 0 the engine plans three batches: A's prefill (stage 0 0–10,
    stage 1 10+x–20+x, x = x(100)), B's prefill (A not eligible before step 3: 10–20, 20+x–30+x) and A's first
    decode (eligible at step 3: stage 0 20–25, stage 1 once free, 30+x–35+x). With the queue full it waits for
    batch 1 (A's first token at 20+x), then plans B's decode (25–30, 35+x–40+x); at 30+x (B's first token) A's
    second decode (30+x–35+x, 40+x–45+x); at 35+x B's second (35+x–40+x, 45+x–50+x). At 40+x neither may go
    again (A's outputs in flight reach its 3, B's too by 45+x): the plans are empty and deliver A's last token at
    45+x, B's at 50+x, without the synchronous engine's waits of x(1) for each output."""
    data = trace_scenario(write_csv_trace(tmp_path / "t.csv", [(0.0, 100, 3), (0.0, 100, 3)]),
                          engine={"workers": {"aggregated": {"parallelism": {"pipeline": 2}, "scheduler": {
                              "max_batched_tokens": 100, "max_sequences": 4, "async_scheduling": True}}}})
    res = run_scenario(data)
    x100 = 8_641e-6
    assert res.requests.ttft_ms.tolist() == pytest.approx([20 + x100, 30 + x100], abs=1e-9)
    assert res.requests.e2e_ms.tolist() == pytest.approx([45 + x100, 50 + x100], abs=1e-9)


@pytest.mark.parametrize("extra, message", [
    ({"engine": {"backend": "sglang"}}, "pipeline: is modelled for vLLM's batch queue"),
    ({"engine": {"workers": {"aggregated": {"parallelism": {"pipeline": 33}}}}},
     "pipeline: each stage holds at least one of meta-llama/Llama-3.1-8B-Instruct's 32 layers"),
])
def test_refusals(extra, message):
    data = make_scenario(engine={"workers": {"aggregated": {"parallelism": {"pipeline": 2}}}})
    if extra.get("engine", {}).get("backend") == "sglang":
        data["engine"]["backend"] = "sglang"
        data["engine"]["workers"]["aggregated"]["scheduler"] = {}
    else:
        from factories import _merge
        _merge(data, extra)
    assert message in scenario_error(data)
