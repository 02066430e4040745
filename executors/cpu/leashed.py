"""Leashed-SGD (Bäckström et al. 2021): a pool of parameter vectors and a CAS on the latest one.

Published vectors are immutable. A worker takes a reader reference on the
latest vector (its reader count), computes its gradient directly on it, then
builds the next vector in a private one it owns: θ_latest − η·g in one pass
(``update_into``: reads the latest, holding a reference on it, writes its own),
and CAS the index of the latest vector from the one it read to its own. A failed
CAS is retried (build again from the new latest) up to ``persistence`` times; past that the update is
dropped and recorded ``applied = false``. The replaced vector is marked stale
and is recycled once its reader count is zero. A lone worker (its CAS cannot
fail) claims its vector before the gradient and computes g into it: two
model-sized vectors in its cycle, as sequential SGD has, not three (one model-sized vector
less in the cache makes its pass faster: benchmarks/README_cpu.md, design measurements).

Per vector ``p`` (each word on its own cache line, index ``p * LINE``):
``rc`` reader count (``CLAIMED`` + pending readers while a writer owns it),
``stale`` (1 = not the latest: free once ``rc == 0``), ``ver`` its version.
The reference taken on the copied vector lasts until after the CAS, so its
index cannot be recycled and republished under the CAS (no ABA).

Bound: each worker holds at most one private vector and two references, and
there is one latest: at most ``2·workers + 1`` vectors are ever in use; the
pool has ``pool_size(workers)`` slots and never grows. ``S_EXHAUSTED`` counts
scans that found no free vector (expected: 0).
"""

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
    C_PERSIST,
    C_WORKERS,
    CLAIMED,
    LINE,
    OK,
    S_EXHAUSTED,
    S_LATEST,
    S_VERSION,
    STOPPED_WAITING,
    backoff,
    out_of_budget,
    record,
    sample_batch,
    snapshot_due,
    spin_pause,
    stopped,
    straggle,
    take_snapshot,
    update_into,
    wait_go,
)
from simasgd.workloads.kernels import loss_and_grad


def pool_size(workers: int) -> int:
    return 2 * workers + 1


@njit(nogil=True, cache=True)
def acquire_latest(ctrl: np.ndarray, rc: np.ndarray) -> int:
    """A reader reference on the latest vector: count in, then check it is still the latest."""
    while True:
        p = A.load(ctrl, S_LATEST * LINE)
        A.fetch_add(rc, p * LINE, 1)
        if A.load(ctrl, S_LATEST * LINE) == p:
            return p
        A.fetch_add(rc, p * LINE, -1)


@njit(nogil=True, cache=True)
def release(rc: np.ndarray, p: int) -> None:
    A.fetch_add(rc, p * LINE, -1)


@njit(nogil=True, cache=True)
def claim(ctrl: np.ndarray, rc: np.ndarray, stale: np.ndarray, peak: np.ndarray) -> int:
    """Own a free vector (stale, unread), lowest index first; -1 if the run stopped first."""
    n = stale.shape[0] // LINE
    spins = 0
    while True:
        for p in range(n):
            if A.load(stale, p * LINE) == 1 and A.load(rc, p * LINE) == 0:  # noqa: SIM102 - check, claim, re-check
                if A.cas(rc, p * LINE, 0, CLAIMED) == 0:
                    if A.load(stale, p * LINE) == 1:  # not republished between the check and the claim
                        if p + 1 > peak[0]:
                            peak[0] = p + 1
                        return p
                    A.fetch_add(rc, p * LINE, -CLAIMED)
        A.fetch_add(ctrl, S_EXHAUSTED * LINE, 1)
        spins += 1
        spin_pause(spins)
        if stopped(ctrl):
            return -1


def _make(kernels_version: str = CODE_VERSION) -> Any:
    """The worker loop, in a closure over ``loops.CODE_VERSION`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def run_leashed(w: int, X: np.ndarray, y: np.ndarray, shape: np.ndarray, theta: np.ndarray, vel: np.ndarray,
                    ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, ri: np.ndarray, rf: np.ndarray,
                    nrec: np.ndarray, seed: np.ndarray, slowdown: float,
                    ring: np.ndarray, meta: np.ndarray, pool: np.ndarray, vpool: np.ndarray, rc: np.ndarray,
                    stale: np.ndarray, ver: np.ndarray, peak: np.ndarray) -> int:
        """One Leashed-SGD worker. ``theta``/``vel`` are unused (the state lives in ``pool``/``vpool``)."""
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        np.random.seed(seed)
        # A lone worker's CAS cannot fail (no other writer), so its gradient needs no keeping for a
        # retry: it is computed into the vector it will publish, and the pass builds θ_latest − η·g over
        # it. Two model-sized vectors in the cycle, as sequential SGD has, instead of three (and no g).
        lone = cfg_i[C_WORKERS] == 1
        g = np.empty(0 if lone else pool.shape[1], dtype=pool.dtype)
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        persistence = cfg_i[C_PERSIST]  # -1: unbounded
        mine = -1
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while not out_of_budget(ctrl, cfg_i):
            t_s = A.now_ns()
            if lone and mine < 0:  # in the read phase, as a read: the vector the gradient goes into
                mine = claim(ctrl, rc, stale, peak)
                if mine < 0:
                    return STOPPED_WAITING
            pr = acquire_latest(ctrl, rc)
            rv = ver[pr * LINE]
            t_r = A.now_ns()
            sample_batch(idx, cfg_i[C_NROWS])
            gv = pool[mine] if lone else g
            loss_and_grad(pool[pr], X, y, idx, gv, shape)
            release(rc, pr)
            straggle(slowdown, t_r)
            t_ge = A.now_ns()
            if mine < 0:
                mine = claim(ctrl, rc, stale, peak)
                if mine < 0:
                    return STOPPED_WAITING
            retries, applied, v = 0, False, 0
            while True:
                base = acquire_latest(ctrl, rc)
                cur = ver[base * LINE]
                if cur >= cfg_i[C_MAXU]:  # the budget ran out while computing: cut off, not applied
                    release(rc, base)
                    return OK
                # θ_latest − η·g built in the private vector in one pass (no copy, then step)
                update_into(pool[mine], vpool[mine], pool[base], vpool[base], gv, cfg_i, cfg_f, cur - rv)
                ver[mine * LINE] = cur + 1
                A.store(stale, mine * LINE, 0)
                if A.cas(ctrl, S_LATEST * LINE, base, mine) == base:
                    snap = snapshot_due(cfg_i, ctrl, cur + 1)
                    # now a normal vector, counting its readers (this one too, while it copies θ for the loss)
                    A.fetch_add(rc, mine * LINE, -CLAIMED + (1 if snap else 0))
                    A.store(stale, base * LINE, 1)
                    release(rc, base)
                    A.fetch_add(ctrl, S_VERSION * LINE, 1)
                    if snap:
                        take_snapshot(ctrl, cfg_i, ring, meta, cur + 1, pool[mine])
                        release(rc, mine)
                    applied, v, mine = True, cur + 1, -1
                    break
                release(rc, base)
                retries += 1
                if persistence >= 0 and retries > persistence:
                    v = ver[A.load(ctrl, S_LATEST * LINE) * LINE] + 1  # the version it would have had
                    break
                if stopped(ctrl):  # the run ended mid-retry: the attempt is cut off, not dropped
                    return OK
                backoff(cfg_i, cfg_f, retries)
            if not record(ri, rf, nrec, ctrl, w, v, rv, retries, applied, t_s, t_r, t_r, t_ge, 0):
                return BUFFER_FULL
        return OK

    return run_leashed


run_leashed = _make()
