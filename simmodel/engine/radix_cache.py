"""A radix prefix cache over token content for one rank (SGLang's ``RadixCache``).

Its unit is a token, or with SGLang's ``page_size`` above 1 a page: a sequence is then given as the
segments of its whole pages (``page_segments``) and the cache's capacity counts pages, so every match,
insertion, split and eviction is in whole pages, as SGLang's paged tree keys its children by a page.

Token content is described by *segments*: a sequence is a list of ``(block, length)`` pairs, and the
token at offset ``j`` of a segment is the token ``(block, j)``. Two sequences therefore share exactly
the tokens of their common leading run of blocks, plus the common leading tokens of the first block
they disagree on the length of (a Mooncake prompt's truncated last block shares its leading tokens).
Mooncake requests map each hash id to a segment of ``trace_block_size`` tokens (the last one
truncated); a synthetic unique prompt is one segment of its own; output tokens are one growing
segment per request, never shared.

The tree stores edges, not tokens: a node covers the tokens ``[start, end)`` of one block and its
children are keyed by their first token ``(block, start)``, so a 40k-token prompt of 64-token blocks
is ~625 nodes and a decode step extends its request's output leaf in place. Matching, insertion and
eviction still work token by token (nodes split where sequences diverge). Capacity accounting
(``num_free``) counts tokens in the tree plus tokens the scheduler has allocated but not inserted.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Sequence

Segments = Sequence[tuple[Hashable, int]]


class RadixNode:
    __slots__ = ("block", "start", "end", "children", "parent", "lock_ref", "last_access", "joined",
                 "sealed", "host", "evicted", "hits")

    def __init__(self, block: Hashable, start: int, end: int, parent: RadixNode | None) -> None:
        self.block = block
        self.start = start
        self.end = end
        self.children: dict[tuple[Hashable, int], RadixNode] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access = 0
        self.joined = False
        """This node goes on its parent's tokens in one of SGLang's nodes: the edge exists only because the
        tokens change block here (SGLang's tree splits where sequences diverge, inserts end and matches
        end, not where a segment does); eviction takes the two together."""
        self.sealed = False
        """An output leaf that an insertion ended (a re-prefill): tokens after it go in a child node, as
        SGLang's next insertion makes one (``seal``)."""
        self.host = False
        """A copy of the node's KV is in host memory (SGLang's HiCache: "backuped"; ``hiradix_cache``)."""
        self.evicted = False
        """The node's KV left the GPU and lives on the host only (HiCache; never without ``host``)."""
        self.hits = 0
        """Insertions that walked through the node (HiCache's ``hit_count``, its write-through threshold)."""

    @property
    def length(self) -> int:
        return self.end - self.start

    def __repr__(self) -> str:
        return f"RadixNode({self.block!r}[{self.start}:{self.end}], lock={self.lock_ref})"


class OutputBlock(tuple):
    """Block key of a request's output tokens (extended in place by decode steps)."""

    __slots__ = ()


class PageRun(tuple):
    """Block key of a run of whole pages inside one token block: ``(block, offset)``, whose unit ``j`` is
    the page that starts at token ``offset + j × page_size`` of ``block``."""

    __slots__ = ()


class MixedPage(tuple):
    """Block key of one page that straddles token blocks: the ``(block, offset, length)`` pieces it holds."""

    __slots__ = ()


class RadixCache:
    """Prefix cache of one rank holding at most ``capacity`` tokens (cached plus allocated)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.root = RadixNode(None, 0, 0, None)
        self.root.lock_ref = 1
        self.cached_tokens = 0
        """Tokens held by tree nodes."""
        self.evictable_tokens = 0
        """Tokens of nodes nobody locks."""
        self.allocated_tokens = 0
        """Tokens allocated to requests and not (yet) in the tree."""
        self._clock = 0
        self._heap: list[tuple[int, int, RadixNode]] = []
        """Candidates for eviction, (last access, order offered, node), least recently used first; an entry is
        live while its node is an unlocked leaf in the tree last used then (others are dropped when met)."""
        self._offered = 0
        self._compact_at = 1024
        self._on_insert: Callable[[RadixNode, int, bool], None] | None = None
        """Told of every node an insertion walks through or makes, with the position its tokens end at and
        whether it is new (a host tier's write-through, ``hiradix_cache.HiRadixCache``); None: nobody."""

    # -- capacity -----------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return self.capacity - self.cached_tokens - self.allocated_tokens

    @property
    def num_evictable(self) -> int:
        return self.evictable_tokens

    def allocate(self, num_tokens: int) -> bool:
        """Reserve ``num_tokens`` token slots, evicting unlocked cached tokens if needed."""
        if num_tokens > self.num_free:
            self.evict(num_tokens - self.num_free)
        if num_tokens > self.num_free:
            return False
        self.allocated_tokens += num_tokens
        return True

    def release(self, num_tokens: int) -> None:
        """Give back allocated (not inserted) slots."""
        self.allocated_tokens -= num_tokens

    # -- matching -----------------------------------------------------------------------------
    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _fresh(self, node: RadixNode) -> None:
        """``node`` starts one of SGLang's nodes split off at its start: SGLang's split gives that suffix (the
        node and the nodes joined to it) a fresh access time (``UnifiedTreeCore._split_node``)."""
        t = self._tick()
        stack = [node]
        while stack:
            n = stack.pop()
            n.last_access = t
            self._offer(n)
            stack.extend(c for c in n.children.values() if c.joined)

    def _unjoin(self, node: RadixNode) -> None:
        """Sequences diverge, or a match ends, after ``node``: where a child was joined to it in one of SGLang's
        nodes, that node splits there. (The root's children never are: it holds no tokens.)"""
        if node is self.root:
            return
        for child in node.children.values():
            if child.joined:
                child.joined = False
                self._fresh(child)

    def _split(self, node: RadixNode, at: int) -> RadixNode:
        """Split ``node`` after its first ``at`` tokens; returns the new upper node (same key). The lower part
        starts one of SGLang's nodes now, with a fresh access time (``_fresh``)."""
        last = node.last_access
        self._fresh(node)
        upper = RadixNode(node.block, node.start, node.start + at, node.parent)
        upper.lock_ref = node.lock_ref
        upper.last_access = last  # (the prefix is marked used by the match or insertion that split it)
        upper.joined, node.joined = node.joined, False
        node.parent.children[(node.block, node.start)] = upper
        node.start += at
        node.parent = upper
        upper.children[(node.block, node.start)] = node
        return upper

    def _walk(self, segments: Segments, limit: int | None, split: bool) -> tuple[int, RadixNode]:
        matched, node = self._descend(segments, limit, split)
        if split:  # SGLang splits its node where a match ends
            self._unjoin(node)
        return matched, node

    def _descend(self, segments: Segments, limit: int | None, split: bool) -> tuple[int, RadixNode]:
        node, matched = self.root, 0
        for block, seg_len in segments:
            off = 0
            while off < seg_len:
                if limit is not None and matched >= limit:
                    return matched, node
                child = node.children.get((block, off))
                if child is None:
                    return matched, node
                n = min(child.end, seg_len) - off
                if limit is not None:
                    n = min(n, limit - matched)
                if n < child.length:
                    matched += n
                    if split:
                        node = self._split(child, n)
                    return matched, node
                matched += n
                off += n
                node = child
        return matched, node

    def match(self, segments: Segments, limit: int | None = None) -> tuple[int, RadixNode]:
        """Longest cached prefix of the sequence (at most ``limit`` tokens): (length, last node).

        The last node covers exactly the matched tokens (a partly matched node is split), and the
        path is marked as just used."""
        matched, node = self._walk(segments, limit, split=True)
        self._touch(node)
        return matched, node

    def match_length(self, segments: Segments, limit: int | None = None) -> int:
        """Length of the longest cached prefix; changes nothing."""
        return self._walk(segments, limit, split=False)[0]

    def _touch(self, node: RadixNode) -> None:
        t = self._tick()
        leaf = node
        while node is not None and node is not self.root:
            node.last_access = t
            node = node.parent
        self._offer(leaf)

    def _offer(self, node: RadixNode) -> None:
        """Add ``node`` to the eviction candidates if it is an unlocked leaf (just made one, unlocked or used)."""
        if node.lock_ref == 0 and not node.children and node is not self.root:
            self._push(node)

    def _push(self, node: RadixNode) -> None:
        """``node`` is an eviction candidate as last used now."""
        self._offered += 1
        heapq.heappush(self._heap, (node.last_access, self._offered, node))
        if len(self._heap) > self._compact_at:
            self._compact()

    def _live(self, entry: tuple[int, int, RadixNode]) -> bool:
        last, _, node = entry
        parent = node.parent
        return (node.lock_ref == 0 and not node.children and node.last_access == last
                and parent.children.get((node.block, node.start)) is node)

    def _compact(self) -> None:
        """Drop the entries that are no longer live (amortized: the heap at most doubles in between)."""
        self._heap = compacted(self._heap, self._live)
        self._compact_at = max(1024, 2 * len(self._heap))

    # -- insertion ----------------------------------------------------------------------------
    def insert(self, segments: Segments, num_tokens: int | None = None, counted_from: int = 0) -> tuple[int, RadixNode]:
        """Insert the first ``num_tokens`` tokens of the sequence (all by default), marking its path used.
        ``counted_from``: where the same request's earlier insertions ended (a host tier counts hits past it,
        ``hiradix_cache``; unused here).

        Returns (tokens that were new to the tree, node ending at the last inserted token)."""
        remaining = sum(n for _, n in segments) if num_tokens is None else num_tokens
        node, added = self.root, 0
        fresh = None  # the last node this insertion made
        told = self._on_insert
        base = 0  # (tokens of the sequence before this segment)
        for block, seg_len in segments:
            if remaining <= 0:
                break
            off = 0
            seg_len = min(seg_len, off + remaining)
            # Moving on from a node that ends inside its block needs a node boundary (divergence).
            while off < seg_len:
                child = node.children.get((block, off))
                if child is None:
                    if (not node.children and node is not self.root and node.block == block
                            and node.end == off and isinstance(block, OutputBlock) and not node.sealed):
                        # Extend a request's own output leaf in place.
                        n = seg_len - off
                        node.end += n
                        if node.lock_ref == 0:
                            self.evictable_tokens += n
                    else:
                        self._unjoin(node)  # sequences diverge here
                        new = RadixNode(block, off, seg_len, node)
                        # (SGLang inserts a prompt and its outputs as two nodes: ``split_prompt``)
                        new.joined = node is fresh and not (off == 0 and isinstance(block, OutputBlock))
                        node.children[(block, off)] = new
                        self.evictable_tokens += new.length
                        node = fresh = new
                        if told is not None:
                            told(new, base + seg_len, True)
                    n = seg_len - off
                    added += n
                    self.cached_tokens += n
                    off = seg_len
                    break
                n = min(child.end, seg_len) - off
                if n < child.length:
                    child = self._split(child, n)
                off += n
                node = child
                if told is not None:
                    told(child, base + off, False)
            remaining -= seg_len
            base += seg_len
        self._unjoin(node)  # (SGLang splits its node where an insertion ends, as where a match ends)
        self._touch(node)
        return added, node

    def grow_leaf(self, node: RadixNode, block: Hashable, end: int) -> bool:
        """Fast path of ``insert`` for one decode step: if ``node`` is the request's own output leaf and
        ends just before ``end``, extend it to ``end`` in place (what ``insert`` would do). False otherwise."""
        if node.block is not block or node.children or node.end != end - 1 or node is self.root or node.sealed:
            return False
        node.end = end
        self.cached_tokens += 1
        if node.lock_ref == 0:
            self.evictable_tokens += 1
        self._touch(node)
        return True

    def seal(self, node: RadixNode) -> None:
        """Tokens inserted after ``node`` from now on go in a child node (SGLang's tree has a node boundary
        where an insertion ended; ours extends a request's output leaf in place otherwise)."""
        node.sealed = True

    def make_free(self, num_tokens: int) -> None:
        """Evict unlocked cached tokens until ``num_tokens`` are free, if they can be."""
        if num_tokens > self.num_free:
            self.evict(num_tokens - self.num_free)

    # -- locking ------------------------------------------------------------------------------
    def lock(self, node: RadixNode) -> None:
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_tokens -= node.length
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: RadixNode) -> None:
        self._unlock_path(node)
        self._offer(node)

    def _unlock_path(self, node: RadixNode) -> None:
        while node is not self.root:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.evictable_tokens += node.length
            node = node.parent

    # -- eviction -----------------------------------------------------------------------------
    def evict(self, num_tokens: int) -> int:
        """Evict least recently used unlocked leaves (whole nodes) until ``num_tokens`` are freed."""
        heap = self._heap
        freed = 0
        while freed < num_tokens and heap:
            entry = heapq.heappop(heap)
            if not self._live(entry):
                continue
            leaf = entry[2]
            while True:  # the leaf, and the nodes it is joined to (one node of SGLang's)
                parent = leaf.parent
                del parent.children[(leaf.block, leaf.start)]
                freed += leaf.length
                self.cached_tokens -= leaf.length
                self.evictable_tokens -= leaf.length
                if not (leaf.joined and parent is not self.root and not parent.children and parent.lock_ref == 0):
                    break
                leaf = parent
            self._offer(parent)
            heap = self._heap  # (an offer may have compacted it)
        return freed

    def check(self) -> None:
        """Recount cached and evictable tokens (tests)."""
        cached = evictable = 0
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            cached += node.length
            evictable += node.length if node.lock_ref == 0 else 0
            stack.extend(node.children.values())
        assert cached == self.cached_tokens, (cached, self.cached_tokens)
        assert evictable == self.evictable_tokens, (evictable, self.evictable_tokens)
        assert self.num_free >= 0


class ChunkCache(RadixCache):
    """SGLang's radix cache turned off (``--disable-radix-cache``): nothing is found, and a request's KV is
    freed as soon as nobody holds it (its finish or retraction), so nothing is ever evictable. A request's
    tokens still live in the tree while it runs, under its own segments (the scheduler gives each request
    segments of its own), so the accounting is the radix cache's."""

    def match(self, segments: Segments, limit: int | None = None) -> tuple[int, RadixNode]:
        return 0, self.root

    def match_length(self, segments: Segments, limit: int | None = None) -> int:
        return 0

    def unlock(self, node: RadixNode) -> None:
        while node is not self.root:
            node.lock_ref -= 1
            parent = node.parent
            if node.lock_ref == 0 and not node.children:
                del parent.children[(node.block, node.start)]
                self.cached_tokens -= node.length
            node = parent


def compacted(heap: list, live: Callable[[tuple], bool]) -> list:
    """The entries of a heap of eviction candidates that are still ``live``, as a heap."""
    kept = [entry for entry in heap if live(entry)]
    heapq.heapify(kept)
    return kept


def page_segments(segments: Segments, page_size: int) -> list[tuple[Hashable, int]]:
    """The whole pages of a token sequence as segments whose units are pages (SGLang's radix cache with
    ``page_size`` above 1 keys its tree by pages and holds whole pages only; a last partial page is left
    out). A run of pages that lie inside one token block is one segment (``PageRun``); a page that
    straddles blocks is a segment of one unit (``MixedPage``) named by its pieces. Two sequences share a
    page exactly when they share its tokens at the same position, so matching pages is SGLang's
    page-rounded match. Costs a step per segment, not per page."""
    out: list[tuple[Hashable, int]] = []
    pieces: list[tuple[Hashable, int, int]] = []  # the page in progress, when the position is mid-page
    pos = 0
    for block, length in segments:
        off = 0
        while off < length:
            if not pieces and length - off >= page_size:
                n = (length - off) // page_size
                out.append((PageRun((block, off)), n))
                off += n * page_size
                pos += n * page_size
                continue
            take = min(length - off, page_size - pos % page_size)
            pieces.append((block, off, take))
            off += take
            pos += take
            if pos % page_size == 0:
                out.append((MixedPage(pieces), 1))
                pieces = []
    return out


def mooncake_segments(hash_ids: Sequence[int], num_tokens: int, block_size: int) -> list[tuple[Hashable, int]]:
    """Segments of a Mooncake prompt: each hash id stands for ``block_size`` tokens, the last truncated."""
    segs = []
    left = num_tokens
    for h in hash_ids:
        if left <= 0:
            break
        n = min(block_size, left)
        segs.append((h, n))
        left -= n
    if left > 0:
        raise ValueError("hash_ids cover fewer tokens than the prompt")
    return segs
