"""The default GPU performance model: a roofline per kernel group, priced for every rank at once.

Each group of kernels costs max(FLOPs / (compute efficiency × peak FLOP/s), bytes / (memory efficiency
× HBM bandwidth)), from per-sequence vectors of new (query) tokens and context lengths, never from
totals alone. Groups (as in the reference's "Kernel groups and roofline floors"):

- ``linear``: every GEMM a token runs through — q/k/v/o (or MLA's projections), the gated MLP's three
  projections or the active experts' — 2 FLOPs per weight per token; bytes are the weights the GPU
  reads (for MoE, the experts the batch is expected to touch) plus 8 activation passes per layer;
- ``attention``: QKᵀ and AV over each sequence's causal span, 2·heads·(qk + v head dims) FLOPs per
  query·key pair per layer; bytes are the KV the sequence reads plus its queries and outputs;
- ``kv_write``: the new tokens' K and V; ``lm_head`` and ``sampler``: only sequences that sample this
  pass; ``elementwise``: norms, rotary, activations, residuals, 16 passes over the hidden state a layer;
- ``communication``: tensor parallelism's two all-reduces per layer and expert parallelism's two
  all-to-alls per MoE layer, priced on the intra-node link;
- ``host``: a per-pass CPU overhead by pass kind (prefill, decode, mixed), an assumed constant.

Pure and vectorized: arrays in, arrays out, no Python loop over sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simmodel.perf.deployment import Deployment
from simmodel.perf.timing import PassBatch, PassCost

GROUPS = ("linear", "attention", "kv_write", "lm_head", "sampler", "elementwise", "communication", "host")
PROVENANCE = ("extrapolated:roofline", "assumed-host")

LINEAR_ACTIVATION_PASSES = 8
ELEMENTWISE_PASSES = 16
SAMPLER_PASSES = 3  # read fp32 logits, softmax/top-k, sample
LOGIT_BYTES = 4


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Fractions of datasheet peaks that kernels reach. Named assumptions, overridable in the scenario
    (``timing: {type: default, compute_efficiency, memory_efficiency, ...}``)."""

    compute: float = 0.7
    memory: float = 0.8
    link: float = 0.8


@dataclass(frozen=True, slots=True)
class HostOverhead:
    """CPU time per pass (scheduling, input preparation, launches, output processing), by pass kind."""

    prefill_ms: float = 2.0
    decode_ms: float = 1.0
    mixed_ms: float = 2.0


class RooflineTiming:
    """Prices one pass of every rank of a worker from its ``PassBatch`` (see the module docstring)."""

    def __init__(self, deployment: Deployment, efficiency: Efficiency = Efficiency(),
                 host: HostOverhead = HostOverhead()) -> None:
        d, m, hw = deployment, deployment.model, deployment.hardware
        self.deployment, self.efficiency, self.host = d, efficiency, host
        self.num_ranks = d.attention_data
        self.linear_peak = efficiency.compute * hw.peak_flops(d.weight_bytes)
        self.attention_peak = efficiency.compute * hw.bf16_flops
        self.hbm = efficiency.memory * hw.hbm_bytes_per_s
        self.link = efficiency.link * hw.intra_node_bytes_per_s
        tp, act = d.tensor, d.activation_bytes
        layers, h = m.num_layers, m.hidden_size
        # Per token, per GPU of the rank: dense GEMM FLOPs (attention projections and dense MLPs).
        self.dense_flops_per_token = 2 * (layers * m.attention_params + m.num_dense_layers * m.dense_mlp_params) / tp
        self.dense_weight_bytes = (layers * m.attention_params + m.num_dense_layers * m.dense_mlp_params) / tp * d.weight_bytes
        self.activation_bytes_per_token = LINEAR_ACTIVATION_PASSES * layers * h * act
        # Mixture of experts: each token runs top-k routed experts and the shared ones, spread over the
        # worker's moe_tensor × moe_expert GPUs; the router is a small replicated GEMM.
        self.moe_flops_per_token = 2 * m.num_moe_layers * (
            (m.num_experts_per_token + m.num_shared_experts) * m.expert_params + h * m.num_experts)
        self.moe_gpus = d.moe_tensor * d.moe_expert
        self.experts_per_gpu = m.num_experts / d.moe_expert if m.is_moe else 0.0
        self.expert_bytes_per_gpu = m.num_moe_layers * m.expert_params / d.moe_tensor * d.weight_bytes
        self.shared_bytes_per_gpu = (m.num_moe_layers * (m.num_shared_experts * m.expert_params + h * m.num_experts)
                                     / self.moe_gpus * d.weight_bytes)
        self.route_fraction = m.num_experts_per_token / m.num_experts if m.is_moe else 0.0
        # Attention: per query·key pair and layer, QKᵀ and AV over the GPU's heads.
        self.attention_flops_per_pair = 2 * layers * (m.num_attention_heads / tp) * (m.qk_head_dim + m.value_head_dim)
        self.query_bytes_per_token = layers * (m.num_attention_heads / tp) * (m.qk_head_dim + m.value_head_dim) * act
        self.kv_bytes_per_token = d.kv_bytes_per_token_per_gpu
        # Output: the LM head's vocabulary shard, and sampling over the whole vocabulary.
        self.lm_head_flops_per_seq = 2 * h * m.vocab_size / tp
        self.lm_head_weight_bytes = h * m.vocab_size / tp * d.weight_bytes
        self.logit_bytes_per_seq = m.vocab_size / tp * LOGIT_BYTES
        self.sampler_bytes_per_seq = SAMPLER_PASSES * m.vocab_size * LOGIT_BYTES
        self.elementwise_bytes_per_token = ELEMENTWISE_PASSES * layers * h * act
        # Collectives: ring all-reduce moves 2(n−1)/n of the message and takes 2(n−1) latency steps.
        self.num_all_reduces = 2 * layers if tp > 1 else 0
        self.all_reduce_bytes_per_token = h * act * 2 * (tp - 1) / tp
        self.all_reduce_latency_s = 2 * (tp - 1) * hw.intra_node_latency_s
        ep = d.moe_expert
        self.num_all_to_alls = 2 * m.num_moe_layers if ep > 1 else 0
        self.all_to_all_bytes_per_token = m.num_experts_per_token * h * act * (ep - 1) / ep
        self.all_to_all_latency_s = (ep - 1) * hw.intra_node_latency_s

    def _roof(self, flops: np.ndarray | float, nbytes: np.ndarray, peak: float) -> np.ndarray:
        return np.maximum(np.asarray(flops) / peak, nbytes / self.hbm)

    def breakdown(self, batch: PassBatch) -> dict[str, np.ndarray]:
        """Seconds per kernel group and rank (the groups of ``GROUPS``)."""
        n, rank = batch.num_ranks, batch.rank
        q = batch.num_new_tokens.astype(np.float64)
        c = batch.num_context_tokens.astype(np.float64)

        def per_rank(values) -> np.ndarray:
            return np.bincount(rank, weights=values, minlength=n)

        tokens = per_rank(q)
        samples = per_rank(batch.samples.astype(np.float64))
        busy = (tokens > 0).astype(np.float64)
        pairs = per_rank(q * c + q * (q + 1) / 2)  # causal: new token j sees c + j keys
        span = per_rank(c + q)

        linear_flops = tokens * self.dense_flops_per_token
        linear_bytes = busy * self.dense_weight_bytes + tokens * self.activation_bytes_per_token
        if self.moe_flops_per_token and tokens.sum() > 0:
            # Experts serve the whole worker's tokens (expert parallelism spans the DP group), so even a
            # rank with no sequences of its own runs its share; expected distinct experts hit among this
            # GPU's: E_gpu · (1 − (1 − k/E)^tokens).
            worker_tokens = tokens.sum()
            linear_flops = linear_flops + worker_tokens * self.moe_flops_per_token / self.moe_gpus
            touched = self.experts_per_gpu * -np.expm1(worker_tokens * np.log1p(-self.route_fraction))
            linear_bytes = linear_bytes + touched * self.expert_bytes_per_gpu + self.shared_bytes_per_gpu
        groups = {
            "linear": self._roof(linear_flops, linear_bytes, self.linear_peak),
            "attention": self._roof(pairs * self.attention_flops_per_pair,
                                    span * self.kv_bytes_per_token + tokens * self.query_bytes_per_token,
                                    self.attention_peak),
            "kv_write": tokens * self.kv_bytes_per_token / self.hbm,
            "lm_head": self._roof(samples * self.lm_head_flops_per_seq,
                                  (samples > 0) * self.lm_head_weight_bytes + samples * self.logit_bytes_per_seq,
                                  self.linear_peak),
            "sampler": samples * self.sampler_bytes_per_seq / self.hbm,
            "elementwise": tokens * self.elementwise_bytes_per_token / self.hbm,
        }
        comm = self.num_all_reduces * (busy * self.all_reduce_latency_s
                                       + tokens * self.all_reduce_bytes_per_token / self.link)
        if self.num_all_to_alls:
            comm = comm + self.num_all_to_alls * (busy * self.all_to_all_latency_s
                                                  + tokens * self.all_to_all_bytes_per_token / self.link)
        groups["communication"] = comm
        decode = per_rank(batch.is_decode.astype(np.float64))
        prefill = per_rank((~batch.is_decode).astype(np.float64))
        host = np.where(prefill > 0, np.where(decode > 0, self.host.mixed_ms, self.host.prefill_ms), self.host.decode_ms)
        groups["host"] = busy * host / 1000.0
        return groups

    def price(self, batch: PassBatch) -> PassCost:
        groups = self.breakdown(batch)
        return PassCost(sum(groups.values()), PROVENANCE)
