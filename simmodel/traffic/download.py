"""Downloading a full public trace (``simmodel traces fetch``): from its pinned upstream URL, checked
against the catalogue's SHA-256 before it is given its name, so that a file of that name is always the
published one and an interrupted or corrupted download leaves nothing behind."""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from simmodel.config.catalog import FETCHABLE, PublicTrace
from simmodel.errors import ScenarioError
from simmodel.paths import current_umask

BASE_URL_VARIABLE = "SIMMODEL_TRACES_BASE_URL"
"""Environment variable: fetch ``<base>/<file name>`` instead of the upstream URL (a mirror, or a test's
local server or folder; ``http://``, ``https://`` or ``file://``)."""

_CHUNK_BYTES = 1 << 16
_TIMEOUT_S = 60.0


class FetchError(RuntimeError):
    """A download that did not give the published file: the network failed or the bytes differ."""


def fetchable(name: str) -> PublicTrace:
    """The catalogue entry ``name``; an unknown name is bad input (the message lists the names)."""
    trace = FETCHABLE.get(name)
    if trace is None:
        raise ScenarioError(f"traces fetch: unknown trace {name!r} (known: {', '.join(FETCHABLE)})")
    return trace


def trace_url(trace: PublicTrace) -> str:
    """Where to download ``trace`` from: its upstream URL, or the file under ``$SIMMODEL_TRACES_BASE_URL``."""
    base = os.environ.get(BASE_URL_VARIABLE)
    if not base:
        return trace.url
    if not base.startswith(("http://", "https://", "file://")):
        raise ScenarioError(f"{BASE_URL_VARIABLE}: {base!r}: must be an http://, https:// or file:// URL")
    return f"{base.rstrip('/')}/{trace.file}"


def fetch_trace(name: str, folder: Path, *, overwrite: bool = False,
                on_bytes: Callable[[int], None] | None = None) -> Path:
    """Download trace ``name`` into ``folder`` under its upstream file name and return the path.

    The bytes go to a hidden temporary file in ``folder``, which is renamed into place only when its
    size and SHA-256 are the catalogue's; on any failure it is removed. ``on_bytes`` is told the size
    of each chunk received (a progress bar).

    Raises:
        ScenarioError: an unknown name, a malformed ``$SIMMODEL_TRACES_BASE_URL``, ``folder`` is not a folder,
            or the file exists and not ``overwrite``.
        FetchError: the download failed or its bytes are not the published file's.
    """
    trace = fetchable(name)
    url = trace_url(trace)
    target = folder / trace.file
    _check_target(target, overwrite)
    made = _missing_folders(folder)
    folder.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=f".{trace.file}.", suffix=".part", dir=folder)
    try:
        with os.fdopen(handle, "wb") as out:
            digest = _download(trace, url, out, on_bytes)
        if digest != trace.sha256:
            raise FetchError(f"{name}: checksum mismatch (sha256 {digest}, expected {trace.sha256}); "
                             f"nothing written")
        _check_target(target, overwrite)  # a file of that name may have appeared meanwhile
        os.chmod(partial, 0o666 & ~current_umask())  # mkstemp's file is the owner's alone; a download is not
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        for created in made:  # the folders this call made, deepest first, if nothing else came into them
            try:
                created.rmdir()
            except OSError:
                break
        raise
    return target


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _check_target(target: Path, overwrite: bool) -> None:
    """Refuse a folder that is not one, a name taken by something else than a file, and an existing file
    unless ``overwrite``."""
    if target.parent.exists() and not target.parent.is_dir():
        raise ScenarioError(f"--to {target.parent}: not a folder")
    if target.exists() or target.is_symlink():
        if not target.is_file() or target.is_symlink():
            raise ScenarioError(f"{target}: exists and is not a plain file; not replaced")
        if not overwrite:
            raise ScenarioError(f"{target}: exists (use --overwrite to replace it)")


def _download(trace: PublicTrace, url: str, out, on_bytes: Callable[[int], None] | None) -> str:
    """Copy ``url`` into ``out`` and return the SHA-256 of what came; stop reading one byte past the
    catalogue's size (a longer answer is not the file, and an endless one must not fill the disk)."""
    digest, received = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:  # noqa: S310 (http, https, file)
            while received <= trace.size_bytes:
                chunk = response.read(min(_CHUNK_BYTES, trace.size_bytes + 1 - received))
                if not chunk:
                    break
                digest.update(chunk)
                out.write(chunk)
                received += len(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{trace.name}: {url}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise FetchError(f"{trace.name}: {url}: {exc.reason}") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise FetchError(f"{trace.name}: {url}: {exc}") from None
    if received != trace.size_bytes:
        more = "more than" if received > trace.size_bytes else f"{received:,} bytes, not"
        raise FetchError(f"{trace.name}: {url}: got {more} the published {trace.size_bytes:,} bytes; nothing written")
    return digest.hexdigest()
