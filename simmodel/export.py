"""Write a run's results to a folder, all or nothing.

Files are written into a temporary sibling folder and moved into place only when all of them are
complete, so a failed run never leaves half-written output behind.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from simmodel.errors import ScenarioError
from simmodel.sim import Results

if TYPE_CHECKING:
    import pandas as pd


def has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def check_output_dir(path: Path, overwrite: bool) -> None:
    """Refuse a non-empty folder without ``overwrite``, a path that is a file, or one the OS refuses."""
    try:
        path.exists()
    except (OSError, ValueError) as exc:  # a name too long, say
        raise ScenarioError(f"--output-dir {path}: cannot write there: {getattr(exc, 'strerror', None) or exc}") \
            from None
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"--output-dir {path}: exists and is not a folder")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise FileExistsError(f"--output-dir {path}: folder is not empty (use --overwrite to replace it)")


def _clean(value):
    """JSON has no NaN: write ``null`` instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


def summary_json(summary: dict) -> str:
    return json.dumps(_clean(summary), indent=2, sort_keys=False) + "\n"


def write_events(frame: pd.DataFrame, folder: Path) -> str:
    if has_pyarrow():
        name = "events.parquet"
        frame.to_parquet(folder / name, index=False)
    else:
        name = "events.csv"
        frame.to_csv(folder / name, index=False)
    return name


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _staging(path: Path) -> Path:
    """A new folder beside ``path``, with an ordinary new folder's permissions."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    except OSError as exc:
        raise ScenarioError(f"--output-dir {path}: cannot write there: {exc.strerror or exc}") from None
    os.chmod(staging, 0o777 & ~current_umask())
    return staging


def probe_output_dir(path: Path, overwrite: bool) -> None:
    """Before a long run: ``path`` is allowed (``check_output_dir``) and its folder can be written to."""
    check_output_dir(path, overwrite)
    _staging(path).rmdir()


@contextmanager
def staged_folder(path: Path, overwrite: bool):
    """A temporary folder beside ``path`` to fill; moved into place whole when the block ends, or removed
    if it fails, so ``path`` is never half-written."""
    check_output_dir(path, overwrite)
    staging = _staging(path)
    try:
        yield staging
        if path.exists():
            shutil.rmtree(path)
        os.replace(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_results(results: Results, path: Path, overwrite: bool, events: str = "memory",
                  streamed: Path | None = None) -> list[str]:
    """Write summary.json, requests.csv, passes.csv and the event log to ``path``: ``events`` ``memory``
    writes ``results.events`` (events.parquet, or events.csv without pyarrow), ``stream`` moves in the
    Parquet file a ``ParquetEventSink`` wrote at ``streamed``, ``off`` writes none."""
    with staged_folder(path, overwrite) as staging:
        (staging / "summary.json").write_text(summary_json(results.summary), encoding="utf-8")
        results.requests.to_csv(staging / "requests.csv", index=False)
        results.passes.to_csv(staging / "passes.csv", index=False)
        names = ["summary.json", "requests.csv", "passes.csv"]
        if events == "memory":
            names.append(write_events(results.events, staging))
        elif events == "stream":
            assert streamed is not None
            shutil.move(str(streamed), staging / "events.parquet")
            names.append("events.parquet")
    return names


def write_files(path: Path, overwrite: bool, files: dict[str, str]) -> None:
    """Write text files (name → content) into ``path`` whole."""
    with staged_folder(path, overwrite) as staging:
        for name, text in files.items():
            (staging / name).write_text(text, encoding="utf-8")
