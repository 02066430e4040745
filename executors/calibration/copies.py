"""``[copy]`` (θ-sized copies, k threads at once) and ``[copy_by_size]`` (one thread, by working-set size).

Every timed loop is a nogil numba function on the executor's clock (:func:`executors.atomics.now_ns`), the
copy the executor's (``memops.copy_into``) and its update (``update_rule``'s plain form). Format:
docs/profile.md.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.calibration.timing import run_threads
from simasgd.numerics.memops import copy_into
from simasgd.numerics.update_rule import plain_range


@njit(nogil=True, cache=True)
def _copy_loop(dst: np.ndarray, src: np.ndarray, reps: int, go: np.ndarray) -> int:
    while A.load(go, 0) == 0:
        A.cpu_relax()
    t0 = A.now_ns()
    for _ in range(reps):
        copy_into(dst, src)
        A.compiler_barrier()
    return A.now_ns() - t0


def copy_bandwidth(n_bytes: int, max_threads: int, seconds: float) -> dict[str, Any]:
    n = n_bytes // 8
    gbs, threads = [], list(range(1, max_threads + 1))
    for k in threads:
        bufs = [(np.zeros(n), np.ones(n)) for _ in range(k)]
        go = np.ones(1, dtype=np.int64)
        t1 = _copy_loop(bufs[0][0], bufs[0][1], 1, go)
        reps = int(max(1, min(10000, seconds / len(threads) / max(t1 * 1e-9, 1e-7))))
        go[0] = 0
        args = [(dst, src, reps, go) for dst, src in bufs]
        timer = threading.Timer(0.05, go.__setitem__, (0, 1))
        timer.start()
        ns = run_threads(_copy_loop, args)
        # bytes read + written per copy, all threads, over the slowest thread's time
        gbs.append(2 * n * 8 * reps * k / (max(ns) * 1e-9) / 1e9)
    return {"threads": threads, "gbs": gbs, "bytes": n * 8}


MAX_BUFFER = 1 << 30  # cap on one copy_by_size buffer: a 4 x LLC rule on a 384 MB-L3 server would be 1.5 GB


SIZE_MIN = 16 << 10


LR = 1e-6  # the update's step: tiny, so θ stays finite (and never subnormal) over all repetitions


@njit(nogil=True, cache=True)
def _update(theta: np.ndarray, g: np.ndarray, lr: float) -> None:
    """The executors' update (update_rule's plain form), so the rate measured is the rate they run at."""
    plain_range(theta, g, lr, 1.0, 0, theta.shape[0])


@njit(nogil=True, cache=True)
def _batches(dst: np.ndarray, src: np.ndarray, lr: float, update: bool, inner: int, out_ns: np.ndarray) -> None:
    """Time ``out_ns.shape[0]`` batches of ``inner`` copies (or updates ``dst -= lr*src``); batch 0 warms."""
    for b in range(out_ns.shape[0]):
        t0 = A.now_ns()
        for _ in range(inner):
            if update:
                _update(dst, src, lr)
            else:
                copy_into(dst, src)
            A.compiler_barrier()  # keeps LLVM from merging the repetitions into one
        out_ns[b] = A.now_ns() - t0


def copy_sizes(cache: dict[str, Any], quick: bool) -> list[int]:
    """16 KiB doubling up to max(4 x last-level cache, 64 MiB): every level, then DRAM (x8 steps when quick)."""
    top = min(max(4 * max(cache.get("sizes_bytes") or [0]), 64 << 20), MAX_BUFFER)
    if quick:
        top, step = 8 << 20, 8
    else:
        step = 2
    sizes, s = [], SIZE_MIN
    while s <= top:
        sizes.append(s)
        s *= step
    return sizes


def _bandwidth(dst: np.ndarray, src: np.ndarray, update: bool, seconds: float) -> float:
    """GB/s of the median batch: batches of >= ~50 us so the clock's cost and resolution don't count."""
    probe = np.zeros(2, dtype=np.int64)
    _batches(dst, src, LR, update, 1, probe)  # warms both buffers (and compiles)
    one = max(float(probe[1]), 20.0)
    inner = int(max(1, 50_000 / one))
    batches = int(min(200, max(3, seconds / (one * inner * 1e-9))))
    out = np.zeros(batches + 1, dtype=np.int64)
    _batches(dst, src, LR, update, inner, out)
    moved = (3 if update else 2) * dst.nbytes * inner  # update: read θ, read g, write θ; copy: read + write
    return moved / max(float(np.median(out[1:])), 1.0)  # bytes/ns = GB/s


def copy_by_size(sizes: Sequence[int], seconds: float) -> dict[str, Any]:
    """One thread, warm buffers of each size: bandwidth where the working set lives (L1 ... DRAM)."""
    per = seconds / max(1, 2 * len(sizes))
    read, upd = [], []
    for size in sizes:
        n = size // 8
        src, dst = np.ones(n), np.full(n, 0.5)  # filled, so no first-touch page faults are timed
        read.append(_bandwidth(dst, src, False, per))
        upd.append(_bandwidth(dst, src, True, per))
    return {"sizes_bytes": list(sizes), "read_gbs": read, "update_gbs": upd}
