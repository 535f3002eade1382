"""Host cost tables: measured frontend stage costs for one serving host, read from JSON.

A measurement tool run on the serving host times SGLang's frontend stages (tokenizer, multimodal
processor, ...) for each workload and writes one row per (model, frontend, transport, image)::

    {"version": 1,
     "rows": [
       {"model": "Qwen/Qwen3-VL-8B-Instruct",
        "frontend": "python",                  # which frontend implementation was measured
        "transport": "shm",                    # how image bytes reach the processor ("shm", "inline", ...)
        "image": {"height": 1024, "width": 1024, "count": 1, "encoding": "png"},   # null: text only
        "stages": [
          {"name": "tokenizer", "workers": 1, "service_ms": 3.1, "concurrency_scale": [1.0]},
          {"name": "mm_processor", "workers": 2, "service_ms": 41.0, "concurrency_scale": [1.0, 1.4]}
        ]}
     ]}

``stages`` are in the order a request visits them (may be empty); ``concurrency_scale[k - 1]`` is the
service multiplier with k requests in service, one entry per worker (see ``frontend.stages``).

A row matches on ``model``, ``frontend`` and ``image`` (all four image fields, or null for null).
When several rows match (they differ in ``transport``), the first in file order wins: the tool writes
its preferred transport first. Every row is checked, not only the one chosen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simmodel.errors import ScenarioError
from simmodel.frontend.stages import StageSpec

MAX_ROWS_LISTED = 6
# The bounds of a scenario's own frontend stages (config.sglang_host._frontend): simulated nanoseconds stay integers.
MAX_WORKERS, MAX_SERVICE_MS, MAX_SCALE = 100_000, 1e9, 1e6


@dataclass(frozen=True, slots=True)
class ImageKey:
    """The images attached to each request of a workload: size in pixels, count and file encoding."""

    height: int
    width: int
    count: int
    encoding: str

    def __str__(self) -> str:
        return f"{self.height}x{self.width} {self.encoding} x{self.count}"


@dataclass(frozen=True, slots=True)
class _Row:
    model: str
    frontend: str
    transport: str
    image: ImageKey | None
    stages: list[StageSpec]

    def describe(self) -> str:
        return f"{self.model!r} {self.frontend} {self.transport} image {_image_text(self.image)}"


def load_host_profile(path: Path, *, model: str, frontend: str, image: ImageKey | None,
                      transport: str | None = None) -> tuple[list[StageSpec], str]:
    """Read a host cost table and return the frontend stages of one workload.

    Args:
        path: the JSON file written by the measurement tool.
        model: model id as measured, e.g. ``"Qwen/Qwen3-VL-8B-Instruct"``.
        frontend: frontend implementation as measured, e.g. ``"python"``.
        image: the images per request, or None for text-only requests.
        transport: the feature transport to pick, or None for the first matching row in file order.

    Returns:
        The stages in visiting order, and the transport of the chosen row.

    Raises:
        ScenarioError: the file is missing or malformed, or has no row for this workload.
    """
    rows = _read_rows(path)
    for row in rows:
        if (row.model == model and row.frontend == frontend and row.image == image
                and (transport is None or row.transport == transport)):
            return list(row.stages), row.transport
    have = "; ".join(row.describe() for row in rows[:MAX_ROWS_LISTED])
    more = f" and {len(rows) - MAX_ROWS_LISTED} more" if len(rows) > MAX_ROWS_LISTED else ""
    wanted = "" if transport is None else f", transport {transport!r}"
    raise ScenarioError(f"host profile {path} has no row for model {model!r}, frontend {frontend!r}{wanted}, image "
                        f"{_image_text(image)}; add that row, measured on the serving host (format: docs/sglang.md) "
                        f"(it has: {have or 'no rows'}{more})")


def _image_text(image: ImageKey | None) -> str:
    return "none (text only)" if image is None else str(image)


def _read_rows(path: Path) -> list[_Row]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"host profile {path}: cannot read: {exc.strerror or exc}") from exc
    except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, an int of over 4,300 digits, nesting too deep
        raise ScenarioError(f"host profile {path}: not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise ScenarioError(f"host profile {path}: expected a JSON object with \"version\": 1")
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise ScenarioError(f"host profile {path}: \"rows\" must be a list")
    return [_parse_row(path, i, row) for i, row in enumerate(rows)]


def _parse_row(path: Path, i: int, row: Any) -> _Row:
    where = f"host profile {path}: rows[{i}]"
    if not isinstance(row, dict):
        raise ScenarioError(f"{where} must be an object")
    for field in ("model", "frontend", "transport"):
        if not isinstance(row.get(field), str) or not row[field]:
            raise ScenarioError(f"{where}.{field} must be a non-empty string, got {row.get(field)!r}")
        if not row[field].isprintable():  # it is quoted unescaped in the missing-row message
            raise ScenarioError(f"{where}.{field} must have no line breaks or control characters, got {row[field]!r}")
    if "image" not in row:
        raise ScenarioError(f"{where}.image is missing (null for text-only requests)")
    stages = row.get("stages")
    if not isinstance(stages, list):
        raise ScenarioError(f"{where}.stages must be a list, got {stages!r}")
    return _Row(row["model"], row["frontend"], row["transport"], _parse_image(where, row["image"]),
                [_parse_stage(f"{where}.stages[{j}]", stage) for j, stage in enumerate(stages)])


def _parse_image(where: str, image: Any) -> ImageKey | None:
    if image is None:
        return None
    if not isinstance(image, dict):
        raise ScenarioError(f"{where}.image must be an object or null, got {image!r}")
    for field in ("height", "width", "count"):
        value = image.get(field)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ScenarioError(f"{where}.image.{field} must be an integer >= 1, got {value!r}")
    if not isinstance(image.get("encoding"), str) or not image["encoding"]:
        raise ScenarioError(f"{where}.image.encoding must be a non-empty string, got {image.get('encoding')!r}")
    if not image["encoding"].isprintable():
        raise ScenarioError(f"{where}.image.encoding must have no line breaks or control characters, got "
                            f"{image['encoding']!r}")
    return ImageKey(image["height"], image["width"], image["count"], image["encoding"])


def _parse_stage(where: str, stage: Any) -> StageSpec:
    if not isinstance(stage, dict):
        raise ScenarioError(f"{where} must be an object")
    name, workers, service_ms, scale = (stage.get(k) for k in ("name", "workers", "service_ms", "concurrency_scale"))
    if not isinstance(name, str) or not name:
        raise ScenarioError(f"{where}.name must be a non-empty string, got {name!r}")
    if not isinstance(workers, int) or isinstance(workers, bool):
        raise ScenarioError(f"{where}.workers must be an integer, got {workers!r}")
    if not isinstance(service_ms, int | float) or isinstance(service_ms, bool):
        raise ScenarioError(f"{where}.service_ms must be a number, got {service_ms!r}")
    if not isinstance(scale, list) or not all(isinstance(s, int | float) and not isinstance(s, bool) for s in scale):
        raise ScenarioError(f"{where}.concurrency_scale must be a list of numbers, got {scale!r}")
    if workers > MAX_WORKERS:
        raise ScenarioError(f"{where}.workers must be at most {MAX_WORKERS:,}, got {workers}")
    if service_ms > MAX_SERVICE_MS:
        raise ScenarioError(f"{where}.service_ms must be at most {MAX_SERVICE_MS:g}, got {service_ms!r}")
    if any(s > MAX_SCALE for s in scale):
        raise ScenarioError(f"{where}.concurrency_scale entries must be at most {MAX_SCALE:g}, got {scale!r}")
    try:
        return StageSpec(name, workers, float(service_ms), tuple(float(s) for s in scale))
    except (ValueError, OverflowError) as exc:  # OverflowError: an int too large for a float (-1e400)
        raise ScenarioError(f"{where}: {exc}") from exc
