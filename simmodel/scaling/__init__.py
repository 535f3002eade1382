"""Pools that scale during a run: ``fleet`` (a pool's workers starting, serving, draining, and their lifetimes)
``planner`` (the replica planner's process: ``planner.mode`` load or sla), and the SLA mode's ``observe`` (what
it saw of a pool's last interval) and ``sla`` (how many workers that load needs). ``docs/planner.md``."""

from simmodel.scaling.fleet import Fleet
from simmodel.scaling.planner import ReplicaPlanner

__all__ = ["Fleet", "ReplicaPlanner"]
