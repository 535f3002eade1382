"""``timing: {type: measured}``: grids, interpolation, aggregation and refusals, from fake query functions
(no aiconfigurator-core needed), plus checks against aiconfigurator-core itself where it is installed."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from simmodel.errors import ScenarioError
from simmodel.perf.deployment import Deployment
from simmodel.perf.hardware import HARDWARE
from simmodel.perf.measured import (
    MISSING_EXTRA,
    GridTable,
    MeasuredGrid,
    MeasuredTiming,
    aic_config,
    build_tables,
    check_system,
    geometric_axis,
    interpolate,
)
from simmodel.perf.models import MODELS
from simmodel.perf.timing import PassBatch

QWEN8 = Deployment(MODELS["Qwen/Qwen3-8B"], HARDWARE["h200_sxm"])
A = np.array


def batch(num_ranks: int, rows: list[tuple[int, int, int, bool]]) -> PassBatch:
    """rows: (rank, new tokens, cached tokens, is_decode)."""
    rank, new, ctx, dec = (A([r[i] for r in rows], dtype=t) for i, t in
                           enumerate((np.int64, np.int64, np.int64, bool)))
    return PassBatch(num_ranks, rank, new, ctx, dec, np.ones(len(rows), bool), np.full(num_ranks, 1e6))


def fake_aic(num_prefill: int, tokens: int, kv: int, num_decode: int, decode_kv: int) -> float:
    """A forward-pass model (AIC's five aggregates → ms) that is multilinear in the grid coordinates
    (tokens = P·t, kv = P·k, decode_kv = D·c, and tokens·D), so multilinear interpolation must reproduce
    it exactly anywhere inside the grid. A mixed pass adds 0.5 ms (not 1) plus 1e-5 ms per token × decode."""
    prefill = 2.0 + 0.01 * tokens + 0.001 * kv if tokens else 0.0
    extra = 1.0 if not tokens else 0.5 + 1e-5 * tokens * num_decode
    return prefill + (0.05 * num_decode + 0.0001 * decode_kv + extra if num_decode else 0.0)


SMALL = MeasuredGrid.for_limits(context_length=4096, max_batched_tokens=2048, max_sequences=64)


@pytest.fixture(scope="module")
def fake_timing() -> MeasuredTiming:
    return MeasuredTiming(QWEN8, query=fake_aic, context_length=4096, max_batched_tokens=2048, max_sequences=64)


# -- grid ---------------------------------------------------------------------------------------------

def test_geometric_axes():
    assert geometric_axis(40, per_octave=2).tolist() == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40]
    assert geometric_axis(20).tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20]
    assert geometric_axis(40, per_octave=1, steps=True).tolist() == [1, 2, 4, 8, 16, 17, 32, 33, 40]
    assert geometric_axis(100, low=16, per_octave=1, zero=True).tolist() == [0, 16, 32, 64, 100]
    assert geometric_axis(20, per_octave=1, dense_to=5).tolist() == [1, 2, 3, 4, 5, 8, 16, 20]


def test_grid_reaches_the_scheduler_limits():
    g = MeasuredGrid.for_limits(context_length=40960, max_batched_tokens=8192, max_sequences=256)
    assert g.prefill_tokens[-1] == g.mixed_prefill_tokens[-1] == 8192
    assert g.prefill_requests[-1] == g.decode_requests[-1] == g.mixed_decode_requests[-1] == 256
    assert g.prefill_context[[0, -1]].tolist() == [0, 40960]
    assert g.decode_context[[0, -1]].tolist() == [1, 40960]
    assert {1025, 4097}.issubset(g.prefill_tokens) and set(range(1, 17)).issubset(g.decode_requests)
    assert 20_000 < g.num_queries < 30_000


def test_build_tables_asks_once_per_shape_in_aic_terms():
    calls = []

    def record(*args):
        calls.append(args)
        return 1.0

    tables = build_tables(record, SMALL)
    assert len(calls) == SMALL.num_queries
    g = SMALL
    assert (g.prefill_requests[2], g.prefill_requests[2] * g.prefill_tokens[3],
            g.prefill_requests[2] * g.prefill_context[4], 0, 0) in calls
    assert (0, 0, 0, g.decode_requests[5], g.decode_requests[5] * g.decode_context[6]) in calls
    assert tables.prefill_ms.shape == (g.prefill_requests.size, g.prefill_tokens.size, g.prefill_context.size)
    assert tables.decode_ms.shape == (g.decode_requests.size, g.decode_context.size)
    assert not tables.mixed_extra_ms.any()  # mixed minus prefill-alone of a constant model


# -- interpolation ------------------------------------------------------------------------------------

def test_hand_interpolation_and_provenance_codes():
    """Table c²/1000 on c = 100, 300 (10, 90) and D = 1, 4 (×D): at c = 200 linear weights give
    (10 + 90)/2 = 50 (the true 40 is not a grid point); at c = 400 the edge cell extends with slope
    80/200 = 0.4 → 130; at D = 2.5, c = 300: 90·(1 + 4)/2 = 225."""
    c_axis, d_axis = A([100.0, 300.0]), A([1.0, 4.0])
    table = np.outer(d_axis, c_axis ** 2 / 1000)
    value, code = interpolate(table, (d_axis, c_axis), (A([1, 1, 1, 2.5, 4, 0.5]), A([200, 100, 400, 300, 300, 300])))
    np.testing.assert_allclose(value, [50, 10, 130, 225, 360, 45])
    assert code.tolist() == [1, 0, 2, 1, 0, 2]  # interpolated, measured, extrapolated, ...


def test_trilinear_weights_by_hand():
    """On the unit cube with corner values v[i, j, k] = 1 + i + 2j + 4k + 8ijk, the point
    (0.5, 0.25, 1) weighs corners (·,·,1) by (1−x)(1−y), x(1−y), (1−x)y, xy = 0.375, 0.375, 0.125, 0.125
    over values 5, 6, 7, 16 → 1.875 + 2.25 + 0.875 + 2 = 7."""
    v = np.empty((2, 2, 2))
    for i, j, k in np.ndindex(2, 2, 2):
        v[i, j, k] = 1 + i + 2 * j + 4 * k + 8 * i * j * k
    unit = A([0.0, 1.0])
    value, code = GridTable(v, (unit, unit, unit))(A([0.5]), A([0.25]), A([1.0]))
    assert value.tolist() == [7.0] and code.tolist() == [1]


def test_grid_table_rejects_bad_axes():
    with pytest.raises(ValueError, match="does not match"):
        GridTable(np.zeros((2, 3)), (A([1.0, 2.0]), A([1.0, 2.0])))
    with pytest.raises(ValueError, match="strictly increasing"):
        GridTable(np.zeros((2, 2)), (A([2.0, 1.0]), A([1.0, 2.0])))


# -- pricing ------------------------------------------------------------------------------------------

def test_prefill_decode_and_mixed_passes_by_hand(fake_timing):
    """Rank 0 prefills 300 (100 cached) and 500 new tokens and decodes at contexts 1000, 2000, 3000:
    P 2, T 800, K 100, D 3, S 6000 → 2 + 8 + 0.1 + 0.15 + 0.6 + 0.5 + 1e-5·800·3 = 11.374 ms.
    Rank 1 decodes alone at 1000, 2000, 3000: 0.15 + 0.6 + 1 = 1.75 ms. Rank 2 prefills 64 tokens
    alone: 2 + 0.64 = 2.64 ms. Rank 3 is idle."""
    rows = [(0, 300, 100, False), (0, 500, 0, False), (0, 1, 1000, True), (0, 1, 2000, True), (0, 1, 3000, True),
            (1, 1, 1000, True), (1, 1, 2000, True), (1, 1, 3000, True), (2, 64, 0, False)]
    cost = fake_timing.price(batch(4, rows))
    np.testing.assert_allclose(cost.total_s * 1000, [11.374, 1.75, 2.64, 0.0], rtol=1e-12, atol=1e-12)
    assert cost.provenance == ("interpolated",)  # rank 0's per-request means 400, 50 are off the grid


def test_vectorized_over_ranks_equals_one_rank_at_a_time(fake_timing):
    rng = np.random.default_rng(7)
    rows = []
    for rank in range(6):
        for _ in range(rng.integers(0, 6)):
            decode = bool(rng.random() < 0.6)
            rows.append((rank, 1 if decode else int(rng.integers(1, 300)), int(rng.integers(0, 4000)), decode))
    together = fake_timing.price(batch(6, rows)).total_s
    alone = [fake_timing.price(batch(1, [(0, *r[1:]) for r in rows if r[0] == rank])).total_s[0]
             if any(r[0] == rank for r in rows) else 0.0 for rank in range(6)]
    np.testing.assert_allclose(together, alone, rtol=1e-12)
    expected = []
    for rank in range(6):
        mine = [r for r in rows if r[0] == rank]
        pre = [r for r in mine if not r[3]]
        dec = [r for r in mine if r[3]]
        expected.append(fake_aic(len(pre), sum(r[1] for r in pre), sum(r[2] for r in pre), len(dec),
                                 sum(r[2] for r in dec)) / 1000 if mine else 0.0)
    np.testing.assert_allclose(together, expected, rtol=1e-9)


def test_provenance_labels(fake_timing):
    on_grid = fake_timing.price(batch(1, [(0, 1024, 0, False)]))
    assert on_grid.provenance == ("measured",)
    np.testing.assert_allclose(on_grid.total_s, [(2 + 10.24) / 1000])
    assert fake_timing.price(batch(1, [(0, 1, 1024, True)] * 8)).provenance == ("measured",)
    assert fake_timing.price(batch(1, [(0, 1, 1000, True)] * 8)).provenance == ("interpolated",)
    # beyond the 4096-token context axis: the edge cell extends linearly, exact for this model
    far = fake_timing.price(batch(2, [(0, 1, 1024, True), (1, 1, 8000, True)]))
    assert far.provenance == ("extrapolated:measured",)
    np.testing.assert_allclose(far.total_s * 1000, [1.05 + 0.1024, 1.05 + 0.8])
    assert fake_timing.price(batch(1, [])).provenance == ()


def test_from_tables_prices_like_the_built_timing(fake_timing):
    again = MeasuredTiming.from_tables(fake_timing.tables)
    b = batch(1, [(0, 700, 300, False), (0, 1, 900, True)])
    assert again.price(b).total_s.tolist() == fake_timing.price(b).total_s.tolist()


# -- refusals and configuration -------------------------------------------------------------------------

def test_refuses_models_aic_has_no_tables_for():
    opt = Deployment(MODELS["facebook/opt-125m"], HARDWARE["h100_sxm"])
    with pytest.raises(ScenarioError, match="^timing.type measured: aiconfigurator-core has no tables for model "
                                            "facebook/opt-125m \\(supported: Qwen/Qwen3-235B-A22B, "):
        MeasuredTiming(opt)


def test_refuses_context_parallelism():
    cp = Deployment(MODELS["Qwen/Qwen3-8B"], HARDWARE["h200_sxm"], tensor=2, decode_context=2)
    with pytest.raises(ScenarioError, match="context parallelism .* is not supported; set both to 1"):
        MeasuredTiming(cp)


def test_refuses_systems_and_backends_without_data():
    supported = {"h200_sxm": {"vllm": ["0.24.0", "0.27.0"]}, "a100_sxm": {"sglang": ["0.5.10"]}}
    check_system("h200_sxm", "vllm", supported)
    check_system("h200_sxm", "vllm", supported, "0.27.0")
    with pytest.raises(ScenarioError, match="^timing.type measured: aiconfigurator-core has no vllm data for "
                                            "system mi300x \\(it has h200_sxm\\)$"):
        check_system("mi300x", "vllm", supported)
    with pytest.raises(ScenarioError, match="no vllm data for system a100_sxm"):
        check_system("a100_sxm", "vllm", supported)
    with pytest.raises(ScenarioError, match="no vllm 0.19.0 data for h200_sxm \\(it has 0.24.0, 0.27.0\\)"):
        check_system("h200_sxm", "vllm", supported, "0.19.0")
    with pytest.raises(ScenarioError, match="no backend 'tgi' \\(it has vllm, sglang, trtllm\\)"):
        check_system("h200_sxm", "tgi", supported)


def test_missing_extra_says_how_to_install(monkeypatch):
    for name in ("aiconfigurator_core", "aiconfigurator_core.sdk", "aiconfigurator_core.sdk.perf_database",
                 "aiconfigurator_core.sdk.rust_engine_step"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ScenarioError) as err:
        MeasuredTiming(QWEN8)
    assert str(err.value) == MISSING_EXTRA
    assert MISSING_EXTRA == "timing.type measured needs the optional extra: pip install 'simmodel[measured]'"


def test_aic_config_maps_names_dtypes_and_layout():
    llama = Deployment(MODELS["meta-llama/Llama-3.1-70B-Instruct"], HARDWARE["h100_sxm"], tensor=4, attention_data=2,
                       weight_bytes=1, kv_bytes=1)
    assert aic_config(llama) == {
        "schema_version": 1, "model_name": "meta-llama/Meta-Llama-3.1-70B", "system_name": "h100_sxm",
        "backend": "vllm", "tp_size": 4, "pp_size": 1, "weight_dtype": "fp8", "kv_cache_dtype": "fp8"}
    ds = Deployment(MODELS["deepseek-ai/DeepSeek-R1"], HARDWARE["h200_sxm"], tensor=1, attention_data=8,
                    moe_tensor=1, moe_expert=8, weight_bytes=1)
    config = aic_config(ds, "sglang", "0.5.14")
    assert config["weight_dtype"] is None  # the checkpoint's own FP8 blocks
    assert (config["kv_cache_dtype"], config["backend"], config["backend_version"]) == ("bfloat16", "sglang", "0.5.14")
    assert (config["attention_dp_size"], config["moe_tp_size"], config["moe_ep_size"]) == (8, 1, 8)
    assert aic_config(QWEN8)["weight_dtype"] is None and aic_config(QWEN8)["model_name"] == "Qwen/Qwen3-8B"


# -- against aiconfigurator-core itself -------------------------------------------------------------------

@pytest.fixture(scope="module")
def aic():
    pytest.importorskip("aiconfigurator_core")
    import logging

    from aiconfigurator_core.sdk.engine import EngineHandle

    from simmodel.perf.measured import aic_query

    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    timing = MeasuredTiming(QWEN8, "vllm", context_length=40960, max_batched_tokens=8192, max_sequences=256)
    handle = EngineHandle.compile("Qwen/Qwen3-8B", "h200_sxm", "vllm", tp_size=1)
    forward_pass, _ = aic_query(QWEN8)
    return timing, handle, forward_pass


def test_real_tables_match_aic_direct_answers(aic):
    """Qwen3-8B, one H200, vLLM: a 1024-token prefill (AIC: 22.14 ms) and one decode step of 8 sequences
    at context 1024 (AIC: 5.28 ms) are grid points, so within 2% of AIC's own EngineHandle answers."""
    timing, handle, _ = aic
    assert "Qwen/Qwen3-8B on h200_sxm (tensor 1), vllm 0.24.0" in timing.tables.source
    assert timing.tables.build_seconds < 10
    prefill = timing.price(batch(1, [(0, 1024, 0, False)]))
    assert prefill.provenance == ("measured",)
    assert prefill.total_s[0] * 1000 == pytest.approx(handle.predict_prefill_latency(1, 1024, 0), rel=0.02)
    decode = timing.price(batch(1, [(0, 1, 1024, True)] * 8))
    assert decode.provenance == ("measured",)
    assert decode.total_s[0] * 1000 == pytest.approx(handle.decode_step_latency(8, 1024, 2), rel=0.02)


def test_real_tables_between_grid_points(aic):
    """Off the grid, against AIC's forward-pass model itself: a 1500-token prefill chunk over 500 cached
    tokens, 8 decodes at context 1500, and both in one pass; and two prefills of 700 and 900 tokens."""
    timing, _, forward_pass = aic
    cases = [([(0, 1500, 500, False)], (1, 1500, 500, 0, 0)),
             ([(0, 1, 1500, True)] * 8, (0, 0, 0, 8, 12000)),
             ([(0, 1500, 500, False)] + [(0, 1, 1500, True)] * 8, (1, 1500, 500, 8, 12000)),
             ([(0, 700, 0, False), (0, 900, 0, False)], (2, 1600, 0, 0, 0))]
    for rows, scheduled in cases:
        cost = timing.price(batch(1, rows))
        assert cost.provenance == ("interpolated",)
        assert cost.total_s[0] * 1000 == pytest.approx(forward_pass(*scheduled), rel=0.05), scheduled


def test_real_refusal_names_the_system():
    pytest.importorskip("aiconfigurator_core")
    with pytest.raises(ScenarioError, match="^timing.type measured: aiconfigurator-core has no vllm data for "
                                            "system mi300x \\(it has .*h200_sxm"):
        MeasuredTiming(Deployment(MODELS["Qwen/Qwen3-8B"], HARDWARE["mi300x"]))
