"""vLLM v1's scheduler (0.32.0, ``vllm/v1/core/sched/scheduler.py`` and ``async_scheduler.py``) for one attention-DP
rank.

Running requests first, then FCFS admission with strict head-of-line blocking, chunked prefill, recompute
preemption of the last running request, full-sequence KV reservation at admission (``scheduler_reserve_full_isl``)
and the ``max_model_len`` limits; synchronous or async scheduling (placeholders for the outputs in flight);
automatic prefix caching over one group or vLLM's hybrid KV cache groups (sliding-window layers, and state layers
whose prompts are cut where their states must be kept: ``_state_split``); speculative decoding (n-gram or MTP/EAGLE
drafts, EAGLE's block drop on prefix hits); pipeline stages' decode stagger; P/D handoffs and a host KV tier. Each
is checked pass by pass against the real scheduler by the golden replays of ``tests/unit/test_vllm*_golden.py``
(docs/vllm-scheduler.md, "How it is checked").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simmodel.engine.kv_cache import BlockPool, PrefixCachingBlockPool, cdiv, free_blocks, take_blocks
from simmodel.engine.request import Request, RequestStatus
from simmodel.engine.scheduler.base import SchedulerOutput
from simmodel.engine.state_kv_cache import state_checkpoint_valid
from simmodel.perf.kv_layout import in_flight_tokens

if TYPE_CHECKING:
    from simmodel.offload import VllmCpuOffload


@dataclass(frozen=True, slots=True)
class VllmSchedulerConfig:
    """The knobs of vLLM's ``SchedulerConfig`` and ``CacheConfig`` the scheduler reads."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192
    long_prefill_token_threshold: int = 0
    enable_chunked_prefill: bool = True
    reserve_full_isl: bool = True
    enable_prefix_caching: bool = False
    async_scheduling: bool = False
    num_speculative_tokens: int = 0
    """Draft tokens proposed after each sampled token and verified in the request's next pass."""
    num_lookahead_tokens: int = 0
    """KV slots reserved past a pass's tokens for the drafter to write (vLLM's ``num_lookahead_tokens``: the
    drafts' count for MTP/EAGLE heads, none for n-gram lookups)."""
    decode_stagger: int = 1
    """Async scheduling with P pipeline stages (vLLM's Model Runner V2): a request whose chunk reached its end is
    scheduled again P steps later at the earliest, one batch per stage in flight; 1 otherwise."""


class VllmScheduler:
    """Per-rank vLLM v1 scheduling: ``schedule()`` plans a pass, ``update_from_output()`` applies it."""

    planner = "vllm"
    """The pass planner's runs for it (``engine.planner.PLANNERS``)."""

    def __init__(self, config: VllmSchedulerConfig, pool: BlockPool | PrefixCachingBlockPool) -> None:
        self.config = config
        self.pool = pool
        self.caching = pool.caching
        self.block_size = pool.block_size
        self.waiting: deque[Request] = deque()
        self.handoffs: deque[Request] = deque()
        """Requests whose KV is already here (received P/D handoffs); vLLM's ``kv_holding_waiting``."""
        self.running: list[Request] = []
        self.async_scheduling = config.async_scheduling
        self.current_step = 0
        """``schedule()`` calls so far (vLLM's ``current_step``), counted only with a decode stagger, the one rule that
        reads them (a worker with one never runs passes as runs, whose plans make no such calls)."""
        self.prefill_capacity_bound = False
        """The last admitting pass left requests waiting for capacity (prefill schedule interval)."""
        self.finished_since_schedule = False
        """vLLM runs one more (empty) ``schedule()`` after a request finishes; ``has_requests`` says so."""
        self.on_kv_reserved: Callable[[Request], None] | None = None
        self.accept: Callable[[Request, int], int] | None = None
        """Speculative decoding: how many of a request's verified drafts are accepted (see speculation.py)."""
        self.num_drafts_verified = 0
        self.num_drafts_accepted = 0
        """Called, during ``schedule()``, when blocks are reserved for a remote request's incoming KV."""
        self.offload: VllmCpuOffload | None = None
        """A host KV tier behind the pool (``simmodel.offload``), looked up at admission; None: none."""
        self.loading: set[Request] = set()
        """Requests loading their prefix from the host tier, or landed and not admitted yet."""
        self.states = pool.states
        """State groups caching prefixes (``engine.state_kv_cache``): chunks split as ``_state_split`` says."""
        layout = pool.layout
        self.sliding_cap = (layout.sliding_cap(config.max_model_len, self.block_size, in_flight_tokens(
            config.max_num_batched_tokens, config.async_scheduling)) if pool.sliding else None)
        """The most blocks a sliding-window group counts of a whole sequence at admission (``KvLayout.sliding_cap``);
        None without sliding groups."""

    def add_request(self, request: Request) -> None:
        self.waiting.append(request)

    def add_remote(self, request: Request) -> None:
        """Queue a request whose prompt KV sits on a prefill worker. Mirrors vLLM's async KV load: in
        queue order, ``schedule()`` reserves blocks for the whole prompt, and the transfer may begin."""
        request.awaiting_kv = True
        self.waiting.append(request)

    def add_handoff(self, request: Request) -> None:
        """Queue a request whose prompt KV has arrived: all but its last prompt token count as computed,
        and the blocks reserved for it at transfer start are already its own."""
        request.num_computed_tokens = request.num_prompt_tokens - 1
        self.handoffs.append(request)

    def load_done(self, request: Request, num_computed_tokens: int) -> None:
        """A request's blocks have landed from the host tier: they are cached here now, and it joins the rank's
        next pass ahead of other waiting work, to compute the rest of its prompt (vLLM's finished receive)."""
        request.num_computed_tokens = num_computed_tokens
        self.pool.cache_full_blocks(request, num_computed_tokens)
        self.handoffs.append(request)

    def release(self, request: Request) -> None:
        """Free the blocks a finished request held for its KV transfer (the source side of a handoff)."""
        self.free(request)

    def _take(self, request: Request, num_blocks: int) -> None:
        """Give the request ``num_blocks`` more blocks."""
        take_blocks(self.pool, request, num_blocks)

    def free(self, request: Request) -> None:
        """Return every KV block a request holds to the pool (it finished, was preempted or handed off)."""
        free_blocks(self.pool, request)

    def retire(self, request: Request) -> None:
        """A request reached its stop: finished, its blocks freed (a prefill leg keeps its KV until its
        transfer is done). The caller takes it out of ``running``."""
        request.num_draft_tokens = 0
        request.status = RequestStatus.FINISHED
        request.block_keys = None  # its content keys are never needed again (and weigh kilobytes)
        if not request.bootstrap:
            self.free(request)

    def has_requests(self) -> bool:
        return bool(self.running or self.waiting or self.handoffs)

    def reset_prefix_cache(self) -> None:
        if self.pool.caching:
            self.pool.reset_prefix_cache()

    @property
    def num_queued(self) -> int:
        """vLLM's ``num_requests_waiting``: the waiting queue (P/D requests waiting for their KV included)."""
        return len(self.waiting)

    # -- runs of passes planned in closed form (``engine.planner``) ------------------------------

    def drop_finished(self) -> None:
        """Take the requests a run of passes retired (``retire``) out of ``running``, keeping its order."""
        running = RequestStatus.RUNNING  # (a local: an enum member looked up on its class costs ~70 ns)
        self.running = [q for q in self.running if q.status is running]

    def start_plan(self) -> None:
        """A plan begins (a run's admissions, as ``schedule()`` begins): the finished requests are reported."""
        self.finished_since_schedule = False

    def after_run(self, running: list[Request] | None, finished_in_last_pass: bool, capacity_bound: bool) -> None:
        """Take the state a run of passes leaves: its running requests in running order (None: ``running`` is
        as the run's last plan left it), whether one finished in its last pass (vLLM reports it at the next
        schedule), and ``prefill_capacity_bound`` as its last plan found the waiting queue."""
        if running is not None:
            self.running = running
        self.finished_since_schedule = finished_in_last_pass
        self.prefill_capacity_bound = capacity_bound

    def engine_has_requests(self) -> bool:
        """vLLM's ``has_requests()``: unfinished requests, or finished ones not yet reported by a schedule."""
        return self.has_requests() or self.finished_since_schedule

    def schedule(self, arrived_before: int | None = None, throttle_prefills: bool = False) -> SchedulerOutput:
        """Plan one pass. Mirrors ``Scheduler.schedule()``: RUNNING first, then WAITING.

        ``arrived_before`` (async scheduling): waiting requests that arrived at or after this time are not
        seen yet, because the pass is committed before the engine reads new requests.
        ``throttle_prefills`` (prefill schedule interval): this pass is off the DP group's cadence, so
        unless the last admitting pass was capacity-bound, prefill work waits while decodes run.
        """
        cfg, pool, out = self.config, self.pool, SchedulerOutput()
        self.finished_since_schedule = False
        states = self.states
        if states:
            pool.new_step()
        stagger = cfg.decode_stagger
        if stagger > 1:
            self.current_step += 1
        step = self.current_step
        asynchronous = self.async_scheduling
        defer = throttle_prefills and not self.prefill_capacity_bound and any(
            not r.is_prefill_chunk for r in self.running)
        token_budget = cfg.max_num_batched_tokens
        # vLLM lets a lone request use the whole budget: the threshold only stops starvation.
        eligible = len(self.running) + len(self.waiting) + len(self.handoffs)
        threshold = cfg.long_prefill_token_threshold if eligible > 1 else 0

        # Phase 1: running requests in order (decodes and partial prefills alike).
        block_size, max_model_len, sliding = self.block_size, cfg.max_model_len, pool.sliding
        lookahead, speculative = cfg.num_lookahead_tokens, cfg.num_speculative_tokens
        reqs, news, ctxs, decs = out.requests, out.num_new_tokens, out.num_context_tokens, out.is_decode
        samples = out.samples
        req_index = 0
        prefill_scheduled = False
        if not asynchronous and not cfg.num_speculative_tokens and self._plan_decodes(out, token_budget):
            req_index = len(self.running)  # all decodes, none preempting: planned without the loop
            token_budget -= req_index
        while req_index < len(self.running) and token_budget > 0:
            request = self.running[req_index]
            computed = request.num_computed_tokens
            num_tokens = request.num_prompt_tokens + request.num_output_tokens
            placeholders = request.num_output_placeholders
            if placeholders and computed + 2 - placeholders >= request.num_prompt_tokens + request.max_tokens:
                req_index += 1  # async: the outputs in flight already reach max_tokens
                continue
            if stagger > 1 and step < request.next_decode_eligible_step:
                req_index += 1  # its decodes are a stage count of steps apart
                continue
            if defer and request.is_prefill_chunk:
                req_index += 1  # a prefill chunk waits for a cadence-aligned pass; decodes go on
                continue
            drafts = request.num_draft_tokens
            num_new = num_tokens + drafts + placeholders - computed
            if 0 < threshold < num_new:
                num_new = threshold
            num_new = min(num_new, token_budget, max_model_len - computed - 1)
            if states:
                num_new = self._state_split(request, num_new, computed)
            if num_new <= 0:
                req_index += 1
                continue
            # (sliding groups free on the tokens processed: those of passes in flight may still be rolled back)
            done = computed - request.num_in_flight_tokens
            if sliding or states:
                pool.slide(request, done)
            slots = computed + num_new + lookahead
            if states:
                num_needed = pool.blocks_needed(request, computed, computed + num_new, min(slots, max_model_len),
                                                request.prefill_end)
            else:
                num_needed = max(pool.blocks_for(min(slots, max_model_len) if lookahead else slots, done)
                                 - request.num_blocks, 0)
            stalled = False
            while num_needed > pool.num_free_blocks:
                victim = self.running[-1]
                if asynchronous and self.offload is not None and victim.num_in_flight_tokens:
                    # vLLM with a KV connector under async scheduling frees no block of a request the pass in
                    # flight runs: no preemption now; this request and the ones after it wait a pass.
                    stalled = True
                    break
                self.running.pop()
                self._preempt(victim, out)
                if victim is request:
                    break
            if stalled or request.status is RequestStatus.PREEMPTED:
                break
            # Inlined _schedule(): this loop runs once per running request per pass.
            if states:
                pool.grow(request, computed, computed + num_new, min(slots, max_model_len),
                          request.prefill_end)
                pool.cache_full_blocks(request, min(computed + num_new, num_tokens))
            elif self.caching:
                if num_needed:
                    self._take(request, num_needed)
                if min(computed + num_new, num_tokens) // block_size > request.num_cached_blocks:
                    pool.cache_full_blocks(request, min(computed + num_new, num_tokens))
            else:
                pool.allocate(num_needed)
                request.num_blocks += num_needed
            reqs.append(request)
            news.append(num_new)
            ctxs.append(computed)
            ends = computed + num_new >= num_tokens + placeholders
            # Drafts the chunk reaches are verified in this pass (vLLM trims the rest).
            verified = max(0, computed + num_new - num_tokens - placeholders)
            if verified:
                out.drafts[request] = verified
            request.num_draft_tokens = 0
            decs.append(ends and num_new == 1 + verified
                        and (request.num_output_tokens + placeholders > 0 or request.kv_transferred))
            samples.append(ends)
            prefill_scheduled |= request.is_prefill_chunk  # (a prompt's chunk after the first)
            request.is_prefill_chunk = not ends
            request.num_computed_tokens = computed + num_new
            if asynchronous:
                request.num_in_flight_tokens += num_new
                if ends:  # (its sampled token and its drafts; the drafts it proposes stand in as placeholders)
                    request.num_output_placeholders = placeholders + 1 + verified
                    request.num_draft_tokens = speculative
                    if stagger > 1:
                        request.next_decode_eligible_step = step + stagger
            token_budget -= num_new
            req_index += 1

        # Phase 2: admissions, only in a pass that preempted nothing.
        if not out.preempted:
            skipped = self.admit_waiting(token_budget, threshold, out, arrived_before, defer, prefill_scheduled,
                                         bool(out.requests))
            if not defer:
                self.prefill_capacity_bound = len(self.waiting) + len(self.handoffs) > skipped
        return out

    def _plan_decodes(self, out: SchedulerOutput, token_budget: int) -> bool:
        """Phase 1 when every running request decodes one token (synchronous, no drafts) and their new
        blocks are free: what the loop of ``schedule()`` does, with less per request. False (nothing
        changed) otherwise, and the loop plans the pass."""
        running = self.running
        if not running or len(running) > token_budget or self.pool.layout is not None:
            return False  # (several KV cache groups, maybe freeing blocks as they go: the loop plans the pass)
        bs = self.block_size
        needed, contexts, decodes = [], [], []
        total = 0
        for request in running:
            c = request.num_computed_tokens
            if request.is_prefill_chunk or c + 1 != request.num_prompt_tokens + request.num_output_tokens:
                return False
            k = -(-(c + 1) // bs) - request.num_blocks
            if k > 0:
                total += k
            needed.append(k)
            contexts.append(c)
            decodes.append(request.num_output_tokens > 0 or request.kv_transferred)
        pool = self.pool
        if total > pool.num_free_blocks:
            return False  # someone would be preempted: the loop handles it
        caching = self.caching
        for request, k, c in zip(running, needed, contexts):
            if caching:
                if k > 0:
                    self._take(request, k)
                if (c + 1) // bs > request.num_cached_blocks:
                    pool.cache_full_blocks(request, c + 1)
            elif k > 0:
                pool.allocate(k)
                request.num_blocks += k
            request.num_draft_tokens = 0
            request.is_prefill_chunk = False
            request.num_computed_tokens = c + 1
        n = len(running)
        out.requests.extend(running)
        out.num_new_tokens.extend([1] * n)
        out.num_context_tokens.extend(contexts)
        out.is_decode.extend(decodes)
        out.samples.extend([True] * n)
        return True

    def admit_waiting(self, token_budget: int, threshold: int, out: SchedulerOutput,
                       arrived_before: int | None = None, defer: bool = False, prefill_scheduled: bool = False,
                       running_scheduled: bool = False) -> int:
        """FCFS admission, received handoffs first; the first request that does not fit blocks everything
        behind it. Async: a preempted request whose stale output is still in flight is stepped over.

        With drafts, a request with one token left to compute (a whole prompt cached, a received handoff) is padded
        to 1 + k tokens with placeholder drafts (token id −1: never accepted), as vLLM does to keep the pass a
        uniform decode for its CUDA graph: unless a running prompt's chunk is in the pass (``prefill_scheduled``), or
        the pass has no running request (``running_scheduled``) and the request nothing computed; a padded request
        that does not fit the budget ends the admissions."""
        cfg, pool = self.config, self.pool
        skipped: list[Request] = []
        while token_budget > 0 and len(self.running) < cfg.max_num_seqs:
            queue = self.handoffs or self.waiting
            if not queue:
                break
            request = queue[0]
            if arrived_before is not None and request.queued_at >= arrived_before and queue is self.waiting:
                break  # not read by the engine yet (it reached the engine at or after the cutoff)
            if request.num_stale_output_tokens:
                skipped.append(queue.popleft())
                continue
            if request.awaiting_kv:
                # vLLM allocates the blocks of an async KV load in the waiting loop (the whole sequence
                # must fit) and skips on: no budget is spent and the request is not running yet. Blocks
                # already cached here need no transfer.
                blocks = cdiv(min(request.num_tokens, cfg.max_model_len), self.block_size)
                hits = pool.find_hits(request) if self.caching else []
                if blocks - len(hits) + (pool.num_evictable(hits) if hits else 0) > pool.num_free_blocks:
                    break
                queue.popleft()
                if hits:
                    pool.take_hits(request, hits)
                self._take(request, blocks - len(hits))
                request.num_missing_blocks = blocks - len(hits)
                request.awaiting_kv = False
                if self.on_kv_reserved is not None:
                    self.on_kv_reserved(request)
                continue
            # A fresh or preempted request starts from its longest cached prefix (prefix caching).
            fresh = self.caching and request.num_computed_tokens == 0
            hits = pool.find_hits(request) if fresh else ()
            if fresh and pool.layout is not None:  # (several groups: where the full groups' hit ran deeper)
                request.shared_prefix_boundary = hits.junction
            if fresh and self.offload is not None and not request.kv_transferred:
                found = self.offload.lookup(request, len(hits))
                if found < 0:  # a block it needs is landing on the host or being read: it waits, skipped
                    skipped.append(queue.popleft())
                    continue
                if found:
                    if not self._load_from_host(request, hits, found):
                        break
                    queue.popleft()
                    continue
            computed = len(hits) * self.block_size if hits else request.num_computed_tokens
            if defer and computed < request.num_tokens - 1:
                break  # off-cadence pass: only prompts with at most one token left may advance
            num_new = request.num_tokens - computed
            drafts = 0
            if (num_new == 1 and cfg.num_speculative_tokens and not prefill_scheduled and (running_scheduled or computed)
                    and computed + 2 + cfg.num_speculative_tokens <= cfg.max_model_len):
                drafts = cfg.num_speculative_tokens
                if 1 + drafts > token_budget:
                    break
                num_new += drafts
            if 0 < threshold < num_new:
                num_new = threshold
            if not cfg.enable_chunked_prefill and num_new > token_budget:
                break
            num_new = min(num_new, token_budget)
            if self.states:
                num_new = self._state_split(request, num_new, computed)
                if not num_new or (hits and pool.hit_computed_this_step(request, hits)):
                    break
                if drafts and num_new != 1 + drafts:  # (the split cut the placeholder drafts: vLLM drops the padding)
                    num_new, drafts = 1, 0
                if not self._state_fits(request, hits, computed, num_new):
                    break
                self._admit(request, queue, hits, computed, out)
                self._schedule(request, num_new, 0, out, drafts)
                token_budget -= num_new
                continue
            # Hit blocks with no other holder sit in the free queue: taking them costs free blocks too.
            held = request.num_blocks + (pool.hit_units(hits) if hits else 0)
            evictable = pool.num_evictable(hits) if hits else 0
            if cfg.reserve_full_isl:
                tokens = min(request.num_tokens, cfg.max_model_len)
                whole = (pool.blocks_for(tokens, computed) if self.sliding_cap is None
                         else pool.layout.blocks(tokens, computed, self.block_size, self.sliding_cap))
                full = whole - held + evictable
                if full > pool.num_free_blocks:
                    break
            num_needed = max(pool.blocks_for(min(computed + num_new + cfg.num_lookahead_tokens, cfg.max_model_len),
                                             computed) - held, 0)
            if num_needed + evictable > pool.num_free_blocks:
                break
            self._admit(request, queue, hits, computed, out)
            self._schedule(request, num_new, num_needed, out, drafts)
            token_budget -= num_new
        if skipped:
            self.waiting.extendleft(reversed(skipped))
        return len(skipped)

    def _admit(self, request: Request, queue: deque[Request], hits, computed: int, out: SchedulerOutput) -> None:
        """The queue's head joins the running requests, holding its cached prefix (``hits``, ``computed`` tokens)."""
        queue.popleft()
        if self.loading:
            self.loading.discard(request)
        self.running.append(request)
        (out.resumed if request.status is RequestStatus.PREEMPTED else out.admitted).append(request)
        if self.caching:
            if request.num_preemptions == 0 and not request.kv_transferred and not request.num_host_cached_tokens:
                self.pool.count_lookup(request, computed)
            if hits:
                self.pool.take_hits(request, hits)
            request.num_computed_tokens = computed
        request.status = RequestStatus.RUNNING

    def _state_fits(self, request: Request, hits, computed: int, num_new: int) -> bool:
        """Whether an admission fits with state groups caching prefixes (``allocate_slots``): its whole sequence (with
        ``reserve_full_isl``), then this step's tokens, each counting the hit blocks that sit in the free queue."""
        cfg, pool = self.config, self.pool
        prefill_end = request.prefill_end
        evictable = pool.num_evictable(hits) if hits else 0
        if cfg.reserve_full_isl:
            tokens = min(request.num_tokens, cfg.max_model_len)
            if pool.blocks_needed(request, computed, tokens, tokens, prefill_end, hits) + evictable > pool.num_free_blocks:
                return False
        end = computed + num_new
        slots = min(end + cfg.num_lookahead_tokens, cfg.max_model_len)
        return pool.blocks_needed(request, computed, end, slots, prefill_end, hits) + evictable <= pool.num_free_blocks

    def _state_split(self, request: Request, num_new: int, start: int) -> int:
        """A prompt's chunk clipped where a state must be cached (``_mamba_block_aligned_split``, with prefix caching of
        state groups; module doc of ``engine.state_kv_cache``): a chunk the budget cuts ends on a block boundary (unless
        a block is wider than the budget and that would leave nothing), one that starts mid-block stops at the next
        boundary, a chunk stops at the request's junction, and, unless Mamba-2 writes it in a checkpoint, at the
        prompt's replay boundary. Past the prompt (decodes) chunks are as they are."""
        num_tokens = request.num_tokens
        prefill_end = request.prefill_end
        if start >= prefill_end:
            return num_new
        bs, cfg, pool = self.block_size, self.config, self.pool
        end = start + num_new
        last_cache = pool.checkpoint_position(num_tokens)
        # (vLLM's scheduler asks for the checkpoint at the prefill's end; the pool, when it allocates, at the chunk's)
        internal = (pool.checkpoint and end >= prefill_end
                    and state_checkpoint_valid(start, end, pool.checkpoint_position(prefill_end), bs))
        if internal:
            last_cache = 0
        if end < prefill_end:
            widest = cfg.max_num_batched_tokens
            if cfg.long_prefill_token_threshold > 0:
                widest = min(widest, cfg.long_prefill_token_threshold)
            aligned = end // bs * bs
            if aligned > start or bs <= widest:
                end = aligned
        junction = request.shared_prefix_boundary
        stops = ((start // bs + 1) * bs if start % bs and not internal else 0, last_cache,
                 start + (junction - start) // bs * bs if start < junction < end else 0)
        end = min((s for s in stops if start < s < end), default=end)
        return max(end - start, 0)

    def _load_from_host(self, request: Request, hits: list[int], found: int) -> bool:
        """Take GPU blocks for a request's prefix (``hits`` cached here, then ``found`` blocks on the host) and
        start loading the host's part; False if they do not fit (it then blocks the queue, as any admission).
        The request waits out of the queue for its KV, holding no sequence slot and no token budget."""
        pool, bs = self.pool, self.block_size
        evictable = pool.num_evictable(hits) if hits else 0
        if self.config.reserve_full_isl:
            full = cdiv(min(request.num_tokens, self.config.max_model_len), bs) - len(hits) + evictable
            if full > pool.num_free_blocks:
                return False
        # A load holds its blocks for the whole copy without progress and cannot be preempted: vLLM admits it
        # only into the blocks left once every prefill in flight has what its whole sequence still needs.
        if found + evictable > pool.num_free_blocks - self._reserved_for_prefills():
            return False
        if request.num_preemptions == 0:
            pool.count_lookup(request, len(hits) * bs)
            request.num_host_cached_tokens = found * bs
            self.offload.num_hit_tokens += found * bs
        if hits:
            pool.take_hits(request, hits)
        self._take(request, found)
        self.loading.add(request)
        self.offload.load(request, len(hits), found)
        return True

    def _reserved_for_prefills(self) -> int:
        """Blocks the prefills in flight still need to hold their whole sequence (vLLM's
        ``_inflight_prefill_reserved_blocks``): running requests mid-prefill, and requests loading from the host
        tier (or landed, not admitted yet)."""
        bs, limit = self.block_size, self.config.max_model_len
        in_flight = [r for r in self.running if r.is_prefill_chunk] + list(self.loading)
        return sum(max(cdiv(min(r.num_tokens, limit), bs) - r.num_blocks, 0) for r in in_flight)

    def _schedule(self, request: Request, num_new: int, num_blocks: int, out: SchedulerOutput, drafts: int = 0) -> None:
        """Take the blocks, record the chunk (``drafts``: its placeholder drafts) and advance
        ``num_computed_tokens`` (as vLLM does at once)."""
        computed = request.num_computed_tokens
        if self.states:
            end = computed + num_new
            self.pool.grow(request, computed, end, min(end + self.config.num_lookahead_tokens, self.config.max_model_len),
                           request.prefill_end)
        else:
            self._take(request, num_blocks)
        if self.caching:
            self.pool.cache_full_blocks(request, min(computed + num_new, request.num_tokens))
        out.requests.append(request)
        out.num_new_tokens.append(num_new)
        out.num_context_tokens.append(computed)
        ends = computed + num_new >= request.num_tokens
        if drafts:
            out.drafts[request] = drafts
            out.padded.add(request)
        out.is_decode.append(ends and num_new == 1 + drafts
                             and (request.num_output_tokens > 0 or request.kv_transferred))
        out.samples.append(ends)
        request.is_prefill_chunk = not ends
        if self.async_scheduling:
            request.num_in_flight_tokens += num_new
            if ends:
                request.num_output_placeholders += 1 + drafts
                request.num_draft_tokens = self.config.num_speculative_tokens
                if self.config.decode_stagger > 1:
                    request.next_decode_eligible_step = self.current_step + self.config.decode_stagger
        request.num_computed_tokens = computed + num_new

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        """Recompute preemption: free every block and put the request at the front of the queue."""
        self.free(request)
        request.num_computed_tokens = 0
        # Async: the outputs still in flight will be delivered, but not counted as placeholders again.
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0
        request.num_draft_tokens = 0
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1
        self.waiting.appendleft(request)
        out.preempted.append(request)

    def update_from_output(self, output: SchedulerOutput) -> tuple[list[Request], list[Request]]:
        """Append one sampled token to every request whose chunk reached its end; retire the done.

        Returns the requests that sampled and those that finished, in pass order. Mirrors
        ``update_from_output()`` and ``check_stop()``: a request stops at ``max_tokens`` outputs or
        once ``num_tokens`` reaches ``max_model_len``, and its blocks are freed then. With async
        scheduling this runs one pass late; a preempted request's stale output is still delivered.
        """
        max_model_len = self.config.max_model_len
        running, preempted = RequestStatus.RUNNING, RequestStatus.PREEMPTED
        asynchronous = self.async_scheduling
        sampled: list[Request] = []
        finished: list[Request] = []
        stopped_waiting = False
        speculative = self.config.num_speculative_tokens
        for request, num_new, samples in zip(output.requests, output.num_new_tokens, output.samples):
            stale = False
            if asynchronous:
                request.num_in_flight_tokens -= num_new
                if request.num_stale_output_tokens:
                    stale = True
                    request.num_stale_output_tokens -= num_new
            status = request.status
            if status is not running and status is not preempted:
                continue  # finished (or rejected) since this pass was planned
            if not samples:
                continue  # a partial prefill chunk samples nothing
            emitted = 1
            drafts = output.drafts.get(request, 0) if output.drafts else 0
            if drafts:
                # Verification: accepted drafts plus the corrected (or bonus) token, stopping at the first
                # reject; rejected drafts' KV positions are given back. Placeholders padding an admission are no
                # drafts: all rejected, and not counted as verified.
                accepted = 0
                if request not in output.padded:
                    accepted = self.accept(request, drafts)
                    self.num_drafts_verified += drafts
                    self.num_drafts_accepted += accepted
                    request.spec_rounds += 1
                if not stale:
                    request.num_computed_tokens -= drafts - accepted
                    if asynchronous and request.num_output_placeholders:
                        request.num_output_placeholders -= drafts - accepted
                emitted = accepted + 1
            # Tokens past max_tokens or max_model_len are never emitted (vLLM's check_stop per token).
            emitted = min(emitted, request.max_tokens - request.num_output_tokens,
                          max_model_len - request.num_prompt_tokens - request.num_output_tokens)
            request.num_output_tokens += emitted
            request.num_emitted = emitted
            if asynchronous and not stale:
                request.num_output_placeholders -= emitted
            sampled.append(request)
            num_tokens = request.num_prompt_tokens + request.num_output_tokens
            if asynchronous and self.caching and status is running:
                # vLLM caches the blocks the delivered tokens fill, also for a request about to finish.
                known = request.num_computed_tokens - request.num_output_placeholders
                if known // self.block_size > request.num_cached_blocks:
                    self.pool.cache_full_blocks(request, known)
            if request.num_output_tokens >= request.max_tokens or num_tokens >= max_model_len:
                self.retire(request)
                finished.append(request)
                stopped_waiting |= status is preempted
            elif speculative and status is running and not asynchronous:
                request.num_draft_tokens = speculative  # drafts proposed for the next pass (async: at its plan)
        if finished:
            self.finished_since_schedule = True
            self.running = [r for r in self.running if r.status is running]
            if stopped_waiting:
                self.waiting = deque(r for r in self.waiting if r.status is not RequestStatus.FINISHED)
        return sampled, finished
