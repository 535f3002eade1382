"""The two ways a run can fail: bad input, or a simulation that cannot go on."""


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
