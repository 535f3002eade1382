"""The MTP/EAGLE drafter priced inside the verifying pass (``engine.nextn``, ``simmodel.perf.drafting``)."""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_scenario, run_scenario

from simmodel.perf.deployment import Deployment
from simmodel.perf.drafting import DraftedTiming, draft_model
from simmodel.perf.hardware import HARDWARE
from simmodel.perf.models import MODELS
from simmodel.perf.roofline import Efficiency, HostOverhead, RooflineTiming
from simmodel.perf.timing import PassBatch, pass_sums

LLAMA = MODELS["meta-llama/Llama-3.1-8B-Instruct"]


def test_two_drafts_cost_two_one_layer_forwards_by_hand():
    """Llama-3.1-8B on H100 (default efficiencies: 771.4 TFLOP/s, 2.8475 TB/s), one decoding sequence verifying 2
    drafts (3 new tokens) on 100 tokens of context, nextn 2. The drafter is one layer: its weights (41.94 M +
    176.16 M) × 2 B = 436.2 MB and the 3 tokens' activations: 153.26 µs; attention over 103 tokens of one layer's KV
    (4096 B a token) and the queries: 0.17 µs; the LM head (1.0507 GB and the logits): 369.17 µs; sampling 0.54,
    norms 0.14; one layer's floor 31.5 µs: 554.78 µs. The second forward, one token on 104: 554.64 µs. In all
    1109.4 µs on top of the target's pass."""
    d = Deployment(LLAMA, HARDWARE["h100_sxm"])
    target = RooflineTiming(d, Efficiency(), HostOverhead())
    drafted = DraftedTiming(target, d, 2, Efficiency(), HostOverhead())
    batch = PassBatch(1, np.zeros(1, np.int64), np.array([3]), np.array([100]), np.ones(1, bool), np.ones(1, bool),
                      np.array([1e6]))
    extra = drafted.price(batch).total_s[0] - target.price(batch).total_s[0]
    assert extra * 1e6 == pytest.approx(554.78 + 554.64, rel=3e-3)
    assert drafted.draft_seconds(pass_sums(batch))[0] == pytest.approx(extra, rel=1e-12)


def test_the_drafter_of_an_moe_model_is_one_moe_layer():
    """DeepSeek-V3's MTP module is one MoE layer: the one-layer view keeps the experts, not the dense layers."""
    m = draft_model(MODELS["deepseek-ai/DeepSeek-V3"])
    assert m.num_layers == 1 and m.num_moe_layers == 1 and m.num_dense_layers == 0


def test_a_run_with_nextn_prices_its_drafts():
    """The same request with nextn 2 (1 draft accepted a round): its decode passes take the drafter's time more
    than the target's forward of those tokens; a default-timing run without drafts has none of it."""
    data = make_scenario(engine={"nextn": 2, "nextn_accepted": 1},
                         traffic={"stop": {"requests": 1}, "source": {"output_tokens": 7}})
    data["engine"]["workers"]["aggregated"].pop("timing")
    drafted = run_scenario(data).passes
    d = Deployment(LLAMA, HARDWARE["h100_sxm"])
    target = RooflineTiming(d, Efficiency(), HostOverhead())
    for row in drafted.itertuples():
        if row.num_decode_seqs:  # a decode pass verifying 2 drafts: 3 tokens on its context
            alone = target.price(PassBatch(1, np.zeros(1, np.int64), np.array([row.num_scheduled_tokens]),
                                           np.array([row.kv_blocks_used * 16 - 16]), np.ones(1, bool),
                                           np.ones(1, bool), np.array([1e6]))).total_s[0]
            assert row.rank_busy_ms / 1000 > alone + 1.0e-3  # (two drafter forwards, ≈ 1.1 ms)


def test_the_drafters_work_counts_in_the_energy():
    """At datasheet peaks (989 TFLOP/s, 3.35 TB/s) the two drafter forwards of the first test read twice the
    layer's 436.2 MB and the LM head's 1.0512 GB: 2 × 1487.4 MB / 3.35 TB/s = 888.0 µs; their FLOPs (the layer's
    2 × 218.1 M × 3 and × 1 tokens, the LM head's 2 × 1.05 G twice) 3.9 µs, sampling's 2 × 1.54 MB 0.92 µs, and
    the KV, queries, activations and norms 0.5 µs: the pass's work grows by 893.3 µs."""
    from simmodel.perf.drafting import DraftedWork
    from simmodel.perf.energy import PassEnergy

    d = Deployment(LLAMA, HARDWARE["h100_sxm"])
    batch = PassBatch(1, np.zeros(1, np.int64), np.array([3]), np.array([100]), np.ones(1, bool), np.ones(1, bool),
                      np.array([1e6]))
    sums = pass_sums(batch)
    extra = DraftedWork(d, 2).work_ns(sums)[0] - PassEnergy(d).work_ns(sums)[0]
    assert extra / 1e3 == pytest.approx(893.3, rel=1e-3)


def test_the_drafters_energy_only_with_the_timing_that_prices_it():
    """A fixed timing prices no drafter, so its passes' work is the target's alone; the default timing adds it."""
    from pathlib import Path

    from simmodel.config.load import parse_scenario
    from simmodel.perf.energy import PassEnergy
    from simmodel.perf.timings import make_energy

    batch = PassBatch(1, np.zeros(1, np.int64), np.array([3]), np.array([100]), np.ones(1, bool), np.ones(1, bool),
                      np.array([1e6]))
    fixed = parse_scenario(make_scenario(engine={"nextn": 2, "nextn_accepted": 1}), Path(".")).engine
    role = fixed.workers["aggregated"]
    assert role.draft_tokens == 2
    plain = PassEnergy(role.deployment).work_ns(pass_sums(batch))
    assert make_energy(role).work_ns(pass_sums(batch)) == plain
    data = make_scenario(engine={"nextn": 2, "nextn_accepted": 1})
    data["engine"]["workers"]["aggregated"].pop("timing")
    default = parse_scenario(data, Path(".")).engine.workers["aggregated"]
    assert make_energy(default).work_ns(pass_sums(batch))[0] > plain[0]
