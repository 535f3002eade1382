"""The KV block pool of one attention-DP rank."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling division for non-negative integers."""
    return -(-a // b)


class BlockPool:
    """Usable KV blocks of one rank, counted, not addressed.

    Mirrors vLLM's ``BlockPool`` without prefix caching: a request holds
    ``cdiv(num_computed_tokens, block_size)`` blocks, taken as its context crosses block
    boundaries and all returned when it finishes or is preempted. vLLM's reserved null block
    is not part of ``num_blocks``.
    """

    __slots__ = ("num_blocks", "num_free_blocks", "block_size")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.num_free_blocks = num_blocks
        self.block_size = block_size

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= self.num_free_blocks

    def allocate(self, num_blocks: int) -> None:
        if num_blocks > self.num_free_blocks:
            raise RuntimeError(f"allocating {num_blocks} blocks with {self.num_free_blocks} free")
        self.num_free_blocks -= num_blocks

    def free(self, num_blocks: int) -> None:
        self.num_free_blocks += num_blocks
        if self.num_free_blocks > self.num_blocks:
            raise RuntimeError("freed more KV blocks than the pool holds")
