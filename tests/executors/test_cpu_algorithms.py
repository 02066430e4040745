"""What the CPU executor must show, on a workload whose gradient is a known constant.

Lossless algorithms leave θ = θ0 − N·lr·g exactly with versions 1..N — here
their parameter variants (backoff, priority); every algorithm with its
default parameters, the momentum recurrence and the row contracts are
``tests/conformance``'s. HOGWILD! measures the updates its races lose;
Leashed with persistence 0 drops updates under contention and records them,
within a bounded pool. These run real threads (``hardware``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from executors.cpu.runner import run_workload
from simasgd.numerics.workloads.constant import STEP, ConstWorkload

pytestmark = pytest.mark.hardware
Run = Callable[..., tuple]


@pytest.fixture(scope="module")
def run_const(scenario: Callable[..., Any]) -> Run:
    def run(alg: dict, workers: int = 2, dim: int = 64, max_updates: int = 3000, wl: ConstWorkload | None = None,
            **more: object) -> tuple:
        sc = scenario(alg, workers=workers, max_updates=max_updates, **more)
        state: dict = {}
        result = run_workload(sc, 0, wl or ConstWorkload(dim=dim), state=state)
        return result, result.runs[0], state["theta"]
    return run


LOSSLESS = [
    ({"name": "mutex", "backoff": {"kind": "exponential", "initial_s": 1e-7, "max_s": 1e-5}}, 3),
    ({"name": "rwlock", "priority": "writer"}, 2),
    ({"name": "rwlock", "priority": "reader"}, 3),
    ({"name": "leashed", "persistence": "inf"}, 3),
    ({"name": "leashed", "persistence": "inf"}, 1),  # the lone worker's gradient in its own vector
]


@pytest.mark.parametrize("alg,workers", LOSSLESS, ids=[f"{a['name']}-{w}" + ("-bo" if "backoff" in a else "")
                                                       + a.get("priority", "") for a, w in LOSSLESS])
def test_lossless_variants_apply_every_update_exactly(alg: dict, workers: int, run_const: Run,
                                                      jitter_kernel: Any) -> None:
    result, run, theta = run_const(alg, workers=workers, wl=ConstWorkload(dim=64, kernel=jitter_kernel))
    applied = result.updates[result.updates["applied"]]
    n = run.updates
    assert n > 0 and len(applied) == n
    np.testing.assert_array_equal(np.sort(applied["version"].to_numpy()), np.arange(1, n + 1))
    assert np.all(theta == 1.0 - n * STEP)           # exact: no update lost, none applied twice
    assert (applied["staleness"] >= 0).all()


def test_hogwild_loses_updates_and_reports_a_figure(run_const: Run) -> None:
    # All time goes to the unsynchronised update loop: threads overwrite each other's writes
    # (element by element in a race, or a whole preemption's worth when a thread is descheduled
    # between its load and its store).
    # A race needs two threads on CPUs at the same moment: on a machine busy with other work the
    # threads may rarely overlap, so try a few runs and require that at least one loses updates.
    for _ in range(4):
        result, run, theta = run_const({"name": "hogwild"}, workers=3, max_updates=200_000,
                                       wl=ConstWorkload(dim=512, theta0=8.0), cpu={"hogwild_probes": True})
        seen = (8.0 - theta) / STEP
        assert run.updates >= 200_000 and len(result.updates) == run.updates
        if seen.mean() < run.updates:
            break
    assert seen.mean() < run.updates                  # θ shows fewer updates than were applied
    assert seen.max() <= run.updates
    lost = run.extra["lost_updates"]                  # the probes' estimate, without knowing g
    assert 0 <= lost <= run.updates
    # lost_updates is rounded to 3 decimals, the fraction is not
    assert run.extra["lost_update_fraction"] == pytest.approx(lost / run.updates, abs=5.001e-4 / run.updates)  # ≤ half a unit, inclusive
    assert not run.crashed


def test_hogwild_alone_loses_nothing(run_const: Run) -> None:
    # One writer: θ and the lost-update probes must both show every update.
    _result, run, theta = run_const({"name": "hogwild"}, workers=1, dim=512, max_updates=5000,
                                   cpu={"hogwild_probes": True})
    assert np.all(theta == 1.0 - run.updates * STEP)
    assert run.extra["lost_updates"] == 0


def test_hogwild_probes_are_off_by_default(run_const: Run) -> None:
    _result, run, theta = run_const({"name": "hogwild"}, workers=1, dim=512, max_updates=500)
    assert "lost_updates" not in run.extra
    assert np.all(theta == 1.0 - run.updates * STEP)


def test_leashed_persistence_zero_drops_under_contention_within_a_bounded_pool(run_const: Run,
                                                                               jitter_kernel: Any) -> None:
    workers = 3
    result, run, theta = run_const({"name": "leashed", "persistence": 0}, workers=workers, dim=2048,
                                   max_updates=6000, wl=ConstWorkload(dim=2048, kernel=jitter_kernel))
    u = result.updates
    dropped = u[~u["applied"]]
    assert len(dropped) > 0 and run.extra["dropped"] == len(dropped)
    assert (dropped["retries"] == 1).all()            # persistence 0: dropped at the first failed CAS
    assert (u.loc[u["applied"], "retries"] == 0).all()
    assert (dropped["staleness"] >= 1).all()          # it lost to a newer version it had not read
    assert np.all(theta == 1.0 - run.updates * STEP)  # dropped updates never reach θ; applied ones all do
    np.testing.assert_array_equal(np.sort(u.loc[u["applied"], "version"]), np.arange(1, run.updates + 1))
    assert run.extra["pool_peak"] <= run.extra["pool_bound"] == 2 * workers + 1
    assert run.extra["pool_exhausted"] == 0


def test_leashed_unbounded_persistence_retries_instead_of_dropping(run_const: Run, jitter_kernel: Any) -> None:
    result, run, theta = run_const({"name": "leashed"}, workers=3, dim=2048, max_updates=4000,
                                   wl=ConstWorkload(dim=2048, kernel=jitter_kernel))
    u = result.updates
    assert run.extra["dropped"] == 0 and u["applied"].all()
    # A failed CAS means a version was published after this worker's read: each retry is one more
    # update by others between its read and its write, so staleness >= retries on every row.
    assert (u["staleness"] >= u["retries"]).all()
    assert np.all(theta == 1.0 - run.updates * STEP)


@pytest.mark.parametrize("persistence", [1, 3])
def test_leashed_persistence_bounds_the_retries(persistence: int, run_const: Run, jitter_kernel: Any) -> None:
    result, run, theta = run_const({"name": "leashed", "persistence": persistence}, workers=3, dim=2048,
                                   max_updates=3000, wl=ConstWorkload(dim=2048, kernel=jitter_kernel))
    u = result.updates
    assert (u.loc[u["applied"], "retries"] <= persistence).all()         # applied within the bound
    assert (u.loc[~u["applied"], "retries"] == persistence + 1).all()    # dropped exactly past it
    assert (u["staleness"] >= u["retries"]).all()                        # each failed CAS: a newer version
    assert np.all(theta == 1.0 - run.updates * STEP)


# -- the gradient written over a worker's private copy (kernels.grad_over_theta) ---------------------------

OVER_COPY = [{"name": "mutex"}, {"name": "rwlock"}, {"name": "hogwild", "local_copy": True},
             {"name": "ssp", "bound": 2}, {"name": "param_server", "shards": 3}]


@pytest.fixture(scope="module")
def mlp_final_theta(scenario: Callable[..., Any]) -> Callable[[dict], np.ndarray]:
    """θ after one worker's run of the algorithm; each algorithm runs once (sequential SGD is every test's
    reference), all on one built workload (its arrays are read-only: no run changes them)."""
    from simasgd.numerics.workloads import build_workload

    built: dict[str, Any] = {}
    done: dict[str, np.ndarray] = {}

    def run(alg: dict) -> np.ndarray:
        key = repr(sorted(alg.items()))
        if key not in done:
            # θ is what is compared: the monitor's ~150 losses over 64 rows, not the default 8000
            sc = scenario(alg, workers=1, max_updates=150, workload={"model": "mlp", "layers": [784, 16, 12, 10],
                                                                   "dataset": "synthetic", "batch_size": 8,
                                                                   "eval_rows": 64})
            if not built:
                built["wl"] = build_workload(sc.workload, sc.seed)
            state: dict = {}
            run_workload(sc, 0, built["wl"], state=state)
            done[key] = state["theta"]
        return done[key]
    return run


@pytest.mark.parametrize("alg", OVER_COPY, ids=[a["name"] for a in OVER_COPY])
def test_one_worker_writing_its_gradient_over_its_copy_is_sequential_sgd(alg: dict, mlp_final_theta: Any) -> None:
    # At one worker every read is of the latest θ, so a loop that reads a copy and writes its gradient
    # over it must walk θ exactly as sequential SGD does, the same batches in the same order.
    # A layer whose weights were overwritten before their last read would not.
    seq = mlp_final_theta({"name": "sequential"})
    assert np.array_equal(mlp_final_theta(alg), seq)
