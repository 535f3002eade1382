"""The ``simmodel`` command: thin glue from options to load → build → run → export."""

from __future__ import annotations

import errno
import gc
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import click

from simmodel.config.domains import search_field
from simmodel.config.load import apply_overrides, load_scenario, read_yaml
from simmodel.errors import ScenarioError, SimulationError, StopOnSigterm, signal_of
from simmodel.export import (
    has_pyarrow,
    note_written,
    probe_output_dir,
    summary_json,
    write_files,
    write_results,
    write_whole,
)
from simmodel.metrics.summarize import LATENCY_METRICS
from simmodel.offload import host_blocks, storage_blocks
from simmodel.perf.timings import make_timing
from simmodel.sim import Simulation, check_workload

_LABELS = {
    "ttft_ms": "Time to first token (ms)", "ttst_ms": "Time to second token (ms)",
    "tpot_ms": "Time per output token (ms)", "itl_ms": "Inter-token latency (ms)",
    "e2e_latency_ms": "Request latency (ms)", "queue_ms": "Queue time (ms)",
}
_STATS = ("mean", "p50", "p90", "p95", "p99", "p99.9", "min", "max", "std")


def _columns(rows: list[list[str]]) -> list[str]:
    """Rows of cells as lines: the first column left-aligned, the others right-aligned, each as wide as
    its widest cell and one space apart, so that no two cells run together whatever their values."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [" ".join([row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:]))]).rstrip()
            for row in rows]


def format_table(summary: dict) -> str:
    """An AIPerf-style table: one row per latency metric, then the run's totals."""
    rows = [["Metric", *_STATS]]
    for key in LATENCY_METRICS:
        row = summary[key]
        rows.append([_LABELS[key], *("-" if row[s] is None else f"{row[s]:.2f}" for s in _STATS)])
    lines = _columns(rows)
    lines.append("")
    for key, label in (
        ("output_throughput_tok_s", "Output token throughput (tokens/s)"),
        ("request_throughput_rps", "Request throughput (requests/s)"),
        ("mean_output_token_throughput_per_user", "Output token throughput per user (tokens/s)"),
        ("completed_requests", "Completed requests"), ("incomplete_requests", "Incomplete requests"),
        ("rejected_requests", "Rejected requests"), ("num_preemptions", "Preemptions"),
        ("prefix_cache_hit_ratio", "Prefix cache hit ratio"),
        ("kv_cache_usage_peak", "KV cache usage, peak (fraction of blocks)"),
        ("kv_cache_usage_mean", "KV cache usage, mean over pass time"),
        ("num_requests_waiting_peak", "Waiting requests, peak"),
        ("num_requests_waiting_mean", "Waiting requests, time average"),
        ("request_overhead_ms", "Time per request outside the passes (ms)"),
        ("duration_s", "Duration (s)"), ("gpu_count", "GPUs"), ("gpu_hours", "GPU-hours"),
        ("num_passes", "Passes"),
        ("energy_kwh", "GPU energy (kWh)"), ("avg_power_w_per_gpu", "Average power per GPU (W)"),
        ("energy_j_per_request", "Energy per completed request (J)"),
        ("energy_j_per_output_token", "Energy per output token (J)"),
        ("cost_per_million_tokens", "Cost per million output tokens"),
        ("wall_time_s", "Wall time (s)"),
    ):
        value = summary.get(key)
        text = "-" if value is None else (f"{value:.4f}" if isinstance(value, float) else str(value))
        lines.append(f"{label:<46} {text}")
    if summary.get("sla"):
        lines += _sla_lines(summary["sla"])
    if "num_retractions" in summary:
        lines.append(f"{'Retractions (SGLang)':<46} {summary['num_retractions']}")
    spec = summary.get("speculation")
    if spec and spec["num_rounds"]:
        lines.append(f"{'Draft acceptance rate (' + spec['kind'] + ')':<46} {spec['acceptance_rate']:.4f}")
        lines.append(f"{'Tokens per verification round':<46} {spec['mean_tokens_per_round']:.4f}")
    if "num_pauses" in summary:
        lines.append(f"{'Pauses (TensorRT-LLM max_utilization)':<46} {summary['num_pauses']}")
    for role, tier in (summary.get("kv_offload") or {}).items():
        storage = "storage_hit_ratio" in tier
        keys = ("gpu_hit_ratio", "host_hit_ratio", *(("storage_hit_ratio",) if storage else ()), "hit_ratio")
        shown = " / ".join("-" if tier[key] is None else f"{tier[key]:.4f}" for key in keys)
        label = "Hit GPU / host / storage / all" if storage else "Hit ratio GPU / host / both"
        lines.append(f"{label + ' (' + role + ')':<46} {shown}")
        lines.append(f"{'Host tier: GB loaded / stored (link busy)':<46} {tier['bytes_loaded'] / 1e9:.1f} "
                     f"({tier['load_link_utilization']:.2%}) / {tier['bytes_stored'] / 1e9:.1f} "
                     f"({tier['store_link_utilization']:.2%})")
        if storage:
            lines.append(f"{'Storage: GB read / written (busy)':<46} {tier['storage_bytes_read'] / 1e9:.1f} "
                         f"({tier['storage_read_utilization']:.2%}) / {tier['storage_bytes_written'] / 1e9:.1f} "
                         f"({tier['storage_write_utilization']:.2%})")
    if summary.get("sessions"):
        ss = summary["sessions"]
        lines.append(f"{'Sessions completed / started (abandoned)':<46} {ss['completed']} / {ss['started']} "
                     f"({ss['abandoned']})")
        rows = [["Session", *_STATS]]
        for key, label in (("session_time_s", "Session time (s)"), ("engine_time_s", "  in the engine (s)"),
                           ("tool_wait_time_s", "  waiting on tools (s)"),
                           ("prefix_cache_hit_ratio", "Prefix cache hit ratio")):
            row = ss[key]
            rows.append([label, *("-" if row[st] is None else f"{row[st]:.3f}" for st in _STATS)])
        lines += ["", *_columns(rows)]
    if summary.get("vision"):
        v = summary["vision"]
        ratio = v["embedding_cache_hit_ratio"]
        lines.append(f"{'Images encoded on the GPU':<46} {v['images_encoded']}")
        lines.append(f"{'Encoder time (s)':<46} {v['encoder_seconds']:.4f}")
        lines.append(f"{'Embedding cache hit ratio':<46} {'-' if ratio is None else f'{ratio:.4f}'}")
    if summary.get("stages"):
        lines += ["", f"{'Stage':>5} {'window (s)':>15} {'target':>10} {'requests':>9} {'req/s':>8} {'tok/s':>9} "
                      f"{'TTFT mean':>10} {'ITL mean':>9} {'E2E mean':>10}"]
        for st in summary["stages"]:
            target = (f"{st['requests_per_second']:g}/s" if st["requests_per_second"] is not None
                      else f"{st['concurrency']} conc")
            cells = [st["request_throughput_rps"], st["output_throughput_tok_s"], st["ttft_ms"]["mean"],
                     st["itl_ms"]["mean"], st["e2e_latency_ms"]["mean"]]
            shown = ["-" if v is None else f"{v:.2f}" for v in cells]
            window = "-" if st["start_s"] is None else (
                f"{st['start_s']:.1f}–" + ("" if st["end_s"] is None else f"{st['end_s']:.1f}"))
            lines.append(f"{st['stage']:>5} {window:>15} {target:>10} "
                         f"{st['num_requests']:>9} {shown[0]:>8} {shown[1]:>9} {shown[2]:>10} {shown[3]:>9} "
                         f"{shown[4]:>10}")
    if summary.get("planner"):
        lines += ["", f"{'Pool (replica planner), serving':<31} {'min':>5} {'mean':>7} {'max':>5} {'added':>6} {'removed':>8}"]
        for role, pool in summary["planner"]["pools"].items():
            lines.append(f"{role:<31} {pool['min_serving']:>5} {pool['mean_serving']:>7.2f} {pool['max_serving']:>5} "
                         f"{pool['scale_outs']:>6} {pool['scale_ins']:>8}")
    if summary.get("frontend"):
        lines += ["", f"{'Frontend stage':<24} {'workers':>8} {'requests':>9} {'wait (ms)':>10} {'service (ms)':>13}"]
        for st in summary["frontend"]:
            wait = "-" if st["mean_wait_ms"] is None else f"{st['mean_wait_ms']:.3f}"
            service = "-" if st["mean_service_ms"] is None else f"{st['mean_service_ms']:.3f}"
            lines.append(f"{st['stage']:<24} {st['workers']:>8} {st['requests']:>9} {wait:>10} {service:>13}")
    return "\n".join(lines)


def _sla_lines(sla: dict) -> list[str]:
    """The SLA block of the table: the bounds, goodput, and attainment against the required fraction."""
    bounds = ", ".join(f"{name} ≤ {sla[key]:g} ms" for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"),
                                                                       ("e2e_ms", "E2E")) if sla[key] is not None)
    goodput = "-" if sla["goodput_rps"] is None else f"{sla['goodput_rps']:.4f}"
    attained = "-" if sla["sla_attainment"] is None else f"{sla['sla_attainment']:.2%}"
    verdict = "met" if sla["sla_met"] else "not met"
    return [f"{'SLA':<46} {bounds}",
            f"{'Goodput (requests/s meeting the SLA)':<46} {goodput}",
            f"{'SLA attainment (required)':<46} {attained} ({sla['required_attainment']:.2%} required: {verdict})"]


class ProgressBar:
    """A run's progress on stderr, in one of two modes, told by whether the stream is a terminal.

    On a terminal, one line (requests done, of the total when the traffic has one, and the simulated time)
    redrawn at most every ``REDRAW_S`` of wall time and erased at the end. Elsewhere (a CI log, a file), a
    heartbeat line every ``HEARTBEAT_S`` of wall time: requests done, simulated time and passes per second
    of wall time since the line before, so that a long run shows it is alive without filling the log (a run
    shorter than that prints none). ``clock``: wall time in seconds (injectable for tests)."""

    REDRAW_S = 0.5
    HEARTBEAT_S = 10.0

    def __init__(self, sim: Simulation, stream=None, *, tty: bool | None = None, clock=time.monotonic) -> None:
        self.sim, self.stream = sim, stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self.total = sim.source.stream.limit
        self._shown = clock()
        """When the last line was drawn (the start: the first one comes one interval in)."""
        self._passes = 0
        self._drawn = False

    def __call__(self, sim: Simulation) -> None:
        if sim.finished:
            if self._drawn and self.tty:
                self.stream.write("\r\033[K")
                self.stream.flush()
            return
        now = self.clock()
        if now - self._shown < (self.REDRAW_S if self.tty else self.HEARTBEAT_S):
            return
        done = f"{sim.num_finished:,}" + (f"/{self.total:,}" if self.total else "")
        if self.tty:
            bar = ""
            if self.total:
                filled = int(30 * sim.num_finished / self.total)
                bar = f"[{'#' * filled}{'.' * (30 - filled)}] "
            self.stream.write(f"\r\033[K{bar}{done} requests{'' if self.total else ' done'} · "
                              f"{sim.now:,.1f} s simulated")
        else:
            passes = sum(w.num_passes for w in sim.workers)
            rate = (passes - self._passes) / (now - self._shown)
            self.stream.write(f"simmodel: {done} requests done, {sim.now:,.2f} s simulated, {rate:,.1f} passes/s\n")
            self._passes = passes
        self.stream.flush()
        self._shown, self._drawn = now, True


def _warn(scenario) -> None:
    """An imported workload's fields the simulation does not reproduce, and an SGLang host pool no larger than
    the GPU's (SGLang warns of it too), one line each on stderr."""
    for warning in scenario.traffic.warnings:
        click.echo(f"simmodel: warning: {warning}", err=True)
    for name, role in scenario.engine.workers.items():
        spec = role.kv_cache.host_offload
        if spec is None or spec.write_policy is None:
            continue
        host = host_blocks(role)[0] * role.kv_cache.block_size
        if host <= role.kv_tokens_per_rank:
            click.echo(f"simmodel: warning: engine.workers.{name}.kv_cache.host_offload: the host pool holds {host} "
                       f"tokens per GPU, no more than the GPU pool's {role.kv_tokens_per_rank} (SGLang warns of this "
                       f"too): it keeps little the GPU does not", err=True)


def _one_line(exc: BaseException) -> str:
    """The error message on one line, whatever text (a file's contents, a library's message) it quotes."""
    return " ".join(str(exc).split())


_BAD_PATH = frozenset((errno.ENAMETOOLONG, errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.ELOOP))
"""Errors that say a path given was wrong (exit 2); others (a full disk, say) are a run that cannot go on."""


class _OneLineErrors(click.Group):
    """Every failure is one line on stderr: exit 2 for bad input, 1 for a run that cannot go on, 130 on
    Ctrl-C and 143 on SIGTERM, which stops a command as Ctrl-C does (128 + the signal's number, as a
    shell reports a process a signal ended)."""

    def invoke(self, ctx):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:  # before click's own handler, which adds an empty line
            raise _Stopped(signal_of(exc)) from None

    def main(self, args=None, prog_name=None, **extra):  # type: ignore[override]
        handled = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, StopOnSigterm()) if handled else None
        try:
            return super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
        except (click.exceptions.Abort, _Stopped) as exc:
            signum = exc.signum if isinstance(exc, _Stopped) else signal_of(exc.__cause__ or KeyboardInterrupt())
            click.echo(f"simmodel: {'terminated (SIGTERM)' if signum == signal.SIGTERM else 'interrupted'}",
                       err=True)
            sys.exit(128 + signum)
        except click.ClickException as exc:
            click.echo(f"simmodel: {exc.format_message()}", err=True)
            sys.exit(2)
        except (ScenarioError, FileExistsError) as exc:
            click.echo(f"simmodel: {_one_line(exc)}", err=True)
            sys.exit(2)
        except SimulationError as exc:
            click.echo(f"simmodel: simulation failed: {_one_line(exc)}", err=True)
            sys.exit(1)
        except OSError as exc:  # a file the OS refuses: bad input if the path itself is (a name too long...)
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"simmodel: {where}{exc.strerror or _one_line(exc)}", err=True)
            sys.exit(2 if exc.errno in _BAD_PATH else 1)
        finally:
            if handled:
                signal.signal(signal.SIGTERM, previous)


class _Stopped(Exception):
    """A command stopped by Ctrl-C or SIGTERM (``signum``), carried past click's own handling."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_scenario = click.option("-c", "--config", "scenario", required=True,
                         type=click.Path(dir_okay=False, path_type=Path), help="Scenario YAML file.")
_overwrite = click.option("--overwrite", is_flag=True,
                          help="Replace an earlier output of simmodel in --output-dir: only a folder whose every "
                               "file simmodel wrote (listed in its .simmodel-output.json), removing only those.")
_quiet = click.option("--quiet", "-q", is_flag=True,
                      help="No progress on stderr: neither the terminal's progress line nor the heartbeat line "
                           "printed every 10 s elsewhere (warnings and errors still are).")
_set = click.option("--set", "overrides", multiple=True, metavar="PATH=YAML_VALUE",
                    help="Override one field, e.g. --set engine.seed=3 (repeatable, applied in order).")


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="simmodel")
def cli() -> None:
    """Simulate LLM inference serving deployments without a GPU."""


@cli.command()
@_scenario
@_set
def validate(scenario: Path, overrides: tuple[str, ...]) -> None:
    """Check a scenario file (and its trace), or a search file of `simmodel recommend` (its spec, every
    searched value and the candidates it would simulate), without running it."""
    if search_field(apply_overrides(_read_scenario(scenario), overrides)) is not None:
        _validate_search(scenario, overrides)
        return
    loaded = load_scenario(scenario, overrides)
    try:
        check_workload(loaded)
        for role in loaded.engine.workers.values():
            make_timing(role, loaded.engine.backend)
    except ScenarioError as exc:
        raise ScenarioError(f"{scenario.name}: {exc}") from None
    _warn(loaded)  # (only for a scenario that is valid: a refused one gets its one line alone)
    parts = []
    for role in loaded.engine.workers.values():
        p = role.parallelism
        scaled = loaded.planner.pools.get(role.name) if loaded.planner is not None else None
        grows = "" if scaled is None else (f" (the {loaded.planner.mode} planner keeps {scaled.min_replicas}–"
                                           f"{scaled.max_replicas})")
        host = ""
        if role.kv_cache.host_offload is not None:
            host = f" and {host_blocks(role)[0]} on the host"
            if role.kv_cache.host_offload.storage is not None:
                stored = storage_blocks(role)
                host += " and unbounded storage" if stored is None else f" and {stored} on storage"
                host += " (one store shared by the role's ranks)" if role.kv_cache.host_offload.storage.shared else ""
                policy = role.kv_cache.host_offload.storage.prefetch_policy
                host += "" if policy is None else f" (prefetch {policy})"
        layout = role.kv_layout
        kinds = [f"{n} {kind}" for n, kind in ((layout.full_groups, "full-attention"),
                                               (layout.sliding_groups, f"{layout.window}-token window"),
                                               (layout.state_groups, "Mamba-2 state" if role.deployment.model.is_mamba
                                                else "linear-attention state")) if n]
        groups = (f" ({layout.num_groups} KV cache groups of {layout.group_size} layers: {', '.join(kinds)})"
                  if layout.hybrid else "")
        stages = f" × {p.pipeline} stage(s)" if p.pipeline > 1 else ""
        parts.append(f"{role.name}: {p.replicas} worker(s){grows} × {p.attention_data} rank(s){stages}, {p.gpu_count} "
                     f"GPU(s), {role.num_kv_blocks} KV blocks of {role.kv_cache.block_size} tokens per rank{groups}{host}, "
                     f"context_length {role.context_length}")
        if role.afd is not None:
            f = role.afd.ffn
            parts.append(f"ffn: {f.replicas} worker(s) × {f.tensor} GPU(s) × {f.pipeline} stage(s), {f.gpu_count} "
                         f"GPU(s), {role.afd.micro_batches} micro-batch(es) a pass")
    encoder = loaded.engine.encoder
    if encoder is not None:
        parts.append(f"encoder: {encoder.replicas} worker(s) of {encoder.tensor} GPU(s), batches of up to "
                     f"{encoder.max_batch_images} image(s)")
    click.echo(f"{scenario}: ok ({'; '.join(parts)})")


def _read_scenario(path: Path) -> dict:
    """The scenario file's mapping, errors prefixed with its name."""
    try:
        return read_yaml(path)
    except ScenarioError as exc:
        raise ScenarioError(f"{path.name}: {exc}", exc.category) from None


def _validate_search(path: Path, overrides: tuple[str, ...]) -> None:
    """``validate`` of a search file: one line saying how many candidates it has and how many are rejected
    before simulation, by reason."""
    from simmodel.recommend.search import check_search, load_search

    spec, space, base_dir = load_search(path, overrides)
    try:
        checked, rejected = check_search(spec, space, base_dir)
    except ScenarioError as exc:
        raise ScenarioError(f"{path.name}: {exc}", exc.category) from None
    except RecursionError:
        raise ScenarioError(f"{path.name}: nested too deeply to be a search scenario") from None
    why = ", ".join(f"{n} {category}" for category, n in rejected.items())
    if spec.algorithm == "bayesian" and not checked:
        what = f"bayesian search of up to {spec.max_trials} of {space.size:,} combinations (each checked when drawn)"
    else:
        what = (f"{spec.algorithm} search of {checked:,} candidates ({sum(rejected.values()):,} rejected before "
                f"simulation{': ' + why if why else ''})")
    click.echo(f"{path}: ok, {what}")


@cli.command()
@_scenario
@_set
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write summary.json, requests.csv, passes.csv and events.parquet here.")
@_overwrite
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--events", type=click.Choice(["memory", "stream", "off"]), default="memory", show_default=True,
              help="The event log: kept in memory, streamed to events.parquet in row groups as the run goes "
                   "(needs --output-dir and pyarrow; for very long runs), or not kept.")
@_quiet
def run(scenario: Path, overrides: tuple[str, ...], output_dir: Path | None, overwrite: bool, fmt: str,
        events: str, quiet: bool) -> None:
    """Simulate a scenario and print its metrics."""
    if _ENDS_PROCESS:  # one simulation, then the process ends: nothing for the collector to free before (``main``)
        gc.disable()
    if output_dir is not None:
        probe_output_dir(output_dir, overwrite, scenario)
    sink = streamed = None
    if events == "stream":
        if output_dir is None:
            raise click.UsageError("--events stream writes events.parquet into --output-dir; give one")
        if not has_pyarrow():
            raise click.UsageError("--events stream needs pyarrow (pip install pyarrow)")
        from simmodel.metrics.event_sink import ParquetEventSink

        output_dir.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=f".{output_dir.name}.events.", suffix=".parquet",
                                        dir=output_dir.parent)
        os.close(handle)
        streamed = Path(name)
        sink = ParquetEventSink(streamed, where=f"--output-dir {output_dir}")
    try:
        # Without --output-dir the event log is never written: do not keep it.
        keep = events == "memory" and output_dir is not None
        sim = Simulation.from_yaml(scenario, overrides, keep_events=keep, event_sink=sink)
        _warn(sim.scenario)
        results = sim.run(progress=None if quiet else ProgressBar(sim))
        if sink is not None:
            sink.close()
        if output_dir is not None:
            write_results(results, output_dir, overwrite, events, streamed, scenario)
    finally:
        if streamed is not None and streamed.exists():
            streamed.unlink()
    click.echo(summary_json(results.summary).rstrip() if fmt == "json" else format_table(results.summary))


@cli.command()
@click.option("--model", required=True, help="Registry id (e.g. meta-llama/Llama-3.1-8B-Instruct) or a config.json path.")
@click.option("--hardware", required=True, help="System id (e.g. h100_sxm) or a system .yaml path.")
@click.option("--tensor", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--backend", type=click.Choice(["vllm"]), default="vllm", show_default=True)
@click.option("--dtype", type=click.Choice(["auto", "bf16", "fp16", "fp8"]), default="auto", show_default=True,
              help="Weight dtype; auto is the checkpoint's.")
@click.option("--context-length", type=click.IntRange(min=2), help="max_model_len; default the model's maximum (Llama 4: 8192, one attention chunk).")
@click.option("--max-batched-tokens", type=click.IntRange(min=1), default=8192, show_default=True)
@click.option("--input-tokens", type=click.IntRange(min=1), help="Price one request alone: its prompt...")
@click.option("--output-tokens", type=click.IntRange(min=1), help="...and its output tokens.")
@click.option("--decode-batch", type=click.IntRange(min=1), help="Price one decode pass of this many sequences...")
@click.option("--context", type=click.IntRange(min=0), help="...each with this many tokens already in KV.")
@click.option("--prefill-tokens", type=click.IntRange(min=1), help="Price one prefill pass of a prompt this long.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def estimate(model: str, hardware: str, tensor: int, backend: str, dtype: str, context_length: int | None,
             max_batched_tokens: int, input_tokens: int | None, output_tokens: int | None,
             decode_batch: int | None, context: int | None, prefill_tokens: int | None, fmt: str) -> None:
    """Price one request served alone, or one pass, with the default performance model."""
    from simmodel.perf.estimate import estimate_from_options

    modes = [input_tokens is not None or output_tokens is not None, decode_batch is not None or context is not None,
             prefill_tokens is not None]
    if sum(modes) != 1:
        raise click.UsageError("give one of: --input-tokens with --output-tokens; --decode-batch with --context; "
                               "--prefill-tokens")
    if modes[0] and (input_tokens is None or output_tokens is None):
        raise click.UsageError("--input-tokens and --output-tokens go together")
    if modes[1] and (decode_batch is None or context is None):
        raise click.UsageError("--decode-batch and --context go together")
    result = estimate_from_options(
        model=model, hardware=hardware, tensor=tensor, backend=backend, dtype=dtype, context_length=context_length,
        max_batched_tokens=max_batched_tokens, input_tokens=input_tokens, output_tokens=output_tokens,
        decode_batch=decode_batch, context=context, prefill_tokens=prefill_tokens)
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            click.echo(f"{key:<14} {'-' if value is None else f'{value:.4f}'}")


@cli.command()
@_scenario
@_set
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Write recommendation.json, recommendation.csv and recommendations/0001.yaml … here.")
@_overwrite
@click.option("--executor", default="local", show_default=True, metavar="local|ray[=ADDRESS]",
              help="local: a process pool on this machine (optimizer.parallelism processes, default one per "
                   "core); ray: each candidate a Ray task, on the cluster at ADDRESS (auto: this machine's) or "
                   "on a Ray instance started here.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Rows of the table.")
@_quiet
def recommend(scenario: Path, overrides: tuple[str, ...], output_dir: Path, overwrite: bool, executor: str,
              fmt: str, top: int, quiet: bool) -> None:
    """Search deployments: simulate the candidates of the scenario's domains, rank them against the
    targets, and save the best as runnable scenarios. Exit 1 when no candidate is feasible, 130 on
    Ctrl-C and 143 on SIGTERM (the ledger of the candidates that finished is still written)."""
    from simmodel.recommend.executor import make_executor
    from simmodel.recommend.progress import SearchProgress
    from simmodel.recommend.search import load_search, planned, rank, run_search, write_ledger

    probe_output_dir(output_dir, overwrite, scenario)
    spec, space, base_dir = load_search(scenario, overrides)
    pool = make_executor(executor, spec.parallelism)
    progress = None if quiet else SearchProgress(spec, planned(spec, space))
    try:
        entries, interrupted = run_search(spec, space, base_dir, pool, progress)
    finally:
        if progress is not None:
            progress.close()
    ranked = rank(entries, spec)
    missing = write_ledger(output_dir, spec, entries, ranked, base_dir, interrupted, overwrite, scenario)
    if missing is not None:
        click.echo(f"simmodel: recommend: pareto.html not written: it needs plotly (pip install 'simmodel[plot]'): "
                   f"{missing}", err=True)
    if interrupted:
        how = "terminated (SIGTERM)" if interrupted == signal.SIGTERM else "interrupted"
        click.echo(f"simmodel: {how} after {len(entries)} of {planned(spec, space)} candidates; "
                   f"their ledger is in {output_dir}", err=True)
        sys.exit(128 + interrupted)
    if fmt == "json":
        click.echo(json.dumps({"target": spec.target, "ranked": [
            {"id": e["id"], "objectives": e["objectives"], "score": e["score"], "choices": e["choices"],
             "metrics": e["metrics"]} for e in ranked[:top]],
            "num_candidates": len(entries), "num_feasible": sum(e["status"] == "feasible" for e in entries)},
            indent=2))
    else:
        click.echo(format_ranking(spec, entries, ranked[:top], output_dir))
    if not ranked:
        sys.exit(1)


@cli.command()
@_scenario
@_set
@click.option("--measured", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The benchmark tool's result file: vllm bench --save-result JSON, inference-perf "
                   "summary_lifecycle_metrics.json (stage_N_… files beside it are read too), GuideLLM report "
                   "JSON, AIPerf profile_export_aiperf.json.")
@click.option("--tool", type=click.Choice(["vllm-bench", "inference-perf", "guidellm", "aiperf"]),
              help="The tool that wrote --measured (default: told by the file's keys).")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write compare.csv, compare.json and the run's summary.json here.")
@_overwrite
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@_quiet
def compare(scenario: Path, overrides: tuple[str, ...], measured: Path, tool: str | None, output_dir: Path | None,
            overwrite: bool, fmt: str, quiet: bool) -> None:
    """Simulate a scenario and set its metrics beside a benchmark tool's measured ones, each simulated
    figure computed the way that tool defines it (docs/compare.md)."""
    from simmodel.compare.definitions import DEFINITIONS
    from simmodel.compare.measured import read_measured
    from simmodel.compare.table import COLUMNS, format_rows
    from simmodel.compare.table import compare as compare_runs

    if output_dir is not None:
        probe_output_dir(output_dir, overwrite, scenario)
    measurement = read_measured(measured, tool)
    sim = Simulation.from_yaml(scenario, overrides, keep_events=False)
    _warn(sim.scenario)
    results = sim.run(progress=None if quiet else ProgressBar(sim))
    rows, notes = compare_runs(measurement, sim, results)
    if not rows:
        raise ScenarioError(f"--measured {measured}: nothing compared: {notes[0] if notes else 'no figure'}")
    used = sorted({r["definition"] for r in rows})
    report = {"tool": measurement.tool, "measured": str(measured), "scenario": str(scenario), "rows": rows,
              "definitions": {d: DEFINITIONS[d] for d in used}, "notes": notes}
    if output_dir is not None:
        import csv
        import io

        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        files = {"compare.csv": text.getvalue(), "compare.json": json.dumps(report, indent=2) + "\n",
                 "summary.json": summary_json(results.summary)}
        try:
            from simmodel.plots.charts import compare_chart
        except ImportError as exc:
            click.echo(f"simmodel: compare: compare.html not written: it needs plotly (pip install "
                       f"'simmodel[plot]'): {exc}", err=True)
        else:
            files["compare.html"] = compare_chart(rows, measurement.tool).to_html(include_plotlyjs=True)
        write_files(output_dir, overwrite, files, "compare", scenario)
    click.echo(json.dumps(report, indent=2) if fmt == "json" else format_rows(rows, notes, measurement.tool))


@cli.command()
@click.option("--runs", "runs_path", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="RUNS.yaml: the measured runs, each {scenario, measured[, tool, name, set, holdout]}, and "
                   "optionally parameters, holdout and seed.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The calibration file to write (use it with timing: {type: default, calibration: FILE}).")
@click.option("--holdout", help="Runs to keep out of the fit: a fraction of the deployments (0.25) or run names "
                                "(a,b). Default: RUNS.yaml's holdout, else a quarter of the deployments when "
                                "there are several.")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing --output file, only one simmodel calibrate wrote (a YAML mapping whose "
                   "one key is calibration).")
@click.option("--jobs", type=click.IntRange(1, 256), default=None,
              help="Worker processes that simulate the fit runs side by side (the result does not depend on it). "
                   "Default: this machine's cores.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def calibrate(runs_path: Path, output: Path, holdout: str | None, overwrite: bool, jobs: int | None,
              fmt: str) -> None:
    """Fit the default performance model's named parameters to measured runs, and report the error
    before and after on the fit runs and on held-out ones (docs/calibration.md)."""
    import importlib.util

    from simmodel.calibrate.fit import calibrate as fit
    from simmodel.calibrate.fit import check_output, format_report, load_runs, probe_output, report, write_calibration

    check_output(output, overwrite)
    if importlib.util.find_spec("scipy") is None:
        raise ScenarioError("simmodel calibrate needs SciPy; pip install 'simmodel[calibrate]'")
    plan = load_runs(runs_path, holdout)
    probe_output(output)
    values = fit(plan, jobs=jobs or os.cpu_count() or 1)
    document = report(plan, values)
    write_calibration(output, document, overwrite)
    click.echo(json.dumps(document, indent=2) if fmt == "json" else format_report(document))
    warning = document["calibration"]["warning"]
    if warning:
        click.echo(f"simmodel: warning: {warning}", err=True)


def _choice(path: str, value) -> str:
    """A searched value, short: ``prefill.max_sequences=4``, ``decode.parallelism=tensor 2``."""
    name = path.removeprefix("engine.workers.").replace(".scheduler.", ".").replace(".parallelism.", ".")
    if isinstance(value, dict):
        return f"{name}=" + " ".join(f"{k} {v}" for k, v in value.items() if v != 1 or k == "tensor")
    return f"{name}={value}"


def format_ranking(spec, entries: list[dict], top: list[dict], output_dir: Path) -> str:
    """The best candidates as a table: rank, objectives, GPUs and the values chosen."""
    feasible = sum(e["status"] == "feasible" for e in entries)
    what = "Pareto front of " + " and ".join(m for m, _ in spec.objectives) if spec.target == "pareto" \
        else f"target {spec.target}"
    lines = [f"{len(entries)} candidates, {feasible} feasible; {what} (ledger in {output_dir})"]
    if top:
        names = [m for m, _ in spec.objectives]
        lines.append(f"{'rank':>4}  " + "  ".join(f"{n:>26}" for n in names) + "  GPUs  choices")
    for i, e in enumerate(top, start=1):
        shown = ", ".join(_choice(k, v) for k, v in e["choices"].items())
        values = "  ".join(f"{e['objectives'][n]:>26.4f}" for n in names)
        lines.append(f"{i:>4}  {values}  {e['metrics']['gpu_count']:>4}  {shown}")
    return "\n".join(lines)


@cli.group()
def traces() -> None:
    """Public request traces: those shipped with simmodel (path: builtin:NAME in a scenario) and the full
    ones `simmodel traces fetch` downloads (simmodel/data/traces/README.md)."""


@traces.command("list")
def traces_list() -> None:
    """One line per trace: name, size, licence, where it comes from."""
    from simmodel.config.catalog import BUILTIN, BUILTIN_PREFIX, FETCHABLE

    rows = [(BUILTIN_PREFIX + t.name, t) for t in BUILTIN.values()] + [(t.name, t) for t in FETCHABLE.values()]
    width = max(len(name) for name, _ in rows)
    click.echo(f"{'name':<{width}}  {'bytes':>9}  {'licence':<10}  source")
    for name, t in rows:
        click.echo(f"{name:<{width}}  {t.size_bytes:>9,}  {t.licence:<10}  {t.source}")


def download_bar(total_bytes: int, label: str, stream=None):
    """A tqdm bar of bytes received on a terminal's stderr; None off a terminal (a CI log gets no bar)."""
    stream = stream or sys.stderr
    if not stream.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, desc=label, file=stream,
                leave=False)


@traces.command("fetch")
@click.argument("name")
@click.option("--to", "folder", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="The folder to write the file into (created if missing).")
@click.option("--overwrite", is_flag=True, help="Replace an existing file of that name (once the download "
                                                "has checked out).")
def traces_fetch(name: str, folder: Path, overwrite: bool) -> None:
    """Download the full public trace NAME (see `simmodel traces list`) into --to, check its SHA-256, and
    print the path written. Exit 1 when the download fails or its checksum differs (nothing is left)."""
    from simmodel.traffic.download import FetchError, fetch_trace, fetchable

    trace = fetchable(name)
    bar = download_bar(trace.size_bytes, trace.file)
    failure = None
    try:
        path = fetch_trace(name, folder, overwrite=overwrite, on_bytes=None if bar is None else bar.update)
    except FetchError as exc:
        failure = _one_line(exc)
    finally:
        if bar is not None:  # erased before any message, so the message is a line of its own
            bar.close()
    if failure is not None:
        click.echo(f"simmodel: traces fetch: {failure}", err=True)
        sys.exit(1)
    click.echo(str(path))


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--output", type=click.Path(path_type=Path), help="The HTML report to write (default: "
                                                                 "RUN_DIR/report.html).")
@click.option("--png", "png_dir", type=click.Path(path_type=Path), help="Also write each chart as a PNG into "
                                                                         "this folder (needs kaleido).")
def plot(run_dir: Path, output: Path | None, png_dir: Path | None) -> None:
    """Draw a run folder (simmodel run --output-dir) as one self-contained HTML report: latency CDFs, latency
    by arrival, queue depth, batch, token and KV timelines per worker and rank, per-stage bars (docs/plots.md).
    Needs the plot extra: pip install 'simmodel[plot]'."""
    try:
        from simmodel.plots.report import PlotError, report_html, write_pngs
    except ImportError as exc:
        raise click.UsageError(f"plot needs the plot extra ({exc.name} is missing): pip install 'simmodel[plot]'") \
            from None
    try:
        page = report_html(run_dir)
        written = write_pngs(run_dir, png_dir) if png_dir is not None else []
    except PlotError as exc:
        click.echo(f"simmodel: plot: {exc}", err=True)
        sys.exit(2)
    target = output or run_dir / "report.html"
    if target.is_dir() or not target.parent.is_dir():
        click.echo(f"simmodel: plot: --output {target}: "
                   f"{'is a folder' if target.is_dir() else 'its folder does not exist'}", err=True)
        sys.exit(2)
    try:
        write_whole(target, page)
    except OSError as exc:
        click.echo(f"simmodel: plot: --output {target}: {exc.strerror or exc}", err=True)
        sys.exit(2)
    note_written(run_dir, [target, *written])  # (a run folder stays simmodel's to --overwrite)
    click.echo(str(target))
    for path in written:
        click.echo(str(path))


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", type=click.IntRange(min=1, max=65535), default=8000, show_default=True)
@click.option("--token", envvar="SIMMODEL_API_TOKEN", help="Bearer token every call must carry (also "
                                                           "SIMMODEL_API_TOKEN); none: no authentication.")
@click.option("--max-requests", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Requests one call may simulate.")
@click.option("--max-total-tokens", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="Prompt plus output tokens one call may simulate.")
@click.option("--max-passes", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Passes one call's run may take (a run needing more is refused).")
def serve(host: str, port: int, token: str | None, max_requests: int, max_total_tokens: int,
          max_passes: int) -> None:
    """Serve the HTTP API: scenario runs (POST /api/scenarios), the ready scenarios, and OpenAI-compatible
    timing estimates (POST /v1/completions, /v1/chat/completions); OpenAPI docs at /docs (docs/serve.md).
    Needs the serve extra: pip install 'simmodel[serve]'."""
    try:
        import uvicorn

        from simmodel.serve.app import create_app
    except ImportError as exc:
        raise click.UsageError(f"serve needs the serve extra ({exc.name} is missing): "
                               f"pip install 'simmodel[serve]'") from None
    from simmodel.serve.workload import ServeLimits

    app = create_app(token or None, ServeLimits(max_requests, max_total_tokens, max_passes))
    uvicorn.run(app, host=host, port=port)


_ENDS_PROCESS = False
"""Whether the command runs as its own process (``main``), which ends when the command returns."""


def main() -> None:
    """The ``simmodel`` command, a process of its own. ``run`` then keeps Python's cyclic collector off for its whole
    run, not only while the simulation runs (``engine.collector``): turned back on, its first pass would scan every
    object the run made and free none (0.4 s after the 20,000-request SGLang P/D run of ``benchmarks/vs_dynamo.py``).
    On the way out every object is frozen (``gc.freeze``), so that Python's shutdown leaves them to the operating
    system instead of scanning them and freeing a finished simulation (a reference cycle) object by object: 0.1 s
    after that benchmark's ``1w poly`` run, 0.4 s after its ``2P2D`` and over 1 s after its SGLang twin. The exit
    status, ``atexit`` hooks and a profiler's output are Python's own."""
    global _ENDS_PROCESS
    _ENDS_PROCESS = True
    try:
        cli()
    finally:
        gc.freeze()


if __name__ == "__main__":
    main()
