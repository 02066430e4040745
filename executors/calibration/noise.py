"""``[noise]``: the pauses the host inflicts on a spinning thread, k threads at once.

Format: docs/profile.md.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors import settle
from executors.calibration.timing import run_threads
from simasgd.sim.noise import quantile_grid

MIN_GAP_S = 2e-6  # a clock jump above this between two reads of a spin loop is a pause (a read is ~25 ns)


KEEP_PAUSES = 500  # pause lengths written per k (sorted, evenly subsampled)


@njit(nogil=True, cache=True)
def _pauses(duration_ns: int, min_gap_ns: int, go: np.ndarray, out: np.ndarray, stats: np.ndarray) -> None:
    """Spin reading the clock for ``duration_ns`` after ``go``; every jump > ``min_gap_ns`` is a pause.

    ``out`` gets the first pause lengths (ns); ``stats`` = [pauses, total paused ns, spun ns], counted
    even when ``out`` is full.
    """
    while A.load(go, 0) == 0:
        A.cpu_relax()
    start = A.now_ns()
    last = start
    n, paused = 0, 0
    while last - start < duration_ns:
        now = A.now_ns()
        gap = now - last
        if gap > min_gap_ns:
            if n < out.shape[0]:
                out[n] = gap
            n += 1
            paused += gap
        last = now
    stats[0], stats[1], stats[2] = n, paused, last - start


def _spin_k(cpus: Sequence[int], duration_s: float, min_gap_s: float) -> tuple[np.ndarray, np.ndarray]:
    k = len(cpus)
    go = np.zeros(1, dtype=np.int64)
    cap = int(min(1_000_000, max(1000, duration_s * 100_000)))  # >= 100k pauses/s would be one every 10 us
    outs = [np.zeros(cap, dtype=np.int64) for _ in range(k)]
    stats = [np.zeros(3, dtype=np.int64) for _ in range(k)]
    settle.settle()  # first, so the go word below still flips after the threads exist
    # all k start together: the go word flips once every thread has been created and pinned
    threading.Timer(0.02, lambda: go.__setitem__(0, 1)).start()
    run_threads(_pauses, [(int(duration_s * 1e9), int(min_gap_s * 1e9), go, outs[i], stats[i]) for i in range(k)],
             cpus=list(cpus))
    kept = np.concatenate([o[:min(int(s[0]), cap)] for o, s in zip(outs, stats, strict=False)])
    return kept, np.sum(np.stack(stats), axis=0)


def noise(duration_s: float, min_gap_s: float = MIN_GAP_S, max_k: int | None = None) -> dict[str, Any]:
    """Pauses of k = 1 .. usable CPUs spinning threads, each pinned to its own CPU (pooled per k)."""
    cpus = sorted(os.sched_getaffinity(0))
    ks = range(1, min(len(cpus), max_k or len(cpus)) + 1)
    _pauses(1000, 1000, np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(3, dtype=np.int64))
    out: dict[str, Any] = {"min_gap_s": min_gap_s}
    for k in ks:
        kept, (n, paused, spun) = _spin_k(cpus[:k], duration_s, min_gap_s)
        d: dict[str, Any] = {"threads": k, "duration_s": float(spun) / k * 1e-9,
                             "rate_per_s": float(n) / (float(spun) * 1e-9),
                             "busy_fraction": 1.0 - float(paused) / float(spun)}
        s = np.sort(kept) * 1e-9
        if len(s):
            grid, top = quantile_grid(s, KEEP_PAUSES)  # the longest verbatim, the rest by rank
            d.update(pauses_s=[float(x) for x in grid], count=len(s), top=int(top))
            d.update(mean_s=float(paused) / float(n) * 1e-9, p50_s=float(np.median(s)),
                     p90_s=float(np.quantile(s, 0.9)), p99_s=float(np.quantile(s, 0.99)), max_s=float(s[-1]))
        else:
            d["pauses_s"] = []
        out[f"k{k}"] = d
    return out
