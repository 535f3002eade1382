"""``price_passes`` prices many passes of a worker in one call, as a coalesced decode run needs; each
pass must get exactly (bit for bit) the seconds and provenance that ``price`` gives it alone."""

from __future__ import annotations

import numpy as np
import pytest
from test_measured import QWEN8, fake_aic

from simmodel.perf.deployment import Deployment
from simmodel.perf.hardware import HARDWARE
from simmodel.perf.measured import MeasuredTiming
from simmodel.perf.models import MODELS
from simmodel.perf.roofline import RooflineTiming
from simmodel.perf.timing import (
    SUM_COLUMNS,
    FixedTiming,
    PassBatch,
    PassSums,
    PolynomialTiming,
    pass_sums,
    price_passes,
)


def random_passes(rng: np.random.Generator, num_passes: int, num_ranks: int, decode_only: bool):
    """Per pass, a batch of random sequences on random ranks (some ranks idle), and the stacked batch."""
    capacity = rng.integers(10_000, 200_000, num_ranks).astype(np.float64)
    singles, rows = [], []
    for k in range(num_passes):
        n = int(rng.integers(0, 12))
        rank = np.sort(rng.integers(0, num_ranks, n))
        decode = np.ones(n, bool) if decode_only else rng.random(n) < 0.6
        new = np.where(decode, 1, rng.integers(1, 3000, n))
        ctx = rng.integers(0, 30_000, n)
        samples = decode | (rng.random(n) < 0.5)
        singles.append(PassBatch(num_ranks, rank, new, ctx, decode, samples, capacity))
        rows.append((k * num_ranks + rank, new, ctx, decode, samples))
    stacked = PassBatch(num_passes * num_ranks, *(np.concatenate(col) for col in zip(*rows)),
                        np.tile(capacity, num_passes))
    return singles, stacked


MOE = Deployment(MODELS["Qwen/Qwen3-30B-A3B"], HARDWARE["h200_sxm"], attention_data=4, moe_expert=4)
TIMINGS = {
    "fixed": lambda: FixedTiming(20, 10),
    "polynomial": PolynomialTiming,
    "roofline-dense-tp2": lambda: RooflineTiming(Deployment(MODELS["Qwen/Qwen3-8B"], HARDWARE["h200_sxm"], tensor=2)),
    "roofline-moe-dp4": lambda: RooflineTiming(MOE),
    "measured": lambda: MeasuredTiming(QWEN8, query=fake_aic, context_length=40960, max_batched_tokens=4096,
                                       max_sequences=64),
}


@pytest.mark.parametrize("name", TIMINGS)
@pytest.mark.parametrize("num_ranks", [1, 3])
@pytest.mark.parametrize("decode_only", [True, False])
def test_many_passes_price_like_one_at_a_time(name, num_ranks, decode_only):
    timing = TIMINGS[name]()
    rng = np.random.default_rng(7)
    for _ in range(5):
        singles, stacked = random_passes(rng, 9, num_ranks, decode_only)
        seconds, labels = price_passes(timing, stacked, 9)
        assert seconds.shape == (9, num_ranks)
        for k, batch in enumerate(singles):
            alone = timing.price(batch)
            assert seconds[k].tobytes() == alone.total_s.tobytes(), (name, k)
            assert labels[k] == alone.provenance


def test_a_model_without_a_multi_pass_price_is_called_once_per_pass():
    """The fallback for other timing models: one ``price`` per pass, ranks of each pass renumbered."""
    calls = []

    class Counting:
        def price(self, batch):
            calls.append(batch.rank.tolist())
            return FixedTiming(20, 10).price(batch)

    rng = np.random.default_rng(1)
    singles, stacked = random_passes(rng, 4, 2, decode_only=False)
    seconds, _ = price_passes(Counting(), stacked, 4)
    assert calls == [b.rank.tolist() for b in singles]
    assert seconds.tolist() == [FixedTiming(20, 10).price(b).total_s.tolist() for b in singles]


@pytest.mark.parametrize("few", [16, -1], ids=["summed in Python", "summed as arrays"])
def test_pass_sums_total_each_rank_and_kind_by_hand(monkeypatch, few):
    """Rank 0: a prefill chunk of 3 tokens on 2 cached (pairs 3·2 + 3·4/2 = 12, does not sample) and a decode
    on 10 (pairs 11); rank 1: two decodes on 5 and 7 (pairs 6 + 8 = 14), the second not sampling (a draft token
    being verified, say); rank 2 idle. The same totals whichever way the batch is summed (``_FEW_SEQUENCES``:
    -1 sends every batch to the arrays)."""
    import simmodel.perf.timing as timing_module

    monkeypatch.setattr(timing_module, "_FEW_SEQUENCES", few)
    batch = PassBatch(3, np.array([0, 0, 1, 1]), np.array([3, 1, 1, 1]), np.array([2, 10, 5, 7]),
                      np.array([False, True, True, True]), np.array([False, True, True, False]),
                      np.array([100.0, 200.0, 300.0]))
    sums = pass_sums(batch)
    # per kind: sequences, new tokens, context tokens, pairs, sampled (prefill, then decode)
    assert sums.table.tolist() == [[1, 3, 2, 12, 0, 1, 1, 10, 11, 1],
                                   [0, 0, 0, 0, 0, 2, 2, 12, 14, 1],
                                   [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]]
    assert SUM_COLUMNS[3] == "prefill_pairs" and SUM_COLUMNS[9] == "decode_sampled"
    assert sums.kv_capacity_tokens.tolist() == [100.0, 200.0, 300.0]


def test_few_sequences_are_summed_exactly_as_the_arrays_sum_them(monkeypatch):
    """A batch of at most ``_FEW_SEQUENCES`` is summed in Python: whole numbers, so the very totals (bits) the
    arrays' weighted counts give, which the same batch gets with that path turned off."""
    import simmodel.perf.timing as timing_module

    rng = np.random.default_rng(3)
    batches = [b for _ in range(20) for b in random_passes(rng, 4, 3, decode_only=False)[0]]
    python_sums = [pass_sums(b).table for b in batches]
    monkeypatch.setattr(timing_module, "_FEW_SEQUENCES", -1)
    for batch, table in zip(batches, python_sums):
        counted = pass_sums(batch).table
        assert table.shape == counted.shape == (3, len(SUM_COLUMNS))
        assert table.tobytes() == counted.tobytes()


def test_one_rank_pass_prices_as_scalars_with_the_arrays_bits():
    """A one-row table is priced with Python floats (``PolynomialTiming._one_row``); stacked with more copies
    the same row goes through the array operations (three copies: the prefill curve's too): the same bits either
    way, whatever the row runs."""
    timing = PolynomialTiming()
    rng = np.random.default_rng(5)
    for batch in (b for _ in range(30) for b in random_passes(rng, 3, 1, decode_only=False)[0]):
        one = pass_sums(batch)
        alone, _ = timing._seconds(one)
        for copies in (2, 3):
            many = PassSums(np.vstack([one.table] * copies), np.tile(one.kv_capacity_tokens, copies), copies)
            stacked, _ = timing._seconds(many)
            assert alone.tobytes() == stacked[:1].tobytes()
