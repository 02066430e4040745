"""Small ``dist`` runs on loopback: a scenario maker and a runner with a known-gradient workload."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from numba import njit

from executors import atomics as A
from simasgd.numerics.workloads.constant import LR, ConstWorkload, G, first_loss
from simasgd.spec import loader
from simasgd.spec.scenario import Scenario

pytest.importorskip("torch.distributed")


def dist_scenario(algorithm: str, workers: int = 2, updates: int = 120, slowdown: float = 1.0, pin: bool = False,
                  **params: Any) -> Scenario:
    """A small scenario; ``slowdown`` > 1 makes worker 0 a straggler that takes that many times its gradient;
    ``pin``: rank r on the r-th CPU of placement ``uma`` (``cpu.pin``)."""
    strag = {"stragglers": {"count": 1, "slowdown": slowdown}} if slowdown > 1 else {}
    placement = "uma" if pin else "os"
    return loader.from_dict({
        "name": f"dist-{algorithm}", "seed": 5, "workers": {"count": workers, "placement": placement, **strag},
        "workload": {"model": "least_squares", "batch_size": 1},  # replaced by a known-gradient workload
        "algorithm": {"name": algorithm, **params}, "optimizer": {"lr": LR},
        "stop": {"max_updates": updates, "max_time_s": 30.0, "eval_every_updates": 20},
        "cpu": {"pin": pin, "join_timeout_s": 10.0}})


@njit(nogil=True, cache=True)
def _half_ms_grad(theta, X, y, idx, grad_out, shape):
    """The constant gradient after 0.5 ms: long beside a loopback message, so a straggler stands out."""
    until = A.now_ns() + 500_000
    while A.now_ns() < until:
        A.cpu_relax()
    for i in range(grad_out.shape[0]):
        grad_out[i] = G
    return 0.0


@pytest.fixture
def half_ms_kernel() -> Any:
    return _half_ms_grad


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
