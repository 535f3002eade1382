"""The charts of a run, from its tables: one function per picture, each returning a plotly figure.

Every chart here is drawn from the run's ``requests`` and ``passes`` tables as ``--output-dir`` writes them (or
as ``Results`` holds them), so ``simmodel plot`` (an HTML report), the web page of ``simmodel serve`` (which
asks the API for these figures) and a notebook draw the same pictures from the same code.

plotly, because it works offline (its JavaScript ships inside the Python package, so a report embeds it and the
page serves it), draws interactively in notebooks, and is what serving dashboards already use.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from simmodel.recommend.search import pareto_front
from simmodel.recommend.spec import PARETO, TARGETS

LAYOUT = {"template": "plotly_white", "height": 360, "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
          "legend": {"orientation": "h", "y": -0.2}}


def _layout(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, **LAYOUT)
    return fig


def _cdf(values) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF of ``values`` (NaN dropped): sorted values, and the fraction at or below each."""
    v = np.sort(np.asarray(values, dtype=float))
    v = v[~np.isnan(v)]
    return v, np.arange(1, len(v) + 1) / max(len(v), 1)


def latency_cdfs(requests: pd.DataFrame) -> go.Figure:
    """TTFT, time per output token and end-to-end latency: the fraction of requests at or below each value."""
    fig = go.Figure()
    for column, name in (("ttft_ms", "TTFT"), ("tpot_ms", "time per output token"), ("e2e_ms", "end-to-end")):
        x, y = _cdf(requests[column])
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line_shape="hv", name=name))
    fig.update_xaxes(type="log")
    return _layout(fig, "Latency CDFs", "ms (log scale)", "fraction of requests")


def latency_over_time(requests: pd.DataFrame) -> go.Figure:
    """Each request's TTFT and time per output token at its arrival instant."""
    fig = go.Figure()
    for column, name in (("ttft_ms", "TTFT"), ("tpot_ms", "time per output token")):
        fig.add_trace(go.Scattergl(x=requests["arrival_s"], y=requests[column], mode="markers", name=name,
                                   marker={"size": 4}))
    return _layout(fig, "Latency by arrival time", "arrival (s)", "ms")


def _ranks(passes: pd.DataFrame):
    """The pass rows of each (role, worker, rank), in time order."""
    for (role, worker, rank), rows in passes.groupby(["role", "worker", "dp_rank"], sort=True):
        yield f"{role} w{worker} r{rank}", rows.sort_values("start_s")


def batch_timeline(passes: pd.DataFrame) -> go.Figure:
    """Sequences in each pass (prefill and decode) per worker and rank, over time."""
    fig = go.Figure()
    for label, rows in _ranks(passes):
        fig.add_trace(go.Scattergl(x=rows["start_s"], y=rows["num_prefill_seqs"] + rows["num_decode_seqs"],
                                   mode="lines", line_shape="hv", name=label))
    return _layout(fig, "Batch size per pass", "time (s)", "sequences")


def tokens_timeline(passes: pd.DataFrame) -> go.Figure:
    """Tokens scheduled in each pass per worker and rank, over time."""
    fig = go.Figure()
    for label, rows in _ranks(passes):
        fig.add_trace(go.Scattergl(x=rows["start_s"], y=rows["num_scheduled_tokens"], mode="lines",
                                   line_shape="hv", name=label))
    return _layout(fig, "Scheduled tokens per pass", "time (s)", "tokens")


def kv_timeline(passes: pd.DataFrame) -> go.Figure:
    """KV blocks in use after each pass's plan per worker and rank, with the passes that preempted marked."""
    fig = go.Figure()
    for label, rows in _ranks(passes):
        fig.add_trace(go.Scattergl(x=rows["start_s"], y=rows["kv_blocks_used"], mode="lines", line_shape="hv",
                                   name=label))
        hit = rows[rows["num_preempted"] > 0]
        if len(hit):
            fig.add_trace(go.Scattergl(x=hit["start_s"], y=hit["kv_blocks_used"], mode="markers",
                                       name=f"{label} preemptions", marker={"symbol": "x", "size": 8}))
    return _layout(fig, "KV blocks used", "time (s)", "blocks")


def queue_depth(requests: pd.DataFrame) -> go.Figure:
    """Requests waiting (arrived, not yet admitted) over time: +1 at each arrival, −1 at each first admission."""
    arrived = requests["arrival_s"].dropna().to_numpy(float)
    admitted = requests["first_admit_s"].dropna().to_numpy(float)
    times = np.concatenate([arrived, admitted])
    steps = np.concatenate([np.ones(len(arrived)), -np.ones(len(admitted))])
    order = np.lexsort((-steps, times))  # (at one instant, arrivals before admissions)
    fig = go.Figure(go.Scattergl(x=times[order], y=np.cumsum(steps[order]), mode="lines", line_shape="hv",
                                 name="waiting"))
    return _layout(fig, "Queue depth", "time (s)", "requests waiting")


def stage_bars(summary: dict) -> go.Figure | None:
    """Mean TTFT, inter-token and end-to-end latency per load stage (a staged load only; None otherwise)."""
    stages = summary.get("stages")
    if not stages:
        return None
    names = [f"stage {s['stage']}" for s in stages]
    fig = go.Figure([go.Bar(x=names, y=[s[key]["mean"] for s in stages], name=name)
                     for key, name in (("ttft_ms", "TTFT mean"), ("itl_ms", "ITL mean"),
                                       ("e2e_latency_ms", "E2E mean"))])
    return _layout(fig, "Per stage", "stage", "ms")


def run_charts(requests: pd.DataFrame, passes: pd.DataFrame, summary: dict | None = None) -> list[go.Figure]:
    """Every chart of a run, in the order a report shows them."""
    figures = [latency_cdfs(requests), latency_over_time(requests), queue_depth(requests),
               batch_timeline(passes), tokens_timeline(passes), kv_timeline(passes)]
    bars = stage_bars(summary or {})
    return figures + ([bars] if bars is not None else [])


AXIS_TITLES = {"output_throughput_per_gpu": "output tokens/s per GPU", "throughput_per_user": "output tokens/s per user",
               "output_tokens_per_joule": "output tokens per joule", "cost_per_million_tokens": "cost per million tokens"}
"""Axis titles of the metrics a Pareto chart is most often drawn on (others show the metric's name)."""


def pareto_chart(entries: list[dict], ranked: list[dict], targets: tuple[str, str] = PARETO) -> go.Figure:
    """A search's candidates (``simmodel recommend``'s ledger entries) by the metrics of two targets (by default
    output tokens per second per GPU and per user): feasible and infeasible ones apart, the feasible ones no
    other beats on both joined as the front, and the ranked (saved) ones numbered as they were saved."""
    objectives = tuple(TARGETS[t] for t in targets)
    (mx, _), (my, _) = objectives
    simulated = [e for e in entries if e.get("metrics") and e["metrics"].get(mx) is not None
                 and e["metrics"].get(my) is not None]

    def xy(group):
        return [e["metrics"][mx] for e in group], [e["metrics"][my] for e in group]

    def hover(group):
        return [f"candidate {e['id']}: {e['status']}<br>" + "<br>".join(f"{k} = {v}" for k, v in
                                                                      e.get("choices", {}).items()) for e in group]

    fig = go.Figure()
    for status, colour in (("feasible", "#1f77b4"), ("infeasible", "#bbbbbb")):
        group = [e for e in simulated if (e["status"] == "feasible") == (status == "feasible")]
        if group:
            x, y = xy(group)
            fig.add_trace(go.Scatter(x=x, y=y, mode="markers", name=status, text=hover(group), hoverinfo="text",
                                     marker={"color": colour, "size": 8}))
    feasible = [{**e, "objectives": e["metrics"]} for e in simulated if e["status"] == "feasible"]
    front = pareto_front(feasible, objectives) if feasible else []  # (the search's own rule, whatever its target)
    if front:
        front.sort(key=lambda e: e["metrics"][mx])
        x, y = xy(front)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name="front", line={"color": "#1f77b4", "dash": "dot"}))
    chosen = [e for e in ranked if e.get("metrics")]
    if chosen:
        x, y = xy(chosen)
        fig.add_trace(go.Scatter(x=x, y=y, mode="markers+text", name="ranked (saved)", text=[f"#{i}" for i in
                                                                                            range(1, len(chosen) + 1)],
                                 textposition="top center", marker={"color": "#d62728", "size": 12,
                                                                    "symbol": "star"}))
    x_title, y_title = AXIS_TITLES.get(mx, mx), AXIS_TITLES.get(my, my)
    return _layout(fig, f"Candidates: {x_title} against {y_title}", x_title, y_title)


def compare_chart(rows: list[dict], tool: str) -> go.Figure:
    """``simmodel compare``'s rows as bars, measured beside simulated: one panel per metric (each in its own
    unit), a pair of bars per scope and statistic, the simulated bar's hover giving the error in percent."""
    from plotly.subplots import make_subplots

    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    fig = make_subplots(rows=len(metrics), cols=1, subplot_titles=metrics, vertical_spacing=0.25 / max(len(metrics), 1))
    for i, metric in enumerate(metrics, start=1):
        group = [r for r in rows if r["metric"] == metric]
        labels = [f"{r['scope']} {r['stat']}" for r in group]
        fig.add_trace(go.Bar(x=labels, y=[r["measured"] for r in group], name=f"measured ({tool})",
                             marker_color="#7f7f7f", showlegend=i == 1, legendgroup="measured"), row=i, col=1)
        fig.add_trace(go.Bar(x=labels, y=[r["simulated"] for r in group], name="simulated", marker_color="#1f77b4",
                             showlegend=i == 1, legendgroup="simulated",
                             hovertext=[None if r["error_pct"] is None else f"error {r['error_pct']:+.1f} %"
                                        for r in group]), row=i, col=1)
    fig.update_layout(title=f"Measured ({tool}) against simulated", barmode="group", template="plotly_white",
                      height=260 * len(metrics) + 120, margin={"l": 60, "r": 20, "t": 80, "b": 40})
    return fig
