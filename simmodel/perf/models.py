"""Model shapes by Hugging Face id, from each model's published ``config.json``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The shape of a dense decoder-only transformer (gated MLP, GQA attention)."""

    model_id: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    dtype_bytes: int = 2
    num_experts: int = 0

    @property
    def num_parameters(self) -> int:
        """Every weight: embeddings, LM head unless tied, q/k/v/o, the three MLP projections, norms."""
        h, q_dim, kv_dim = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attention = h * q_dim + 2 * h * kv_dim + q_dim * h
        mlp = 3 * h * self.intermediate_size
        per_layer = attention + mlp + 2 * h
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * per_layer + embeddings + h

    @property
    def weight_bytes(self) -> int:
        return self.num_parameters * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token, all KV heads: 2 × layers × KV heads × head dim × bytes."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes


# Llama-3.1 shapes: meta-llama/Llama-3.1-{8B,70B}-Instruct config.json; Qwen3-8B: Qwen/Qwen3-8B config.json.
_LLAMA_31_8B = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8, head_dim=128,
                    intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False,
                    max_position_embeddings=131072)
_LLAMA_31_70B = dict(num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8, head_dim=128,
                     intermediate_size=28672, vocab_size=128256, tie_word_embeddings=False,
                     max_position_embeddings=131072)
_QWEN3_8B = dict(num_layers=36, hidden_size=4096, num_attention_heads=32, num_kv_heads=8, head_dim=128,
                 intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False,
                 max_position_embeddings=40960)

MODELS: dict[str, ModelSpec] = {
    name: ModelSpec(name, **shape)
    for names, shape in (
        (("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"), _LLAMA_31_8B),
        (("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B"), _LLAMA_31_70B),
        (("Qwen/Qwen3-8B",), _QWEN3_8B),
    )
    for name in names
}
