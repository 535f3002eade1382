"""The drafter of MTP/EAGLE speculative decoding (``engine.nextn``), priced inside the pass that verifies.

vLLM runs its EAGLE/MTP proposer in the same step as the target model: after the target's forward samples
each sequence's next token, the drafter (one decoder layer of the target's width, an MTP module or an
EAGLE head, sharing the target's embeddings and LM head) proposes ``k`` draft tokens, one forward each.
Its first forward runs over what the target's forward just ran (every new token of the pass: the verified
tokens of each decoding sequence and the prompt chunk of each prefill, whose hidden states it consumes); the
``k − 1`` after it over one token of each sequence that sampled. Each forward ends with the LM head, to pick
the next draft.

The drafter is priced by the same roofline as the target, on a one-layer view of the model
(``draft_model``): a dense model's layer (attention and MLP), or an MoE model's MoE layer (DeepSeek-V3's MTP
module is one), attending to the whole context even where the target's layers slide or keep a state (Qwen3-Next's
MTP layer is full attention), over the same contexts (the drafter keeps its own layer of KV). Left out: the MTP
module's ``eh_proj`` (a 2·hidden × hidden projection, under 1 % of DeepSeek-V3's MoE layer), the drafter's own KV
cache in the memory budget (one layer in L), and its host-side bookkeeping. N-gram drafts
(``engine.speculation``) come from a CPU lookup and are not priced.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simmodel.perf.deployment import Deployment
from simmodel.perf.models import ModelSpec
from simmodel.perf.roofline import Efficiency, HostOverhead, RooflineTiming
from simmodel.perf.timing import (
    CONTEXT_TOKENS,
    DECODE,
    NEW_TOKENS,
    PAIRS,
    PREFILL,
    SAMPLED,
    SEQUENCES,
    PassSums,
    SumsTiming,
)


def draft_model(model: ModelSpec) -> ModelSpec:
    """The drafter as a one-layer model: a full-attention layer (whatever the target's sliding-window or state
    layers) with an MoE block for an MoE model (its first dense layers left out), else a dense MLP; the target's
    embeddings and LM head. A model of single-block layers (Nemotron-H) drafts with an attention block and an MoE
    or MLP block (Nemotron 3 Super's ``mtp_hybrid_override_pattern`` ``*E``)."""
    plain = dict(num_linear_layers=0, num_sliding_layers=0, sliding_window=0, first_dense_layers=0, moe_layer_step=1)
    if model.layer_pattern:
        return replace(model, num_layers=2, layer_pattern="*" + ("E" if model.is_moe else "-"), **plain)
    return replace(model, num_layers=1, **plain)


def stacked_draft_sums(sums: PassSums, drafts: int) -> PassSums:
    """The drafter's first forward and (with more than one draft) the one repeated after it as the passes of one
    ``PassSums``: the first forwards' rows, then the later ones' (``draft_sums``), priced in one call."""
    first, later = draft_sums(sums)
    if drafts == 1:
        return first
    return PassSums(np.concatenate((first.table, later.table)),
                    np.concatenate((sums.kv_capacity_tokens, sums.kv_capacity_tokens)), 2 * sums.num_passes)


def draft_sums(sums: PassSums) -> tuple[PassSums, PassSums]:
    """What the drafter's first forward runs (every new token of the pass, over its context, every sequence
    that samples picking a draft) and each later one (one token of each sequence that sampled)."""
    table = sums.table
    first = table.copy()
    later = np.zeros_like(table)
    sampled = table[:, PREFILL + SAMPLED] + table[:, DECODE + SAMPLED]
    context = (table[:, PREFILL + CONTEXT_TOKENS] + table[:, PREFILL + NEW_TOKENS]
               + table[:, DECODE + CONTEXT_TOKENS] + table[:, DECODE + NEW_TOKENS])
    # One decoding token each, over the sequence's whole context so far (sums over sequences: exact for the
    # token and pair counts, a token's context being its sequence's).
    later[:, DECODE + SEQUENCES] = later[:, DECODE + NEW_TOKENS] = later[:, DECODE + SAMPLED] = sampled
    later[:, DECODE + CONTEXT_TOKENS] = np.where(sampled > 0, context, 0.0)
    later[:, DECODE + PAIRS] = later[:, DECODE + CONTEXT_TOKENS] + sampled
    return (PassSums(first, sums.kv_capacity_tokens, sums.num_passes),
            PassSums(later, sums.kv_capacity_tokens, sums.num_passes))


class DraftedTiming(SumsTiming):
    """A timing model whose passes also run the MTP/EAGLE drafter's ``k`` forwards (see the module docstring)."""

    def __init__(self, target: SumsTiming, deployment: Deployment, drafts: int, efficiency: Efficiency,
                 host: HostOverhead, engine: str = "vllm") -> None:
        self.target, self.drafts = target, drafts
        self.provenance = target.provenance
        # The drafter adds no host time of its own (the target's pass has it) and one layer's floor a forward.
        self.drafter = RooflineTiming(replace(deployment, model=draft_model(deployment.model)), efficiency,
                                      replace(host, prefill_ms=0.0, decode_ms=0.0, mixed_ms=0.0), engine)

    def draft_seconds(self, sums: PassSums) -> np.ndarray:
        """Per row: the drafter's k forwards (its first and later forwards priced in one call)."""
        seconds = self.drafter.group_seconds(stacked_draft_sums(sums, self.drafts)).sum(axis=1)
        if self.drafts == 1:
            return seconds
        n = len(sums.table)
        return seconds[:n] + (self.drafts - 1) * seconds[n:]

    def _seconds(self, sums: PassSums) -> tuple[np.ndarray, list[tuple[str, ...]]]:
        seconds, labels = self.target.price_sums(sums)
        return seconds.reshape(-1) + self.draft_seconds(sums), labels


class DraftedWork:
    """The work at datasheet peaks of a pass that verifies drafts and runs the drafter, for its energy
    (``perf.energy``): the target's, plus the drafter's k forwards (``draft_sums``)."""

    def __init__(self, deployment: Deployment, drafts: int, engine: str = "vllm") -> None:
        peaks = Efficiency(compute=1.0, memory=1.0, expert=1.0)
        self.target = RooflineTiming(deployment, peaks, engine=engine)
        self.drafter = RooflineTiming(replace(deployment, model=draft_model(deployment.model)), peaks, engine=engine)
        self.drafts = drafts

    def work_ns(self, sums: PassSums) -> np.ndarray:
        compute, memory = self.target.work_seconds(sums)
        seconds = compute + memory
        compute, memory = self.drafter.work_seconds(stacked_draft_sums(sums, self.drafts))
        drafted = compute + memory
        n = len(sums.table)
        seconds = seconds + drafted[:n]
        if self.drafts > 1:
            seconds = seconds + (self.drafts - 1) * drafted[n:]
        return np.rint(seconds * 1e9).astype(np.int64)
