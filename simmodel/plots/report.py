"""``simmodel plot``: a run's output folder as one self-contained HTML report, or as static images.

The report embeds plotly's JavaScript once (from the plotly package: it opens with no network), a table of the
run's headline figures, and every chart of ``charts.run_charts``. ``--png`` writes each chart as a PNG through
plotly's static export (``kaleido``, which drives a local Chrome or Chromium).
"""

from __future__ import annotations

import html
import json
import tempfile
from pathlib import Path

import pandas as pd
from plotly.offline import get_plotlyjs

from simmodel.plots.charts import run_charts

NEEDED = ("summary.json", "requests.csv", "passes.csv")
"""What a run folder must hold (``simmodel run --output-dir`` writes them)."""


class PlotError(ValueError):
    """The folder cannot be plotted: one line saying why."""


REQUEST_COLUMNS = ("arrival_s", "first_admit_s", "ttft_ms", "tpot_ms", "e2e_ms")
PASS_COLUMNS = ("role", "worker", "dp_rank", "start_s", "num_scheduled_tokens", "num_prefill_seqs", "num_decode_seqs",
                "kv_blocks_used", "num_preempted")
"""The columns the charts read."""


def read_run(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """A run folder's requests, passes and summary, each checked for what the charts read."""
    if not folder.is_dir():
        raise PlotError(f"{folder}: no such folder")
    missing = [name for name in NEEDED if not (folder / name).is_file()]
    if missing:
        raise PlotError(f"{folder}: not a run folder (no {', '.join(missing)}; simmodel run --output-dir writes them)")
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PlotError(f"{folder / 'summary.json'}: not a summary simmodel wrote ({exc})") from None
    if not isinstance(summary, dict):
        raise PlotError(f"{folder / 'summary.json'}: not a summary simmodel wrote (not a JSON object)")
    tables = []
    for name, columns in (("requests.csv", REQUEST_COLUMNS), ("passes.csv", PASS_COLUMNS)):
        try:
            table = pd.read_csv(folder / name)
        except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError) as exc:
            raise PlotError(f"{folder / name}: not a table simmodel wrote ({' '.join(str(exc).split())})") from None
        lacking = [c for c in columns if c not in table.columns]
        if lacking:
            raise PlotError(f"{folder / name}: not a table simmodel wrote (no column {', '.join(lacking)})")
        tables.append(table)
    return tables[0], tables[1], summary


HEADLINE = (("completed_requests", "completed requests"), ("duration_s", "duration (s)"),
            ("output_throughput_tok_s", "output tokens/s"), ("request_throughput_rps", "requests/s"),
            ("num_passes", "passes"), ("num_preemptions", "preemptions"), ("gpu_count", "GPUs"))


def report_html(folder: Path) -> str:
    """The report of the run in ``folder``."""
    requests, passes, summary = read_run(folder)
    rows = [(label, summary.get(key)) for key, label in HEADLINE]
    for key, label in (("ttft_ms", "TTFT"), ("itl_ms", "inter-token latency"), ("e2e_latency_ms", "end-to-end")):
        stats = summary.get(key) or {}
        rows += [(f"{label} p50 / p99 (ms)", f"{stats.get('p50', float('nan')):.2f} / {stats.get('p99', float('nan')):.2f}")]
    table = "".join(f"<tr><th>{html.escape(str(label))}</th><td>{html.escape(_show(value))}</td></tr>"
                    for label, value in rows)
    charts = "".join(f'<div class="chart">{fig.to_html(full_html=False, include_plotlyjs=False)}</div>'
                     for fig in run_charts(requests, passes, summary))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>simmodel run: {html.escape(folder.name)}"
            f"</title><script>{get_plotlyjs()}</script><style>body{{font-family:sans-serif;margin:24px;}}"
            f"table{{border-collapse:collapse}}th,td{{padding:2px 12px;text-align:left}}"
            f".chart{{max-width:1100px}}</style></head><body><h1>simmodel run: {html.escape(folder.name)}</h1>"
            f"<table>{table}</table>{charts}</body></html>")


def _show(value) -> str:
    if value is None:
        return "-"
    return f"{value:,.4g}" if isinstance(value, float) else str(value)


def write_pngs(folder: Path, out: Path) -> list[Path]:
    """Each chart of the run as ``out/<n>-<title>.png``; needs kaleido and a local Chrome or Chromium. The images
    are made in a temporary folder and moved into ``out`` once all of them are: a failed export leaves nothing."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        raise PlotError("--png needs kaleido (pip install kaleido) and a local Chrome or Chromium") from None
    import plotly.io as pio

    requests, passes, summary = read_run(folder)
    figures = run_charts(requests, passes, summary)
    names = [f"{n:02d}-{(fig.layout.title.text or f'chart {n}').lower().replace(' ', '-')}.png"
             for n, fig in enumerate(figures)]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-") as tmp:
        try:
            pio.write_images(figures, [Path(tmp) / name for name in names])  # (one browser session for them all)
        except Exception as exc:  # (kaleido's own errors: no Chrome found, the browser failed)
            raise PlotError(f"--png: plotly's image export failed: {' '.join(str(exc).split())[:300]}") from None
        out.mkdir(exist_ok=True)
        for name in names:
            (Path(tmp) / name).replace(out / name)
    return [out / name for name in names]
