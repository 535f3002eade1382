"""The packages' layering, read from the source: every ``import`` statement of every module under
``simmodel/`` (at the top of a module, inside a function, or under ``if TYPE_CHECKING:``: all count).

Enforced:
- ``simmodel.config`` is the bottom layer: configuration knows nothing of how it is run, so it imports
  none of ``engine``, ``traffic``, ``calibrate``, ``sim``, ``metrics`` (it may use ``perf``'s registries,
  ``frontend``'s stage spec, ``errors``, ``paths``).
- Among ``config``, ``engine``, ``traffic``, ``calibrate`` and ``metrics`` the package imports form no
  cycle (today: engine → config; metrics → engine, config; traffic → metrics, engine, config;
  calibrate → config). The engine records through its own ``Recorder`` protocol
  (``simmodel.engine.recorder``) instead of importing ``simmodel.metrics``.
Only direct imports between those five packages count: a path through another package (say
``perf`` or ``sim``) is not followed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import simmodel
from simmodel.engine.recorder import Recorder as RecorderProtocol
from simmodel.metrics.records import Recorder

ROOT = Path(simmodel.__file__).parent
LAYERED = ("config", "engine", "traffic", "calibrate", "metrics")
NOT_FROM_CONFIG = ("engine", "traffic", "calibrate", "sim", "metrics")


def module_name(path: Path) -> str:
    parts = ("simmodel", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(text: str, package: list[str]) -> list[str]:
    """The ``simmodel`` modules a module's source imports; ``package`` is its package's dotted name as parts,
    which relative imports are resolved against."""
    names = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            names.append(".".join([*base, *([node.module] if node.module else [])]))
    return [name for name in names if name == "simmodel" or name.startswith("simmodel.")]


def imported(path: Path) -> list[str]:
    """The ``simmodel`` modules one file under ``simmodel/`` imports."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    return imports_of(path.read_text(encoding="utf-8"), package)


def package_of(module: str) -> str:
    """``simmodel.engine.rank`` → ``engine``; a top-level module is its own package (``sim``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def import_edges() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) → the ``module → module`` imports that make the edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        source = module_name(path)
        for target in imported(path):
            a, b = package_of(source), package_of(target)
            if a != b:
                edges.setdefault((a, b), []).append(f"{source} imports {target}")
    return edges


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as its nodes in order (first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_every_kind_of_import_statement_counts():
    """Top level, inside a function, under TYPE_CHECKING, relative (from simmodel/engine/x.py, ``..`` is
    simmodel, ``.`` is simmodel.engine); other libraries are left out."""
    text = """
import numpy, simmodel.errors
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from simmodel.metrics.records import Recorder
def f():
    from simmodel.traffic import source
from ..config import schema
from .request import Request
"""
    assert sorted(imports_of(text, ["simmodel", "engine"])) == [
        "simmodel.config", "simmodel.engine.request", "simmodel.errors", "simmodel.metrics.records", "simmodel.traffic"]


def test_the_walk_finds_the_package_edges_that_exist():
    """Guards the walk over the files (else the tests below would pass on finding nothing): the simulation
    imports the engine, the metrics read the engine's requests; a package's own imports are no edge."""
    edges = import_edges()
    assert ("sim", "engine") in edges and ("metrics", "engine") in edges
    assert not [edge for edge in edges if edge[0] == edge[1]]


def test_config_imports_nothing_of_how_it_is_run():
    edges = import_edges()
    found = [line for b in NOT_FROM_CONFIG for line in edges.get(("config", b), [])]
    assert not found, "simmodel.config must not import how a scenario is run:\n" + "\n".join(found)


def test_no_cycle_among_config_engine_traffic_calibrate_metrics():
    edges = {edge: lines for edge, lines in import_edges().items() if set(edge) <= set(LAYERED)}
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    cycle = find_cycle(graph)
    if cycle:
        lines = [line for a, b in zip(cycle, cycle[1:]) for line in edges[a, b]]
        raise AssertionError("import cycle " + " → ".join(cycle) + ":\n" + "\n".join(lines))


def test_find_cycle_finds_one_and_only_one_that_exists():
    """a → b → c → a is a cycle; a → b, a → c, b → c is not."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}}) is None


def test_the_metrics_recorder_is_the_engines_recorder():
    """The engine's protocol names every member the engine uses; the recorder a simulation passes has them."""
    assert isinstance(Recorder(), RecorderProtocol)
    assert not isinstance(object(), RecorderProtocol)
