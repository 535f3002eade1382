"""``engine.model`` and ``engine.hardware``: a registry id (``simmodel.perf.models.MODELS``,
``simmodel.perf.hardware.HARDWARE``) or a local file (a Hugging Face ``config.json``, a system ``.yaml``).
"""

from __future__ import annotations

from pathlib import Path

from simmodel.config.node import _Node, _show
from simmodel.errors import ScenarioError
from simmodel.perf.hardware import HARDWARE, HardwareSpec
from simmodel.perf.models import MODELS, ModelSpec


def _model(node: _Node, base_dir: Path) -> tuple[str, ModelSpec]:
    """A registry id, or a local Hugging Face ``config.json`` (the file or its folder)."""
    value = node.raw("model")
    if isinstance(value, str) and value in MODELS:
        return value, MODELS[value]
    path = Path(value) if isinstance(value, str) else None
    if path is not None and not path.is_absolute():
        path = base_dir / path
    if path is not None and _local(path):
        from simmodel.perf.hf_config import model_from_hf_config

        try:
            return value, model_from_hf_config(path)
        except ScenarioError as exc:
            raise ScenarioError(f"{node.at('model')}: {exc}") from None
    raise ScenarioError(f"{node.at('model')}: unknown model {_show(value)}: give a registry id "
                        f"({', '.join(sorted(MODELS))}) or the path of a local config.json")


def _local(path: Path) -> bool:
    """A config.json file or a folder here; a name the OS refuses (too long, say) is none."""
    try:
        return (path.suffix == ".json" or path.is_dir()) and path.exists()
    except (OSError, ValueError):
        return False


def _hardware(node: _Node, base_dir: Path) -> tuple[str, HardwareSpec]:
    """A registry system id, or a YAML system file."""
    value = node.raw("hardware")
    if isinstance(value, str) and value in HARDWARE:
        return value, HARDWARE[value]
    if isinstance(value, str) and value.endswith((".yaml", ".yml")):
        from simmodel.perf.hardware import hardware_from_yaml

        path = Path(value) if Path(value).is_absolute() else base_dir / value
        try:
            return value, hardware_from_yaml(path)
        except ScenarioError as exc:
            raise ScenarioError(f"{node.at('hardware')}: {exc}") from None
    raise ScenarioError(f"{node.at('hardware')}: unknown system {_show(value)}: give a system id "
                        f"({', '.join(sorted(HARDWARE))}) or the path of a system .yaml file")


def _role_hardware(node: _Node, base_dir: Path) -> HardwareSpec:
    """A role's own ``hardware``: one concrete system (``auto`` is a search choice, not a system)."""
    if node.raw("hardware") == "auto":
        raise ScenarioError(f"{node.at('hardware')}: must name one concrete system; auto is not accepted")
    return _hardware(node, base_dir)[1]
