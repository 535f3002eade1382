"""The simulation's SimPy environment: ``Late`` events come after every normal event of their instant."""

import pytest
import simpy

from simmodel.engine.environment import Environment, Late


def test_a_late_event_fires_after_the_normal_events_of_its_instant():
    # At t = 5: a Late timeout scheduled first, then a normal timeout, then a second Late one; a normal event
    # scheduled at 5 by the first normal one (zero delay) still comes before both Late ones. SimPy orders an
    # instant's events by priority, then scheduling order: normal, normal (chained), late, late.
    env = Environment()
    fired = []
    Late(env, 5).callbacks.append(lambda _: fired.append(("late", 1)))

    def chain(_):
        fired.append(("normal", 1))
        env.timeout(0).callbacks.append(lambda _: fired.append(("normal", 2)))

    env.timeout(5).callbacks.append(chain)
    Late(env, 5).callbacks.append(lambda _: fired.append(("late", 2)))
    env.timeout(4).callbacks.append(lambda _: fired.append(("earlier", 0)))
    env.run()
    assert fired == [("earlier", 0), ("normal", 1), ("normal", 2), ("late", 1), ("late", 2)]
    assert env.now == 5


def test_a_late_event_carries_its_value_and_refuses_a_plain_simpy_environment():
    env = Environment()
    seen = []

    def process():
        seen.append((yield Late(env, 3, value="done")))

    env.process(process())
    env.run()
    assert seen == ["done"] and env.now == 3
    with pytest.raises(TypeError, match="Environment"):
        Late(simpy.Environment(), 1)
