"""The default GPU performance model: a roofline per kernel group, priced for every rank at once.

Each group of kernels costs max(FLOPs / (compute efficiency × peak FLOP/s), bytes / (memory efficiency
× HBM bandwidth)), from per-sequence vectors of new (query) tokens and context lengths, never from
totals alone. Groups (as in the reference's "Kernel groups and roofline floors"):

- ``linear``: every GEMM a token runs through — q/k/v/o (or MLA's projections), the gated MLP's three
  projections or the active experts' — 2 FLOPs per weight per token; bytes are the weights the GPU
  reads (for MoE, the experts the batch is expected to touch) plus 8 activation passes per layer;
- ``attention``: QKᵀ and AV over each sequence's causal span, 2·heads·(qk + v head dims) FLOPs per
  query·key pair per layer (MLA decodes in the absorbed form: 2·heads·(2·kv_lora_rank + rope dim));
  bytes are the KV the sequence reads plus its queries and outputs;
- ``kv_write``: the new tokens' K and V; ``lm_head`` and ``sampler``: only sequences that sample this
  pass; ``elementwise``: norms, rotary, activations, residuals, 16 passes over the hidden state a layer;
- ``communication``: tensor parallelism's two all-reduces per layer and the MoE token exchange (two per
  MoE layer), priced on the GPU link inside a node and on the NIC for groups larger than a node;
- ``layer_overhead``: a fixed GPU time per layer and pass: the latency floors of a layer's many small
  kernels (norms, rotary, activation, attention set-up), which their rooflines price at almost nothing;
- ``host``: a per-pass overhead by pass kind (prefill, decode, mixed), an assumed constant.

Pure and vectorized: arrays in, arrays out, no Python loop over sequences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simmodel.perf.deployment import Deployment
from simmodel.perf.hardware import HardwareSpec
from simmodel.perf.timing import PassBatch, PassCost

GROUPS = ("linear", "attention", "kv_write", "lm_head", "sampler", "elementwise", "communication", "layer_overhead",
          "host")
PROVENANCE = ("extrapolated:roofline", "assumed-host")

LINEAR_ACTIVATION_PASSES = 8
ELEMENTWISE_PASSES = 16
SAMPLER_PASSES = 3  # read fp32 logits, softmax/top-k, sample
LOGIT_BYTES = 4


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Fractions of datasheet peaks that kernels reach. Named assumptions, overridable in the scenario
    (``timing: {type: default, compute_efficiency, memory_efficiency, ...}``)."""

    compute: float = 0.76
    memory: float = 0.86
    link: float = 0.72


@dataclass(frozen=True, slots=True)
class HostOverhead:
    """Fixed time per pass, by pass kind, and per layer; marked ``assumed-host`` in provenance.

    Calibrated against aiconfigurator's measured kernel tables (docs/accuracy.md), which price GPU
    kernels only: these constants are the fixed GPU time of a pass (launch and small-kernel floors).
    A deployment whose CPU adds time between passes sets its own values in ``timing.host_overhead_ms``.
    """

    prefill_ms: float = 0.86
    decode_ms: float = 0.0
    mixed_ms: float = 0.86
    per_layer_us: float = 35.4
    """Fixed GPU time each layer adds to a pass (small-kernel latency floors)."""


INTER_NODE_LATENCY_S = 10e-6  # assumed: one collective step over the NIC (RDMA)


def _link(hw: HardwareSpec, efficiency: Efficiency, group: int) -> tuple[float, float]:
    """Bandwidth and latency of a collective among ``group`` GPUs: the GPU link inside a node, else the NIC."""
    if group <= hw.gpus_per_node:
        return efficiency.link * hw.intra_node_bytes_per_s, hw.intra_node_latency_s
    return efficiency.link * hw.nic_bytes_per_s, INTER_NODE_LATENCY_S


class RooflineTiming:
    """Prices one pass of every rank of a worker from its ``PassBatch`` (see the module docstring)."""

    def __init__(self, deployment: Deployment, efficiency: Efficiency = Efficiency(),
                 host: HostOverhead = HostOverhead()) -> None:
        d, m, hw = deployment, deployment.model, deployment.hardware
        self.deployment, self.efficiency, self.host = d, efficiency, host
        self.num_ranks = d.attention_data
        self.layer_overhead_s = m.num_layers * host.per_layer_us * 1e-6
        self.linear_peak = efficiency.compute * hw.peak_flops(d.weight_bytes)
        self.attention_peak = efficiency.compute * hw.bf16_flops
        self.hbm = efficiency.memory * hw.hbm_bytes_per_s
        tp, act = d.tensor, d.activation_bytes
        layers, h = m.num_layers, m.hidden_size
        # Per token, per GPU of the rank: dense GEMM FLOPs (attention projections and dense MLPs).
        self.dense_flops_per_token = 2 * (layers * m.attention_params + m.num_dense_layers * m.dense_mlp_params) / tp
        self.dense_weight_bytes = (layers * m.attention_params + m.num_dense_layers * m.dense_mlp_params) / tp * d.weight_bytes
        self.activation_bytes_per_token = LINEAR_ACTIVATION_PASSES * layers * h * act
        # Mixture of experts: each token runs top-k routed experts and the shared ones, spread over the
        # worker's moe_tensor × moe_expert GPUs (the small router GEMM is spread with them).
        self.moe_flops_per_token = 2 * m.num_moe_layers * (
            (m.num_experts_per_token + m.num_shared_experts) * m.expert_params + h * m.num_experts)
        self.moe_gpus = d.moe_tensor * d.moe_expert
        self.experts_per_gpu = m.num_experts / d.moe_expert if m.is_moe else 0.0
        self.expert_bytes_per_gpu = m.num_moe_layers * m.expert_params / d.moe_tensor * d.weight_bytes
        self.shared_bytes_per_gpu = (m.num_moe_layers * (m.num_shared_experts * m.expert_params + h * m.num_experts)
                                     / self.moe_gpus * d.weight_bytes)
        self.route_fraction = m.num_experts_per_token / m.num_experts if m.is_moe else 0.0
        # Attention: per query·key pair and layer, QKᵀ and AV over the GPU's heads. MLA decodes in the
        # absorbed form (vLLM): QKᵀ over the latent and rotary part, AV over the latent.
        heads = m.num_attention_heads / tp
        self.attention_flops_per_pair = 2 * layers * heads * (m.qk_head_dim + m.value_head_dim)
        self.decode_attention_flops_per_pair = (
            2 * layers * heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim) if m.is_mla
            else self.attention_flops_per_pair)
        self.query_bytes_per_token = layers * (m.num_attention_heads / tp) * (m.qk_head_dim + m.value_head_dim) * act
        self.kv_bytes_per_token = d.kv_bytes_per_token_per_gpu
        # Output: the LM head's vocabulary shard, and sampling over the whole vocabulary.
        self.lm_head_flops_per_seq = 2 * h * m.vocab_size / tp
        self.lm_head_weight_bytes = h * m.vocab_size / tp * d.embedding_bytes
        self.lm_head_peak = efficiency.compute * hw.peak_flops(d.embedding_bytes)
        self.logit_bytes_per_seq = m.vocab_size / tp * LOGIT_BYTES
        self.sampler_bytes_per_seq = SAMPLER_PASSES * m.vocab_size * LOGIT_BYTES
        self.elementwise_bytes_per_token = ELEMENTWISE_PASSES * layers * h * act
        # Collectives: an all-reduce moves 2(n−1)/n of the message over the link; vLLM's custom
        # all-reduce inside a node (one- or two-shot over NVLink) has a latency nearly flat in n, so
        # each costs one link latency whatever the tensor size (measured kernels: ~4.4–5.1 µs, TP 2–8).
        # A group larger than one node goes over the NIC instead.
        self.num_all_reduces = 2 * layers if tp > 1 else 0
        self.all_reduce_bytes_per_token = h * act * 2 * (tp - 1) / tp
        self.all_reduce_link, self.all_reduce_latency_s = _link(hw, efficiency, tp)
        # MoE token exchange, two per MoE layer: expert parallelism sends each token's hidden state to its
        # top-k experts' GPUs and back (all-to-all); with tensor-sharded experts under attention DP, every
        # GPU gathers the other ranks' tokens and scatters the results (all-gather, reduce-scatter).
        ep, dp = d.moe_expert, d.attention_data
        self.num_exchanges = 2 * m.num_moe_layers if m.is_moe and (ep > 1 or dp > 1) else 0
        self.exchange_is_gather = ep == 1
        group = dp if ep == 1 else ep
        self.exchange_bytes_per_token = (1 if ep == 1 else m.num_experts_per_token) * h * act * (group - 1) / max(group, 1)
        self.exchange_link, self.exchange_latency_s = _link(hw, efficiency, d.tensor * dp)

    def _per_rank_sums(self, batch: PassBatch) -> np.ndarray:
        """Per rank: new tokens, prefill causal query·key pairs, KV span, sampling, decode and prefill
        sequences, decode query·key pairs."""
        q = batch.num_new_tokens.astype(np.float64)
        c = batch.num_context_tokens.astype(np.float64)
        decode = batch.is_decode.astype(np.float64)
        pairs = q * c + q * (q + 1) / 2
        cols = np.stack([q, pairs * (1.0 - decode), c + q, batch.samples.astype(np.float64), decode, 1.0 - decode,
                         pairs * decode])
        if batch.num_ranks == 1:
            return cols.sum(axis=1)[None, :]
        onehot = np.zeros((len(q), batch.num_ranks))
        onehot[np.arange(len(q)), batch.rank] = 1.0
        return (cols @ onehot).T

    def breakdown(self, batch: PassBatch) -> dict[str, np.ndarray]:
        """Seconds per kernel group and rank (the groups of ``GROUPS``)."""
        table = self._table(batch)
        return {name: table[:, i] for i, name in enumerate(GROUPS)}

    def _table(self, batch: PassBatch) -> np.ndarray:
        """Seconds, one row per rank and one column per group of ``GROUPS``.

        Per-sequence work is summed per rank with numpy; the few formulas per rank then run on floats.
        """
        sums = self._per_rank_sums(batch)
        worker_tokens = float(sums[:, 0].sum())
        moe_flops = moe_bytes = 0.0
        if self.moe_flops_per_token and worker_tokens > 0:
            # Experts serve the whole worker's tokens (expert parallelism spans the DP group), so even a
            # rank with no sequences of its own runs its share; expected distinct experts hit among this
            # GPU's: E_gpu · (1 − (1 − k/E)^tokens).
            moe_flops = worker_tokens * self.moe_flops_per_token / self.moe_gpus
            touched = self.experts_per_gpu * -math.expm1(worker_tokens * math.log1p(-self.route_fraction))
            moe_bytes = touched * self.expert_bytes_per_gpu + self.shared_bytes_per_gpu
        hbm, lin_peak = self.hbm, self.linear_peak
        rows = []
        for tokens, pairs, span, samples, decodes, prefills, decode_pairs in sums.tolist():
            busy = tokens > 0
            linear = max((tokens * self.dense_flops_per_token + moe_flops) / lin_peak,
                          ((self.dense_weight_bytes if busy else 0.0) + tokens * self.activation_bytes_per_token
                           + moe_bytes) / hbm)
            attention_flops = pairs * self.attention_flops_per_pair + decode_pairs * self.decode_attention_flops_per_pair
            attention = max(attention_flops / self.attention_peak,
                            (span * self.kv_bytes_per_token + tokens * self.query_bytes_per_token) / hbm)
            lm_head = max(samples * self.lm_head_flops_per_seq / self.lm_head_peak,
                          ((self.lm_head_weight_bytes if samples else 0.0) + samples * self.logit_bytes_per_seq) / hbm)
            comm = 0.0
            if busy:
                comm = self.num_all_reduces * (self.all_reduce_latency_s + tokens * self.all_reduce_bytes_per_token
                                               / self.all_reduce_link)
            if self.num_exchanges and worker_tokens > 0:
                moved = worker_tokens if self.exchange_is_gather else tokens
                comm += self.num_exchanges * (self.exchange_latency_s + moved * self.exchange_bytes_per_token
                                              / self.exchange_link)
            host_ms = (self.host.mixed_ms if decodes else self.host.prefill_ms) if prefills else self.host.decode_ms
            rows.append((linear, attention, tokens * self.kv_bytes_per_token / hbm, lm_head,
                         samples * self.sampler_bytes_per_seq / hbm, tokens * self.elementwise_bytes_per_token / hbm,
                         comm, self.layer_overhead_s if busy else 0.0, host_ms / 1000.0 if busy else 0.0))
        return np.array(rows, dtype=np.float64).reshape(len(rows), len(GROUPS))

    def price(self, batch: PassBatch) -> PassCost:
        return PassCost(self._table(batch).sum(axis=1), PROVENANCE)
