"""SGLang's multimodal embedding cache: vision-encoder outputs kept by image identity, evicted LRU."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

MIB = 1 << 20
DEFAULT_CAPACITY_BYTES = 100 * MIB
"""``SGLANG_VLM_CACHE_SIZE_MB`` defaults to 100, and SGLang sizes the cache at that many MiB."""


class EmbeddingCache:
    """Encoded image embeddings of one worker, counted in bytes, not stored.

    Mirrors SGLang's ``MultiModalStaticCache`` (``mem_cache/multimodal_cache.py``): an LRU ``OrderedDict``
    keyed by the image's hash; a hit moves the entry to the most-recent end; an insert evicts the least
    recently used entries until the new one fits. An entry larger than the whole capacity is not stored,
    and, as in SGLang (which evicts until the cache is empty before giving up), it still empties the
    cache. Capacity 0 disables the cache: every lookup misses and nothing is stored.

    An entry's size is that of its embeddings: ``vision.embedding_bytes(tower, visual_tokens)``
    (tokens × out_hidden_size × (1 + DeepStack mergers) × 2 bytes in BF16).
    """

    __slots__ = ("capacity_bytes", "num_used_bytes", "num_hits", "num_misses", "_entries")

    def __init__(self, capacity_bytes: int = DEFAULT_CAPACITY_BYTES) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be >= 0, got {capacity_bytes}")
        self.capacity_bytes = capacity_bytes
        self.num_used_bytes = 0
        self.num_hits = 0
        self.num_misses = 0
        self._entries: OrderedDict[Hashable, int] = OrderedDict()

    @property
    def num_entries(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        """Whether ``key`` is cached; touches neither recency nor the counters."""
        return key in self._entries

    def lookup(self, key: Hashable) -> bool:
        """Whether the image's embeddings are cached; a hit makes the entry the most recently used."""
        if key in self._entries:
            self._entries.move_to_end(key)
            self.num_hits += 1
            return True
        self.num_misses += 1
        return False

    def insert(self, key: Hashable, nbytes: int) -> bool:
        """Store an image's embeddings of ``nbytes``, evicting least recently used entries until they fit.

        Returns:
            Whether the entry is cached afterwards (a key already present is refreshed, not resized).
        """
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        if self.capacity_bytes == 0:
            return False
        if key in self._entries:
            self._entries.move_to_end(key)
            return True
        while self.num_used_bytes + nbytes > self.capacity_bytes:
            if not self._entries:
                return False
            _, evicted = self._entries.popitem(last=False)
            self.num_used_bytes -= evicted
        self._entries[key] = nbytes
        self.num_used_bytes += nbytes
        return True

    def keys_lru_first(self) -> list[Hashable]:
        """Cached keys from least to most recently used (eviction order)."""
        return list(self._entries)
