"""EASGD and EA-wild in the simulator (simasgd/sim/algorithms/elastic.py): ε, round-robin, lock-free, groups."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from simasgd.numerics.workloads import build_workload
from simasgd.runs import backends
from simasgd.runs.results import spread_curve, updates_frame
from simasgd.spec import loader

SIM = backends.load("sim")


def scenario(alg: dict, workers: int = 4, momentum: float = 0.0, network: dict | None = None,
             gradient: dict | None = None, stragglers: dict | None = None, **stop: Any) -> Any:
    d = {"seed": 5, "workers": {"count": workers, "stragglers": stragglers or {}},
         "workload": {"model": "least_squares", "dataset": "synthetic", "features": 32, "samples": 2000,
                      "batch_size": 16},
         "algorithm": alg, "optimizer": {"lr": 0.01, "momentum": momentum},
         "stop": {"epsilon": 0.05, "max_updates": 20000, "max_time_s": 60.0, **stop},
         "timing": {"gradient": gradient or {"dist": "exponential", "mean_s": 1e-3},
                    "read": {"dist": "deterministic", "mean_s": 1e-5},
                    "update": {"dist": "deterministic", "mean_s": 1e-5}}}
    if network:
        d["network"] = network
    return loader.from_dict(d)


CASES = {
    "easgd": ({"name": "easgd", "alpha": 0.2}, 0.0, None),
    "ea_msgd": ({"name": "easgd", "alpha": 0.2, "tau": 4}, 0.5, {"preset": "10gbe"}),
    "eawild": ({"name": "eawild", "alpha": 0.2}, 0.0, None),
    "eawild_groups": ({"name": "eawild", "alpha": 0.2, "group_size": 2}, 0.0, {"preset": "100g_ib"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_reaches_epsilon_on_least_squares(case: str) -> None:
    alg, mom, net = CASES[case]
    sc = scenario(alg, momentum=mom, network=net)
    r = SIM.run_once(sc, 0)
    run = r.runs[0]
    assert run.updates_to_eps is not None and not run.crashed, run
    assert run.final_loss <= 0.05 * run.initial_loss
    u = r.updates
    assert u["distance"].notna().all() and (u["distance"] >= 0).all()   # every exchange has its distance
    spread = r.curve["spread"].to_numpy()
    assert np.isfinite(spread[1:]).all() and (spread[1:] > 0).all()
    dim = build_workload(sc.workload, sc.seed).dim
    assert run.extra["bytes_per_row"] == 2 * dim * 8                    # x_j up, x̃ down


def test_easgd_exchanges_round_robin_whatever_the_speeds() -> None:
    # Worker 0 is 4x slower; the others still wait their turn: version v is worker (v − 1) mod n's, so
    # between two exchanges of one worker exactly n − 1 others exchange: staleness n − 1 after the first.
    n = 4
    r = SIM.run_once(scenario({"name": "easgd", "alpha": 0.1}, workers=n, stragglers={"count": 1, "slowdown": 4.0},
                              epsilon=0.0, max_updates=400), 0)
    u = r.updates.sort_values("version")
    np.testing.assert_array_equal(u["worker"].to_numpy(), (u["version"].to_numpy() - 1) % n)
    first = u.groupby("worker")["version"].transform("min") == u["version"]
    assert (u.loc[first, "staleness"] == 0).all()
    assert (u.loc[~first, "staleness"] == n - 1).all()
    assert (u.loc[u["worker"] != 0, "lock_wait_s"].mean() > u.loc[u["worker"] == 0, "lock_wait_s"].mean())


def test_eawild_does_not_wait_for_a_straggler() -> None:
    # Without the lock the fast workers exchange as often as they compute (§3.1: the lock slows the system).
    n, budget = 4, 800
    st = {"count": 1, "slowdown": 4.0}
    wild = SIM.run_once(scenario({"name": "eawild", "alpha": 0.1}, workers=n, stragglers=st, epsilon=0.0,
                                 max_updates=budget), 0)
    locked = SIM.run_once(scenario({"name": "easgd", "alpha": 0.1}, workers=n, stragglers=st, epsilon=0.0,
                                   max_updates=budget), 0)
    counts = wild.updates["worker"].value_counts()
    # each fast worker's share of exchanges is ≈ 4x the straggler's: 4/13 vs 1/13 of the rows
    assert counts[0] < 0.5 * counts.drop(0).min()
    assert wild.runs[0].time_s < 0.6 * locked.runs[0].time_s  # the same exchanges, in less simulated time


def test_eawild_one_worker_is_easgd_one_worker() -> None:
    a = SIM.run_once(scenario({"name": "eawild", "alpha": 0.3, "tau": 2}, workers=1), 0)
    b = SIM.run_once(scenario({"name": "easgd", "alpha": 0.3, "tau": 2}, workers=1), 0)
    np.testing.assert_allclose(a.curve["loss"], b.curve["loss"], rtol=1e-12)
    assert (a.updates["staleness"] == 0).all()


def test_eawild_groups_exchange_through_their_leaders() -> None:
    r = SIM.run_once(scenario({"name": "eawild", "alpha": 0.2, "group_size": 2}, workers=6, epsilon=0.0,
                              max_updates=300), 0)
    assert set(r.updates["worker"]) == {0, 2, 4}


def test_group_size_must_divide_the_workers() -> None:
    with pytest.raises(loader.ScenarioError, match="algorithm.group_size = 4 must divide workers.count = 6"):
        scenario({"name": "eawild", "group_size": 4}, workers=6)


def test_spread_is_the_rms_of_each_workers_latest_distance() -> None:
    u = updates_frame(0, [0, 1, 0, 1], [1, 2, 3, 4], [0, 1, 2, 3], 0.0, 0.0, distance=[3.0, 4.0, 1.0, np.nan])
    curve = pd.DataFrame({"run": [0, 0, 0, 0], "t": [0, 1, 2, 3], "updates": [0, 1, 2, 3], "loss": 1.0})
    s = spread_curve(u, curve)
    assert np.isnan(s[0])                                     # no exchange yet
    np.testing.assert_allclose(s[1:], [3.0, np.sqrt((9 + 16) / 2), np.sqrt((1 + 16) / 2)])
    assert np.isnan(spread_curve(updates_frame(0, [0], [1], [0], 0.0, 0.0), curve)).all()  # no distances: NaN


def test_results_without_distance_or_spread_still_load(tmp_path: Any) -> None:
    from simasgd.runs.results import RunResult

    r = SIM.run_once(scenario({"name": "easgd", "alpha": 0.2}, epsilon=0.0, max_updates=200), 0)
    out = r.save(tmp_path / "r")
    assert RunResult.load(out).curve["spread"].notna().any()
    # a folder written before the columns existed
    u = pd.read_parquet(out / "updates.parquet").drop(columns=["distance"])
    c = pd.read_parquet(out / "curve.parquet").drop(columns=["spread"])
    u.to_parquet(out / "updates.parquet", index=False)
    c.to_parquet(out / "curve.parquet", index=False)
    old = RunResult.load(out)
    assert old.updates["distance"].isna().all() and old.curve["spread"].isna().all()
