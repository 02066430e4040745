"""Backend ``torch``: the scenario run for real, one process per worker (torch.multiprocessing).

In the style of PyTorch's own Hogwild example: the parameters live in shared
memory (``share_memory_()``), each worker is a forked process with one intra-op
thread that trains on them — HOGWILD! without a lock, ``mutex`` with a shared
lock, ``sync`` with barriers. A shared version counter and per-worker records in
shared memory (:mod:`.state`) give the same rows as every other backend, so
``simasgd compare --backends sim,torch`` holds the simulator's prediction against
the user's own model training. Any workload runs (its kernel is called from
Python); the point is ``model = "torch"``, which the cpu backend cannot run.

The ``[cpu]`` table applies as for the threaded backend: ``pin`` (a process per
CPU of ``workers.placement``), ``join_timeout_s``, ``monitor``.

Processes are forked (Linux): the workload, its module and the compiled
nopython helpers are inherited, nothing is pickled, and a worker starts in
milliseconds. Losses come from θ snapshots, evaluated off the workers' CPUs
by the cpu backend's monitor (:mod:`executors.cpu.monitor`).
"""

from __future__ import annotations

import math
import os
import sys
import time
from contextlib import ExitStack
from typing import Any, Final

import numpy as np

from executors import atomics as A
from executors.cpu import monitor, placement, shared
from executors.cpu.runner import ExecutorError, single_threaded_blas, slowdowns
from executors.cpu.shared import ABORT, LINE, RUN, S_DEADLINE, S_GO, S_STOP, S_T0, S_VERSION, STOP, slot
from executors.torchmp import TRAITS  # declared with the package: the simulator reads it without the executor
from executors.torchmp import state as S
from executors.torchmp.worker import IMPLEMENTATIONS, main
from simasgd.numerics.workloads.torch_model import OneThread
from simasgd.runs import metadata
from simasgd.runs.convergence import Monitor
from simasgd.runs.progress import Advance
from simasgd.runs.results import RunResult, updates_frame
from simasgd.spec import algorithms, seeds
from simasgd.spec.scenario import Scenario

NAME = "torch"
ALGORITHMS = frozenset(IMPLEMENTATIONS)  # one loop per algorithm in executors/torchmp/worker.py
# Parameter values the worker loops implement, where not every value (algorithms.require_values): ``sync``
# averages the gradients as computed (no 1-bit quantisation), and a ``mutex`` waiter sleeps in the
# multiprocessing lock until it is released, with no failed attempts to back off between.
VALUES: dict[str, dict[str, tuple[Any, ...]]] = {"sync": {"onebit": (False,)}, "mutex": {"backoff": ("none",)}}
WHY = {"onebit": "the worker processes send their gradients unquantised",
       "backoff": "a waiter sleeps in a multiprocessing.Lock until it is free: no failed attempts to back off "
                  "between"}
MEASURES_HOST = True   # real processes on this host: its timings are this machine's
NEEDS_PROFILE = False  # it measures; it reads no calibrated profile
START_METHOD: Final = "fork"  # inherits the built workload and compiled helpers; spawn would rebuild both per worker
READY_TIMEOUT_S = 60.0

__all__ = [
    "ALGORITHMS",
    "MEASURES_HOST",
    "NAME",
    "NEEDS_PROFILE",
    "TRAITS",
    "VALUES",
    "ExecutorError",
    "run_once",
    "run_workload",
]


def run_once(scenario: Scenario, run: int, advance: Advance | None = None) -> RunResult:
    algorithms.require(NAME, scenario.algorithm.name, ALGORITHMS)
    algorithms.require_values(NAME, scenario.algorithm, VALUES, WHY)  # before torch and the workload: at once
    S.import_torch()
    from simasgd.numerics.workloads import build_workload, check_backend

    check_backend(scenario.workload, NAME)
    wl = build_workload(scenario.workload, scenario.seed, scenario.base_dir)
    from simasgd.machines import capacity

    # Before any fork: one process per worker, each with its own gradient; too many is refused in one line.
    capacity.check_workers(NAME, scenario.workers.count, 2 * wl.dim * np.dtype(wl.dtype).itemsize,
                           f"its gradient and a copy of θ, {wl.dim} parameters", task="process")
    start = metadata.host_state()  # around the run: other load skews the timings
    result = run_workload(scenario, run, wl, advance)
    end = metadata.host_state()
    result.metadata["host"] = {"run": run, "loadavg_start": start["loadavg"], "loadavg_end": end["loadavg"],
                               "affinity_start": start["affinity"], "affinity_end": end["affinity"]}
    return result


def one_thread() -> ExitStack:
    """torch (:class:`simasgd.numerics.workloads.torch_model.OneThread`) and BLAS on one thread in this process for
    the run; forked children inherit it."""
    import torch

    stack = ExitStack()
    stack.enter_context(OneThread(torch))
    stack.enter_context(single_threaded_blas())
    return stack


def run_workload(sc: Scenario, run: int, wl: Any, advance: Advance | None = None) -> RunResult:
    """Run ``sc`` once in worker processes with the given workload (the backend builds it; tests pass their own)."""
    import torch.multiprocessing as mp

    workers = sc.workers.count
    theta0 = wl.init_theta(seeds.rng(sc.seed, run, seeds.Role.INIT))
    cpus, warnings = placement.plan(workers, sc.workers.placement) if sc.cpu.pin else ([None] * workers, [])
    if sc.workers.stragglers.probability > 0:
        warnings.append("workers.stragglers.probability: transient pauses are not emulated by the torch backend "
                        "(slowdown is); the run has none")
    for msg in warnings:
        print(f"warning: {msg}", file=sys.stderr)
    mon = Monitor(sc.stop, run)
    mon.observe(0.0, 0, wl.eval_loss(theta0))
    ctx = mp.get_context(START_METHOD)
    with one_thread():
        wl.warmup()
        st = S.allocate(sc, wl, theta0, workers, ctx)
        S.warm_up(st)
        errors = ctx.SimpleQueue()
        slow = slowdowns(sc, workers)
        procs = [ctx.Process(target=main, name=f"simasgd-torch-worker-{w}", daemon=True,
                             args=(w, st, wl, sc, run, cpus[w], slow[w], errors)) for w in range(workers)]
        for p in procs:
            p.start()
        try:
            _await_ready(st, procs, errors)
            busy = len(set(cpus)) if None not in cpus else workers
            watcher = monitor.Watcher(st.ring, st.ctrl, wl.eval_loss, mon, lambda: any(p.is_alive() for p in procs),
                                      advance, live=sc.cpu.monitor == "auto" and busy < len(os.sched_getaffinity(0)),
                                      threads=procs)  # processes join like threads
            t0 = A.clock_ns()
            st.ctrl[slot(S_T0)] = t0
            st.ctrl[slot(S_DEADLINE)] = t0 + int(sc.stop.max_time_s * 1e9)
            st.ctrl[slot(S_GO)] = 1
            watcher.start()
            watcher.join()
        finally:
            _join(st, procs, errors, sc.cpu.join_timeout_s)
        t_stop = (A.clock_ns() - t0) * 1e-9
        if watcher.error is not None:
            raise ExecutorError(f"the loss monitor failed: {type(watcher.error).__name__}: {watcher.error}") \
                from watcher.error
        monitor.drain(st.ring, st.ctrl, wl.eval_loss, mon)
    reason = watcher.reason
    if reason in ("workers finished", "budget") and mon.done:  # ε or a crash found after the run, in the ring
        reason = "epsilon (found after the run)" if mon.reached else "crashed"
    return _finish(st, wl, sc, run, mon, reason, t_stop, cpus, warnings, monitor.notes(st.ring, st.ctrl, watcher))


def _await_ready(st: S.State, procs: list[Any], errors: Any) -> None:
    """Every worker at the start line (spinning on GO), or an error naming the one that is not."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while S.load_word(st.ready, 0) < len(procs):
        dead = [p for p in procs if not p.is_alive()]
        if dead or time.monotonic() > deadline:
            why = errors.get() if not errors.empty() else (
                f"{dead[0].name} exited with code {dead[0].exitcode}" if dead else
                f"workers not ready within {READY_TIMEOUT_S:g} s")
            raise ExecutorError(f"torch backend: {why}")
        time.sleep(0.001)


def _join(st: S.State, procs: list[Any], errors: Any, timeout: float) -> None:
    """Stop and join the workers; a hung one is killed and named, a failed one's error raised."""
    if st.ctrl[slot(S_STOP)] == RUN:
        st.ctrl[slot(S_STOP)] = STOP
    if not st.ctrl[slot(S_GO)]:  # never released: let them leave the start line
        st.ctrl[slot(S_STOP)] = ABORT
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [p for p in procs if p.is_alive()]
    for p in hung:
        p.kill()
        p.join(5.0)
    if not errors.empty():
        raise ExecutorError(f"torch backend: {errors.get()}")
    if hung:
        names = ", ".join(p.name.removeprefix("simasgd-torch-").replace("-", " ") for p in hung)
        raise ExecutorError(f"{names} did not stop within cpu.join_timeout_s = {timeout:g} s of the stop signal "
                            f"(hung in its gradient or a wait?); the run is abandoned")
    bad = [p for p in procs if p.exitcode not in (0, None)]
    if bad:
        raise ExecutorError(f"torch backend: {bad[0].name} exited with code {bad[0].exitcode}")


def _records(st: S.State, run: int) -> tuple[Any, np.ndarray]:
    """The updates table from every worker's shared buffers (the cpu backend's row layout), in version order."""
    import pandas as pd

    parts = []
    for w in range(st.ri.shape[0]):
        n = int(st.nrec[w * LINE])
        ri, rf = st.ri[w, :, :n], st.rf[w, :, :n]
        parts.append(updates_frame(run, np.full(n, w), ri[shared.R_VER], ri[shared.R_RV], rf[shared.R_TREAD],
                                   rf[shared.R_TWRITE], rf[shared.R_WAIT], ri[shared.R_RETRIES],
                                   ri[shared.R_APPLIED].astype(bool), rf[shared.R_TSTART], rf[shared.R_TGS],
                                   rf[shared.R_TGE]))
    df = pd.concat(parts, ignore_index=True).sort_values(["version", "t_write"], kind="stable").reset_index(drop=True)
    return df, df["applied"].to_numpy()


def _finish(st: S.State, wl: Any, sc: Scenario, run: int, mon: Monitor, reason: str, t_stop: float,
            cpus: list[int | None], warnings: list[str], loss_notes: dict[str, Any]) -> RunResult:
    df, applied = _records(st, run)
    updates = int(st.ctrl[slot(S_VERSION)])
    if reason == "workers finished":  # they stopped themselves: say which budget
        reason = "max_updates" if updates >= sc.stop.max_updates else (
            "max_time" if t_stop >= sc.stop.max_time_s else "record_buffer_full")
    time_s = float(df["t_write"].max()) if len(df) else t_stop
    theta = st.final_theta()
    if not mon.updates or mon.updates[-1] != updates:
        mon.observe(time_s, updates, wl.eval_loss(theta))
    extra: dict[str, Any] = {"stop_reason": reason, **loss_notes, "dropped": int((~applied).sum()),
                             "cpus": [c if c is not None else -1 for c in cpus], "processes": len(cpus),
                             "start_method": START_METHOD, "intra_op_threads": 1}
    summary = mon.summary(updates, time_s, df["staleness"].to_numpy()[applied], attempts=len(df), **extra)
    if not math.isfinite(summary.final_loss):
        summary.crashed = True
    return RunResult(scenario=sc.to_dict(), backend=NAME, runs=[summary], updates=df, curve=mon.curve(),
                     metadata={"placement": {"cpus": extra["cpus"], "warnings": warnings},
                               "final_theta_norm": float(np.linalg.norm(theta))})
