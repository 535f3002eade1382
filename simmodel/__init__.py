"""simmodel: a GPU-free SimPy simulator of LLM inference serving."""

from simmodel.config.load import load_scenario
from simmodel.errors import ScenarioError, SimulationError
from simmodel.sim import Results, Simulation

__all__ = ["Results", "ScenarioError", "Simulation", "SimulationError", "load_scenario"]
__version__ = "0.1.0"
