"""The lock-based algorithms (``mutex``, ``rwlock``: one loop, :func:`run_locked`) and the lock
they take (:func:`lock_in`, :func:`lock_out`; ``bounded.py``'s loops take it too)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.loops import CODE_VERSION
from executors.cpu.shared import (
    BUFFER_FULL,
    C_BATCH,
    C_MAXU,
    C_NROWS,
    C_RWLOCK,
    LINE,
    OK,
    S_LOCK,
    S_VERSION,
    STOPPED_WAITING,
    apply_update_mirrored,
    lock_acquire,
    lock_release,
    out_of_budget,
    read_acquire,
    read_copy,
    read_release,
    record,
    sample_batch,
    snapshot_due,
    straggle,
    take_snapshot,
    wait_go,
    write_acquire,
    write_release,
)
from simasgd.numerics.workloads.kernels import grad_over_theta, loss_and_grad


@njit(nogil=True, cache=True)
def lock_in(ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, rw: bool, reader: bool) -> int:
    """Take the run's lock (the reader or writer side of a reader/writer lock): ns waited, -1 if stopped."""
    if not rw:
        return lock_acquire(ctrl, cfg_i, cfg_f, S_LOCK * LINE)
    return read_acquire(ctrl, cfg_i, cfg_f) if reader else write_acquire(ctrl, cfg_i, cfg_f)

@njit(nogil=True, cache=True)
def lock_out(ctrl: np.ndarray, rw: np.ndarray, reader: np.ndarray) -> None:
    if not rw:
        lock_release(ctrl, S_LOCK * LINE)
    elif reader:
        read_release(ctrl)
    else:
        write_release(ctrl)


def _make(kernels_version: str = CODE_VERSION) -> Any:
    """The loop, in a closure over ``loops.CODE_VERSION`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def run_locked(w: int, X: np.ndarray, y: np.ndarray, shape: np.ndarray, theta: np.ndarray, vel: np.ndarray,
                   ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, ri: np.ndarray, rf: np.ndarray,
                   nrec: np.ndarray, seed: np.ndarray, slowdown: float,
                   ring: np.ndarray, meta: np.ndarray) -> int:
        """Lock-based AsyncSGD (Ek 2021, Alg. 2): lock to copy θ, compute, lock to update.

        ``mutex``: one lock for both. ``rwlock`` (``cfg_i[C_RWLOCK]``): readers copy θ together under
        the shared side, a writer updates alone under the exclusive side."""
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        np.random.seed(seed)
        local, g = np.empty_like(theta), np.empty_like(theta)
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        gr = local if grad_over_theta(X, idx, shape) else g  # over the copy where it may: not read again
        rw = cfg_i[C_RWLOCK] != 0
        mine = -1  # the version this worker's last update made: its copy of θ holds it (mirrored)
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while not out_of_budget(ctrl, cfg_i):
            t_s = A.now_ns()
            wait = lock_in(ctrl, cfg_i, cfg_f, rw, True)
            if wait < 0:
                return STOPPED_WAITING
            rv = A.load(ctrl, S_VERSION * LINE)
            read_copy(ctrl, local, theta, rv == mine)  # θ still at this worker's version: its copy is θ
            lock_out(ctrl, rw, True)
            t_r = A.now_ns()
            sample_batch(idx, cfg_i[C_NROWS])
            loss_and_grad(local, X, y, idx, gr, shape)
            straggle(slowdown, t_r)
            t_ge = A.now_ns()
            wait2 = lock_in(ctrl, cfg_i, cfg_f, rw, False)
            if wait2 < 0:
                return STOPPED_WAITING
            cur = A.load(ctrl, S_VERSION * LINE)
            if cur >= cfg_i[C_MAXU]:  # the budget ran out while computing: the gradient is not applied
                lock_out(ctrl, rw, False)
                break
            apply_update_mirrored(theta, vel, gr, local, cfg_i, cfg_f, cur - rv)  # the new θ into the copy too
            v = A.fetch_add(ctrl, S_VERSION * LINE, 1) + 1
            mine = v
            if snapshot_due(cfg_i, ctrl, v):
                take_snapshot(ctrl, cfg_i, ring, meta, v, theta)
            lock_out(ctrl, rw, False)
            if not record(ri, rf, nrec, ctrl, w, v, rv, 0, True, t_s, t_r, t_r, t_ge, wait + wait2):
                return BUFFER_FULL
        return OK

    return run_locked


run_locked = _make()
