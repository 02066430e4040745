"""Asynchronous SGD through a parameter server on threads (definition: ``simasgd.algorithms``; model:
``simasgd/sim/algorithms/param_server.py``).

The server is the shared θ (and, with ``optimizer.momentum``, its velocity:
Async MSGD), cut into ``shards`` contiguous shards ``[s·d/S, (s+1)·d/S)``,
each with its own spin lock (``locks``, one cache line each). A worker's
cycle: pull — copy each shard under its lock; compute the gradient at the
copy; with ``onebit`` replace it by Q(g + e), keeping e
(:func:`simasgd.compression.quantize`); push — each shard under its lock,
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
from executors.cpu.loops import CODE_VERSION
from executors.cpu.shared import (BUFFER_FULL, C_BATCH, C_MAXU, C_NROWS, C_STALE_AWARE, F_LR, F_MOM, LINE, OK,
                                  S_VERSION, SPINS_BEFORE_YIELD, STOPPED_WAITING, out_of_budget, record, sample_batch,
                                  snapshot_due, spin_pause, stopped, straggle, take_snapshot, wait_go)
from simasgd import compression
from simasgd.compression import quantize
from simasgd.update_rule import divisor, step_range
from simasgd.workloads.kernels import loss_and_grad


@njit(nogil=True, cache=True)
def shard_lock(locks: np.ndarray, s: int, ctrl: np.ndarray) -> int:
    """Take shard ``s``'s lock (test-and-test-and-set); ns waited, -1 if the run stopped meanwhile."""
    at = s * LINE
    if A.cas(locks, at, 0, 1) == 0:
        return 0
    t0 = A.now_ns()
    spins = 0
    while True:
        while A.load_relaxed(locks, at) != 0:
            spins += 1
            spin_pause(spins)
            if spins % SPINS_BEFORE_YIELD == 0 and stopped(ctrl):
                return -1
        if A.cas(locks, at, 0, 1) == 0:
            return A.now_ns() - t0


@njit(nogil=True, cache=True)
def shard_unlock(locks: np.ndarray, s: int) -> None:
    A.store_release(locks, s * LINE, 0)


def _make(kernels_version: str = CODE_VERSION + compression.SOURCE_HASH) -> Any:
    """The loop, in a closure over the kernels', update rule's and compression's sources (its cache key)."""

    @njit(nogil=True, cache=True)
    def run_param_server(w, X, y, shape, theta, vel, ctrl, cfg_i, cfg_f, ri, rf, nrec, seed,  # noqa: ANN001
                         slowdown, ring, meta, locks, onebit):
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        np.random.seed(seed)
        d = theta.shape[0]
        S = locks.shape[0] // LINE
        local, g = np.empty_like(theta), np.empty_like(theta)
        resid = np.zeros_like(theta) if onebit else np.empty(0, theta.dtype)
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        lr, mom, aware = cfg_f[F_LR], cfg_f[F_MOM], cfg_i[C_STALE_AWARE] != 0
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while not out_of_budget(ctrl, cfg_i):
            t_s = A.now_ns()
            rv = A.load(ctrl, S_VERSION * LINE)
            wait = 0
            for s in range(S):  # pull
                lo, hi = s * d // S, (s + 1) * d // S
                ns = shard_lock(locks, s, ctrl)
                if ns < 0:
                    return STOPPED_WAITING
                wait += ns
                local[lo:hi] = theta[lo:hi]
                shard_unlock(locks, s)
            t_r = A.now_ns()
            sample_batch(idx, cfg_i[C_NROWS])
            loss_and_grad(local, X, y, idx, g, shape)
            straggle(slowdown, t_r)
            t_ge = A.now_ns()
            if onebit:
                quantize(g, resid, g)
            ver = 0
            for s in range(S):  # push, shard by shard
                lo, hi = s * d // S, (s + 1) * d // S
                ns = shard_lock(locks, s, ctrl)
                if ns < 0:
                    return STOPPED_WAITING
                wait += ns
                cur = A.load(ctrl, S_VERSION * LINE)
                if s == 0 and cur >= cfg_i[C_MAXU]:  # the budget ran out while computing: not applied
                    shard_unlock(locks, s)
                    return OK
                step_range(theta, vel, g, lr, mom, divisor(cur - rv, aware), lo, hi)
                if s == S - 1:
                    ver = A.fetch_add(ctrl, S_VERSION * LINE, 1) + 1
                    if snapshot_due(cfg_i, ctrl, ver):
                        take_snapshot(ctrl, cfg_i, ring, meta, ver, theta)
                shard_unlock(locks, s)
            if not record(ri, rf, nrec, ctrl, w, ver, rv, 0, True, t_s, t_r, t_r, t_ge, wait):
                return BUFFER_FULL
        return OK

    return run_param_server


run_param_server = _make()


def wire(r: Any) -> Any:
    """``wiring.TABLE``'s entry: one lock per shard, and whether gradients are sent 1-bit."""
    from executors.cpu.wiring import Wiring

    a = r.scenario.algorithm
    shards = max(1, min(int(a.param("shards")), r.theta.shape[0]))
    locks = np.zeros(shards * LINE, dtype=np.int64)
    onebit = bool(a.param("onebit"))
    return Wiring(r.loop, lambda w: (locks, onebit), lambda: r.theta)
