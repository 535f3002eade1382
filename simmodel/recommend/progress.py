"""The search's progress on stderr: candidates done of those planned, feasible so far, and the best
objective yet. On a terminal a tqdm bar; elsewhere (a CI log, a file) a heartbeat line every
``HEARTBEAT_S`` of wall time, so that a long search shows it is alive without filling the log."""

from __future__ import annotations

import sys
import time

from simmodel.recommend.spec import SearchSpec

HEARTBEAT_S = 10.0


class SearchProgress:
    """``tty``: the stream is a terminal (default: asked of it); ``clock``: wall time in seconds (injectable
    for tests)."""

    def __init__(self, spec: SearchSpec, total: int, stream=None, *, tty: bool | None = None,
                 clock=time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.metric, self.higher = spec.objectives[0]
        self.total, self.done, self.feasible = total, 0, 0
        self.best: float | None = None
        self.clock = clock
        self._shown = clock()
        self.bar = None
        if self.tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="candidate", file=self.stream, leave=False, dynamic_ncols=True)

    def __call__(self, entry: dict) -> None:
        self.done += 1
        if entry["status"] == "feasible":
            self.feasible += 1
            value = entry["objectives"][self.metric]
            if self.best is None or (value > self.best if self.higher else value < self.best):
                self.best = value
        best = "-" if self.best is None else f"{self.best:.4g}"
        status = f"{self.feasible} feasible, best {self.metric} {best}"
        if self.bar is not None:
            self.bar.set_postfix_str(status, refresh=False)
            self.bar.update(1)
            return
        now = self.clock()
        if now - self._shown >= HEARTBEAT_S:
            self.stream.write(f"simmodel: {self.done:,}/{self.total:,} candidates done, {status}\n")
            self.stream.flush()
            self._shown = now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
