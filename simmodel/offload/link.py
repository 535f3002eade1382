"""One direction of a rank's host link: KV blocks between GPU and host memory, one copy after another.

Each GPU of a tensor-parallel group copies its own shard of a block over its own PCIe link, all at once, so
a rank's copy takes its per-GPU bytes over one link's bandwidth. A rank has one queue each way (loads, stores:
vLLM copies each way on a stream of its own, and PCIe is full duplex), first come, first served; each copy
costs a fixed latency before its bytes move.
"""

from __future__ import annotations

from simmodel.engine.clock import NS_PER_S


class HostLink:
    """One rank's queue of transfers over its host link."""

    def __init__(self, bytes_per_s: float, latency_ns: int) -> None:
        self.bytes_per_s, self.latency_ns = bytes_per_s, latency_ns
        self.free_at = 0
        """When the last queued transfer ends."""
        self.busy_ns = 0
        self._ends: list[int] = []
        self._durations: list[int] = []

    def duration_ns(self, num_bytes: float) -> int:
        return self.latency_ns + int(round(num_bytes / self.bytes_per_s * NS_PER_S))

    def transfer(self, now: int, num_bytes: float) -> tuple[int, int]:
        """Queue a transfer at ``now``; returns when it starts and ends."""
        start = max(now, self.free_at)
        duration = self.duration_ns(num_bytes)
        self.free_at = start + duration
        self.busy_ns += duration
        self._ends.append(self.free_at)
        self._durations.append(duration)
        return start, self.free_at

    def cut(self, at: int) -> None:
        """The device behind the link leaves at ``at``: a transfer under way stops there, those queued after it never
        run (their time leaves the link's busy time)."""
        ends, durations = self._ends, self._durations
        under_way = None
        while ends and ends[-1] > at:
            end, duration = ends.pop(), durations.pop()
            ran = max(at - (end - duration), 0)
            self.busy_ns -= duration - ran
            under_way = ran or None
        if under_way:
            ends.append(at)
            durations.append(under_way)
        self.free_at = min(self.free_at, at)

    def busy_until(self, t: int) -> int:
        """Nanoseconds the link was busy before ``t`` (transfers queued by then may end after it)."""
        busy = self.busy_ns
        ends, durations = self._ends, self._durations
        for k in range(len(ends) - 1, -1, -1):  # (the transfers end in order: only the last ones pass t)
            end = ends[k]
            if end <= t:
                break
            busy -= min(durations[k], end - t)
        return busy
