"""The host side of an SGLang worker: its host loop, the frontend stages in front of it (given as
``frontend``, or measured in a ``host_profile`` file), and the vision encoder's embedding cache; and the
rules that join them to the traffic's images, checked once both the traffic and the engine are read.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from simmodel.config.node import _Node, _show, finite_number
from simmodel.config.schema import (
    Engine,
    FrontendSpec,
    HostProfileSpec,
    Parallelism,
    Traffic,
    VisionSpec,
)
from simmodel.errors import ScenarioError
from simmodel.frontend.stages import StageSpec

if TYPE_CHECKING:
    from simmodel.config.backends import BackendRules

SGLANG_HOST = ("host_loop", "frontend", "host_profile", "vision")
"""The worker fields only SGLang reads."""


def _sglang_host(node: _Node, name: str, p: Parallelism):
    """``host_loop``, ``frontend``, ``host_profile`` and ``vision`` of an SGLang aggregated or prefill worker.

    A ``host_profile``'s row depends on the traffic's images: it is read once the traffic is known
    (``_check_images``), which fills in ``frontend``."""
    if name == "decode":
        for key in SGLANG_HOST:
            if node.raw(key, None) is not None:
                raise ScenarioError(f"{node.at(key)}: goes on workers.prefill in disaggregated mode (the decode "
                                    f"worker stays a plain worker)")
        return False, None, None, None
    frontend = profile = None
    if node.raw("frontend", None) is not None and node.raw("host_profile", None) is not None:
        raise ScenarioError(f"{node.at('host_profile')}: cannot be combined with frontend (both describe the "
                            f"frontend stages); give one")
    if node.raw("frontend", None) is not None:
        frontend = _frontend(node.node("frontend"))
    elif node.raw("host_profile", None) is not None:
        hp = node.node("host_profile")
        raw_path = hp.raw("path")
        if not isinstance(raw_path, str) or not raw_path:
            raise ScenarioError(f"{hp.at('path')}: must be a file path, got {_show(raw_path)}")
        kind = hp.choice("frontend", ("python", "rust"))
        transport = hp.raw("transport", None)
        if transport is not None and not isinstance(transport, str):
            raise ScenarioError(f"{hp.at('transport')}: must be a transport name, got {_show(transport)}")
        hp.done()
        for key in ("attention_data", "prefill_context", "decode_context"):
            if getattr(p, key) != 1:
                raise ScenarioError(f"{hp.path}: host profiles are measured on workers with pipeline, "
                                    f"attention_data and context parallelism of 1; parallelism.{key} is "
                                    f"{getattr(p, key)}")
        profile = HostProfileSpec(raw_path, kind, transport)
    host_loop = node.bool("host_loop", frontend is not None or profile is not None)
    if (frontend is not None or profile is not None) and not host_loop:
        raise ScenarioError(f"{node.at('host_loop')}: a frontend feeds SGLang's host loop; it cannot be false "
                            f"with frontend or host_profile set")
    vision = None
    if node.raw("vision", None) is not None:
        vn = node.node("vision")
        vision = VisionSpec(vn.number("cache_mib", 100.0, maximum=1e6),
                            vn.choice("encoder_parallel", ("tp", "dp"), "tp"))
        vn.done()
    return host_loop, frontend, profile, vision


def _frontend(node: _Node) -> FrontendSpec:
    stages_raw = node.raw("stages")
    if not isinstance(stages_raw, list) or not stages_raw:
        raise ScenarioError(f"{node.at('stages')}: must be a non-empty list of "
                            f"{{workers, service_ms, concurrency_scale}}")
    stages = []
    for i, raw in enumerate(stages_raw):
        st = _Node(raw, f"{node.at('stages')}[{i}]")
        name = st.raw("name", f"stage{i}")
        if not isinstance(name, str) or not name:
            raise ScenarioError(f"{st.at('name')}: must be a non-empty string, got {_show(name)}")
        workers = st.int("workers", 1, maximum=100_000)
        service = st.number("service_ms")
        scale = st.raw("concurrency_scale", None)
        if scale is None:
            scale = [1.0] * workers
        elif isinstance(scale, (int, float)) and not isinstance(scale, bool):
            if not (finite_number(scale) and scale >= 0 and 1.0 + scale * (workers - 1) <= 1e6):
                raise ScenarioError(f"{st.at('concurrency_scale')}: one number s means a factor 1 + s×(busy − 1), "
                                    f"so it must be a non-negative number, got {_show(scale)}")
            scale = [1.0 + float(scale) * k for k in range(workers)]
        if (not isinstance(scale, list) or len(scale) != workers
                or not all(finite_number(x) and 0 < x <= 1e6 for x in scale)):
            raise ScenarioError(f"{st.at('concurrency_scale')}: must be a list of {workers} positive numbers (one "
                                f"per worker: entry k is the service-time factor with k+1 busy), or one number "
                                f"s meaning 1 + s×(busy − 1); got {_show(scale)}")
        st.done()
        stages.append(StageSpec(name, workers, service, tuple(float(x) for x in scale)))
    measured = node.raw("measured_for", None)
    if measured is not None and not isinstance(measured, dict):
        raise ScenarioError(f"{node.at('measured_for')}: must be a mapping (model, frontend, transport, image)")
    node.done()
    return FrontendSpec(tuple(stages), measured, "frontend")


def _check_encoder_pool(engine: Engine, images, role, where: str) -> None:
    """An encoder pool encodes the traffic's images instead of the front worker: never both, nor a frontend in
    front of it (their order is not modeled)."""
    if images is None:
        raise ScenarioError("engine.encoder: encodes the requests' images; needs traffic.source.images")
    if role.vision is not None:
        raise ScenarioError(f"{where}.vision: images are encoded by the encoder pool (engine.encoder), not on the "
                            f"worker: give one of them")
    if role.frontend is not None or role.host_profile is not None:
        raise ScenarioError(f"{where}: an SGLang frontend (frontend or host_profile) in front of an encoder pool is "
                            f"not modeled; remove one of them")


def _check_images(engine: Engine, traffic: Traffic, base_dir: Path, rules: BackendRules) -> Engine:
    """Rules that join the traffic's images and the SGLang worker that takes them (``rules``: the engine's
    backend's, ``config.backends``); resolves host profiles."""
    images = getattr(traffic.source, "images", None)
    front = engine.front_role
    role = engine.workers[front]
    where = f"engine.workers.{front}"
    if engine.encoder is not None:
        _check_encoder_pool(engine, images, role, where)
    if images is not None and engine.encoder is None and not rules.encodes_images:
        raise ScenarioError("traffic.source.images: images are encoded by SGLang workers only; set engine.backend: "
                            "sglang")
    if images is None and role.vision is not None:
        raise ScenarioError(f"{where}.vision: sizes the image embedding cache and encoder; needs "
                            f"traffic.source.images")
    if images is not None and engine.encoder is None and role.timing.type != "default":
        raise ScenarioError(f"{where}.timing.type: images encoded on the worker are priced by the default "
                            f"timing (the vision tower's roofline); got {role.timing.type}")
    if images is not None and role.deployment.model.vision is None:
        raise ScenarioError(f"engine.model: {role.deployment.model.model_id} has no vision tower in the registry; "
                            f"images need a vision-language model such as Qwen/Qwen3-VL-8B-Instruct")
    if images is not None:
        from simmodel.perf.vision import image_tokens

        try:
            tokens = image_tokens(role.deployment, images)
        except ValueError as exc:  # the model's image processor refuses the shape (e.g. aspect ratio)
            raise ScenarioError(f"traffic.source.images: {exc}") from None
        if tokens + 1 >= role.context_length:
            raise ScenarioError(f"traffic.source.images: {images.count} image(s) of {images.height}x{images.width} "
                                f"are {tokens} visual tokens per request, leaving no room under {front} "
                                f"context_length {role.context_length}")
    rules.check_with_traffic(engine, traffic, front)
    profile = role.host_profile
    if profile is not None:
        from simmodel.frontend.host_profile import ImageKey, load_host_profile

        path = Path(profile.path)
        key = None if images is None else ImageKey(images.height, images.width, images.count, images.encoding)
        try:
            stages, transport = load_host_profile(path if path.is_absolute() else base_dir / path,
                                                  model=engine.model, frontend=profile.frontend, image=key,
                                                  transport=profile.transport)
        except ScenarioError as exc:
            raise ScenarioError(f"{where}.host_profile: {exc}") from None
        measured = {"model": engine.model, "frontend": profile.frontend, "transport": transport,
                    "image": None if key is None else str(key)}
        frontend = FrontendSpec(tuple(stages), measured, f"host_profile:{path}")
        engine = replace(engine, workers={**engine.workers, front: replace(role, frontend=frontend)})
    return engine
