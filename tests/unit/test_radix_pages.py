"""SGLang's paged radix cache (``page_size`` above 1): sequences as the segments of their whole pages.

Each expected value is worked out by hand from the rule: a page is ``page_size`` tokens of the sequence;
the cache holds, matches and evicts whole pages only, so two sequences share a page exactly when they
share all its tokens at the same position (SGLang keys a child by its first page and rounds a match down
to whole pages).
"""

from __future__ import annotations

from simmodel.engine.radix_cache import MixedPage, PageRun, RadixCache, mooncake_segments, page_segments
from simmodel.engine.scheduler.sglang import new_pages


def test_page_segments_runs_mixed_pages_and_a_dropped_tail() -> None:
    # 40 tokens of a then 30 of b, pages of 16: tokens 0–31 are two whole pages of a (a run from a's token
    # 0); 32–47 hold a's last 8 and b's first 8 (one mixed page); 48–63 are b's tokens 8–23 (a run from b's
    # token 8); b's last 6 tokens (64–69) do not fill a page and are left out.
    pages = page_segments([("a", 40), ("b", 30)], 16)
    assert pages == [(PageRun(("a", 0)), 2), (MixedPage([("a", 32, 8), ("b", 0, 8)]), 1), (PageRun(("b", 8)), 1)]


def test_page_segments_of_page_size_one_are_the_tokens_in_runs() -> None:
    assert page_segments([("a", 3), ("b", 2)], 1) == [(PageRun(("a", 0)), 3), (PageRun(("b", 0)), 2)]


def test_a_prefix_shared_mid_page_matches_its_whole_pages_only() -> None:
    # A and B share their first 20 tokens. With pages of 16, B's second page (tokens 16–31) holds 4 shared
    # tokens and 12 of its own, so it is not A's: B matches one page, 16 tokens (SGLang rounds 20 down).
    cache = RadixCache(100)
    a = page_segments([("p", 20), ("x", 30)], 16)   # 3 whole pages (50 tokens)
    b = page_segments([("p", 20), ("y", 30)], 16)
    added, _ = cache.insert(a)
    assert added == 3
    assert cache.match_length(b) == 1
    # A third sequence with A's first 40 tokens matches A's first two pages (32 tokens).
    c = page_segments([("p", 20), ("x", 20), ("z", 10)], 16)
    assert cache.match_length(c) == 2
    cache.check()


def test_mooncake_blocks_are_runs_of_pages() -> None:
    # Hash blocks of 64 tokens are 4 pages of 16 each; the 22-token last block is one page (16) and a
    # 6-token tail that stays out. A prompt sharing the first two blocks shares 8 pages.
    a = page_segments(mooncake_segments([1, 2, 3], 150, 64), 16)
    assert a == [(PageRun((1, 0)), 4), (PageRun((2, 0)), 4), (PageRun((3, 0)), 1)]
    cache = RadixCache(100)
    cache.insert(a)
    b = page_segments(mooncake_segments([1, 2, 4], 192, 64), 16)
    assert cache.match_length(b) == 8


def test_new_pages_continue_the_last_partial_page() -> None:
    # Pages of 4. A 3-token context has one page with one free slot: a 4th token fills it (no new page), a
    # 5th opens a second (1 page for 2 tokens). A context of exactly 4 tokens has no free slot: the next
    # token opens a page. From nothing, 9 tokens take ceil(9 / 4) = 3 pages; no tokens take none.
    assert new_pages(3, 1, 4) == 0
    assert new_pages(3, 2, 4) == 1
    assert new_pages(4, 1, 4) == 1
    assert new_pages(0, 9, 4) == 3
    assert new_pages(7, 0, 4) == 0
    # Pages of one token: every token is a page.
    assert new_pages(5, 3, 1) == 3
