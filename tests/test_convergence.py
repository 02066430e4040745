"""The shared stop rule: ε, crash, budget — and no ε target when epsilon is 0 or left out."""

from __future__ import annotations

import numpy as np

from simasgd.runs.convergence import Monitor
from simasgd.spec.scenario import StopConfig


def _feed(stop: StopConfig, losses: list[float]) -> Monitor:
    m = Monitor(stop, 0)
    for i, loss in enumerate(losses):
        if m.observe(float(i), 10 * i, loss):
            break
    return m


def test_epsilon_reached_stops_and_counts_as_reached() -> None:
    m = _feed(StopConfig(epsilon=0.5), [1.0, 0.8, 0.5, 0.1])
    assert m.reached and m.updates_to_eps == 20 and m.done
    s = m.summary(20, 2.0, np.zeros(3))
    assert not s.not_reached and s.updates_to_eps == 20


def test_epsilon_missed_is_not_reached() -> None:
    s = _feed(StopConfig(epsilon=0.5), [1.0, 0.9, 0.8]).summary(20, 2.0, np.zeros(3))
    assert s.not_reached and s.updates_to_eps is None


def test_no_epsilon_target_never_reaches_never_diverges() -> None:
    for stop in (StopConfig(), StopConfig(epsilon=0.0)):
        m = _feed(stop, [1.0, 0.5, 0.0, 0.0])  # even a loss of exactly 0 is no ε stop
        assert not m.reached and not m.done and len(m.loss) == 4
        s = m.summary(30, 3.0, np.zeros(3))
        assert not s.not_reached and s.updates_to_eps is None and s.time_to_eps is None


def test_no_epsilon_target_still_counts_a_crash() -> None:
    m = _feed(StopConfig(), [1.0, float("nan")])
    assert m.crashed and m.done
    assert not m.summary(10, 1.0, np.zeros(1)).not_reached
