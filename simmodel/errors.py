"""The two ways a run can fail: bad input, or a simulation that cannot go on; and the signals that stop one."""

import signal


class ScenarioError(ValueError):
    """Bad input: names the dotted path (or file and line) and the rule broken.

    ``category`` sorts the rule for a search (``simmodel recommend`` rejects a candidate before simulating
    it): ``invalid_shape`` (parallelism the model or engine cannot take), ``kv_capacity`` (a rank cannot
    hold one request), or ``invalid_config`` (anything else).
    """

    def __init__(self, message: str, category: str = "invalid_config") -> None:
        super().__init__(message)
        self.category = category


class SimulationError(RuntimeError):
    """A valid scenario that the engine cannot serve (e.g. no pass can make progress)."""


class Interrupted(KeyboardInterrupt):
    """A stop asked for by a signal: Ctrl-C (SIGINT), or SIGTERM (``kill``, a job scheduler, a CI
    timeout), which the command treats the same way (what is finished is kept, partial files are removed).
    A ``KeyboardInterrupt``, so every handler of Ctrl-C handles both; ``signum`` says which it was."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class StopOnSigterm:
    """The SIGTERM handler of a command: raises ``Interrupted(SIGTERM)``, as Ctrl-C raises
    ``KeyboardInterrupt``, and remembers that it did, for ``signal_of`` (a library that catches the
    ``KeyboardInterrupt`` and raises one of its own, as Ray's ``wait`` does, loses which signal it was)."""

    def __init__(self) -> None:
        self.received: int | None = None

    def __call__(self, signum, frame) -> None:  # noqa: ARG002 (a signal handler's signature)
        self.received = signum
        raise Interrupted(signum)


def signal_of(exc: KeyboardInterrupt) -> int:
    """The signal a ``KeyboardInterrupt`` stands for: its own (``Interrupted``), else SIGTERM if the
    installed ``StopOnSigterm`` was called, else SIGINT (Ctrl-C)."""
    signum = getattr(exc, "signum", None)
    if signum is None:
        signum = getattr(signal.getsignal(signal.SIGTERM), "received", None) or signal.SIGINT
    return signum
