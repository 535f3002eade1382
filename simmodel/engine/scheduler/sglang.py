"""SGLang's scheduler as NVIDIA Dynamo's mocker models it (aisimulate-core 0.13.0), for one rank.

Plain Python, no time passes inside. Rules (``docs/research/sglang-mocker-rules.md``):

1. prefill-first, passes never mix: if a prefill (EXTEND) batch forms it runs alone, else running
   requests decode one token each;
2. per pass a chunk budget (``chunked_prefill_size // attention_data``) and ``max_prefill_tokens``;
   a request that does not fit the rest of the chunk budget is chunked to exactly that and resumed
   first next pass;
3. a page-size-1 radix cache (:mod:`simmodel.engine.radix_cache`): the hit is matched once per
   (re)admission (capped at the sequence length - 1), the prompt is inserted at the end of its
   prefill pass, decode tokens every step, finished sequences stay cached and evictable;
4. admission while ``extend + clipped output < available + evictable - reservations``, where running
   requests reserve ``clipped remaining output * new_token_ratio`` and each admitted one its extend
   and full clipped output; the ratio decays on every decode pass and is never reset when idle;
5. retraction before a decode pass whose KV need exceeds available + evictable;
6. FCFS or LPM ordering of the waiting queue.

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

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from simmodel.engine.radix_cache import OutputBlock, RadixCache, RadixNode, mooncake_segments
from simmodel.engine.request import Request, RequestStatus
from simmodel.engine.scheduler.base import SchedulerOutput
from simmodel.errors import SimulationError

RETRACT_DECODE_STEPS = 20
LPM_FCFS_QUEUE_THRESHOLD = 128
IN_BATCH_PREFIX_THRESHOLD = 32


@dataclass(frozen=True, slots=True)
class SglangSchedulerConfig:
    """The SGLang server arguments the mocker's scheduler reads (per engine; see ``for_rank``)."""

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
    """The rank's KV pool as the rank and its reports see it: token slots (page size 1) of the radix cache."""

    caching = True
    block_size = 1

    def __init__(self, cache: RadixCache) -> None:
        self.cache = cache
        self.num_blocks = cache.capacity
        self.num_queries = 0
        """Prompt tokens looked up at first admissions."""
        self.num_hits = 0
        """Of those, tokens found in the radix tree."""

    @property
    def num_used_blocks(self) -> int:
        """Tokens held by requests (allocated, or locked in the tree); cached unlocked tokens are reusable."""
        cache = self.cache
        return cache.capacity - cache.num_free - cache.num_evictable


class _State:
    """What the scheduler keeps per request (``Request`` has fixed slots)."""

    __slots__ = ("prompt_segments", "output_block", "node", "allocated", "hit")

    def __init__(self, prompt_segments: list[tuple[Hashable, int]], output_block: OutputBlock) -> None:
        self.prompt_segments = prompt_segments
        self.output_block = output_block
        self.node: RadixNode | None = None
        """Deepest locked tree node (covers the request's KV in the tree)."""
        self.allocated = 0
        """Token slots allocated by planned passes, inserted into the tree when their outputs are processed."""
        self.hit = 0


class SglangScheduler:
    """Per-rank SGLang scheduling: ``schedule()`` plans a pass, ``update_from_output()`` applies it."""

    def __init__(self, config: SglangSchedulerConfig, num_kv_tokens: int) -> None:
        self.config = config
        self.cache = RadixCache(num_kv_tokens)
        self.pool = RadixPool(self.cache)
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.chunked: Request | None = None
        """The request whose prompt was cut at the chunk budget; resumed first next pass."""
        self.new_token_ratio = config.init_new_token_ratio
        self._states: dict[Request, _State] = {}
        self.num_retractions = 0
        self.prealloc: list[Request] = []
        """Disaggregated decode: requests waiting for this rank to reserve their prompt's KV."""
        self.transferring: list[Request] = []
        """Disaggregated decode: reserved, their KV on its way."""
        self.handoffs: list[Request] = []
        """Disaggregated decode: KV arrived; they join the running batch at the next plan."""
        self.on_kv_reserved: Callable[[Request], None] | None = None

    # -- queue --------------------------------------------------------------------------------
    def _state(self, request: Request) -> _State:
        st = self._states.get(request)
        if st is None:
            if request.prompt_segments is not None:
                segs = request.prompt_segments
            elif request.hash_ids is not None:
                segs = mooncake_segments(request.hash_ids, request.num_prompt_tokens,
                                         self.config.trace_block_size)
            else:
                segs = [(("prompt", request.request_id), request.num_prompt_tokens)]
            st = self._states[request] = _State(segs, OutputBlock(("out", request.request_id)))
        return st

    def add_request(self, request: Request) -> None:
        self._state(request)
        self.waiting.append(request)

    def has_requests(self) -> bool:
        return bool(self.running or self.waiting or self.chunked or self.prealloc or self.handoffs)

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
        """The prefill side of a handoff: the transfer is over, the prompt's KV stays cached (unlocked)."""
        st = self._states.pop(request)
        self.cache.unlock(st.node)

    def _reserve_preallocs(self) -> None:
        """SGLang's ``DecodePreallocQueue.pop_preallocated``, in queue order: a prompt's KV is reserved when
        ``max(prompt + R, prompt + clipped output − retractable) <= allocatable``, where R is
        ``num_reserved_decode_tokens`` (512), retractable the tokens of the running requests, and
        allocatable = free + evictable − max(R × (running + incoming), the largest clipped need of one
        running request − retractable); each reservation then takes prompt + R off allocatable. So every
        running request can still finish with all others retracted."""
        cfg, cache = self.config, self.cache
        reserve = cfg.num_reserved_decode_tokens
        running = self.running
        retractable = sum(q.num_prompt_tokens + q.num_output_tokens for q in running)
        single = max((q.num_prompt_tokens + min(self._max_new(q), cfg.clip_max_new_tokens) for q in running),
                     default=retractable) - retractable
        incoming = len(self.transferring) + len(self.handoffs)
        allocatable = cache.num_free + cache.num_evictable - max(reserve * (len(running) + incoming), single)
        reserved = 0
        for r in self.prealloc:
            if len(running) + incoming + reserved >= cfg.max_running_requests:
                break
            need = r.num_prompt_tokens
            required = need + reserve
            if max(required, need + min(self._max_new(r), cfg.clip_max_new_tokens) - retractable) > allocatable:
                break
            if not cache.allocate(need):
                break
            allocatable -= required
            self._states[r].allocated = need
            r.awaiting_kv = False
            self.transferring.append(r)
            reserved += 1
            if self.on_kv_reserved is not None:
                self.on_kv_reserved(r)
        if reserved:
            del self.prealloc[:reserved]

    def _join_handoffs(self) -> None:
        """Arrived KV enters the tree under the request's lock; the request runs with the prefill's token."""
        cache = self.cache
        for r in self.handoffs:
            st = self._states[r]
            cache.release(st.allocated)
            st.allocated = 0
            _, node = cache.insert(st.prompt_segments, r.num_prompt_tokens)
            cache.lock(node)
            st.node = node
            r.num_computed_tokens = r.num_prompt_tokens
            r.num_output_tokens = 1
            r.status = RequestStatus.RUNNING
            self.running.append(r)
        self.handoffs.clear()

    def _segments(self, request: Request, st: _State) -> list[tuple[Hashable, int]]:
        if request.num_output_tokens:
            return [*st.prompt_segments, (st.output_block, request.num_output_tokens)]
        return st.prompt_segments

    # -- scheduling ---------------------------------------------------------------------------
    def schedule(self, arrived_before: int | None = None, prefill_blocked: bool = False) -> SchedulerOutput:
        """Plan one pass. ``arrived_before`` (overlap loop): requests queued at or after it are not seen yet;
        ``prefill_blocked``: a ``prefill_decode_interval`` round that may only decode."""
        out = SchedulerOutput()
        if self.prealloc:
            self._reserve_preallocs()
        if self.handoffs:
            self._join_handoffs()
        if not prefill_blocked and (self.waiting or self.chunked is not None):
            self._schedule_prefill(out, arrived_before)
            if out.requests:
                return out
        if self.running:
            self._schedule_decode(out)
        return out

    def _max_new(self, request: Request) -> int:
        """The request's ``max_new_tokens`` after SGLang clips it to the context (at least one token)."""
        limit = self.config.max_req_len
        if limit is None:
            return request.max_tokens
        return max(1, min(request.max_tokens, limit - request.num_prompt_tokens - 1))

    def decodes(self, request: Request) -> bool:
        """Disaggregated decode: whether a request arriving with the prefill's token still has tokens to make."""
        return self._max_new(request) > 1

    def _clipped_remaining(self, request: Request) -> int:
        return min(self._max_new(request) - request.num_output_tokens, self.config.clip_max_new_tokens)

    def _order_waiting(self, arrived_before: int | None) -> None:
        if self.config.schedule_policy != "lpm":
            return
        waiting = self.waiting
        unseen: list[Request] = []
        if arrived_before is not None:  # the overlap loop has not received these yet: they stay behind
            unseen = [r for r in waiting if r.queued_at >= arrived_before]
            if unseen:
                waiting = [r for r in waiting if r.queued_at < arrived_before]
        if len(waiting) > LPM_FCFS_QUEUE_THRESHOLD:
            return
        cache, states = self.cache, self._states
        temp = RadixCache(1 << 62)
        keys: dict[Request, float] = {}
        for r in waiting:
            segs = self._segments(r, states[r])
            n = r.num_tokens
            hit = cache.match_length(segs, n - 1)
            keys[r] = -hit
            if hit <= IN_BATCH_PREFIX_THRESHOLD:
                if temp.match_length(segs, n - 1) >= IN_BATCH_PREFIX_THRESHOLD:
                    keys[r] = float("inf")
                else:
                    temp.insert(segs)
        waiting.sort(key=keys.__getitem__)
        if unseen:
            self.waiting = waiting + unseen

    def _schedule_prefill(self, out: SchedulerOutput, arrived_before: int | None) -> None:
        cfg, cache, states = self.config, self.cache, self._states
        clip_ratio = self.new_token_ratio
        offset = sum(self._clipped_remaining(r) * clip_ratio for r in self.running)
        rem_chunk, rem_input = cfg.chunk_budget, cfg.max_prefill_tokens
        batch: list[tuple[Request, int, int]] = []  # (request, context, new tokens)

        chunked = self.chunked
        if chunked is not None:
            extend = chunked.num_tokens - chunked.num_computed_tokens
            # The next chunk of an admitted prompt is not checked again, but SGLang caps it at the memory
            # left (``add_chunked_req``); when none is left it waits for decodes to retract or finish.
            take = min(extend, rem_chunk, cache.num_free + cache.num_evictable)
            if take <= 0:
                chunked = None
        if chunked is not None:
            ends = take == extend
            offset += take + (self._clipped_remaining(chunked) if ends else 0)
            rem_chunk -= take
            rem_input -= take
            batch.append((chunked, chunked.num_computed_tokens, take))
            self.chunked = None if ends else chunked

        self._order_waiting(arrived_before)
        admitted = 0
        for r in self.waiting:
            if len(self.running) + len(batch) >= cfg.max_running_requests:
                break
            if rem_chunk <= 0 or rem_input <= 0 or self.chunked is not None:
                break
            if arrived_before is not None and r.queued_at >= arrived_before:
                break
            st = states[r]
            n = r.num_tokens
            segs = self._segments(r, st)
            hit, node = cache.match(segs, n - 1)
            extend = n - hit
            reserve = self._clipped_remaining(r)
            take = min(extend, rem_chunk)
            cache.lock(node)  # the check sees the hit locked (SGLang's ``_lock_node``)
            if extend + reserve >= cache.num_free + cache.num_evictable - offset or (take > rem_input and batch):
                cache.unlock(node)
                break
            st.node, st.hit = node, hit
            r.num_computed_tokens = hit
            if r.num_preemptions == 0:
                r.num_cached_tokens = hit
                self.pool.num_queries += r.num_prompt_tokens
                self.pool.num_hits += hit
            if take < extend:
                self.chunked = r
                offset += take
            else:
                offset += extend + reserve
            rem_chunk -= take
            rem_input -= take
            batch.append((r, hit, take))
            admitted += 1
            (out.resumed if r.status is RequestStatus.PREEMPTED else out.admitted).append(r)
            r.status = RequestStatus.RUNNING
        if admitted:
            del self.waiting[:admitted]

        for r, ctx, take in batch:
            if not cache.allocate(take):
                # SGLang itself stops here ("Prefill out of memory"): its admission reserved too little for
                # the outputs of running requests (clip_max_new_tokens / new_token_ratio), and a chunk of an
                # admitted prompt no longer fits.
                raise SimulationError(f"SGLang ran out of KV memory for a prefill chunk ({take} tokens, "
                                      f"{cache.num_free + cache.num_evictable} free or evictable), as SGLang "
                                      f"would ('Prefill out of memory'); raise clip_max_new_tokens or "
                                      f"schedule_conservativeness, or give the rank more KV")
            states[r].allocated += take
            out.requests.append(r)
            out.num_new_tokens.append(take)
            out.num_context_tokens.append(ctx)
            out.is_decode.append(False)
            done = ctx + take >= r.num_tokens
            out.samples.append(done)
            r.is_prefill_chunk = not done
            r.num_computed_tokens = ctx + take
            if done and not r.bootstrap:
                self.running.append(r)  # decodes from the next pass on (passes never mix)

    def _schedule_decode(self, out: SchedulerOutput) -> None:
        cfg, cache = self.config, self.cache
        running = self.running
        if len(running) > cache.num_free + cache.num_evictable:
            while len(running) > 1 and len(running) > cache.num_free + cache.num_evictable:
                victim = min(running, key=lambda r: r.num_output_tokens)
                running.remove(victim)
                self._retract(victim, out)
            if self.chunked is not None and len(running) > cache.num_free + cache.num_evictable:
                # Only reachable when prefill_decode_interval runs decodes between a prompt's chunks: the
                # half-prefilled prompt gives its KV back (its prefix stays cached) and queues first.
                chunked, self.chunked = self.chunked, None
                self._retract(chunked, out)
                self.waiting.insert(0, self.waiting.pop())
            decoded = sum(r.num_output_tokens for r in running)
            max_new = sum(self._max_new(r) for r in running)
            self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(running)) / (max_new + 1))
        else:
            self.new_token_ratio = max(self.new_token_ratio - cfg.new_token_ratio_decay,
                                       cfg.min_new_token_ratio)
        states = self._states
        if not cache.allocate(len(running)):
            raise SimulationError(f"SGLang ran out of KV memory for a decode step of {len(running)} request(s) with "
                                  f"nothing left to retract, as SGLang would; raise clip_max_new_tokens or "
                                  f"schedule_conservativeness, or give the rank more KV")
        for r in running:
            states[r].allocated += 1
            out.requests.append(r)
            out.num_new_tokens.append(1)
            out.num_context_tokens.append(r.num_computed_tokens)
            out.is_decode.append(True)
            out.samples.append(True)
            r.num_computed_tokens += 1

    def _retract(self, request: Request, out: SchedulerOutput) -> None:
        st = self._states[request]
        if st.allocated:  # overlap loop: the pass in flight computes KV that nobody keeps
            self.cache.release(st.allocated)
            st.allocated = 0
        self.cache.unlock(st.node)
        st.node = None
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1
        self.num_retractions += 1
        self.waiting.append(request)
        out.preempted.append(request)

    # -- results ------------------------------------------------------------------------------
    def update_from_output(self, output: SchedulerOutput) -> tuple[list[Request], list[Request]]:
        """Insert the pass's KV into the tree, append one token to every request that sampled."""
        cache, states = self.cache, self._states
        sampled: list[Request] = []
        finished: list[Request] = []
        prefill = bool(output.is_decode) and not output.is_decode[0]
        for r, ctx, new, samples in zip(output.requests, output.num_context_tokens,
                                        output.num_new_tokens, output.samples):
            st = states.get(r)
            if st is None or r.status is not RequestStatus.RUNNING or st.allocated < new:
                # overlap loop: finished (or retracted) after this pass was planned; its slot is discarded
                if st is not None:
                    released = min(new, st.allocated)
                    cache.release(released)
                    st.allocated -= released
                    if r.status is RequestStatus.FINISHED and not st.allocated and not r.bootstrap:
                        del states[r]
                continue
            computed = ctx + new
            cache.release(new)
            st.allocated -= new
            node = st.node
            if not (new == 1 and node is not None
                    and cache.grow_leaf(node, st.output_block, computed - r.num_prompt_tokens)):
                _, node = cache.insert(self._segments(r, st), computed)
                cache.lock(node)
                cache.unlock(st.node)
                st.node = node
            if not samples:
                continue
            if prefill and r.num_preemptions and r.num_output_tokens:
                # The mocker's re-prefill after a retraction samples no new token (matches the goldens:
                # a retracted request's E2E is one decode pass longer than SGLang's re-prefill gives).
                continue
            r.num_output_tokens += 1
            r.num_emitted = 2 if r.kv_transferred and r.num_output_tokens == 2 else 1
            sampled.append(r)
            if r.num_output_tokens >= self._max_new(r):
                r.status = RequestStatus.FINISHED
                finished.append(r)
                if r.bootstrap:
                    continue  # the prefill side keeps the prompt's KV until the transfer is over
                cache.unlock(st.node)
                st.node = None
                if not st.allocated:  # overlap loop: else freed when the pass in flight is processed
                    del states[r]
        if finished:
            self.running = [r for r in self.running if r.status is RequestStatus.RUNNING]
        return sampled, finished
