"""What the CPU executor must show, on a workload whose gradient is a known constant.

Lossless algorithms leave θ = θ0 − N·lr·g exactly with versions 1..N; HOGWILD!
measures the updates its races lose; Leashed with persistence 0 drops updates
under contention and records them, within a bounded pool. These run real
threads (``hardware``): what they assert holds on any machine with 2+ cores.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from numba import njit

from executors import atomics as A
from executors.cpu.runner import run_workload
from tests.executors.conftest import G, LR, STEP, ConstWorkload, scenario

pytestmark = pytest.mark.hardware


@njit(nogil=True, cache=True)
def jitter_grad(theta, X, y, idx, grad_out, shape):  # noqa: ANN001
    """The constant gradient after a random 0–20 µs: breaks the lock-step two equal threads fall into."""
    until = A.now_ns() + np.random.randint(0, 20_000)
    while A.now_ns() < until:
        A.cpu_relax()
    for i in range(grad_out.shape[0]):
        grad_out[i] = G
    return 0.0


def _run(alg: dict, workers: int = 2, dim: int = 64, max_updates: int = 3000, wl: ConstWorkload | None = None,
         **more: object) -> tuple:
    sc = scenario(alg, workers=workers, max_updates=max_updates, **more)
    state: dict = {}
    result = run_workload(sc, 0, wl or ConstWorkload(dim=dim), state=state)
    return result, result.runs[0], state["theta"]


def _implied_updates(theta: np.ndarray) -> np.ndarray:
    return (1.0 - theta) / STEP


LOSSLESS = [
    ({"name": "sequential"}, 1),
    ({"name": "mutex"}, 2),
    ({"name": "mutex", "backoff": {"kind": "exponential", "initial_s": 1e-7, "max_s": 1e-5}}, 3),
    ({"name": "rwlock", "priority": "writer"}, 2),
    ({"name": "rwlock", "priority": "reader"}, 3),
    ({"name": "leashed", "persistence": "inf"}, 3),
    ({"name": "sync"}, 2),
]


@pytest.mark.parametrize("alg,workers", LOSSLESS, ids=[f"{a['name']}-{w}" + ("-bo" if "backoff" in a else "")
                                                       + a.get("priority", "") for a, w in LOSSLESS])
def test_lossless_algorithms_apply_every_update_exactly(alg: dict, workers: int) -> None:
    result, run, theta = _run(alg, workers=workers, wl=ConstWorkload(dim=64, kernel=jitter_grad))
    applied = result.updates[result.updates["applied"]]
    n = run.updates
    assert n > 0 and len(applied) == n
    np.testing.assert_array_equal(np.sort(applied["version"].to_numpy()), np.arange(1, n + 1))
    assert np.all(theta == 1.0 - n * STEP)           # exact: no update lost, none applied twice
    assert (applied["staleness"] >= 0).all()
    if workers > 1 and alg["name"] != "sync":
        assert applied["worker"].nunique() == workers  # every thread took part


@pytest.mark.parametrize("alg,workers", [("sequential", 1), ("mutex", 2), ("leashed", 2), ("sync", 2)])
def test_momentum_follows_the_heavy_ball_recurrence(alg: str, workers: int) -> None:
    # Every gradient is the same, so N applied updates must give exactly N steps of v = m·v + g; θ -= lr·v,
    # whatever the interleaving: the velocity is part of the shared state (Leashed copies it per vector).
    result, run, theta = _run({"name": alg}, workers=workers, max_updates=400, optimizer={"momentum": 0.5},
                              wl=ConstWorkload(dim=64, kernel=jitter_grad))
    v, expected = 0.0, 1.0
    for _ in range(run.updates):
        v = 0.5 * v + G
        expected -= LR * v
    np.testing.assert_allclose(theta, expected, rtol=0, atol=1e-12)
    assert run.updates > 0


def test_hogwild_loses_updates_and_reports_a_figure() -> None:
    # All time goes to the unsynchronised update loop: threads overwrite each other's writes
    # (element by element in a race, or a whole preemption's worth when a thread is descheduled
    # between its load and its store).
    # A race needs two threads on CPUs at the same moment: on a machine busy with other work the
    # threads may rarely overlap, so try a few runs and require that at least one loses updates.
    for _ in range(4):
        result, run, theta = _run({"name": "hogwild"}, workers=3, max_updates=200_000,
                                  wl=ConstWorkload(dim=512, theta0=8.0), cpu={"hogwild_probes": True})
        seen = (8.0 - theta) / STEP
        assert run.updates >= 200_000 and len(result.updates) == run.updates
        if seen.mean() < run.updates:
            break
    assert seen.mean() < run.updates                  # θ shows fewer updates than were applied
    assert seen.max() <= run.updates
    lost = run.extra["lost_updates"]                  # the probes' estimate, without knowing g
    assert 0 <= lost <= run.updates
    assert run.extra["lost_update_fraction"] == pytest.approx(lost / run.updates)
    assert not run.crashed


def test_hogwild_alone_loses_nothing() -> None:
    # One writer: θ and the lost-update probes must both show every update.
    result, run, theta = _run({"name": "hogwild"}, workers=1, dim=512, max_updates=5000,
                              cpu={"hogwild_probes": True})
    assert np.all(theta == 1.0 - run.updates * STEP)
    assert run.extra["lost_updates"] == 0


def test_hogwild_probes_are_off_by_default() -> None:
    result, run, theta = _run({"name": "hogwild"}, workers=1, dim=512, max_updates=500)
    assert "lost_updates" not in run.extra
    assert np.all(theta == 1.0 - run.updates * STEP)


def test_leashed_persistence_zero_drops_under_contention_within_a_bounded_pool() -> None:
    workers = 3
    result, run, theta = _run({"name": "leashed", "persistence": 0}, workers=workers, dim=2048,
                              max_updates=6000, wl=ConstWorkload(dim=2048, kernel=jitter_grad))
    u = result.updates
    dropped = u[~u["applied"]]
    assert len(dropped) > 0 and run.extra["dropped"] == len(dropped)
    assert (dropped["retries"] == 1).all()            # persistence 0: dropped at the first failed CAS
    assert (u.loc[u["applied"], "retries"] == 0).all()
    assert (dropped["staleness"] >= 0).all()          # it lost to a newer version it had not read
    assert np.all(theta == 1.0 - run.updates * STEP)  # dropped updates never reach θ; applied ones all do
    np.testing.assert_array_equal(np.sort(u.loc[u["applied"], "version"]), np.arange(1, run.updates + 1))
    assert run.extra["pool_peak"] <= run.extra["pool_bound"] == 2 * workers + 1
    assert run.extra["pool_exhausted"] == 0


def test_leashed_unbounded_persistence_retries_instead_of_dropping() -> None:
    result, run, theta = _run({"name": "leashed"}, workers=3, dim=2048, max_updates=4000,
                              wl=ConstWorkload(dim=2048, kernel=jitter_grad))
    assert run.extra["dropped"] == 0 and result.updates["applied"].all()
    assert (result.updates["retries"] >= 0).all()     # failed CAS attempts are retried, however many
    assert np.all(theta == 1.0 - run.updates * STEP)


def test_lopez_master_steps_on_accumulated_gradient() -> None:
    result, run, theta = _run({"name": "lopez"}, workers=2, dim=64, max_updates=500,
                              wl=ConstWorkload(dim=64, kernel=jitter_grad))
    # Master steps θ -= lr·acc/(workers-1) and acc = g once the one worker has reported: each step is one STEP.
    assert run.updates > 0 and np.all(theta == 1.0 - run.updates * STEP)
    assert run.extra["gradients"] == len(result.updates)
    assert (result.updates["worker"] == 1).all()
    assert (result.updates["staleness"] >= 0).all()


@pytest.mark.parametrize("persistence", [1, 3])
def test_leashed_persistence_bounds_the_retries(persistence: int) -> None:
    result, run, theta = _run({"name": "leashed", "persistence": persistence}, workers=3, dim=2048,
                              max_updates=3000, wl=ConstWorkload(dim=2048, kernel=jitter_grad))
    u = result.updates
    assert (u.loc[u["applied"], "retries"] <= persistence).all()         # applied within the bound
    assert (u.loc[~u["applied"], "retries"] == persistence + 1).all()    # dropped exactly past it
    assert np.all(theta == 1.0 - run.updates * STEP)
