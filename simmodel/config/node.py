"""The YAML node reader: a mapping at a dotted path (``engine.workers.aggregated.kv_cache``) that reads
typed fields (``node.int``, ``node.number``, ``node.bool``, ``node.choice``) with their defaults and
bounds, and rejects every field no rule read (``node.done``). Every parser of ``simmodel.config`` reads
the scenario through it, so an error always starts with the field's dotted path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import yaml

from simmodel.config.bounds import MAX_INT, MAX_NUMBER
from simmodel.errors import ScenarioError

_MISSING = object()


class _Node:
    """A YAML mapping at a dotted path; reads typed fields and rejects the ones nobody read."""

    def __init__(self, data: Any, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ScenarioError(f"{path}: must be a mapping, got {_show(data)}")
        self.data, self.path, self._read = data, path, set()

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        self._read.add(key)
        if key not in self.data or self.data[key] is None:
            if default is _MISSING:
                raise ScenarioError(f"{self.at(key)}: required field is missing")
            return default
        return self.data[key]

    def node(self, key: str, required: bool = False) -> _Node:
        return _Node(self.raw(key, _MISSING if required else None), self.at(key))

    def int(self, key: str, default: Any = _MISSING, *, minimum: int = 1, maximum: int = MAX_INT) -> int:
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            rule = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ScenarioError(f"{self.at(key)}: must be {rule}, got {_show(value)}")
        if value > maximum:
            raise ScenarioError(f"{self.at(key)}: must be at most {maximum:,}, got {_show(value)}")
        return value

    def number(self, key: str, default: Any = _MISSING, *, positive: bool = False,
               maximum: float | None = MAX_NUMBER, minimum: float | None = None) -> float:
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        ok = finite_number(value)
        ok = ok and (value > 0 if positive else value >= 0) and (maximum is None or value <= maximum)
        if ok and minimum is not None and value < minimum:
            raise ScenarioError(f"{self.at(key)}: must be at least {minimum:g}, got {_show(value)}")
        if not ok:
            rule = "a positive number" if positive else "a non-negative number"
            if maximum is not None:
                rule += f" at most {maximum:g}"
            raise ScenarioError(f"{self.at(key)}: must be {rule}, got {_show(value)}")
        return float(value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise ScenarioError(f"{self.at(key)}: must be true or false, got {_show(value)}")
        return value

    def choice(self, key: str, choices: Iterable[str], default: Any = _MISSING) -> str:
        value = self.raw(key, default)
        choices = tuple(choices)
        if value not in choices:
            raise ScenarioError(f"{self.at(key)}: must be one of {', '.join(choices)}, got {_show(value)}")
        return value

    def done(self) -> None:
        """Reject every field that no rule read."""
        for key in self.data:
            if key not in self._read:
                allowed = ", ".join(sorted(self._read)) or "none"
                raise ScenarioError(f"{self.at(str(key))}: unknown field (allowed here: {allowed})")


def finite_number(value: Any) -> bool:
    """Whether a YAML value is a finite number a float can hold: not a bool, not NaN or infinite, and not an
    integer past float range (a 400-digit literal), which ``float()`` cannot convert."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _show(value: Any) -> str:
    try:
        text = repr(value) if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip()
    except (ValueError, RecursionError):  # an int of over 4,300 digits, or nesting too deep to write out
        text = "a value too large to show"
    text = text.removesuffix("\n...").strip()
    return text if len(text) <= 60 else text[:57] + "..."


def _backend_only(node: _Node, keys: Iterable[str], backend: str, owner: str) -> None:
    """A field of one backend's scheduler set on the other backend fails (it could have no effect)."""
    for key in keys:  # not marked as read: an unknown-field message lists only this backend's fields
        if node.data.get(key) is not None:
            raise ScenarioError(f"{node.at(key)}: {owner} only; engine.backend is {backend}")
