"""vLLM's prefix caching of state layers (Mamba-2, gated DeltaNet): ``mamba_cache_mode`` align, the mode vLLM 0.32
turns on for a model with state layers whenever prefix caching is on (``MambaModelConfig``).

A state group's block holds one state, the whole sequence's up to a position, so a request's list in such a group is
indexed by position like an attention group's but is mostly nulls: its running state sits at the block of its last
computed token, a state it no longer needs is given back once the tokens before the next block boundary are processed
(``remove_skipped_blocks``: blocks before ``(processed − 1) // block_size``), and a step that crosses into a new block
takes one new block for the state (two when Mamba-2 also writes a checkpoint, below), whatever the chunk's length.
Full-attention groups are as in ``HybridPrefixCachingPool``. Rules, from vLLM 0.32's ``MambaManager``,
``HybridKVCacheCoordinator`` and ``Scheduler._mamba_block_aligned_split`` (checked pass by pass by
``tests/unit/test_vllm_state_apc_golden.py``):

- **Which states are cached.** With vLLM's default ``prefix_cache_retention_interval`` 0 a state group caches only the
  states a later request can resume from: the prompt's replay boundary (its last block boundary before its last token,
  ``(prompt − 1) // block_size`` blocks) and a shared-prefix junction found at its admission; each only if a chunk
  ended there (the state is written at a chunk's end) or a Mamba-2 checkpoint was written there. Full-attention blocks
  are cached densely.
- **Hits.** The full-attention groups' longest cached run from the start (at most ``(tokens − 1) // block_size``
  blocks), then the longest prefix of it whose last block's state is cached in every state group: the hit. Where the
  attention hit runs deeper, its end is the request's junction (``shared_prefix_boundary``). A state cached by this
  very step (its pass has not run) cannot serve a hit: the admission waits.
- **Chunks** (the scheduler's, ``state_split``): a prompt's chunk that the budget cuts ends at a block boundary; one that
  starts mid-block stops at the next boundary; a chunk stops at the junction; and a gated DeltaNet's prompt stops at its
  replay boundary, its last tokens computed in a pass of their own. Mamba-2 instead writes the state at that boundary
  into a checkpoint block inside the prompt's last chunk (``MambaMixer2``: one checkpoint block, alignment 1), when the
  chunk starts on a boundary and runs at least a block past it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simmodel.engine.hybrid_kv_cache import NULL, HybridHits, HybridPrefixCachingPool
from simmodel.perf.capacity import cdiv

if TYPE_CHECKING:
    from simmodel.perf.kv_layout import KvLayout


class StatePrefixCachingPool(HybridPrefixCachingPool):
    """Usable KV blocks of one rank shared by full-attention groups and state groups, with prefix caching (see the
    module docstring). Groups are the full ones, then the state ones (``KvLayout``)."""

    sliding = False
    states = True
    """Requests give back state blocks behind their last computed token (``slide``) and grow by ``grow``."""

    def __init__(self, num_blocks: int, block_size: int, layout: KvLayout, eagle: bool = False) -> None:
        if layout.sliding_groups:
            raise ValueError("state groups beside sliding-window groups are not modelled")
        super().__init__(num_blocks, block_size, layout, eagle)
        self.checkpoint = layout.state_checkpoint
        self.spec = layout.state_blocks - 1
        """Speculative state blocks a request holds past its state in each state group (``num_speculative_blocks``)."""
        self.cached_this_step: set = set()
        """Keys of the state blocks cached since this step's plan began (vLLM's ``cached_blocks_this_step``)."""
        self.grown: set = set()
        """Requests whose state lists a step has grown since they last held nothing (``_allocated_block_reqs``)."""
        self._checkpoints: dict = {}
        """Requests whose step writes a checkpoint: its position and column (vLLM's ``_checkpoints``)."""

    def checkpoint_position(self, tokens: int) -> int:
        """The last position before ``tokens`` whose state a later request can resume from
        (``get_mamba_prefill_checkpoint_position``): the last block boundary before the last token, or, with EAGLE's
        block drop, the block boundary below the last whole block."""
        bs = self.block_size
        return max(tokens // bs * bs - bs if self.eagle else (tokens - 1) // bs * bs, 0)

    def new_step(self) -> None:
        """A plan begins (``new_step_starts``): states cached before it are computed or being computed by a pass
        already in flight."""
        self.cached_this_step.clear()

    # -- lookups -------------------------------------------------------------------------------------------

    def find_hits(self, request) -> HybridHits:
        full, groups = self.full, self.groups
        per_group: list[list[int]] = [[] for _ in range(groups)]
        keys, attention = self.full_groups_hit(request)  # (the state groups neither look further nor drop)
        if not keys:
            return HybridHits(per_group, 0, 0)
        length = 0
        for i in range(attention - 1, -1, -1):
            if all(self._cached(g, keys[i]) is not None for g in range(full, groups)):
                length = i + 1
                break
        for g in range(full):
            per_group[g] = [self._cached(g, keys[j]) for j in range(length)]
        if length:
            for g in range(full, groups):
                per_group[g] = [NULL] * (length - 1) + [self._cached(g, keys[length - 1])]
        junction = attention * self.block_size if attention > length else 0
        return HybridHits(per_group, length, junction)

    def hit_computed_this_step(self, request, hits: HybridHits) -> bool:
        """Whether the hit's state was cached by this step's plan (its pass has not run: the admission waits)."""
        if not hits.positions or not self.cached_this_step:
            return False
        key = request.block_keys(hits.positions - 1)
        return any((g, key) in self.cached_this_step for g in range(self.full, self.groups))

    def take_hits(self, request, hits: HybridHits) -> None:
        super().take_hits(request, hits)
        request.num_skipped_blocks = 0

    def free_request(self, request) -> None:
        super().free_request(request)
        self.grown.discard(request)
        self._checkpoints.pop(request, None)

    # -- counting and growing ---------------------------------------------------------------------------------

    def _checkpoint(self, request, blocks: list[int], start: int, end: int, prefill_end: int) -> bool:
        """Whether a step computing tokens ``start``…``end`` also writes a Mamba-2 checkpoint (``_needs_internal_checkpoint``
        with retention 0): the prompt's last chunk, starting on a block boundary and running at least a block past its
        ``checkpoint_position``, whose checkpoint column is a null (or, once grown, one of its speculative blocks)."""
        if not self.checkpoint or end < prefill_end:
            return False
        bs = self.block_size
        column = cdiv(end, bs) - 2
        return (state_checkpoint_valid(start, end, self.checkpoint_position(end), bs) and column >= 0
                and (column >= len(blocks) or blocks[column] == NULL
                     or (request in self.grown and column >= len(blocks) - self.spec)))

    def blocks_needed(self, request, start: int, end: int, slots: int, prefill_end: int, hits: HybridHits | None = None,
                      ) -> int:
        """New block ids a step computing tokens ``start``…``end`` (slots up to ``slots``) takes (``get_num_blocks_to_
        allocate``), the request holding ``hits`` first if given: each full group one per new position, each state
        group none while its last position (the state's, then its speculative blocks') is held, else one, one more for
        a checkpoint, and its speculative blocks at its first growth; a list grown past that position counts less."""
        lists = request.block_ids
        held = len(hits) if hits is not None else (len(lists[0]) if lists else 0)
        positions = cdiv(slots, self.block_size)
        needed = self.full * max(positions - held, 0)
        required = cdiv(end, self.block_size) + self.spec
        for g in range(self.full, self.groups):
            blocks = lists[g] if lists and hits is None else []
            new = required - len(blocks) - (len(hits) if hits is not None else 0)
            if new > 0:  # (at most the state's block, a checkpoint's, and the speculative ones at the first growth)
                cap = 1 + self._checkpoint(request, blocks, start, end, prefill_end)
                new = min(new, cap if request in self.grown else cap + self.spec)
            needed += new  # (an over-grown list counts less, as vLLM's sum does)
        return needed

    def grow(self, request, start: int, end: int, slots: int, prefill_end: int) -> int:
        """Take the step's new block ids (``allocate_new_blocks``), group by group: full groups their new positions;
        a state group, once its list runs short of its last position, nulls up to the state's column (and before a
        checkpoint), its speculative blocks left below that column moved up, then new blocks for the checkpoint, the
        state and the speculative positions still missing. Returns how many were taken."""
        lists = self._lists(request)
        bs = self.block_size
        taken = 0
        positions = cdiv(slots, bs)
        for g in range(self.full):
            n = positions - len(lists[g])
            if n > 0:
                lists[g].extend(self._allocate(g, n))
                taken += n
        spec, grown = self.spec, request in self.grown
        required = cdiv(end, bs) + spec
        if self.groups > self.full and self._checkpoint(request, lists[self.full], start, end, prefill_end):
            self._checkpoints[request] = (self.checkpoint_position(end), cdiv(end, bs) - 2)
        else:
            self._checkpoints.pop(request, None)
        for g in range(self.full, self.groups):
            blocks = lists[g]
            checkpoint = request in self._checkpoints
            if required <= len(blocks) and not checkpoint:
                continue
            previous = len(blocks)
            skipped = required - spec - 1  # (the state's column)
            if previous < skipped:
                blocks.extend([NULL] * (skipped - checkpoint - previous))
            if grown:  # (speculative blocks left below the state's column move up to serve again)
                for j in range(previous - spec, previous):
                    if j >= skipped - checkpoint:
                        break
                    blocks.append(blocks[j])
                    blocks[j] = NULL
            n = required - len(blocks)
            if n > 0:
                blocks.extend(self._allocate(g, n))
                taken += n
        self.grown.add(request)
        request.num_blocks += taken
        return taken

    def skipped_blocks(self, computed: int) -> int:
        """A state group's blocks before the one holding the last of ``computed`` processed tokens
        (``get_num_skipped_tokens`` = computed − 1)."""
        return max(computed - 1, 0) // self.block_size

    # -- caching ------------------------------------------------------------------------------------------------

    def cache_full_blocks(self, request, num_tokens: int) -> None:
        """Cache the blocks ``num_tokens`` known tokens fill: every full group's; a state group's only at the prompt's
        replay boundaries and the request's junction (retention 0), where it holds a state. Then vLLM's
        ``_cache_partial_tail_block``: a step that wrote a checkpoint keys it at its position (it sits a column late
        with EAGLE's drop) if that is the prompt's or the junction's, else uncaches it; any other step whose tokens
        reach exactly the prompt's ``checkpoint_position`` (rounded down to a block) marks the state there cached this
        step again while the request holds it, so no admission hits it then."""
        lists = request.block_ids
        if not lists:
            return
        bs = self.block_size
        full = min(num_tokens // bs, len(lists[0]))
        first = request.num_cached_blocks
        prompt = request.num_prompt_tokens
        if full > first:
            keys = request.block_keys.upto(full)
            stored = []
            for g in range(self.full):
                blocks = lists[g]
                for j in range(first, full):
                    if self._store(g, blocks[j], keys[j]) and g == 0:
                        stored.append(keys[j])
            kept = {b // bs - 1 for b in self.replay_boundaries(request)}  # (the block ending at each)
            for j in sorted(kept):
                if first <= j < full:
                    for g in range(self.full, self.groups):
                        blocks = lists[g]
                        if j < len(blocks) and blocks[j] != NULL:
                            self._store(g, blocks[j], keys[j])
                            self.cached_this_step.add((g, keys[j]))
            if stored and self.listener is not None:
                self.listener(stored, True)
            request.num_cached_blocks = full
        checkpoint = self._checkpoints.get(request)
        if checkpoint is not None:
            self._key_checkpoint(request, *checkpoint)
        elif full and full * bs == self.checkpoint_position(prompt):
            self._mark_replay_state(request, full - 1)

    def _key_checkpoint(self, request, position: int, column: int) -> None:
        """This step's checkpoint blocks (at ``column``, holding the state at ``position``): keyed as the block that
        ends at ``position`` if that is the prompt's checkpoint position or the junction, else uncached."""
        keep = position == self.checkpoint_position(request.num_prompt_tokens) or position == request.shared_prefix_boundary
        key = request.block_keys(position // self.block_size - 1)
        for g in range(self.full, self.groups):
            b = request.block_ids[g][column]
            if b == NULL or self.key_of[b] == (g, key) and keep:
                continue
            self._uncache(b)
            if keep:
                self._store(g, b, key)
                self.cached_this_step.add((g, key))

    def _uncache(self, b: int) -> None:
        """Block ``b`` holds no cached key any more."""
        key = self.key_of[b]
        if key is None:
            return
        holders = self.blocks_by_key[key]
        del holders[b]
        if not holders:
            del self.blocks_by_key[key]
        self.key_of[b] = None

    def _mark_replay_state(self, request, j: int) -> None:
        """The state the request holds at block ``j`` (its replay boundary's), if any, is cached this step."""
        key = request.block_keys(j)
        for g in range(self.full, self.groups):
            blocks = request.block_ids[g]
            if j < len(blocks) and blocks[j] != NULL:
                self._store(g, blocks[j], key)
                self.cached_this_step.add((g, key))


def state_checkpoint_valid(start: int, end: int, position: int, block_size: int) -> bool:
    """Whether a Mamba-2 chunk computing tokens ``start``…``end`` can write the state at ``position`` into a checkpoint
    (``is_mamba_prefill_checkpoint_valid`` with alignment 1): it starts on a block boundary, the checkpoint's column
    lies past the chunk's initial state, at least a block after the start and strictly inside the chunk."""
    return (start % block_size == 0 and cdiv(end, block_size) - 2 > (start - 1) // block_size
            and start + block_size <= position and start < position < end)
