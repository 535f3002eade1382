"""The search's progress bar on a terminal: candidates done of those planned, feasible so far, and the
best objective yet (tqdm, on stderr; nothing at all when stderr is not a terminal)."""

from __future__ import annotations

import sys

from simmodel.recommend.spec import SearchSpec


class SearchProgress:
    def __init__(self, spec: SearchSpec, total: int, stream=None) -> None:
        from tqdm import tqdm

        self.metric, self.higher = spec.objectives[0]
        self.feasible = 0
        self.best: float | None = None
        self.bar = tqdm(total=total, unit="candidate", file=stream or sys.stderr, leave=False, dynamic_ncols=True)

    def __call__(self, entry: dict) -> None:
        if entry["status"] == "feasible":
            self.feasible += 1
            value = entry["objectives"][self.metric]
            if self.best is None or (value > self.best if self.higher else value < self.best):
                self.best = value
        best = "-" if self.best is None else f"{self.best:.4g}"
        self.bar.set_postfix_str(f"{self.feasible} feasible, best {self.metric} {best}", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
