"""``limits``: the run's safety ceilings (passes, requests, simulated seconds), and the rule that the
traffic's own stop stays under them.
"""

from __future__ import annotations

from simmodel.config.node import _Node
from simmodel.config.schema import LimitsSpec, Traffic
from simmodel.errors import ScenarioError


def _limits(node: _Node, traffic: Traffic) -> LimitsSpec:
    base = LimitsSpec()
    spec = LimitsSpec(node.int("max_passes", base.max_passes, maximum=10**15),
                      node.int("max_requests", base.max_requests),
                      node.number("max_virtual_time_seconds", base.max_virtual_time_seconds, positive=True))
    node.done()
    stop = traffic.stop
    if stop.requests is not None and stop.requests > spec.max_requests:
        raise ScenarioError(f"traffic.stop.requests: {stop.requests:,} is above limits.max_requests "
                            f"({spec.max_requests:,}); raise the limit to run that many")
    if stop.max_virtual_time_seconds is not None and stop.max_virtual_time_seconds > spec.max_virtual_time_seconds:
        raise ScenarioError(f"traffic.stop.max_virtual_time_seconds: {stop.max_virtual_time_seconds:g} is above "
                            f"limits.max_virtual_time_seconds ({spec.max_virtual_time_seconds:g}); raise the limit")
    return spec
