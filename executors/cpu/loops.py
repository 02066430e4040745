"""Worker loops: one nopython function per algorithm, run by one OS thread for the whole run.

Every loop has the same head — ``(w, X, y, shape, theta, vel, ctrl, cfg_i,
cfg_f, ri, rf, nrec, seed, slowdown, ring, meta)`` — and returns a code from
:mod:`executors.cpu.shared` (``OK``, ``STOPPED_WAITING``, ``BUFFER_FULL``).
The gradient is ``kernels.loss_and_grad`` called as a global, so no Python runs
between the read and the record and the loops load from numba's cache in every
process; they are built in a closure over :data:`CODE_VERSION` (the kernels'
and the update rule's source hashes) and a workload with its own kernel gets
an uncached copy (:mod:`executors.kernel`). Every update goes through
:mod:`simasgd.update_rule` (``shared.apply_update`` / ``seq_update``; HOGWILD! element-wise).

Version counting is the measuring instrument: every applied update does an
atomic fetch-add on ``ctrl[S_VERSION]`` — in HOGWILD! too — and records the
value it produced; ``read_version`` is the counter when the worker read θ.
Each record carries the cycle's phase boundaries in clock ns (``t_s`` cycle start,
``t_r`` the read version taken, ``t_gs``/``t_ge`` gradient start/end; the write
time is taken by ``record``): ``simasgd.phases`` turns them into phase times.
The worker that makes a version the loss ring keeps copies θ there right away
(inside the lock for the lock-based loops), so the loss is never taken on a
thread that competes with the workers (``shared.take_snapshot``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.shared import (
    BUFFER_FULL,
    C_BATCH,
    C_LOCAL_COPY,
    C_MAXU,
    C_NROWS,
    C_PROBES,
    C_RWLOCK,
    C_STALE_AWARE,
    C_SWEEP_ALTERNATE,
    C_WORKERS,
    F_LR,
    F_MOM,
    LINE,
    OK,
    S_DEADLINE,
    S_LOCK,
    S_ROUND_STOP,
    S_STOP,
    S_VERSION,
    STOPPED_WAITING,
    apply_update_mirrored,
    barrier,
    lock_acquire,
    lock_release,
    out_of_budget,
    read_acquire,
    read_copy,
    read_release,
    record,
    sample_batch,
    seq_update,
    snapshot_due,
    straggle,
    take_snapshot,
    wait_go,
    write_acquire,
    write_release,
)
from simasgd import compression, update_rule
from simasgd.compression import quantize
from simasgd.memops import copy_into
from simasgd.update_rule import divisor, heavy_ball_range, plain_range, step_mirrored, sweeps_down
from simasgd.workloads.kernels import SOURCE_HASH, grad_over_theta, loss_and_grad

# The loops' numba cache key: the kernels' source and the update rule's (a cached caller is not
# recompiled when a callee's file changes; closure values are part of the key).
CODE_VERSION = SOURCE_HASH + update_rule.SOURCE_HASH + compression.SOURCE_HASH  # sync's 1-bit quantiser too

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


def _make(kernels_version: str = CODE_VERSION) -> tuple[Any, ...]:
    """The loops, in a closure over :data:`CODE_VERSION` (see :mod:`executors.kernel`)."""

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
        (:func:`simasgd.compression.quantize`)."""
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

    return run_sequential, run_locked, run_hogwild, run_sync


run_sequential, run_locked, run_hogwild, run_sync = _make()
