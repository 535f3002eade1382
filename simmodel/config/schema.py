"""A scenario as frozen dataclasses: ``traffic`` (what arrives) and ``engine`` (what serves it).

Every default below is the documented default of ``docs/configuration.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from simmodel.frontend.stages import StageSpec
from simmodel.perf.deployment import Deployment
from simmodel.perf.kv_layout import KvLayout, kv_layout
from simmodel.perf.roofline import Efficiency, HostOverhead


@dataclass(frozen=True, slots=True)
class LengthSpec:
    """A token count: fixed (``distribution == "fixed"``) or drawn per request from the run's RNG."""

    distribution: str
    value: int = 0
    min: int = 1
    max: int | None = None
    mean: float = 0.0
    std: float = 0.0
    values: tuple[int, ...] = ()
    weights: tuple[float, ...] | None = None


def smallest_length(spec: LengthSpec) -> int:
    """The least length the spec can produce."""
    if spec.distribution == "fixed":
        return spec.value
    if spec.distribution == "choice":
        return min(v for v, w in zip(spec.values, spec.weights or [1] * len(spec.values)) if w > 0)
    return spec.min


@dataclass(frozen=True, slots=True)
class SharedPrefix:
    """Synthetic prompts whose first ``tokens`` tokens are the same within each of ``groups`` groups
    (request i belongs to group i mod groups), so prefix caching can reuse them."""

    tokens: int
    groups: int


@dataclass(frozen=True, slots=True)
class SyntheticSource:
    input_tokens: LengthSpec
    output_tokens: LengthSpec
    type: str = "synthetic"
    shared_prefix: SharedPrefix | None = None
    images: ImageSpec | None = None


@dataclass(frozen=True, slots=True)
class SharedPrefixSource:
    """inference-perf's and SGLang bench's shared-prefix workload: ``num_groups`` system prompts, each
    followed by ``prompts_per_group`` questions, make a pool of distinct prompts whose order is shuffled
    once; request i sends prompt i mod pool size (so the pool repeats once every prompt was sent). A
    group's system prompt length is drawn once per group, a question's once per prompt, an output length
    per request."""

    num_groups: int
    prompts_per_group: int
    system_prompt_tokens: LengthSpec
    question_tokens: LengthSpec
    output_tokens: LengthSpec
    type: str = "shared_prefix"

    @property
    def input_tokens(self) -> LengthSpec:
        """The least a prompt can be, for the context-length checks: both parts at their smallest."""
        return LengthSpec("fixed", value=smallest_length(self.system_prompt_tokens)
                          + smallest_length(self.question_tokens))


@dataclass(frozen=True, slots=True)
class SessionsSource:
    """Multi-turn chat sessions (``simmodel.traffic.sessions``): per session a number of ``turns``, per
    turn a new message and an answer length, ``inter_turn_delay_ms`` of user think time between an answer
    and the next message, and the leading ``shared_prefix_ratio`` of each session's first message shared
    by every session (a system prompt). The load's unit is a session."""

    turns: LengthSpec
    new_input_tokens_per_turn: LengthSpec
    output_tokens_per_turn: LengthSpec
    inter_turn_delay_ms: float = 0.0
    shared_prefix_ratio: float = 0.0
    type: str = "sessions"

    @property
    def input_tokens(self) -> LengthSpec:
        """The least a prompt can be (a first turn's message), for the context-length checks."""
        return self.new_input_tokens_per_turn

    @property
    def output_tokens(self) -> LengthSpec:
        return self.output_tokens_per_turn


@dataclass(frozen=True, slots=True)
class AgenticSource:
    """Agentic sessions from a trace (``simmodel.traffic.agents``): per session a graph of LLM calls, each sent
    with the session's context so far plus its new tokens once the calls it waits on are done and its wait has
    passed. ``tool_latency_ms``: the wait of a call whose trace gives none. The load's unit is a session."""

    path: Path
    format: str = "simmodel"
    tool_latency_ms: LengthSpec | None = None
    block_size: int = 512
    """``format: mooncake``: tokens per ``hash_ids`` entry."""
    type: str = "agentic"


AGENT_FORMATS = ("simmodel", "dynamo", "otel", "mooncake")
"""The agentic trace formats ``traffic.source.format`` names (``simmodel.traffic.agent_traces`` reads each)."""
TRACE_FORMATS = ("mooncake", "azure", "csv")
"""The trace file formats ``traffic.source.format`` names; ``simmodel.traffic.traces`` reads each."""


@dataclass(frozen=True, slots=True)
class TraceSource:
    path: Path
    format: str
    type: str = "trace"
    block_size: int = 512
    """Tokens per ``hash_ids`` entry (Mooncake traces: 512)."""


@dataclass(frozen=True, slots=True)
class LoadStage:
    """One stage of a staged load: a request rate or a number of closed-loop clients, sending for
    ``duration_s`` seconds and/or until it has sent ``requests`` requests, whichever comes first."""

    duration_s: float | None = None
    requests: int | None = None
    requests_per_second: float | None = None
    concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """``concurrency`` (closed loop), ``poisson``, ``gamma``, ``constant_rate``, ``trace_timestamps`` or
    ``stages``."""

    type: str
    concurrency: int = 0
    requests_per_second: float = 0.0
    seed: int | None = None
    speedup: float = 1.0
    burstiness: float = 1.0
    """Gamma arrivals: the shape of the gaps' gamma distribution (vLLM's ``--burstiness``); 1 is Poisson."""
    stages: tuple[LoadStage, ...] = ()
    arrivals: str = "poisson"
    """How a rate stage spaces its requests: ``constant``, ``poisson``, ``gamma`` or ``fixed_count``."""
    drain: bool = False
    """Stages: the next stage starts only once every request of this one has finished."""
    pause_s: float = 0.0
    """Stages: idle time between one stage's end (and drain) and the next stage's start."""
    rescale_to_rate: bool = False
    """``poisson``/``gamma`` with ``stop.requests`` N, as ``vllm bench serve``: the first request waits its
    own gap too, and the N arrival times are scaled so the last is at exactly N / requests_per_second."""
    max_concurrency: int | None = None
    """Open-loop loads: at most this many requests in flight; an arrival beyond it waits at the client for
    the first slot a finish frees, and is sent then (``vllm bench serve --max-concurrency``)."""


@dataclass(frozen=True, slots=True)
class StopSpec:
    requests: int | None = None
    max_virtual_time_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Traffic:
    source: SyntheticSource | SharedPrefixSource | SessionsSource | TraceSource | AgenticSource
    load: LoadSpec
    stop: StopSpec
    warnings: tuple[str, ...] = ()
    """What an imported benchmark workload asked for that the simulation does not reproduce."""
    prompt_overhead_tokens: int = 0
    """Tokens the server finds in every prompt of an imported workload beyond the lengths the tool asked for
    (its template, and the tool's random text re-tokenized), after the prompt's own text."""


@dataclass(frozen=True, slots=True)
class Parallelism:
    replicas: int = 1
    tensor: int = 1
    pipeline: int = 1
    attention_data: int = 1
    moe_tensor: int = 1
    moe_expert: int = 1
    prefill_context: int = 1
    decode_context: int = 1

    @property
    def gpus_per_worker(self) -> int:
        """``tensor × attention_data × prefill_context`` (pipeline is 1 in engine replay)."""
        return self.pipeline * self.tensor * self.attention_data * self.prefill_context

    @property
    def gpu_count(self) -> int:
        """``replicas × pipeline × tensor × attention_data × prefill_context``."""
        return self.replicas * self.gpus_per_worker


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """CPU time vLLM spends launching a pass (``scheduler.launch``), measured on the deployment."""

    decode_ms: float
    piecewise_ms: float
    eager_ms: float
    max_cudagraph_capture_size: int = 512
    eager_queue_fraction: float = 0.0


@dataclass(frozen=True, slots=True)
class SglangSchedulerSpec:
    """SGLang's own scheduler knobs (``backend: sglang``): server arguments and the environment variables
    behind its output reservation (``SGLANG_INIT_NEW_TOKEN_RATIO``, ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``,
    ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS``)."""

    chunked_prefill_size: int = 8192
    """Prefill tokens per pass of the whole worker (each attention-DP rank gets its share)."""
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    init_new_token_ratio: float = 0.7
    min_new_token_ratio_factor: float = 0.14
    new_token_ratio_decay_steps: int = 600
    clip_max_new_tokens: int = 4096
    prefill_decode_interval: int = 0
    enable_mixed_chunk: bool = False
    """``--enable-mixed-chunk``: a prefill pass also decodes the running requests."""
    ignore_eos: bool = False
    """The requests are sent with ``ignore_eos`` (as benchmark clients send them to get their output
    lengths): running ones are expected to need all their remaining output, not ``new_token_ratio`` of it."""


@dataclass(frozen=True, slots=True)
class TrtllmSchedulerSpec:
    """TensorRT-LLM's own scheduler knobs (``backend: trtllm``): its ``SchedulerConfig``'s capacity policy, the unit
    a truncated context chunk is cut to, and the ``max_tokens`` its clients send."""

    capacity_policy: str = "guaranteed_no_evict"
    """``guaranteed_no_evict``, ``max_utilization`` or ``static_batch`` (``engine.scheduler.trtllm``)."""
    chunk_unit: int | None = None
    """Tokens a truncated context chunk is a whole number of; None: the KV block size, as TensorRT-LLM cuts it."""
    client_max_tokens: int | str = "output"
    """The ``max_tokens`` clients send, which ``guaranteed_no_evict`` holds blocks for: ``output`` (each request's
    own output length, as benchmark clients send it with ``ignore_eos``), ``context_length`` (left unset: up to
    ``max_seq_len``), or a number of tokens (a request still stops at its own output length, its end of sequence,
    if that comes first)."""


@dataclass(frozen=True, slots=True)
class SchedulerSpec:
    max_batched_tokens: int = 8192
    max_sequences: int = 256
    long_prefill_token_threshold: int = 0
    async_scheduling: bool = True
    reserve_full_isl: bool = True
    prefill_schedule_interval: int = 1
    launch: LaunchSpec | None = None
    sglang: SglangSchedulerSpec | None = None
    """``backend: sglang`` only."""
    trtllm: TrtllmSchedulerSpec | None = None
    """``backend: trtllm`` only."""


@dataclass(frozen=True, slots=True)
class CapacitySpec:
    type: str = "default"
    memory_fraction: float = 0.9
    blocks: int = 0


HICACHE_WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
"""SGLang HiCache's ``--hicache-write-policy`` choices (``engine.hiradix_cache``)."""
HICACHE_PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
"""SGLang HiCache's ``--hicache-storage-prefetch-policy`` choices (``offload.sglang_storage``)."""


@dataclass(frozen=True, slots=True)
class StorageSpec:
    """``kv_cache.host_offload.storage``: a storage tier (local disk, a network store) behind the host tier, as
    vLLM 0.32's ``TieringOffloadingSpec`` keeps one (its secondary tiers: ``fs``, ``obj``...). Every block that
    lands on the host is written through to it; a block found only there is read back into the host before the
    host-to-GPU load (``simmodel.offload.storage``)."""

    capacity_gib: float | None = None
    """What it holds per attention-DP rank (the whole store if ``shared``), in GiB; None: unbounded (vLLM's ``fs``
    tier never deletes a file)."""
    read_gb_per_s: float = 5.0
    """Read bandwidth per rank, in GB/s (5: SGLang's simulated storage backend, ``hicache_storage_sim``)."""
    write_gb_per_s: float = 5.0
    """Write bandwidth per rank, in GB/s."""
    latency_us: float = 100.0
    """Fixed time of each read or write job, before its bytes move (100 µs: the same source)."""
    prefetch_policy: str | None = None
    """SGLang: when a request waiting for its prefetch from storage is taken (``--hicache-storage-prefetch-policy``:
    ``best_effort``, ``wait_complete``, ``timeout``); None for vLLM."""
    prefetch_threshold: int = 256
    """SGLang: tokens a lookup must find on storage to be read (``prefetch_threshold``)."""
    prefetch_timeout_base_s: float = 1.0
    """SGLang ``timeout``: the wait's fixed part, in seconds (``prefetch_timeout_base``)."""
    prefetch_timeout_per_ki_token_s: float = 0.25
    """SGLang ``timeout``: the wait per 1,024 tokens asked for, in seconds (``prefetch_timeout_per_ki_token``)."""
    shared: bool = False
    """One store for every rank of every worker of the role (a shared file system, a Mooncake store, LMCache's
    remote tier): what any rank writes, all find once the write ends; ``capacity_gib`` is then the store's. False:
    each rank's own (a node's local disk)."""


@dataclass(frozen=True, slots=True)
class HostOffloadSpec:
    """``kv_cache.host_offload``: a host-memory (CPU) tier behind each rank's GPU KV cache, as vLLM's offloading
    connector or SGLang's HiCache keeps it (``simmodel.offload``)."""

    capacity_gib: float | None
    """Host memory for KV per attention-DP rank, summed over its tensor-parallel GPUs (vLLM's
    ``--kv-offloading-size``; SGLang's ``--hicache-size`` × tensor, in GiB not GB), in GiB. None: SGLang's
    ``ratio``."""
    policy: str = "lru"
    """How the tier evicts when full: ``lru`` (vLLM's native CPU backend)."""
    link_gb_per_s: float | None = None
    """Host link bandwidth per GPU and direction in GB/s; None: the hardware's ``pcie_bytes_per_s``."""
    latency_us: float = 0.0
    """Fixed time of each transfer (one request's blocks in one direction), before its bytes move."""
    ratio: float | None = None
    """SGLang: the host pool's tokens per GPU KV token (``--hicache-ratio``), when ``capacity_gib`` is not given."""
    write_policy: str | None = None
    """SGLang: when KV is copied to the host (``--hicache-write-policy``); None for vLLM."""
    storage: StorageSpec | None = None
    """A storage tier behind the host tier (vLLM's secondary tier, SGLang's ``--hicache-storage-backend``); None:
    none."""


@dataclass(frozen=True, slots=True)
class KvCacheSpec:
    block_size: int = 16
    prefix_caching: bool = True
    capacity: CapacitySpec = field(default_factory=CapacitySpec)
    dtype: str = "auto"
    host_offload: HostOffloadSpec | None = None
    hybrid: bool | None = None
    """vLLM's hybrid KV cache manager: sliding-window layers keep only their window's blocks (``perf.kv_layout``);
    False: ``--disable-hybrid-kv-cache-manager``, they keep the whole context's; None: unset (on)."""


@dataclass(frozen=True, slots=True)
class TimingSpec:
    """``default`` (the roofline performance model), ``measured`` (aiconfigurator's kernel tables),
    ``fixed`` or ``polynomial``."""

    type: str = "default"
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    efficiency: Efficiency = field(default_factory=Efficiency)
    host: HostOverhead = field(default_factory=HostOverhead)
    backend_version: str | None = None
    calibration: Path | None = None
    """``default`` timing fitted by ``simmodel calibrate``: the file its values come from."""
    transferred: bool = False
    """The calibration was fitted on another deployment and used anyway (``allow_transfer``)."""
    host_assumed: bool = True
    """Some fixed per-pass time is still the model's assumption (not every host parameter calibrated)."""
    request_overhead_ms: float = 0.0
    """``default`` only: the frontend's time per request outside the passes that the model adds
    (``simmodel.perf.roofline.REQUEST_OVERHEAD_MS``, the role's ``timing.request_overhead_ms`` or its
    calibration's); the engine's when the role is the one requests reach first and
    ``engine.request_overhead_ms`` is not set (the default value only on a backend whose API server it was
    measured on: ``BackendRules.frontend_measured``)."""
    calibrated: tuple[str, ...] = ()
    """The parameters whose values come from the calibration file."""


@dataclass(frozen=True, slots=True)
class SpeculationSpec:
    """Speculative decoding: ``ngram`` drafts (``engine.speculation``) with conditional acceptance rates,
    or ``mtp`` heads (``engine.nextn``) accepting ``mean_accepted`` drafts per round on average."""

    kind: str
    num_speculative_tokens: int
    acceptance_rates: tuple[float, ...] = ()
    mean_accepted: float = 0.0
    seed: int = 0


@dataclass(frozen=True, slots=True)
class AfdSpec:
    """``engine.mode: afd``: the FFN companion of the attention workers (``engine.workers.ffn``) and the pipeline
    between them (``engine.afd``; ``simmodel.perf.afd``)."""

    ffn: Parallelism
    """The FFN workers' parallelism: ``replicas``, ``tensor``, ``pipeline``, ``moe_tensor``, ``moe_expert``."""
    ffn_deployment: Deployment
    """The FFN side of the model on the FFN workers' GPUs, as the performance model prices it."""
    micro_batches: int = 3
    link_bytes_per_s: float = 50e9
    link_latency_s: float = 10e-6
    dispatch_bytes: float = 2.0
    """Bytes per hidden value sent to the FFN: 2 (``dispatch_dtype: bf16``) or 1 (``fp8``)."""

    @property
    def ffn_gpus_per_worker(self) -> int:
        return self.ffn.tensor * self.ffn.pipeline


@dataclass(frozen=True, slots=True)
class EncoderSpec:
    """``engine.encoder``: EPD's encoder pool. Encoder workers of ``tensor`` GPUs run the vision tower on the
    requests' images, batching up to ``max_batch_images`` images of whole requests a forward, keep recent
    embeddings in a cache of ``cache_mib``, and send each request's embeddings over the link to the worker
    that prefills it (``simmodel.engine.encoder_pool``)."""

    replicas: int = 1
    tensor: int = 1
    encoder_parallel: str = "tp"
    max_batch_images: int = 8
    cache_mib: float = 100.0
    link_bytes_per_s: float = 50e9
    link_latency_s: float = 10e-6

    @property
    def gpu_count(self) -> int:
        return self.replicas * self.tensor


@dataclass(frozen=True, slots=True)
class KvTransferSpec:
    """``engine.kv_transfer``: how a prefill worker's KV reaches a decode worker.

    A transfer takes ``latency_ms`` plus the prompt's KV bytes over ``bandwidth_gb_per_second``
    (none when the bandwidth is omitted). ``shared_link`` queues the transfers out of one prefill
    worker, and into one decode worker, on one link each.
    """

    bandwidth_gb_per_second: float | None = None
    latency_ms: float = 0.0
    bytes_per_token: float | None = None
    """None: ``auto``, the prefill role's KV bytes per token per GPU."""
    timing_mode: str = "full_prompt"
    contention: str = "none"
    via: str = "link"
    """``link``: over the network between the pools (the fields above); ``storage``: through the prefill role's
    shared storage tier, written by the prefill rank and read by the decode rank (``transfer.routes``)."""


@dataclass(frozen=True, slots=True)
class FrontendSpec:
    """The frontend stages in visiting order (``simmodel.frontend.stages.StageSpec``); ``measured_for`` and
    ``source`` say what they were measured on and where they came from (``frontend``, or
    ``host_profile:<path>``); both are reported with the run."""

    stages: tuple[StageSpec, ...]
    measured_for: dict | None = None
    source: str = "frontend"


@dataclass(frozen=True, slots=True)
class HostProfileSpec:
    """``host_profile``: a host cost table and which of its rows to use; the row also depends on the
    traffic's images, so it is read once the traffic is known (the stages then land in ``frontend``)."""

    path: str
    frontend: str
    transport: str | None = None


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """``traffic.source.images``: every request carries ``count`` images of this shape."""

    height: int
    width: int
    count: int = 1
    encoding: str = "png"
    identity: str = "unique"
    """``unique`` (every image differs) or ``shared`` (every request sends the same images)."""


@dataclass(frozen=True, slots=True)
class VisionSpec:
    """``workers.<role>.vision``: the embedding cache and how the vision tower is laid out."""

    cache_mib: float = 100.0
    encoder_parallel: str = "tp"


@dataclass(frozen=True, slots=True)
class WorkerRole:
    """One pool of identical workers (``workers.aggregated``, ``.prefill`` or ``.decode``)."""

    parallelism: Parallelism
    scheduler: SchedulerSpec
    kv_cache: KvCacheSpec
    timing: TimingSpec
    context_length: int
    num_kv_blocks: int
    """Usable KV blocks per attention-DP rank, resolved from ``kv_cache.capacity``."""
    deployment: Deployment
    """Model, GPU, parallelism and dtypes as the performance model sees them."""
    name: str = "aggregated"
    host_loop: bool = False
    """SGLang: each pass is one iteration of the overlap scheduler loop."""
    frontend: FrontendSpec | None = None
    """SGLang: the request path ahead of the scheduler (from ``frontend``, or read from ``host_profile``)."""
    host_profile: HostProfileSpec | None = None
    vision: VisionSpec | None = None
    """SGLang: images encoded on this worker's GPUs."""
    startup_seconds: float = 0.0
    """How long a worker the replica planner adds takes before it serves (the initial workers serve at 0)."""
    afd: AfdSpec | None = None
    """``engine.mode: afd``: the attention role's FFN companion and pipeline (its ``deployment`` is the model's
    attention side, ``perf.afd.attention_side``)."""
    speculative_tokens: int = 0
    """Drafts a pass verifies per sequence (``engine.speculation`` or ``engine.nextn``; 0: none): vLLM keeps a state
    block per draft in each state group (``perf.kv_layout``)."""
    draft_tokens: int = 0
    """MTP/EAGLE drafts each pass's drafter proposes (``engine.nextn``), priced by the default timing
    (``perf.drafting``); 0: none (n-gram drafts cost no GPU time)."""

    @property
    def kv_tokens_per_rank(self) -> int:
        """The tokens an attention-DP rank's KV holds: its blocks (SGLang's pages) of ``kv_cache.block_size``; with
        vLLM's KV cache groups (``kv_layout``), its blocks over the groups, as vLLM reports the cache's size."""
        return self.kv_layout.capacity_tokens(self.num_kv_blocks, self.kv_cache.block_size)

    @property
    def kv_layout(self) -> KvLayout:
        """vLLM's KV cache groups for the model (``perf.kv_layout``): one group of every layer unless the model has
        sliding-window layers."""
        return kv_layout(self.deployment.model, self.kv_cache.hybrid is not False, self.speculative_tokens)


@dataclass(frozen=True, slots=True)
class Engine:
    mode: str
    model: str
    hardware: str
    backend: str
    context_length: int
    enable_chunked_prefill: bool
    seed: int
    workers: dict[str, WorkerRole]
    dtype: str = "auto"
    kv_transfer: KvTransferSpec | None = None
    """Disaggregated mode only."""
    speculation: SpeculationSpec | None = None
    request_overhead_ms: float = 0.0
    """Fixed time each request spends outside the engine's passes (the API server's HTTP handling and
    tokenization, the hand-over to the engine, and streaming the tokens back), as a delay between the client
    sending the request and the engine receiving it: ``engine.request_overhead_ms`` where set, else the
    timing's of the role requests reach first (``TimingSpec.request_overhead_ms``)."""
    encoder: EncoderSpec | None = None
    """``engine.encoder``: the images' encoder pool (EPD); None: images are encoded on the front worker."""

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(self.workers)

    @property
    def front_role(self) -> str:
        """The role requests arrive at: ``prefill`` disaggregated, ``attention`` under AFD, else ``aggregated``."""
        return {"disaggregated": "prefill", "afd": "attention"}.get(self.mode, "aggregated")


@dataclass(frozen=True, slots=True)
class LimitsSpec:
    """``limits``: hard safety bounds; exceeding one is an error, not a stop."""

    max_passes: int = 100_000_000
    max_requests: int = 10_000_000
    max_virtual_time_seconds: float = 100_000_000.0


DEFAULT_ATTAINMENT = 0.9
"""The fraction of completed requests that must meet every SLA bound when ``attainment`` is unset: the
bounds are then p90 targets, the percentile serving SLOs are usually stated at (a tail that one slow
request in ten may exceed; ``strict_sla`` or ``attainment: 1`` asks for every request)."""


@dataclass(frozen=True, slots=True)
class Sla:
    """``evaluation.sla``: the latency bounds a completed request must all meet to count as good
    (inclusive; None: unbounded), and the fraction of completed requests that must be good.

    The TPOT bound is checked on the request's own mean time per output token (``tpot_ms``), the decode
    step a user sees; a request with one output token has no TPOT and meets it."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    attainment: float = DEFAULT_ATTAINMENT

    @property
    def bounded(self) -> bool:
        """Whether any bound is set (an SLA without one counts every request good)."""
        return any(b is not None for b in (self.ttft_ms, self.tpot_ms, self.e2e_ms))


ROUTER_TYPES = ("round_robin", "random", "least_loaded", "kv_aware", "scored")
"""``router.type``: how a pool's router picks the worker (and attention-DP rank) of each request."""
SCORERS = ("prefix-cache", "queue-depth", "kv-utilization", "session-affinity")
"""``router.weights`` of a ``scored`` router: llm-d's scorers, by their names."""
DEFAULT_SCORER_WEIGHTS = (("prefix-cache", 3.0), ("queue-depth", 2.0), ("kv-utilization", 2.0))
"""llm-d's endpoint picker with no configuration file (``pkg/epp/config/loader/defaults.go``): prefix cache 3,
queue 2, KV-cache utilisation 2."""


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """``router`` (per pool): which router picks each request's worker, and its knobs (see
    ``docs/routing.md``; a knob a type does not read is refused when parsed)."""

    type: str = "round_robin"
    seed: int = 0
    """``random``, and ``kv_aware`` with ``temperature`` above 0: the seed of the router's own draws."""
    overlap_score_weight: float = 1.0
    """``kv_aware``: weight of the prefill blocks still to compute against the active blocks (Dynamo's)."""
    temperature: float = 0.0
    """``kv_aware``: 0 picks the lowest cost; above 0 samples a softmax over the costs."""
    event_lag_ms: float = 0.0
    """``kv_aware`` (precise) and ``scored`` with ``prefix-cache``: how late the workers' KV block events reach
    the router."""
    approximate: bool = False
    """``kv_aware``: the router reads no KV events and remembers what it routed where, for ``ttl_s``."""
    ttl_s: float = 120.0
    weights: tuple[tuple[str, float], ...] = ()
    """``scored``: (scorer, weight) pairs, weights above 0 only."""

    @property
    def reads_cache(self) -> bool:
        """Whether the router reads the workers' prefix caches (and so needs prefix caching on the pool)."""
        return self.type == "kv_aware" or any(name == "prefix-cache" for name, _ in self.weights)


PLANNER_MODES = ("load", "sla")
"""``planner.mode``: ``load`` (queue and KV use against thresholds) or ``sla`` (TTFT and ITL targets)."""


@dataclass(frozen=True, slots=True)
class PoolBounds:
    """``planner.pools.<role>``: the replica counts the planner keeps a pool within."""

    min_replicas: int
    max_replicas: int


@dataclass(frozen=True, slots=True)
class PlannerSpec:
    """``planner``: the replica planner that adds and removes workers during the run (``docs/planner.md``)."""

    mode: str
    pools: dict[str, PoolBounds]
    """Per scaled role; a role not named keeps its ``parallelism.replicas``."""
    adjustment_interval_s: float = 180.0
    metric_interval_s: float = 10.0
    """How often each pool's queue and KV use are sampled (their means over an interval decide), and drained
    workers found empty."""
    queue_scale_out: float = 5.0
    queue_scale_in: float = 0.2
    kv_scale_out: float = 0.9
    kv_scale_in: float = 0.5
    ttft_ms: float = 500.0
    itl_ms: float = 50.0
    """``sla``: the targets (Dynamo's SLA planner defaults)."""


@dataclass(frozen=True, slots=True)
class Scenario:
    traffic: Traffic
    engine: Engine
    path: Path | None = None
    limits: LimitsSpec = field(default_factory=LimitsSpec)
    sla: Sla | None = None
    """``evaluation.sla``: the run reports goodput and SLA attainment against it; None: not reported."""
    routers: dict[str, RouterSpec] = field(default_factory=dict)
    """``router``: per pool (role name), its router; a pool not named here is routed round robin."""
    planner: PlannerSpec | None = None
    """``planner``: adds and removes workers during the run; None: worker counts are fixed."""
    gpu_hour_price: float | None = None
    """``evaluation.gpu_hour_price``: what one GPU costs an hour, for ``cost_per_million_tokens``; None: not
    reported."""

    def router(self, role: str) -> RouterSpec:
        """The router of the pool of ``role``."""
        return self.routers.get(role) or RouterSpec()
