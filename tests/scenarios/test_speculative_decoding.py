"""Speculative decoding with fixed timing (prefill pass 20 ms, decode/verification pass 10 ms), one request.

After each sampled token the drafter proposes k drafts; the next pass verifies them (1 + k query tokens)
and emits the accepted drafts plus one token of the target model, never more than the output left.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_scenario, run_scenario, trace_scenario, write_csv_trace

from simmodel.config.load import parse_scenario
from simmodel.errors import ScenarioError


def one_request(output_tokens: int, **engine):
    data = make_scenario(traffic={"source": {"input_tokens": 100, "output_tokens": output_tokens},
                                  "stop": {"requests": 1}}, engine=engine)
    return run_scenario(data)


def test_mtp_head_always_accepted_emits_two_tokens_a_pass():
    """nextn 1, every draft accepted: token 1 at 20, then 2 tokens per pass: 3 at 30, 5 at 40, 7 at 50, 9 at
    60. E2E 60 (100 without drafts), TPOT (60 − 20) / 8 = 5 ms; each verification schedules 2 tokens."""
    res = one_request(9, nextn=1, nextn_accepted=1.0)
    row = res.requests.iloc[0]
    assert (row.ttft_ms, row.e2e_ms, row.tpot_ms) == pytest.approx((20, 60, 5))
    assert res.passes.num_scheduled_tokens.tolist() == [100, 2, 2, 2, 2]
    spec = res.summary["speculation"]
    assert (spec["num_rounds"], spec["acceptance_rate"], spec["mean_tokens_per_round"]) == (4, 1.0, 2.0)


def test_mean_acceptance_spreads_over_rounds():
    """nextn 1, 0.5 accepted per round: rounds accept 0, 1, 0, 1 (⌊(r+1)/2⌋ − ⌊r/2⌋), so 7 tokens arrive at
    20 (1), 30 (2), 40 (4), 50 (5), 60 (7): E2E 60; acceptance 2/4, 1.5 tokens per round."""
    res = one_request(7, nextn=1, nextn_accepted=0.5)
    assert res.requests.e2e_ms.tolist() == pytest.approx([60])
    spec = res.summary["speculation"]
    assert (spec["acceptance_rate"], spec["mean_tokens_per_round"]) == (0.5, 1.5)


def test_emission_is_clipped_to_the_output_left():
    """nextn 3, all accepted, 6 outputs: 1 at 20; the pass at 30 could give 4 → 5 tokens; the pass at 40
    could give 4 but only 1 is left → done at 40."""
    res = one_request(6, nextn=3, nextn_accepted=3.0)
    assert res.requests.e2e_ms.tolist() == pytest.approx([40]) and res.requests.output_tokens.tolist() == [6]


def test_mtp_under_async_scheduling():
    """vLLM's async scheduler with nextn 1, every draft accepted, 9 outputs. Pass 1 is planned while the prefill
    runs: the request has 1 output placeholder and 1 draft placeholder, so it schedules 100 + 1 + 1 − 100 = 2
    tokens. Each later plan sees the outputs of the pass before the one in flight: 2 tokens each, outputs 1 at
    20, 3 at 30, 5 at 40, 7 at 50, 9 at 60. The plan made at 50 (computed 108, placeholders 2: 108 + 2 − 2 < 109)
    cannot rule out that drafts were rejected, so a sixth pass (60–70) runs for a request already done."""
    data = make_scenario(traffic={"source": {"input_tokens": 100, "output_tokens": 9}, "stop": {"requests": 1}},
                         engine={"nextn": 1, "nextn_accepted": 1.0,
                                 "workers": {"aggregated": {"scheduler": {"async_scheduling": True}}}})
    res = run_scenario(data)
    row = res.requests.iloc[0]
    assert (row.ttft_ms, row.e2e_ms) == pytest.approx((20, 60))
    assert res.passes.num_scheduled_tokens.tolist() == [100, 2, 2, 2, 2, 2]
    assert res.summary["speculation"]["acceptance_rate"] == 1.0


def test_placeholder_drafts_of_a_padded_admission_are_never_accepted(tmp_path):
    """nextn 2, every real draft accepted. A (17 → 12) prefills 0–20 (token 1) and verifies 2 drafts a pass: 4 tokens
    at 30. B, a one-token prompt sent at 25, is admitted at 30 beside A's verification with one token left, which vLLM
    pads to 1 + 2 with placeholder drafts (token id −1) to keep the pass a uniform decode: 3 + 3 tokens. That pass
    (30–60: a prefill, B having sampled nothing, beside a decode, 20 + 10 ms) gives B its first token only, as no
    target token matches a placeholder; its next (60–70) verifies 2 real drafts and ends it (3 outputs). A: 7 at 60,
    10 at 70, done at 80 (E2E 80; B's 70 − 25 = 45). B's time to second token is 10 ms (0 if the placeholders counted
    as accepted drafts); only real drafts count as verified: A's 4 rounds and B's 1, all accepted."""
    data = trace_scenario(write_csv_trace(tmp_path / "t.csv", [(0.0, 17, 12), (0.025, 1, 3)]),
                          engine={"nextn": 2, "nextn_accepted": 2.0})
    res = run_scenario(data)
    assert res.passes.num_scheduled_tokens.tolist() == [17, 3, 6, 6, 3]
    assert res.requests.ttst_ms.tolist() == pytest.approx([10, 10])
    assert res.requests.e2e_ms.tolist() == pytest.approx([80, 45])
    spec = res.summary["speculation"]
    assert (spec["num_draft_tokens"], spec["acceptance_rate"]) == (10, 1.0)


def test_mtp_drops_the_last_block_of_a_prefix_hit():
    """With prefix caching, vLLM's EAGLE/MTP block drop (``use_eagle_block_drop``): the drafter needs the hidden state of
    a hit's last token recomputed, so a hit gives up its last block. Prompts of 40 tokens sharing their first 32 (two
    blocks of 16), one at a time: B finds 2 blocks cached and keeps 1, so it computes 40 − 16 = 24 tokens (8 without
    drafts)."""
    source = {"input_tokens": 40, "output_tokens": 1, "shared_prefix": {"tokens": 32, "groups": 1}}
    drafted = run_scenario(make_scenario(traffic={"source": source, "stop": {"requests": 2}},
                                         engine={"nextn": 2, "nextn_accepted": 2.0}))
    plain = run_scenario(make_scenario(traffic={"source": source, "stop": {"requests": 2}}))
    assert drafted.passes.num_scheduled_tokens.tolist() == [40, 24]
    assert plain.passes.num_scheduled_tokens.tolist() == [40, 8]
    assert drafted.requests.cached_tokens.tolist() == [0, 16]


def test_mtp_defaults_async_on():
    """vLLM 0.32 schedules asynchronously by default with MTP/EAGLE drafts."""
    data = make_scenario(engine={"nextn": 1, "nextn_accepted": 0.5})
    del data["engine"]["workers"]["aggregated"]["scheduler"]
    assert parse_scenario(data, Path(".")).engine.workers["aggregated"].scheduler.async_scheduling


def test_ngram_conditional_acceptance_and_rejected_positions():
    """k = 2 with rates [1, 0]: the first draft always passes, the second never. Each verification schedules
    3 tokens and keeps 2 (the rejected position is given back), so tokens come 2 per pass as with an always-
    accepted single draft: 9 outputs end at 60."""
    res = one_request(9, speculation={"kind": "ngram", "num_speculative_tokens": 2, "acceptance_rates": [1, 0]})
    assert res.requests.e2e_ms.tolist() == pytest.approx([60])
    assert res.passes.num_scheduled_tokens.tolist() == [100, 3, 3, 3, 3]
    assert res.summary["speculation"]["acceptance_rate"] == 0.5


@pytest.mark.parametrize("engine, message", [
    ({"nextn": 1, "nextn_accepted": 0.5, "speculation": {"kind": "ngram", "num_speculative_tokens": 1,
                                                         "acceptance_rates": [0.5]}}, "engine.nextn: cannot be combined"),
    ({"nextn": 2, "nextn_accepted": 3}, "engine.nextn_accepted: at most nextn (2)"),
    ({"nextn_accepted": 1}, "engine.nextn_accepted: needs engine.nextn"),
    ({"speculation": {"kind": "ngram", "num_speculative_tokens": 2, "acceptance_rates": [0.5]}},
     "engine.speculation.acceptance_rates: must be 2 numbers from 0 to 1"),
    ({"speculation": {"kind": "ngram", "num_speculative_tokens": 6, "acceptance_rates": [0.5] * 6}},
     "engine.speculation.num_speculative_tokens: must be from 1 to 5"),
    ({"speculation": {"kind": "ngram", "num_speculative_tokens": 1, "acceptance_rates": [0.5]},
      "workers": {"aggregated": {"scheduler": {"async_scheduling": True}}}},
     "async_scheduling: true cannot be used with n-gram speculative decoding"),
])
def test_speculation_validation(engine, message):
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_scenario(make_scenario(engine=engine), Path("."))


def test_ngram_defaults_async_off():
    data = make_scenario(engine={"speculation": {"kind": "ngram", "num_speculative_tokens": 1, "acceptance_rates": [0.5]}})
    del data["engine"]["workers"]["aggregated"]["scheduler"]
    assert not parse_scenario(data, Path(".")).engine.workers["aggregated"].scheduler.async_scheduling
