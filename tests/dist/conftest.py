"""Small ``dist`` runs on loopback: a scenario maker and a runner with a known-gradient workload."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from simasgd import loader
from simasgd.scenario import Scenario
from simasgd.workloads.constant import LR, ConstWorkload, first_loss

pytest.importorskip("torch.distributed")


def dist_scenario(algorithm: str, workers: int = 2, updates: int = 120, **params: Any) -> Scenario:
    return loader.from_dict({
        "name": f"dist-{algorithm}", "seed": 5, "workers": {"count": workers, "placement": "os"},
        "workload": {"model": "least_squares", "batch_size": 1},  # replaced by a known-gradient workload
        "algorithm": {"name": algorithm, **params}, "optimizer": {"lr": LR},
        "stop": {"max_updates": updates, "max_time_s": 30.0, "eval_every_updates": 20},
        "cpu": {"pin": False, "join_timeout_s": 10.0}})


@pytest.fixture
def scenario() -> Callable[..., Scenario]:
    return dist_scenario


@pytest.fixture
def run_dist(jitter_kernel: Any) -> Callable[..., Any]:
    """``run_dist(scenario, kernel=None)``: one loopback run on a 16-element known-gradient workload
    (the constant gradient, or ``kernel``), loss = θ[0]."""
    from executors.dist import backend

    def run(sc: Scenario, kernel: Any = None) -> Any:
        return backend.run_workload(sc, 0, ConstWorkload(dim=16, kernel=kernel or jitter_kernel,
                                                         loss_kernel=first_loss))
    return run
