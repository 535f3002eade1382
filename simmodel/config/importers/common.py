"""What every importer needs: reading a tool's file (a command line, or a mapping of its arguments),
numbers as the tools write them, and the warning for every field not reproduced."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

import yaml

from simmodel.config.yaml_safe import problem_line, safe_load
from simmodel.errors import ScenarioError


def arguments(text: str, path: Path) -> dict:
    """A JSON/YAML mapping as it is, or a command line's ``--flag value`` pairs (dashes as underscores)."""
    stripped = text.strip()
    if not stripped:  # not "every default": a file saved empty by mistake
        raise ScenarioError(f"traffic.source.path: {path}: is empty: give the tool's command line or its saved "
                            f"arguments")
    if stripped.startswith("{") or path.suffix in (".json", ".yaml", ".yml"):
        try:
            data = safe_load(stripped)
        except yaml.YAMLError as exc:
            raise ScenarioError(f"traffic.source.path: {path}: not a YAML/JSON mapping ({problem_line(exc)})") from None
        except Exception as exc:  # noqa: BLE001 (PyYAML's constructors: `!!int x`, bad dates)
            raise ScenarioError(f"traffic.source.path: {path}: not a YAML/JSON mapping "
                                f"({' '.join(str(exc).split())[:120]})") from None
        if not isinstance(data, dict):
            raise ScenarioError(f"traffic.source.path: {path}: must hold a mapping or a command line")
        return data
    try:
        words = shlex.split(stripped.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise ScenarioError(f"traffic.source.path: {path}: not a command line ({exc})") from None
    return parse_flags(words)


def parse_flags(words: list[str]) -> dict:
    """``--name value``, ``--name=value`` and bare ``--flag`` (true) pairs; words before the first flag
    (the program and its subcommand) are skipped. Values are read as YAML scalars (numbers, inf, true)."""
    flags: dict = {}
    i = 0
    while i < len(words) and not words[i].startswith("--"):
        i += 1
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            raise ScenarioError(f"traffic.source.path: unexpected word {word!r} (flags are --name value)")
        name, eq, value = word[2:].partition("=")
        if not eq:
            if i + 1 < len(words) and not words[i + 1].startswith("--"):
                value = words[i + 1]
                i += 1
            else:
                value = "true"
        key, value = name.replace("-", "_"), scalar(value)
        if key in flags:  # a repeated flag (GuideLLM's --rate 2 --rate 4): every value, in order
            previous = flags[key] if isinstance(flags[key], list) else [flags[key]]
            value = previous + (value if isinstance(value, list) else [value])
        flags[key] = value
        i += 1
    return flags


def scalar(value: str):
    if value.lower() in ("inf", "+inf", "infinity"):
        return math.inf
    try:
        parsed = safe_load(value)
    except Exception:  # noqa: BLE001 (not a YAML scalar: the word as it is)
        return value
    return parsed if isinstance(parsed, (int, float, bool, list)) else value


def norm(data: dict) -> dict:
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def number(value, name: str) -> float:
    if isinstance(value, str) and value.lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScenarioError(f"traffic.source.path: {name} must be a number, got {value!r}")
    return float(value)


def warn_rest(args: dict, known: set, silent: set, warnings: list[str], where: str = "") -> None:
    for key in sorted(set(args) - known - silent):
        warnings.append(f"{where}{key}: not reproduced by the simulation (ignored)")




def uniform(lo: int, hi: int):
    """A fixed length when the range is one value, else a uniform distribution."""
    return lo if lo == hi else {"distribution": "uniform", "min": lo, "max": hi}
