"""Workloads as benchmark tools describe them (``traffic.source: {type: import, tool, path}``): the file a
user already has — a ``vllm bench serve`` command line or its saved arguments, an inference-perf profile
YAML, a GuideLLM command line or report, an AIPerf command line or profile export — becomes the
``traffic`` mapping (source, load, stop) that sends the same workload, plus a warning for every field
that shapes the workload but cannot be reproduced. Fields that only say where and how to connect (URLs,
model names, output files) are read and left alone.

Each tool's semantics (``docs/workloads.md``) follow its source: the lengths and arrival processes it
draws, the order its stages run in. The random draws themselves are the simulation's (same
distributions, not the same samples).
"""

from __future__ import annotations

from pathlib import Path

from simmodel.config.files import read_text_file
from simmodel.config.importers import aiperf, guidellm, inference_perf, vllm_bench
from simmodel.config.importers.common import arguments, parse_flags
from simmodel.errors import ScenarioError

__all__ = ["TOOLS", "import_workload", "parse_flags"]

TOOLS = ("vllm-bench", "inference-perf", "guidellm", "aiperf")


def import_workload(tool: str, path: Path) -> tuple[dict, list[str]]:
    """The traffic mapping the tool's workload file stands for, and the warnings."""
    text = read_text_file(path, "traffic.source.path")
    args = arguments(text, path)
    build = {"vllm-bench": vllm_bench.build, "inference-perf": inference_perf.build, "guidellm": guidellm.build,
             "aiperf": aiperf.build}[tool]
    warnings: list[str] = []
    try:
        traffic = build(args, warnings)
    except ScenarioError:
        raise
    except KeyError as exc:
        raise ScenarioError(f"traffic.source.path: {path}: a {tool} field is missing: {exc.args[0]}") from None
    except (TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise ScenarioError(f"traffic.source.path: {path}: a {tool} value is malformed "
                            f"({' '.join(str(exc).split())[:160]})") from None
    return traffic, [f"{path.name}: {w}" for w in warnings]
