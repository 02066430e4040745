"""SimuParallelSGD in the simulator: the result is the average of independent SGD runs; it reaches ε."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simasgd.numerics import update_rule
from simasgd.numerics.workloads import build_workload
from simasgd.runs import backends
from simasgd.sim.algorithms import decentral
from simasgd.spec import algorithms, loader, seeds


def _scenario(momentum: float = 0.0, updates: int = 20000, **algorithm: Any) -> Any:
    return loader.from_dict({"name": "simuparallel-ls", "seed": 4, "workers": {"count": 3},
                             "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 8},
                             "algorithm": {"name": "simuparallel", **algorithm},
                             "optimizer": {"lr": 0.01, "momentum": momentum},
                             "stop": {"epsilon": 0.1, "max_updates": updates},
                             "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-3}}})


def _independent(sc: Any, wl: Any, w: int, steps: int, shard: np.ndarray | None) -> np.ndarray:
    """Plain SGD by worker w alone: its minibatch stream, its shard, the update rule, ``steps`` steps."""
    theta = wl.init_theta(seeds.rng(sc.seed, 0, seeds.Role.INIT)).copy()
    vel, g = np.zeros_like(theta), np.zeros_like(theta)
    rng = seeds.rng(sc.seed, 0, seeds.Role.BATCH, w)
    b = sc.workload.batch_size
    for _ in range(steps):
        idx = wl.sample_batch(rng, b) if shard is None else shard[rng.integers(0, len(shard), size=b)]
        wl.kernel(theta, wl.X, wl.y, idx, g, wl.shape)
        update_rule.step(theta, vel, g, sc.optimizer.lr, sc.optimizer.momentum, 0, False)
    return theta


@pytest.mark.slow
def test_simuparallel_is_the_average_of_independent_runs(monkeypatch: Any) -> None:
    start = decentral._start
    for partition in (True, False):
        sc = _scenario(momentum=0.5, updates=2000, partition=partition)  # each worker its own velocity too
        held: list[Any] = []
        monkeypatch.setattr(decentral, "_start", lambda run, out, ex, held=held: held.append(start(run, out, ex)))
        r = backends.load("sim").run_once(sc, 0)
        states = held[0]
        wl = build_workload(sc.workload, sc.seed)
        steps = r.updates.groupby("worker").size()
        shards = algorithms.partition(wl.n_train, 3, sc.seed) if partition else [None] * 3
        alone = [_independent(sc, wl, w, int(steps[w]), shards[w]) for w in range(3)]
        for w in range(3):
            np.testing.assert_array_equal(states.theta[w], alone[w])   # no communication at all
        average = np.mean(alone, axis=0)
        assert np.isclose(r.runs[0].final_loss, wl.eval_loss(average), rtol=1e-12)
        assert len(set(steps)) > 1 or partition  # exponential times: the workers took different numbers of steps


def test_partition_gives_each_worker_its_own_rows() -> None:
    parts = algorithms.partition(103, 4, seed=9)
    assert all(len(p) == 103 // 4 for p in parts)
    assert len(np.unique(np.concatenate(parts))) == 4 * (103 // 4)   # disjoint


def test_simuparallel_reaches_epsilon_on_least_squares() -> None:
    run = backends.load("sim").run_once(_scenario(), 0).runs[0]
    assert run.updates_to_eps is not None and run.final_loss <= 0.1 * run.initial_loss
