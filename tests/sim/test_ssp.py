"""Stale-synchronous parallel in the simulator: the clock gap never exceeds the bound; it reaches ε."""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import pytest
import simpy

from simasgd.runs import backends
from simasgd.sim.algorithms import bounded
from simasgd.sim.algorithms.bounded import clock_gaps
from simasgd.sim.engine import SimRun
from simasgd.spec import loader


def _straggler_run(algorithm: dict, updates: int = 3000) -> object:
    sc = loader.from_dict({"name": "ssp", "seed": 3, "machine": {"preset": "xeon-e5-2687w-v2"},
                           "workers": {"count": 4, "stragglers": {"count": 1, "slowdown": 4.0}},
                           "algorithm": algorithm, "stop": {"max_updates": updates},
                           "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-3}},
                           "sim": {"numerics": False}})
    return backends.load("sim").run_once(sc, 0)


@pytest.mark.parametrize("bound", [0, 1, 3])
def test_clock_gap_never_exceeds_the_bound(bound: int) -> None:
    # One 4x straggler among 4 workers: without the gate the fast ones would run away (the mutex below).
    gaps = clock_gaps(_straggler_run({"name": "ssp", "bound": bound}).updates)
    assert len(gaps) > 2000
    assert gaps.max() == bound          # never more; and the bound is what holds the fast workers back
    assert (gaps >= 0).all()


def test_without_the_gate_the_gap_grows() -> None:
    # The same measure on an ungated lock-based run: the check can fail.
    assert clock_gaps(_straggler_run({"name": "mutex"}).updates).max() > 100


def test_a_tighter_bound_means_fresher_gradients() -> None:
    tight = _straggler_run({"name": "ssp", "bound": 0}).runs[0]
    loose = _straggler_run({"name": "mutex"}).runs[0]
    assert tight.mean_staleness < loose.mean_staleness
    assert tight.time_s > loose.time_s  # the price: fast workers wait for the straggler


def test_ssp_reaches_epsilon_on_least_squares() -> None:
    sc = loader.from_dict({"name": "ssp-ls", "seed": 1, "workers": {"count": 4},
                           "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 16},
                           "algorithm": {"name": "ssp", "bound": 2}, "optimizer": {"lr": 0.01},
                           "stop": {"epsilon": 0.1, "max_updates": 20000},
                           "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-3}}})
    run = backends.load("sim").run_once(sc, 0).runs[0]
    assert run.updates_to_eps is not None and run.final_loss <= 0.1 * run.initial_loss
    assert np.isfinite(run.time_to_eps)


class EveryoneLooks(bounded.Clocks):
    """The gate as SSP states it, looked at the plain way: every sleeper wakes at every move of any clock and
    looks again, and sleeps on the next move if still too far ahead."""

    def gate(self, w: int, run: SimRun) -> Generator[simpy.Event, object, None]:
        while self.c[w] - self.low > self.bound:
            run.platform.block(w)
            self.looks += 1
            yield self.moved

    def _move(self) -> bounded.Moved:
        self.looks = getattr(self, "looks", 0)
        return bounded.Moved(self.env)


@pytest.mark.parametrize(("preset", "workers", "bound"), [("laptop-2core", 8, 0), ("xeon-e5-2698-v4", 96, 1),
                                                          ("xeon-e5-2698-v4", 240, 0)])
def test_sleepers_go_through_the_gate_as_if_each_looked_at_every_move(monkeypatch: pytest.MonkeyPatch, preset: str,
                                                                      workers: int, bound: int) -> None:
    """The gate moves its sleepers along in one step where only a move of the slowest clock can let one
    through: the rows (who goes through when, in which order, hence every version and staleness) are those
    of sleepers that each wake and look at every move, and those looked far more often than moves of the
    slowest clock happened."""
    sc = loader.from_dict({"name": "gate", "seed": 5, "machine": {"preset": preset}, "workers": {"count": workers},
                           "workload": {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits",
                                        "batch_size": 16},
                           "algorithm": {"name": "ssp", "bound": bound}, "stop": {"max_updates": 600},
                           "sim": {"numerics": False}})
    sim = backends.load("sim")
    made: list[bounded.Clocks] = []

    def plain(*args: object) -> bounded.Clocks:
        made.append(EveryoneLooks(*args))  # type: ignore[arg-type]
        return made[-1]

    ours = sim.run_once(sc, 0)
    with monkeypatch.context() as m:
        m.setattr(bounded, "Clocks", plain)
        theirs = sim.run_once(sc, 0)
    assert made and made[0].looks > 5 * made[0].low, (made[0].looks, made[0].low)  # most looks let no one through
    assert ours.updates.equals(theirs.updates)
    assert ours.runs[0].time_s == theirs.runs[0].time_s
