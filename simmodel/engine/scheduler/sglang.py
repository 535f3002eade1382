"""SGLang's scheduler for one rank, checked pass by pass against SGLang 0.5.23's real scheduler
(``tests/golden/sglang``; first written after NVIDIA Dynamo's mocker, aisimulate-core 0.13.0).

Plain Python, no time passes inside. Rules (``docs/sglang.md``; the mocker's in
``docs/research/sglang-mocker-rules.md``):

1. prefill-first, passes never mix (but see 8): if a prefill (EXTEND) batch forms it runs alone, else running
   requests decode one token each;
2. per pass a chunk budget (``chunked_prefill_size // attention_data``) and ``max_prefill_tokens``, both
   charged each extend in whole pages; a request whose pages do not fit the rest of the chunk budget is
   cut at the last whole page that does (with ignore_eos and the radix cache off: at the budget) and
   resumed first next pass, whose chunk takes the budget as it is;
3. a radix cache of pages of ``page_size`` tokens (:mod:`simmodel.engine.radix_cache`, whose units are
   pages): the hit is matched once per (re)admission (whole pages, capped at the sequence length - 1),
   the prompt's whole pages are inserted at the end of its prefill pass, its decoded pages when it
   finishes, finished sequences stay cached and evictable; until then a request's decoded pages and a
   last partial page are its own;
4. admission while ``extend + clipped output + page < available + evictable - reservations``, where running
   requests reserve ``clipped remaining output * new_token_ratio`` and each admitted one its extend in
   whole pages, one page and full clipped output; a refusal for want of KV marks the batch full until a
   request leaves it; the ratio decays on every decode pass and is never reset when idle;
5. retraction before a decode pass whose new pages exceed available + evictable: fewest outputs, then
   longest prompt, the last of ties; the victim's decoded KV is freed, its re-prefill samples a token;
6. FCFS or LPM ordering of the waiting queue (LPM's matches, and FCFS's prefix refresh every 32nd time,
   mark cached pages used for LRU eviction);
8. with ``radix_cache`` off (``ChunkCache``) nothing is shared or kept, and requests that ignore EOS are
   admitted by SGLang's ``add_one_req_ignore_eos``; with ``mixed_chunk`` a prefill pass also decodes.

9. with a host tier (HiCache, ``engine.hiradix_cache``; ``tests/golden/sglang_hicache``): a match runs on through
   host-only nodes; the admission check counts the host part as needing GPU room, the budgets only what is
   computed; a host part of at least 10 tokens is loaded into the very pass that admits it (GPU room made by
   eviction; without room it is computed); a plan first reaps the host copies that have landed (unlocking
   them), and an unfinished prompt's chunk counts its insertion's hits at the next plan, as SGLang inserts it then.

10. with EAGLE/MTP speculative decoding (``num_speculative_steps`` k, topk 1; SGLang's spec v2, source-read from
   sglang 0.5.23, no golden: the CPU oracle has no draft worker): a decode pass verifies each running request's last
   token and k drafts (k + 1 tokens over its committed ones); before it, each request's allocation grows to its
   committed tokens plus ``2 (k + 1)`` in whole pages and never shrinks (``eagle_prepare_for_decode``), and that
   growth, not one page a request, is what ``check_decode_mem`` tests and retraction frees room for; when the pass's
   outputs are processed the accepted drafts and the target's own token are committed, up to ``max_new_tokens`` of
   them emitted; a finished request stores its KV up to its last emitted token and frees the rest of its allocation
   (``release_kv_cache``). Admission and the ratio are unchanged (outputs count faster). Under the overlap loop the
   committed tokens lag a pass, which the doubled reserve covers.

Rule 7 (``prefill_decode_interval``) is the caller's: ``schedule(prefill_blocked=True)`` only decodes.

With ``overlap`` (SGLang's overlap host loop, ``event_loop_overlap``) the next pass is planned before the
previous pass's outputs are processed: progress through a prompt and KV allocation are committed when a
pass is planned, sampled tokens and finishes only when its outputs are processed, so a request that
finished in pass k still occupies a (discarded) decode slot in pass k+1, as SGLang frees "the one extra
delayed token".

Disaggregated serving is destination-first: a decode rank reserves a prompt's KV (``add_prealloc``)
before its prefill may start, the prefill rank holds the prompt's KV until the transfer is over
(``release``), and the arrived KV joins the decode rank's running batch (``add_handoff``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simmodel.engine.hiradix_cache import HiRadixCache
from simmodel.engine.radix_cache import ChunkCache, OutputBlock, RadixCache, RadixNode, mooncake_segments, page_segments
from simmodel.engine.request import Request, RequestStatus
from simmodel.engine.scheduler.base import SchedulerOutput
from simmodel.errors import SimulationError

if TYPE_CHECKING:
    from simmodel.offload.sglang_hicache import SglangHiCache

RETRACT_DECODE_STEPS = 20
IGNORE_EOS_RESERVE_TOKENS = 1
LPM_FCFS_QUEUE_THRESHOLD = 128
IN_BATCH_PREFIX_THRESHOLD = 32
WAITING_PREFIX_REFRESH_INTERVAL = 32
LOAD_BACK_THRESHOLD = 10
"""HiCache loads a host hit back only from this many tokens on (``UnifiedRadixCache.load_back_threshold``);
a shorter one is computed again."""


def new_pages(context: int, num_tokens: int, page: int) -> int:
    """The pages a sequence of ``context`` tokens takes for ``num_tokens`` more, continuing its last partial
    page (SGLang's ``alloc_extend`` / ``alloc_decode``): ``ceil((context + new) / P) − ceil(context / P)``."""
    return -context // page - -(context + num_tokens) // page


@dataclass(frozen=True, slots=True)
class SglangSchedulerConfig:
    """The SGLang server arguments (and environment variables) its scheduler reads, per engine."""

    max_running_requests: int = 256
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    clip_max_new_tokens: int = 4096
    attention_data: int = 1
    """Attention-DP ranks of the engine (the chunk budget is divided by it, the ratio scaled)."""
    prefill_decode_interval: int = 0
    """Rounds after a prefill round that cannot prefill (applied by the caller, rule 7)."""
    trace_block_size: int = 64
    """Tokens per Mooncake hash id."""
    base_new_token_ratio: float = 0.7
    """``SGLANG_INIT_NEW_TOKEN_RATIO``."""
    min_new_token_ratio_factor: float = 0.14
    """``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``."""
    new_token_ratio_decay_steps: int = 600
    """``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS``."""
    overlap: bool = False
    """SGLang's overlap host loop (``host_loop``): plan pass k+1 before processing pass k's outputs."""
    max_req_len: int | None = None
    """Longest sequence (prompt + outputs + 1) a request may reach: ``min(context_length, KV tokens) - 1``;
    SGLang clips ``max_new_tokens`` to ``max_req_len - prompt - 1``. None: no limit (the mocker's replay)."""
    num_reserved_decode_tokens: int = 512
    """Disaggregated decode: KV kept free per running or incoming request (``SGLANG_NUM_RESERVED_DECODE_TOKENS``)."""
    ignore_eos: bool = False
    """Requests sent with ``ignore_eos``: a running one is expected to need all its remaining output, not
    ``new_token_ratio`` of it."""
    page_size: int = 1
    """SGLang's ``--page-size``: KV is allocated, cached and matched in pages of this many tokens."""
    radix_cache: bool = True
    """SGLang's radix cache; off (``--disable-radix-cache``), no prefix is shared or kept (``ChunkCache``)."""
    mixed_chunk: bool = False
    """SGLang's ``enable_mixed_chunk``: a prefill pass also decodes the running requests, if their KV fits."""
    host_pages: int = 0
    """HiCache (``--enable-hierarchical-cache``): pages of the rank's host pool; 0: no host tier."""
    write_policy: str = "write_through"
    """HiCache's ``--hicache-write-policy``: when KV is copied to the host (``hiradix_cache``)."""
    num_speculative_steps: int = 0
    """EAGLE/MTP speculative decoding (``engine.nextn``; SGLang's ``--speculative-num-steps`` with
    ``--speculative-eagle-topk 1``): each decode pass verifies this many drafts per request (rule 10); 0: none."""

    @property
    def decode_reserve(self) -> int:
        """KV tokens a speculative request keeps allocated past its committed ones at each decode (SGLang's
        ``get_alloc_reserve_per_decode``): twice ``max(steps · topk, draft tokens)`` = 2 (k + 1) with topk 1."""
        k = self.num_speculative_steps
        return 2 * (k + 1) if k else 0

    def __post_init__(self) -> None:
        if self.schedule_policy not in ("fcfs", "fifo", "lpm"):
            raise ValueError(f"unknown schedule_policy {self.schedule_policy!r}")

    @property
    def chunk_budget(self) -> int:
        return self.chunked_prefill_size // self.attention_data

    @property
    def init_new_token_ratio(self) -> float:
        cons = self.schedule_conservativeness * (0.3 if self.attention_data > 1 else 1.0)
        return min(self.base_new_token_ratio * cons, 1.0)

    @property
    def min_new_token_ratio(self) -> float:
        return min(self.min_new_token_ratio_factor * self.init_new_token_ratio, 1.0)

    @property
    def new_token_ratio_decay(self) -> float:
        return (self.init_new_token_ratio - self.min_new_token_ratio) / self.new_token_ratio_decay_steps


class RadixPool:
    """The rank's KV pool as the rank and its reports see it: the radix cache's pages (its blocks; tokens
    with page size 1)."""

    caching = True

    def __init__(self, cache: RadixCache, page_size: int) -> None:
        self.cache = cache
        self.block_size = page_size
        self.num_blocks = cache.capacity
        self.num_queries = 0
        """Prompt tokens looked up at first admissions."""
        self.num_hits = 0
        """Of those, tokens found in the radix tree."""

    @property
    def num_used_blocks(self) -> int:
        """Pages held by requests (allocated, or locked in the tree); cached unlocked pages are reusable."""
        cache = self.cache
        return cache.capacity - cache.num_free - cache.num_evictable


class _State:
    """What the scheduler keeps per request (``Request`` has fixed slots)."""

    __slots__ = ("prompt_segments", "prompt_pages", "prompt_full", "output_block", "budget_new", "max_new", "node",
                 "protected", "allocated", "hit", "held", "inserted", "kv_allocated")

    def __init__(self, prompt_segments: list[tuple[Hashable, int]], output_block: OutputBlock,
                 page_size: int, num_prompt_tokens: int, budget_new: int) -> None:
        self.prompt_segments = prompt_segments
        """The prompt's tokens (the waiting queue's in-batch prefix check matches tokens)."""
        self.prompt_pages = prompt_segments if page_size == 1 else page_segments(prompt_segments, page_size)
        """The prompt's whole pages (the tree's units)."""
        self.prompt_full = num_prompt_tokens // page_size
        """Whole pages of prompt; the output block's unit ``j`` is the page ``prompt_full + j`` (the first
        holds the prompt's last partial page, if any, and the first outputs)."""
        self.output_block = output_block
        self.budget_new = budget_new
        """``max_new_tokens`` as SGLang clips it on arrival (``SglangScheduler._clip_max_new``)."""
        self.max_new = max(1, budget_new)
        """The tokens the request makes (a prefill always samples one)."""
        self.node: RadixNode | None = None
        """Deepest locked tree node (covers the request's KV in the tree)."""
        self.protected = 0
        """Pages of the request's sequence held by the tree under its lock (the depth of ``node``)."""
        self.allocated = 0
        """Pages allocated by planned passes and not in the tree: a partial last page, the decoded pages (SGLang
        inserts a request's decoded KV when it finishes), or pages whose outputs are not processed yet."""
        self.hit = 0
        self.held = 0
        """Of ``allocated``, the pages of the last chunk of an unfinished prompt that the tree already had
        (another request of the same pass computed them): SGLang keeps this copy until the next chunk."""
        self.inserted = 0
        """Pages of the request's sequence its insertions have reached since its admission (SGLang's
        ``cache_inserted_len``: a host tier counts hits past it)."""
        self.kv_allocated = 0
        """Speculative decoding: KV tokens allocated to the sequence by its decode passes (SGLang's
        ``kv_allocated_len``; 0 until its first decode, when its prefilled tokens are)."""


class SglangScheduler:
    """Per-rank SGLang scheduling: ``schedule()`` plans a pass, ``update_from_output()`` applies it."""

    planner = "sglang"
    """The pass planner's runs for it (``engine.planner.PLANNERS``): runs of decode passes."""

    def __init__(self, config: SglangSchedulerConfig, num_kv_tokens: int) -> None:
        self.config = config
        self.page = config.page_size
        """Tokens per page: the tree's and the pool's unit (SGLang sizes its pool in whole pages)."""
        if config.host_pages:
            if not config.radix_cache:
                raise ValueError("HiCache needs the radix cache")
            self.cache: RadixCache = HiRadixCache(num_kv_tokens // self.page, config.host_pages, config.write_policy)
        else:
            self.cache = (RadixCache if config.radix_cache else ChunkCache)(num_kv_tokens // self.page)
        self.tiered = bool(config.host_pages)
        """A host tier behind the tree (HiCache): its copies are timed by ``offload``."""
        self.offload: SglangHiCache | None = None
        """HiCache's copies on the rank's host link (``simmodel.offload``), attached by the rank."""
        self._fresh: deque[Request] = deque()
        """With a storage tier behind HiCache: requests that reached the queue (new or retracted) and are not looked
        up on it yet (``_prefetch_fresh``, at the next plan that sees them)."""
        self._stashed: list[tuple[Request, int]] = []
        """HiCache: prompts whose last chunk went in the tree at its pass end, and the pages it reached; SGLang
        inserts an unfinished prompt's chunk at the next plan (``stash_chunked_request``), so that is when its
        hits are counted and its backups made (``_restash``)."""
        self.num_kv_tokens = self.cache.capacity * self.page
        self.pool = RadixPool(self.cache, self.page)
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.chunked: Request | None = None
        """The request whose prompt was cut at the chunk budget; resumed first next pass."""
        self.new_token_ratio = config.init_new_token_ratio
        self._refreshes = 0
        """FCFS prefill attempts with requests waiting (SGLang refreshes their prefixes every 32nd)."""
        self._eos_states: list[tuple[float, int]] | None = None
        """This pass's ``_fits_ignore_eos`` states (SGLang's ``PrefillAdder.req_states``)."""
        self.batch_is_full = False
        """SGLang's ``running_batch.batch_is_full``: a prefill was refused for want of KV or of a running slot;
        none is tried again until a request leaves the running batch (or a chunk pass ends)."""
        self._states: dict[Request, _State] = {}
        self.num_retractions = 0
        self.prealloc: list[Request] = []
        """Disaggregated decode: requests waiting for this rank to reserve their prompt's KV."""
        self.transferring: list[Request] = []
        """Disaggregated decode: reserved, their KV on its way."""
        self.handoffs: list[Request] = []
        """Disaggregated decode: KV arrived; they join the running batch at the next plan."""
        self.on_kv_reserved: Callable[[Request], None] | None = None
        self.accept: Callable[[Request, int], int] | None = None
        """Speculative decoding: how many of a request's verified drafts are accepted (``engine.nextn_accepted``)."""
        self.num_drafts_verified = 0
        self.num_drafts_accepted = 0

    # -- queue --------------------------------------------------------------------------------
    def _state(self, request: Request) -> _State:
        st = self._states.get(request)
        if st is None:
            if not self.config.radix_cache:  # (nothing shared: the request's tokens are its own)
                segs = [(("prompt", request.request_id), request.num_prompt_tokens)]
            elif request.prompt_segments is not None:
                segs = request.prompt_segments
            elif request.hash_ids is not None:
                segs = mooncake_segments(request.hash_ids, request.num_prompt_tokens,
                                         self.config.trace_block_size)
            else:
                segs = [(("prompt", request.request_id), request.num_prompt_tokens)]
            st = self._states[request] = _State(segs, OutputBlock(("out", request.request_id)), self.page,
                                                request.num_prompt_tokens, self._clip_max_new(request))
        return st

    # -- pages ----------------------------------------------------------------------------------
    @property
    def num_free_tokens(self) -> int:
        """SGLang's ``available_size()``: free pages, in tokens."""
        return self.cache.num_free * self.page

    @property
    def num_evictable_tokens(self) -> int:
        """SGLang's ``evictable_size()``: cached pages nobody locks, in tokens."""
        return self.cache.num_evictable * self.page

    def _ceil_pages(self, num_tokens: float) -> int:
        return int(-(-num_tokens // self.page))

    def _paged(self, num_tokens: float) -> int:
        """Tokens rounded up to whole pages (SGLang's ``ceil_paged_tokens``)."""
        return self._ceil_pages(num_tokens) * self.page

    def _make_free_tokens(self, num_tokens: float) -> None:
        """SGLang's ``evict_from_tree_cache``: evict whole nodes until ``num_tokens`` are free, if they can be."""
        self.cache.make_free(self._ceil_pages(num_tokens))

    def add_request(self, request: Request) -> None:
        self._state(request)
        self.waiting.append(request)
        if self.prefetching:
            self._fresh.append(request)

    @property
    def prefetching(self) -> bool:
        """A storage tier behind the host pool: requests are looked up on it as they reach the scheduler."""
        return self.offload is not None and self.offload.storage is not None

    def has_requests(self) -> bool:
        return bool(self.running or self.waiting or self.chunked or self.prealloc or self.handoffs)

    def reset_prefix_cache(self) -> None:
        if self.tiered:  # (the host pool goes too: a restarted engine starts cold)
            self.cache.clear()
            return
        self.cache.evict(self.cache.evictable_tokens)  # (nothing is locked: every node may go)

    @property
    def num_queued(self) -> int:
        """The waiting queue, and on a P/D decode rank the requests waiting for their KV reservation."""
        return len(self.waiting) + len(self.prealloc)

    # -- disaggregated serving (destination-first) ------------------------------------------------
    def add_prealloc(self, request: Request) -> None:
        """A request routed here for decoding: its prompt's KV is reserved, in queue order, by a later
        plan (SGLang's ``DecodePreallocQueue``); only then may its prefill start."""
        self._state(request)
        request.awaiting_kv = True
        self.prealloc.append(request)

    def add_handoff(self, request: Request) -> None:
        """The prompt's KV (and the prefill's first token) arrived: the request decodes from the next plan."""
        self.transferring.remove(request)
        self.handoffs.append(request)

    def drop_handoff(self, request: Request) -> None:
        """A request that needs no decode step: free its reservation."""
        self.transferring.remove(request)
        st = self._states.pop(request)
        self.cache.release(st.allocated)

    def release(self, request: Request) -> None:
        """The prefill side of a handoff: the transfer is over, the prompt's whole pages stay cached
        (unlocked), its last partial page is freed."""
        st = self._states.pop(request)
        self.cache.release(st.allocated)
        self.cache.unlock(st.node)

    def clipped_need(self, request: Request) -> int:
        """A running request's prompt and clipped output tokens (``reserve_preallocs``' largest need)."""
        return request.num_prompt_tokens + min(self._max_new(request), self.config.clip_max_new_tokens)

    def reserve_preallocs(self, retractable: int | None = None, largest_need: int | None = None) -> int:
        """SGLang's ``DecodePreallocQueue.pop_preallocated``, in queue order: a prompt's KV is reserved when
        ``max(prompt + R, prompt + clipped output − retractable) <= allocatable``, where R is
        ``num_reserved_decode_tokens`` (512), retractable the tokens of the running requests, and
        allocatable = free + evictable − max(R × (running + incoming), the largest clipped need of one
        running request − retractable); each reservation then takes prompt + R off allocatable (the prompt
        in whole pages, as the allocator takes it). So every running request can still finish with all
        others retracted. ``retractable`` (prompt and output tokens of the running requests) and
        ``largest_need`` (the largest ``clipped_need`` among them, or ``retractable`` if none runs): given by a
        run of decode passes, whose requests' fields lag behind (``engine.planner.sglang_run``); else counted
        here. Returns how many were reserved."""
        cfg, cache = self.config, self.cache
        reserve = cfg.num_reserved_decode_tokens
        running = self.running
        if retractable is None:
            retractable = sum(q.num_prompt_tokens + q.num_output_tokens for q in running)
        if largest_need is None:
            largest_need = max(map(self.clipped_need, running), default=retractable)
        single = largest_need - retractable
        incoming = len(self.transferring) + len(self.handoffs)
        allocatable = (self.num_free_tokens + self.num_evictable_tokens
                       - max(reserve * (len(running) + incoming), single))
        reserved = 0
        for r in self.prealloc:
            if len(running) + incoming + reserved >= cfg.max_running_requests:
                break
            need = r.num_prompt_tokens
            required = self._paged(need) + reserve
            if max(required, need + min(self._max_new(r), cfg.clip_max_new_tokens) - retractable) > allocatable:
                break
            if not cache.allocate(self._ceil_pages(need)):
                break
            allocatable -= required
            self._states[r].allocated = self._ceil_pages(need)
            r.awaiting_kv = False
            self.transferring.append(r)
            reserved += 1
            if self.on_kv_reserved is not None:
                self.on_kv_reserved(r)
        if reserved:
            del self.prealloc[:reserved]
        return reserved

    def join_handoffs(self) -> list[Request]:
        """Arrived KV enters the tree under the request's lock (its whole pages; a last partial page stays
        the request's own); the request runs with the prefill's token. Returns the requests that joined the
        batch (a run of decode passes takes them as new columns: ``engine.planner.sglang_run``)."""
        cache = self.cache
        joined = list(self.handoffs)
        for r in joined:
            st = self._states[r]
            cache.release(st.allocated)
            _, node = cache.insert(st.prompt_pages, st.prompt_full)
            cache.lock(node)
            st.allocated = self._ceil_pages(r.num_prompt_tokens) - st.prompt_full
            cache.allocate(st.allocated)
            st.node, st.protected = node, st.prompt_full
            r.num_computed_tokens = r.num_prompt_tokens
            r.num_output_tokens = 1
            r.status = RequestStatus.RUNNING
            self.running.append(r)
        self.handoffs.clear()
        return joined

    def _segments(self, request: Request, st: _State) -> list[tuple[Hashable, int]]:
        """The request's sequence (prompt and outputs so far) in the tree's units, pages."""
        n = self._ceil_pages(request.num_prompt_tokens + request.num_output_tokens) - st.prompt_full
        return [*st.prompt_pages, (st.output_block, n)] if n > 0 else st.prompt_pages

    def _token_segments(self, request: Request, st: _State) -> list[tuple[Hashable, int]]:
        """The request's sequence in tokens (the waiting queue's in-batch prefix tree has page size 1)."""
        if request.num_output_tokens:
            return [*st.prompt_segments, (st.output_block, request.num_output_tokens)]
        return st.prompt_segments

    # -- scheduling ---------------------------------------------------------------------------
    def schedule(self, arrived_before: int | None = None, prefill_blocked: bool = False,
                 preallocs_reserved: bool = False) -> SchedulerOutput:
        """Plan one pass. ``arrived_before`` (overlap loop): requests queued at or after it are not seen yet;
        ``prefill_blocked``: a ``prefill_decode_interval`` round that may only decode; ``preallocs_reserved``:
        this plan's reservations were made already (``reserve_preallocs``, by a run of decode passes)."""
        out = SchedulerOutput()
        prefetching = self.prefetching
        if prefetching and self._fresh:  # (SGLang looks new requests up as it takes them in, before its polls)
            self._prefetch_fresh(arrived_before)
        if self.offload is not None:
            self.offload.reap()
        if prefetching and self.waiting:
            for request in self.offload.prefetch_due(self.waiting):
                self._prefetch(request)
        if self._stashed:
            self._restash()
        if self.prealloc and not preallocs_reserved:
            self.reserve_preallocs()
        if self.handoffs:
            self.join_handoffs()
        if not prefill_blocked and (self.waiting or self.chunked is not None):
            self._schedule_prefill(out, arrived_before)
        if self.running and not out.requests:
            self._schedule_decode(out)
        if self.tiered:
            if out.requests:  # (else the copies are waited for before the next pass that runs)
                out.host_synced_pages = self.cache.take_synced()
            elif (self.waiting or self.chunked is not None) and self.offload is not None:
                self.offload.stalled()
        return out

    def _prefetch_fresh(self, arrived_before: int | None) -> None:
        fresh = self._fresh
        while fresh and (arrived_before is None or fresh[0].queued_at < arrived_before):
            request = fresh.popleft()
            if request in self._states and request.status is not RequestStatus.RUNNING:
                self._prefetch(request)

    def _prefetch(self, request: Request) -> None:
        self.offload.prefetch(request, self._segments(request, self._states[request]),
                              (request.num_tokens - 1) // self.page)

    def _restash(self) -> None:
        """HiCache: the chunks inserted at the last pass end are inserted again, counting their hits now (SGLang
        inserts them at this plan; the first insertion counted none)."""
        for request, full in self._stashed:
            st = self._states.get(request)
            if st is not None and st.node is not None:
                self.cache.insert(self._segments(request, st), full, st.inserted)
                st.inserted = max(st.inserted, full)
        self._stashed.clear()

    def _budget_new(self, request: Request) -> int:
        """The request's ``max_new_tokens`` as SGLang clips it on arrival (kept with its state)."""
        st = self._states.get(request)
        return st.budget_new if st is not None else self._clip_max_new(request)

    def _clip_max_new(self, request: Request) -> int:
        """The request's ``max_new_tokens`` as SGLang clips it on arrival (``init_req_max_new_tokens``): to
        the context, ``max_req_len − prompt − 1``, and to what an empty pool holds, ``KV tokens − prompt in
        whole pages − one page − 1``; zero at least. Admission reserves from it."""
        limit = self.config.max_req_len
        if limit is None:  # (the mocker's replay: no clip)
            return request.max_tokens
        prompt = request.num_prompt_tokens
        return max(0, min(request.max_tokens, limit - prompt - 1,
                          self.num_kv_tokens - self._paged(prompt) - self.page - 1))

    def _max_new(self, request: Request) -> int:
        """The tokens the request makes: ``_budget_new``, but a prefill always samples one."""
        return max(1, self._budget_new(request))

    def decodes(self, request: Request) -> bool:
        """Disaggregated decode: whether a request arriving with the prefill's token still has tokens to make."""
        return self._max_new(request) > 1

    def _clipped_remaining(self, request: Request) -> int:
        return min(max(self._budget_new(request) - request.num_output_tokens, 0), self.config.clip_max_new_tokens)

    def _order_waiting(self, arrived_before: int | None) -> None:
        """SGLang's ``calc_priority``. LPM (while at most 128 wait): each waiting request's whole sequence is
        matched in the tree, in queue order, which marks the matched nodes used (and splits one where the
        match ends), then the queue is sorted by match, longest first. Otherwise (FCFS) the queue stays in
        order, and every 32nd time the first 128 waiting requests' prefixes are marked used, the last first
        (``SGLANG_ENABLE_WAITING_PREFIX_REFRESH``): both set which cached tokens LRU eviction takes."""
        waiting = self.waiting
        unseen: list[Request] = []
        if arrived_before is not None:  # the overlap loop has not received these yet: they stay behind
            unseen = [r for r in waiting if r.queued_at >= arrived_before]
            if unseen:
                waiting = [r for r in waiting if r.queued_at < arrived_before]
        cache, states, page = self.cache, self._states, self.page
        if self.config.schedule_policy != "lpm" or len(waiting) > LPM_FCFS_QUEUE_THRESHOLD:
            if waiting and self.config.radix_cache:
                if self._refreshes % WAITING_PREFIX_REFRESH_INTERVAL == 0:
                    for r in reversed(waiting[:LPM_FCFS_QUEUE_THRESHOLD]):
                        cache.match(self._segments(r, states[r]))
                self._refreshes += 1
            return
        temp = RadixCache(1 << 62)
        keys: dict[Request, float] = {}
        for r in waiting:
            st = states[r]
            hit = cache.match(self._segments(r, st))[0] * page
            keys[r] = -hit
            if hit <= IN_BATCH_PREFIX_THRESHOLD:
                tokens = self._token_segments(r, st)
                if temp.match_length(tokens) >= IN_BATCH_PREFIX_THRESHOLD:
                    keys[r] = float("inf")
                else:
                    temp.insert(tokens)
        waiting.sort(key=keys.__getitem__)
        if unseen:
            self.waiting = waiting + unseen

    def _running_offset(self, request: Request) -> float:
        """KV a running request is expected to still need: its clipped remaining output, times the
        ``new_token_ratio`` (SGLang's early-EOS estimate) unless it ignores EOS."""
        ratio = 1.0 if self.config.ignore_eos else self.new_token_ratio
        return self._clipped_remaining(request) * ratio

    def _schedule_prefill(self, out: SchedulerOutput, arrived_before: int | None) -> None:
        """SGLang's ``PrefillAdder``: the chunk in progress first, then waiting requests in order while the
        budgets last. KV is counted in tokens of whole pages (P tokens a page): a request is admitted while
        ``extend + clipped remaining output + P < free + evictable − offset``; the offset starts at the
        running requests' expected needs (``_running_offset``) and each admission adds its extend in whole
        pages, one page, and its clipped output (nothing for a chunk that does not end the prompt); the
        chunk and prefill budgets are charged the extend in whole pages. A prompt whose pages do not fit the
        rest of the chunk budget is cut at the last whole page that does. The first refusal for want of KV
        marks the batch full: no prefill is tried again until a request leaves the running batch
        (``batch_is_full``)."""
        cfg, cache, states, page = self.config, self.cache, self._states, self.page
        was_empty = not self.running
        if was_empty:
            self.batch_is_full = False
        chunked = self.chunked
        if chunked is None and (self.batch_is_full or len(self.running) >= cfg.max_running_requests):
            self.batch_is_full = True
            return
        offset = sum(map(self._running_offset, self.running))
        current = 0.0  # (the offset of this pass's own allocations, SGLang's ``current_offset``)
        rem_chunk, rem_input = cfg.chunk_budget, cfg.max_prefill_tokens
        decoding = list(self.running) if cfg.mixed_chunk else []
        if decoding:  # a mixed pass: the running requests' decode tokens come off every budget first
            offset += len(decoding)
            current += len(decoding)
            rem_chunk -= len(decoding)
            rem_input -= len(decoding)
        batch: list[tuple[Request, int, int]] = []  # (request, context, new tokens)

        if chunked is not None:
            extend = chunked.num_tokens - chunked.num_computed_tokens
            # The next chunk of an admitted prompt is not checked again; SGLang caps it at the KV left after
            # the offset, or takes a whole chunk when none is left (it must make progress to free its KV).
            # Where that is more than can be allocated SGLang stops ("Prefill out of memory"); here the
            # chunk shrinks to what can be, or waits for decodes to retract or finish.
            left = self.num_free_tokens + self.num_evictable_tokens
            budget = int(left - offset)
            take = min(extend, rem_chunk if budget <= 0 else min(rem_chunk, budget), left)
            if take <= 0:
                chunked = None
        if chunked is not None:
            ends = take == extend
            charge = self._paged(take)
            offset += charge + page + (min(self._budget_new(chunked), cfg.clip_max_new_tokens) if ends else 0)
            current += charge + page
            rem_chunk -= charge
            rem_input -= charge
            batch.append((chunked, chunked.num_computed_tokens, take))
            self.chunked = None if ends else chunked

        self._order_waiting(arrived_before)
        ignore_eos = cfg.ignore_eos and not cfg.radix_cache  # (SGLang's add_one_req_ignore_eos)
        self._eos_states = None
        admitted, skipped = 0, False
        prefetching = self.prefetching
        for r in self.waiting:
            if rem_chunk <= 0 or rem_input <= 0 or self.chunked is not None:
                break
            if len(self.running) + len(batch) >= cfg.max_running_requests:
                self.batch_is_full = True
                break
            if arrived_before is not None and r.queued_at >= arrived_before:
                break
            if prefetching and not self.offload.prefetch_ready(r):
                skipped = True  # (SGLang's check_prefetch_progress: skipped, later requests may go)
                continue
            st = states[r]
            n = r.num_tokens
            hit, node = cache.match(self._segments(r, st), (n - 1) // page)
            host = 0
            if self.tiered:  # (the match runs on through host-only nodes: the GPU prefix, then the host's)
                best = node
                node, host = cache.device_part(node)
                hit -= host
            hit *= page
            extend = n - hit  # (host pages need GPU room: the check counts them)
            cache.lock(node)  # the check sees the hit locked (SGLang's ``_lock_node``)
            left = self.num_free_tokens + self.num_evictable_tokens
            if (not self._fits_ignore_eos(r, extend, left - offset, left - current, batch) if ignore_eos
                    else extend + self._clipped_remaining(r) + page >= left - offset):
                cache.unlock(node)
                self.batch_is_full = bool(batch) or bool(self.running)
                break
            loaded = 0
            if host:
                take = self._take(extend - host * page, rem_chunk, ignore_eos)
                if take > 0 and host * page >= LOAD_BACK_THRESHOLD:
                    cache.lock(best)  # (the load's nodes stay put while room is made)
                    load = cache.load_back(best, host)
                    if load:
                        cache.lock(best)  # the load holds its nodes until a plan reaps it, the request its path
                        cache.unlock(node)
                        node, loaded = best, host
                    else:
                        cache.unlock(best)
                hit += loaded * page
                extend = n - hit
            take = self._take(extend, rem_chunk, ignore_eos)
            if take <= 0:  # (not even a page of chunk budget left)
                cache.unlock(node)
                break
            st.node, st.protected, st.hit = node, hit // page, hit
            r.num_computed_tokens = hit
            if r.num_preemptions == 0:
                r.num_cached_tokens = hit - loaded * page
                self.pool.num_queries += r.num_prompt_tokens
                self.pool.num_hits += hit - loaded * page
            if prefetching:
                self.offload.admitted(r, hit // page - loaded, loaded, r.num_preemptions == 0)
            if loaded:
                assert self.offload is not None
                self.offload.loaded(r, node, load, loaded, r.num_preemptions == 0)
                if out.host_loaded is None:
                    out.host_loaded = []
                out.host_loaded.append((r, loaded))
            charge = self._paged(take)
            if take < extend:
                self.chunked = r
                offset += charge + page
            else:
                offset += charge + page + min(self._budget_new(r), cfg.clip_max_new_tokens)
            current += charge + page
            rem_chunk -= charge
            rem_input -= charge
            batch.append((r, hit, take))
            admitted += 1
            (out.resumed if r.status is RequestStatus.PREEMPTED else out.admitted).append(r)
            r.status = RequestStatus.RUNNING
            left = self.num_free_tokens + self.num_evictable_tokens
            if left - offset <= 0 or left - current <= 0:  # SGLang's budget_state: no KV left for another
                self.batch_is_full = True
                break
        if admitted and skipped:
            taken = {r for r, _, _ in batch}
            self.waiting = [r for r in self.waiting if r not in taken]
        elif admitted:
            del self.waiting[:admitted]
        if self.chunked is not None or (was_empty and batch):
            # The chunk in progress leaves the prefill batch, or the batch becomes the running batch (whose
            # flag is its own, clear): either way SGLang tries a prefill again.
            self.batch_is_full = False
        joined = self._allocate_prefill(out, batch) if batch else []
        if batch and decoding:  # SGLang's mix_with_running, if the decodes' KV fits after the prefill's
            need = self._decode_pages(decoding)
            cache.make_free(need)
            if need <= cache.num_free:
                cache.make_free(len(decoding))  # (a page per request: SGLang's conservative estimate)
                cache.allocate(need)
                self._add_decodes(out, decoding)
                # The mixed batch (the prefills, then the decodes) becomes the running batch, its flag clear.
                self.running = joined + decoding
                self.batch_is_full = False

    def _take(self, extend: int, rem_chunk: int, ignore_eos: bool) -> int:
        """The tokens of an ``extend`` the rest of the chunk budget takes: all of it, or with pages the part up to
        the last whole page that fits (``add_one_req_ignore_eos`` cuts at the budget itself)."""
        if ignore_eos:
            return min(extend, rem_chunk)
        page = self.page
        return extend if self._paged(extend) <= rem_chunk else rem_chunk // page * page

    def _allocate_prefill(self, out: SchedulerOutput, batch: list[tuple[Request, int, int]]) -> list[Request]:
        """SGLang's ``alloc_for_extend``: the batch's pages, each request continuing its own last partial page
        (``ceil((context + new) / P) − ceil(context / P)`` new pages); first the tree is evicted down to the
        batch's tokens free, plus a page per request when pages are above one token (the allocator's
        conservative estimate). Returns the requests whose prompt the pass finishes: they join the running
        batch, at its end."""
        cache, states, page = self.cache, self._states, self.page
        joined = []
        extend = sum(take for _, _, take in batch)
        self._make_free_tokens(extend + (len(batch) * page if page > 1 else 0))
        for r, ctx, take in batch:
            pages = new_pages(ctx, take, page)
            if not cache.allocate(pages):
                # SGLang itself stops here ("Prefill out of memory"): its admission reserved too little for
                # the outputs of running requests (clip_max_new_tokens / new_token_ratio), and a chunk of an
                # admitted prompt no longer fits.
                raise SimulationError(f"SGLang ran out of KV memory for a prefill chunk ({take} tokens, "
                                      f"{self.num_free_tokens + self.num_evictable_tokens} free or evictable), "
                                      f"as SGLang would ('Prefill out of memory'); raise clip_max_new_tokens or "
                                      f"schedule_conservativeness, or give the rank more KV{self._pinned_hint()}")
            states[r].allocated += pages
            out.requests.append(r)
            out.num_new_tokens.append(take)
            out.num_context_tokens.append(ctx)
            out.is_decode.append(False)
            done = ctx + take >= r.num_tokens
            out.samples.append(done)
            r.is_prefill_chunk = not done
            r.num_computed_tokens = ctx + take
            if done and not r.bootstrap:
                joined.append(r)  # decodes from the next pass on
        self.running += joined
        return joined

    def _fits_ignore_eos(self, request: Request, extend: int, remaining_total: float, remaining_current: float,
                         batch: list[tuple[Request, int, int]]) -> bool:
        """SGLang's admission of a request that ignores EOS when the radix cache is off
        (``add_one_req_ignore_eos``): its extend in whole pages and one page must fit what is left, and then, with every
        request of the batch, the running ones and this one ordered by the output each has left, each
        suffix of them must still be able to finish: ``left − Σ left_i × (requests from i on) + Σ tokens
        held by those before i > 1 × (requests from i on)``."""
        paged = self._paged(extend) + self.page
        if paged > min(remaining_current, remaining_total):
            return False
        states = self._eos_states
        entry = (self._budget_new(request) * 1.0 - request.num_output_tokens,
                 request.num_prompt_tokens + request.num_output_tokens)
        if states is None:
            states = self._eos_states = []
            for r in (request, *self.running, *(b[0] for b in batch)):
                left = self._budget_new(r) * 1.0 - r.num_output_tokens
                if left > 0:
                    states.append((left, r.num_prompt_tokens + r.num_output_tokens))
            states.sort(key=lambda state: state[0])
        elif entry[0] > 0:
            i = 0
            for i in range(len(states)):  # (SGLang's insertion: past the end it lands before the last)
                if entry[0] <= states[i][0]:
                    break
            states.insert(i, entry)
        rem = remaining_current - paged
        freed = 0
        for i, (left, held) in enumerate(states):
            n = len(states) - i
            if rem + freed - left * n <= IGNORE_EOS_RESERVE_TOKENS * n:
                return False
            freed += held
        return True

    def _decode_pages(self, running: list[Request]) -> int:
        """Pages a decode step of ``running`` allocates: one for each request whose KV fills its last page
        (SGLang's ``new_tokens_required_next_decode``; every request with page size 1); speculative, the pages
        that take each request's allocation to its committed tokens plus the reserve (``_spec_allocation``)."""
        page = self.page
        if self.config.num_speculative_steps:
            return sum(self._spec_allocation(r)[1] for r in running)
        if page == 1:
            return len(running)
        return sum(1 for r in running if r.num_computed_tokens % page == 0)

    def _spec_allocation(self, request: Request) -> tuple[int, int]:
        """A speculative request's KV tokens allocated after its next decode's allocation, and the pages it takes
        (SGLang's ``page_aligned_decode_alloc_lens``): the allocation grows to the committed tokens plus
        ``decode_reserve``, in whole pages, and never shrinks."""
        cur = max(self._states[request].kv_allocated, request.num_computed_tokens)
        nxt = max(cur, self._paged(request.num_computed_tokens + self.config.decode_reserve))
        return nxt, self._ceil_pages(nxt) - self._ceil_pages(cur)

    def _schedule_decode(self, out: SchedulerOutput) -> None:
        """A decode step for every running request; first, if the step's new pages do not fit after evicting
        (``check_decode_mem``), SGLang's ``retract_decode``: requests ordered by (outputs, −prompt) from most
        to least worth keeping (ties in batch order) are retracted from the end, at least one, until the
        rest fit, keeping one at least; the kept batch stays in that order. The ratio is then re-estimated
        from the kept requests, else it decays by one step. The step's allocation first evicts down to a
        page per request free (``alloc_for_decode``'s estimate)."""
        cache = self.cache
        running = self.running
        need = self._decode_pages(running)
        cache.make_free(need)
        if need > cache.num_free:
            kept = sorted(running, key=lambda r: (r.num_output_tokens, -r.num_prompt_tokens), reverse=True)
            while len(kept) > 1:
                self._retract(kept.pop(), out, len(kept))
                need = self._decode_pages(kept)
                cache.make_free(need)
                if need <= cache.num_free:
                    break
            if self.chunked is not None and need > cache.num_free + cache.num_evictable:
                # Only reachable when prefill_decode_interval runs decodes between a prompt's chunks: the
                # half-prefilled prompt gives its KV back (its prefix stays cached) and queues first.
                chunked, self.chunked = self.chunked, None
                self._retract(chunked, out, len(kept))
                self.waiting.insert(0, self.waiting.pop())
            self.running = running = kept
            self.batch_is_full = False
            decoded = sum(r.num_output_tokens for r in running)
            max_new = sum(self._max_new(r) for r in running)
            self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(running)) / (max_new + 1))
        else:
            self._decay_ratio()
        self._allocate_decode(len(running), need)
        self._add_decodes(out, running)

    def _decay_ratio(self) -> None:
        """A decode step that retracts nothing: the new-token ratio decays one step, down to its floor."""
        cfg = self.config
        self.new_token_ratio = max(self.new_token_ratio - cfg.new_token_ratio_decay, cfg.min_new_token_ratio)

    def _allocate_decode(self, num_requests: int, pages: int) -> None:
        """A decode step's ``pages`` new pages, once the tree is evicted down to a page per request free
        (``alloc_for_decode``'s estimate)."""
        if not self.config.num_speculative_steps:
            self.cache.make_free(num_requests)  # (a page per request: SGLang's conservative estimate)
        elif self.page > 1:  # (``alloc_paged_token_slots_extend``'s estimate: the pages and one per request more)
            self.cache.make_free(pages + num_requests)
        else:
            self.cache.make_free(pages)
        if not self.cache.allocate(pages):
            raise SimulationError(f"SGLang ran out of KV memory for a decode step of {num_requests} request(s) "
                                  f"with nothing left to retract, as SGLang would; raise clip_max_new_tokens or "
                                  f"schedule_conservativeness, or give the rank more KV{self._pinned_hint()}")

    def _pinned_hint(self) -> str:
        """What an out-of-memory message adds when HiCache copies in flight lock part of the KV."""
        pinned = self.offload.pages_in_flight() if self.offload is not None else 0
        if not pinned:
            return ""
        return (f"; {pinned * self.page} tokens are being copied to the host, their paths locked on the GPU until "
                f"the copies land (HiCache {self.cache.write_policy} over kv_cache.host_offload's link): a faster "
                f"link_gb_per_s, or write_through_selective, locks less")

    def _add_decodes(self, out: SchedulerOutput, running: list[Request]) -> None:
        """One decode token for each of ``running`` (its new pages allocated already); speculative, a verification
        of each one's last token and its ``k`` drafts (``_add_verifies``)."""
        if self.config.num_speculative_steps:
            self._add_verifies(out, running)
            return
        states, page = self._states, self.page
        contexts = [r.num_computed_tokens for r in running]
        for r, ctx in zip(running, contexts):
            if ctx % page == 0:
                states[r].allocated += 1
            r.num_computed_tokens = ctx + 1
        n = len(running)
        out.requests += running
        out.num_new_tokens += [1] * n
        out.num_context_tokens += contexts
        out.is_decode += [True] * n
        out.samples += [True] * n

    def _add_verifies(self, out: SchedulerOutput, running: list[Request]) -> None:
        """Speculative decoding (rule 10): each of ``running`` verifies its last sampled token and ``k`` drafts, over
        its committed tokens, its allocation grown to them plus the reserve (pages allocated already). Its committed
        tokens advance only when the pass's outputs are processed, by the tokens accepted."""
        k = self.config.num_speculative_steps
        states = self._states
        contexts = []
        for r in running:
            nxt, pages = self._spec_allocation(r)
            st = states[r]
            st.kv_allocated = nxt
            st.allocated += pages
            contexts.append(r.num_computed_tokens)
            out.drafts[r] = k
        n = len(running)
        out.requests += running
        out.num_new_tokens += [1 + k] * n
        out.num_context_tokens += contexts
        out.is_decode += [True] * n
        out.samples += [True] * n

    def _retract(self, request: Request, out: SchedulerOutput, remaining: int) -> None:
        """SGLang's ``release_req``: the KV the tree never got (decoded tokens, a last partial page) is freed,
        the rest unlocked, and the tree evicted down to ``RETRACT_DECODE_STEPS`` free tokens per request
        left running."""
        st = self._states[request]
        if st.allocated:
            self.cache.release(st.allocated)
            st.allocated = 0
        st.kv_allocated = 0
        self.cache.unlock(st.node)
        st.node, st.protected, st.inserted = None, 0, 0
        self._make_free_tokens(remaining * RETRACT_DECODE_STEPS)
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1
        self.num_retractions += 1
        self.waiting.append(request)
        out.preempted.append(request)
        if self.prefetching:  # (it comes back through SGLang's queue door: looked up again)
            self.offload.retracted(request)
            self._fresh.append(request)

    # -- results ------------------------------------------------------------------------------
    def update_from_output(self, output: SchedulerOutput) -> tuple[list[Request], list[Request]]:
        """Put the pass's whole pages in the tree, append one token to every request that sampled.

        A prefill's whole pages are inserted when its pass ends (SGLang's ``checkpoint_kv_cache``), a request's
        decoded pages when it finishes (``release_kv_cache``, which marks its path used); until then they, and
        a last partial page, are the request's own, freed if it is retracted."""
        cache, states, page = self.cache, self._states, self.page
        running, ended = RequestStatus.RUNNING, RequestStatus.FINISHED  # (locals: ~70 ns each on the enum class)
        sampled: list[Request] = []
        finished: list[Request] = []
        for r, ctx, new, samples, decode in zip(output.requests, output.num_context_tokens,
                                                output.num_new_tokens, output.samples, output.is_decode):
            prefill = not decode
            st = states.get(r)
            if decode and self.config.num_speculative_steps:
                if st is not None and r.status is running:  # (else finished or retracted since)
                    self._verified(r, st, new - 1)
                    sampled.append(r)
                    if r.status is ended:
                        finished.append(r)
                continue
            computed = ctx + new
            pages = new_pages(ctx, new, page)  # (the pages this entry allocated)
            if st is None or r.status is not running or st.allocated < pages:
                # overlap loop: finished (or retracted) after this pass was planned; its slot is discarded
                if st is not None:
                    released = min(pages, st.allocated)
                    cache.release(released)
                    st.allocated -= released
                    if r.status is ended and not st.allocated and not r.bootstrap:
                        del states[r]
                continue
            finishing = samples and r.num_output_tokens + 1 >= st.max_new
            if prefill or finishing:
                self._store_pages(r, st, computed, prefill and not samples)
            if not samples:
                continue
            if prefill and r.num_output_tokens:  # a re-prefill: SGLang's next insertion starts a node here
                cache.seal(st.node)
            r.num_output_tokens += 1
            r.num_emitted = 2 if r.kv_transferred and r.num_output_tokens == 2 else 1
            sampled.append(r)
            if finishing:
                finished.append(r)
                self._finish(r, st, computed)
        if finished:
            self.running = [r for r in self.running if r.status is running]
        return sampled, finished

    def _verified(self, request: Request, st: _State, drafts: int) -> None:
        """A speculative verification's outputs (rule 10): ``accepted`` of the ``drafts`` drafts and the token the
        target samples after them are committed (SGLang's ``kv_committed_len += accept length``); up to
        ``max_new_tokens`` of them are emitted, and a request that reaches it finishes, its KV up to its last
        emitted token's predecessor stored (``owned_kv_len``) and the rest of its allocation freed."""
        if self.accept is None:
            raise ValueError("speculative decoding needs an acceptance model (SglangScheduler.accept)")
        accepted = self.accept(request, drafts)
        self.num_drafts_verified += drafts
        self.num_drafts_accepted += accepted
        request.spec_rounds += 1
        emitted = min(accepted + 1, st.max_new - request.num_output_tokens)
        request.num_output_tokens += emitted
        request.num_emitted = emitted
        request.num_computed_tokens += accepted + 1
        if request.num_output_tokens >= st.max_new:
            computed = request.num_computed_tokens = min(request.num_computed_tokens,
                                                        request.num_prompt_tokens + request.num_output_tokens - 1)
            self._store_pages(request, st, computed, False)
            self._finish(request, st, computed)

    def _finish(self, request: Request, st: _State, computed: int) -> None:
        """The request sampled its last token, its pages stored (``_store_pages``): it leaves the batch (SGLang
        tries a prefill again), its last partial page is freed and its path unlocked."""
        request.status = RequestStatus.FINISHED
        self.batch_is_full = False
        if request.bootstrap:
            return  # the prefill side keeps the prompt's KV until the transfer is over
        cache = self.cache
        tail = self._ceil_pages(computed) - st.protected  # (a last partial page)
        cache.release(tail)
        st.allocated -= tail
        if self.config.num_speculative_steps:  # (the rest of its allocation, a pass in flight's too)
            cache.release(st.allocated)
            st.allocated = 0
        cache.unlock(st.node)
        st.node, st.protected = None, 0
        if not st.allocated:  # overlap loop: else freed when the pass in flight is processed
            del self._states[request]

    # -- runs of decode passes (``engine.planner.sglang_run``) --------------------------------------------
    def decode_run(self) -> tuple[list[Request], list[int]] | None:
        """The running requests in batch order, and the decode passes each has left, if every pass from now on
        is a plain decode pass of them until one of them finishes or something is placed on the rank: nothing
        waits or is mid-chunk, no P/D request has its KV arrived and waits to join (one whose KV is on its way
        stays out of the passes until a plan joins it, ``join_handoffs``; one waiting for its reservation too,
        each pass's plan tries to reserve as SGLang's does, ``reserve_preallocs``), no overlap loop, every
        request past the decode that delivers a P/D handoff's first token, no speculative decoding; none on a
        rank with nothing running (it plans empty passes). Else None."""
        if (self.waiting or self.chunked is not None or self.handoffs or self.config.overlap
                or self.config.num_speculative_steps):
            return None
        if self.tiered and self.cache.threshold is None:
            return None  # (write-back copies on eviction stall the passes: each is planned on its own)
        states = self._states
        left = []
        for r in self.running:
            if r.kv_transferred and r.num_output_tokens < 2:
                return None
            left.append(states[r].max_new - r.num_output_tokens)  # (``passes_left``, inline: every run's start)
        return list(self.running), left

    def passes_left(self, request: Request) -> int:
        """The decode passes a running request has left: one a token up to its ``max_new_tokens``."""
        return self._states[request].max_new - request.num_output_tokens

    def plan_decode(self, num_requests: int, pages: int) -> None:
        """A decode pass of a run is planned (``_schedule_decode``, its requests counted by the planner): the tree
        is evicted down to the pass's ``pages`` new pages free, the ratio decays a step, and the pages are
        allocated as ``_schedule_decode`` allocates them. The planner plans one only while its pages fit what is
        free or evictable, so nothing is retracted."""
        if self.offload is not None:
            self.offload.reap()
        cache = self.cache
        cache.make_free(pages)
        if pages > cache.num_free:
            raise SimulationError("a run of SGLang decode passes planned a pass that would retract")
        self._decay_ratio()
        self._allocate_decode(num_requests, pages)

    def plan_idle(self) -> None:
        """A rank of a run with nothing running plans an empty pass (``schedule`` finds nothing to do): a host
        tier's landed copies are reaped all the same."""
        if self.offload is not None:
            self.offload.reap()

    def finish_decoded(self, request: Request, pages: int) -> None:
        """A request of a run sampled its last token in the pass that ends now, ``pages`` pages allocated to it by
        the run's passes (its ``num_computed_tokens`` and ``num_output_tokens`` delivered): its pages stored and
        it finished, as ``update_from_output`` finishes one."""
        st = self._states[request]
        st.allocated += pages
        self._store_pages(request, st, request.num_computed_tokens, False)
        self._finish(request, st, request.num_computed_tokens)
        self.running.remove(request)

    def deliver_decoded(self, requests: list[Request], pages: list[int]) -> None:
        """A run ends: its requests still running (their tokens delivered by the planner) hold ``pages`` more
        pages, allocated by the run's passes."""
        states = self._states
        for request, p in zip(requests, pages):
            states[request].allocated += p

    def _store_pages(self, request: Request, st: _State, computed: int, chunk: bool) -> None:
        """The request's whole pages up to ``computed`` tokens go in the tree under its lock, its path marked
        used (a page already there, computed by another request of the pass, frees this copy: at once, or for
        a prompt's unfinished chunk when its next chunk is planned); its last partial page stays allocated to
        it."""
        cache, page = self.cache, self.page
        full = computed // page
        pages = self._ceil_pages(computed)
        owned = pages - st.protected + st.held
        cache.release(owned)
        st.allocated -= owned
        st.held = 0
        node = st.node
        if not (full == st.protected + 1 and node is not None
                and cache.grow_leaf(node, st.output_block, full - st.prompt_full)):
            if chunk and self.tiered:  # (its hits are counted at the next plan, as SGLang inserts it then)
                added, node = cache.insert(self._segments(request, st), full, full)
                self._stashed.append((request, full))
            else:
                added, node = cache.insert(self._segments(request, st), full, st.inserted)
                st.inserted = max(st.inserted, full)
            cache.lock(node)
            cache.unlock(st.node)
            st.node = node
            if chunk:  # (an unfinished chunk keeps its copy)
                st.held = full - st.protected - added
        st.protected = full
        keep = pages - full + st.held
        if keep:
            cache.allocate(keep)
            st.allocated += keep
