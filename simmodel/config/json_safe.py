"""The one JSON parser of every file simmodel reads (traces, result files, config.json, host profiles).

``json.loads`` fails in three ways besides bad syntax: an integer of over 4,300 digits (Python's limit on
converting text to int) raises a plain ``ValueError``, and a document nested a few thousand deep raises
``RecursionError``. Each becomes one ``ScenarioError`` line here, naming the file.
"""

from __future__ import annotations

import json
from typing import Any

from simmodel.errors import ScenarioError


def parse_json(text: str, where: str, numbered: bool = True) -> Any:
    """``text`` parsed as JSON, or a ``ScenarioError`` ``"WHERE: not valid JSON (reason)"``; a syntax error
    names its line unless ``numbered`` is false (``where`` names it already: one line of a JSONL file)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        reason = f"line {exc.lineno}: {exc.msg}" if numbered else exc.msg
    except RecursionError:
        reason = "nested too deeply"
    except ValueError:  # int("1" * 5000): Python converts at most 4,300 digits
        reason = "a number of over 4,300 digits"
    raise ScenarioError(f"{where}: not valid JSON ({reason})")
