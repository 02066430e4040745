"""Synchronisation with a bound on real threads: SSP (Ho et al. 2013) and backup workers (Chen et al. 2016).

``run_ssp``: the mutex loop (lock to copy θ, compute, lock to update) behind
a clock gate: ``clocks[w·LINE]`` counts worker w's finished iterations; it
starts another only while its clock − the slowest's ≤ s (``bound[0]``),
spinning (``sched_yield`` every few spins) otherwise. The clock moves after
the update is applied, so a read after the gate holds every worker's first
c − s updates.

``run_backup``: rounds of N + b workers on the same θ. A worker that finishes
its gradient takes a place (fetch-add on ``arrive``): the first N deposit
theirs, the N-th applies their mean (one update, one version) and closes the
round; the others' gradients are discarded (dropped rows with the round's
version). A worker still computing when the round closes is cancelled where
it can be — a straggler's extra time is a wait (``straggle``) that ends when
the round closes; a gradient kernel already running finishes first and its
result is discarded. Then two barriers, as in ``sync``: every worker has
taken its place before the counter is reset and worker 0 decides whether to
go on, so every round has exactly N applied and b dropped rows. A round's
read version is counted, not loaded: a descheduled worker may begin reading
after the round already closed (then its gradient is among the discarded).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.entry import Run, Wiring, elided
from executors.cpu.locks import lock_in, lock_out
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
    SPINS_BEFORE_YIELD,
    STOPPED_WAITING,
    apply_update_mirrored,
    barrier,
    out_of_budget,
    read_copy,
    record,
    sample_batch,
    seq_update,
    snapshot_due,
    spin_pause,
    straggle,
    take_snapshot,
    wait_go,
)
from simasgd.numerics import compression
from simasgd.numerics.memops import copy_into
from simasgd.numerics.workloads.kernels import grad_over_theta, loss_and_grad

ARRIVE = 0  # arrive[ARRIVE]: places taken in the current round


@njit(nogil=True, cache=True)
def slowest(clocks: np.ndarray, n: int) -> int:
    m = A.load(clocks, 0)
    for j in range(1, n):
        c = A.load(clocks, j * LINE)
        if c < m:
            m = c
    return m


@njit(nogil=True, cache=True)
def gate(clocks: np.ndarray, w: int, n: int, bound: int, ctrl: np.ndarray, cfg_i: np.ndarray) -> bool:
    """Spin while worker ``w`` is more than ``bound`` clocks ahead of the slowest; False if the run ended."""
    mine = clocks[w * LINE]
    spins = 0
    while mine - slowest(clocks, n) > bound:
        spins += 1
        spin_pause(spins)
        if spins % SPINS_BEFORE_YIELD == 0 and out_of_budget(ctrl, cfg_i):
            return False
    return True


@njit(nogil=True, cache=True)
def straggle_until(slowdown: float, t_start: int, arrive: np.ndarray, n_used: np.ndarray) -> None:
    """A straggler's extra time (``shared.straggle``), cut short when the round has its N gradients."""
    if slowdown <= 1.0:
        return
    now = A.now_ns()
    until = now + int((slowdown - 1.0) * (now - t_start))
    spins = 0
    while A.now_ns() < until and A.load_relaxed(arrive, ARRIVE) < n_used:
        spins += 1
        spin_pause(spins)


def _make(kernels_version: str = CODE_VERSION + compression.SOURCE_HASH) -> tuple[Any, Any]:
    """The loops, in a closure over ``loops.CODE_VERSION`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def run_ssp(w: int, X: np.ndarray, y: np.ndarray, shape: np.ndarray, theta: np.ndarray, vel: np.ndarray,
                ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, ri: np.ndarray, rf: np.ndarray,
                nrec: np.ndarray, seed: np.ndarray, slowdown: float,
                ring: np.ndarray, meta: np.ndarray, clocks: np.ndarray, bound: np.ndarray) -> int:
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        np.random.seed(seed)
        n = cfg_i[C_WORKERS]
        local, g = np.empty_like(theta), np.empty_like(theta)
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        gr = local if grad_over_theta(X, idx, shape) else g  # over the copy where it may: not read again
        mine = -1  # the version this worker's last update made: its copy of θ holds it (mirrored)
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while not out_of_budget(ctrl, cfg_i):
            t_s = A.now_ns()
            if not gate(clocks, w, n, bound[0], ctrl, cfg_i):
                break
            wait = lock_in(ctrl, cfg_i, cfg_f, False, True)
            if wait < 0:
                return STOPPED_WAITING
            rv = A.load(ctrl, S_VERSION * LINE)
            read_copy(ctrl, local, theta, rv == mine)  # θ still at this worker's version: its copy is θ
            lock_out(ctrl, False, True)
            t_r = A.now_ns()
            sample_batch(idx, cfg_i[C_NROWS])
            loss_and_grad(local, X, y, idx, gr, shape)
            straggle(slowdown, t_r)
            t_ge = A.now_ns()
            wait2 = lock_in(ctrl, cfg_i, cfg_f, False, False)
            if wait2 < 0:
                return STOPPED_WAITING
            cur = A.load(ctrl, S_VERSION * LINE)
            if cur >= cfg_i[C_MAXU]:  # the budget ran out while computing: the gradient is not applied
                lock_out(ctrl, False, False)
                break
            apply_update_mirrored(theta, vel, gr, local, cfg_i, cfg_f, cur - rv)  # the new θ into the copy too
            v = A.fetch_add(ctrl, S_VERSION * LINE, 1) + 1
            mine = v
            if snapshot_due(cfg_i, ctrl, v):
                take_snapshot(ctrl, cfg_i, ring, meta, v, theta)
            lock_out(ctrl, False, False)
            A.fetch_add(clocks, w * LINE, 1)  # the iteration is done: a clock moves after its update
            if not record(ri, rf, nrec, ctrl, w, v, rv, 0, True, t_s, t_r, t_r, t_ge, wait + wait2):
                return BUFFER_FULL
        return OK

    @njit(nogil=True, cache=True)
    def run_backup(w: int, X: np.ndarray, y: np.ndarray, shape: np.ndarray, theta: np.ndarray, vel: np.ndarray,
                   ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, ri: np.ndarray, rf: np.ndarray,
                   nrec: np.ndarray, seed: np.ndarray, slowdown: float,
                   ring: np.ndarray, meta: np.ndarray, grads: np.ndarray, arrive: np.ndarray, order: np.ndarray,
                   n_used: np.ndarray, residual: np.ndarray) -> int:
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        np.random.seed(seed)
        n, k = cfg_i[C_WORKERS], n_used[0]
        onebit = residual.shape[1] > 0
        mine = grads[w]
        mean = np.empty_like(theta)
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        sense = 0
        # The round's θ is version rv (one update a round, from version 0). Counted here, never loaded:
        # a worker that starts late (its thread, or a round, after a descheduling) may begin reading
        # after N others already closed the round; its gradient is then among the discarded.
        rv = 0
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while True:
            t_s = A.now_ns()
            sample_batch(idx, cfg_i[C_NROWS])
            loss_and_grad(theta, X, y, idx, mine, shape)
            straggle_until(slowdown, t_s, arrive, k)
            t_ge = A.now_ns()
            place = A.fetch_add(arrive, ARRIVE, 1)
            used = place < k  # one of the first N
            if used:
                if onebit:  # what the worker sends: Q(g + e), its error kept for its next gradient
                    compression.quantize(mine, residual[w], mine)
                A.store_release(order, place, w)
                if place == k - 1:  # the N-th: the round's update, from the first N gradients
                    for i in range(k):
                        while A.load_acquire(order, i) < 0:
                            A.cpu_relax()
                    copy_into(mean, grads[A.load(order, 0)])
                    for i in range(1, k):
                        mean += grads[A.load(order, i)]
                    mean /= k
                    seq_update(theta, vel, mean, cfg_i, cfg_f, ctrl, ring, meta)
            sense = barrier(ctrl, n, sense)
            if sense < 0:
                return STOPPED_WAITING
            wait = A.now_ns() - t_ge
            if w == 0:
                A.store(arrive, ARRIVE, 0)
                for i in range(k):
                    order[i] = -1
                v = A.load(ctrl, S_VERSION * LINE)
                full = nrec[w * LINE] + 1 >= ri.shape[1]
                done = full or A.load(ctrl, S_STOP * LINE) != 0 or v >= cfg_i[C_MAXU] \
                    or A.now_ns() >= ctrl[S_DEADLINE * LINE]
                A.store(ctrl, S_ROUND_STOP * LINE, 1 if done else 0)
            sense = barrier(ctrl, n, sense)
            if sense < 0:
                return STOPPED_WAITING
            # the round's version; a discarded gradient carries it too (the version it would have had)
            room = record(ri, rf, nrec, ctrl, w, rv + 1, rv, 0, used, t_s, t_s, t_s, t_ge, wait)
            rv += 1
            if A.load(ctrl, S_ROUND_STOP * LINE) != 0:
                return OK if room else BUFFER_FULL
        return OK

    return run_ssp, run_backup


run_ssp, run_backup = _make()


def wire_ssp(r: Run) -> Wiring:
    """``run_ssp``'s arrays (``wiring.IMPLEMENTATIONS``): the clocks, each on its own cache line, and the bound s."""
    clocks = np.zeros(r.workers * LINE, dtype=np.int64)
    bound = np.array([r.scenario.algorithm.param("bound")], dtype=np.int64)
    return Wiring(r.loop, lambda w: (clocks, bound), lambda: r.theta, lambda applied: elided(r.ctrl))


def wire_backup(r: Run) -> Wiring:
    """``run_backup``'s arrays: a gradient per worker, the round's places and order, N, the 1-bit residuals."""
    a, n, d = r.scenario.algorithm, r.workers, r.theta.shape[0]
    grads = np.zeros((n, d), dtype=r.theta.dtype)
    arrive = np.zeros(LINE, dtype=np.int64)
    order = np.full(n, -1, dtype=np.int64)
    n_used = np.array([max(1, n - a.param("backup"))], dtype=np.int64)  # the warm-up runs one worker
    onebit = "onebit" in _param_names(a.name) and bool(a.param("onebit"))
    residual = np.zeros((n, d if onebit else 0), dtype=r.theta.dtype)
    return Wiring(r.loop, lambda w: (grads, arrive, order, n_used, residual), lambda: r.theta,
                  extra=lambda applied: {"discarded_per_round": n - int(n_used[0])})


def _param_names(name: str) -> tuple[str, ...]:
    from simasgd.spec import algorithms

    return algorithms.ALGORITHMS[name].param_names
