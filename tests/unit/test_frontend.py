"""Frontend stages (worker pools with sharing slowdown) and the host cost table that sizes them."""

from __future__ import annotations

import json
from collections.abc import Callable, Generator
from pathlib import Path

import pytest
import simpy

from simmodel.errors import ScenarioError
from simmodel.frontend.host_profile import ImageKey, load_host_profile
from simmodel.frontend.stages import Frontend, StageSpec

MS = 1_000_000  # ns


def submit_all(env: simpy.Environment, frontend: Frontend, ids: list[int], done: dict[int, int]) -> None:
    """Submit every id now; record in ``done`` the instant each one's callback fires."""
    def callback(request_id: int) -> Callable[[], None]:
        return lambda: done.__setitem__(request_id, env.now)
    for request_id in ids:
        frontend.submit(request_id, callback(request_id))


def test_sharing_slowdown_uses_concurrency_at_service_start():
    """2 workers, 10 ms, scale [1.0, 1.5]; r0, r1, r2 at t=0.

    r0 starts alone (k=1): 0-10. r1 starts beside r0 (k=2): 0-15. r2 waits for r0's worker, starts at 10
    beside r1 (k=2): 10-25. Waits 0, 0, 10 → mean 10/3 ms; services 10, 15, 15 → mean 40/3 ms.
    """
    env = simpy.Environment()
    frontend = Frontend(env, [StageSpec("tokenizer", 2, 10.0, (1.0, 1.5))])
    done: dict[int, int] = {}
    submit_all(env, frontend, [0, 1, 2], done)
    env.run()
    assert done == {0: 10 * MS, 1: 15 * MS, 2: 25 * MS}
    assert frontend.left_at == done
    assert frontend.entered_at == {0: 0, 1: 0, 2: 0}
    [stats] = frontend.stage_stats()
    assert stats["stage"] == "tokenizer" and stats["workers"] == 2 and stats["requests"] == 3
    assert stats["mean_wait_ms"] == pytest.approx(10 / 3)
    assert stats["mean_service_ms"] == pytest.approx(40 / 3)


def test_two_stages_in_series():
    """A: 1 worker 2 ms; B: 1 worker 5 ms; r0, r1 at t=0.

    r0: A 0-2, B 2-7. r1: A waits 2, 2-4; B waits 4-7 (3 ms), 7-12.
    A waits 0, 2 → mean 1; B waits 0, 3 → mean 1.5.
    """
    env = simpy.Environment()
    frontend = Frontend(env, [StageSpec("a", 1, 2.0, (1.0,)), StageSpec("b", 1, 5.0, (1.0,))])
    done: dict[int, int] = {}
    submit_all(env, frontend, [0, 1], done)
    env.run()
    assert done == {0: 7 * MS, 1: 12 * MS}
    a, b = frontend.stage_stats()
    assert (a["requests"], a["mean_wait_ms"], a["mean_service_ms"]) == (2, 1.0, 2.0)
    assert (b["requests"], b["mean_wait_ms"], b["mean_service_ms"]) == (2, 1.5, 5.0)


def test_fifo_order_and_late_arrival():
    """1 worker, 1 ms. Ids 5, 3, 9 at t=0 leave at 1, 2, 3 ms in submit order; id 7 at 0.5 ms waits to 3, leaves at 4."""
    env = simpy.Environment()
    frontend = Frontend(env, [StageSpec("tokenizer", 1, 1.0, (1.0,))])
    done: dict[int, int] = {}
    submit_all(env, frontend, [5, 3, 9], done)

    def late() -> Generator[simpy.Event, None, None]:
        yield env.timeout(MS // 2)
        submit_all(env, frontend, [7], done)

    env.process(late())
    env.run()
    assert list(done.items()) == [(5, 1 * MS), (3, 2 * MS), (9, 3 * MS), (7, 4 * MS)]
    assert frontend.entered_at[7] == MS // 2
    # Waits 0, 1, 2 and 2.5 ms → mean 5.5 / 4.
    assert frontend.stage_stats()[0]["mean_wait_ms"] == pytest.approx(5.5 / 4)


def test_service_time_rounds_to_whole_ns():
    """1/3 ms × 1.0 = 333 333.33 ns → 333 333 ns; two in series on one worker leave at 333 333 and 666 666."""
    env = simpy.Environment()
    frontend = Frontend(env, [StageSpec("tokenizer", 1, 1 / 3, (1.0,))])
    done: dict[int, int] = {}
    submit_all(env, frontend, [0, 1], done)
    env.run()
    assert done == {0: 333_333, 1: 666_666}


def test_zero_stages_hand_over_at_once():
    env = simpy.Environment(initial_time=42)
    frontend = Frontend(env, [])
    done: dict[int, int] = {}
    submit_all(env, frontend, [0], done)
    assert done == {0: 42}  # synchronously, before the env runs
    assert frontend.entered_at == frontend.left_at == {0: 42}
    assert frontend.stage_stats() == []


def test_stats_before_any_request():
    frontend = Frontend(simpy.Environment(), [StageSpec("tokenizer", 1, 1.0, (1.0,))])
    assert frontend.stage_stats() == [{"stage": "tokenizer", "workers": 1, "requests": 0,
                                       "mean_wait_ms": None, "mean_service_ms": None}]


@pytest.mark.parametrize(("workers", "service_ms", "scale", "match"), [
    (2, 1.0, (1.0,), "needs 2 entries"),
    (0, 1.0, (), "workers must be >= 1"),
    (1, -1.0, (1.0,), "service_ms"),
    (1, 1.0, (0.0,), "concurrency_scale entries"),
])
def test_stage_spec_validation(workers, service_ms, scale, match):
    with pytest.raises(ValueError, match=match):
        StageSpec("tokenizer", workers, service_ms, scale)


VL = "Qwen/Qwen3-VL-8B-Instruct"
PNG_1K = {"height": 1024, "width": 1024, "count": 1, "encoding": "png"}


def stage(name: str, workers: int = 1, service_ms: float = 1.0, scale: list[float] | None = None) -> dict:
    return {"name": name, "workers": workers, "service_ms": service_ms, "concurrency_scale": scale or [1.0] * workers}


def write_profile(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "host-costs.json"
    path.write_text(json.dumps({"version": 1, "rows": rows}))
    return path


def test_host_profile_picks_first_matching_row(tmp_path):
    """Two rows for the same workload (shm first, then inline): the first in file order wins."""
    path = write_profile(tmp_path, [
        {"model": VL, "frontend": "python", "transport": "inline", "image": None, "stages": [stage("tokenizer")]},
        {"model": VL, "frontend": "python", "transport": "shm", "image": PNG_1K,
         "stages": [stage("tokenizer", service_ms=3.1), stage("mm_processor", 2, 41.0, [1.0, 1.4])]},
        {"model": VL, "frontend": "python", "transport": "inline", "image": PNG_1K, "stages": []},
    ])
    stages, transport = load_host_profile(path, model=VL, frontend="python", image=ImageKey(1024, 1024, 1, "png"))
    assert transport == "shm"
    assert stages == [StageSpec("tokenizer", 1, 3.1, (1.0,)), StageSpec("mm_processor", 2, 41.0, (1.0, 1.4))]
    text_stages, _ = load_host_profile(path, model=VL, frontend="python", image=None)
    assert [s.name for s in text_stages] == ["tokenizer"]


def test_host_profile_missing_row_says_what_to_measure(tmp_path):
    path = write_profile(tmp_path, [
        {"model": VL, "frontend": "python", "transport": "shm", "image": None, "stages": [stage("tokenizer")]},
    ])
    with pytest.raises(ScenarioError) as err:
        load_host_profile(path, model=VL, frontend="python", image=ImageKey(1024, 1024, 1, "png"))
    message = str(err.value)
    assert "\n" not in message
    assert f"host profile {path} has no row for model '{VL}', frontend 'python', image 1024x1024 png x1" in message
    assert "add that row, measured on the serving host" in message
    assert "image none (text only)" in message  # the rows it does have


@pytest.mark.parametrize(("content", "match"), [
    (None, "cannot read"),
    ("{not json", "not valid JSON"),
    ('{"version": 2, "rows": []}', '"version": 1'),
    ('{"version": 1, "rows": {}}', '"rows" must be a list'),
])
def test_host_profile_bad_file(tmp_path, content, match):
    path = tmp_path / "host-costs.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ScenarioError, match=match):
        load_host_profile(path, model=VL, frontend="python", image=None)


@pytest.mark.parametrize(("bad", "match"), [
    ({"transport": 3}, r"rows\[1\]\.transport must be a non-empty string"),
    ({"image": {**PNG_1K, "height": 0}}, r"rows\[1\]\.image\.height must be an integer >= 1"),
    ({"stages": [stage("mm", 2, 1.0, [1.0])]}, r"rows\[1\]\.stages\[0\]: stage 'mm': concurrency_scale needs 2"),
    ({"stages": [{**stage("mm"), "service_ms": "fast"}]}, r"rows\[1\]\.stages\[0\]\.service_ms must be a number"),
])
def test_host_profile_bad_row_names_row_and_field(tmp_path, bad, match):
    good = {"model": VL, "frontend": "python", "transport": "shm", "image": None, "stages": []}
    path = write_profile(tmp_path, [good, {**good, **bad}])
    with pytest.raises(ScenarioError, match=match):
        load_host_profile(path, model=VL, frontend="python", image=None)
