"""A request as one engine rank sees it: prompt, outputs so far, KV blocks held, and its milestones."""

from __future__ import annotations

from enum import IntEnum


class RequestStatus(IntEnum):
    """Lifecycle states, ordered so that ``status > PREEMPTED`` means the request is over."""

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED = 3
    REJECTED = 4

    @property
    def is_finished(self) -> bool:
        return self > RequestStatus.PREEMPTED


class Request:
    """One client request: ``num_prompt_tokens`` in, at most ``max_tokens`` out.

    Mirrors the fields vLLM's v1 scheduler reads (``num_computed_tokens``, ``num_tokens``,
    ``num_output_tokens``); the ``*_at`` fields are simulated times in integer nanoseconds (see
    ``simmodel.engine.clock``), ``None`` until reached.
    """

    __slots__ = (
        "request_id", "arrived_at", "num_prompt_tokens", "max_tokens", "num_output_tokens",
        "num_computed_tokens", "num_blocks", "num_skipped_blocks", "status", "num_preemptions", "worker", "dp_rank",
        "dp_rank_hint", "first_admitted_at", "first_token_at", "second_token_at", "last_token_at",
        "finished_at", "last_token_pass", "on_finish", "hash_ids",
        # Disaggregated serving: a prefill leg (``bootstrap``) and the client request it feeds.
        "block_ids", "num_cached_blocks", "block_keys", "num_cached_tokens",
        "num_output_placeholders", "num_in_flight_tokens", "num_stale_output_tokens", "is_prefill_chunk",
        "num_draft_tokens", "num_emitted", "spec_rounds", "next_decode_eligible_step",
        "bootstrap", "kv_transferred", "awaiting_kv", "client", "source", "prefill_leg", "num_missing_blocks", "prefill_worker", "prefill_dp_rank", "prefill_dp_rank_hint",
        "predicted_cached_tokens",
        # vLLM's prefix caching of state layers: where the request's attention hit ran deeper than its state hit.
        "shared_prefix_boundary",
        # A host KV tier: prompt tokens loaded from it at first admission, and when the load began and landed;
        # of those tokens, the ones first read from a storage tier into the host, and when those reads began and
        # the last of them landed.
        "num_host_cached_tokens", "host_load_start_at", "host_load_end_at",
        "num_storage_cached_tokens", "storage_load_start_at", "storage_load_end_at",
        "prefill_done_at", "transfer_start_at", "transfer_end_at", "decode_admitted_at", "source_released_at",
        # SGLang: what the prompt's tokens are (radix cache segments), when it reached the scheduler,
        # and the time it spent in the frontend stages.
        "prompt_segments", "queued_at", "frontend_ns",
        # Staged loads: the stage that sent the request.
        "stage",
        # An encoder pool (EPD): the encoder worker that took its images, when it did, and when its embeddings
        # reached the deployment.
        "encoder_worker", "encode_start_at", "embeddings_at",
    )

    def __init__(self, request_id: int, arrived_at: int, num_prompt_tokens: int, max_tokens: int,
                 dp_rank_hint: int | None = None, hash_ids: tuple[int, ...] | None = None) -> None:
        self.request_id = request_id
        self.arrived_at = arrived_at
        self.num_prompt_tokens = num_prompt_tokens
        self.max_tokens = max_tokens
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.num_blocks = 0
        self.num_skipped_blocks = 0
        """Blocks of each sliding-window group given back behind the window (``BlockPool.slide``)."""
        self.status = RequestStatus.WAITING
        self.num_preemptions = 0
        self.worker = -1
        self.dp_rank = -1
        self.dp_rank_hint = dp_rank_hint
        self.hash_ids = hash_ids
        self.prompt_segments = None
        self.queued_at = arrived_at
        self.stage = 0
        self.frontend_ns = 0
        self.encoder_worker = -1
        self.encode_start_at: int | None = None
        self.embeddings_at: int | None = None
        self.first_admitted_at: int | None = None
        self.first_token_at: int | None = None
        self.second_token_at: int | None = None
        self.last_token_at: int | None = None
        self.finished_at: int | None = None
        self.last_token_pass = -2
        self.on_finish = None
        # Prefix caching: the block ids held (in order), how many of them are cached, and the content key
        # of each block (a ``BlockKeys``); tokens found in the cache at first admission.
        self.block_ids: list[int] = []
        self.num_cached_blocks = 0
        self.block_keys = None
        self.num_cached_tokens = 0
        self.num_host_cached_tokens = 0
        self.host_load_start_at: int | None = None
        self.host_load_end_at: int | None = None
        self.num_storage_cached_tokens = 0
        self.storage_load_start_at: int | None = None
        self.storage_load_end_at: int | None = None
        # Async scheduling: tokens scheduled whose outputs have not come back yet (vLLM's placeholders),
        # tokens in flight, and in-flight tokens of a preempted request (its "stale" output).
        self.num_output_placeholders = 0
        self.num_in_flight_tokens = 0
        self.num_stale_output_tokens = 0
        self.is_prefill_chunk = False
        # Speculative decoding: drafts proposed for the next pass (those it verifies are in its plan:
        # ``SchedulerOutput.drafts``), tokens the last pass emitted, and verification rounds so far.
        self.num_draft_tokens = 0
        self.num_emitted = 0
        self.spec_rounds = 0
        self.next_decode_eligible_step = 0
        """Async scheduling with pipeline stages: the scheduler step from which it may be scheduled again (vLLM's
        ``decode_stagger`` steps after the plan that reached its end)."""
        """Its last scheduled chunk left prompt tokens to compute (vLLM's flag, set when scheduled)."""
        self.bootstrap = False
        """A prefill worker's leg: its one sampled token is not the client's, and its KV is held for transfer."""
        self.kv_transferred = False
        """A decode worker's leg whose prompt KV arrived from a prefill worker."""
        self.awaiting_kv = False
        """A decode leg still waiting for blocks to receive its KV into."""
        self.client: Request | None = None
        self.source = None
        self.prefill_leg: Request | None = None
        self.num_missing_blocks = 0
        """Decode blocks the KV transfer must fill (the rest were already cached on the decode rank)."""
        """The prefill rank and leg a decode leg's KV comes from."""
        self.prefill_worker = -1
        self.prefill_dp_rank = -1
        self.prefill_dp_rank_hint: int | None = None
        self.prefill_done_at: int | None = None
        self.transfer_start_at: int | None = None
        self.transfer_end_at: int | None = None
        self.decode_admitted_at: int | None = None
        self.source_released_at: int | None = None
        self.predicted_cached_tokens: int | None = None
        """Prompt tokens the router expected cached on the rank it chose (a KV-aware or prefix-scoring router;
        P/D: the prefill pool's), beside ``num_cached_tokens``, what the rank found; None: no such router."""
        self.shared_prefix_boundary = 0
        """vLLM's prefix caching over several KV cache groups: where the full-attention groups' hit ran deeper than the
        hit the request got, in tokens (its junction, whose state or window is kept for the next sibling); 0: none."""

    @property
    def prefill_end(self) -> int:
        """Where the request's prefill ends (vLLM's ``max(num_prompt_tokens, num_tokens − 1)``: a resumed request
        recomputes its outputs but the last)."""
        return max(self.num_prompt_tokens, self.num_tokens - 1)

    @property
    def num_tokens(self) -> int:
        """Prompt plus the output tokens sampled so far (vLLM's ``num_tokens``)."""
        return self.num_prompt_tokens + self.num_output_tokens

    def __repr__(self) -> str:
        return (f"Request({self.request_id}, {self.status.name}, prompt={self.num_prompt_tokens}, "
                f"out={self.num_output_tokens}/{self.max_tokens}, computed={self.num_computed_tokens})")
