"""A loop-based reference of the roofline model, written independently of the vectorized one.

It walks every rank and every sequence in plain Python; tests require the vectorized model to equal it.
"""

from __future__ import annotations

import math

from simmodel.perf.deployment import Deployment
from simmodel.perf.roofline import Efficiency, HostOverhead


def price_pass_reference(d: Deployment, eff: Efficiency, host: HostOverhead, ranks: list[list[tuple]]) -> list[float]:
    """Seconds per rank. ``ranks[r]`` lists ``(new_tokens, context_tokens, is_decode, samples)``."""
    m, hw = d.model, d.hardware
    tp, act, wb = d.tensor, d.activation_bytes, d.weight_bytes
    L, h, V = m.num_layers, m.hidden_size, m.vocab_size
    hbm = eff.memory * hw.hbm_bytes_per_s
    peak_lin = eff.compute * (hw.fp8_flops if wb <= 1 else hw.bf16_flops)
    peak_att = eff.compute * hw.bf16_flops
    link = eff.link * hw.intra_node_bytes_per_s
    worker_tokens = sum(q for seqs in ranks for q, *_ in seqs)
    out = []
    for seqs in ranks:
        T = sum(s[0] for s in seqs)
        S = sum(1 for s in seqs if s[3])
        if T == 0 and not (m.is_moe and worker_tokens):
            out.append(0.0)
            continue
        dense_params = L * m.attention_params + m.num_dense_layers * m.dense_mlp_params
        lin_flops = 2 * dense_params / tp * T
        lin_bytes = (dense_params / tp * wb if T else 0.0) + T * 8 * L * h * act
        if m.is_moe and worker_tokens:
            per_token = m.num_moe_layers * ((m.num_experts_per_token + m.num_shared_experts) * m.expert_params
                                            + h * m.num_experts)
            gpus = d.moe_tensor * d.moe_expert
            lin_flops += 2 * per_token * worker_tokens / gpus
            miss = (1 - m.num_experts_per_token / m.num_experts) ** worker_tokens
            touched = m.num_experts / d.moe_expert * (1 - miss)
            lin_bytes += touched * m.num_moe_layers * m.expert_params / d.moe_tensor * wb
            lin_bytes += m.num_moe_layers * (m.num_shared_experts * m.expert_params + h * m.num_experts) / gpus * wb
        total = max(lin_flops / peak_lin, lin_bytes / hbm)
        heads = m.num_attention_heads / tp
        width = m.qk_head_dim + m.value_head_dim
        att_flops = att_bytes = 0.0
        for q, c, _, _ in seqs:
            pairs = sum(c + j for j in range(1, q + 1))
            att_flops += 2 * L * heads * width * pairs
            att_bytes += (c + q) * d.kv_bytes_per_token_per_gpu + q * L * heads * width * act
        total += max(att_flops / peak_att, att_bytes / hbm)
        total += T * d.kv_bytes_per_token_per_gpu / hbm
        if S:
            total += max(2 * h * V / tp * S / peak_lin, (h * V / tp * wb + S * V / tp * 4) / hbm)
            total += S * 3 * V * 4 / hbm
        total += T * 16 * L * h * act / hbm
        if tp > 1 and T:
            for _ in range(2 * L):
                total += hw.intra_node_latency_s + T * h * act * 2 * (tp - 1) / tp / link
        ep = d.moe_expert
        if m.is_moe and ep > 1 and T:
            for _ in range(2 * m.num_moe_layers):
                total += (ep - 1) * hw.intra_node_latency_s + T * m.num_experts_per_token * h * act * (ep - 1) / ep / link
        if T:
            kinds = {bool(s[2]) for s in seqs}
            ms = host.mixed_ms if kinds == {True, False} else (host.decode_ms if kinds == {True} else host.prefill_ms)
            total += ms / 1000 + L * host.per_layer_us * 1e-6
        out.append(total)
    assert all(math.isfinite(x) for x in out)
    return out
