"""Pools that scale during a run: ``fleet`` (a pool's workers starting, serving, draining, and their lifetimes)
and ``planner`` (the replica planner's process: ``planner.mode`` load). ``docs/planner.md`` describes both."""

from simmodel.scaling.fleet import Fleet
from simmodel.scaling.planner import ReplicaPlanner

__all__ = ["Fleet", "ReplicaPlanner"]
