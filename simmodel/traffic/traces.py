"""Readers for request traces: Mooncake JSONL, Azure LLM inference CSV, and a plain CSV.

Each returns a ``TraceData`` whose arrivals are shifted so the first one is at 0 s. Bad rows raise
``ScenarioError`` naming the file, the line and the rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simmodel.config.json_safe import parse_json
from simmodel.errors import ScenarioError
from simmodel.paths import is_file

if TYPE_CHECKING:
    import pandas as pd

MAX_ABS_VALUE = 1e18
"""The largest magnitude a trace's number may have before its own rule (arrivals spanning 1e9 s, lengths
of 1e9 tokens) judges it: within int64 and far from float64's overflow."""
MAX_SPAN_S = 1e9
"""The longest a trace's arrivals may span once divided by ``speedup`` (``simmodel.sim.load_trace``): simulated
times, integer nanoseconds, stay well inside int64."""


@dataclass(frozen=True, slots=True)
class TraceData:
    """One row per request, in file order."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    dp_rank: np.ndarray
    """Attention-DP rank hint per row (the decode rank when disaggregated), -1 where the row names none."""
    prefill_dp_rank: np.ndarray
    """Prefill-worker rank hint per row (disaggregated serving), -1 where the row names none."""
    hash_ids: list[tuple[int, ...] | None]

    def __len__(self) -> int:
        return len(self.arrival_s)


def read_trace(path: Path, fmt: str, *, require_monotone: bool) -> TraceData:
    """Read and validate a trace file of format ``fmt`` (one of ``simmodel.config.schema.TRACE_FORMATS``)."""
    if not is_file(path):
        raise ScenarioError(f"{path}: trace file not found")
    reader = {"mooncake": _read_mooncake, "azure": _read_azure, "csv": _read_csv}[fmt]
    arrival, isl, osl, dp_rank, prefill_dp_rank, hash_ids, lines = reader(path)
    if len(arrival) == 0:
        raise ScenarioError(f"{path}: trace has no requests")
    _check_rows(path, lines, arrival, isl, osl, dp_rank, require_monotone)
    _check_rows(path, lines, arrival, isl, osl, prefill_dp_rank, False, "prefill_dp_rank")
    for values, rule in ((arrival - arrival.min(), "arrivals must span at most 1e9 s"),
                         (isl, "input length must be at most 1,000,000,000"),
                         (osl, "output length must be at most 1,000,000,000")):
        if len(values) and values.max() > 1e9:
            row = int(np.argmax(values))
            raise ScenarioError(f"{path}:{lines[row]}: {rule}")
    return TraceData(arrival - arrival[0] if require_monotone else arrival - arrival.min(),
                     isl, osl, dp_rank, prefill_dp_rank, hash_ids)


def _csv_lines(n: int) -> list[int]:
    """File line of each data row of a CSV with one header line."""
    return list(range(2, n + 2))


def _check_rows(path: Path, lines: list[int], arrival: np.ndarray, isl: np.ndarray, osl: np.ndarray,
                dp_rank: np.ndarray, require_monotone: bool, rank_column: str = "dp_rank") -> None:
    checks = (
        # NOTE: bounded before any difference is taken: 1e308 and -1e308 are finite, but their difference
        # overflows (a numpy RuntimeWarning before the error); any two values within ±1e18 subtract exactly enough.
        (~(np.abs(arrival) <= MAX_ABS_VALUE), "arrival time must be a finite number within ±1e18 s"),
        (isl < 1, "input length must be a positive integer"),
        (osl < 1, "output length must be a positive integer"),
        (dp_rank < -1, f"{rank_column} must be a non-negative integer"),
    )
    for bad, rule in checks:
        if bad.any():
            row = int(np.argmax(bad))
            raise ScenarioError(f"{path}:{lines[row]}: {rule}")
    if require_monotone and len(arrival) > 1:
        back = np.diff(arrival) < 0
        if back.any():
            row = int(np.argmax(back)) + 1
            raise ScenarioError(f"{path}:{lines[row]}: timestamps must not decrease "
                                f"({arrival[row - 1]:g} then {arrival[row]:g})")


def _int_field(obj: dict, key: str, path: Path | str, lineno: int | None = None) -> int:
    """``obj[key]`` as an integer, or one error naming the file and line (``path:lineno``; ``path`` alone names
    the place when ``lineno`` is None)."""
    value = obj.get(key)
    if type(value) is int and -MAX_ABS_VALUE <= value <= MAX_ABS_VALUE:  # (most values: the checks below pass)
        return value
    where = str(path) if lineno is None else f"{path}:{lineno}"
    if value is None:
        raise ScenarioError(f"{where}: missing field '{key}'")
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value != int(value)):
        raise ScenarioError(f"{where}: '{key}' must be an integer, got {_short(value)}")
    if abs(value) > MAX_ABS_VALUE:
        raise ScenarioError(f"{where}: '{key}' is out of range, got {_short(value)}")
    return int(value)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _text_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (a byte-order mark at its start is dropped), split at newlines only
    (a JSON string may hold U+2028); bytes that are not UTF-8 are one line naming the file."""
    try:
        return path.read_text(encoding="utf-8-sig").split("\n")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not a UTF-8 text file (byte {exc.start} is not UTF-8)") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _read_mooncake(path: Path):
    arrival, isl, osl, dp_rank, prefill_dp_rank, hash_ids, lines = [], [], [], [], [], [], []
    for lineno, line in enumerate(_text_lines(path), 1):
        if not line.strip():
            continue
        lines.append(lineno)
        obj = parse_json(line, f"{path}:{lineno}", numbered=False)
        if not isinstance(obj, dict):
            raise ScenarioError(f"{path}:{lineno}: each line must be a JSON object")
        ts = obj.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
            raise ScenarioError(f"{path}:{lineno}: 'timestamp' must be a number of milliseconds, got {_short(ts)}")
        arrival.append(float(ts) / 1000.0)
        isl.append(_int_field(obj, "input_length", path, lineno))
        osl.append(_int_field(obj, "output_length", path, lineno))
        dp_rank.append(_int_field(obj, "dp_rank", path, lineno) if "dp_rank" in obj else -1)
        prefill_dp_rank.append(_int_field(obj, "prefill_dp_rank", path, lineno) if "prefill_dp_rank" in obj else -1)
        hashes = obj.get("hash_ids")
        if hashes is not None and (not isinstance(hashes, list) or not set(map(type, hashes)) <= _JSON_INTEGERS):
            raise ScenarioError(f"{path}:{lineno}: 'hash_ids' must be a list of integers")
        hash_ids.append(tuple(hashes) if hashes is not None else None)
    return (np.array(arrival, dtype=np.float64), np.array(isl, dtype=np.int64),
            np.array(osl, dtype=np.int64), np.array(dp_rank, dtype=np.int64),
            np.array(prefill_dp_rank, dtype=np.int64), hash_ids, lines)


_JSON_INTEGERS = {int, bool}
"""The types of JSON values ``isinstance(value, int)`` holds for (``json`` makes no other subclass of int)."""


def _read_table(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError, OverflowError) as exc:
        raise ScenarioError(f"{path}: not a readable CSV file ({' '.join(str(exc).split())})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        found = ", ".join(" ".join(str(c).split()) for c in frame.columns)
        raise ScenarioError(f"{path}: missing column(s) {', '.join(missing)} "
                            f"(found {found if len(found) <= 200 else found[:197] + '...'})")
    return frame


def _int_column(path: Path, frame: pd.DataFrame, column: str, blank: int | None = None) -> np.ndarray:
    """An integer column; empty cells become ``blank`` where that is allowed."""
    import pandas as pd

    cells = frame[column]
    values = pd.to_numeric(cells, errors="coerce").to_numpy(dtype=np.float64)
    if blank is not None:
        values = np.where(cells.isna().to_numpy(), float(blank), values)
    for bad, rule in ((~np.isfinite(values) | (values != np.round(values)), "must be an integer"),
                      # checked before the cast to int64, which turns 2**70 into garbage with a RuntimeWarning
                      (np.abs(values) > MAX_ABS_VALUE, "is out of range (at most 1e18 in magnitude)")):
        if bad.any():
            row = int(np.argmax(bad))
            cell = cells.iloc[row]
            shown = "an empty cell" if pd.isna(cell) else _short(str(cell))
            raise ScenarioError(f"{path}:{row + 2}: column {column} {rule}, got {shown}")
    return values.astype(np.int64)


def _read_azure(path: Path):
    import pandas as pd

    frame = _read_table(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"))
    # The 2023 traces carry 7 fractional digits; datetime parsing takes at most 6.
    try:
        stamps = pd.to_datetime(frame["TIMESTAMP"].astype(str).str.slice(0, 26), format="ISO8601",
                                errors="coerce")
    except (ValueError, OverflowError, TypeError) as exc:  # e.g. time zones that differ between rows
        raise ScenarioError(f"{path}: TIMESTAMP column is not one consistent date and time format "
                            f"({' '.join(str(exc).split())})") from None
    if stamps.isna().any():
        row = int(np.argmax(stamps.isna().to_numpy()))
        raise ScenarioError(f"{path}:{row + 2}: TIMESTAMP {frame['TIMESTAMP'].iloc[row]!r} "
                            f"is not a date and time")
    arrival = (stamps - stamps.iloc[0]).dt.total_seconds().to_numpy(dtype=np.float64)
    n = len(frame)
    return (arrival, _int_column(path, frame, "ContextTokens"), _int_column(path, frame, "GeneratedTokens"),
            np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64), [None] * n, _csv_lines(n))


def _read_csv(path: Path):
    import pandas as pd

    frame = _read_table(path, ("arrival_s", "input_tokens", "output_tokens"))
    arrival = pd.to_numeric(frame["arrival_s"], errors="coerce").to_numpy(dtype=np.float64)
    n = len(frame)
    dp_rank, prefill_dp_rank = (
        _int_column(path, frame, column, blank=-1) if column in frame.columns else np.full(n, -1, dtype=np.int64)
        for column in ("dp_rank", "prefill_dp_rank"))
    return (arrival, _int_column(path, frame, "input_tokens"), _int_column(path, frame, "output_tokens"),
            dp_rank, prefill_dp_rank, [None] * n, _csv_lines(n))
