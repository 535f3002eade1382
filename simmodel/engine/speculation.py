"""How many draft tokens a verification pass accepts (speculative decoding).

vLLM proposes drafts after each sampled token and verifies them in the request's next pass; a draft is
kept only if every draft before it was, so sampling stops at the first reject and the target model adds
one token of its own. These acceptance models decide the count for one request's round.
"""

from __future__ import annotations

import math

import numpy as np

from simmodel.engine.request import Request


class ConditionalAcceptance:
    """n-gram drafts: draft i is accepted with probability ``rates[i]`` given drafts 0…i−1 were.

    Draws come from the rank's own seeded generator, in pass order, so runs are reproducible.
    """

    def __init__(self, rates: tuple[float, ...], rng: np.random.Generator) -> None:
        self.rates, self.rng = rates, rng

    def __call__(self, request: Request, drafts: int) -> int:
        draws = self.rng.random(drafts)
        accepted = 0
        while accepted < drafts and draws[accepted] < self.rates[accepted]:
            accepted += 1
        return accepted


class MeanAcceptance:
    """MTP / EAGLE heads (``engine.nextn``): on average ``mean`` drafts accepted per round, spread evenly
    over a request's rounds (round r accepts ⌊(r+1)·mean⌋ − ⌊r·mean⌋), with no randomness."""

    def __init__(self, mean: float) -> None:
        self.mean = mean

    def __call__(self, request: Request, drafts: int) -> int:
        r = request.spec_rounds
        return min(drafts, math.floor((r + 1) * self.mean + 1e-9) - math.floor(r * self.mean + 1e-9))
