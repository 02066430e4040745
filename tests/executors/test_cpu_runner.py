"""The run around the loops: stop rules, failures that never hang, placement, the backend."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numba import njit

from executors import atomics as A
from executors.cpu import placement
from executors.cpu.runner import ExecutorError, run_workload
from simasgd.machines import machine
from simasgd.numerics.workloads.constant import ConstWorkload, G
from simasgd.runs.results import RunResult
from simasgd.spec import algorithms

# Warm-up does 2 updates on a copy: the failing kernels fail only once θ0 has moved 5 steps.
TRIGGER = 1.0 - 5 * 2.0 ** -16


@njit(nogil=True, cache=True)
def raising_grad(theta, X, y, idx, grad_out, shape):
    if theta[0] < TRIGGER:
        raise ValueError("gradient blew up")
    for i in range(grad_out.shape[0]):
        grad_out[i] = G
    return 0.0


@njit(nogil=True, cache=True)
def hanging_grad(theta, X, y, idx, grad_out, shape):
    # y[0] is the release flag the test sets afterwards (an atomic load: a plain one could be hoisted).
    if theta[0] < TRIGGER:
        while A.load(y, 0) == 0:
            A.cpu_relax()
    for i in range(grad_out.shape[0]):
        grad_out[i] = G
    return 0.0


@njit(nogil=True, cache=True)
def nan_grad(theta, X, y, idx, grad_out, shape):
    for i in range(grad_out.shape[0]):
        grad_out[i] = np.nan if theta[0] < TRIGGER else G
    return 0.0


@pytest.mark.hardware
@pytest.mark.parametrize("alg", ["mutex", "hogwild", "leashed"])
def test_worker_exception_ends_the_run_naming_the_worker(alg: str, scenario: Any) -> None:
    sc = scenario({"name": alg}, workers=2, max_updates=100_000, max_time_s=20)
    t0 = time.monotonic()
    with pytest.raises(ExecutorError, match=r"worker \d failed: ValueError: gradient blew up"):
        run_workload(sc, 0, ConstWorkload(kernel=raising_grad))
    assert time.monotonic() - t0 < 15  # ended by the error, not by the 20 s budget


@pytest.mark.hardware
def test_hung_worker_is_named_after_the_join_timeout_never_a_hang(scenario: Any) -> None:
    wl = ConstWorkload(kernel=hanging_grad, y=np.zeros(4, dtype=np.int64))
    sc = scenario({"name": "hogwild"}, workers=2, max_updates=100_000, max_time_s=1.0,
                  cpu={"join_timeout_s": 1.0})
    t0 = time.monotonic()
    try:
        with pytest.raises(ExecutorError, match=r"worker \d.* did not stop within cpu.join_timeout_s = 1 s"):
            run_workload(sc, 0, wl)
        assert time.monotonic() - t0 < 10
    finally:
        wl.y[0] = 1  # let the stuck threads go
        for t in threading.enumerate():
            if t.name.startswith("simasgd-worker"):
                t.join(10)


@pytest.mark.hardware
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a live monitor needs a CPU the worker does not use")
def test_stops_at_epsilon_before_the_budget_when_a_cpu_is_free(scenario: Any) -> None:
    # loss = mean θ = 1 − N·2⁻¹⁶ reaches 0.99 at N ≈ 656 updates; one worker leaves a CPU to the monitor.
    sc = scenario({"name": "mutex"}, workers=1, max_updates=10_000_000, max_time_s=20,
                  stop={"epsilon": 0.99, "eval_every_updates": 8})
    r = run_workload(sc, 0, ConstWorkload()).runs[0]
    assert r.extra["stop_reason"] == "epsilon"
    assert r.extra["monitor"].startswith("live")
    assert r.updates_to_eps is not None and 656 <= r.updates_to_eps < 656 + 8  # exact to k = 8
    assert r.updates < 10_000_000 and r.time_s < 20
    assert not r.not_reached and not r.crashed


@pytest.mark.hardware
def test_workers_on_every_cpu_find_epsilon_in_the_ring_after_the_run(scenario: Any) -> None:
    # No live monitor competes with the workers: the run goes to its budget, ε is found afterwards,
    # exact to k, from the snapshots the workers took.
    workers = len(os.sched_getaffinity(0))
    sc = scenario({"name": "mutex"}, workers=workers, max_updates=3000, max_time_s=20,
                  stop={"epsilon": 0.99, "eval_every_updates": 8})
    result = run_workload(sc, 0, ConstWorkload())
    r = result.runs[0]
    assert r.extra["monitor"].startswith("after the run")
    assert r.extra["stop_reason"] == "epsilon (found after the run)"
    assert r.updates == 3000
    assert r.updates_to_eps is not None and 656 <= r.updates_to_eps < 656 + 8
    curve = result.curve
    assert (curve["updates"].iloc[1:-1] % 8 == 0).all()  # every snapshot a multiple of k
    # the run's gradient concurrency is the recorded gradients' total time over their span
    u = result.updates
    span = u["t_grad_end"].max() - u["t_grad_start"].min()
    want = (u["t_grad_end"] - u["t_grad_start"]).sum() / span
    assert r.extra["gradient_concurrency"] == pytest.approx(want, abs=1e-3) and 0 < want <= workers + 1e-9
    # and the update phases (lock waits included): how many at once, and how long two at once
    from simasgd.evaluation import phases

    assert r.extra["update_concurrency"] == pytest.approx(phases.update_concurrency(u)[0], abs=1e-3)
    assert r.extra["both_updating"] == pytest.approx(phases.both_updating(u)[0], abs=1e-3)


@pytest.mark.hardware
def test_nan_gradient_is_a_crash_not_an_error(scenario: Any) -> None:
    sc = scenario({"name": "hogwild"}, workers=2, max_updates=10_000_000, max_time_s=20)
    r = run_workload(sc, 0, ConstWorkload(kernel=nan_grad)).runs[0]
    assert r.crashed and r.extra["stop_reason"] == "crashed"
    assert math.isnan(r.final_loss)


@pytest.mark.hardware
def test_time_budget_stops_the_run(scenario: Any) -> None:
    sc = scenario({"name": "leashed"}, workers=2, max_updates=10**9, max_time_s=0.3)
    r = run_workload(sc, 0, ConstWorkload(theta0=1e6)).runs[0]
    assert 0.2 < r.time_s < 1.5
    assert r.not_reached and r.updates > 0


def test_unsupported_algorithm_is_refused_by_name(scenario: Any) -> None:
    from executors.cpu import backend

    with pytest.raises(algorithms.UnsupportedAlgorithm, match="'cpu' does not implement algorithm 'k_sync'"):
        backend.run_once(scenario({"name": "k_sync", "k": 1}), 0)


def _fake_sys(root: Path, packages: list[int], cores_per_package: int, smt: int, nodes: int) -> None:
    cpu_id = 0
    for _thread in range(smt):
        for p in packages:
            for c in range(cores_per_package):
                topo = root / "cpu" / f"cpu{cpu_id}" / "topology"
                topo.mkdir(parents=True)
                (topo / "physical_package_id").write_text(str(p))
                (topo / "core_id").write_text(str(c))
                cpu_id += 1
    (root / "cpu" / "online").write_text(f"0-{cpu_id - 1}")
    per_node = cpu_id // nodes
    for n in range(nodes):
        (root / "node" / f"node{n}").mkdir(parents=True)
        (root / "node" / f"node{n}" / "cpulist").write_text(f"{n * per_node}-{(n + 1) * per_node - 1}")


def test_topology_and_placement_from_sysfs(tmp_path: Path) -> None:
    _fake_sys(tmp_path, packages=[0, 1], cores_per_package=2, smt=2, nodes=2)
    topo = placement.read_topology(tmp_path)
    assert (topo.machine.sockets, topo.machine.cores_per_socket, topo.machine.threads_per_core) == (2, 2, 2)
    topo = placement.Topology(topo.machine, topo.cpu_map, topo.numa_nodes, frozenset(range(8)))
    numa, warn = placement.plan(4, "numa", topo)
    assert not warn and [c // 2 % 2 for c in numa] == [0, 1, 0, 1]   # cpus 0,1 on package 0; 2,3 on 1
    uma, _ = placement.plan(2, "uma", topo)
    assert uma == [0, 1]
    assert placement.plan(3, "os", topo) == ([None] * 3, [])


def test_numa_on_one_node_says_it_cannot_be_honoured(tmp_path: Path) -> None:
    _fake_sys(tmp_path, packages=[0], cores_per_package=2, smt=1, nodes=1)
    topo = placement.read_topology(tmp_path)
    topo = placement.Topology(topo.machine, topo.cpu_map, topo.numa_nodes, frozenset({0, 1}))
    cpus, warn = placement.plan(2, "numa", topo)
    assert cpus == [0, 1] and any("cannot be honoured" in w for w in warn)
    with pytest.raises(machine.MachineError, match="not available"):
        placement.plan(1, [7], topo)


def test_parse_cpulist() -> None:
    assert placement.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]


@pytest.mark.hardware
def test_numa_run_records_the_warning_in_the_result(capsys: pytest.CaptureFixture[str], scenario: Any) -> None:
    if placement.read_topology().numa_nodes > 1:
        pytest.skip("this machine has several NUMA nodes: numa placement is honoured")
    sc = scenario({"name": "mutex"}, workers=2, max_updates=200, placement="numa")
    r = run_workload(sc, 0, ConstWorkload())
    assert any("cannot be honoured" in w for w in r.metadata["placement"]["warnings"])
    assert "cannot be honoured" in capsys.readouterr().err


@pytest.mark.hardware
def test_results_folder_round_trips(tmp_path: Path, scenario: Any) -> None:
    r = run_workload(scenario({"name": "rwlock"}, workers=2, max_updates=500), 0, ConstWorkload())
    r.save(tmp_path / "out")
    back = RunResult.load(tmp_path / "out")
    assert back.backend == "cpu" and len(back.updates) == len(r.updates) == back.runs[0].attempts
    assert (back.updates["staleness"] == back.updates["version"] - 1 - back.updates["read_version"]).all()
    assert back.runs[0].updates == 500
