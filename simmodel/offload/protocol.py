"""What a rank, its worker, the pass planner and the fleet ask of a host KV tier (``OFFLOADS``' entries build one).

Two implement it: vLLM's offloading connector (``vllm_connector.VllmCpuOffload``: loads between passes, requests
wait for them) and SGLang's HiCache (``sglang_hicache.SglangHiCache``: loads inside the pass that admits them,
copies that lock the radix tree until acknowledged). Each backend's scheduler talks to its own tier directly;
this is the part the engine around the scheduler shares.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from simmodel.engine.recorder import Recorder
    from simmodel.engine.request import Request
    from simmodel.engine.scheduler.base import SchedulerOutput
    from simmodel.offload.storage import StorageTier


class PassBytes:
    """Bytes a rank's tier moved over its host link per pass (the pass table's ``host_bytes_loaded`` and
    ``host_bytes_stored``): only passes that moved any, by the rank's pass index."""

    __slots__ = ("by_pass",)

    def __init__(self) -> None:
        self.by_pass: dict[int, list[float]] = {}

    def add(self, pass_index: int, loaded: float, stored: float) -> None:
        """Count a copy of a pass (``pass_index`` −1: a plan that ran no pass, not counted)."""
        if pass_index >= 0:
            entry = self.by_pass.get(pass_index)
            if entry is None:
                self.by_pass[pass_index] = [loaded, stored]
            else:
                entry[0] += loaded
                entry[1] += stored


class Offload(Protocol):
    on_loaded: Callable | None
    """The rank taking a request whose load landed (vLLM; unused by SGLang, whose loads run inside passes)."""
    on_wake: Callable[[], None] | None
    """The rank planning again (a request waits for a copy to land)."""
    recorder: Recorder | None
    where: tuple[int, int, str]
    """The rank's worker, attention-DP rank and role, for its events."""
    plan_at: int | None
    """The instant of the plan being made when it is not now (``Rank.plan``'s ``at``)."""
    retrying: bool | set
    """Truthy while a request's offer to the tier must be made again at every pass (its passes are then planned
    one by one: ``planner.drive``)."""
    num_hit_tokens: int
    """Prompt tokens loaded from the host at first admission."""
    num_storage_hit_tokens: int
    """Of those, the ones read from a storage tier into the host first (0 without one)."""
    storage: StorageTier | None
    """A storage tier behind the host (vLLM's ``TieringOffloadingSpec``), or None."""
    block_bytes: float
    pass_bytes: PassBytes

    @property
    def waking(self) -> bool:
        """Whether the tier will wake the rank to plan (``Rank.expects_work``)."""

    def next_event_ns(self, waiting: bool = False, at: int = 0) -> float:
        """The next instant the tier acts on its rank by itself; no run of passes reaches past it. ``waiting``:
        requests wait on the rank at ``at``, so that what the tier gains from then on may change their next
        lookup."""

    def planned(self, plan: SchedulerOutput, at: int) -> None:
        """A pass was planned at ``at`` (``Rank.plan``)."""

    def pass_ended(self, plan: SchedulerOutput, end: int, pass_index: int) -> None:
        """A pass whose plan loads or stores ended (``Rank.finish_pass``)."""

    def finished(self, request: Request, at: int) -> None:
        """A request finished at ``at`` (``Rank.record_pass_end``, or a run's recording)."""

    def flush(self, at: int, pass_index: int) -> None:
        """A pass's outputs were processed at ``at``: copies its processing made start (``Rank.record_pass_end``)."""

    def planned_in_run(self) -> None:
        """A run of passes planned some of its passes itself (``planner.recording.Recording._tell_offloads``)."""

    def carried_by_run(self, plan: SchedulerOutput) -> bool:
        """Whether a run of passes may start with the pass of ``plan``, which copies to or from the tier, queueing
        its copies as that pass ends (``planner.drive``; else the pass runs on its own)."""

    def fenced_blocks(self, now: int) -> set[int]:
        """Free GPU blocks a copy to the tier still reads after ``now``: a pass that takes one waits for it
        (vLLM's flush); a run of passes ends before one (``planner.run.Run._flush_check``)."""

    def storage_mark(self, now: int) -> tuple:
        """What a lookup at ``now`` would find of the storage tier's writes (applying those ended by then): equal
        marks at two instants mean no write has ended between them that a waiting request's lookup could see
        (``planner.run.Run.holds_waiting``); () without storage."""

    def pass_ns(self, plan: SchedulerOutput, start: int, busy_ns: int, pass_index: int) -> int:
        """How long a pass whose plan loads inside it (``host_loaded``) or waits for copies (``host_synced_pages``,
        ``host_flush``) lasts (``Worker._start``)."""

    def settle(self) -> None:
        """The rank is idle: copies landed by now are acknowledged (``scaling.Fleet.retire_drained``)."""

    def cold_start(self) -> None:
        """The worker left: a restarted engine has an empty tier (``scaling.Fleet.retire_drained``)."""

    def figures(self, end_ns: int) -> dict:
        """What the tier held and moved (``offload_summary``)."""
