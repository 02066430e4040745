"""Stale-synchronous parallel in the simulator: the clock gap never exceeds the bound; it reaches ε."""

from __future__ import annotations

import numpy as np
import pytest

from simasgd.runs import backends
from simasgd.sim.algorithms.bounded import clock_gaps
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
