"""``[contention]``: a step on one shared θ while k cores work on it (k = 1, 2, 4, … up to the CPUs).

``[coherence]`` times a step on lines one other core wrote; with more cores on θ a step costs more (a 16-core
guest: HOGWILD!'s update 40 µs alone, 261 µs with 16 writers; mutex's copy-and-update 74 µs at 2 threads,
250 µs from 4, benchmarks/fidelity.md). Two loops, k threads pinned one a CPU, no gradient between passes:

- ``update``: every thread applies θ -= lr·g to the shared θ, pass after pass (HOGWILD!'s write, k writers);
- ``locked``: every thread takes the executors' TTAS lock (``executors.cpu.shared.word_lock``, a pause a
  retry), copies θ into its own buffer, applies θ -= lr·g, releases (mutex's two steps back to back, k − 1
  threads spinning); the lock's hold, acquired to released, is timed, and the passes a second counted.

Every timed loop is a nogil numba function on the executor's clock. Format: docs/profile.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.calibration.copies import LR, _update
from executors.calibration.timing import run_threads
from executors.cpu.shared import LINE, N_CFG_F, N_CFG_I, N_SLOTS, S_LOCK, lock_release, word_lock
from simasgd.numerics.memops import copy_into

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
def _locked(theta: np.ndarray, mine: np.ndarray, g: np.ndarray, ctrl: np.ndarray, cfg_i: np.ndarray,
            cfg_f: np.ndarray, start: np.ndarray, k: int, out_ns: np.ndarray, ends_ns: np.ndarray) -> None:
    _go(start, k)
    for r in range(out_ns.shape[0]):
        word_lock(ctrl, S_LOCK * LINE, ctrl, cfg_i, cfg_f)
        t0 = A.now_ns()
        copy_into(mine, theta)
        _update(theta, g, LR)
        A.compiler_barrier()
        t1 = A.now_ns()
        lock_release(ctrl, S_LOCK * LINE)
        out_ns[r] = t1 - t0
        ends_ns[r] = t1


def measure(op: str, k: int, cpus: Sequence[int], n: int, passes: int) -> dict[str, float]:
    """``op`` (``update`` or ``locked``) by k threads on ``cpus[:k]`` over a θ of n float64, ``passes`` passes
    each: the median and p90 of a pass (s) and, for ``locked``, the passes a second and the lock's busy share."""
    if op not in ("update", "locked"):
        raise ValueError(f"contention: op {op!r} is not 'update' or 'locked'")
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
