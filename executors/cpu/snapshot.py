"""The monitor's view of θ: a consistent copy taken the way the algorithm itself reads.

Lock-based algorithms take their lock (a reader lock for ``rwlock``), one-writer
algorithms (sequential, sync, lopez) use the seqlock their writer maintains,
HOGWILD! gets a plain copy — exactly as inconsistent as its workers' reads —
and Leashed-SGD a reader reference on the latest vector (in :mod:`.leashed`).
Each returns the version counter at the copy, or -1 if the run was aborted.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.shared import (LINE, S_LOCK, S_VERSION, lock_acquire, lock_release, read_acquire, read_release,
                                  seq_copy)


@njit(nogil=True, cache=True)
def under_lock(ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, theta: np.ndarray, out: np.ndarray) -> int:
    if lock_acquire(ctrl, cfg_i, cfg_f, S_LOCK * LINE) < 0:
        return -1
    out[:] = theta
    v = A.load(ctrl, S_VERSION * LINE)
    lock_release(ctrl, S_LOCK * LINE)
    return v


@njit(nogil=True, cache=True)
def under_read_lock(ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, theta: np.ndarray,
                    out: np.ndarray) -> int:
    if read_acquire(ctrl, cfg_i, cfg_f) < 0:
        return -1
    out[:] = theta
    v = A.load(ctrl, S_VERSION * LINE)
    read_release(ctrl)
    return v


@njit(nogil=True, cache=True)
def plain(ctrl: np.ndarray, theta: np.ndarray, out: np.ndarray) -> int:
    v = A.load(ctrl, S_VERSION * LINE)
    out[:] = theta
    return v


@njit(nogil=True, cache=True)
def seqlocked(ctrl: np.ndarray, theta: np.ndarray, out: np.ndarray) -> int:
    return seq_copy(ctrl, theta, out)
