"""Per-algorithm wiring: which loop, which extra shared arrays, where θ is at the end.

:func:`wire` allocates everything one run of one algorithm shares between its
threads, so that :mod:`.runner` stays algorithm-agnostic. The loops call the
kernel as a global; :func:`loop_for` gives the cached loop for the workloads'
``kernels.loss_and_grad`` and an uncached copy of it for any other kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from executors.cpu import leashed, loops, lopez
from executors.kernel import with_kernel
from executors.cpu.shared import C_PROBES, LINE, S_CONTRIB, S_EXHAUSTED, S_LATEST, slot

LOOPS: dict[str, Any] = {
    "sequential": loops.run_sequential, "mutex": loops.run_mutex, "rwlock": loops.run_rwlock,
    "hogwild": loops.run_hogwild, "sync": loops.run_sync, "leashed": leashed.run_leashed,
    "lopez": lopez.run_lopez,
}


def loop_for(name: str, kernel: Any) -> Any:
    """The worker loop of algorithm ``name`` computing gradients with ``kernel``."""
    return with_kernel(LOOPS[name], kernel)


@dataclass
class Wiring:
    loop: Any                                   # the worker loop (numba dispatcher)
    extras: Callable[[int], tuple[Any, ...]]    # worker -> extra arguments after the common head
    final_theta: Callable[[], np.ndarray]       # θ at the end, once every thread has stopped
    extra: Callable[[int], dict[str, Any]] = field(default=lambda applied: {})  # summary figures
    records_per_worker: Callable[[int, int], int] = field(default=lambda w, n: n)  # cap per worker
    immediate_warmup: bool = False              # warm-up only compiles (the loop cannot finish alone)


def wire(name: str, ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, theta: np.ndarray,
         vel: np.ndarray, workers: int, kernel: Any) -> Wiring:
    loop = loop_for(name, kernel)
    if name in ("sequential",):
        return Wiring(loop, lambda w: (), lambda: theta)
    if name in ("mutex", "rwlock"):
        return Wiring(loop, lambda w: (), lambda: theta)
    if name == "hogwild":
        return _hogwild(loop, ctrl, theta, cfg_i[C_PROBES] != 0)
    if name == "sync":
        grads = np.zeros((workers, theta.shape[0]), dtype=theta.dtype)
        return Wiring(loop, lambda w: (grads,), lambda: theta, records_per_worker=lambda w, n: n if w == 0 else 1)
    if name == "leashed":
        return _leashed(loop, ctrl, theta, vel, workers)
    if name == "lopez":
        return _lopez(loop, ctrl, theta, vel, workers)
    raise KeyError(name)


def _hogwild(loop: Any, ctrl: np.ndarray, theta: np.ndarray, probes: bool) -> Wiring:
    canary = np.zeros(loops.n_probes(theta.shape[0]) if probes else 1)

    def extra(applied: int) -> dict[str, Any]:
        if not probes:
            return {}
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

    return Wiring(loop, lambda w: (canary,), lambda: theta, extra)


def _leashed(loop: Any, ctrl: np.ndarray, theta: np.ndarray, vel: np.ndarray, workers: int) -> Wiring:
    n = leashed.pool_size(workers)
    pool = np.zeros((n, theta.shape[0]), dtype=theta.dtype)
    vpool = np.zeros((n, theta.shape[0]), dtype=theta.dtype) if vel.shape[0] else np.zeros((n, 0), theta.dtype)
    rc = np.zeros(n * LINE, dtype=np.int64)
    stale = np.zeros(n * LINE, dtype=np.int64)
    ver = np.zeros(n * LINE, dtype=np.int64)
    stale[::LINE] = 1
    pool[0] = theta
    if vel.shape[0]:
        vpool[0] = vel
    stale[0] = 0
    ctrl[slot(S_LATEST)] = 0
    peak = np.ones(1, dtype=np.int64)  # slot 0 holds θ0 from the start

    def final() -> np.ndarray:
        return pool[int(ctrl[slot(S_LATEST)])].copy()

    def extra(applied: int) -> dict[str, Any]:
        return {"pool_size": n, "pool_bound": 2 * workers + 1, "pool_peak": int(peak[0]),
                "pool_exhausted": int(ctrl[slot(S_EXHAUSTED)])}

    return Wiring(loop, lambda w: (pool, vpool, rc, stale, ver, peak), final, extra,
                  records_per_worker=lambda w, n_: 2 * n_ + 1024)


def _lopez(loop: Any, ctrl: np.ndarray, theta: np.ndarray, vel: np.ndarray, workers: int) -> Wiring:
    acc = np.zeros(theta.shape[0], dtype=theta.dtype)
    return Wiring(loop, lambda w: (acc,), lambda: theta, extra=lambda applied: {"gradients": int(ctrl[slot(S_CONTRIB)])},
                  records_per_worker=lambda w, n: 2 * n + 1024 if w else 1, immediate_warmup=True)


def persistence_code(p: float) -> int:
    return -1 if math.isinf(p) else int(p)
