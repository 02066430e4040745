"""EASGD and EA-wild on real threads (executors/cpu/elastic.py): ε on least squares, round-robin, groups."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from executors.cpu import backend as cpu
from simasgd.spec import loader

pytestmark = pytest.mark.hardware


def scenario(alg: dict, workers: int = 2, momentum: float = 0.0, **stop: Any) -> Any:
    return loader.from_dict({
        "seed": 3, "workers": {"count": workers},
        "workload": {"model": "least_squares", "dataset": "synthetic", "features": 32, "samples": 2000,
                     "batch_size": 16},
        "algorithm": alg, "optimizer": {"lr": 0.01, "momentum": momentum},
        "stop": {"epsilon": 0.05, "max_updates": 20000, "max_time_s": 20.0, **stop},
        "cpu": {"pin": False, "join_timeout_s": 10.0}})


CASES = {
    "easgd": ({"name": "easgd", "alpha": 0.2}, 2, 0.0),
    "ea_msgd": ({"name": "easgd", "alpha": 0.2, "tau": 4}, 2, 0.5),
    "eawild": ({"name": "eawild", "alpha": 0.2}, 2, 0.0),
    "eawild_groups": ({"name": "eawild", "alpha": 0.2, "group_size": 2}, 4, 0.0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_reaches_epsilon_on_least_squares(case: str) -> None:
    alg, workers, mom = CASES[case]
    r = cpu.run_once(scenario(alg, workers, mom), 0)
    run = r.runs[0]
    assert run.updates_to_eps is not None and not run.crashed, run
    u = r.updates
    assert u["distance"].notna().all() and (u["distance"] >= 0).all()
    assert np.isfinite(r.curve["spread"].to_numpy()[1:]).all()
    assert run.extra["bytes_per_row"] == 2 * 33 * 8       # 32 features + bias, x_j up and x̃ down
    if alg.get("group_size", 1) > 1:
        assert set(u["worker"]) == {0, 2}                  # only the groups' leaders exchange


def test_easgd_exchanges_round_robin() -> None:
    n = 3
    r = cpu.run_once(scenario({"name": "easgd", "alpha": 0.1}, workers=n, epsilon=0.0, max_updates=600), 0)
    u = r.updates.sort_values("version")
    assert r.runs[0].updates == 600
    np.testing.assert_array_equal(u["worker"].to_numpy(), (u["version"].to_numpy() - 1) % n)
    first = u.groupby("worker")["version"].transform("min") == u["version"]
    assert (u.loc[~first, "staleness"] == n - 1).all() and (u.loc[first, "staleness"] == 0).all()
