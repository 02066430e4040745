"""``[contention]``: a step on one shared θ while k cores work on it (k = 1, 2, 4, … up to the CPUs).

``[coherence]`` times a step on lines one other core wrote; with more cores on θ a step costs more (a 16-core
guest: HOGWILD!'s update 40 µs alone, 261 µs with 16 writers; mutex's copy-and-update 74 µs at 2 threads,
250 µs from 4, benchmarks/fidelity.md). Two loops, k threads pinned one a CPU, no gradient between passes:

- ``update``: every thread applies θ -= lr·g to the shared θ, pass after pass (HOGWILD!'s write, k writers);
- ``locked``: every thread takes the executors' TTAS lock (``executors.cpu.shared.word_lock``, a pause a
  retry), copies θ into its own buffer, applies θ -= lr·g, releases (mutex's two steps back to back, k − 1
  threads spinning); the lock's hold, acquired to released, is timed, and the passes a second counted.

Every timed loop is a nogil numba function on the executor's clock. Format: docs/profile.md.

:func:`beside` (``benchmarks/contention.py --beside``, not part of the profile) times the same two steps with
gradients computed beside them: k threads pinned one a CPU, each computing real gradients of an MLP (the
many-core entry's 64-256-256-10 at B = 16 on digits: the workloads' ``kernels.loss_and_grad``, the cpu
executor's) at its own copy of θ, and taking turns at the step: round r is thread r mod k's, which, after
the gradient it was computing, times one step on the shared θ (``update``, or the lock's copy-and-update in
``hold``: whole rotations of one, then of the other) with its own gradient, and hands the turn on. So at
most one thread steps at a time while the other k − 1 compute gradients: what changes with k is only what
the gradients beside the step do to it (shared caches, memory traffic, the clock with more cores busy).
Each thread in turn, as in the runs: the stepper has just computed a gradient (its caches hold the
gradient's working set, not θ), θ's lines come from the core that stepped before it, and no one CPU's
place in the host decides the figure; at k = 1 it is a one-thread run's cycle, gradient then step. Every
gradient is timed too: one slower at larger k with nothing shared but the machine is the clock.

:func:`cycle` (``benchmarks/contention.py --cycle``, not part of the profile) runs the mutex executor's own
cycle on k threads pinned one a CPU (Ek 2021, Alg. 2 as ``executors/cpu/locks.py`` runs it: the lock, θ
read into the thread's copy unless the copy holds it already, release; a real gradient at the copy; the lock,
the update of θ mirrored into the copy, the version counted, release) with nothing recorded but each
acquisition's time of success and of release, and each gradient's time. So the lock's two holds a cycle are
timed apart, with the contention the runs have (k − 1 threads computing or spinning), and the hand-off between
two holds (one release to the next success) is read off the merged timeline: what a mutex run's rows cannot say
(``lock_wait_s`` sums a cycle's two waits, its "hold" is the two holds together).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.calibration.copies import LR, _update
from executors.calibration.timing import run_threads
from executors.cpu.shared import (
    F_LR,
    LINE,
    N_CFG_F,
    N_CFG_I,
    N_SLOTS,
    S_LOCK,
    S_VERSION,
    apply_update_mirrored,
    lock_release,
    read_copy,
    word_lock,
)
from executors.kernel import with_kernel
from simasgd.numerics.memops import copy_into
from simasgd.numerics.workloads.kernels import SOURCE_HASH, loss_and_grad

WARM = 2  # a thread's first passes, dropped: its buffers and the lock's line are cold


@njit(nogil=True, cache=True)
def _go(start: np.ndarray, k: int) -> None:
    """All k threads arrive, then start together (one thread's first passes must meet the others')."""
    A.fetch_add(start, 0, 1)
    spins = 0
    while A.load_acquire(start, 0) < k:
        A.cpu_relax()
        spins += 1
        if spins % 4096 == 0:  # the machine may be oversubscribed: let the others arrive
            A.sched_yield()


@njit(nogil=True, cache=True)
def _updates(theta: np.ndarray, g: np.ndarray, start: np.ndarray, k: int, out_ns: np.ndarray) -> None:
    _go(start, k)
    for r in range(out_ns.shape[0]):
        t0 = A.now_ns()
        _update(theta, g, LR)
        A.compiler_barrier()
        out_ns[r] = A.now_ns() - t0


@njit(nogil=True, cache=True)
def _locked_step(theta: np.ndarray, mine: np.ndarray, g: np.ndarray, ctrl: np.ndarray, cfg_i: np.ndarray,
                 cfg_f: np.ndarray) -> tuple[int, int]:
    """The executors' lock taken, θ copied into ``mine`` and θ -= lr·g, the lock released: the times the lock was
    acquired and the step ended (its hold, acquired to released)."""
    word_lock(ctrl, S_LOCK * LINE, ctrl, cfg_i, cfg_f)
    t0 = A.now_ns()
    copy_into(mine, theta)
    _update(theta, g, LR)
    A.compiler_barrier()
    t1 = A.now_ns()
    lock_release(ctrl, S_LOCK * LINE)
    return t0, t1


@njit(nogil=True, cache=True)
def _locked(theta: np.ndarray, mine: np.ndarray, g: np.ndarray, ctrl: np.ndarray, cfg_i: np.ndarray,
            cfg_f: np.ndarray, start: np.ndarray, k: int, out_ns: np.ndarray, ends_ns: np.ndarray) -> None:
    _go(start, k)
    for r in range(out_ns.shape[0]):
        t0, t1 = _locked_step(theta, mine, g, ctrl, cfg_i, cfg_f)
        out_ns[r] = t1 - t0
        ends_ns[r] = t1


def measure(op: str, k: int, cpus: Sequence[int], n: int, passes: int) -> dict[str, float]:
    """``op`` (``update`` or ``locked``) by k threads on ``cpus[:k]`` over a θ of n float64, ``passes`` passes
    each: the median and p90 of a pass (s) and, for ``locked``, the passes a second and the lock's busy share."""
    if op not in ("update", "locked"):
        raise ValueError(f"contention: op {op!r} is not 'update' or 'locked'")
    _enough_cpus(k, cpus)
    theta, g = np.ones(n), np.full(n, 1e-9)
    start = np.zeros(LINE, dtype=np.int64)
    outs = [np.zeros(passes + WARM, dtype=np.int64) for _ in range(k)]
    ends = [np.zeros(passes + WARM, dtype=np.int64) for _ in range(k)]
    if op == "update":
        run_threads(_updates, [(theta, g, start, k, outs[i]) for i in range(k)], cpus=list(cpus[:k]))
    else:
        ctrl = np.zeros(N_SLOTS * LINE, dtype=np.int64)
        cfg_i, cfg_f = np.zeros(N_CFG_I, dtype=np.int64), np.zeros(N_CFG_F)  # backoff kind 0: a pause a retry
        run_threads(_locked, [(theta, np.empty(n), g, ctrl, cfg_i, cfg_f, start, k, outs[i], ends[i])
                              for i in range(k)], cpus=list(cpus[:k]))
    s = np.concatenate([o[WARM:] for o in outs]) / 1e9
    row = {"median_s": float(np.median(s)), "p90_s": float(np.percentile(s, 90))}
    if op == "locked":  # from the first release on: the holds after it lie inside the span, one at a time
        t = np.concatenate([e[WARM:] for e in ends])
        order = np.argsort(t)
        span = max((t[order[-1]] - t[order[0]]) / 1e9, 1e-9)
        row["per_s"] = float((t.size - 1) / span)
        row["busy"] = float(s[order[1:]].sum() / span)
    return row


def _enough_cpus(k: int, cpus: Sequence[int]) -> None:
    """Refuse k threads on fewer CPUs: one a CPU is what every figure here assumes."""
    if not 1 <= k <= len(cpus):
        raise ValueError(f"contention: {k} threads need {k} CPUs, one a thread; this process may use "
                         f"{len(cpus)} ({', '.join(map(str, cpus))})")


def thread_counts(cpus: int) -> list[int]:
    """1, 2, 4, … up to the CPUs, and the CPU count itself."""
    ks = [1 << i for i in range(cpus.bit_length()) if 1 << i <= cpus]
    return ks + ([cpus] if ks[-1] != cpus else [])


def contention(nbytes: int, passes: int, threads: Sequence[int] | None = None) -> dict[str, Any]:
    """The ``[contention]`` table: both loops at every k in ``threads`` (default :func:`thread_counts`) over a
    θ of ``nbytes``."""
    cpus = sorted(os.sched_getaffinity(0))
    ks = [k for k in (threads or thread_counts(len(cpus))) if 1 <= k <= len(cpus)]
    n = max(nbytes // 8, 1)
    upd = [measure("update", k, cpus, n, passes) for k in ks]
    lck = [measure("locked", k, cpus, n, passes) for k in ks]
    return {"bytes": 8 * n, "passes": passes, "threads": ks,
            "update_s": [r["median_s"] for r in upd], "update_p90_s": [r["p90_s"] for r in upd],
            "locked_hold_s": [r["median_s"] for r in lck], "locked_hold_p90_s": [r["p90_s"] for r in lck],
            "locked_per_s": [r["per_s"] for r in lck], "locked_busy": [r["busy"] for r in lck]}


# --------------------------------------------------------------------------- the steps beside gradients

LAYERS = (64, 256, 256, 10)  # the many-core entry's MLP (benchmarks/many_cores.py): 85,002 float64, θ 680 KB
BATCH = 16
UPDATE, HOLD = 0, 1  # the step a rotation times: rotation q times UPDATE where q is even, HOLD where odd
WARM_ROTATIONS = 2  # one of each step dropped: the first turns find θ, the lock and the buffers cold
CYCLE_CAP = 16  # the mutex cycle: a thread's latest cycles kept (a ring), as a multiple of those asked


def _make_beside(kernels_version: str = SOURCE_HASH) -> Any:
    """The beside loop, in a closure over ``kernels.SOURCE_HASH`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def beside_loop(i: int, k: int, theta: np.ndarray, own: np.ndarray, g: np.ndarray, X: np.ndarray,
                    y: np.ndarray, shape: np.ndarray, n_rows: int, batch: int, seed: int, turn: np.ndarray,
                    ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, start: np.ndarray,
                    step_ns: np.ndarray, grad_ns: np.ndarray, n_grad: np.ndarray) -> None:
        """Thread ``i`` of k: gradients at its own copy ``own`` into ``g``, back to back, each timed into
        ``grad_ns`` (their count into ``n_grad[0]``); between two, where round ``turn[0]`` is its own
        (r mod k = i), one step on the shared θ with ``g`` timed into ``step_ns[r]``, then the turn handed
        on. Ends when the rounds (``step_ns``'s length) are done."""
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return
        np.random.seed(seed)
        idx = np.empty(batch, dtype=np.int64)
        rounds = step_ns.shape[0]
        m = 0
        _go(start, k)
        while True:
            r = A.load_acquire(turn, 0)
            if r >= rounds:
                break
            if r % k == i:
                if (r // k) % 2 == UPDATE:  # HOGWILD!'s write
                    t0 = A.now_ns()
                    _update(theta, g, LR)
                    A.compiler_barrier()
                    t1 = A.now_ns()
                else:  # mutex's critical section: the copy into its own buffer and the update, under the lock
                    t0, t1 = _locked_step(theta, own, g, ctrl, cfg_i, cfg_f)
                step_ns[r] = t1 - t0
                A.store_release(turn, 0, r + 1)
            for j in range(batch):
                idx[j] = np.random.randint(0, n_rows)
            t0 = A.now_ns()
            loss_and_grad(own, X, y, idx, g, shape)
            t1 = A.now_ns()
            if m < grad_ns.shape[0]:
                grad_ns[m] = t1 - t0
            m += 1
        n_grad[0] = m

    return beside_loop


beside_loop = _make_beside()


def _make_cycle(kernels_version: str = SOURCE_HASH) -> Any:
    """The mutex cycle loop, in a closure over ``kernels.SOURCE_HASH`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def cycle_loop(k: int, theta: np.ndarray, local: np.ndarray, g: np.ndarray, vel: np.ndarray, X: np.ndarray,
                   y: np.ndarray, shape: np.ndarray, n_rows: int, batch: int, seed: int, ctrl: np.ndarray,
                   cfg_i: np.ndarray, cfg_f: np.ndarray, start: np.ndarray, quota: int, done: np.ndarray,
                   acq_ns: np.ndarray, rel_ns: np.ndarray, grad_ns: np.ndarray, count: np.ndarray) -> None:
        """One of k threads: cycles of ``run_locked``'s (module docstring) until every thread has made ``quota``
        (``done[0]`` counts the threads that have); so each thread's last cycle ends after every thread's
        ``quota``-th began, however late a thread got its CPU. The latest ``grad_ns.shape[0]`` cycles are kept,
        a ring (cycle c in slot j = c mod that): hold 2j's success and release (its read) and 2j + 1's (its
        update) into ``acq_ns``, ``rel_ns``, its gradient's time into ``grad_ns[j]``; the cycles made into
        ``count[0]``."""
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return
        kept = grad_ns.shape[0]
        count[0] = 0
        if kept == 0:
            return
        np.random.seed(seed)
        idx = np.empty(batch, dtype=np.int64)
        mine = -1
        _go(start, k)
        c = 0
        while True:
            j = c % kept
            word_lock(ctrl, S_LOCK * LINE, ctrl, cfg_i, cfg_f)
            t0 = A.now_ns()
            rv = A.load(ctrl, S_VERSION * LINE)
            read_copy(ctrl, local, theta, rv == mine)
            A.compiler_barrier()
            t1 = A.now_ns()
            lock_release(ctrl, S_LOCK * LINE)
            acq_ns[2 * j], rel_ns[2 * j] = t0, t1
            for b in range(batch):
                idx[b] = np.random.randint(0, n_rows)
            t0 = A.now_ns()
            loss_and_grad(local, X, y, idx, g, shape)
            grad_ns[j] = A.now_ns() - t0
            word_lock(ctrl, S_LOCK * LINE, ctrl, cfg_i, cfg_f)
            t0 = A.now_ns()
            cur = A.load(ctrl, S_VERSION * LINE)
            apply_update_mirrored(theta, vel, g, local, cfg_i, cfg_f, cur - rv)
            mine = A.fetch_add(ctrl, S_VERSION * LINE, 1) + 1
            A.compiler_barrier()
            t1 = A.now_ns()
            lock_release(ctrl, S_LOCK * LINE)
            acq_ns[2 * j + 1], rel_ns[2 * j + 1] = t0, t1
            c += 1
            if c == quota:
                A.fetch_add(done, 0, 1)
            if c >= quota and A.load_acquire(done, 0) >= k:
                break
        count[0] = c

    return cycle_loop


cycle_loop = _make_cycle()


def holds(acq: Sequence[np.ndarray], rel: Sequence[np.ndarray], warm: int = WARM) -> dict[str, Any]:
    """The lock's timeline of k threads' holds (per thread: success and release times, two a cycle: read, update),
    over the window in which every thread is past its ``warm`` cycles and none has ended (none: refused, by
    name): the holds in it (read and update apart), the hand-offs (a release to the next success, on the merged
    timeline), the share of the window the lock was held, and the updates a second."""
    lo = max(int(a[2 * warm]) for a in acq)
    hi = min(int(r[-1]) for r in rel)
    if hi <= lo:
        raise ValueError(f"contention: the {len(acq)} threads' cycles never ran at once past their {warm} warm "
                         f"cycles (a thread without its CPU?): no window to time the lock in")
    a_all, r_all = np.concatenate(list(acq)), np.concatenate(list(rel))
    kind = np.concatenate([np.arange(a.size) % 2 for a in acq])  # 0: the read's hold, 1: the update's
    keep = (a_all >= lo) & (r_all <= hi)
    a_all, r_all, kind = a_all[keep], r_all[keep], kind[keep]
    order = np.argsort(a_all)
    a_all, r_all, kind = a_all[order], r_all[order], kind[order]
    span = max(hi - lo, 1)
    hold = (r_all - a_all) / 1e9
    gap = (a_all[1:] - r_all[:-1]) / 1e9
    return {"read_hold_s": float(np.median(hold[kind == 0])), "update_hold_s": float(np.median(hold[kind == 1])),
            "handoff_s": float(np.median(gap)) if gap.size else 0.0,
            "handoff_mean_s": float(gap.mean()) if gap.size else 0.0,
            "busy": float(hold.sum() * 1e9 / span), "updates_per_s": float((kind == 1).sum() * 1e9 / span),
            "holds": int(hold.size)}


def measure_cycle(k: int, cpus: Sequence[int], wl: Any, theta0: np.ndarray, batch: int, cycles: int,
                  seed: int = 0) -> dict[str, Any]:
    """One row of :func:`cycle`: k threads on ``cpus[:k]``, ``cycles`` cycles each after :data:`WARM`."""
    _enough_cpus(k, cpus)
    n = cycles + WARM
    cap = CYCLE_CAP * n  # a thread's latest cycles kept, while it waits for the others to make n
    theta = theta0.copy()
    start, ctrl = np.zeros(LINE, dtype=np.int64), np.zeros(N_SLOTS * LINE, dtype=np.int64)
    done = np.zeros(LINE, dtype=np.int64)
    cfg_i, cfg_f = np.zeros(N_CFG_I, dtype=np.int64), np.zeros(N_CFG_F)  # backoff kind 0: a pause a retry
    cfg_f[F_LR] = LR  # momentum 0, staleness-unaware: the executor's defaults
    acq = [np.zeros(2 * cap, dtype=np.int64) for _ in range(k)]
    rel = [np.zeros(2 * cap, dtype=np.int64) for _ in range(k)]
    grads = [np.zeros(cap, dtype=np.int64) for _ in range(k)]
    counts = [np.zeros(1, dtype=np.int64) for _ in range(k)]
    loop = with_kernel(cycle_loop, wl.kernel)
    args = [(k, theta, theta0.copy(), np.zeros_like(theta0), np.zeros_like(theta0), wl.X, wl.y, wl.shape,
             int(wl.n_train), batch, seed + 1 + i, ctrl, cfg_i, cfg_f, start, n, done, acq[i], rel[i], grads[i],
             counts[i]) for i in range(k)]
    from executors.cpu.runner import single_threaded_blas

    t0 = time.perf_counter()
    with single_threaded_blas():
        # compiled (or loaded from numba's cache) here, on a θ of its own, not inside the first k's threads
        none = np.zeros(0, dtype=np.int64)
        loop(1, theta0.copy(), *args[0][2:11], ctrl.copy(), cfg_i, cfg_f, np.zeros(LINE, dtype=np.int64), 0,
             np.zeros(LINE, dtype=np.int64), none, none, none, np.zeros(1, dtype=np.int64))
        t1 = time.perf_counter()
        run_threads(loop, args, cpus=list(cpus[:k]))
    wall = time.perf_counter() - t1
    made = [int(c[0]) for c in counts]
    grad = np.concatenate([unrolled(gr, m, 1)[WARM:] for gr, m in zip(grads, made, strict=True)]) / 1e9
    return {**holds([unrolled(a, m, 2) for a, m in zip(acq, made, strict=True)],
                    [unrolled(r, m, 2) for r, m in zip(rel, made, strict=True)]),
            "gradient_s": float(np.median(grad)), "cycles": cycles, "seconds": wall, "compile_s": t1 - t0,
            "wrapped": any(m > cap for m in made)}


def unrolled(ring: np.ndarray, made: int, per: int) -> np.ndarray:
    """A ring of ``per`` entries a cycle, ``made`` cycles written into it in turn: the cycles it keeps (the
    latest, all of them if it never wrapped), in the order they were made."""
    kept = ring.size // per
    if made <= kept:
        return ring[:per * made]
    j = made % kept
    return np.concatenate([ring[per * j:], ring[:per * j]])


def _by_k(threads: Sequence[int] | None, layers: Sequence[int], batch: int, seed: int,
          row: Callable[[int, list[int], Any, np.ndarray], dict[str, Any]]
          ) -> tuple[list[int], np.ndarray, list[dict[str, Any]]]:
    """``row(k, cpus, workload, θ₀)`` at every k of ``threads`` (default :func:`thread_counts`), each k checked
    against the CPUs before the workload is built: the ks, θ₀ and the rows."""
    cpus = sorted(os.sched_getaffinity(0))
    ks = list(threads or thread_counts(len(cpus)))
    for k in ks:
        _enough_cpus(k, cpus)
    wl, theta0 = mlp_workload(layers, batch, seed)
    return ks, theta0, [row(k, cpus, wl, theta0) for k in ks]


def cycle(cycles: int, threads: Sequence[int] | None = None, layers: Sequence[int] = LAYERS,
          batch: int = BATCH, seed: int = 0) -> dict[str, Any]:
    """The mutex cycle at every k of ``threads`` (default :func:`thread_counts`; a k above the CPUs is refused,
    by name): per k the holds, the hand-off, the lock's busy share, updates/s and the gradient."""
    ks, theta0, rows = _by_k(threads, layers, batch, seed,
                             lambda k, cpus, wl, theta0: measure_cycle(k, cpus, wl, theta0, batch, cycles, seed))
    return {"layers": list(layers), "batch": batch, "dim": int(theta0.size), "cycles": cycles, "threads": ks,
            **{key: [r[key] for r in rows] for key in rows[0] if key != "cycles"}}


def mlp_workload(layers: Sequence[int] = LAYERS, batch: int = BATCH, seed: int = 0) -> tuple[Any, np.ndarray]:
    """The MLP of ``layers`` on digits (64 inputs, 10 classes) at batch ``batch``, float64, and its θ₀."""
    from simasgd.numerics.workloads import build_workload
    from simasgd.spec.scenario import WorkloadConfig

    wl = build_workload(WorkloadConfig(model="mlp", layers=list(layers), dataset="digits", batch_size=batch,
                                       dtype="float64"), seed)
    return wl, wl.init_theta(np.random.default_rng(seed))


def measure_beside(k: int, cpus: Sequence[int], wl: Any, theta0: np.ndarray, batch: int, passes: int,
                   seed: int = 0) -> dict[str, Any]:
    """One row of :func:`beside`: k threads on ``cpus[:k]``, at least ``passes`` timed steps of each kind
    (whole rotations: every thread as many), the median and p90 of each (s) and of every gradient."""
    _enough_cpus(k, cpus)
    per = -(-max(passes, 1) // k)  # timed turns a thread of each step
    rounds = k * (WARM_ROTATIONS + 2 * per)
    theta = theta0.copy()
    turn, start = np.zeros(LINE, dtype=np.int64), np.zeros(LINE, dtype=np.int64)
    ctrl = np.zeros(N_SLOTS * LINE, dtype=np.int64)
    cfg_i, cfg_f = np.zeros(N_CFG_I, dtype=np.int64), np.zeros(N_CFG_F)  # backoff kind 0: a pause a retry
    step_ns = np.zeros(rounds, dtype=np.int64)
    cap = 4 * rounds + 64  # gradients a thread may record (one a round, and more while another steps)
    grads = [np.zeros(cap, dtype=np.int64) for _ in range(k)]
    counts = [np.zeros(1, dtype=np.int64) for _ in range(k)]
    loop = with_kernel(beside_loop, wl.kernel)
    args = [(i, k, theta, theta0.copy(), np.zeros_like(theta0), wl.X, wl.y, wl.shape, int(wl.n_train), batch,
             seed + 1 + i, turn, ctrl, cfg_i, cfg_f, start, step_ns, grads[i], counts[i]) for i in range(k)]
    from executors.cpu.runner import single_threaded_blas

    t0 = time.perf_counter()
    with single_threaded_blas():
        # compiled (or loaded from numba's cache) here, not inside the first k's threads: no round to take
        loop(0, 1, *args[0][2:15], np.zeros(LINE, dtype=np.int64), step_ns[:0], grads[0], counts[0])
        t1 = time.perf_counter()
        run_threads(loop, args, cpus=list(cpus[:k]))
    wall = time.perf_counter() - t1
    q = np.arange(rounds) // k
    timed = q >= WARM_ROTATIONS
    upd = step_ns[timed & (q % 2 == UPDATE)] / 1e9
    hold = step_ns[timed & (q % 2 == HOLD)] / 1e9
    grad = np.concatenate([gr[WARM:min(int(c[0]), cap)] for gr, c in zip(grads, counts, strict=True)]) / 1e9
    return {"update_s": float(np.median(upd)), "update_p90_s": float(np.percentile(upd, 90)),
            "hold_s": float(np.median(hold)), "hold_p90_s": float(np.percentile(hold, 90)),
            "gradient_s": float(np.median(grad)), "gradient_p90_s": float(np.percentile(grad, 90)),
            "steps": int(upd.size), "gradients": int(sum(int(c[0]) for c in counts)), "seconds": wall,
            "compile_s": t1 - t0}


def beside(passes: int, threads: Sequence[int] | None = None, layers: Sequence[int] = LAYERS,
           batch: int = BATCH, seed: int = 0) -> dict[str, Any]:
    """The steps beside gradients at every k of ``threads`` (default :func:`thread_counts`; a k above the
    CPUs is refused, by name): per k the medians and p90s of ``update`` (θ -= lr·g), ``hold`` (the lock's
    copy and update) and ``gradient``, over at least ``passes`` steps of each."""
    ks, theta0, rows = _by_k(threads, layers, batch, seed,
                             lambda k, cpus, wl, theta0: measure_beside(k, cpus, wl, theta0, batch, passes, seed))
    return {"layers": list(layers), "batch": batch, "dim": int(theta0.size), "bytes": int(theta0.nbytes),
            "passes": passes, "threads": ks, **{key: [r[key] for r in rows] for key in rows[0]}}
