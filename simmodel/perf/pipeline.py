"""Pipeline parallelism: a worker's layers split into stages over GPUs or nodes, as vLLM runs them.

vLLM (docs/research/vllm-pipeline-parallel.md) gives each of the P stages ``L // P`` layers and the remainder one
each to stages −2, −3, … (``get_pp_indices``: never the last, which holds the final norm, the LM head and the
sampler); the first holds the token embedding. Each stage is ``tensor`` GPUs. A batch runs the stages in turn,
each sending its hidden state and residual (2 × hidden values a token, in the activation dtype, 1/``tensor`` of them
per GPU pair) to the next over NVLink or, between nodes, the NIC. Every stage allocates KV for its own layers, and
the engine takes the smallest block count of all stages (``get_kv_cache_configs``), one block table for all.

The engine keeps up to P batches in flight (``batch_queue_size``), so while one batch runs stage 1 the next runs
stage 0; a request is in at most one of them (its next token is not known before its batch ends).
"""

from __future__ import annotations

from dataclasses import dataclass

from simmodel.perf.deployment import Deployment


def stage_layers(num_layers: int, stages: int) -> tuple[int, ...]:
    """Layers per stage, first to last (vLLM's ``get_pp_indices`` without ``VLLM_PP_LAYER_PARTITION``)."""
    base, extra = divmod(num_layers, stages)
    counts = [base] * stages
    for i in range(extra):  # stages −2, −3, …
        counts[stages - 2 - i] += 1
    return tuple(counts)


def stage_memory(d: Deployment, stages: int) -> list[tuple[float, float]]:
    """Per stage, the weight bytes on one of its GPUs and the KV bytes one of them stores per token: its layers'
    share (attention and dense MLPs over ``tensor``, experts as ``Deployment`` lays them out, KV by layer), the
    token embedding on the first stage and the LM head on the last (a tied one loaded again there). One stage:
    ``Deployment``'s own figures. (Vision-language models are not pipelined.)"""
    if stages == 1:
        return [(d.weight_bytes_per_gpu, d.kv_bytes_per_token_per_gpu)]
    m = d.model
    embedding = m.embedding_params / d.tensor * d.embedding_bytes
    attention = m.attention_params / d.tensor * d.weight_bytes + 2 * m.hidden_size * d.weight_bytes  # (+ 2 norms)
    dense = m.dense_mlp_params / d.tensor * d.weight_bytes
    experts = m.moe_layer_params / (d.moe_tensor * d.moe_expert) * d.expert_bytes
    kv_per_layer = d.kv_bytes_per_token_per_gpu / m.num_layers
    out, first = [], 0
    for s, n in enumerate(stage_layers(m.num_layers, stages)):
        weights = sum(attention + (experts if m.is_moe_layer(i) else dense) for i in range(first, first + n))
        if s == 0:
            weights += embedding
        if s == stages - 1:
            weights += embedding + m.hidden_size * d.weight_bytes  # (the LM head and the final norm)
        out.append((weights, kv_per_layer * n))
        first += n
    return out


@dataclass(frozen=True, slots=True)
class PipelineShape:
    """What the stage timeline of one worker needs: each stage's share of a pass's price (its layers over all),
    and each boundary's hand-over of a token's activations."""

    fractions: tuple[float, ...]
    bytes_per_token: float
    """Activations one GPU sends its peer in the next stage per token: hidden state and residual, 1/``tensor``."""
    link_bytes_per_s: tuple[float, ...]
    """Per boundary (stage s to s + 1): the link's bandwidth per GPU, NVLink inside a node, else the NIC."""
    link_latency_s: tuple[float, ...]


def pipeline_shape(d: Deployment, stages: int, activation_bytes: float, inter_node_latency_s: float = 5e-6
                   ) -> PipelineShape:
    """The shape of ``stages`` stages of ``d``'s ``tensor`` GPUs each, laid out node by node: the boundary after
    stage s crosses nodes where its GPUs (``s × tensor`` on) and the next stage's sit on different nodes.
    ``inter_node_latency_s``: one message over the NIC (RDMA send/receive, a few µs)."""
    m, hw = d.model, d.hardware
    layers = stage_layers(m.num_layers, stages)
    per_node = hw.gpus_per_node
    links, latencies = [], []
    for s in range(stages - 1):
        last, nxt = (s + 1) * d.tensor - 1, (s + 1) * d.tensor
        inside = last // per_node == nxt // per_node
        links.append(hw.intra_node_bytes_per_s if inside else hw.nic_bytes_per_s)
        latencies.append(hw.intra_node_latency_s if inside else inter_node_latency_s)
    return PipelineShape(tuple(n / m.num_layers for n in layers), 2 * m.hidden_size * activation_bytes / d.tensor,
                         tuple(links), tuple(latencies))


class PipelineStages:
    """The stages' clocks of one worker: when each is free, and where a batch goes through them.

    A batch priced at ``busy`` ns for the whole model takes ``fraction × busy`` on each stage; it enters stage s
    once stage s is free and its activations have arrived from stage s − 1.
    """

    def __init__(self, shape: PipelineShape) -> None:
        self.shape = shape
        self.free = [0] * len(shape.fractions)

    def ready_at(self, now: int) -> int:
        """When a batch handed in at ``now`` may start on the first stage."""
        return max(now, self.free[0])

    def place(self, start: int, busy_ns: int, tokens: int) -> int:
        """Run a batch of ``tokens`` tokens, priced ``busy_ns`` for the whole model, from ``start`` on the first
        stage (``ready_at``); returns when its last stage ends."""
        shape, free = self.shape, self.free
        at = max(start, free[0])
        for s, fraction in enumerate(shape.fractions):
            if s:
                hop = shape.link_latency_s[s - 1] + tokens * shape.bytes_per_token / shape.link_bytes_per_s[s - 1]
                at = max(free[s], at + round(hop * 1e9))
            at += round(busy_ns * fraction)
            free[s] = at
        return at
