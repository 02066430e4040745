"""The lock-free algorithms: HOGWILD! (``hogwild``: element-wise racy writes, :func:`run_hogwild`) and
Leashed-SGD (``leashed``: :func:`run_leashed`).

Leashed-SGD (Bäckström et al. 2021): a pool of parameter vectors and a CAS on the latest one.

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
scans that found no free vector (expected: 0)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.loops import CODE_VERSION
from executors.cpu.shared import (
    BUFFER_FULL,
    C_BATCH,
    C_LOCAL_COPY,
    C_MAXU,
    C_NROWS,
    C_PERSIST,
    C_PROBES,
    C_STALE_AWARE,
    C_SWEEP_ALTERNATE,
    C_WORKERS,
    CLAIMED,
    F_LR,
    F_MOM,
    LINE,
    OK,
    S_EXHAUSTED,
    S_LATEST,
    S_VERSION,
    STOPPED_WAITING,
    backoff,
    out_of_budget,
    read_copy,
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
from simasgd.numerics import update_rule
from simasgd.numerics.update_rule import divisor, heavy_ball_range, plain_range, step_mirrored, sweeps_down
from simasgd.numerics.workloads.kernels import grad_over_theta, loss_and_grad

SWEEP_BLOCK = 1024    # HOGWILD!'s downward sweep: elements a block, each block written upwards (8 KB of float64)
HOGWILD_CHUNK = 8     # with probes on: elements per probed chunk (one cache line of float64), a barrier after each


def n_probes(dim: int) -> int:
    """HOGWILD! lost-update probes: one per chunk, each bumped with the chunk's racy read-modify-write."""
    return (dim + HOGWILD_CHUNK - 1) // HOGWILD_CHUNK


@njit(nogil=True, cache=True, inline="always")
def bump_probe(canary: np.ndarray, c: int) -> None:
    """The chunk's probe gets +1 with a read-modify-write as wide as the chunk's, right after it: it
    loses an update when the chunk would (a concurrent writer in the same place, or this thread
    preempted inside the window), so the probes estimate θ's losses without knowing the gradient
    (wiring._hogwild). An estimate: each probe is a separate sample."""
    canary[c] = canary[c] + 1.0
    A.compiler_barrier()


def _make_hogwild_step(rule_version: str = update_rule.SOURCE_HASH) -> Any:
    """:func:`hogwild_step`, in a closure over ``update_rule.SOURCE_HASH`` (its cache follows that file)."""

    @njit(nogil=True, cache=True)
    def hogwild_step(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, lr: float, mom: float, div: float,
                     canary: np.ndarray, probes: bool, down: bool = False) -> None:
        """Unsynchronised θ update: the update rule (``update_rule``'s element-wise forms, gradient
        divided by ``div``) as one vectorised loop over θ, as C's ``theta[i] -= lr * g[i]`` compiles:
        each element is its own load-modify-store, so concurrent writers overwrite each other element
        by element as on real hardware. (A compiler barrier after every cache line would make it
        several times slower and race no differently: the loop is far too long for LLVM to keep θ in
        registers across iterations.)

        ``probes`` (``[cpu] hogwild_probes``, off by default) writes cache line by cache line and bumps
        one shared probe per chunk after it. Their cost: the probes pack 8 chunks to a cache line
        that every writer writes in the same order, so two concurrent updates ping-pong probe lines;
        once the two threads' updates overlap they stay overlapping, each update dozens of times
        slower: runs fall into a fast or a slow mode at random. Without probes runs are not bimodal.

        ``down``: the same writes block by block from the top of θ (:data:`SWEEP_BLOCK` elements a block,
        each block written upwards). Odd-numbered workers sweep down (``run_hogwild``, ``[algorithm] sweep =
        "alternate"``, the default): two updates that
        overlap then meet once in the middle. Swept the same way, the later one follows the earlier
        line by line, taking each line as the other has just written it: such pairs stay together for
        the rest of the run, each update many times slower (convoys).
        The element-wise arithmetic is the same in either direction (a test holds it bit for bit)."""
        if len(rule_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return
        d = theta.shape[0]
        if down and not probes:
            # each block a view swept from 0: a range from a variable lo kept LLVM from vectorising (numba's
            # negative-index wrap-around)
            hi = d
            while hi > 0:
                lo = max(hi - SWEEP_BLOCK, 0)
                if mom > 0.0:
                    heavy_ball_range(theta[lo:hi], vel[lo:hi], g[lo:hi], lr, mom, div, 0, hi - lo)
                else:
                    plain_range(theta[lo:hi], g[lo:hi], lr, div, 0, hi - lo)
                hi = lo
            return
        if not probes:
            if mom > 0.0:
                heavy_ball_range(theta, vel, g, lr, mom, div, 0, d)
            else:
                plain_range(theta, g, lr, div, 0, d)
            return
        n_chunks = (d + HOGWILD_CHUNK - 1) // HOGWILD_CHUNK
        # The form of the rule is chosen once, outside the chunk loop (a choice inside it keeps LLVM from
        # vectorising the chunks); a full chunk has a constant trip count.
        if mom > 0.0:
            for c in range(n_chunks):
                lo = c * HOGWILD_CHUNK
                if lo + HOGWILD_CHUNK <= d:
                    heavy_ball_range(theta, vel, g, lr, mom, div, lo, lo + HOGWILD_CHUNK)
                else:
                    heavy_ball_range(theta, vel, g, lr, mom, div, lo, d)
                A.compiler_barrier()
                bump_probe(canary, c)
        else:
            for c in range(n_chunks):
                lo = c * HOGWILD_CHUNK
                if lo + HOGWILD_CHUNK <= d:
                    plain_range(theta, g, lr, div, lo, lo + HOGWILD_CHUNK)
                else:
                    plain_range(theta, g, lr, div, lo, d)
                A.compiler_barrier()
                bump_probe(canary, c)

    return hogwild_step


hogwild_step = _make_hogwild_step()


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



def _make(kernels_version: str = CODE_VERSION) -> tuple[Any, Any]:
    """The loops, in a closure over ``loops.CODE_VERSION`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def run_hogwild(w: int, X: np.ndarray, y: np.ndarray, shape: np.ndarray, theta: np.ndarray, vel: np.ndarray,
                    ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, ri: np.ndarray, rf: np.ndarray,
                    nrec: np.ndarray, seed: np.ndarray, slowdown: float,
                    ring: np.ndarray, meta: np.ndarray, canary: np.ndarray) -> int:
        """HOGWILD!: element-wise writes with no synchronisation; the gradient at a local copy of θ
        taken element by element while others write (Ek 2021 §3.1, ``local_copy``) or at the live θ."""
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        np.random.seed(seed)
        g = np.empty_like(theta)
        local = cfg_i[C_LOCAL_COPY] != 0
        down = sweeps_down(cfg_i[C_SWEEP_ALTERNATE] != 0, w)
        own = np.empty_like(theta) if local else theta[:0]
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        gr = own if local and grad_over_theta(X, idx, shape) else g  # over the copy where it may: not read again
        probes = cfg_i[C_PROBES] != 0
        aware = cfg_i[C_STALE_AWARE] != 0
        # Alone in the run, a worker's copy is θ after its own update: the update leaves the new θ in the copy
        # too, and no read after the first copies. Not with two or more: a read skipped when no update began
        # since one's own pulled the workers into convoys (the earlier of two updates pays the copy, the
        # later not, so the later catches up), fewer updates/s at 2 threads.
        keep = local and not probes and cfg_i[C_WORKERS] == 1
        held = False  # the copy holds θ
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while not out_of_budget(ctrl, cfg_i):
            t_s = A.now_ns()
            rv = A.load(ctrl, S_VERSION * LINE)
            sample_batch(idx, cfg_i[C_NROWS])
            if local:
                # component-wise, racing with the writers: x86 loads each aligned element whole while the
                # copy as a whole may mix versions (a copy chunked by cache line with a compiler barrier
                # between chunks costs HOGWILD! much of its one-thread rate)
                read_copy(ctrl, own, theta, held)
                t_r = A.now_ns()
                loss_and_grad(own, X, y, idx, gr, shape)
            else:
                t_r = t_s
                loss_and_grad(theta, X, y, idx, g, shape)
            straggle(slowdown, t_s)
            t_ge = A.now_ns()
            cur = A.load(ctrl, S_VERSION * LINE)
            div = divisor(cur - rv, aware)
            if keep:  # the same element-wise writes, the new θ left in the copy too
                step_mirrored(theta, vel, gr, own, cfg_f[F_LR], cfg_f[F_MOM], div)
                held = True
            else:
                hogwild_step(theta, vel, gr, cfg_f[F_LR], cfg_f[F_MOM], div, canary, probes, down)
            v = A.fetch_add(ctrl, S_VERSION * LINE, 1) + 1
            if snapshot_due(cfg_i, ctrl, v):
                take_snapshot(ctrl, cfg_i, ring, meta, v, theta)  # as torn as the workers' own reads
            if not record(ri, rf, nrec, ctrl, w, v, rv, 0, True, t_s, t_r, t_r, t_ge, 0):
                return BUFFER_FULL
        return OK

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


    return run_hogwild, run_leashed


run_hogwild, run_leashed = _make()
