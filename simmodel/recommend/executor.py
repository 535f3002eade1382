"""Where a search's candidates are simulated: a pool of processes on this machine, or tasks on a Ray
cluster. Both take the same plain-data tasks and give back the same ledger entries, in the order they
finish; the search puts them back in candidate order, so the executor never changes a result."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterator

from simmodel.errors import ScenarioError
from simmodel.recommend.evaluate import evaluate

Task = tuple  # (candidate id, config, SearchSpec, base folder): evaluate's arguments


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the search, which stops them itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _evaluate(task: Task) -> dict:
    return evaluate(*task)


class LocalExecutor:
    """A pool of ``workers`` processes (forked once, kept for the whole search); one worker simulates in
    this process."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._pool = None

    def map(self, tasks: list[Task]) -> Iterator[dict]:
        if self.workers == 1:
            for task in tasks:
                yield _evaluate(task)
            return
        if self._pool is None:
            self._pool = multiprocessing.get_context("fork").Pool(self.workers, initializer=_ignore_sigint)
        yield from self._pool.imap_unordered(_evaluate, tasks)

    def close(self, abort: bool = False) -> None:
        """Stop the workers: at once (``abort``, dropping what they were simulating) or when idle."""
        if self._pool is not None:
            if abort:
                self._pool.terminate()
            else:
                self._pool.close()
            self._pool.join()
            self._pool = None


class RayExecutor:
    """Each candidate a Ray task of one CPU on the cluster at ``address`` (``auto``: the one this machine
    belongs to), or on a Ray instance started here when no address is given. The nodes need simmodel
    installed and the scenario's trace files at the same paths."""

    def __init__(self, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ScenarioError("--executor ray: needs Ray; pip install 'simmodel[ray]'") from None
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise ScenarioError(f"--executor ray={address}: cannot connect: {' '.join(str(exc).split())}") \
                    from None
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_evaluate)
        self._pending: list = []

    def map(self, tasks: list[Task]) -> Iterator[dict]:
        ray = self._ray
        self._pending = [self._remote.remote(task) for task in tasks]
        while self._pending:
            done, self._pending = ray.wait(self._pending, num_returns=1)
            yield ray.get(done[0])

    def close(self, abort: bool = False) -> None:
        if abort:
            for ref in self._pending:
                self._ray.cancel(ref, force=True)
        self._pending = []
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
