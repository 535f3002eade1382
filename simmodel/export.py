"""Write a command's results to a folder, all or nothing, and never over what simmodel did not write.

Files are written into a temporary sibling folder and moved into place only when all of them are
complete, so a failed run never leaves half-written output behind. Each output folder holds a manifest
(``.simmodel-output.json``) listing what simmodel wrote there: ``--overwrite`` replaces only such a
folder, and removes only what it lists.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import simmodel
from simmodel.errors import ScenarioError
from simmodel.metrics.summarize import EVENT_KINDS
from simmodel.paths import current_umask
from simmodel.sim import Results


def has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


MANIFEST = ".simmodel-output.json"
"""The file that marks a folder simmodel wrote: the tool, its version, the command, and every file and
subfolder it wrote there. ``--overwrite`` replaces a folder only when all it holds is listed here, and
removes only what is listed."""


def _refused_place(target: Path, scenario: Path | None) -> str | None:
    """Why the real folder ``target`` can never be an output folder (it is replaced whole), or None.

    A folder that is, or holds, the current folder, the home folder or the scenario's folder would take
    them with it; the filesystem root holds everything."""
    if target == Path(target.anchor):
        return "is the filesystem root"
    places = [("the current folder", Path.cwd), ("the home folder", Path.home)]
    if scenario is not None:
        places.append(("the scenario's folder", lambda: Path(scenario).resolve().parent))
    for name, where in places:
        try:
            place = where().resolve()
        except (OSError, KeyError, RuntimeError):  # a current folder removed, no home: nothing to protect
            continue
        if target == place:
            return f"is {name}"
        if target in place.parents:
            return f"holds {name} ({place})"
    return None


def read_manifest(folder: Path) -> dict | None:
    """The manifest simmodel left in ``folder``, or None when there is none or it is not one simmodel wrote
    (a JSON object with ``written_by: simmodel`` and lists of names ``files`` and ``folders``)."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("written_by") != "simmodel":
        return None
    if not all(isinstance(data.get(k), list) and all(isinstance(n, str) for n in data[k])
               for k in ("files", "folders")):
        return None
    return data


def _entries(folder: Path, under: str = "") -> list[tuple[str, str]]:
    """Everything in ``folder``, depth first in name order, as (path relative to it, kind): ``file``,
    ``folder`` or ``link`` (never followed: a link is not something simmodel writes)."""
    found = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        rel = f"{under}{entry.name}"
        if entry.is_symlink():
            found.append((rel, "link"))
        elif entry.is_dir(follow_symlinks=False):
            found.append((rel, "folder"))
            found += _entries(Path(entry.path), f"{rel}/")
        else:
            found.append((rel, "file"))
    return found


def _foreign(entries: list[tuple[str, str]], manifest: dict) -> str | None:
    """The first entry the manifest does not list as what it is (a file as a file, a folder as a folder)."""
    files, folders = set(manifest["files"]) | {MANIFEST}, set(manifest["folders"])
    for rel, kind in entries:
        if not ((kind == "file" and rel in files) or (kind == "folder" and rel in folders)):
            return rel
    return None


def check_output_dir(path: Path, overwrite: bool, scenario: Path | None = None,
                     option: str = "--output-dir") -> None:
    """Refuse an output folder simmodel may not replace: a path that is a file or one the OS refuses; the
    current, home or scenario's folder or one holding them, or the filesystem root (compared as real
    paths, links resolved); a non-empty folder without simmodel's manifest; one with it, unless
    ``overwrite``, and then only if everything in it is listed in the manifest. An empty folder is fine."""
    try:
        target = path.resolve()
        target.exists()
    except (OSError, ValueError, RuntimeError) as exc:  # a name too long, a loop of links
        raise ScenarioError(f"{option} {path}: cannot write there: {getattr(exc, 'strerror', None) or exc}") \
            from None
    why = _refused_place(target, scenario)
    if why is not None:
        raise ScenarioError(f"{option} {path}: {why}; simmodel replaces an output folder whole, so it must be a "
                            f"folder of its own (e.g. {option} runs/NAME)")
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{option} {path}: exists and is not a folder")
    if not target.is_dir():
        return
    entries = _entries(target)
    if not entries:
        return
    manifest = read_manifest(target)
    if manifest is None:
        raise FileExistsError(f"{option} {path}: folder is not empty and simmodel did not write it (no {MANIFEST} "
                              f"in it); simmodel replaces only its own output: give a new or empty folder")
    if not overwrite:
        raise FileExistsError(f"{option} {path}: folder is not empty: it holds simmodel's earlier output "
                              f"(use --overwrite to replace it)")
    foreign = _foreign(entries, manifest)
    if foreign is not None:
        raise FileExistsError(f"{option} {path}: holds {foreign}, which simmodel did not write (not in its "
                              f"{MANIFEST}); --overwrite replaces only simmodel's own output: move it away")


def write_whole(path: Path, text: str) -> None:
    """Write ``path`` whole: a temporary file beside it, renamed over it, with an ordinary new file's permissions.
    An OS error (a full disk) is raised with ``path`` as it was and no temporary file left."""
    name = None
    try:
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(handle, "w") as f:
            f.write(text)
        os.chmod(name, 0o666 & ~current_umask())  # (not mkstemp's private mode)
        os.replace(name, path)
        name = None
    finally:
        if name is not None:
            Path(name).unlink(missing_ok=True)


def json_clean(value):
    """JSON has no NaN nor infinities: ``null`` instead, in mappings and lists at any depth."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_clean(v) for v in value]
    return value


def summary_json(summary: dict) -> str:
    return json.dumps(json_clean(summary), indent=2, sort_keys=False) + "\n"


CSV_CHUNK_ROWS = 65_536
"""Rows formatted and written at a time: a long run's passes.csv has millions of rows, whose cells, made at
once, would take gigabytes."""


def write_csv(path: Path, columns: dict[str, np.ndarray | list]) -> None:
    """Write a table given as columns (``plain_columns``, ``passes_table``, ``event_columns``) as pandas'
    ``to_csv(index=False)`` writes the same frame, byte for byte, without building one: the columns are turned
    into text cells a chunk of rows at a time (``_csv_cells``), and each chunk's lines are joined and written
    at once. pandas writes with the csv module (minimal quoting, ``\n`` line ends); joining the cells
    directly gives the same text in a third of the time."""
    values = list(columns.values())
    num_rows = len(values[0]) if values else 0
    with path.open("w", encoding="utf-8", newline="") as f:
        f.write(",".join(_csv_cells(list(columns))) + "\n")
        for start in range(0, num_rows, CSV_CHUNK_ROWS):
            cells = [_csv_cells(column[start:start + CSV_CHUNK_ROWS]) for column in values]
            f.write("\n".join(map(",".join, zip(*cells))) + "\n")


def _csv_cells(values: np.ndarray | list) -> list[str]:
    """One column's cells as pandas makes them (``get_values_for_csv``) and the csv module writes them: a
    float's is numpy's ``astype(str)``, which is Python's shortest round-trip ``repr`` (the same text, in
    half the time), NaN and None an empty cell, an integer its digits, a string itself, quoted when it holds
    a comma, a quote or a line break (``_quoted``)."""
    if isinstance(values, np.ndarray):
        if values.dtype.kind == "f":
            cells = list(map(float.__repr__, values.tolist()))
            for i in np.flatnonzero(np.isnan(values)).tolist():
                cells[i] = ""
            return cells
        if values.dtype.kind in "iub":  # (digits, or True and False: ``str`` of each)
            return list(map(str, values.tolist()))
        values = values.tolist()
    if all(type(v) is str for v in values):
        quoted = {v: _quoted(v) for v in set(values) if _needs_quotes(v)}
        return [quoted.get(v, v) for v in values] if quoted else values
    return ["" if v is None else _quoted(v) if isinstance(v, str) and _needs_quotes(v) else str(v) for v in values]


def _needs_quotes(text: str) -> bool:
    """Whether ``text`` holds a character the csv module may quote a cell for (a comma, a quote, a line break)."""
    return "," in text or '"' in text or "\n" in text or "\r" in text


def _quoted(text: str) -> str:
    """The cell the csv module writes for ``text`` (the rules of its minimal quoting vary by Python version:
    3.11 leaves a lone carriage return unquoted), asked of it for the rare cell that may need quotes."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow([text])
    return out.getvalue()[:-1]


def write_events(columns: dict[str, np.ndarray], folder: Path) -> str:
    """Write the event log (``event_columns``): events.parquet, or events.csv without pyarrow."""
    if has_pyarrow():
        import pyarrow.parquet as pq

        from simmodel.metrics.event_sink import events_table

        name = "events.parquet"
        pq.write_table(events_table(columns), folder / name, compression="snappy")
    else:
        name = "events.csv"
        data: dict[str, np.ndarray | list] = dict(columns)
        data["kind"] = [EVENT_KINDS[k] for k in columns["kind"].tolist()]
        write_csv(folder / name, data)
    return name


def _staging(target: Path, path: Path, option: str) -> Path:
    """A new folder beside ``target`` (``path`` as the user gave it, links resolved), with an ordinary new
    folder's permissions."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as exc:
        raise ScenarioError(f"{option} {path}: cannot write there: {exc.strerror or exc}") from None
    os.chmod(staging, 0o777 & ~current_umask())
    return staging


def probe_output_dir(path: Path, overwrite: bool, scenario: Path | None = None,
                     option: str = "--output-dir") -> None:
    """Before a long run: ``path`` is allowed (``check_output_dir``) and its folder can be written to."""
    check_output_dir(path, overwrite, scenario, option)
    _staging(path.resolve(), path, option).rmdir()


def write_manifest(folder: Path, command: str) -> None:
    """List everything in ``folder`` (all of it written by simmodel) in its manifest."""
    entries = _entries(folder)
    manifest = {"written_by": "simmodel", "version": simmodel.__version__, "command": command,
                "files": [rel for rel, kind in entries if kind == "file"],
                "folders": [rel for rel, kind in entries if kind == "folder"]}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def note_written(folder: Path, written: list[Path]) -> None:
    """Add files simmodel wrote later into an output folder of its own (``simmodel plot``'s report and images in a
    run folder) to its manifest, with the folders between, so that ``--overwrite`` still replaces the folder
    whole. A folder without simmodel's manifest, or a file outside it, is left alone."""
    manifest = read_manifest(folder)
    if manifest is None:
        return
    root = folder.resolve()
    files, folders = list(manifest["files"]), list(manifest["folders"])
    for path in written:
        try:
            rel = path.resolve().relative_to(root)
        except ValueError:
            continue
        for parent in reversed(rel.parents[:-1]):
            if parent.as_posix() not in folders:
                folders.append(parent.as_posix())
        if rel.as_posix() not in files:
            files.append(rel.as_posix())
    manifest |= {"files": files, "folders": folders}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _remove_listed(target: Path) -> None:
    """Remove simmodel's earlier output in ``target``, and the folder: the entries its manifest lists, files
    first, deepest folders first. Whatever else is there (checked just before) stops it."""
    entries = _entries(target)
    for rel, kind in entries:
        if kind == "file":
            (target / rel).unlink()
    for rel, kind in reversed(entries):
        if kind == "folder":
            (target / rel).rmdir()
    target.rmdir()


@contextmanager
def staged_folder(path: Path, overwrite: bool, command: str, scenario: Path | None = None,
                  option: str = "--output-dir"):
    """A temporary folder beside ``path`` to fill; when the block ends, its manifest is written and it
    is moved into place whole (an earlier output there is removed, only what its manifest lists), or it
    is removed if anything fails, so ``path`` is never half-written. The folder is checked
    (``check_output_dir``) before and again just before it is replaced. An OS error while writing (a full
    disk) leaves ``path`` as it was and names the option."""
    check_output_dir(path, overwrite, scenario, option)
    target = path.resolve()
    staging = _staging(target, path, option)
    try:
        try:
            yield staging
            write_manifest(staging, command)
        except OSError as exc:
            if isinstance(exc, FileExistsError):
                raise
            raise OSError(exc.errno, f"cannot write: {exc.strerror or _first_line(exc)}; {path} is left as it was",
                          f"{option} {path}") from None
        check_output_dir(path, overwrite, scenario, option)
        if target.is_dir():
            _remove_listed(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def write_results(results: Results, path: Path, overwrite: bool, events: str = "memory",
                  streamed: Path | None = None, scenario: Path | None = None) -> list[str]:
    """Write summary.json, requests.csv, passes.csv and the event log to ``path``: ``events`` ``memory``
    writes ``results.events`` (events.parquet, or events.csv without pyarrow), ``stream`` moves in the
    Parquet file a ``ParquetEventSink`` wrote at ``streamed``, ``off`` writes none."""
    with staged_folder(path, overwrite, "run", scenario) as staging:
        (staging / "summary.json").write_text(summary_json(results.summary), encoding="utf-8")
        requests = results.request_columns()
        if requests is None:  # a column of a type the columnar writer does not write as pandas would
            results.requests.to_csv(staging / "requests.csv", index=False)
        else:
            write_csv(staging / "requests.csv", requests)
        write_csv(staging / "passes.csv", results.pass_columns())
        names = ["summary.json", "requests.csv", "passes.csv"]
        replicas = results.replica_columns()
        if replicas is not None:  # a replica planner ran: its pools over time
            write_csv(staging / "replicas.csv", replicas)
            names.append("replicas.csv")
        if events == "memory":
            names.append(write_events(results.event_columns(), staging))
        elif events == "stream":
            assert streamed is not None
            shutil.move(str(streamed), staging / "events.parquet")
            # the stream's file was made by mkstemp, owner-only: give it an ordinary new file's permissions
            os.chmod(staging / "events.parquet", 0o666 & ~current_umask())
            names.append("events.parquet")
    return names


def write_files(path: Path, overwrite: bool, files: dict[str, str], command: str,
                scenario: Path | None = None) -> None:
    """Write text files (name → content) into ``path`` whole, as ``command``'s output."""
    with staged_folder(path, overwrite, command, scenario) as staging:
        for name, text in files.items():
            (staging / name).write_text(text, encoding="utf-8")
