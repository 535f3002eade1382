"""File paths that users give (scenario fields, command-line options)."""

from __future__ import annotations

import os
from pathlib import Path


def is_file(path: Path) -> bool:
    """Whether ``path`` names a file; a name the OS refuses (too long, a NUL byte) names none, so that the
    caller's one-line "no such file" error covers it."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def exists(path: Path) -> bool:
    """Whether ``path`` names anything; a name the OS refuses names nothing."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back): the permissions a new file would get."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
