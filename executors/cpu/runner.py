"""One real run: threads, pinning, the monitor, the stop rule, and the results.

The main thread starts one ``threading.Thread`` per worker (each pins itself,
then enters its nogil loop and never comes back to Python until it stops) and
releases them together. Workers stop themselves at the update or time budget;
losses come from θ snapshots every ``stop.eval_updates()`` versions, evaluated
off the workers' CPUs by :mod:`.monitor` (which sets the stop word at ε or on
a crash) and after the run. Threads are joined with ``[cpu] join_timeout_s``:
a thread that does not stop is named in an :class:`ExecutorError`, as is one
that raised. BLAS is single-threaded for the whole run, losses included, and
the workers start only once the process's other threads are idle
(:mod:`executors.settle`: a BLAS pool spins on after a multi-threaded call).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from executors import atomics, settle
from executors.cpu import monitor, placement, shared
from executors.cpu.shared import LINE, slot
from executors.cpu.wiring import Wiring, configure, wire
from simasgd.evaluation import phases
from simasgd.runs.convergence import Monitor, accuracy_of
from simasgd.runs.progress import Advance
from simasgd.runs.results import RunResult, RunSummary, updates_frame
from simasgd.sim import network  # message sizes: what the threads' messages would carry over [network]
from simasgd.spec import seeds
from simasgd.spec.scenario import Scenario

NAME = "cpu"
WARMUP_UPDATES = 2
# Before go, the main thread sleeps this long: spinning workers spread over the CPUs (see run()).
SPREAD_S = 0.02
# Records kept per run, over all workers (~49 bytes each): bounds memory when stop.max_updates is huge.
# A worker whose buffer fills stops (noted in the summary); time budgets normally end runs first.
MAX_RECORDS = 4_000_000


class ExecutorError(RuntimeError):
    """A worker raised or did not stop: the run has no trustworthy result."""


@dataclass
class Workers:
    threads: list[threading.Thread]
    errors: dict[str, BaseException]
    codes: dict[str, int]


def n_rows(wl: Any) -> int:
    return int(getattr(wl, "n_train", None) or len(wl.y))


def config(sc: Scenario, wl: Any, workers: int, max_updates: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    a = sc.algorithm
    cfg_i = np.zeros(shared.N_CFG_I, dtype=np.int64)
    cfg_f = np.zeros(shared.N_CFG_F, dtype=np.float64)
    backoff = a.param("backoff") if "backoff" in _params(a.name) else None
    cfg_i[shared.C_WORKERS] = workers
    cfg_i[shared.C_BATCH] = sc.workload.batch_size
    cfg_i[shared.C_NROWS] = n_rows(wl)
    cfg_i[shared.C_MAXU] = max_updates
    cfg_i[shared.C_BOKIND] = (shared.BACKOFF_KINDS[backoff.kind]
                              | (shared.BACKOFF_RANDOM_START if backoff.start == "random" else 0)) if backoff else 0
    cfg_i[shared.C_PERSIST] = -1
    cfg_i[shared.C_STALE_AWARE] = int(sc.optimizer.staleness_aware)
    cfg_i[shared.C_CAP] = cap
    cfg_i[shared.C_PROBES] = int(sc.cpu.hogwild_probes)
    cfg_f[shared.F_LR] = sc.optimizer.lr
    cfg_f[shared.F_MOM] = sc.optimizer.momentum
    cfg_f[shared.F_BO_INIT_NS] = backoff.initial_s * 1e9 if backoff else 0.0
    cfg_f[shared.F_BO_MAX_NS] = backoff.max_s * 1e9 if backoff else 0.0
    configure(a, cfg_i, cfg_f)  # the algorithm's own words, from its row of wiring.IMPLEMENTATIONS
    return cfg_i, cfg_f


def _params(name: str) -> tuple[str, ...]:
    from simasgd.spec import algorithms

    return algorithms.ALGORITHMS[name].param_names


@dataclass
class Setup:
    ctrl: np.ndarray
    cfg_i: np.ndarray
    cfg_f: np.ndarray
    theta: np.ndarray
    vel: np.ndarray
    wiring: Wiring
    ri: np.ndarray
    rf: np.ndarray
    nrec: np.ndarray
    ring: monitor.Ring


def prepare(sc: Scenario, wl: Any, theta0: np.ndarray, workers: int, max_updates: int,
            snap_every: int | None = None) -> Setup:
    """Allocate every shared array of one run (also used, tiny, for the warm-up)."""
    ctrl = shared.new_ctrl()
    theta = np.ascontiguousarray(theta0).copy()
    vel = np.zeros_like(theta)  # loops index vel only when momentum > 0
    cfg_i, cfg_f = config(sc, wl, workers, max_updates, 0)
    wiring = wire(sc.algorithm.name, ctrl, cfg_i, cfg_f, theta, vel, workers, wl.kernel, sc, n_rows(wl))
    cap = max(wiring.records_per_worker(w, max_updates + 8) for w in range(workers))
    cap = min(cap, max(1024, MAX_RECORDS // workers))
    cfg_i[shared.C_CAP] = cap
    ri = np.zeros((workers, 4, cap), dtype=np.int64)
    rf = np.zeros((workers, shared.N_RF, cap), dtype=np.float64)
    ring = monitor.new_ring(theta, snap_every or sc.stop.eval_updates(), max_updates)
    monitor.configure(cfg_i, ring)
    return Setup(ctrl, cfg_i, cfg_f, theta, vel, wiring, ri, rf, np.zeros(workers * LINE, dtype=np.int64), ring)


def check_capacity(sc: Scenario, wl: Any) -> None:
    """Refuse (``CapacityError`` naming ``workers.count``) more workers than this machine holds, before
    :func:`prepare` allocates: each one's records, at the fewest :func:`prepare` gives a worker, and its
    gradient (and 1-bit residual) row, in memory available now; and one thread each."""
    from simasgd.machines import capacity

    workers, theta_bytes = sc.workers.count, wl.dim * np.dtype(wl.dtype).itemsize
    cap = min(sc.stop.max_updates + 8, max(1024, MAX_RECORDS // workers))
    rows = 2 if getattr(sc.algorithm, "onebit", False) else 1
    per_worker = (4 + shared.N_RF) * 8 * cap + rows * theta_bytes + LINE * 8
    capacity.check_workers(NAME, workers, per_worker, f"{cap} records and {rows} gradient row(s) of "
                           f"{wl.dim} parameters", shared=4 * theta_bytes)


def loop_args(s: Setup, wl: Any, w: int, seed: int, slowdown: float) -> tuple[Any, ...]:
    return (w, wl.X, wl.y, wl.shape, s.theta, s.vel, s.ctrl, s.cfg_i, s.cfg_f, s.ri[w], s.rf[w], s.nrec, seed,
            slowdown, s.ring.data, s.ring.meta, *s.wiring.extras(w))


def warm_up(sc: Scenario, wl: Any, theta0: np.ndarray) -> None:
    """Compile (or load from cache) the loop, the snapshot and the kernel before any clock starts."""
    s = prepare(sc, wl, theta0, 1, WARMUP_UPDATES, snap_every=1)
    s.ctrl[slot(shared.S_GO)] = 1
    # Compilation happens at the call; running a couple of updates also touches every buffer once.
    s.ctrl[slot(shared.S_DEADLINE)] = 0 if s.wiring.immediate_warmup else atomics.clock_ns() + 60 * 10**9
    s.wiring.loop(*loop_args(s, wl, 0, 1, 1.0))
    monitor.warm_up(s.theta)


def slowdowns(sc: Scenario, workers: int) -> list[float]:
    st = sc.workers.stragglers
    return [st.slowdown if w < st.count else 1.0 for w in range(workers)]


def _thread_main(w: int, label: str, fn: Any, args: tuple[Any, ...], cpu: int | None, ctrl: np.ndarray,
                 out: Workers) -> None:
    try:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})  # pid 0 = this thread (Linux thread-level affinity)
        code = int(fn(*args))
        out.codes[label] = code
        if code == shared.BUFFER_FULL and ctrl[slot(shared.S_STOP)] == shared.RUN:
            ctrl[slot(shared.S_STOP)] = shared.STOP  # the run's record budget is spent: everyone stops
    except BaseException as e:
        out.errors[label] = e
        ctrl[slot(shared.S_STOP)] = shared.ABORT  # others bail out of every spin loop


def start(s: Setup, wl: Any, sc: Scenario, run: int, cpus: list[int | None]) -> Workers:
    workers = len(cpus)
    out = Workers([], {}, {})
    slow = slowdowns(sc, workers)
    for w in range(workers):
        seed = seeds.int_seed(sc.seed, run, seeds.Role.BATCH, w) % (2**32)
        args = loop_args(s, wl, w, seed, slow[w])
        out.threads.append(threading.Thread(target=_thread_main, name=f"simasgd-worker-{w}", daemon=True,
                                            args=(w, f"worker {w}", s.wiring.loop, args, cpus[w], s.ctrl, out)))
    for t in out.threads:
        t.start()
    return out


def join(s: Setup, ws: Workers, timeout: float) -> None:
    if s.ctrl[slot(shared.S_STOP)] == shared.RUN:
        s.ctrl[slot(shared.S_STOP)] = shared.STOP
    deadline = time.monotonic() + timeout
    for t in ws.threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name.removeprefix("simasgd-").replace("-", " ") for t in ws.threads if t.is_alive()]
    if hung:
        s.ctrl[slot(shared.S_STOP)] = shared.ABORT
        raise ExecutorError(f"{', '.join(hung)} did not stop within cpu.join_timeout_s = {timeout:g} s "
                            f"of the stop signal (hung in its gradient or a wait?); the run is abandoned")
    if ws.errors:
        label, e = next(iter(ws.errors.items()))
        raise ExecutorError(f"{label} failed: {type(e).__name__}: {e}") from e


def records(s: Setup, run: int) -> tuple[Any, np.ndarray]:
    """The updates table from every worker's buffer, in version order, and the applied mask."""
    parts = []
    for w in range(s.ri.shape[0]):
        n = int(s.nrec[w * LINE])
        ri, rf = s.ri[w, :, :n], s.rf[w, :, :n]
        parts.append(updates_frame(run, np.full(n, w), ri[shared.R_VER], ri[shared.R_RV], rf[shared.R_TREAD],
                                   rf[shared.R_TWRITE], rf[shared.R_WAIT], ri[shared.R_RETRIES],
                                   ri[shared.R_APPLIED].astype(bool), rf[shared.R_TSTART], rf[shared.R_TGS],
                                   rf[shared.R_TGE], **s.wiring.row_columns(w, n)))
    import pandas as pd

    df = pd.concat(parts, ignore_index=True).sort_values(["version", "t_write"], kind="stable").reset_index(drop=True)
    return df, df["applied"].to_numpy()


def single_threaded_blas() -> Any:
    """BLAS limited to one thread (:func:`simasgd.numerics.blas.single_threaded`)."""
    from simasgd.numerics.blas import single_threaded

    return single_threaded()


def run_workload(sc: Scenario, run: int, wl: Any, advance: Advance | None = None,
                 state: dict[str, Any] | None = None) -> RunResult:
    """Run ``sc`` once on real threads with the given workload (the backend builds it; tests pass their own).

    With ``state``, the final θ is left in ``state["theta"]`` (for exactness checks)."""
    workers = sc.workers.count  # within the algorithm's bounds: checked when the scenario was validated
    theta0 = wl.init_theta(seeds.rng(sc.seed, run, seeds.Role.INIT))
    check_capacity(sc, wl)
    cpus, warnings = placement.plan(workers, sc.workers.placement) if sc.cpu.pin else ([None] * workers, [])
    if sc.workers.stragglers.probability > 0:
        warnings.append("workers.stragglers.probability: transient pauses are not emulated by the cpu backend "
                        "(slowdown is); the run has none")
    for msg in warnings:
        print(f"warning: {msg}", file=sys.stderr)
    # BLAS single-threaded around the whole run, the losses before and after it included: a
    # multi-threaded call leaves its pool spinning ~0.1 s into whatever comes next (executors/settle.py)
    with single_threaded_blas():
        mon = Monitor(sc.stop, run, accuracy_of=accuracy_of(wl))
        mon.observe(0.0, 0, wl.eval_loss(theta0), theta0)
        warm_up(sc, wl, theta0)
        s = prepare(sc, wl, theta0, workers, sc.stop.max_updates)
        quiet = settle.settle()  # before the workers exist: they spin on the go word
        if quiet.timed_out:
            warnings.append(f"other threads of this process kept running as the run started: {', '.join(quiet.busy)}")
            print(f"warning: {warnings[-1]}", file=sys.stderr)
        ws = start(s, wl, sc, run, cpus)
        busy = len(set(cpus)) if None not in cpus else workers  # CPUs the workers keep busy
        watcher = monitor.Watcher(s.ring, s.ctrl, wl.eval_loss, mon,
                                  lambda: not ws.errors and any(t.is_alive() for t in ws.threads), advance,
                                  live=sc.cpu.monitor == "auto" and busy < len(os.sched_getaffinity(0)),
                                  threads=ws.threads)
        # Every worker on a CPU of its own at go. Started while this thread ran, unpinned spinners queue on
        # the other CPU, and a CPU this thread leaves by blocking does not pull one at once (Linux skips
        # the new-idle balance of a CPU that was busy): the second of 2 workers on 2 CPUs would often
        # begin its first cycle milliseconds after go. So this thread
        # sleeps through a few balance intervals first; woken, it takes one spinner's CPU only until it
        # blocks again right after go, and that spinner resumes there. The monitor thread starts first
        # too (a Python thread's start holds a CPU for ~ms); its timeout reads a provisional deadline.
        s.ctrl[slot(shared.S_DEADLINE)] = atomics.clock_ns() + int((sc.stop.max_time_s + 1.0) * 1e9)
        watcher.start()
        time.sleep(SPREAD_S)
        t0 = atomics.clock_ns()
        s.ctrl[slot(shared.S_T0)] = t0
        s.ctrl[slot(shared.S_DEADLINE)] = t0 + int(sc.stop.max_time_s * 1e9)
        s.ctrl[slot(shared.S_GO)] = 1  # then this thread blocks at once (joins the monitor): its CPU is free
        try:
            watcher.join()
        finally:
            join(s, ws, sc.cpu.join_timeout_s)
        t_stop = (atomics.clock_ns() - t0) * 1e-9
        if watcher.error is not None:
            raise ExecutorError(f"the loss monitor failed: {type(watcher.error).__name__}: {watcher.error}") \
                from watcher.error
        monitor.drain(s.ring, s.ctrl, wl.eval_loss, mon)
        reason = "error" if ws.errors else watcher.reason
        if reason in ("workers finished", "budget") and mon.done:  # ε or a crash found after the run, in the ring
            reason = "epsilon (found after the run)" if mon.reached else "crashed"
        if state is not None:
            state["theta"] = s.wiring.final_theta().copy()
        notes = monitor.notes(s.ring, s.ctrl, watcher) | {"settle_s": round(quiet.waited_s, 4)}
        return finish(s, wl, sc, run, mon, ws, reason, t_stop, cpus, warnings, notes)


def finish(s: Setup, wl: Any, sc: Scenario, run: int, mon: Monitor, ws: Workers, reason: str, t_stop: float,
           cpus: list[int | None], warnings: list[str], loss_notes: dict[str, Any]) -> RunResult:
    df, applied = records(s, run)
    updates = int(s.ctrl[slot(shared.S_VERSION)])
    if reason == "workers finished":  # they stopped themselves: say which budget
        reason = "max_updates" if updates >= sc.stop.max_updates else (
            "record_buffer_full" if shared.BUFFER_FULL in ws.codes.values() else (
                "max_time" if t_stop >= sc.stop.max_time_s else "workers finished"))
    time_s = float(df["t_write"].max()) if len(df) else t_stop
    theta = s.wiring.final_theta()
    if not mon.updates or mon.updates[-1] != updates:
        mon.observe(time_s, updates, wl.eval_loss(theta), theta)
    extra: dict[str, Any] = {"stop_reason": reason, **loss_notes,
                             "dropped": int((~applied).sum()), "cpus": [c if c is not None else -1 for c in cpus],
                             **s.wiring.extra(updates),
                             **network.traffic(sc, int(s.theta.shape[0]), int(s.theta.itemsize), len(df))}
    # workers inside a gradient at once, on average: halved when the host makes them take turns
    extra["gradient_concurrency"] = round(phases.gradient_concurrency(df).get(run, math.nan), 3)
    # ... and inside their update phases at once: high in such runs, though updates are short against gradients
    extra["update_concurrency"] = round(phases.update_concurrency(df).get(run, math.nan), 3)
    extra["both_updating"] = round(phases.both_updating(df).get(run, math.nan), 3)  # side by side, or in turn
    if any(code == shared.BUFFER_FULL for code in ws.codes.values()):
        extra["note"] = "a worker's record buffer filled up; it stopped early"
    staleness = df["staleness"].to_numpy()[applied]
    summary: RunSummary = mon.summary(updates, time_s, staleness, attempts=len(df), **extra)
    if not math.isfinite(summary.final_loss):
        summary.crashed = True
    return RunResult(scenario=sc.to_dict(), backend=NAME, runs=[summary], updates=df, curve=mon.curve(),
                     metadata={"placement": {"cpus": extra["cpus"], "warnings": warnings},
                               "final_theta_norm": float(np.linalg.norm(theta))})
