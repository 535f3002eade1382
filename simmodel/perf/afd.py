"""Attention-FFN disaggregation (AFD): the attention of every layer on one pool of GPUs, its FFN (the dense
MLP, or the MoE experts) on another, each layer's activations crossing a link both ways, the pass run as a
ping-pong pipeline of micro-batches so that both pools stay busy (ByteDance's MegaScale-Infer,
arXiv:2504.02263; StepFun's Step-3 AFD, arXiv:2507.19427).

The attention workers are scheduled as usual (they hold the KV cache, the embeddings, the LM head and the
scheduler); the FFN workers are their companion, priced here and never scheduled. Each side's kernels are
priced by the same roofline (``RooflineTiming``) on a view of the model that keeps only that side
(``attention_side``, ``ffn_side``). A pass of ``m`` micro-batches over ``L`` layers, per attention-DP rank,
with per micro-batch and layer the attention time ``a``, the FFN time ``f`` and the link times ``c_af``
(activations to the FFN) and ``c_fa`` (results back):

    cycle = max(a, f, c_af, c_fa, (a + c_af + f + c_fa) / m)
    pass  = (a + c_af + f + c_fa) + (m·L − 1) · cycle + LM head and sampling of the m micro-batches + host

The first micro-batch's first layer goes through all four stages; every later (micro-batch, layer) step
starts one cycle after the one before, a cycle being the slowest stage, or the time one micro-batch's round
trip takes spread over the m micro-batches in flight when there are too few to hide it (the condition
``m ≥ 2(1 + c/f)`` of MegaScale-Infer and ``A2F + F2A ≤ A`` of Step-3 for the cycle to be the slowest stage).
With m = 1 it is the plain sequence, L · (a + c_af + f + c_fa).

A micro-batch is 1/m of the rank's work (its sequences, tokens and context, each divided by m). The FFN of a
micro-batch serves the micro-batches of every attention worker it is shared by (``replicas`` of the
attention role over ``replicas`` of the FFN role) and every attention-DP rank of them, sent to it at once:
the attention workers are taken to run in step. Bytes per token and layer: the hidden state in the
dispatch dtype to the FFN (``dispatch_dtype``: BF16, or FP8 as Step-3 sends it) and in BF16 back, each
GPU of a side sending or receiving its tensor-parallel share; a transfer takes the link's latency plus the
larger of the sender's and the receiver's bytes over the link's bandwidth per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simmodel.perf.deployment import Deployment
from simmodel.perf.models import ModelSpec
from simmodel.perf.roofline import GROUPS, Efficiency, HostOverhead, RooflineTiming
from simmodel.perf.timing import DECODE, NEW_TOKENS, PREFILL, SEQUENCES, PassSums, SumsTiming

LAYER_GROUPS = ("linear", "experts", "attention", "kv_write", "elementwise", "communication", "layer_overhead")
"""The groups that run once per layer (and so per micro-batch and layer in the pipeline)."""
PASS_GROUPS = ("lm_head", "sampler")
"""The groups that run once per micro-batch, after its last layer."""


def attention_side(model: ModelSpec) -> ModelSpec:
    """The model as an attention GPU holds it: every layer's attention and norms, the embeddings and the LM
    head; no MLP and no experts."""
    return replace(model, intermediate_size=0, num_experts=0, num_experts_per_token=0, moe_intermediate_size=0,
                   num_shared_experts=0, first_dense_layers=0, expert_dtype_bytes=0)


def ffn_side(model: ModelSpec) -> ModelSpec:
    """The model as an FFN GPU holds it: every layer's dense MLP or experts (and router); no attention, no
    embeddings or LM head, no vision tower."""
    return replace(model, num_attention_heads=0, num_kv_heads=0, head_dim=0, vocab_size=0, tie_word_embeddings=True,
                   q_lora_rank=0, kv_lora_rank=0, qk_nope_head_dim=0, qk_rope_head_dim=0, v_head_dim=0, vision=None)


@dataclass(frozen=True, slots=True)
class AfdLink:
    """The link between the two sides, per GPU and direction."""

    bytes_per_s: float
    latency_s: float
    dispatch_bytes: float
    """Bytes per hidden value sent to the FFN (2: BF16, 1: FP8); results come back in BF16."""


@dataclass(frozen=True, slots=True)
class AfdShape:
    """What the pipeline needs of the deployment."""

    micro_batches: int
    num_layers: int
    hidden_size: int
    attention_tensor: int
    ffn_tensor: int
    attention_per_ffn: float
    """Attention workers one FFN worker serves: attention replicas over FFN replicas."""


class AfdTiming(SumsTiming):
    """Prices an attention worker's pass as the AFD pipeline (see the module docstring)."""

    provenance = ("extrapolated:roofline-afd", "assumed-host")

    def __init__(self, attention: Deployment, ffn: Deployment, shape: AfdShape, link: AfdLink,
                 efficiency: Efficiency, host: HostOverhead, engine: str = "vllm") -> None:
        self.shape, self.link = shape, link
        self.attention = RooflineTiming(attention, efficiency, host, engine)
        # The FFN side has no scheduler and no per-layer attention floors: its only fixed time is an MoE layer's.
        self.ffn = RooflineTiming(ffn, efficiency, replace(host, prefill_ms=0.0, decode_ms=0.0, mixed_ms=0.0,
                                                            per_layer_us=0.0), engine)
        self._layer = [GROUPS.index(g) for g in LAYER_GROUPS]
        self._pass = [GROUPS.index(g) for g in PASS_GROUPS]
        self._host = GROUPS.index("host")

    def stages(self, sums: PassSums) -> dict[str, np.ndarray]:
        """Per row (rank of a pass): one micro-batch's attention, FFN and link times per layer (``a``, ``f``,
        ``c_af``, ``c_fa``), and the per-pass rest (``rest``: the m micro-batches' LM head and sampling, and the
        host), in seconds."""
        s = self.shape
        m, layers = s.micro_batches, s.num_layers
        micro = PassSums(sums.table / m, sums.kv_capacity_tokens, sums.num_passes)
        table = self.attention.group_seconds(micro)
        a = table[:, self._layer].sum(axis=1) / layers
        rest = m * table[:, self._pass].sum(axis=1) + table[:, self._host]
        tokens, per_pass = ffn_tokens(micro, s.attention_per_ffn)
        ffn_table = self.ffn.group_seconds(ffn_rows(per_pass))
        f = np.repeat(ffn_table[:, self._layer].sum(axis=1) / layers, len(tokens) // sums.num_passes)
        received = np.repeat(per_pass, len(tokens) // sums.num_passes)
        link, h = self.link, s.hidden_size
        c_af = self._transfer(tokens, received, h * link.dispatch_bytes)
        c_fa = self._transfer(tokens, received, h * 2.0)
        idle = tokens <= 0
        for stage in (a, f, c_af, c_fa, rest):
            stage[idle] = 0.0
        return {"a": a, "f": f, "c_af": c_af, "c_fa": c_fa, "rest": rest}

    def _transfer(self, tokens: np.ndarray, ffn_tokens: np.ndarray, bytes_per_token: float) -> np.ndarray:
        """One micro-batch's activations of one layer over the link: the latency, then the larger of what an
        attention GPU sends and what an FFN GPU receives (each its tensor-parallel share)."""
        s, link = self.shape, self.link
        moved = np.maximum(tokens / s.attention_tensor, ffn_tokens / s.ffn_tensor) * bytes_per_token
        return np.where(tokens > 0, link.latency_s + moved / link.bytes_per_s, 0.0)

    def _seconds(self, sums: PassSums) -> tuple[np.ndarray, None]:
        st = self.stages(sums)
        m, layers = self.shape.micro_batches, self.shape.num_layers
        a, f, c_af, c_fa = st["a"], st["f"], st["c_af"], st["c_fa"]
        trip = a + c_af + f + c_fa
        cycle = np.maximum.reduce([a, f, c_af, c_fa, trip / m])
        return trip + (m * layers - 1) * cycle + st["rest"], None


class AfdWork:
    """The work at datasheet peaks of an AFD attention rank's pass, for its energy (``perf.energy``): its
    attention side's work over the m micro-batches (the weights read once each)."""

    def __init__(self, attention: Deployment, shape: AfdShape, engine: str = "vllm") -> None:
        self.attention = RooflineTiming(attention, Efficiency(compute=1.0, memory=1.0, expert=1.0), engine=engine)
        self.shape = shape

    def work_ns(self, sums: PassSums) -> np.ndarray:
        m = self.shape.micro_batches
        micro = PassSums(sums.table / m, sums.kv_capacity_tokens, sums.num_passes)
        compute, memory = self.attention.work_seconds(micro)
        return np.rint(m * (compute + memory) * 1e9).astype(np.int64)


class AfdFfnWork:
    """The FFN workers' busy GPU-seconds over a run, for their dynamic energy: per attention worker's pass, the
    FFN micro-batches its tokens make (``AfdTiming``'s), each one's work at datasheet peaks on an FFN GPU, at most
    the pass's duration, times the FFN GPUs that are that attention worker's share."""

    def __init__(self, ffn: Deployment, shape: AfdShape, ffn_gpus_per_worker: int, engine: str = "vllm") -> None:
        self.ffn = RooflineTiming(ffn, Efficiency(compute=1.0, memory=1.0, expert=1.0), engine=engine)
        self.shape = shape
        self.share = ffn_gpus_per_worker / shape.attention_per_ffn
        """FFN GPUs per attention worker."""

    def busy_gpu_seconds(self, tokens: np.ndarray, duration_s: np.ndarray) -> float:
        """``tokens``: each attention worker's pass's tokens (over its ranks); ``duration_s``: the pass's."""
        if not len(tokens):
            return 0.0
        m = self.shape.micro_batches
        compute, memory = self.ffn.work_seconds(ffn_rows(tokens / m * self.shape.attention_per_ffn))
        return float(self.share * np.minimum(m * (compute + memory), duration_s).sum())


def ffn_tokens(micro: PassSums, attention_per_ffn: float) -> tuple[np.ndarray, np.ndarray]:
    """Each row's tokens in one micro-batch, and per pass the tokens of an FFN worker's micro-batch: every rank's
    of every attention worker it serves (``attention_per_ffn`` of them, in step)."""
    table = micro.table
    tokens = table[:, PREFILL + NEW_TOKENS] + table[:, DECODE + NEW_TOKENS]
    return tokens, tokens.reshape(micro.num_passes, -1).sum(axis=1) * attention_per_ffn


def ffn_rows(per_pass: np.ndarray) -> PassSums:
    """An FFN worker's micro-batch of each pass as the roofline's sums: one row of that many new tokens."""
    rows = np.zeros((len(per_pass), 10))
    rows[:, PREFILL + SEQUENCES] = per_pass > 0
    rows[:, PREFILL + NEW_TOKENS] = per_pass
    return PassSums(rows, np.ones(len(per_pass)), len(per_pass))
