"""The cpu backend, data-driven: one table row per algorithm (its loop, its shared arrays, its config).

:data:`IMPLEMENTATIONS` maps an algorithm of the registry (:mod:`simasgd.spec.algorithms`,
where its meaning is defined) to its :class:`Entry`: the worker loop, how to
allocate what the run's threads share besides θ (:func:`wire`), and the
algorithm-specific configuration words (``cfg_i``/``cfg_f``). The backend's
algorithm list is this table's keys, and :mod:`.runner` reads nothing but
the table, so adding an algorithm is its loop's file plus one row here. The
loops call the kernel as a global; :func:`loop_for` gives the cached loop
for the workloads' ``kernels.loss_and_grad`` and a copy of it for any other
kernel (cached apart where the kernel is: :mod:`executors.kernel`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from executors.cpu import bounded, decentral, elastic, lockfree, locks, lopez, param_server, sequential, synchronous
from executors.cpu.entry import Run, Wiring, elided
from executors.cpu.shared import (
    C_LOCAL_COPY,
    C_LOPEZ,
    C_PERSIST,
    C_PRIO,
    C_PROBES,
    C_RWLOCK,
    C_SWEEP_ALTERNATE,
    F_MOM,
    LINE,
    S_CONTRIB,
    S_EXHAUSTED,
    S_LATEST,
    slot,
)
from executors.kernel import with_kernel


def _plain(r: Run) -> Wiring:
    """θ (and v) are the whole shared state; no extra arguments."""
    return Wiring(r.loop, lambda w: (), lambda: r.theta)


def _copies(r: Run) -> Wiring:
    """θ (and v) the whole shared state, read into a worker's copy that its update keeps (loops.run_locked):
    the summary counts the reads skipped because θ was unchanged since the worker's own update."""
    return Wiring(r.loop, lambda w: (), lambda: r.theta, lambda applied: elided(r.ctrl))


def _no_config(algorithm: Any, cfg_i: np.ndarray, cfg_f: np.ndarray) -> None:
    return None


@dataclass(frozen=True)
class Entry:
    loop: Any                                               # the cached worker loop (kernels.loss_and_grad)
    wire: Callable[[Run], Wiring] = _plain                  # shared arrays, extra loop arguments, final θ
    configure: Callable[[Any, np.ndarray, np.ndarray], None] = _no_config  # (AlgorithmConfig, cfg_i, cfg_f)


def loop_for(name: str, kernel: Any) -> Any:
    """The worker loop of algorithm ``name`` computing gradients with ``kernel``."""
    return with_kernel(IMPLEMENTATIONS[name].loop, kernel)


def wire(name: str, ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, theta: np.ndarray,
         vel: np.ndarray, workers: int, kernel: Any, scenario: Any = None, n_rows: int = 0) -> Wiring:
    r = Run(loop_for(name, kernel), ctrl, cfg_i, cfg_f, theta, vel, workers, scenario, n_rows)
    return IMPLEMENTATIONS[name].wire(r)


def configure(algorithm: Any, cfg_i: np.ndarray, cfg_f: np.ndarray) -> None:
    """The algorithm's own configuration words (the common ones are :func:`runner.config`'s)."""
    IMPLEMENTATIONS[algorithm.name].configure(algorithm, cfg_i, cfg_f)


def _sync(r: Run) -> Wiring:
    grads = np.zeros((r.workers, r.theta.shape[0]), dtype=r.theta.dtype)
    onebit = r.scenario is not None and bool(r.scenario.algorithm.param("onebit"))
    resid = np.zeros((r.workers, r.theta.shape[0] if onebit else 0), dtype=r.theta.dtype)  # 1-bit error feedback
    return Wiring(r.loop, lambda w: (grads, resid), lambda: r.theta)  # one row per gradient: a round's worth each


def _hogwild(r: Run) -> Wiring:
    probes = r.cfg_i[C_PROBES] != 0
    canary = np.zeros(lockfree.n_probes(r.theta.shape[0]) if probes else 1)

    def extra(applied: int) -> dict[str, Any]:
        if not probes:
            return elided(r.ctrl)
        # Every update adds 1 to its chunk's probe with a racy read-modify-write like the chunk's;
        # what a probe lacks was overwritten by a concurrent writer (or by this thread resuming a
        # preempted write). Mean over chunks: an estimate of the updates lost per element as θ
        # shows them, without knowing the gradient. An estimate: a probe is its own memory word,
        # so it races when its chunk does but not in the same instant; on a loaded machine, where
        # a few preemptions inside a write window dominate the losses, it is noisy.
        lost = applied - canary
        mean = float(lost.mean()) if len(lost) else 0.0
        return {"lost_updates": round(mean, 3), "lost_update_fraction": mean / applied if applied else 0.0,
                "lost_updates_max": int(lost.max()) if len(lost) else 0}

    return Wiring(r.loop, lambda w: (canary,), lambda: r.theta, extra)


def _leashed(r: Run) -> Wiring:
    ctrl, theta, vel, workers = r.ctrl, r.theta, r.vel, r.workers
    n = lockfree.pool_size(workers)
    momentum = r.cfg_f[F_MOM] > 0.0
    pool = np.zeros((n, theta.shape[0]), dtype=theta.dtype)
    vpool = np.zeros((n, theta.shape[0] if momentum else 0), dtype=theta.dtype)
    rc = np.zeros(n * LINE, dtype=np.int64)
    stale = np.zeros(n * LINE, dtype=np.int64)
    ver = np.zeros(n * LINE, dtype=np.int64)
    stale[::LINE] = 1
    pool[0] = theta
    if momentum:
        vpool[0] = vel
    stale[0] = 0
    ctrl[slot(S_LATEST)] = 0
    peak = np.ones(1, dtype=np.int64)  # slot 0 holds θ0 from the start

    def final() -> np.ndarray:
        return pool[int(ctrl[slot(S_LATEST)])].copy()

    def extra(applied: int) -> dict[str, Any]:
        return {"pool_size": n, "pool_bound": 2 * workers + 1, "pool_peak": int(peak[0]),
                "pool_exhausted": int(ctrl[slot(S_EXHAUSTED)])}

    return Wiring(r.loop, lambda w: (pool, vpool, rc, stale, ver, peak), final, extra,
                  records_per_worker=lambda w, n_: 2 * n_ + 1024)


def _lopez(r: Run) -> Wiring:
    acc = np.zeros(r.theta.shape[0], dtype=r.theta.dtype)
    lctl = np.zeros(LINE, dtype=np.int64)  # the master's announced step, on its own cache line
    # A worker's gradients take longer than master steps (a copy of w and a gradient against a read of
    # g and a write of w), so a worker records fewer rows than the run has versions.
    return Wiring(r.loop, lambda w: (acc, lctl), lambda: r.theta,
                  extra=lambda applied: {"gradients": int(r.ctrl[slot(S_CONTRIB)])},
                  records_per_worker=lambda w, n: n + 1024 if w else 1, immediate_warmup=True)


def _lopez_config(a: Any, cfg_i: np.ndarray, cfg_f: np.ndarray) -> None:
    cfg_i[C_LOPEZ] = lopez.flags(a)


def persistence_code(p: float) -> int:
    return -1 if math.isinf(p) else int(p)


def _leashed_config(a: Any, cfg_i: np.ndarray, cfg_f: np.ndarray) -> None:
    cfg_i[C_PERSIST] = persistence_code(a.param("persistence"))


def _hogwild_config(a: Any, cfg_i: np.ndarray, cfg_f: np.ndarray) -> None:
    cfg_i[C_LOCAL_COPY] = int(bool(a.param("local_copy")))
    cfg_i[C_SWEEP_ALTERNATE] = int(a.param("sweep") == "alternate")


def _rwlock_config(a: Any, cfg_i: np.ndarray, cfg_f: np.ndarray) -> None:
    cfg_i[C_RWLOCK] = 1  # run_locked takes the reader side to copy, the writer side to update
    cfg_i[C_PRIO] = 1 if a.param("priority") == "writer" else 0


# Algorithm (a registry name) -> its loop (in its family's module), wiring and configuration: the cpu backend's
# one list; backend.ALGORITHMS is its keys.
IMPLEMENTATIONS: dict[str, Entry] = {
    "sequential": Entry(sequential.run_sequential),
    "sync": Entry(synchronous.run_sync, _sync),
    "mutex": Entry(locks.run_locked, _copies),
    "rwlock": Entry(locks.run_locked, _copies, _rwlock_config),
    "hogwild": Entry(lockfree.run_hogwild, _hogwild, _hogwild_config),
    "leashed": Entry(lockfree.run_leashed, _leashed, _leashed_config),
    "lopez": Entry(lopez.run_lopez, _lopez, _lopez_config),
    "ssp": Entry(bounded.run_ssp, bounded.wire_ssp),
    "backup": Entry(bounded.run_backup, bounded.wire_backup),
    "keuper": Entry(decentral.run_own, decentral.wire_own),
    "simuparallel": Entry(decentral.run_own, decentral.wire_own),
    "easgd": Entry(elastic.run_elastic, elastic.wire),
    "eawild": Entry(elastic.run_elastic, elastic.wire),
    "param_server": Entry(param_server.run_param_server, param_server.wire),
}
LOOPS: dict[str, Any] = {name: e.loop for name, e in IMPLEMENTATIONS.items()}  # the loops alone
