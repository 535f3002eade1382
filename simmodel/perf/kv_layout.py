"""How vLLM lays out the KV cache of a model with sliding-window layers: its hybrid KV cache groups.

vLLM v1's hybrid KV cache manager (``vllm/v1/core/kv_cache_utils.py``: ``_get_kv_cache_groups_uniform_page_size``;
notes in docs/research/vllm-hybrid-kv.md) puts layers of one attention type in groups of ``group_size`` layers:
``group_size`` is the smaller of the full-attention and sliding-window layer counts, or the larger one when it is
under 1.5 × the smaller; each type splits into ``cdiv(layers, group_size)`` groups (the short ones padded). All
groups draw block ids from one pool, and a block id of any group holds ``block_size`` tokens of ``group_size``
layers. So a request holds one block per group per ``block_size`` tokens of its sequence, except that a
sliding-window group frees the blocks that fall wholly behind the window (``SlidingWindowManager``): after
computing n tokens, the first ``(n − W + 1) // block_size`` of them.

gpt-oss-120b (18 sliding, 18 full layers) gets two groups of 18: a block holds half the layers of a full-attention
model's block, the pool has twice as many, and a long request holds about half the bytes. Gemma 3 (52 sliding,
10 full) gets one full group and six sliding ones of 10 layers.

With the hybrid manager off (``--disable-hybrid-kv-cache-manager``: ``kv_cache.hybrid: false``) sliding layers
keep KV for the whole context, as full ones (their attention still reads the window only); a model whose layers
all slide keeps one sliding group either way.

State layers (Qwen3-Next's Gated DeltaNet, Nemotron-H's Mamba-2: vLLM's Mamba specs) keep a fixed-size state per
sequence: their groups hold one block per request (without prefix caching), and the block size is raised until one
attention layer's block holds one layer's state (``state_block_size``): Qwen3-Next at TP 1 gets 544-token blocks,
its 12 attention and 36 linear layers groups of 12 (one attention group, three state groups); Nemotron 3 Nano
2096-token blocks, its 6 attention and 23 Mamba-2 layers groups of 6 (one attention group, four state groups).
"""

from __future__ import annotations

from dataclasses import dataclass

from simmodel.perf.capacity import cdiv
from simmodel.perf.models import ModelSpec


@dataclass(frozen=True, slots=True)
class KvLayout:
    """The KV cache groups of one model (see the module docstring)."""

    num_layers: int
    """Layers with a KV cache (attention layers)."""
    group_size: int
    """Layers one block id holds."""
    full_groups: int = 1
    sliding_groups: int = 0
    window: int = 0
    """Tokens a sliding layer sees (``ModelSpec.sliding_window``); 0 without sliding groups."""
    state_groups: int = 0
    """Groups of state layers (linear attention, Mamba-2: vLLM's Mamba groups): ``state_blocks`` blocks per request
    each, holding its state (without prefix caching, vLLM's ``mamba_cache_mode`` none)."""
    state_blocks: int = 1
    """Blocks a request holds in each state group: its state, and one more per speculative token (vLLM's
    ``MambaSpec.num_speculative_blocks``: a state per draft position, to roll back to the last accepted one)."""
    state_checkpoint: bool = False
    """Whether the state layers can write a state inside a pass (Mamba-2's ``MambaMixer2``: a prefill checkpoint
    block), so that prefix caching (``engine.state_kv_cache``) need not end a prompt's chunk at its last block
    boundary, as it must for a gated DeltaNet (Qwen3-Next)."""

    @property
    def hybrid(self) -> bool:
        """Whether the layers are in several kinds of group (sliding-window or state groups)."""
        return self.sliding_groups > 0 or self.state_groups > 0

    @property
    def position_blocks(self) -> int:
        """Block ids a request takes for each ``block_size`` tokens of its sequence (one per attention group)."""
        return self.full_groups + self.sliding_groups

    @property
    def fixed_blocks(self) -> int:
        """Block ids a request holds whatever its length: its states."""
        return self.state_groups * self.state_blocks

    @property
    def num_groups(self) -> int:
        return self.full_groups + self.sliding_groups + self.state_groups

    @property
    def block_fraction(self) -> float:
        """A block's bytes as a fraction of a block of every attention layer (the model's KV for its tokens)."""
        return self.group_size / self.num_layers

    def skipped(self, computed: int, block_size: int) -> int:
        """Blocks of a sliding group wholly behind the window once ``computed`` tokens are computed (vLLM's
        ``get_num_skipped_tokens`` = n − W + 1, in whole blocks)."""
        return max(computed - self.window + 1, 0) // block_size

    def blocks(self, tokens: int, computed: int, block_size: int, cap: int | None = None) -> int:
        """Block ids a request holds over every group with slots for ``tokens`` tokens, once it has computed
        ``computed`` of them: one per group per block of slots, less each sliding group's skipped blocks.
        ``cap`` (the admission check of a whole sequence): a sliding group counts at most that many blocks of slots
        (``sliding_cap``), or those computed already."""
        positions = cdiv(tokens, block_size)
        held = self.position_blocks * positions + self.fixed_blocks
        if not self.sliding_groups:
            return held
        if cap is not None:
            held -= self.sliding_groups * (positions - max(min(positions, cap), computed // block_size))
        return held - self.sliding_groups * self.skipped(computed, block_size)

    def sliding_cap(self, context_length: int, block_size: int, in_flight_tokens: int) -> int:
        """The most blocks a sliding group of one request holds at once (vLLM's
        ``max_admission_blocks_per_request``): its window, the tokens of the passes in flight (whose blocks behind
        the window are freed only once processed), and a block of slack for a window not starting on a block."""
        return cdiv(min(self.window - 1 + in_flight_tokens, context_length), block_size) + 1

    def max_blocks(self, context_length: int, block_size: int, in_flight_tokens: int) -> int:
        """The most block ids one request can hold: a full group's whole context, and a sliding group's
        ``sliding_cap`` (vLLM's ``max_memory_usage_bytes`` of a ``SlidingWindowSpec``, the check that one request
        fits at startup)."""
        full = self.full_groups * cdiv(context_length, block_size) + self.fixed_blocks
        if not self.sliding_groups:
            return full
        return full + self.sliding_groups * self.sliding_cap(context_length, block_size, in_flight_tokens)

    def capacity_tokens(self, num_blocks: int, block_size: int) -> int:
        """The tokens vLLM reports as the cache's size (``GPU KV cache size``: blocks over the groups, times the
        block size), which hides what the sliding groups save."""
        return num_blocks // self.num_groups * block_size


def in_flight_tokens(max_num_batched_tokens: int, async_scheduling: bool, pipeline: int = 1) -> int:
    """Tokens scheduled and not yet processed at most (vLLM's ``max_in_flight_tokens``): a budget per batch in
    flight (``max_concurrent_batches``: the pipeline's stages, two under async scheduling without one)."""
    batches = 2 if async_scheduling and pipeline == 1 else pipeline
    return batches * max_num_batched_tokens


def kv_layout(model: ModelSpec, hybrid: bool = True, speculative_tokens: int = 0) -> KvLayout:
    """The groups vLLM forms for ``model``; ``hybrid`` False: vLLM's hybrid KV cache manager off (which vLLM
    cannot do for a model with state layers: the configuration refuses it); ``speculative_tokens``: the drafts a
    pass verifies (each a state block more per state group)."""
    layers = model.num_attention_layers
    sliding = model.num_sliding_layers if model.sliding_window else 0
    full, linear = layers - sliding, model.num_linear_layers
    if not sliding and not linear:
        return KvLayout(layers, layers)
    if not full and not linear:  # one attention type: one group, sliding with the manager on or off
        return KvLayout(layers, layers, full_groups=0, sliding_groups=1, window=model.sliding_window)
    if not hybrid and not linear:  # sliding specs promoted to full ones
        return KvLayout(layers, layers)
    buckets = [n for n in (full, sliding, linear) if n]
    small, large = min(buckets), max(buckets)
    size = large if large < 1.5 * small else small
    return KvLayout(layers, size, cdiv(full, size), cdiv(sliding, size), model.sliding_window if sliding else 0,
                    cdiv(linear, size), 1 + speculative_tokens if linear else 1, model.mamba_heads > 0)


def state_block_size(attention_bytes_per_token: float, state_bytes: float, alignment: int = 16) -> int:
    """The KV block size vLLM sets for a model with state layers (``HybridAttentionMambaModelConfig``):
    the smallest multiple of the attention kernel's ``alignment`` whose attention page (block size × one layer's
    KV bytes per token) holds one layer's state (``state_bytes``), so that both kinds of group share block ids of
    one size (the state's page padded to it)."""
    return alignment * cdiv(int(state_bytes), int(alignment * attention_bytes_per_token))
