"""Public request traces: the small ones shipped inside the package, and the full ones that
``simmodel traces fetch`` downloads.

A scenario names a shipped trace as ``path: builtin:NAME`` (``builtin:mooncake/conversation_head2000.jsonl``),
which means the same file whatever the working directory and wherever simmodel is installed. Every entry
names the GitHub repository, the pinned snapshot commit and the path it was copied from, its licence, its
size and its SHA-256, so that a copy can be checked byte for byte (``simmodel/data/traces/README.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from simmodel.errors import ScenarioError

BUILTIN_PREFIX = "builtin:"

_AZURE = ("Azure/AzurePublicDataset", "b469a113cedca53ddc3bdea71a143dc4b7d8700c")
_MOONCAKE = ("kvcache-ai/Mooncake", "3b5a594133958449a1feaf1c9e0fc1b553e34a28")


@dataclass(frozen=True, slots=True)
class PublicTrace:
    """One public trace file, as published in a GitHub repository at a pinned commit."""

    name: str
    """The catalogue name, ``publisher/what.ext`` (``builtin:`` + name in a scenario, for shipped ones)."""
    file: str
    """The file's name on disk: the upstream name, kept so that a copy is recognisable."""
    format: str
    """The ``traffic.source.format`` that reads it."""
    repo: str
    commit: str
    """The full 40-hex snapshot commit the file (or, for a cut, its parent) was taken from."""
    path: str
    """The file's path in ``repo``."""
    size_bytes: int
    sha256: str
    licence: str
    cut: str | None = None
    """How a shipped sample was cut from the upstream file (None: the upstream file unchanged)."""

    @property
    def url(self) -> str:
        """The upstream file at its pinned commit (a cut's parent file)."""
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{self.path}"

    @property
    def source(self) -> str:
        """Where it comes from, short: ``repo@commit8 path`` (and the cut, if any)."""
        where = f"{self.repo}@{self.commit[:8]} {self.path}"
        return f"{where} ({self.cut})" if self.cut else where


_AZURE_CODE = PublicTrace("azure/code_2023.csv", "AzureLLMInferenceTrace_code.csv", "azure", *_AZURE,
                          "data/AzureLLMInferenceTrace_code.csv", 320_117,
                          "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6", "CC-BY-4.0")
_AZURE_CONV = PublicTrace("azure/conv_2023.csv", "AzureLLMInferenceTrace_conv.csv", "azure", *_AZURE,
                          "data/AzureLLMInferenceTrace_conv.csv", 719_188,
                          "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8", "CC-BY-4.0")

BUILTIN: dict[str, PublicTrace] = {t.name: t for t in (
    _AZURE_CODE,
    _AZURE_CONV,
    PublicTrace("mooncake/conversation_head2000.jsonl", "conversation_trace_head2000.jsonl", "mooncake", *_MOONCAKE,
                "FAST25-release/traces/conversation_trace.jsonl", 514_852,
                "9e81b386f0d8cea16d376b041d7a7e8fed5ba65b53e989444c76cef408442c2a", "Apache-2.0",
                cut="its first 2,000 lines"),
)}
"""The traces shipped in ``simmodel/data/traces/``: the ones the ready scenarios and the tests read."""

FETCHABLE: dict[str, PublicTrace] = {t.name: t for t in (
    _AZURE_CODE,
    _AZURE_CONV,
    PublicTrace("mooncake/conversation.jsonl", "conversation_trace.jsonl", "mooncake", *_MOONCAKE,
                "FAST25-release/traces/conversation_trace.jsonl", 3_029_533,
                "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df", "Apache-2.0"),
    PublicTrace("mooncake/synthetic.jsonl", "synthetic_trace.jsonl", "mooncake", *_MOONCAKE,
                "FAST25-release/traces/synthetic_trace.jsonl", 1_136_313,
                "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131", "Apache-2.0"),
)}
"""The full public files ``simmodel traces fetch NAME`` downloads from ``PublicTrace.url``."""


def is_builtin(raw_path: str) -> bool:
    """Whether a scenario's path names a shipped trace (``builtin:NAME``) rather than a file."""
    return raw_path.startswith(BUILTIN_PREFIX)


def builtin_path(name: str) -> Path:
    """The installed file of shipped trace ``name`` (without the ``builtin:`` prefix).

    Raises:
        ScenarioError: no shipped trace has that name (the message lists the names there are).
    """
    trace = BUILTIN.get(name)
    if trace is None:
        known = ", ".join(BUILTIN_PREFIX + n for n in BUILTIN)
        raise ScenarioError(f"{BUILTIN_PREFIX}{name}: no such built-in trace (known: {known})")
    resource = files("simmodel").joinpath("data", "traces", trace.file)
    if not isinstance(resource, Path):  # a zipped install: the readers need a file on disk
        raise ScenarioError(f"{BUILTIN_PREFIX}{name}: simmodel is installed as a zip archive; built-in traces "
                            f"need an unpacked install")
    return resource


def resolve_trace_path(raw_path: str, base_dir: Path) -> Path:
    """The file a scenario's ``traffic.source.path`` names: a shipped trace for ``builtin:NAME``, else the
    path itself, a relative one taken against ``base_dir`` (the scenario file's folder)."""
    if is_builtin(raw_path):
        return builtin_path(raw_path[len(BUILTIN_PREFIX):])
    path = Path(raw_path)
    return path if path.is_absolute() else base_dir / path
