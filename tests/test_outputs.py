"""Output folders and files: simmodel never removes what it did not write (the manifest), writes every
output whole or not at all (a full disk included), and stops on SIGTERM as on Ctrl-C.

The command runs in a subprocess whose current folder is a scratch folder holding a user's file, so a
refusal that failed would cost that file, never the repository.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from factories import make_scenario

from simmodel.errors import ScenarioError
from simmodel.export import MANIFEST, check_output_dir, staged_folder

ROOT = Path(__file__).resolve().parents[1]
TINY = ("--set", "traffic.stop.requests=5")


def simmodel(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **(env or {})}
    return subprocess.run([sys.executable, "-m", "simmodel.cli", *args], cwd=cwd, env=environ,
                          capture_output=True, text=True)


def popen(*args: str, cwd: Path) -> subprocess.Popen:
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "simmodel.cli", *args], cwd=cwd, env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def work(tmp_path) -> Path:
    """The user's folder: the scenario and a file of theirs."""
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "mine.py").write_text("print('my work')\n")
    (folder / "s.yaml").write_text(yaml.safe_dump(make_scenario()))
    return folder


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr


def no_staging(folder: Path) -> bool:
    """No ``.NAME.*`` staging folder or temporary file is left in ``folder``."""
    return not [p.name for p in folder.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("where, says", [
    (".", "is the current folder"),
    ("..", "holds the current folder"),
    ("{link}", "is the current folder"),  # a link to the current folder is the current folder
    ("/", "is the filesystem root"),
    ("{home}", "is the home folder"),
    ("{home}/..", "holds the home folder"),
])
@pytest.mark.parametrize("command", ["run", "recommend", "compare"])
def test_places_that_are_never_an_output_folder(work, tmp_path, where, says, command):
    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    (home / ".bashrc").write_text("# the user's\n")
    (tmp_path / "link").symlink_to(work, target_is_directory=True)
    out = where.format(link=tmp_path / "link", home=home)
    extra = {"run": [], "recommend": [], "compare": ["--measured", str(work / "m.json")]}[command]
    # NOTE: never --overwrite of the real root from a subprocess: against a simmodel without these rules
    # (an older checkout, a regression) it would empty this machine. The root's rule is checked without it
    # here, and with it in process by test_the_root_is_refused_even_with_overwrite, which removes nothing.
    overwrite = [] if out == "/" else ["--overwrite"]
    proc = simmodel(command, "-c", "s.yaml", *TINY, *extra, "--output-dir", out, *overwrite, cwd=work,
                    env={"HOME": str(home)})
    assert proc.returncode == 2, proc.stderr
    assert f"--output-dir {out}: {says}" in one_line(proc)
    assert sorted(p.name for p in work.iterdir()) == ["mine.py", "s.yaml"]
    assert (home / ".bashrc").exists()


def test_the_root_is_refused_even_with_overwrite():
    """The check alone (it removes nothing): the filesystem root is never an output folder."""
    with pytest.raises(ScenarioError, match="--output-dir /: is the filesystem root"):
        check_output_dir(Path("/"), overwrite=True)


@pytest.mark.parametrize("command", ["run", "recommend", "compare"])
def test_the_scenarios_own_folder_is_refused(work, tmp_path, command):
    extra = ["--measured", str(work / "m.json")] if command == "compare" else []
    proc = simmodel(command, "-c", str(work / "s.yaml"), *TINY, *extra, "--output-dir", str(work), "--overwrite",
                    cwd=tmp_path)
    assert proc.returncode == 2
    assert f"--output-dir {work}: is the scenario's folder" in one_line(proc)
    assert sorted(p.name for p in work.iterdir()) == ["mine.py", "s.yaml"]


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_folder_simmodel_did_not_write_is_refused_with_or_without_overwrite(work, overwrite):
    out = work / "results"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    proc = simmodel("run", "-c", "s.yaml", *TINY, "--output-dir", "results", *overwrite, cwd=work)
    assert proc.returncode == 2
    assert f"--output-dir results: folder is not empty and simmodel did not write it (no {MANIFEST}" in one_line(proc)
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and no_staging(work)


def test_overwrite_replaces_simmodels_own_folder_and_only_what_it_listed(work):
    assert simmodel("run", "-c", "s.yaml", *TINY, "--output-dir", "out", cwd=work).returncode == 0
    out = work / "out"
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["command"] == "run" and manifest["written_by"] == "simmodel"
    assert manifest["files"] == ["events.parquet", "passes.csv", "requests.csv", "summary.json"]
    again = simmodel("run", "-c", "s.yaml", *TINY, "--output-dir", "out", cwd=work)
    assert again.returncode == 2 and "holds simmodel's earlier output (use --overwrite" in one_line(again)
    # the second run keeps no event log: the first run's events.parquet, listed, goes with the folder
    ok = simmodel("run", "-c", "s.yaml", *TINY, "--output-dir", "out", "--overwrite", "--events", "off", cwd=work)
    assert ok.returncode == 0, ok.stderr
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "passes.csv", "requests.csv", "summary.json"]
    assert sorted(p.name for p in work.iterdir()) == ["mine.py", "out", "s.yaml"]


def test_a_file_added_to_simmodels_folder_stops_overwrite_and_survives(work):
    assert simmodel("run", "-c", "s.yaml", *TINY, "--output-dir", "out", cwd=work).returncode == 0
    out = work / "out"
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "analysis.ipynb").write_text("{}")
    proc = simmodel("run", "-c", "s.yaml", *TINY, "--output-dir", "out", "--overwrite", cwd=work)
    assert proc.returncode == 2
    assert "--output-dir out: holds analysis.ipynb, which simmodel did not write" in one_line(proc)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "analysis.ipynb"} == before
    assert (out / "analysis.ipynb").read_text() == "{}" and no_staging(work)


def test_an_empty_folder_is_fine(work):
    (work / "out").mkdir()
    assert simmodel("run", "-c", "s.yaml", *TINY, "--output-dir", "out", cwd=work).returncode == 0
    assert (work / "out" / MANIFEST).exists()


def test_replacing_removes_exactly_the_listed_entries(tmp_path):
    """A hand-made earlier output: a.txt and sub/b.txt listed; then sub/c.txt (not listed) stops it."""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "a.txt").write_text("old")
    (out / "sub" / "b.txt").write_text("old")
    (out / MANIFEST).write_text(json.dumps({"written_by": "simmodel", "files": ["a.txt", "sub/b.txt"],
                                            "folders": ["sub"]}))
    with staged_folder(out, True, "test") as staging:
        (staging / "new.txt").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "new.txt"]
    assert json.loads((out / MANIFEST).read_text())["files"] == ["new.txt"]
    (out / "sub").mkdir()
    (out / "sub" / "c.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="holds sub, which simmodel did not write"):
        check_output_dir(out, True)


def test_a_link_is_never_simmodels_even_under_a_listed_name(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "precious").write_text("mine")
    (out / "summary.json").symlink_to(tmp_path / "precious")
    (out / MANIFEST).write_text(json.dumps({"written_by": "simmodel", "files": ["summary.json"], "folders": []}))
    with pytest.raises(FileExistsError, match="holds summary.json, which simmodel did not write"):
        check_output_dir(out, True)


def test_recommend_lists_its_subfolder_and_refuses_a_foreign_file_in_it(work):
    search = make_scenario(optimization={"target": "e2e_latency"}, optimizer={"parallelism": 1})
    role = search["engine"]["workers"]["aggregated"]
    role["parallelism"] = {"preset": False}  # the values given, not the default shapes and budgets
    role["scheduler"].update(max_batched_tokens=8192, max_sequences={"choices": [1, 2]})
    (work / "search.yaml").write_text(yaml.safe_dump(search))
    args = ("recommend", "-c", "search.yaml", "--output-dir", "rec")
    assert simmodel(*args, cwd=work).returncode == 0
    manifest = json.loads((work / "rec" / MANIFEST).read_text())
    # both candidates feasible (no SLA): two saved scenarios
    assert manifest["command"] == "recommend" and manifest["folders"] == ["recommendations"]
    assert manifest["files"] == ["pareto.html", "recommendation.csv", "recommendation.json",
                                 "recommendations/0001.yaml", "recommendations/0002.yaml"]
    assert simmodel(*args, "--overwrite", cwd=work).returncode == 0
    (work / "rec" / "recommendations" / "mine.yaml").write_text("x: 1\n")
    proc = simmodel(*args, "--overwrite", cwd=work)
    assert proc.returncode == 2 and "holds recommendations/mine.yaml, which simmodel did not write" in one_line(proc)
    assert (work / "rec" / "recommendations" / "mine.yaml").exists() and no_staging(work)


def test_compare_writes_a_manifest_and_overwrites_its_own(work):
    (work / "m.json").write_text(json.dumps({"backend": "vllm", "completed": 4, "duration": 0.25,
                                             "mean_ttft_ms": 25.0}))
    args = ("compare", "-c", "s.yaml", "--measured", "m.json", "--output-dir", "cmp")
    assert simmodel(*args, cwd=work).returncode == 0
    assert json.loads((work / "cmp" / MANIFEST).read_text())["files"] == ["compare.csv", "compare.html",
                                                                           "compare.json", "summary.json"]
    assert simmodel(*args, cwd=work).returncode == 2
    assert simmodel(*args, "--overwrite", cwd=work).returncode == 0
    (work / "cmp" / "x").write_text("")
    assert simmodel(*args, "--overwrite", cwd=work).returncode == 2 and (work / "cmp" / "x").exists()


def test_calibrate_replaces_only_a_calibration_file(tmp_path):
    from simmodel.calibrate.fit import check_output, write_calibration

    scenario = tmp_path / "s.yaml"
    scenario.write_text("traffic: {}\n")
    proc = simmodel("calibrate", "--runs", str(tmp_path / "runs.yaml"), "--output", str(scenario), "--overwrite",
                    cwd=tmp_path)
    assert proc.returncode == 2
    assert f"--output {scenario}: exists and is not a calibration file simmodel wrote" in one_line(proc)
    assert scenario.read_text() == "traffic: {}\n"
    with pytest.raises(FileExistsError, match="exists \\(use --overwrite"):
        check_output(scenario, False)
    cal = tmp_path / "cal.yaml"
    write_calibration(cal, {"calibration": {"parameters": {"compute_efficiency": 0.5}}})
    write_calibration(cal, {"calibration": {"parameters": {"compute_efficiency": 0.7}}}, overwrite=True)
    assert yaml.safe_load(cal.read_text())["calibration"]["parameters"] == {"compute_efficiency": 0.7}
    with pytest.raises(FileExistsError):
        write_calibration(scenario, {"calibration": {"parameters": {}}}, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.yaml", "s.yaml"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EIO])
def test_a_full_disk_leaves_the_earlier_output_and_no_staging(tmp_path, monkeypatch, code):
    from click.testing import CliRunner

    from simmodel.cli import cli

    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(make_scenario()))
    out = tmp_path / "out"
    args = ["run", "-c", str(scenario), "--output-dir", str(out), "--overwrite"]
    assert CliRunner().invoke(cli, args).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr("simmodel.export.write_csv", full)  # requests.csv, the second file written
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    assert result.stderr == f"simmodel: --output-dir {out}: cannot write: {os.strerror(code)}; {out} is left as " \
                            f"it was\n"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "s.yaml"]


def test_a_full_disk_leaves_the_calibration_file_as_it_was(tmp_path, monkeypatch):
    from simmodel.calibrate.fit import write_calibration

    cal = tmp_path / "cal.yaml"
    write_calibration(cal, {"calibration": {"parameters": {"compute_efficiency": 0.5}}})
    before = cal.read_bytes()

    def full(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError) as info:
        write_calibration(cal, {"calibration": {"parameters": {"compute_efficiency": 0.7}}}, overwrite=True)
    assert info.value.errno == errno.ENOSPC and info.value.filename == f"--output {cal}"
    assert cal.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["cal.yaml"]


@pytest.mark.parametrize("events", ["memory", "stream"])
def test_a_really_full_disk(work, tmp_path, events):
    """A 64 KiB file system (tmpfs, where mounting is allowed: root on Linux): the run's files do not fit
    (passes.csv alone is over 64 KiB for 200 requests of 5 passes each); nothing is left on it, neither
    the staging folder nor the streamed event log's temporary file."""
    small = tmp_path / "small"
    small.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)],
                                 capture_output=True).returncode == 0
    except OSError:
        mounted = False
    if not mounted:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        proc = simmodel("run", "-c", "s.yaml", "--set", "traffic.stop.requests=200", "--output-dir",
                        str(small / "out"), "--events", events, cwd=work)
        assert proc.returncode == 1
        # The streamed event log or the staged files: whichever fills the disk first, the line names the
        # option and the OS's reason
        line = one_line(proc)
        assert line.startswith(f"simmodel: --output-dir {small / 'out'}: cannot write") and \
            "No space left on device" in line
        assert list(small.iterdir()) == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for(what, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_sigterm_stops_recommend_its_workers_and_keeps_the_ledger(work):
    """Two workers; candidates of 4 to 7 requests then two of 300,000 (``_search_of_small_then_huge``).
    SIGTERM to the search alone (``kill PID``), not its workers."""
    _search_of_small_then_huge(work, [4, 5, 6, 7, 300000, 300001], 2)
    proc = popen("recommend", "-c", "search.yaml", "--output-dir", "rec", cwd=work)
    _wait_for(lambda: len(_children(proc.pid)) == 2)
    time.sleep(3)  # the four small candidates finish
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    # returns only once every holder of the pipes has closed them: no worker is left with them
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143, stderr
    assert "simmodel: terminated (SIGTERM) after" in stderr and len(stderr.strip().splitlines()) == 1
    assert not any(_alive(pid) for pid in workers)
    ledger = json.loads((work / "rec" / "recommendation.json").read_text())
    assert ledger["interrupted"] is True
    assert 1 <= len(ledger["candidates"]) <= 4
    assert {e["id"] for e in ledger["candidates"]} <= {1, 2, 3, 4}
    assert all(e["status"] == "feasible" for e in ledger["candidates"])


@pytest.mark.parametrize("signum, code, says", [(signal.SIGTERM, 143, "simmodel: terminated (SIGTERM)\n"),
                                               (signal.SIGINT, 130, "simmodel: interrupted\n")])
def test_a_streamed_run_stopped_by_a_signal_leaves_no_file(work, signum, code, says):
    pytest.importorskip("pyarrow")
    proc = popen("run", "-c", "s.yaml", "--set", "traffic.stop.requests=1000000", "--output-dir", "out",
                 "--events", "stream", cwd=work)
    _wait_for(lambda: any(p.name.startswith(".out.events.") for p in work.iterdir()))
    time.sleep(1)  # into the run, the event log streaming
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert stderr == says
    assert sorted(p.name for p in work.iterdir()) == ["mine.py", "s.yaml"]


def _search_of_small_then_huge(work: Path, requests: list[int], parallelism: int) -> Path:
    """One candidate per ``traffic.stop.requests`` value, in that order: four requests at one at a time
    take a fraction of a second; 300,000 take 1.5 million passes (minutes)."""
    search = make_scenario(optimization={"target": "e2e_latency"}, optimizer={"parallelism": parallelism})
    role = search["engine"]["workers"]["aggregated"]
    role["parallelism"] = {"preset": False}  # the values given, not the default shapes and budgets
    role["scheduler"].update(max_batched_tokens=8192, max_sequences=256)
    search["traffic"]["stop"] = {"requests": {"choices": requests}}
    path = work / "search.yaml"
    path.write_text(yaml.safe_dump(search))
    return path


def test_sigterm_during_a_ray_wait_stops_the_search_as_sigterm(work):
    """ray.init installs a SIGTERM handler that exits at once (no ledger): the search's is put back. And
    a SIGTERM that arrives inside ray.wait comes out of it as Ray's own KeyboardInterrupt: the search
    still knows it was SIGTERM. Sent 0.5 s after the small candidate's result, while the two huge ones run."""
    pytest.importorskip("ray")
    import threading

    from simmodel.errors import StopOnSigterm
    from simmodel.recommend.executor import RayExecutor
    from simmodel.recommend.search import load_search, run_search

    spec, space, base = load_search(_search_of_small_then_huge(work, [4, 300000, 300001], 2))
    handler = StopOnSigterm()
    previous = signal.signal(signal.SIGTERM, handler)
    timers = []

    def terminate_soon(entry):
        timers.append(threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)))
        timers[-1].start()

    try:
        executor = RayExecutor()
        assert signal.getsignal(signal.SIGTERM) is handler
        entries, stopped = run_search(spec, space, base, executor, terminate_soon)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped == signal.SIGTERM
    assert [(e["id"], e["status"]) for e in entries] == [(1, "feasible")]
