"""Search domains: a scenario field holding ``{choices: [...]}`` or ``{range: {...}}`` instead of one value.

``simmodel recommend`` searches over them; ``simmodel run`` needs one value per field and rejects them
(``reject_search``). A bare list is never a domain: a list is a value (frontend stages, preset shapes).
"""

from __future__ import annotations

import json
import math
from typing import Any

from simmodel.config.node import _show, finite_number
from simmodel.errors import ScenarioError

DOMAIN_KEYS = ("choices", "range")
RECOMMEND_SECTIONS = ("evaluation", "optimization", "optimizer")
"""Top-level sections a search reads (a candidate scenario is the search file without them)."""
SEARCH_ONLY_SECTIONS = ("optimization", "optimizer")
"""Those only a search reads (``evaluation`` is a run's too: its SLA)."""
MAX_DOMAIN_VALUES = 10_000


def is_domain(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in DOMAIN_KEYS


def find_domains(data: Any, path: str = "") -> list[tuple[str, dict]]:
    """Every domain object under ``data`` with its dotted path, in document order (each container visited
    once: YAML aliases can make a document refer to itself)."""
    found: list[tuple[str, dict]] = []
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [(path, data)]
    while stack:
        at, value = stack.pop()
        if is_domain(value):
            found.append((at, value))
            continue
        if not isinstance(value, (dict, list)) or id(value) in seen:
            continue
        seen.add(id(value))
        items = (((f"{at}.{k}" if at else str(k)), v) for k, v in value.items()) if isinstance(value, dict) \
            else ((f"{at}[{i}]", v) for i, v in enumerate(value))
        stack.extend(reversed(list(items)))
    return found


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def domain_values(path: str, domain: dict) -> list:
    """The values a domain stands for, in order.

    ``choices``: a non-empty list of distinct values. ``range``: ``{min, max, step, scale}``; linear (the
    default) takes min, min + step, … up to max (step defaults to 1 for integers); log takes min,
    min × step, … up to max (step, the factor, defaults to 2 and must exceed 1; min must be positive).
    When min, max and step are integers every value is an integer.
    """
    kind, spec = next(iter(domain.items()))
    at = f"{path}.{kind}"
    if kind == "choices":
        if not isinstance(spec, list) or not spec:
            raise ScenarioError(f"{at}: must be a non-empty list of values")
        seen: set[str] = set()
        for value in spec:
            try:
                key = _canonical(value)
            except (ValueError, RecursionError):  # (a YAML alias inside its own list: it holds itself)
                raise ScenarioError(f"{at}: a value holds itself (a YAML alias inside what it names); give plain "
                                    f"values") from None
            if key in seen:
                raise ScenarioError(f"{at}: values must be distinct; {json.dumps(value, default=str)} repeats")
            seen.add(key)
        if len(spec) > MAX_DOMAIN_VALUES:
            raise ScenarioError(f"{at}: at most {MAX_DOMAIN_VALUES:,} values, got {len(spec):,}")
        return list(spec)
    if not isinstance(spec, dict):
        raise ScenarioError(f"{at}: must be a mapping {{min, max, step, scale}}")
    unknown = set(spec) - {"min", "max", "step", "scale"}
    if unknown:
        raise ScenarioError(f"{at}.{sorted(unknown)[0]}: unknown field (allowed here: max, min, scale, step)")
    scale = spec.get("scale", "linear")
    if scale not in ("linear", "log"):
        raise ScenarioError(f"{at}.scale: must be one of linear, log, got {_show(scale)}")
    for key in ("min", "max"):
        if not finite_number(spec.get(key)):
            raise ScenarioError(f"{at}.{key}: must be a number, got {_show(spec.get(key))}")
    lo, hi = spec["min"], spec["max"]
    integers = isinstance(lo, int) and isinstance(hi, int)
    step = spec.get("step", 2 if scale == "log" else (1 if integers else None))
    if step is None:
        raise ScenarioError(f"{at}.step: required when min or max is not an integer")
    if not finite_number(step) or step <= 0:
        raise ScenarioError(f"{at}.step: must be a positive number, got {_show(step)}")
    if hi < lo:
        raise ScenarioError(f"{at}.max: must be at least min ({lo}), got {hi}")
    integers = integers and isinstance(step, int)
    values: list = []
    if scale == "linear":
        count = math.floor((hi - lo) / step + 1e-9) + 1
        if count > MAX_DOMAIN_VALUES:
            raise ScenarioError(f"{at}: stands for {count:,} values; at most {MAX_DOMAIN_VALUES:,}")
        values = [lo + k * step for k in range(count)]
    else:
        if lo <= 0:
            raise ScenarioError(f"{at}.min: must be positive on a log scale, got {lo}")
        if step <= 1:
            raise ScenarioError(f"{at}.step: the factor of a log scale must exceed 1, got {step}")
        value = lo
        while value <= hi * (1 + 1e-12):
            values.append(value)
            value = value * step
            if len(values) > MAX_DOMAIN_VALUES:
                raise ScenarioError(f"{at}: stands for more than {MAX_DOMAIN_VALUES:,} values")
    return [int(v) for v in values] if integers else [float(v) for v in values]


def search_field(data: dict) -> str | None:
    """Why a scenario mapping is a search (``simmodel recommend``'s), at its first search-only field: a
    section only a search reads, a parallelism preset, a domain; None for a concrete scenario."""
    if not isinstance(data, dict):
        return None  # the scenario's own check says what a scenario must be
    for key in SEARCH_ONLY_SECTIONS:
        if key in data:
            return (f"{key}: read by `simmodel recommend` only; `simmodel run` takes a concrete "
                    f"scenario (remove it, or use recommend)")
    workers = (data.get("engine") or {}).get("workers") if isinstance(data.get("engine"), dict) else None
    if isinstance(workers, dict):
        for name, role in workers.items():
            parallelism = role.get("parallelism") if isinstance(role, dict) else None
            if isinstance(parallelism, dict) and "preset" in parallelism:
                return (f"engine.workers.{name}.parallelism.preset: a search over parallelism "
                        f"shapes, read by `simmodel recommend` only; `simmodel run` needs tensor, "
                        f"attention_data, … set to one value")
    domains = find_domains(data)
    if domains:
        path, domain = domains[0]
        return (f"{path}: a search domain ({{{next(iter(domain))}: ...}}); `simmodel run` needs one "
                f"value here (use `simmodel recommend` to search it)")
    return None


def reject_search(data: dict) -> None:
    """For ``simmodel run``: one clear error at the first search-only field."""
    why = search_field(data)
    if why is not None:
        raise ScenarioError(why)
