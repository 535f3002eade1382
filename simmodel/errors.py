"""The two ways a run can fail: bad input, or a simulation that cannot go on."""


class ScenarioError(ValueError):
    """Bad input: names the dotted path (or file and line) and the rule broken."""


class SimulationError(RuntimeError):
    """A valid scenario that the engine cannot serve (e.g. no pass can make progress)."""
