"""Workers with states of their own on real threads: SimuParallelSGD and Keuper & Pfreundt's ASGD.

One loop, ``run_own``, for both (the meaning: ``simasgd/sim/algorithms/decentral.py``'s
docstring, :mod:`simasgd.numerics.parzen`). Worker w steps ``states[w]`` (its own
velocity ``vels[w]``) with gradients on minibatches of its shard; Keuper
(``params[P_EXCHANGE] > 0``): after every ``exchange_every`` steps it copies
its state into a random other node's inbox (a spin lock per inbox: message
passing at shared-memory cost), and each step merges the latest state
received since its previous step (:func:`simasgd.numerics.parzen.merge_step`).

Every step takes the next global version with a CAS (never past the
budget), then steps; ``done`` counts finished steps, so the worker that
keeps version v for the loss ring waits until v steps have landed and
copies the result then (node 0's state, or the mean of the states for
SimuParallel): the snapshot at the budget is exactly the run's result.
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
    C_CAP,
    C_MAXU,
    C_NROWS,
    C_STALE_AWARE,
    C_WORKERS,
    F_LR,
    F_MOM,
    LINE,
    OK,
    S_VERSION,
    SPINS_BEFORE_YIELD,
    STOPPED_WAITING,
    aborted,
    out_of_budget,
    record,
    snapshot_due,
    spin_pause,
    straggle,
    take_snapshot,
    wait_go,
)
from simasgd.numerics import parzen
from simasgd.numerics.memops import copy_into
from simasgd.numerics.parzen import merge_step
from simasgd.numerics.workloads.kernels import loss_and_grad

P_EXCHANGE, P_MEAN = 0, 1      # params: steps between sends (0: none), result = mean of the states (else node 0)
M_ACCEPTED, M_REFUSED, M_DONE = 0, 1, 2  # counters (each on its own line)


@njit(nogil=True, cache=True)
def inbox_lock(locks: np.ndarray, j: int) -> None:
    spins = 0
    while A.cas(locks, j * LINE, 0, 1) != 0:
        spins += 1
        spin_pause(spins)


@njit(nogil=True, cache=True)
def result_into(out: np.ndarray, states: np.ndarray, mean: bool) -> None:
    if not mean:
        out[:] = states[0]
        return
    out[:] = states[0]
    for j in range(1, states.shape[0]):
        out += states[j]
    out /= states.shape[0]


def _make(kernels_version: str = CODE_VERSION + parzen.SOURCE_HASH) -> Any:
    """The loop, in a closure over ``loops.CODE_VERSION`` and the merge's source (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def run_own(w: int, X: np.ndarray, y: np.ndarray, shape: np.ndarray, theta: np.ndarray, vel: np.ndarray,
                ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, ri: np.ndarray, rf: np.ndarray,
                nrec: np.ndarray, seed: np.ndarray, slowdown: float,
                ring: np.ndarray, meta: np.ndarray, states: np.ndarray, vels: np.ndarray, shard: np.ndarray,
                inbox: np.ndarray, received: np.ndarray, locks: np.ndarray, counts: np.ndarray, params: np.ndarray,
                dist: np.ndarray) -> int:
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        np.random.seed(seed)
        n = cfg_i[C_WORKERS]
        lr, mom, aware = cfg_f[F_LR], cfg_f[F_MOM], cfg_i[C_STALE_AWARE] != 0
        exchange, mean = params[P_EXCHANGE] if n > 1 else 0, params[P_MEAN] != 0
        mine, my_vel = states[w], vels[w]
        g, peer, out = np.empty_like(theta), np.empty_like(theta), np.empty_like(theta)
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        seen, steps = 0, 0
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while not out_of_budget(ctrl, cfg_i):
            t_s = A.now_ns()
            for i in range(idx.shape[0]):
                idx[i] = shard[np.random.randint(0, shard.shape[0])] if shard.shape[0] else \
                    np.random.randint(0, cfg_i[C_NROWS])
            loss_and_grad(mine, X, y, idx, g, shape)
            straggle(slowdown, t_s)
            t_ge = A.now_ns()
            cur = A.load(ctrl, S_VERSION * LINE)
            while cur < cfg_i[C_MAXU]:  # take the next version, never past the budget
                got = A.cas(ctrl, S_VERSION * LINE, cur, cur + 1)
                if got == cur:
                    break
                cur = got
            if cur >= cfg_i[C_MAXU]:
                break
            v = cur + 1
            has = False
            if exchange > 0 and A.load_acquire(received, w * LINE) != seen:
                inbox_lock(locks, w)
                copy_into(peer, inbox[w])
                seen = received[w * LINE]
                A.store_release(locks, w * LINE, 0)
                has = True
            if has:  # the row's distance: to the state merged or refused (curve.parquet's spread)
                gap = 0.0
                for i in range(mine.shape[0]):
                    gap += (mine[i] - peer[i]) ** 2
                k = nrec[w * LINE]
                if k < dist.shape[1]:
                    dist[w, k] = np.sqrt(gap)
            accepted = merge_step(mine, my_vel, g, peer, has, lr, mom, aware)
            if has:
                A.fetch_add(counts, (M_ACCEPTED if accepted else M_REFUSED) * LINE, 1)
            A.fetch_add(counts, M_DONE * LINE, 1)
            if snapshot_due(cfg_i, ctrl, v):
                spins = 0
                while A.load_acquire(counts, M_DONE * LINE) < v:  # the steps of versions < v still landing
                    spins += 1
                    spin_pause(spins)
                    if spins % SPINS_BEFORE_YIELD == 0 and aborted(ctrl):
                        return STOPPED_WAITING
                result_into(out, states, mean)
                take_snapshot(ctrl, cfg_i, ring, meta, v, out)
            if not record(ri, rf, nrec, ctrl, w, v, v - 1, 0, True, t_s, t_s, t_s, t_ge, 0):
                return BUFFER_FULL
            steps += 1
            if exchange > 0 and steps % exchange == 0:
                j = np.random.randint(0, n - 1)
                if j >= w:
                    j += 1  # a random node other than w
                inbox_lock(locks, j)
                copy_into(inbox[j], mine)
                A.store_release(received, j * LINE, received[j * LINE] + 1)
                A.store_release(locks, j * LINE, 0)
        return OK

    return run_own


run_own = _make()


def wire_own(r: Run) -> Wiring:
    """The arrays of ``run_own`` (``wiring.IMPLEMENTATIONS``): states, velocities, shards, inboxes, counters."""
    from simasgd.spec import algorithms

    a, n, d = r.scenario.algorithm, r.workers, r.theta.shape[0]
    keuper = a.name == "keuper"
    states = np.repeat(r.theta[None, :], n, axis=0)
    vels = np.zeros((n, d if r.cfg_f[F_MOM] > 0.0 else 0), dtype=r.theta.dtype)
    if a.param("partition") and r.n_rows:
        shards = [np.ascontiguousarray(s, dtype=np.int64) for s in algorithms.partition(r.n_rows, n, r.scenario.seed)]
    else:
        shards = [np.zeros(0, dtype=np.int64)] * n
    inbox = np.zeros((n, d if keuper else 0), dtype=r.theta.dtype)
    received, locks = np.zeros(n * LINE, dtype=np.int64), np.zeros(n * LINE, dtype=np.int64)
    counts = np.zeros(3 * LINE, dtype=np.int64)
    params = np.array([a.param("exchange_every") if keuper else 0, 0 if keuper else 1], dtype=np.int64)
    out = np.empty_like(r.theta)
    held: dict[str, np.ndarray] = {}

    def dist() -> np.ndarray:  # sized once the runner knows the record capacity; NaN: no state received
        if "dist" not in held:
            held["dist"] = np.full((n, int(r.cfg_i[C_CAP]) if keuper else 0), np.nan)
        return held["dist"]

    def final() -> np.ndarray:
        result_into(out, states, not keuper)
        return out

    def extra(applied: int) -> dict[str, Any]:
        if not keuper:
            return {}
        return {"merges_accepted": int(counts[M_ACCEPTED * LINE]), "merges_refused": int(counts[M_REFUSED * LINE])}

    return Wiring(r.loop, lambda w: (states, vels, shards[w], inbox, received, locks, counts, params, dist()), final,
                  extra, row_columns=lambda w, k: {"distance": dist()[w, :k]} if keuper else {})
