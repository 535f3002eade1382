"""How many of a P/D decode worker's passes could be applied at once, between the instants it is touched.

A decode worker's rows could be applied in bulk (one SimPy event for several passes) only up to the next
instant something reaches it from outside: a prefill finished and placed on it, a transfer started, a
transfer's KV arrived. This runs a disaggregated scenario and, for each decode worker, walks its passes
from the first: a bulk starts at a pass's start and takes every following pass that ends by the bound,
the first instant after that start of

- ``every touch``: the worker's own handoff milestones (prefill done, transfer start, transfer end of the
  requests it decoded), as if each were known ahead: the most any bulk application could hold;
- ``knowable``: any prefill worker's next pass end, or the next transfer end onto this worker (what the
  simulation knows at the pass's start);
- ``knowable and arrivals``: those and the next arrival at the prefill pool.

It prints passes per bulk for each (docs/speed.md, "What is left").

    python3 benchmarks/pd_touches.py SCENARIO.yaml
"""

from __future__ import annotations

import sys

import numpy as np

from simmodel.config.load import load_scenario
from simmodel.sim import Simulation


def passes_per_bulk(starts: np.ndarray, ends: np.ndarray, bounds: np.ndarray) -> float:
    """The mean number of passes (sorted by start) per bulk, each bulk ending at the first bound after its
    first pass's start (a pass that ends past it starts the next bulk; every bulk holds one pass at least)."""
    bulks, i, n = 0, 0, len(starts)
    while i < n:
        k = np.searchsorted(bounds, starts[i], side="right")
        bound = bounds[k] if k < len(bounds) else np.inf
        j = i + 1
        while j < n and ends[j] <= bound:
            j += 1
        bulks, i = bulks + 1, j
    return n / bulks


def main(path: str) -> None:
    results = Simulation(load_scenario(path)).run()
    passes, requests = results.passes, results.requests
    prefill_ends = passes.loc[passes.role == "prefill", "end_s"].to_numpy()
    arrivals = requests.arrival_s.to_numpy()
    for worker, rows in passes[passes.role == "decode"].groupby("worker"):
        rows = rows.sort_values("start_s")
        own = requests[requests.worker == worker]
        touches = np.concatenate([own.prefill_done_s, own.transfer_start_s, own.transfer_end_s])
        knowable = np.concatenate([prefill_ends, own.transfer_end_s])
        starts, ends = rows.start_s.to_numpy(), rows.end_s.to_numpy()
        for name, bounds in (("every touch", touches), ("knowable", knowable),
                             ("knowable and arrivals", np.concatenate([knowable, arrivals]))):
            print(f"decode worker {worker}: {len(rows)} passes, {name}: "
                  f"{passes_per_bulk(starts, ends, np.sort(bounds)):.2f} passes per bulk")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 benchmarks/pd_touches.py SCENARIO.yaml")
    main(sys.argv[1])
