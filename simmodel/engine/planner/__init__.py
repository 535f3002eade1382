"""The pass planner: a worker's passes planned as one run, in closed form (vLLM's below, for every
attention-DP rank, which also plans TensorRT-LLM's, whose passes between starts are vLLM's synchronous ones;
SGLang's runs of decode passes in ``sglang_run``; ``PLANNERS`` picks one by scheduler).

In steady serving every pass is a decode of the same running requests (``running`` reads them as
arrays), and an admission only adds a column to that picture: the prompt's prefill in the pass that admits
it, then one decode a pass. A run holds the candidate passes (rows) of the running requests (columns), the
per-rank totals the timing model prices them from (one call for the whole run), and the KV operations
(allocations, prefix-cache insertions, finishes) queued in the order vLLM makes them.

Two ways to drive a run (``docs/speed.md``):

- ahead (``carry``): a worker that only its own arrivals reach (``Worker.arrivals``: an open-loop load
  placed by a router that reads no state) applies the run when it starts and yields to its end. A run does
  not stop at an arrival: the request is created as at its arrival time (``WorkerArrivals.arrive_early``:
  creating it schedules nothing), each rank's scheduler admits with its
  own admission (``admit_waiting``: vLLM's, or TensorRT-LLM's capacity policy) when the pass after the arrival is planned — on the pool
  and queue as they are then — and the run prices the passes from there on again with the new columns.
  When an admission is not whole prompts admitted alone (a chunk, a resumption), that pass, planned by the
  schedulers, is handed to the worker to run on its own (see ``Worker._carry``; async, where the plan that
  sees an arrival is made at the first pass end after it, two passes ahead, the run ends at that pass end
  and hands the plan to the worker's loop).
- as the passes end (``plan_ticked``, driven by ``Worker._tick``): any other worker applies each row when
  its pass ends, at the SimPy event the pass-by-pass loop would make, and ends the run when something was
  placed on it meanwhile.

Modules: ``running`` (the running requests as arrays: whether a run may start), ``run`` (a run: its rows,
columns, totals and pricing, its KV operations, its end), ``admissions`` (a row's plan admitting requests),
``recording`` (rows recorded as the pass-by-pass loop records passes), ``async_run`` (async scheduling),
``drive`` (how far a run may go, and the loops that drive it).

A run also ends before a pass short of KV blocks (vLLM would preempt), a finish that calls back into the
simulation, the safety limits, and when every request has finished. Passes, events, inter-token
intervals, block ids and every request's fields are those of the pass-by-pass run;
``tests/scenarios/test_decode_runs.py`` checks it, byte for byte.
"""

from simmodel.engine.planner.drive import carry, plan_ticked
from simmodel.engine.planner.sglang_run import plan_decode_run

PLANNERS = {"vllm": (carry, plan_ticked), "sglang": (None, plan_decode_run)}
"""Per scheduler (its ``planner``): how a run is planned ahead, through a worker's own arrivals (None: never),
and how one applied as its passes end is planned. SGLang's runs are its decode passes (``sglang_run``)."""

__all__ = ["PLANNERS", "carry", "plan_ticked"]
