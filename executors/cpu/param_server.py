"""Asynchronous SGD through a parameter server on threads (definition: ``simasgd.spec.algorithms``; model:
``simasgd/sim/algorithms/param_server.py``).

The server is the shared θ (and, with ``optimizer.momentum``, its velocity:
Async MSGD), cut into ``shards`` contiguous shards ``[s·d/S, (s+1)·d/S)``,
each with its own spin lock (``locks``, one cache line each; ``shared.word_lock``). A worker's
cycle: pull — copy each shard under its lock; compute the gradient at the
copy; with ``onebit`` replace it by Q(g + e), keeping e
(:func:`simasgd.numerics.compression.quantize`); push — each shard under its lock,
the update rule on that shard with the gradient divided by
``update_rule.divisor`` (versions at that shard's step − read version). The
push's last shard bumps the version (and takes the loss snapshot) inside its
lock, so with one shard θ at every version is exact. Rows: one per push,
``read_version`` = the version when the pull started. The bytes a pull and a
push would carry over a network are ``simasgd.sim.network.row_bytes``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.entry import Run, Wiring
from executors.cpu.loops import CODE_VERSION
from executors.cpu.shared import (
    BUFFER_FULL,
    C_BATCH,
    C_MAXU,
    C_NROWS,
    C_STALE_AWARE,
    F_LR,
    F_MOM,
    LINE,
    OK,
    S_VERSION,
    STOPPED_WAITING,
    lock_release,
    out_of_budget,
    record,
    sample_batch,
    snapshot_due,
    straggle,
    take_snapshot,
    wait_go,
    word_lock,
)
from simasgd.numerics import compression
from simasgd.numerics.compression import quantize
from simasgd.numerics.update_rule import divisor, step_range
from simasgd.numerics.workloads.kernels import grad_over_theta, loss_and_grad


def _make(kernels_version: str = CODE_VERSION + compression.SOURCE_HASH) -> Any:
    """The loop, in a closure over the kernels', update rule's and compression's sources (its cache key)."""

    @njit(nogil=True, cache=True)
    def run_param_server(w: int, X: np.ndarray, y: np.ndarray, shape: np.ndarray, theta: np.ndarray, vel: np.ndarray,
                         ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, ri: np.ndarray, rf: np.ndarray,
                         nrec: np.ndarray, seed: np.ndarray,
                         slowdown: float, ring: np.ndarray, meta: np.ndarray, locks: np.ndarray, onebit: bool) -> int:
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        np.random.seed(seed)
        d = theta.shape[0]
        S = locks.shape[0] // LINE
        local, g = np.empty_like(theta), np.empty_like(theta)
        resid = np.zeros_like(theta) if onebit else np.empty(0, theta.dtype)
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        gr = local if grad_over_theta(X, idx, shape) else g  # over the pulled copy where it may: not read again
        lr, mom, aware = cfg_f[F_LR], cfg_f[F_MOM], cfg_i[C_STALE_AWARE] != 0
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while not out_of_budget(ctrl, cfg_i):
            t_s = A.now_ns()
            rv = A.load(ctrl, S_VERSION * LINE)
            wait = 0
            for s in range(S):  # pull
                lo, hi = s * d // S, (s + 1) * d // S
                ns = word_lock(locks, s * LINE, ctrl, cfg_i, cfg_f)  # no backoff: param_server has none
                if ns < 0:
                    return STOPPED_WAITING
                wait += ns
                local[lo:hi] = theta[lo:hi]
                lock_release(locks, s * LINE)
            t_r = A.now_ns()
            sample_batch(idx, cfg_i[C_NROWS])
            loss_and_grad(local, X, y, idx, gr, shape)
            straggle(slowdown, t_r)
            t_ge = A.now_ns()
            if onebit:
                quantize(gr, resid, gr)
            ver = 0
            for s in range(S):  # push, shard by shard
                lo, hi = s * d // S, (s + 1) * d // S
                ns = word_lock(locks, s * LINE, ctrl, cfg_i, cfg_f)  # no backoff: param_server has none
                if ns < 0:
                    return STOPPED_WAITING
                wait += ns
                cur = A.load(ctrl, S_VERSION * LINE)
                if s == 0 and cur >= cfg_i[C_MAXU]:  # the budget ran out while computing: not applied
                    lock_release(locks, s * LINE)
                    return OK
                step_range(theta, vel, gr, lr, mom, divisor(cur - rv, aware), lo, hi)
                if s == S - 1:
                    ver = A.fetch_add(ctrl, S_VERSION * LINE, 1) + 1
                    if snapshot_due(cfg_i, ctrl, ver):
                        take_snapshot(ctrl, cfg_i, ring, meta, ver, theta)
                lock_release(locks, s * LINE)
            if not record(ri, rf, nrec, ctrl, w, ver, rv, 0, True, t_s, t_r, t_r, t_ge, wait):
                return BUFFER_FULL
        return OK

    return run_param_server


run_param_server = _make()


def wire(r: Run) -> Wiring:
    """``wiring.IMPLEMENTATIONS``'s entry: one lock per shard, and whether gradients are sent 1-bit."""
    a = r.scenario.algorithm
    shards = max(1, min(int(a.param("shards")), r.theta.shape[0]))
    locks = np.zeros(shards * LINE, dtype=np.int64)
    onebit = bool(a.param("onebit"))
    return Wiring(r.loop, lambda w: (locks, onebit), lambda: r.theta)
