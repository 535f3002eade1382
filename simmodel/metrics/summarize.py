"""Tables and statistics of a run, built once from the recorded rows.

Definitions follow the reference: TTFT and E2E start at arrival; queue time ends at the start of the
first pass that schedules the request; TTST is the gap from the first to the second token; TPOT is a
request's (last − first token) / (outputs − 1); ITL pools every gap between successive tokens of
every request; percentiles interpolate linearly; ``std`` is the population standard deviation.
Output throughput divides all emitted tokens by the time from the first arrival to the last token.
"""

from __future__ import annotations

import itertools
import math
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from simmodel.engine.clock import NS_PER_S
from simmodel.engine.request import Request, RequestStatus
from simmodel.metrics.records import Event, EventKind, PassLog, PassRecord, Recorder

if TYPE_CHECKING:
    import pandas as pd

PERCENTILES = (50, 75, 90, 95, 99, 99.9)
"""The percentiles of every latency statistic, keyed ``p50`` … ``p99.9``."""
LATENCY_METRICS = ("ttft_ms", "ttst_ms", "tpot_ms", "itl_ms", "e2e_latency_ms", "queue_ms")


def weighted_stats(values: np.ndarray, counts: np.ndarray) -> dict[str, float | None]:
    """Statistics of the multiset where ``values[i]`` occurs ``counts[i]`` times.

    Equal to computing them on the expanded array (numpy's linear percentile), without expanding it.
    """
    keys = ["mean", "min", "max", *(f"p{q:g}" for q in PERCENTILES), "std"]
    counts = counts.astype(np.int64)
    keep = counts > 0
    values, counts = values[keep].astype(np.float64), counts[keep]
    n = int(counts.sum())
    if n == 0:
        return dict.fromkeys(keys)
    # By value, then count: the sums below then add the same terms in the same order however the values
    # were recorded (workers planning ahead each on its own record their intervals in no common order).
    order = np.lexsort((counts, values))
    values, counts = values[order], counts[order]
    ends = np.cumsum(counts)  # expanded index i has value values[searchsorted(ends, i, 'right')]
    mean = float(np.dot(values, counts) / n)
    out: dict[str, float | None] = {"mean": mean, "min": float(values[0]), "max": float(values[-1])}
    for q in PERCENTILES:
        pos = q / 100 * (n - 1)
        lo = int(np.floor(pos))
        hi = min(lo + 1, n - 1)
        v_lo = values[np.searchsorted(ends, lo, side="right")]
        v_hi = values[np.searchsorted(ends, hi, side="right")]
        out[f"p{q:g}"] = float(v_lo + (v_hi - v_lo) * (pos - lo))
    out["std"] = float(np.sqrt(np.dot((values - mean) ** 2, counts) / n))
    return out


def stats(values: np.ndarray) -> dict[str, float | None]:
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    return weighted_stats(values, np.ones(len(values), dtype=np.int64))


DISAGG_COLUMNS = (
    "prefill_worker", "prefill_dp_rank", "prefill_done_s", "transfer_start_s", "transfer_end_s", "decode_admit_s",
    "source_released_s",
)

REQUEST_COLUMNS = (
    "request_id", "status", "arrival_s", "first_admit_s", "first_token_s", "last_token_s", "finish_s", "input_tokens",
    "output_tokens", "requested_output_tokens", "ttft_ms", "ttst_ms", "tpot_ms", "e2e_ms", "queue_ms",
    "preemptions", "cached_tokens", "worker", "dp_rank",
)


def _status(request: Request) -> str:
    if request.status is RequestStatus.FINISHED:
        return "completed"
    if request.status is RequestStatus.REJECTED:
        return "rejected"
    return "incomplete"


class RequestTable:
    """One row per request (``REQUEST_COLUMNS``, then any added columns), as the run left them.

    The summary reads its columns as numpy arrays; ``frame`` makes the pandas table. pandas is imported
    only there, so a run that writes no tables (``simmodel run`` without ``--output-dir``, a search's
    candidates) never loads it.
    """

    _INTS = frozenset(("request_id", "input_tokens", "output_tokens", "requested_output_tokens", "preemptions",
                       "cached_tokens"))

    def __init__(self, rows: list[tuple]) -> None:
        self.rows = rows
        self.added: dict[str, list] = {}
        """Columns after ``REQUEST_COLUMNS``, in order (as the frame shows them)."""
        self._columns: dict[str, np.ndarray] = {}

    def add(self, name: str, values: list) -> None:
        self.added[name] = values
        self._columns.pop(name, None)

    def column(self, name: str) -> np.ndarray:
        """One column: int64 for counts, float64 (NaN where unknown) for times, objects otherwise."""
        column = self._columns.get(name)
        if column is None:
            if name in self.added:
                values = self.added[name]
            else:
                i = REQUEST_COLUMNS.index(name)
                values = [row[i] for row in self.rows]
            dtype = np.int64 if name in self._INTS or name == "stage" else (
                np.float64 if name.endswith(("_s", "_ms")) else object)
            column = self._columns[name] = np.array(values, dtype=dtype)
        return column

    def plain_columns(self) -> dict[str, np.ndarray | list] | None:
        """The table as columns of the types pandas gives them, in the frame's order, without pandas (the CSV
        writer's input): float64 arrays for columns of floats, int64 arrays for ints, lists of strings; None
        when a column holds anything else (ints with gaps, which pandas makes floats; mixed types), and the
        caller then writes the ``frame`` instead."""
        columns: dict[str, np.ndarray | list] = {}
        for i, name in enumerate(REQUEST_COLUMNS):
            columns[name] = [row[i] for row in self.rows]
        columns.update(self.added)
        for name, values in columns.items():
            plain = _plain_column(values)
            if plain is None:
                return None
            columns[name] = plain
        return columns

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        frame = pd.DataFrame.from_records(self.rows, columns=list(REQUEST_COLUMNS))
        for name, values in self.added.items():
            frame[name] = values
        return frame


def _plain_column(values: list) -> np.ndarray | list | None:
    """``values`` as pandas would type them, when that is plain: all floats (NaN included) a float64 array, all
    ints an int64 array, all strings the list itself; None otherwise."""
    kinds = set(map(type, values))
    if kinds <= {float}:
        return np.array(values, dtype=np.float64)
    if kinds == {int}:
        return np.array(values, dtype=np.int64)
    if kinds == {str}:
        return values
    return None


def request_table(requests: list[Request], disaggregated: bool = False) -> RequestTable:
    """One row per request, times in seconds (``*_s``) and latencies in milliseconds (``*_ms``).

    Disaggregated runs add the handoff milestones and the prefill worker and rank (``worker`` and
    ``dp_rank`` are then the decode side's)."""
    nan = float("nan")

    def t(x: int | None) -> float:
        return nan if x is None else x / NS_PER_S

    rows = []
    for r in requests:
        first, last, n = t(r.first_token_at), t(r.last_token_at), r.num_output_tokens
        done = r.status is RequestStatus.FINISHED
        rows.append((
            r.request_id, _status(r), t(r.arrived_at), t(r.first_admitted_at), first, last,
            t(r.finished_at) if r.status.is_finished else nan, r.num_prompt_tokens, n, r.max_tokens,
            (first - t(r.arrived_at)) * 1e3, (t(r.second_token_at) - first) * 1e3,
            (last - first) / (n - 1) * 1e3 if done and n > 1 else nan,
            (t(r.finished_at) - t(r.arrived_at)) * 1e3 if done else nan,
            (t(r.first_admitted_at) - t(r.arrived_at)) * 1e3,
            r.num_preemptions, r.num_cached_tokens, r.worker, r.dp_rank,
        ))
    table = RequestTable(rows)
    if disaggregated:
        table.add("prefill_worker", [r.prefill_worker for r in requests])
        table.add("prefill_dp_rank", [r.prefill_dp_rank for r in requests])
        for column, attr in (("prefill_done_s", "prefill_done_at"), ("transfer_start_s", "transfer_start_at"),
                             ("transfer_end_s", "transfer_end_at"), ("decode_admit_s", "decode_admitted_at"),
                             ("source_released_s", "source_released_at")):
            table.add(column, [t(getattr(r, attr)) for r in requests])
    return table


def pass_columns(passes: PassLog, rows: int | None = None) -> dict[str, object]:
    """The pass rows' columns, all or the first ``rows`` (rows are only ever added after them)."""
    rows = len(passes) if rows is None else rows
    data: dict[str, object] = {"role": passes.role[:rows]}
    for name in PassLog.INT_FIELDS:
        data[name] = passes.column(name)[:rows]
    data["provenance"] = passes.provenance[:rows]
    return data


def passes_table(data: dict[str, object]) -> dict[str, object]:
    """The columns of the pass table, in its order, from the pass rows' columns (``pass_columns``, plus any
    added ones): times in seconds, the rank's own forward time and its work at datasheet peaks in ms, added
    columns (``energy_j``, a staged load's ``stage``) last. The frame and the CSV file are both made from this."""
    names = [name for name in PassRecord._fields if name not in ("start_ns", "end_ns", "rank_busy_ns", "rank_work_ns")]
    table: dict[str, object] = {name: data[name] for name in names[:3]}  # role, worker, dp_rank
    table["start_s"] = np.asarray(data["start_ns"]) / NS_PER_S
    table["end_s"] = np.asarray(data["end_ns"]) / NS_PER_S
    table.update((name, data[name]) for name in names[3:])
    table["rank_busy_ms"] = np.asarray(data["rank_busy_ns"]) / 1e6
    table["rank_work_ms"] = np.asarray(data["rank_work_ns"]) / 1e6
    for name in data:
        if name not in PassRecord._fields:
            table[name] = data[name]
    return table


def passes_frame(passes: PassLog | dict[str, object]) -> pd.DataFrame:
    """One row per pass and rank; times in seconds, the rank's own forward time in ms (from a ``PassLog``
    or its ``pass_columns``)."""
    import pandas as pd

    data = pass_columns(passes) if isinstance(passes, PassLog) else passes
    return pd.DataFrame(passes_table(data))


EVENT_KINDS = tuple(k.name.lower() for k in EventKind)
"""The ``kind`` column's categories, in code order."""


def recorded_columns(events: list[Event]) -> dict[str, np.ndarray]:
    """Event rows as columns, in recording order: the ``Event`` fields, ``kind`` as int8 codes of
    ``EVENT_KINDS``, ``role`` an object array of strings, the others int64."""
    n = len(events)
    columns = {}
    for i, name in enumerate(Event._fields):
        if name == "role":
            columns[name] = np.array([e[i] for e in events], dtype=object)
        else:
            columns[name] = np.fromiter(map(itemgetter(i), events), dtype=np.int8 if name == "kind" else np.int64,
                                        count=n)
    return columns


def event_order(recorded: dict[str, np.ndarray], by_worker: bool = False) -> np.ndarray:
    """The order of the event log: the permutation of the recorded rows (``recorded_columns``) that sorts
    them by time, rows of equal time in recording order (a stable sort). Async engines record a pass's begin
    when they commit it, so recording order is not time order. The in-memory table and the streamed file
    both order by this; the stream relies on time coming first (it writes every row before its watermark).

    With ``by_worker``, at one instant the clients' rows (worker −1) come first, in request order, then each
    worker's in worker order, each in recording order: workers that plan their passes ahead of the clock,
    each on its own (``Worker.arrivals``), make their arrivals and record their rows in no common order, but
    each worker's own order is that of the pass-by-pass run."""
    time = recorded["time_ns"]
    if not by_worker:
        return np.argsort(time, kind="stable")
    worker = recorded["worker"]
    client = np.where(worker == -1, recorded["request_id"], -1)
    return np.lexsort((client, worker, time))  # stable: equal keys keep recording order


def event_table(recorded: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    """The event table's columns of the recorded rows ``rows``, in that order: ``time_s`` in place of
    ``time_ns``, then the other fields as they were recorded. Each recorded column is taken out of
    ``recorded`` as its rows are copied (millions of events: one column more at a time, not a second log)."""
    table = {"time_s": recorded.pop("time_ns")[rows] / NS_PER_S}
    for name in Event._fields[1:]:
        table[name] = recorded.pop(name)[rows]
    return table


def event_columns(events: list[Event], upto_ns: int | None = None, by_worker: bool = False) -> dict[str, np.ndarray]:
    """The event log as the table's columns (``event_table``) in ``event_order``; ``upto_ns``: only the rows
    stamped at or before it."""
    recorded = recorded_columns(events)
    rows = event_order(recorded, by_worker)
    if upto_ns is not None:
        rows = rows[recorded["time_ns"][rows] <= upto_ns]
    return event_table(recorded, rows)


def events_frame(events: list[Event], upto_ns: int | None = None, by_worker: bool = False) -> pd.DataFrame:
    """The event log as a table ordered by time (``event_order``); ``upto_ns``: only the rows stamped at or
    before it."""
    import pandas as pd

    data: dict[str, object] = dict(event_columns(events, upto_ns, by_worker))
    data["kind"] = pd.Categorical.from_codes(data["kind"].astype(np.int64), categories=list(EVENT_KINDS))
    if len(data["role"]):  # strings typed as pandas types a list of them (an empty list would be floats)
        data["role"] = data["role"].tolist()
    return pd.DataFrame(data)


def role_summary(gpu_count: int, gpus_per_worker: int, num_workers: int, end_s: float, num_passes: int,
                 num_kv_blocks_per_rank: int, kv_capacity_tokens_per_rank: int,
                 worker_seconds: float | None = None) -> dict:
    """One role's GPUs and work: GPU-hours are its workers' seconds (the whole run each, or ``worker_seconds``:
    a scaled pool's workers' summed lifetimes) × GPUs per worker. The KV capacity in tokens is the one the
    engine reports (``WorkerRole.kv_tokens_per_rank``)."""
    seconds = num_workers * end_s if worker_seconds is None else worker_seconds
    return {
        "gpu_count": int(gpu_count),
        "gpu_hours": seconds * gpus_per_worker / 3600.0,
        "num_passes": int(num_passes),
        "kv_blocks_per_rank": int(num_kv_blocks_per_rank),
        "kv_capacity_tokens_per_rank": int(kv_capacity_tokens_per_rank),
    }


def companion_summary(gpu_count: int, gpus_per_worker: int, num_workers: int, end_s: float) -> dict:
    """A pool that runs no passes of its own (an AFD FFN companion, an encoder pool): its GPUs and GPU-hours (the
    whole run each), no passes, no KV."""
    summary = role_summary(gpu_count, gpus_per_worker, num_workers, end_s, 0, 0, 0)
    summary.update(kv_blocks_per_rank=None, kv_capacity_tokens_per_rank=None, kv_cache_usage_peak=None,
                   kv_cache_usage_mean=None)
    return summary


def worker_pass_tokens(data: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per worker pass (over its ranks' rows of ``pass_columns``): its tokens and its duration in seconds."""
    worker, index = np.asarray(data["worker"], np.int64), np.asarray(data["pass_index"], np.int64)
    if not len(worker):
        return np.zeros(0), np.zeros(0)
    keys, first, group = np.unique((worker << 32) | index, return_index=True, return_inverse=True)
    tokens = np.bincount(group, weights=np.asarray(data["num_scheduled_tokens"], np.float64), minlength=len(keys))
    duration = (np.asarray(data["end_ns"])[first] - np.asarray(data["start_ns"])[first]) / NS_PER_S
    return tokens, duration


def request_figures(requests: RequestTable | dict[str, np.ndarray], itl_values: np.ndarray,
                    itl_counts: np.ndarray) -> dict:
    """What the requests of a run (or of one stage of it) measured: counts, tokens, duration from the
    first arrival to the last token, throughputs, preemptions and the latency statistics (ITL from the
    inter-token intervals, in ns, and how many tokens saw each). ``requests``: the run's table, or a
    mapping of its columns (``_rows_of``)."""
    column = requests.column if isinstance(requests, RequestTable) else requests.__getitem__
    status = column("status")
    done = status == "completed"
    output_tokens = column("output_tokens")
    total_out = int(output_tokens.sum())
    last_token = _nanmax(column("last_token_s"))
    duration = float(last_token - np.nanmin(column("arrival_s"))) if np.isfinite(last_token) else 0.0
    num_done = int(done.sum())
    tpot = column("tpot_ms")[done]
    per_user = 1000.0 / tpot[np.isfinite(tpot) & (tpot > 0)]
    return {
        "num_requests": int(len(status)),
        "completed_requests": num_done,
        "incomplete_requests": int((status == "incomplete").sum()),
        "rejected_requests": int((status == "rejected").sum()),
        "total_input_tokens": int(column("input_tokens")[status != "rejected"].sum()),
        "total_output_tokens": total_out,
        "duration_s": duration,
        "request_throughput_rps": num_done / duration if duration > 0 else None,
        "output_throughput_tok_s": total_out / duration if duration > 0 else None,
        "mean_output_token_throughput_per_user": float(per_user.mean()) if len(per_user) else None,
        "num_preemptions": int(column("preemptions").sum()),
        "ttft_ms": stats(column("ttft_ms")),
        "ttst_ms": stats(column("ttst_ms")),
        "tpot_ms": stats(tpot),
        "itl_ms": weighted_stats(itl_values.astype(np.float64) / 1e6, itl_counts),
        "e2e_latency_ms": stats(column("e2e_ms")[done]),
        "queue_ms": stats(column("queue_ms")),
    }


def _nanmax(values: np.ndarray) -> float:
    """The largest value that is not NaN; NaN if there is none (as pandas' ``max``)."""
    known = values[~np.isnan(values)]
    return float(known.max()) if known.size else float("nan")


_FIGURE_COLUMNS = ("status", "output_tokens", "last_token_s", "arrival_s", "tpot_ms", "input_tokens", "preemptions",
                   "ttft_ms", "ttst_ms", "e2e_ms", "queue_ms")


def _rows_of(table: RequestTable, mask: np.ndarray) -> dict[str, np.ndarray]:
    """The columns ``request_figures`` reads, of the rows where ``mask`` holds."""
    return {name: table.column(name)[mask] for name in _FIGURE_COLUMNS}


def kv_usage(passes: PassLog, roles: dict[str, dict]) -> dict[str, dict[str, float | None]]:
    """Each role's KV cache usage, the fraction of a rank's KV blocks in use (``kv_blocks_used`` of the
    pass rows over the role's ``kv_blocks_per_rank``, as vLLM's ``kv_cache_usage_perc``): its peak over the
    rank passes, and its mean over the time the ranks ran passes (each rank pass weighted by its duration;
    idle time between passes is not counted). None where a role ran no pass."""
    names = list(roles)
    peak = [-1] * len(names)
    held: list[list[np.ndarray]] = [[] for _ in names]
    """Per role, each block's blocks-in-use × pass duration (ns), summed at the end exactly (``math.fsum``),
    so that the mean does not depend on how the log happens to be split into blocks."""
    busy_ns = [0] * len(names)
    for first, (used, start, end) in passes.chunks(("kv_blocks_used", "start_ns", "end_ns")):
        of_role = np.zeros(len(used), dtype=np.int64) if len(names) == 1 else \
            np.array([names.index(r) for r in passes.role[first:first + len(used)]], dtype=np.int64)
        for k in range(len(names)):
            mine = of_role == k
            if mine.any():
                busy = end[mine] - start[mine]
                peak[k] = max(peak[k], int(used[mine].max()))
                held[k].append(used[mine].astype(np.float64) * busy.astype(np.float64))
                busy_ns[k] += int(busy.sum())
    out = {}
    for k, name in enumerate(names):
        blocks = max(roles[name]["kv_blocks_per_rank"], 1)
        out[name] = {"kv_cache_usage_peak": peak[k] / blocks if peak[k] >= 0 else None,
                     "kv_cache_usage_mean": math.fsum(itertools.chain.from_iterable(held[k])) / blocks / busy_ns[k]
                     if busy_ns[k] > 0 else None}
    return out


def waiting_requests(arrival_s: np.ndarray, first_admit_s: np.ndarray, status: np.ndarray,
                     end_s: float) -> dict[str, float | None]:
    """The scheduler's waiting queue (vLLM's ``num_requests_waiting``): requests that arrived and were not
    yet admitted for the first time (a preempted request waiting to resume is not counted; rejected ones
    never wait). Its peak, and its time average over the run, from the first arrival to ``end_s`` (the
    sum of every request's wait, to ``end_s`` for one never admitted, over that window: Little's law)."""
    waits = status != "rejected"
    # (fmin: NaN, never admitted; a request that reaches the deployment after the end never waits in it)
    arrived, admitted = np.minimum(arrival_s[waits], end_s), np.fmin(first_admit_s[waits], end_s)
    if not arrived.size:
        return {"num_requests_waiting_peak": 0, "num_requests_waiting_mean": None}
    # The queue just after each instant something happens: arrivals and admissions at that instant both
    # counted, so a request admitted the moment it arrives never waits. (An instant listed twice gives the
    # same depth twice: no need to make them unique, which would also import ``numpy.ma``.)
    instants = np.concatenate((arrived, admitted))
    depth = np.searchsorted(np.sort(arrived), instants, side="right") \
        - np.searchsorted(np.sort(admitted), instants, side="right")
    window = end_s - float(arrived.min())
    return {"num_requests_waiting_peak": int(depth.max()),
            "num_requests_waiting_mean": float((admitted - arrived).sum() / window) if window > 0 else None}


def summarize(requests: RequestTable, recorder: Recorder, roles: dict[str, dict], *, wall_time_s: float,
              end_s: float, provenance_counts: dict[str, int], request_overhead_s: float = 0.0) -> dict:
    """The summary.json mapping. GPU totals sum the roles; with several roles the KV figures at the
    top level are the last role's (decode) and ``roles`` has each one. ``request_overhead_s``: how long
    after it is sent a request reaches the deployment (``engine.request_overhead_ms``), from when it
    counts as waiting."""
    f = request_figures(requests, np.frombuffer(recorder.itl_values, dtype=np.int64),
                        np.frombuffer(recorder.itl_counts, dtype=np.int64))
    for name, usage in kv_usage(recorder.passes, roles).items():
        roles[name].update(usage)
    last_role = list(roles.values())[-1]
    summary = {key: f[key] for key in ("num_requests", "completed_requests", "incomplete_requests",
                                       "rejected_requests", "total_input_tokens", "total_output_tokens",
                                       "duration_s")}
    summary.update({
        "end_time_s": float(end_s),
        "wall_time_s": float(wall_time_s),
        "request_throughput_rps": f["request_throughput_rps"],
        "output_throughput_tok_s": f["output_throughput_tok_s"],
        "mean_output_token_throughput_per_user": f["mean_output_token_throughput_per_user"],
        "gpu_count": sum(r["gpu_count"] for r in roles.values()),
        "gpu_hours": sum(r["gpu_hours"] for r in roles.values()),
        "num_passes": sum(r["num_passes"] for r in roles.values()),
        "num_preemptions": f["num_preemptions"],
        "kv_blocks_per_rank": last_role["kv_blocks_per_rank"],
        "kv_capacity_tokens_per_rank": last_role["kv_capacity_tokens_per_rank"],
        "kv_cache_usage_peak": last_role["kv_cache_usage_peak"],
        "kv_cache_usage_mean": last_role["kv_cache_usage_mean"],
        **waiting_requests(requests.column("arrival_s") + request_overhead_s, requests.column("first_admit_s"),
                           requests.column("status"), float(end_s)),
        "request_overhead_ms": request_overhead_s * 1000.0,
        "provenance_counts": dict(sorted(provenance_counts.items())),
        "roles": roles,
    })
    for key in ("ttft_ms", "ttst_ms", "tpot_ms", "itl_ms", "e2e_latency_ms", "queue_ms"):
        summary[key] = f[key]
    return summary


def stage_summaries(requests: RequestTable, recorder: Recorder, stages, starts_ns: list[int],
                    ends_ns: list[int]) -> list[dict]:
    """A staged load's per-stage block: when each stage began and stopped sending (None for a stage the
    run never reached or that never stopped), its target, and the figures of the requests it sent
    (``request_figures``; ITL from the intervals of those requests)."""
    values = np.frombuffer(recorder.itl_values, dtype=np.int64)
    counts = np.frombuffer(recorder.itl_counts, dtype=np.int64)
    of_stage = np.frombuffer(recorder.itl_stages, dtype=np.int64)
    blocks = []
    for k, spec in enumerate(stages):
        mine = of_stage == k
        block = {"stage": k, "start_s": starts_ns[k] / NS_PER_S if k < len(starts_ns) else None,
                 "end_s": ends_ns[k] / NS_PER_S if k < len(ends_ns) else None,
                 "requests_per_second": spec.requests_per_second, "concurrency": spec.concurrency,
                 "target_duration_s": spec.duration_s, "max_requests": spec.requests}
        block.update(request_figures(_rows_of(requests, requests.column("stage") == k), values[mine],
                                     counts[mine]))
        blocks.append(block)
    return blocks
