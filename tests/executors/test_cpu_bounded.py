"""SSP and backup workers on real threads: the clock gap, b discarded gradients a round, ε (``hardware``)."""

from __future__ import annotations

from typing import Any

import pytest

from simasgd.runs import backends
from simasgd.sim.algorithms.bounded import clock_gaps
from simasgd.spec import loader

pytestmark = pytest.mark.hardware


def _scenario(algorithm: dict, workers: int = 4, updates: int = 20000, **more: Any) -> Any:
    return loader.from_dict({"name": "cpu-bounded", "seed": 1, "workers": {"count": workers, "placement": "os", **more},
                             "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 16},
                             "algorithm": algorithm, "optimizer": {"lr": 0.01},
                             "stop": {"epsilon": 0.1, "max_updates": updates, "max_time_s": 30},
                             "cpu": {"pin": False, "join_timeout_s": 20.0}})


@pytest.mark.parametrize("bound", [0, 2])
def test_ssp_clock_gap_never_exceeds_the_bound(bound: int) -> None:
    # Versions are atomic counters, so the rows say exactly which updates each read held.
    r = backends.load("cpu").run_once(_scenario({"name": "ssp", "bound": bound}, updates=3000,
                                                stragglers={"count": 1, "slowdown": 4.0}), 0)
    gaps = clock_gaps(r.updates)
    assert len(gaps) > 1000 and gaps.min() >= 0 and gaps.max() <= bound


def test_backup_discards_exactly_b_gradients_a_round() -> None:
    r = backends.load("cpu").run_once(_scenario({"name": "backup", "backup": 2}, workers=5, updates=1500,
                                                stragglers={"count": 1, "slowdown": 4.0}), 0)
    u, n = r.updates, r.runs[0].updates
    per = u.groupby("version")
    assert sorted(per.groups) == list(range(1, n + 1))
    assert (per["applied"].sum() == 3).all() and (per["applied"].count() == 5).all()
    assert (per["worker"].nunique() == 5).all()
    assert r.runs[0].extra["discarded_per_round"] == 2


@pytest.mark.parametrize("algorithm", [{"name": "ssp", "bound": 2}, {"name": "backup", "backup": 1},
                                       {"name": "backup", "backup": 1, "onebit": True}])
def test_reaches_epsilon_on_least_squares(algorithm: dict) -> None:
    # ε comes within ~200 updates (a few hundred rounds); the budget is what a run takes when the monitor
    # is not live (on 2 CPUs it evaluates after the run), so it stays small.
    run = backends.load("cpu").run_once(_scenario(algorithm, updates=2000), 0).runs[0]
    assert run.updates_to_eps is not None and not run.crashed
