"""From a file to a mapping: text files read whole with a size bound, the scenario file parsed as safe
YAML, and the ``--set PATH=VALUE`` overrides applied to the mapping before it is validated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from simmodel.config.node import _show
from simmodel.config.yaml_safe import problem_line, safe_load
from simmodel.errors import ScenarioError


def read_text_file(path: Path, where: str) -> str:
    """A UTF-8 text file's contents; a file that cannot be read, or is not text, is one line naming
    ``where`` (the field or option that named it)."""
    try:
        return _read_bounded(path)
    except OSError as exc:
        raise ScenarioError(f"{where}: {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{where}: {path}: not a text file (UTF-8)") from None


MAX_TEXT_BYTES = 256 * 2**20
"""The largest scenario, result or workload file read whole (256 MiB): a device such as /dev/zero, or a
file given by mistake, is refused instead of read without end."""


def _read_bounded(path: Path) -> str:
    """A UTF-8 file's text, at most ``MAX_TEXT_BYTES``; more is an ``OSError`` saying so (EFBIG)."""
    import errno

    with path.open("rb") as f:
        data = f.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise OSError(errno.EFBIG, f"larger than {MAX_TEXT_BYTES // 2**20} MiB: not a file simmodel reads whole")
    return data.decode("utf-8")


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def read_yaml(path: Path) -> dict:
    """Parse one YAML document safely (no object construction)."""
    try:
        text = _read_bounded(path)
    except FileNotFoundError:
        raise ScenarioError("scenario file not found") from None
    except OSError as exc:
        raise ScenarioError(f"cannot read the scenario file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"cannot read the scenario file ({exc})") from None
    try:
        data = safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{where}not valid YAML ({problem})") from None
    except Exception as exc:  # PyYAML's constructors: `!!int x`, `2001-13-45`, 5,000 digits, nesting too deep
        raise ScenarioError(f"not valid YAML ({_first_line(exc)})") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"the scenario must be a YAML mapping with traffic and engine, got {_show(data)}")
    return data


def apply_overrides(data: dict, overrides: Iterable[str]) -> dict:
    """Apply ``PATH=YAML_VALUE`` overrides left to right; returns a new mapping.

    Raises:
        TypeError: ``overrides`` is one string rather than a list of them (it would be read letter by
            letter), a mapping, or holds something other than strings.
    """
    import copy

    if isinstance(overrides, (str, bytes)):
        raise TypeError(f"overrides must be a list of 'PATH=VALUE' strings, got the single string {overrides!r}; "
                        f"write [{overrides!r}]")
    if isinstance(overrides, Mapping):  # iterating it would give its keys alone, values lost
        raise TypeError(f"overrides must be a list of 'PATH=VALUE' strings, got a mapping; write "
                        f"{[f'{k}={v}' for k, v in overrides.items()]!r}")
    data = copy.deepcopy(data)
    for item in overrides:
        if not isinstance(item, str):
            raise TypeError(f"overrides must be 'PATH=VALUE' strings, got {item!r}")
        if "=" not in item:
            raise ScenarioError(f"--set {item}: expected PATH=VALUE")
        dotted, text = item.split("=", 1)
        keys = dotted.strip().split(".")
        if not all(keys):
            raise ScenarioError(f"--set {item}: PATH must be dotted field names like engine.seed")
        try:
            value = safe_load(text)
        except yaml.YAMLError as exc:  # a duplicate key in a mapping value says which
            raise ScenarioError(f"--set {item}: the value is not valid YAML ({problem_line(exc)})") from None
        except Exception:  # PyYAML's constructors (`!!int x`, 5,000 digits, nesting too deep)
            raise ScenarioError(f"--set {item}: the value is not valid YAML") from None
        target = data
        for depth, key in enumerate(keys[:-1]):
            nxt = target.get(key)
            if nxt is None:
                nxt = target[key] = {}
            if not isinstance(nxt, dict):
                raise ScenarioError(f"--set {item}: {'.'.join(keys[:depth + 1])} is not a mapping")
            target = nxt
        target[keys[-1]] = value
    return data
