"""Sequential SGD on one thread: the reference every parallel algorithm is held to (the simulator's
``sim/algorithms/sequential.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.loops import CODE_VERSION
from executors.cpu.shared import (
    BUFFER_FULL,
    C_BATCH,
    C_NROWS,
    LINE,
    OK,
    S_VERSION,
    STOPPED_WAITING,
    out_of_budget,
    record,
    sample_batch,
    seq_update,
    straggle,
    wait_go,
)
from simasgd.numerics.workloads.kernels import loss_and_grad


def _make(kernels_version: str = CODE_VERSION) -> Any:
    """The loop, in a closure over ``loops.CODE_VERSION`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def run_sequential(w: int, X: np.ndarray, y: np.ndarray, shape: np.ndarray, theta: np.ndarray, vel: np.ndarray,
                       ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, ri: np.ndarray, rf: np.ndarray,
                       nrec: np.ndarray, seed: np.ndarray, slowdown: float,
                       ring: np.ndarray, meta: np.ndarray) -> int:
        """Plain SGD on one thread (the seqlock lets ``final_theta``-style readers copy θ safely)."""
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        np.random.seed(seed)
        g = np.empty_like(theta)
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while not out_of_budget(ctrl, cfg_i):
            t_s = A.now_ns()
            rv = A.load(ctrl, S_VERSION * LINE)
            sample_batch(idx, cfg_i[C_NROWS])
            loss_and_grad(theta, X, y, idx, g, shape)
            straggle(slowdown, t_s)
            t_ge = A.now_ns()
            v = seq_update(theta, vel, g, cfg_i, cfg_f, ctrl, ring, meta)
            if not record(ri, rf, nrec, ctrl, w, v, rv, 0, True, t_s, t_s, t_s, t_ge, 0):
                return BUFFER_FULL
        return OK

    return run_sequential


run_sequential = _make()
