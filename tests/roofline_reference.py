"""A loop-based reference of the roofline model, written independently of the vectorized one.

It walks every rank and every sequence in plain Python; tests require the vectorized model to equal it.
"""

from __future__ import annotations

import math

from simmodel.perf.deployment import Deployment
from simmodel.perf.roofline import ALL_REDUCE, Efficiency, HostOverhead


def price_pass_reference(d: Deployment, eff: Efficiency, host: HostOverhead, ranks: list[list[tuple]],
                         engine: str = "vllm") -> list[float]:
    """Seconds per rank. ``ranks[r]`` lists ``(new_tokens, context_tokens, is_decode, samples)``."""
    m, hw = d.model, d.hardware
    tp, act, wb = d.tensor, d.activation_bytes, d.weight_bytes
    L, h, V = m.num_layers, m.hidden_size, m.vocab_size
    hbm = eff.memory * hw.hbm_bytes_per_s
    block = wb <= 1 and m.weight_block_size > 0  # block-scaled FP8: the BF16 rate, a floor per GEMM
    peak_lin = eff.compute * (hw.fp8_flops if wb <= 1 and not block else hw.bf16_flops)
    peak_att = eff.compute * hw.bf16_flops
    eb = max(wb, act)  # embeddings and LM head stay 16-bit under FP8 weights
    peak_head = eff.compute * (hw.fp8_flops if eb <= 1 else hw.bf16_flops)

    def link(group):
        def inside(n):  # over the GPU link: the system's measured step latency and fraction, if any
            fraction, latency = 0.72, hw.intra_node_latency_s
            measured = ALL_REDUCE[engine].get(hw.system_id, {}) if hw.registry else {}
            sizes = sorted(measured)
            for lo, hi in zip(sizes, sizes[1:]):  # between two measured group sizes: the straight line
                if lo <= n <= hi:
                    share = (n - lo) / (hi - lo)
                    latency = (measured[lo][0] + share * (measured[hi][0] - measured[lo][0])) * 1e-6
                    fraction = measured[lo][1] + share * (measured[hi][1] - measured[lo][1])
            if sizes and n >= sizes[-1]:
                latency, fraction = measured[sizes[-1]][0] * 1e-6, measured[sizes[-1]][1]
            if sizes and n <= sizes[0]:
                latency, fraction = measured[sizes[0]][0] * 1e-6, measured[sizes[0]][1]
            if eff.link is not None:
                fraction = eff.link
            return fraction * hw.intra_node_bytes_per_s, latency

        if group <= hw.gpus_per_node:
            bw, lat = inside(group)
        else:  # a ring across nodes, as slow as its slowest hop: the NIC or a whole node's link
            bw, lat = (0.72 if eff.link is None else eff.link) * hw.nic_bytes_per_s, 10e-6
            if hw.gpus_per_node > 1:
                node_bw, node_lat = inside(hw.gpus_per_node)
                bw, lat = min(bw, node_bw), max(lat, node_lat)
        if host.collective_us is not None:
            lat = host.collective_us * 1e-6
        return bw, lat
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
        total = max(lin_flops / peak_lin, lin_bytes / hbm)
        if m.is_moe and worker_tokens:
            per_token = m.num_moe_layers * ((m.num_experts_per_token + m.num_shared_experts) * m.expert_params
                                            + h * m.num_experts)
            gpus = d.moe_tensor * d.moe_expert
            xb = d.expert_bytes
            routed = m.num_moe_layers * m.num_experts_per_token * m.expert_params
            moe_flops = 2 * per_token * worker_tokens / gpus
            hit = 1 - (1 - m.num_experts_per_token / m.num_experts) ** worker_tokens
            n = m.num_experts // d.moe_expert
            # the busiest of the expert-parallel GPUs: E[max] = sum over x of P(max > x) = 1 − P(every GPU ≤ x)
            cdf, touched = 0.0, 0.0
            for x in range(n):
                cdf += math.comb(n, x) * hit ** x * (1 - hit) ** (n - x)
                touched += 1 - min(cdf, 1.0) ** d.moe_expert
            moe_bytes = touched * m.num_moe_layers * m.expert_params / d.moe_tensor * xb
            moe_bytes += m.num_moe_layers * (m.num_shared_experts * m.expert_params + h * m.num_experts) / gpus * xb
            dtype_peak = hw.fp8_flops if xb <= 1 and not block else hw.bf16_flops
            routed_flops = 2 * routed * worker_tokens / gpus  # grouped GEMMs; the shared experts and router dense
            compute = routed_flops / (eff.expert * dtype_peak) + (moe_flops - routed_flops) / (eff.compute * dtype_peak)
            total += max(compute, moe_bytes / hbm) + m.num_moe_layers * host.moe_layer_us * 1e-6
        heads = m.num_attention_heads / tp
        width = m.qk_head_dim + m.value_head_dim
        att_flops = att_bytes = 0.0
        for q, c, decode, _ in seqs:
            pairs = sum(c + j for j in range(1, q + 1))
            w = 2 * m.kv_lora_rank + m.qk_rope_head_dim if (m.is_mla and decode) else width
            att_flops += 2 * L * heads * w * pairs
            att_bytes += (c + q) * d.kv_bytes_per_token_per_gpu + q * L * heads * width * act
        total += max(att_flops / peak_att, att_bytes / hbm)
        total += T * d.kv_bytes_per_token_per_gpu / hbm
        if S:
            total += max(2 * h * V / tp * S / peak_head, (h * V / tp * eb + S * V / tp * 4) / hbm)
            total += S * 3 * V * 4 / hbm
        total += T * 16 * L * h * act / hbm
        if tp > 1 and T:
            bw, lat = link(tp)
            message = T * h * act
            for _ in range(2 * L):
                if tp > hw.gpus_per_node:  # a ring over the NIC
                    total += lat + message * 2 * (tp - 1) / tp / bw
                else:  # vLLM's custom all-reduce: one-shot or two-shot, the faster
                    one_shot = lat + message * (tp - 1) / bw
                    two_shot = 2 * lat + message * 2 * (tp - 1) / tp / bw
                    total += one_shot if one_shot <= two_shot else two_shot
        ep, dp = d.moe_expert, d.attention_data
        if m.is_moe and worker_tokens and dp > 1:  # without attention DP every GPU holds every token
            bw, lat = link(tp * dp)
            for _ in range(2 * m.num_moe_layers):
                if ep > 1:
                    total += lat + T * m.num_experts_per_token * h * act * (ep - 1) / ep / bw
                else:
                    total += lat + worker_tokens * h * act * (dp - 1) / dp / bw
        if T:
            kinds = {bool(s[2]) for s in seqs}
            ms = host.mixed_ms if kinds == {True, False} else (host.decode_ms if kinds == {True} else host.prefill_ms)
            total += ms / 1000 + L * host.per_layer_us * 1e-6
            if block:
                for layer in range(L):
                    gemms = 3 if m.is_mla else 2
                    if layer < m.first_dense_layers or not m.is_moe:
                        gemms += 2
                    else:
                        gemms += 2 + (2 if m.num_shared_experts else 0)
                    total += gemms * host.block_fp8_gemm_us * 1e-6
        out.append(total)
    assert all(math.isfinite(x) for x in out)
    return out
