"""The one YAML reader of every file simmodel reads: PyYAML's safe loader, refusing duplicate keys.

YAML says a mapping's keys are unique, but PyYAML keeps the last of two equal keys without a word, so a
scenario that sets ``replicas`` twice runs with whichever came last. Here a duplicate key is an error
naming the key and both lines. Merge keys (``<<: *base``) still work: a key the mapping sets itself may
override one it merged in; only two keys the mapping itself writes count as duplicates.
"""

from __future__ import annotations

from typing import Any

import yaml

_MERGE_TAG = "tag:yaml.org,2002:merge"


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` whose mappings refuse a key written twice (a ``ConstructorError`` at its line)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._checked: set[int] = set()

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # PyYAML flattens every mapping (the document's and each merged-in one) before building it, and
        # flattening prepends the merged keys to the node: check a node's own keys once, before that.
        if id(node) not in self._checked:
            self._checked.add(id(node))
            self._refuse_duplicates(node)
        super().flatten_mapping(node)

    def _refuse_duplicates(self, node: yaml.MappingNode) -> None:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node)
            try:
                seen = first_line.get(key)
            except TypeError:  # an unhashable key: the mapping constructor reports it
                continue
            if seen is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}, first set on line {seen}", key_node.start_mark)
            first_line[key] = key_node.start_mark.line + 1


def safe_load(text: str) -> Any:
    """Parse one YAML document as ``yaml.safe_load`` does, refusing duplicate mapping keys."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def problem_line(exc: BaseException) -> str:
    """One line for a YAML error: ``line 3: duplicate key 'a', first set on line 1``."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
    problem = " ".join(str(problem).split())
    return f"line {mark.line + 1}: {problem}" if mark is not None else problem
