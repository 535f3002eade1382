"""The default GPU performance model: a roofline per kernel group, priced for every rank at once.

Each group of kernels costs max(FLOPs / (compute efficiency × peak FLOP/s), bytes / (memory efficiency
× HBM bandwidth)), from per-rank totals of per-sequence work (``PassSums``: each sequence's
query·key pairs come from its own new and context tokens), never from token totals alone. Groups (as in the reference's "Kernel groups and roofline floors"):

- ``linear``: the dense GEMMs a token runs through — q/k/v/o (or MLA's projections), the gated MLP's three
  projections — 2 FLOPs per weight per token; bytes are the weights the GPU reads plus 8 activation
  passes per layer;
- ``experts`` (MoE models): the routed experts' grouped GEMMs at their own efficiency, the shared experts
  and the router at the dense one; bytes are the experts the batch is expected to touch on the busiest
  GPU (expert parallelism) plus the shared ones; a fixed time per MoE layer;
- ``attention``: QKᵀ and AV over each sequence's causal span, 2·heads·(qk + v head dims) FLOPs per
  query·key pair per layer (MLA decodes in the absorbed form: 2·heads·(2·kv_lora_rank + rope dim));
  bytes are the KV the sequence reads plus its queries and outputs;
- ``kv_write``: the new tokens' K and V; ``lm_head`` and ``sampler``: only sequences that sample this
  pass; ``elementwise``: norms, rotary, activations, residuals, 16 passes over the hidden state a layer;
- ``communication``: tensor parallelism's two all-reduces per layer and, under attention DP, the MoE token
  exchange (two per MoE layer): the all-reduces one- or two-shot, as the engines' custom all-reduces run
  them (``all_reduce_seconds``), an exchange one step, at the step latency and link fraction the engine's
  all-reduce was measured to reach on the GPU system for that group size (``ALL_REDUCE``) inside a node,
  and over the NIC for groups larger than a node;
- ``layer_overhead``: a fixed GPU time per layer and pass: the latency floors of a layer's many small
  kernels (norms, rotary, activation, attention set-up), which their rooflines price at almost nothing,
  and each block-scaled FP8 GEMM's floor (whose GEMMs run at the BF16 rate);
- ``host``: a per-pass overhead by pass kind (prefill, decode, mixed), an assumed constant.

Outside the passes, the default timing also sets the frontend's time per request (``REQUEST_OVERHEAD_MS``),
which the engine adds between a client sending a request and the deployment receiving it.

Pure and vectorized: arrays in, arrays out, no Python loop over sequences or ranks.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from simmodel.perf.deployment import Deployment
from simmodel.perf.hardware import HardwareSpec
from simmodel.perf.timing import (
    CONTEXT_TOKENS,
    NEW_TOKENS,
    PAIRS,
    SAMPLED,
    SEQUENCES,
    PassBatch,
    PassSums,
    SumsTiming,
    pass_sums,
)

GROUPS = ("linear", "experts", "attention", "kv_write", "lm_head", "sampler", "elementwise", "communication", "layer_overhead",
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

    compute: float = 0.78
    memory: float = 0.85
    link: float | None = None
    """Fraction of the GPU link's per-direction bandwidth a collective's bytes reach: None takes the engine's
    all-reduce as measured on the GPU system for the group's size (``ALL_REDUCE``), else ``LINK_EFFICIENCY``."""
    expert: float = 0.22
    """Fraction of the experts' dtype peak that the grouped GEMMs of MoE experts reach (many small GEMMs, one
    per expert, each as thin as the expert's slice on the GPU)."""


ACHIEVED: dict[str, tuple[float, float]] = {
    "a100_sxm": (0.78, 0.70),
    "b200_sxm": (0.65, 0.84),
    "gb200": (0.57, 0.84),
    "l40s": (0.61, 0.80),
}
"""Per GPU system: the compute and memory fractions of its datasheet peaks that its kernels reach, fitted on
AIConfigurator's measured vLLM kernels of that GPU (``benchmarks/gpu_accuracy.py``, docs/accuracy.md); the
default ``Efficiency`` (fitted on H100) for the others. A scenario's own ``compute_efficiency`` /
``memory_efficiency`` (or its calibration's) replace them."""

LINK_EFFICIENCY = 0.72
"""The fraction of the link's per-direction bandwidth a collective's bytes reach where its GPU system's
all-reduce was not measured (``ALL_REDUCE``: mi300x, a system file) and over the NIC: the H100 kernel
tables' large-message fraction (an earlier fit of docs/accuracy.md)."""

ALL_REDUCE: dict[str, dict[str, dict[int, tuple[float, float]]]] = {
    "vllm": {
        "a100_sxm": {2: (5.1, 0.58), 4: (5.5, 0.62), 8: (6.2, 0.63)},
        "b200_sxm": {2: (7.1, 0.39), 4: (7.3, 0.52), 8: (7.7, 0.65)},
        "gb200": {2: (5.1, 0.20), 4: (5.3, 0.51)},
        "h100_sxm": {2: (4.2, 0.52), 4: (4.6, 0.66), 8: (5.0, 0.80)},
        "h200_sxm": {2: (4.4, 0.55), 4: (4.6, 0.69), 8: (4.9, 0.85)},
        "l40s": {2: (5.4, 0.60), 4: (7.0, 0.12), 8: (9.9, 0.06)},
    },
    "sglang": {
        "a100_sxm": {2: (5.3, 0.60), 4: (5.6, 0.64), 8: (6.2, 0.66)},
        "b200_sxm": {2: (4.3, 0.53), 4: (4.8, 0.62), 8: (5.1, 0.58)},
        "gb200": {2: (4.1, 0.53), 4: (4.4, 0.62)},
        "h100_sxm": {2: (2.6, 0.66), 4: (2.8, 0.69), 8: (3.4, 0.66)},
        "h200_sxm": {2: (2.6, 0.66), 4: (2.8, 0.72), 8: (3.4, 0.67)},
        "l40s": {2: (5.4, 0.59), 4: (7.7, 0.12), 8: (11.0, 0.06)},
    },
    "trtllm": {
        "a100_sxm": {2: (4.5, 0.48), 4: (5.4, 0.57), 8: (7.2, 0.51)},
        "b200_sxm": {2: (4.8, 0.53), 4: (5.0, 0.59), 8: (5.5, 0.47)},
        "gb200": {2: (4.1, 0.52), 4: (4.7, 0.58)},
        "h100_sxm": {2: (2.8, 0.60), 4: (3.1, 0.64), 8: (3.4, 0.59)},
        "h200_sxm": {2: (2.7, 0.62), 4: (3.0, 0.65), 8: (3.4, 0.59)},
        "l40s": {2: (7.9, 0.60), 4: (10.2, 0.16), 8: (11.1, 0.05)},
    },
}
"""Per engine (``engine.backend``), GPU system and group size inside a node: (step latency in µs, fraction of
the link's per-direction bandwidth) of the engine's custom all-reduce, one-shot or two-shot
(``all_reduce_seconds``). Fitted on the BF16 all-reduces NVIDIA measured under vLLM and SGLang (in CUDA
graphs) for AIConfigurator (``benchmarks/data/aic_allreduce.csv``, ``benchmarks/allreduce_fit.py``) over
messages of 4 KB to 128 MB: vLLM on H100, median error 4.5 %, 3.2 % and 2.2 % at 2, 4 and 8 GPUs, where
one latency (5 µs), a ring's bytes and one fraction (0.72) for every size were 14 %, 10 % and 10 % off,
and up to 41 % short on the medium messages of decode passes. No single fraction fits L40S (PCIe, no
NVLink): vLLM's reaches 0.60 of its link at 2 GPUs, 0.06 at 8. TensorRT-LLM's come from the same kind of
tables: its ``AllReduce`` with the default AUTO strategy, in CUDA graphs, of TRT-LLM 1.3.0rc20 (A100's and
L40S's rows 1.0.0); on H100 median error 3.4 %, 6.8 % and 15.9 % at 2, 4 and 8 GPUs, the 8-GPU fit up to
47 % short on 256 KB–8 MB messages and 55 % long at 128 MB: no one latency and fraction follow that curve."""


@dataclass(frozen=True, slots=True)
class HostOverhead:
    """Fixed time per pass, by pass kind, and per layer; marked ``assumed-host`` in provenance.

    Calibrated against aiconfigurator's measured kernel tables (docs/accuracy.md), which price GPU
    kernels only: these constants are the fixed GPU time of a pass (launch and small-kernel floors).
    A deployment whose CPU adds time between passes sets its own values in ``timing.host_overhead_ms``.
    """

    prefill_ms: float = 0.79
    decode_ms: float = 0.09
    mixed_ms: float = 0.79
    per_layer_us: float = 31.5
    """Fixed GPU time each layer adds to a pass (small-kernel latency floors)."""
    collective_us: float | None = None
    """The latency of one step of a collective (each tensor-parallel all-reduce, two per layer, one step
    one-shot and two two-shot, and each MoE exchange, one step): None takes the GPU system's measured
    all-reduce's for the group size (``collective``), else the link's own from the hardware registry (5 µs
    over NVLink)."""
    moe_layer_us: float = 21.7
    """Fixed GPU time each MoE layer adds to a pass on top of ``per_layer_us`` (routing, top-k, the tokens'
    permutation to their experts and back, the grouped GEMMs' launch and tile floors)."""
    block_fp8_gemm_us: float = 19.7
    """Fixed GPU time each block-scaled FP8 GEMM adds to a pass (the per-group quantization of its
    activations and the kernel's floor): only checkpoints with block scales (DeepSeek-V3)."""


ENGINE_KERNELS: dict[str, tuple[Efficiency, HostOverhead]] = {
    "trtllm": (Efficiency(compute=0.75, memory=0.83),
               HostOverhead(prefill_ms=1.30, decode_ms=0.0, mixed_ms=1.30, per_layer_us=35.9)),
}
"""Per engine (``engine.backend``) whose kernels AIConfigurator measured apart, the default timing's efficiencies
and fixed GPU time per pass and layer in place of ``Efficiency()`` and ``HostOverhead()`` (fitted on its vLLM
kernels; SGLang's share them). TensorRT-LLM's: fitted the same way on AIConfigurator's TensorRT-LLM 1.3.0rc20
kernel tables of the same H100 grid points (``benchmarks/trtllm_fit.py`` on ``benchmarks/data/aic_grid_trtllm.csv``:
median error 2.3 % on the fit points, 3.1 % held out, against 3.4 % and 5.3 % with vLLM's constants, which run
about 5 % fast on TensorRT-LLM's slightly slower kernels); the decode constant fitted to its floor, 0, the
per-layer term taking it. A GPU system's ``ACHIEVED`` fractions still replace the efficiencies (fitted on vLLM's
kernels of that GPU: no TensorRT-LLM grid was fitted there); ``mixed_ms`` is ``prefill_ms``, as for vLLM."""


REQUEST_OVERHEAD_MS = 8.2
"""The frontend's time per request outside the passes (the API server's HTTP handling, tokenization and the
hand-over to the engine, detokenization and streaming the tokens back to the client), in ms, which the
default timing adds to every request's TTFT and E2E (``engine.request_overhead_ms``). Fitted with
``simmodel calibrate`` on the real vLLM 0.15.1 H100 runs of ``benchmarks/data/vllm_h100_e2e.json``
(``benchmarks/e2e_fit.py``; leave-one-model-out error in docs/accuracy.md)."""


INTER_NODE_LATENCY_S = 10e-6  # assumed: one collective step over the NIC (RDMA)


def collective(hw: HardwareSpec, efficiency: Efficiency, group: int, latency_us: float | None = None,
               engine: str = "vllm") -> tuple[float, float]:
    """Achieved bandwidth (bytes/s) and step latency (s) of one collective among ``group`` GPUs: a collective
    moving B bytes per GPU over the link in k steps takes k × latency + B / bandwidth (an all-reduce:
    ``all_reduce_seconds``; the MoE token exchange, one step).

    Inside a node, over the GPU link: a system whose all-reduce was measured under ``engine`` (``ALL_REDUCE``,
    the registry's own systems only) takes its latency and fraction for ``group`` GPUs, interpolated linearly between the
    measured group sizes (beyond the largest, the largest's); others the registry's link latency and
    ``LINK_EFFICIENCY``. A larger group runs a ring across nodes: over the NIC at ``LINK_EFFICIENCY`` of its
    bandwidth and 10 µs a step, but never faster than a whole node's own link (L40S's PCIe reduces slower
    than its NIC). ``efficiency.link`` and ``latency_us``, where set (a scenario's or a calibration's),
    replace the fractions and the latency. An ``engine`` not in ``ALL_REDUCE`` is refused (``ValueError``):
    every engine simmodel serves has its table."""
    if engine not in ALL_REDUCE:
        raise ValueError(f"no measured all-reduce for engine {engine!r} (engines: {', '.join(sorted(ALL_REDUCE))})")
    if group > hw.gpus_per_node:
        fraction = efficiency.link if efficiency.link is not None else LINK_EFFICIENCY
        bandwidth, latency_s = fraction * hw.nic_bytes_per_s, INTER_NODE_LATENCY_S
        if hw.gpus_per_node > 1:  # the ring also runs through each node's own GPU link: its slower hop sets the pace
            inside_bandwidth, inside_latency_s = collective(hw, efficiency, hw.gpus_per_node, engine=engine)
            bandwidth, latency_s = min(bandwidth, inside_bandwidth), max(latency_s, inside_latency_s)
    else:
        fraction, latency_s = LINK_EFFICIENCY, hw.intra_node_latency_s
        measured = ALL_REDUCE[engine].get(hw.system_id) if hw.registry else None
        if measured:
            sizes = sorted(measured)
            latency_s = float(np.interp(group, sizes, [measured[n][0] for n in sizes])) * 1e-6
            fraction = float(np.interp(group, sizes, [measured[n][1] for n in sizes]))
        if efficiency.link is not None:
            fraction = efficiency.link
        bandwidth = fraction * hw.intra_node_bytes_per_s
    if latency_us is not None:
        latency_s = latency_us * 1e-6
    return bandwidth, latency_s


def all_reduce_seconds(message_bytes, group: int, bandwidth: float, latency_s: float, inside_node: bool = True):
    """Seconds of one all-reduce of ``message_bytes`` (a number or an array) among ``group`` GPUs, whose link
    carries ``bandwidth`` bytes/s per GPU and direction and takes ``latency_s`` a step.

    Inside a node, the engine's custom all-reduce (vLLM's, SGLang's, TRT-LLM's): one-shot (one step, each GPU reads the other n − 1 GPUs' whole
    buffers: (n − 1) × M bytes) for small messages, two-shot (a reduce-scatter and an all-gather, two steps,
    2(n − 1)/n × M bytes) for large ones, switching where two-shot gets faster: the faster of the two. Among
    2 GPUs both move M bytes, so one-shot always. Over the NIC, a ring's bytes, 2(n − 1)/n × M, and one
    latency. An empty message costs nothing.
    """
    message = np.asarray(message_bytes, dtype=np.float64)
    two_shot = 2 * (group - 1) / group * message / bandwidth
    if inside_node:
        seconds = np.minimum(latency_s + (group - 1) * message / bandwidth, 2 * latency_s + two_shot)
    else:
        seconds = latency_s + two_shot
    seconds = np.where(message > 0, seconds, 0.0)
    return float(seconds) if seconds.ndim == 0 else seconds


WEIGHT_ONLY_COMPUTE = 0.92
"""What a weight-only GEMM (INT4, or FP4 on a GPU without FP4 units) reaches of the BF16 GEMMs' compute rate,
its weights dequantized in the kernel: AIConfigurator's A100 ``int4_wo`` GEMMs (TensorRT-LLM 1.0.0,
``a100_sxm/gemm/trtllm/1.0.0``) fitted with the roofline reach 0.73 of the BF16 peak where its BF16 GEMMs reach
0.79 (the 2,531 and the BF16 kernels of at least 20 µs at datasheet peaks; median error 14.3 %): 0.92. Weight-only
INT8 there, 0.97, and W8A8 (SmoothQuant) on the INT8 peak, 0.95, are taken as 1."""
FP4_COMPUTE = 0.6
"""What an FP4 GEMM reaches of the FP4 peak, relative to the fraction of the BF16 peak the BF16 GEMMs reach:
AIConfigurator's NVFP4 GEMMs (vLLM 0.24.0's FlashInfer CuTe-DSL kernel, ``b200_sxm`` and ``gb200``
``gemm/vllm/0.24.0``) fitted with the roofline reach 0.42 and 0.39 of the 9 and 10 PFLOP/s FP4 peaks where the
BF16 GEMMs of the same tables reach 0.68 and 0.69 (kernels of at least 20 µs; median error 14–16 %): 0.62 and 0.57."""


def weight_gemm_peak(d: Deployment, experts: bool = False) -> float:
    """The tensor-core rate the weights' GEMMs reach, before the compute efficiency: their format's peak
    (``Deployment.weight_kind``, ``HardwareSpec.gemm_peak``); BF16's for block-scaled FP8 checkpoints (dequantized
    in the kernel, as DeepSeek's run) and, scaled by ``WEIGHT_ONLY_COMPUTE``, for weight-only formats and for FP4
    on a GPU without FP4 units. ``experts``: the MoE experts' (a checkpoint that quantizes only them at ``auto``)."""
    hw = d.hardware
    if d.block_scaled:
        return hw.bf16_flops
    kind = d.expert_kind if experts else None
    if experts and d.weight_format is None and kind is None:
        return hw.peak_flops(d.expert_bytes)
    kind = kind or d.weight_kind
    peak = hw.gemm_peak(kind.gemm)
    if peak is None or kind.weight_only:
        return hw.bf16_flops * WEIGHT_ONLY_COMPUTE
    return peak * (FP4_COMPUTE if kind.gemm == "fp4" else 1.0)


def busiest_touched(experts: float, hit, groups: int):
    """Expected experts the busiest of ``groups`` expert-parallel GPUs touches, each GPU holding ``experts``
    of them and each expert hit with probability ``hit`` (a number, or an array: one per pass),
    independently: the pass waits for that GPU.

    One GPU (or tensor-sharded experts, ``groups`` 1): the mean, experts × hit. Else the expected maximum of
    ``groups`` binomials B(experts, hit), Σ_{x<experts} (1 − F(x)^groups). One decode token routed to one
    expert of 16 on 8 GPUs touches 1/16 of an expert on average, but the GPU holding it reads a whole one.
    """
    hit = np.clip(np.asarray(hit, dtype=np.float64), 0.0, 1.0)
    if groups <= 1:
        out = experts * hit
    else:
        n = int(round(experts))
        x = np.arange(n + 1, dtype=np.float64)
        inside = (hit > 0.0) & (hit < 1.0)
        p = np.where(inside, hit, 0.5)[..., None]  # (the ends are set below; their logs would be infinite)
        cdf = np.cumsum(np.exp(_log_binomial(n) + x * np.log(p) + (n - x) * np.log1p(-p)), axis=-1)[..., :-1]
        most = np.sum(1.0 - np.minimum(cdf, 1.0) ** groups, axis=-1)
        out = np.where(hit >= 1.0, float(n), np.where(inside, most, 0.0))
    return float(out) if out.ndim == 0 else out


@functools.lru_cache(maxsize=64)
def _log_binomial(n: int) -> np.ndarray:
    """log C(n, x) for x = 0..n (computed once per expert count: a pass only adds the probabilities)."""
    return np.array([math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(n - x + 1) for x in range(n + 1)])


class RooflineTiming(SumsTiming):
    """Prices one pass of every rank of a worker from its ``PassSums`` (see the module docstring)."""

    provenance = PROVENANCE

    def __init__(self, deployment: Deployment, efficiency: Efficiency = Efficiency(),
                 host: HostOverhead = HostOverhead(), engine: str = "vllm") -> None:
        """``engine``: the serving engine (``engine.backend``), whose measured all-reduce prices the collectives
        (``ALL_REDUCE``)."""
        d, m, hw = deployment, deployment.model, deployment.hardware
        self.deployment, self.efficiency, self.host = d, efficiency, host
        self.num_ranks = d.attention_data
        # Block-scaled FP8 GEMMs (DeepSeek-V3's 128 × 128 weight scales) dequantize inside the kernel and run at
        # the BF16 tensor-core rate, not FP8's; each also quantizes its activations per group of 128 first, a
        # fixed time per GEMM: MLA's three (the fused q/kv down-projection, q up, output; the absorbed kv up
        # stays BF16) or the two of other attention (qkv, output), two per dense MLP (gate-up, down), two
        # for the routed experts and two for the shared ones.
        attention_gemms = 3 if m.is_mla else 2
        block_gemms = (m.num_layers * attention_gemms + m.num_dense_layers * 2
                       + m.num_moe_layers * (2 + (2 if m.num_shared_experts else 0))) if d.block_scaled else 0
        # (transformer layers, or their equivalent in blocks where a layer is one block: Nemotron-H)
        layers, h = m.num_blocks / 2, m.hidden_size
        self.layer_overhead_s = layers * host.per_layer_us * 1e-6 + block_gemms * host.block_fp8_gemm_us * 1e-6
        self.host_s_by_kind = np.array([host.decode_ms, host.decode_ms, host.prefill_ms, host.mixed_ms]) / 1000.0
        """Seconds a pass adds on the host, indexed by 2 × (it prefills) + (it decodes)."""
        self.linear_peak = efficiency.compute * weight_gemm_peak(d)
        self.attention_peak = efficiency.compute * hw.bf16_flops
        self.hbm = efficiency.memory * hw.hbm_bytes_per_s
        tp, act = d.tensor, d.activation_bytes
        # Per token, per GPU of the rank: dense GEMM FLOPs (attention projections and dense MLPs).
        self.dense_flops_per_token = 2 * (m.mixer_params + m.num_dense_layers * m.dense_mlp_params) / tp
        self.dense_weight_bytes = (m.mixer_params + m.num_dense_layers * m.dense_mlp_params) / tp * d.weight_bytes
        self.activation_bytes_per_token = LINEAR_ACTIVATION_PASSES * layers * h * act
        # Mixture of experts: each token runs top-k routed experts and the shared ones, spread over the
        # worker's moe_tensor × moe_expert GPUs (the small router GEMM is spread with them).
        # Each token runs its top-k routed experts as grouped GEMMs (one small GEMM per expert), at the experts'
        # dtype peak and their own efficiency; the shared experts and the router are ordinary dense GEMMs
        # over every token, at the dense efficiency (same dtype peak).
        expert_rate = weight_gemm_peak(d, experts=True)
        expert_peak, shared_peak = efficiency.expert * expert_rate, efficiency.compute * expert_rate
        routed_flops = 2 * m.num_moe_layers * m.num_experts_per_token * m.expert_params
        shared_flops = 2 * m.num_moe_layers * (m.shared_expert_params + m.router_params)
        self.moe_flops_per_token = routed_flops + shared_flops
        self.moe_seconds_per_token = routed_flops / expert_peak + shared_flops / shared_peak
        """Compute time of one token's MoE work on one GPU if it held every expert whole."""
        self.moe_layer_s = m.num_moe_layers * host.moe_layer_us * 1e-6
        self.moe_gpus = d.moe_tensor * d.moe_expert
        self.experts_per_gpu = m.num_experts / d.moe_expert if m.is_moe else 0.0
        self.moe_expert = d.moe_expert
        self.expert_bytes_per_gpu = m.num_moe_layers * m.expert_params / d.moe_tensor * d.expert_bytes
        self.shared_bytes_per_gpu = (m.num_moe_layers * (m.shared_expert_params + m.router_params)
                                     / self.moe_gpus * d.expert_bytes)
        self.route_fraction = m.num_experts_per_token / m.num_experts if m.is_moe else 0.0
        # Attention: per query·key pair and layer, QKᵀ and AV over the GPU's heads. MLA decodes in the
        # absorbed form (vLLM): QKᵀ over the latent and rotary part, AV over the latent.
        heads, attending = m.num_attention_heads / tp, m.num_attention_layers
        self.attention_flops_per_pair = 2 * attending * heads * (m.qk_head_dim + m.value_head_dim)
        self.decode_attention_flops_per_pair = (
            2 * attending * heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim) if m.is_mla
            else self.attention_flops_per_pair)
        # State layers (Gated DeltaNet, Mamba-2): per token, the state's update and read-out over the GPU's heads
        # (``ModelSpec.state_flops_per_token``, however long the context); per sequence and pass, its state read and
        # written back.
        self.linear_flops_per_token = m.state_flops_per_token(tp)
        self.linear_state_io_bytes = 2 * d.linear_state_bytes_per_gpu
        # Sliding-window layers (gpt-oss, Gemma) attend over at most the window: their query·key pairs and KV reads
        # are capped per sequence (see ``_kernels``); with or without vLLM's hybrid KV cache, as vLLM notes.
        sliding = m.num_sliding_layers if m.sliding_window else 0
        self.window = m.sliding_window if sliding else 0
        self.sliding_fraction = sliding / attending
        # DeepSeek Sparse Attention: every layer's MLA attends over the index_topk tokens the indexer picks (capped as
        # a window is), and the indexer itself scores every earlier token: its heads' FP8 dot products (priced at
        # the BF16 peak's equivalent) and a read of each token's indexer key. The indexer is replicated on every GPU.
        self.indexer_flops_per_pair = self.indexer_bytes_per_token = 0.0
        if m.is_sparse:
            self.window, self.sliding_fraction = m.index_topk, 1.0
            self.indexer_flops_per_pair = 2 * layers * m.index_heads * m.index_head_dim * hw.bf16_flops / hw.fp8_flops
            self.indexer_bytes_per_token = layers * m.indexer_kv_bytes
        self.query_bytes_per_token = attending * heads * (m.qk_head_dim + m.value_head_dim) * act
        self.kv_bytes_per_token = d.kv_bytes_per_token_per_gpu - layers * m.indexer_kv_bytes  # (attention's part)
        # Output: the LM head's vocabulary shard, and sampling over the whole vocabulary.
        self.lm_head_flops_per_seq = 2 * h * m.vocab_size / tp
        self.lm_head_weight_bytes = h * m.vocab_size / tp * d.embedding_bytes
        self.lm_head_peak = efficiency.compute * hw.peak_flops(d.embedding_bytes)
        self.logit_bytes_per_seq = m.vocab_size / tp * LOGIT_BYTES
        self.sampler_bytes_per_seq = SAMPLER_PASSES * m.vocab_size * LOGIT_BYTES
        self.elementwise_bytes_per_token = ELEMENTWISE_PASSES * layers * h * act
        # Collectives: an all-reduce of each token's hidden state, one- or two-shot (``all_reduce_seconds``), at
        # the step latency and the fraction of the link its GPU system reaches for n GPUs (``collective``).
        self.num_all_reduces = 2 * layers if tp > 1 else 0
        self.all_reduce_message_per_token = h * act
        self.all_reduce_link, self.all_reduce_latency_s = collective(hw, efficiency, tp, host.collective_us, engine)
        self.all_reduce_inside_node = tp <= hw.gpus_per_node
        # MoE token exchange, two per MoE layer, under attention DP only (the ranks hold different tokens):
        # expert parallelism sends each token's hidden state to its top-k experts' GPUs and back (all-to-all);
        # with tensor-sharded experts every GPU gathers the other ranks' tokens and scatters the results
        # (all-gather, reduce-scatter). Without attention DP every GPU of the worker already holds every
        # token (tensor parallelism replicates them), so each runs its experts on them and the layer's
        # all-reduce, counted above, sums the experts' outputs: vLLM exchanges nothing more.
        ep, dp = d.moe_expert, d.attention_data
        self.num_exchanges = 2 * m.num_moe_layers if m.is_moe and dp > 1 else 0
        self.exchange_is_gather = ep == 1
        group = dp if ep == 1 else ep
        self.exchange_bytes_per_token = (1 if ep == 1 else m.num_experts_per_token) * h * act * (group - 1) / max(group, 1)
        self.exchange_link, self.exchange_latency_s = collective(hw, efficiency, d.tensor * dp, host.collective_us,
                                                                engine)

    def breakdown(self, batch: PassBatch) -> dict[str, np.ndarray]:
        """Seconds per kernel group and rank (the groups of ``GROUPS``)."""
        table = self.group_seconds(pass_sums(batch))
        return {name: table[:, i] for i, name in enumerate(GROUPS)}

    def _kernels(self, sums: PassSums) -> tuple[list[tuple[np.ndarray, np.ndarray | None]], tuple]:
        """Per row, each kernel group's compute time and memory time at this model's peaks (FLOPs over the
        reachable FLOP/s, bytes over the reachable bandwidth), for the groups of ``GROUPS`` up to
        ``elementwise`` (None: a group that only moves bytes); then what the other groups need: (tokens,
        busy rows, prefilling and decoding sequences, the worker's tokens or None)."""
        num_passes = sums.num_passes
        pre, dec = sums.kinds()
        prefills, decodes, pairs, decode_pairs = pre[:, SEQUENCES], dec[:, SEQUENCES], pre[:, PAIRS], dec[:, PAIRS]
        samples = pre[:, SAMPLED] + dec[:, SAMPLED]
        tokens = pre[:, NEW_TOKENS] + dec[:, NEW_TOKENS]
        span = pre[:, NEW_TOKENS] + pre[:, CONTEXT_TOKENS] + dec[:, NEW_TOKENS] + dec[:, CONTEXT_TOKENS]
        hbm, lin_peak = self.hbm, self.linear_peak
        busy = tokens > 0
        moe_compute = moe_memory = np.zeros(len(tokens))
        sampling = samples > 0
        linear_flops = tokens * self.dense_flops_per_token
        # (a boolean times a non-negative constant: the constant or 0.0, as np.where would give, but cheaper)
        linear_bytes = busy * self.dense_weight_bytes + tokens * self.activation_bytes_per_token
        worker_tokens = None
        if self.moe_flops_per_token or self.num_exchanges:  # (a dense model without exchanges adds nothing)
            per_pass = tokens.reshape(num_passes, -1)
            worker_tokens = per_pass.sum(axis=1) if num_passes > 1 else np.array([float(tokens.sum())])
            moe_seconds = np.zeros(num_passes)
            moe_bytes = np.zeros(num_passes)
            if self.moe_flops_per_token:
                # Experts serve the whole worker's tokens (expert parallelism spans the DP group), so even a
                # rank with no sequences of its own runs its share; each expert is hit with probability
                # 1 − (1 − k/E)^tokens, and the busiest expert-parallel GPU sets the pass.
                busy_pass = worker_tokens > 0
                moe_seconds = worker_tokens * (self.moe_seconds_per_token / self.moe_gpus)
                if self.route_fraction >= 1.0:  # every token to every expert (log1p(-1) is undefined)
                    hit = busy_pass * 1.0
                else:
                    hit = -np.expm1(worker_tokens * math.log1p(-self.route_fraction))
                touched = busiest_touched(self.experts_per_gpu, hit, self.moe_expert)
                moe_bytes = busy_pass * (touched * self.expert_bytes_per_gpu + self.shared_bytes_per_gpu)
            ranks = per_pass.shape[1]
            worker_tokens, moe_compute, moe_bytes = (np.repeat(v, ranks) for v in (worker_tokens, moe_seconds, moe_bytes))
            moe_memory = moe_bytes / hbm
        all_pairs, all_span = pairs + decode_pairs, span
        if self.window:
            # The sliding layers' share of the pairs and KV reads, capped at the window per sequence, from the pass's
            # sums: min(Σ, sequences × window), exact when every sequence is past the window (or all within it),
            # else an upper bound.
            w, s, pre_new = self.window, self.sliding_fraction, pre[:, NEW_TOKENS]
            pre_span, dec_span = pre_new + pre[:, CONTEXT_TOKENS], dec[:, NEW_TOKENS] + dec[:, CONTEXT_TOKENS]
            pairs = pairs + s * (np.minimum(pairs, pre_new * w) - pairs)
            decode_pairs = decode_pairs + s * (np.minimum(decode_pairs, decodes * w) - decode_pairs)
            span = span + s * (np.minimum(pre_span, pre_new + prefills * w) + np.minimum(dec_span, decodes * w)
                               - pre_span - dec_span)
        attention_flops = (pairs * self.attention_flops_per_pair + decode_pairs * self.decode_attention_flops_per_pair
                           + all_pairs * self.indexer_flops_per_pair + tokens * self.linear_flops_per_token)
        attention_bytes = (span * self.kv_bytes_per_token + all_span * self.indexer_bytes_per_token
                           + tokens * self.query_bytes_per_token + (prefills + decodes) * self.linear_state_io_bytes)
        groups = [
            (linear_flops / lin_peak, linear_bytes / hbm),
            (moe_compute, moe_memory),
            (attention_flops / self.attention_peak, attention_bytes / hbm),
            (None, tokens * (self.kv_bytes_per_token + self.indexer_bytes_per_token) / hbm),
            (samples * self.lm_head_flops_per_seq / self.lm_head_peak,
             (sampling * self.lm_head_weight_bytes + samples * self.logit_bytes_per_seq) / hbm),
            (None, samples * self.sampler_bytes_per_seq / hbm),
            (None, tokens * self.elementwise_bytes_per_token / hbm),
        ]
        return groups, (tokens, busy, prefills, decodes, worker_tokens)

    def work_seconds(self, sums: PassSums) -> tuple[np.ndarray, np.ndarray]:
        """Per row, the time its kernels' FLOPs take at this model's compute peaks and the time their bytes
        take at its memory bandwidth, each summed over the kernel groups (collectives, per-layer floors and
        the host left out): with ``Efficiency(1, 1, expert=1)``, the pass's work at datasheet peaks."""
        groups, _ = self._kernels(sums)
        compute = sum(c for c, _ in groups if c is not None)
        memory = sum(m for _, m in groups)
        return compute, memory

    def group_seconds(self, sums: PassSums) -> np.ndarray:
        """Seconds, one row per rank (of each pass) and one column per group of ``GROUPS``, every rank's
        formulas running as arrays over its per-sequence totals; a group of kernels costs the longer of its
        compute and memory times (``_kernels``). With several passes the experts' load is each pass's own."""
        groups, (tokens, busy, prefills, decodes, worker_tokens) = self._kernels(sums)
        moe_compute, moe_memory = groups[1]
        groups[1] = (None, np.maximum(moe_compute, moe_memory) + (moe_compute > 0) * self.moe_layer_s
                     if worker_tokens is not None and self.moe_flops_per_token else np.zeros(len(tokens)))
        comm = np.zeros(len(tokens))
        if self.num_all_reduces:
            comm = self.num_all_reduces * all_reduce_seconds(  # (an idle rank's empty message costs nothing)
                tokens * self.all_reduce_message_per_token, self.deployment.tensor, self.all_reduce_link,
                self.all_reduce_latency_s, self.all_reduce_inside_node)
        if self.num_exchanges:
            moved = worker_tokens if self.exchange_is_gather else tokens
            comm = comm + np.where(worker_tokens > 0, self.num_exchanges * (
                self.exchange_latency_s + moved * self.exchange_bytes_per_token / self.exchange_link), 0.0)
        # The host overhead by pass kind: decode only (or idle), prefill only, mixed.
        host_s = self.host_s_by_kind.take((prefills > 0) * 2 + (decodes > 0))
        table = np.empty((len(tokens), len(GROUPS)))  # C order: a row's groups are summed in the same order
        for i, (compute, memory) in enumerate(groups):
            table[:, i] = memory if compute is None else np.maximum(compute, memory)
        for i, column in enumerate((comm, busy * self.layer_overhead_s, busy * host_s), start=len(groups)):
            table[:, i] = column
        return table

    def _seconds(self, sums: PassSums) -> tuple[np.ndarray, None]:
        return self.group_seconds(sums).sum(axis=1), None
