"""Keuper's decentralised ASGD and SimuParallelSGD on real threads: ε on least squares (``hardware``).

θ against the update rule on a known gradient is ``tests/conformance``'s (``peer_merge``,
``average_end``); the merge rule itself is :mod:`simasgd.numerics.parzen`'s, tested in ``tests/sim/test_keuper.py``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from executors.cpu.runner import run_workload
from simasgd.numerics.workloads import build_workload
from simasgd.runs import backends
from simasgd.spec import loader

pytestmark = pytest.mark.hardware


def _scenario(name: str, **algorithm: Any) -> Any:
    return loader.from_dict({"name": "cpu-decentral", "seed": 1, "workers": {"count": 4, "placement": "os"},
                             "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 16},
                             "algorithm": {"name": name, **algorithm}, "optimizer": {"lr": 0.01},
                             "stop": {"epsilon": 0.1, "max_updates": 5000, "max_time_s": 30},
                             "cpu": {"pin": False, "join_timeout_s": 20.0}})


@pytest.mark.parametrize("name", ["keuper", "simuparallel"])
def test_reaches_epsilon_on_least_squares(name: str) -> None:
    r = backends.load("cpu").run_once(_scenario(name), 0)
    run = r.runs[0]
    assert run.updates_to_eps is not None and not run.crashed
    if name == "keuper":  # nodes received states and judged them; how far apart they were is the spread
        judged = run.extra["merges_accepted"] + run.extra["merges_refused"]
        assert judged > 0 and r.updates["distance"].notna().sum() == judged
        assert (r.curve["spread"].dropna() > 0).any()


def test_simuparallel_result_is_the_mean_of_the_workers_states() -> None:
    sc = _scenario("simuparallel")
    wl = build_workload(sc.workload, sc.seed)
    state: dict = {}
    r = run_workload(sc, 0, wl, state=state)
    assert np.isclose(r.runs[0].final_loss, wl.eval_loss(state["theta"]), rtol=1e-12)
    assert (r.updates["staleness"] == 0).all()
