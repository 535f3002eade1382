"""The shipped public traces (simmodel/data/traces) and the one rule that turns a scenario's trace path
into a file: ``builtin:NAME`` is a shipped trace wherever simmodel runs, anything else a path."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import simmodel
from simmodel.config.catalog import BUILTIN, FETCHABLE, builtin_path, resolve_trace_path
from simmodel.errors import ScenarioError
from simmodel.recommend.search import runnable

SHIPPED = Path(simmodel.__file__).resolve().parent / "data" / "traces"


def test_the_shipped_files_are_the_catalogue_and_unchanged():
    """Every data file shipped is in the catalogue and nothing else is; each has the size and SHA-256 of the
    published file (those were taken with sha256sum from the upstream files at the pinned commits and the
    head -n 2000 cut, simmodel/data/traces/README.md), so a copy that was changed or re-encoded fails."""
    shipped = sorted(p.name for p in SHIPPED.iterdir() if p.suffix in (".csv", ".jsonl"))
    assert shipped == sorted(t.file for t in BUILTIN.values())
    for trace in BUILTIN.values():
        data = (SHIPPED / trace.file).read_bytes()
        assert len(data) == trace.size_bytes and hashlib.sha256(data).hexdigest() == trace.sha256, trace.name


def test_each_shipped_file_stays_under_a_megabyte_and_has_its_licence_beside_it():
    assert all(t.size_bytes < 1_000_000 for t in BUILTIN.values())
    readme = (SHIPPED / "README.md").read_text(encoding="utf-8")
    for trace in BUILTIN.values():
        assert trace.file in readme and trace.sha256 in readme and trace.commit in readme
    assert (SHIPPED / "licenses" / "CC-BY-4.0.txt").read_text(encoding="utf-8-sig").startswith(
        "Attribution 4.0 International")
    assert "Apache License" in (SHIPPED / "licenses" / "Apache-2.0.txt").read_text(encoding="utf-8")


def test_pinned_urls_name_the_full_commit():
    """raw.githubusercontent.com/<repo>/<40-hex commit>/<path>: the same bytes forever."""
    assert FETCHABLE["mooncake/conversation.jsonl"].url == (
        "https://raw.githubusercontent.com/kvcache-ai/Mooncake/3b5a594133958449a1feaf1c9e0fc1b553e34a28/"
        "FAST25-release/traces/conversation_trace.jsonl")
    for trace in FETCHABLE.values():
        assert trace.url == f"https://raw.githubusercontent.com/{trace.repo}/{trace.commit}/{trace.path}"
        assert len(trace.commit) == 40 and set(trace.commit) <= set("0123456789abcdef")


def test_builtin_names_do_not_depend_on_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = resolve_trace_path("builtin:mooncake/conversation_head2000.jsonl", tmp_path / "elsewhere")
    assert path == SHIPPED / "conversation_trace_head2000.jsonl" and path.is_absolute() and path.is_file()


def test_other_paths_are_files_relative_to_the_scenario_folder(tmp_path):
    assert resolve_trace_path("t.csv", tmp_path) == tmp_path / "t.csv"
    assert resolve_trace_path("../t.csv", tmp_path) == tmp_path / ".." / "t.csv"
    assert resolve_trace_path("/data/t.csv", tmp_path) == Path("/data/t.csv")


def test_an_unknown_builtin_name_lists_the_known_ones():
    with pytest.raises(ScenarioError) as err:
        builtin_path("azure/conv_2024.csv")
    assert str(err.value) == ("builtin:azure/conv_2024.csv: no such built-in trace (known: builtin:azure/code_2023.csv, "
                              "builtin:azure/conv_2023.csv, builtin:mooncake/conversation_head2000.jsonl)")


def test_a_saved_candidate_keeps_builtin_names_and_anchors_relative_paths(tmp_path):
    """recommend saves candidates in another folder: a relative trace path is made absolute against the
    search's folder, a builtin: name means the same file from there and stays as it is."""
    for given, saved in (("builtin:azure/code_2023.csv", "builtin:azure/code_2023.csv"),
                         ("t.csv", str((tmp_path / "t.csv").resolve()))):
        config = runnable({"traffic": {"source": {"type": "trace", "path": given}}, "engine": {}}, tmp_path)
        assert config["traffic"]["source"]["path"] == saved
