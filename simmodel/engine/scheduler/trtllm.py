"""TensorRT-LLM's batch manager for one attention-DP rank: a capacity scheduler, then a micro-batch scheduler.

Each pass TensorRT-LLM first asks its capacity scheduler (``batch_manager/capacityScheduler.cpp``) which
requests may hold KV this iteration, then its micro-batch scheduler (``microBatchScheduler.cpp``) how many
tokens each of them runs under ``max_num_tokens`` and ``max_batch_size``. Reproduced here, synchronously
(no overlap scheduler):

- Running requests come first: every decode one token, then every prompt being chunked its next chunk (the
  micro-batch scheduler counts generation requests first), each in the order they started; the token budget
  can run out on them (the rest wait a pass).
- Then the waiting queue, first come first served, while a sequence slot and budget are left; the first
  request the capacity policy refuses blocks the ones behind it (``CAPACITY_POLICIES``):

  - ``guaranteed_no_evict`` (the default): a request starts only if the blocks of its whole sequence (prompt
    plus maximum output, no credit for cached blocks it will share) fit beside what every started request
    will still take until it completes, so a started request is never evicted;
  - ``max_utilization``: a request starts if its whole prompt's blocks fit now; when a running request's next
    block does not, the most recently started request is paused (its KV freed, recomputed later from the
    front of the queue), as vLLM preempts;
  - ``static_batch``: ``guaranteed_no_evict`` that starts requests only when nothing runs (a batch drains
    before the next one starts).

- Chunked context (``enable_chunked_prefill``, TensorRT-LLM's ``enable_chunked_context``): a prompt that does
  not fit the budget left runs the part that fits, cut down to a whole number of ``chunk_unit`` tokens (the
  KV block size, TensorRT-LLM's ``chunkUnitSize``); nothing runs if less than one unit fits. Without it a
  prompt runs whole or waits.
- KV block reuse (``prefix_caching``): a new request starts from its longest run of cached full blocks, at
  most all but its last token (it is recomputed for its logits); the blocks a chunk fills are cached when it
  is scheduled (``PrefixCachingBlockPool``, the same pool as vLLM's).
- A request stops after its maximum output or at ``max_seq_len`` tokens; its blocks are freed as the pass
  that samples its last token ends.

What the real engine does that is not modelled (docs/trtllm.md): its overlap scheduler (one pass in flight
while the next is planned), beam search, and the capacity scheduler's skipping of a request whose first new
block another request computes in the same iteration (here it reuses it at once, as Dynamo's mocker does).
P/D: the generation (decode) side reserves a handoff's prompt blocks when its policy would start it (``_reserve``).
Checked against Dynamo's mocker (its TRT-LLM policy, ``tests/golden/dynamo_trtllm``) with ``chunk_unit`` 1,
the mocker not cutting chunks to whole blocks (and where the mocker credits shared cached blocks toward a start,
TensorRT-LLM does not: docs/trtllm.md). Runs of passes are planned by vLLM's planner
(``TrtllmScheduler``'s docstring says why that holds).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from simmodel.engine.kv_cache import BlockPool, PrefixCachingBlockPool, cdiv, free_blocks, take_blocks
from simmodel.engine.request import Request, RequestStatus
from simmodel.engine.scheduler.base import SchedulerOutput


@dataclass(frozen=True, slots=True)
class TrtllmSchedulerConfig:
    """The knobs of TensorRT-LLM's ``SchedulerConfig`` and build limits the scheduler reads."""

    max_batch_size: int = 256
    """Requests holding a sequence slot at once (``max_batch_size``; simmodel's ``max_sequences``)."""
    max_num_tokens: int = 8192
    """Tokens one pass runs (``max_num_tokens``; simmodel's ``max_batched_tokens``)."""
    max_seq_len: int = 8192
    """Longest sequence, prompt and output (``max_seq_len``; simmodel's ``context_length``)."""
    capacity_policy: str = "guaranteed_no_evict"
    enable_chunked_context: bool = True
    chunk_unit: int = 32
    """A truncated chunk is a whole number of these tokens (TensorRT-LLM: the KV block size)."""
    client_max_tokens: int = 0
    """The ``max_tokens`` clients send (0: each request's own output length; ``max_seq_len`` when they leave it
    unset): ``guaranteed_no_evict`` holds blocks for the longer of it and the output."""

    # The same limits under vLLM's names, read by the pass planner that plans runs of passes for both engines
    # (``engine.planner``); TensorRT-LLM has no long-prefill threshold and no draft tokens here.
    long_prefill_token_threshold = 0
    num_speculative_tokens = 0

    @property
    def max_num_seqs(self) -> int:
        return self.max_batch_size

    @property
    def max_num_batched_tokens(self) -> int:
        return self.max_num_tokens

    @property
    def max_model_len(self) -> int:
        return self.max_seq_len


class GuaranteedNoEvict:
    """TensorRT-LLM's ``GUARANTEED_NO_EVICT``: start a request only if its whole sequence's blocks fit beside
    what the started requests will still take to complete; never evict."""

    pauses = False

    @staticmethod
    def starts_any(scheduler: TrtllmScheduler) -> bool:
        return True

    @staticmethod
    def fits(scheduler: TrtllmScheduler, request: Request) -> bool:
        """The new request's blocks to completion (``getRemainingBlocksToCompletion``: its whole sequence, no
        credit for cached blocks it will share) within the free blocks not owed to the started ones. The same
        for a P/D handoff's reservation."""
        needed = cdiv(scheduler.final_tokens(request), scheduler.block_size)
        return needed <= scheduler.pool.num_free_blocks - scheduler.promised_blocks()


class StaticBatch(GuaranteedNoEvict):
    """TensorRT-LLM's ``STATIC_BATCH``: ``GUARANTEED_NO_EVICT`` that starts requests only when none runs."""

    @staticmethod
    def starts_any(scheduler: TrtllmScheduler) -> bool:
        return not scheduler.running


class MaxUtilization:
    """TensorRT-LLM's ``MAX_UTILIZATION``: start a request if the blocks of its prompt fit now; pause the most
    recently started request when a running one's next block does not."""

    pauses = True

    @staticmethod
    def starts_any(scheduler: TrtllmScheduler) -> bool:
        return True

    @staticmethod
    def fits(scheduler: TrtllmScheduler, request: Request) -> bool:
        """The prompt's blocks (``getNeededBlocksOneStep`` of a first context chunk: TensorRT-LLM allocates a
        context's KV whole then; no credit for cached blocks) within the free blocks (cached ones no request
        holds count as free). The same for a P/D handoff's reservation."""
        return cdiv(request.num_tokens, scheduler.block_size) <= scheduler.pool.num_free_blocks


CAPACITY_POLICIES = {"guaranteed_no_evict": GuaranteedNoEvict, "max_utilization": MaxUtilization,
                     "static_batch": StaticBatch}
"""``scheduler.capacity_policy`` → TensorRT-LLM's capacity scheduler of that name."""


class TrtllmScheduler:
    """Per-rank TensorRT-LLM scheduling: ``schedule()`` plans a pass, ``update_from_output()`` applies it.

    Runs of passes (``engine.planner``) are planned by vLLM's planner: between starts, TensorRT-LLM's passes are
    vLLM's synchronous ones (every running request decodes a token, a block taken at each block boundary,
    full blocks cached as they fill, a finished request's blocks freed as its last pass ends), and the starts a
    run makes are this scheduler's own (``admit_waiting``: the capacity policy's). So it offers what that planner
    calls on vLLM's: its limits under vLLM's names, ``admit_waiting``, ``retire``, ``drop_finished``,
    ``start_plan``, ``after_run``, an empty ``handoffs`` queue and synchronous scheduling."""

    planner = "vllm"
    """The pass planner's runs for it (``engine.planner.PLANNERS``): vLLM's (see above)."""
    async_scheduling = False

    def __init__(self, config: TrtllmSchedulerConfig, pool: BlockPool | PrefixCachingBlockPool) -> None:
        self.config = config
        self.pool = pool
        self.caching = pool.caching
        self.block_size = pool.block_size
        self.policy = CAPACITY_POLICIES[config.capacity_policy]
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.offload = None
        self.num_pauses = 0
        """Running requests ``max_utilization`` paused for want of a block."""
        self.handoffs: deque[Request] = deque()
        """P/D decode side: requests whose prompt KV has arrived, starting ahead of the waiting queue."""
        self.reserved: list[Request] = []
        """P/D decode side: requests whose prompt's blocks are reserved here while their KV is on its way."""
        self.sent: list[Request] = []
        """P/D prefill side: finished prefill legs holding their prompt's blocks until the transfer is done."""
        self.on_kv_reserved: Callable[[Request], None] | None = None
        """Called, during ``schedule()``, when blocks are reserved for a remote request's incoming KV."""
        self.prefill_capacity_bound = False
        self.finished_since_schedule = False

    def add_request(self, request: Request) -> None:
        self.waiting.append(request)

    def has_requests(self) -> bool:
        return bool(self.running or self.waiting or self.handoffs)

    # -- P/D handoffs: the generation side reserves, then the KV comes (``PullHandoffs``) -----------------------

    def add_remote(self, request: Request) -> None:
        """Queue a request whose prompt was prefilled elsewhere: in queue order, ``schedule()`` reserves its
        prompt's blocks once its whole sequence fits the capacity policy, and its transfer may begin."""
        request.awaiting_kv = True
        self.waiting.append(request)

    def add_handoff(self, request: Request) -> None:
        """A request's prompt KV has arrived into the blocks reserved for it: all but its last prompt token
        count as computed, and it starts ahead of the waiting queue."""
        request.num_computed_tokens = request.num_prompt_tokens - 1
        self.reserved.remove(request)
        self.handoffs.append(request)

    def release(self, request: Request) -> None:
        """P/D prefill side: free the blocks a finished prefill leg held for its transfer."""
        self.sent.remove(request)
        free_blocks(self.pool, request)

    def _reserve(self, request: Request) -> bool:
        """Reserve the prompt's blocks of a remote request if its capacity policy would start it (its KV comes
        whole from the prefill side: no cached prefix is looked up); False if not (it then blocks the queue)."""
        if not self.policy.fits(self, request):
            return False
        self.waiting.popleft()
        blocks = cdiv(request.num_prompt_tokens, self.block_size)
        self._take(request, blocks)
        request.num_missing_blocks = blocks
        request.awaiting_kv = False
        self.reserved.append(request)
        if self.on_kv_reserved is not None:
            self.on_kv_reserved(request)
        return True

    def reset_prefix_cache(self) -> None:
        if self.caching:
            self.pool.reset_prefix_cache()

    @property
    def num_queued(self) -> int:
        return len(self.waiting)

    def final_tokens(self, request: Request) -> int:
        """The tokens a request may hold once it is done as its client asked (``getRemainingBlocksToCompletion``'s
        prompt plus ``max_new_tokens``): its prompt and the longer of its output and the client's ``max_tokens``,
        within ``max_seq_len``."""
        asked = max(request.max_tokens, self.config.client_max_tokens)
        return min(request.num_prompt_tokens + asked, self.config.max_seq_len)

    def promised_blocks(self) -> int:
        """Blocks the started requests (running, or P/D handoffs reserved or arrived) will still take until they
        complete (``GUARANTEED_NO_EVICT`` keeps them for them): their blocks to completion less those they hold.
        Counted blocks are never shared, so what they hold is every block in use but the finished prefill legs'
        (a run of passes keeps the pool's count, not each request's)."""
        bs = self.block_size
        owing = (self.running, self.reserved, self.handoffs)
        total = sum(cdiv(self.final_tokens(r), bs) for group in owing for r in group)
        if self.caching:
            return total - sum(r.num_blocks for group in owing for r in group)
        return total - self.pool.num_used_blocks + sum(r.num_blocks for r in self.sent)

    def _take(self, request: Request, num_blocks: int) -> None:
        if num_blocks > 0:
            take_blocks(self.pool, request, num_blocks)

    def _chunk(self, remaining: int, budget: int) -> int:
        """New tokens of a prompt with ``remaining`` tokens to compute under ``budget``: all of them if they
        fit; else, chunked, the whole units that fit (0: none); unchunked, 0."""
        if remaining <= budget:
            return remaining
        if not self.config.enable_chunked_context:
            return 0
        unit = self.config.chunk_unit
        return budget // unit * unit

    # -- runs of passes planned in closed form (``engine.planner``) ------------------------------

    def admit_waiting(self, token_budget: int, threshold: int, out: SchedulerOutput,
                      arrived_before: int | None = None, defer: bool = False) -> int:
        """Start waiting requests into a pass whose running requests are planned, ``token_budget`` left (what
        ``schedule()`` does after them; ``threshold``, ``arrived_before`` and ``defer`` are vLLM's, unused).
        Returns the requests stepped over: none (the first that cannot start blocks the queue)."""
        if self.policy.starts_any(self):
            self._start_waiting(token_budget, out)
        return 0

    def retire(self, request: Request) -> None:
        """A request reached its stop: finished, its blocks freed (a prefill leg keeps them until its transfer is
        done: ``release``). The caller takes it out of ``running``."""
        request.status = RequestStatus.FINISHED
        request.block_keys = None
        if request.bootstrap:
            self.sent.append(request)
        else:
            free_blocks(self.pool, request)

    def drop_finished(self) -> None:
        """Take the requests a run retired out of ``running``, keeping its order."""
        running = RequestStatus.RUNNING  # (a local: an enum member looked up on its class costs ~70 ns)
        self.running = [r for r in self.running if r.status is running]

    def start_plan(self) -> None:
        """A plan begins (a run's admissions)."""
        self.finished_since_schedule = False

    def after_run(self, running: list[Request] | None, finished_in_last_pass: bool, capacity_bound: bool) -> None:
        """Take the state a run leaves: its running requests in order (None: as its last plan left them)."""
        if running is not None:
            self.running = running
        self.finished_since_schedule = finished_in_last_pass
        self.prefill_capacity_bound = capacity_bound

    def schedule(self, arrived_before: int | None = None, throttle_prefills: bool = False) -> SchedulerOutput:
        """Plan one pass: the running requests (decodes, then prompts being chunked), then FCFS starts (see the
        module docstring).
        (``arrived_before`` and ``throttle_prefills`` are other engines' knobs: TensorRT-LLM is planned
        synchronously here, with no prefill interval.)"""
        out = SchedulerOutput()
        budget = self.config.max_num_tokens
        policy = self.policy
        # Generation requests first, then prompts being chunked (the micro-batch scheduler gives contexts what
        # the decodes leave), each in the order they started.
        order = [r for r in self.running if not r.is_prefill_chunk] + [r for r in self.running if r.is_prefill_chunk]
        for request in order:
            if budget <= 0:
                break
            if request.status is not RequestStatus.RUNNING:
                continue  # paused in this pass to make room
            computed = request.num_computed_tokens
            num_new = self._chunk(request.num_tokens - computed, budget)
            if num_new <= 0:
                break  # (a prompt being chunked gets no whole unit: nor do the ones after it)
            needed = cdiv(computed + num_new, self.block_size) - request.num_blocks
            while policy.pauses and needed > self.pool.num_free_blocks:
                victim = self.running.pop()
                self._pause(victim, out)
                if victim is request:
                    break
            if request.status is not RequestStatus.RUNNING:
                break
            self._run(request, num_new, out)
            budget -= num_new
        if not out.preempted and policy.starts_any(self):
            self._start_waiting(budget, out)
        return out

    def _start_waiting(self, budget: int, out: SchedulerOutput) -> None:
        """First come first served, while a sequence slot, budget and the capacity policy allow; the first
        request that cannot start blocks the rest."""
        pool, bs, policy = self.pool, self.block_size, self.policy
        max_batch = self.config.max_batch_size
        while budget > 0 and len(self.running) < max_batch and (self.handoffs or self.waiting):
            if self.handoffs:  # (its blocks reserved and counted already: it decodes its prompt's last token)
                self._start(self.handoffs.popleft(), 1, out)
                budget -= 1
                continue
            request = self.waiting[0]
            if request.awaiting_kv:
                if not self._reserve(request):
                    break
                continue
            fresh = self.caching and request.num_computed_tokens == 0
            hits = pool.find_hits(request) if fresh else []
            computed = len(hits) * bs
            num_new = self._chunk(request.num_tokens - computed, budget)
            if num_new <= 0 or not policy.fits(self, request):
                break
            self.waiting.popleft()
            if self.caching:
                if request.num_preemptions == 0:
                    pool.count_lookup(request, computed)
                if hits:
                    pool.take_hits(request, hits)
            request.num_computed_tokens = computed
            if policy.pauses:  # (its prompt's KV taken whole at its first chunk)
                self._take(request, cdiv(request.num_tokens, bs) - request.num_blocks)
            self._start(request, num_new, out)
            budget -= num_new

    def _start(self, request: Request, num_new: int, out: SchedulerOutput) -> None:
        """A request starts (or resumes after a pause) with ``num_new`` tokens in this pass."""
        (out.resumed if request.status is RequestStatus.PREEMPTED else out.admitted).append(request)
        request.status = RequestStatus.RUNNING
        self.running.append(request)
        self._run(request, num_new, out)

    def _run(self, request: Request, num_new: int, out: SchedulerOutput) -> None:
        """Put ``num_new`` tokens of the request in the pass: take the blocks they reach, cache the full ones."""
        computed = request.num_computed_tokens
        self._take(request, cdiv(computed + num_new, self.block_size) - request.num_blocks)
        if self.caching:
            self.pool.cache_full_blocks(request, min(computed + num_new, request.num_tokens))
        ends = computed + num_new >= request.num_tokens
        out.requests.append(request)
        out.num_new_tokens.append(num_new)
        out.num_context_tokens.append(computed)
        out.is_decode.append(ends and num_new == 1 and (request.num_output_tokens > 0 or request.kv_transferred))
        out.samples.append(ends)
        request.is_prefill_chunk = not ends
        request.num_computed_tokens = computed + num_new

    def _pause(self, request: Request, out: SchedulerOutput) -> None:
        """``MAX_UTILIZATION`` pauses a started request: its KV is freed and it waits at the queue's front, to
        recompute its prompt and the tokens it sampled."""
        free_blocks(self.pool, request)
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1
        self.num_pauses += 1
        self.waiting.appendleft(request)
        out.preempted.append(request)

    def update_from_output(self, output: SchedulerOutput) -> tuple[list[Request], list[Request]]:
        """One token for every request whose chunk reached the end of its sequence; a request stops at its
        maximum output or ``max_seq_len`` and frees its blocks. Returns those that sampled and those done."""
        max_seq_len = self.config.max_seq_len
        running = RequestStatus.RUNNING
        sampled: list[Request] = []
        finished: list[Request] = []
        for request, samples in zip(output.requests, output.samples):
            if not samples or request.status is not running:
                continue
            request.num_output_tokens += 1
            request.num_emitted = 1
            sampled.append(request)
            if (request.num_output_tokens >= request.max_tokens
                    or request.num_prompt_tokens + request.num_output_tokens >= max_seq_len):
                self.retire(request)
                finished.append(request)
        if finished:
            self.drop_finished()
        return sampled, finished
