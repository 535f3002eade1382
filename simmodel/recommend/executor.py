"""Where a search's candidates are simulated: worker processes on this machine, or tasks on a Ray
cluster. Both take the same plain-data tasks and give back the same ledger entries, in the order they
finish; the search puts them back in candidate order, so the executor never changes a result.

A worker that dies while simulating a candidate (killed for memory, a crash in a native library) costs
that candidate only: it is recorded as ``failed`` (``worker_died``), a new worker takes its place, and the
search goes on.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator

from simmodel.errors import ScenarioError
from simmodel.recommend.evaluate import evaluate

Task = tuple  # (candidate id, config, SearchSpec, base folder): evaluate's arguments
MAX_WORKERS = 256


def _evaluate(task: Task) -> dict:
    return evaluate(*task)


def died(task: Task, what: str) -> dict:
    """The ledger entry of a candidate whose worker died."""
    return {"id": task[0], "status": "failed", "reason_category": "worker_died", "reason": what,
            "gpu_count": None, "metrics": None, "objectives": None, "score": None}


def _serve(conn, function: Callable[[Task], dict]) -> None:
    """A worker: simulate each task it is sent, until it is sent None or the search goes away. Ctrl-C and
    SIGTERM are the search's to handle: it stops its workers itself (``LocalExecutor.close``), and a
    worker dies with it if it is killed outright, so none is left holding the caller's pipes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent()
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the search ended without telling us
            return
        if task is None:
            return
        conn.send(function(task))


def _die_with_parent() -> None:
    """Ask Linux to kill this process when the process that forked it dies (prctl PR_SET_PDEATHSIG);
    elsewhere nothing is asked, and a worker ends when it reads the closed pipe."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class LocalExecutor:
    """``workers`` processes (forked once, kept for the whole search), each simulating one candidate at a
    time; with one worker, candidates run in this process. ``function`` is what a worker runs per task."""

    def __init__(self, workers: int | None = None, function: Callable[[Task], dict] = _evaluate) -> None:
        self.workers = min(max(1, workers or os.cpu_count() or 1), MAX_WORKERS)
        self.function = function
        self._procs: list = []  # (process, connection)

    def _spawn(self):
        parent, child = multiprocessing.get_context("fork").Pipe()
        proc = multiprocessing.get_context("fork").Process(target=_serve, args=(child, self.function), daemon=True)
        proc.start()
        child.close()
        return proc, parent

    def map(self, tasks: list[Task]) -> Iterator[dict]:
        if self.workers == 1:
            for task in tasks:
                yield self.function(task)
            return
        while len(self._procs) < min(self.workers, len(tasks)):
            self._procs.append(self._spawn())
        queue = list(reversed(tasks))
        busy: dict[int, Task] = {}  # worker index → its task
        idle = list(range(len(self._procs)))
        while queue or busy:
            while queue and idle:
                i = idle.pop()
                busy[i] = queue.pop()
                self._procs[i][1].send(busy[i])
            waiting = {}
            for i in busy:
                proc, conn = self._procs[i]
                waiting[conn] = i
                waiting[proc.sentinel] = i
            for ready in multiprocessing.connection.wait(list(waiting)):
                i = waiting[ready]
                if i not in busy:
                    continue  # both its pipe and its sentinel were ready
                proc, conn = self._procs[i]
                task = busy.pop(i)
                try:
                    entry = conn.recv()
                except (EOFError, OSError):  # the worker died with the task
                    proc.join()
                    entry = died(task, f"the worker process died (exit code {proc.exitcode})")
                    self._procs[i] = self._spawn()
                idle.append(i)
                yield entry

    def close(self, abort: bool = False) -> None:
        """Stop the workers: at once (``abort``, dropping what they were simulating: killed, as they ignore
        SIGINT and SIGTERM) or when idle."""
        for proc, conn in self._procs:
            if abort:
                proc.kill()
            else:
                try:
                    conn.send(None)
                except OSError:
                    pass
        for proc, conn in self._procs:
            proc.join()
            conn.close()
        self._procs = []


def _reachable(address: str) -> None:
    """A HOST:PORT (or ray://HOST:PORT) address must accept a connection within a few seconds: Ray itself
    would retry for minutes."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return  # auto, or a form Ray parses itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ScenarioError(f"--executor ray={address}: cannot connect: {exc.strerror or exc}") from None


class RayExecutor:
    """Each candidate a Ray task of one CPU on the cluster at ``address`` (``auto``: the one this machine
    belongs to), or on a Ray instance started here when no address is given. The nodes need simmodel
    installed and the scenario's files at the same paths."""

    def __init__(self, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ScenarioError("--executor ray: needs Ray; pip install 'simmodel[ray]'") from None
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            if address:
                _reachable(address)
            import warnings

            previous = signal.getsignal(signal.SIGTERM)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise ScenarioError(f"--executor ray={address}: cannot connect: {' '.join(str(exc).split())}") \
                    from None
            finally:
                # ray.init installs a SIGTERM handler that exits at once: SIGTERM stays the search's, which
                # cancels the tasks, shuts Ray down and writes the partial ledger, as on Ctrl-C.
                if previous is not None and threading.current_thread() is threading.main_thread():
                    signal.signal(signal.SIGTERM, previous)
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_evaluate)
        self._pending: dict = {}

    def map(self, tasks: list[Task]) -> Iterator[dict]:
        ray = self._ray
        self._pending = {self._remote.remote(task): task for task in tasks}
        while self._pending:
            done, _ = ray.wait(list(self._pending), num_returns=1)
            task = self._pending.pop(done[0])
            try:
                yield ray.get(done[0])
            except ray.exceptions.RayError as exc:  # the task's worker or node died
                yield died(task, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")

    def close(self, abort: bool = False) -> None:
        if abort:
            for ref in self._pending:
                self._ray.cancel(ref, force=True)
        self._pending = {}
        if self._started:
            self._ray.shutdown()


def make_executor(name: str, workers: int | None):
    """``local`` or ``ray[=ADDRESS]`` (the ``--executor`` option)."""
    if name == "local":
        return LocalExecutor(workers)
    if name == "ray" or name.startswith("ray="):
        address = name.partition("=")[2]
        return RayExecutor(address or None)
    raise ScenarioError(f"--executor: must be local, ray or ray=ADDRESS, got {name!r}")
