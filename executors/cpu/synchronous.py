"""Synchronous SGD (``sync``): every worker computes on the same θ, worker 0 applies the round's mean."""

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
    C_WORKERS,
    LINE,
    OK,
    S_DEADLINE,
    S_ROUND_STOP,
    S_STOP,
    S_VERSION,
    STOPPED_WAITING,
    barrier,
    record,
    sample_batch,
    seq_update,
    straggle,
    wait_go,
)
from simasgd.numerics.compression import quantize
from simasgd.numerics.memops import copy_into
from simasgd.numerics.workloads.kernels import loss_and_grad


def _make(kernels_version: str = CODE_VERSION) -> Any:
    """The loop, in a closure over ``loops.CODE_VERSION`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def run_sync(w: int, X: np.ndarray, y: np.ndarray, shape: np.ndarray, theta: np.ndarray, vel: np.ndarray,
                 ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, ri: np.ndarray, rf: np.ndarray,
                 nrec: np.ndarray, seed: np.ndarray, slowdown: float,
                 ring: np.ndarray, meta: np.ndarray, grads: np.ndarray, resid: np.ndarray) -> int:
        """Synchronous SGD: all compute on the same θ, a barrier, worker 0 applies the mean, a barrier.

        One update per round and one row per gradient (the row contract of ``sync``): after the
        second barrier every worker records its own gradient's row — its read version, the
        version of the round's update, its own cycle's times, its wait at the first barrier.
        Whether to go on is decided once per round by worker 0, so every worker leaves at the
        same barrier; every worker records one row a round, so the buffers (one size for all)
        fill together and worker 0 stops the round that fills them. ``onebit`` (``resid`` has a row per
        worker): each worker replaces its gradient by Q(g + e) before the barrier, keeping e
        (:func:`simasgd.numerics.compression.quantize`)."""
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        np.random.seed(seed)
        n = cfg_i[C_WORKERS]
        mine = grads[w]
        mean = np.empty_like(theta)
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        sense = 0
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while True:
            t_s = A.now_ns()
            rv = A.load(ctrl, S_VERSION * LINE)
            sample_batch(idx, cfg_i[C_NROWS])
            loss_and_grad(theta, X, y, idx, mine, shape)
            straggle(slowdown, t_s)
            t_ge = A.now_ns()
            if resid.shape[1] > 0:
                quantize(mine, resid[w], mine)
            sense = barrier(ctrl, n, sense)
            if sense < 0:
                return STOPPED_WAITING
            wait = A.now_ns() - t_ge
            if w == 0:
                copy_into(mean, grads[0])
                for k in range(1, n):
                    mean += grads[k]
                mean /= n
                v = seq_update(theta, vel, mean, cfg_i, cfg_f, ctrl, ring, meta)
                full = nrec[w * LINE] + 1 >= ri.shape[1]  # this round's rows fill every buffer
                done = full or A.load(ctrl, S_STOP * LINE) != 0 or v >= cfg_i[C_MAXU] \
                    or A.now_ns() >= ctrl[S_DEADLINE * LINE]
                A.store(ctrl, S_ROUND_STOP * LINE, 1 if done else 0)
            sense = barrier(ctrl, n, sense)
            if sense < 0:
                return STOPPED_WAITING
            v = A.load(ctrl, S_VERSION * LINE)  # the round's update (worker 0 made it before the barrier)
            room = record(ri, rf, nrec, ctrl, w, v, rv, 0, True, t_s, t_s, t_s, t_ge, wait)
            if A.load(ctrl, S_ROUND_STOP * LINE) != 0:
                return OK if room else BUFFER_FULL
        return OK

    return run_sync


run_sync = _make()
