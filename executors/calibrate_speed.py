"""The host's speed, shared by its CPUs: ``concurrent.k2_speed_corr`` and ``k2_speed_time_s``.

Two threads, each on its own CPU with its own θ and data, compute gradients back to back, and every
call's start and end are stamped on the shared monotonic clock. Each call of thread 0 is paired with
the call of thread 1 that overlaps it most (more than half of it), and with the calls that follow
that one. ρ is the correlation of the pairs' normal scores (each thread's durations ranked, then
Φ⁻¹: long pauses weigh no more than their rank); its decay with the time between the two calls'
starts, ρ_m = ρ·exp(−Δt_m/T), gives T (median over the next 1–3 calls whose ρ_m is still > 0.05).

Pairing by call index instead, as ``k<k>_pair_corr`` did before 2026-11-25, pairs calls that the
threads' start offsets and their different speeds have moved apart by many calls: on the 2-vCPU
Intel Xeon it gave 0.01–0.20 where pairs by time give 0.70–0.74 (simasgd/sim/host_speed.py).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from simasgd.workloads.kernels import SOURCE_HASH, loss_and_grad

MIN_PAIRS = 50
LAGS = (1, 2, 3)


def _make(kernels_version: str = SOURCE_HASH) -> Any:
    """The stamped timer, in a closure over ``kernels.SOURCE_HASH`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def stamped(theta, X, y, shape, n_rows, batch, t0, t1, seed, go):  # noqa: ANN001
        """Gradients back to back on random batches once ``go`` is set, each call's start and end (ns)."""
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return
        np.random.seed(seed)
        g = np.zeros_like(theta)
        idx = np.empty(batch, dtype=np.int64)
        while A.load(go, 0) == 0:
            pass
        for k in range(t0.shape[0]):
            for i in range(batch):
                idx[i] = np.random.randint(0, n_rows)
            t0[k] = A.now_ns()
            loss_and_grad(theta, X, y, idx, g, shape)
            t1[k] = A.now_ns()

    return stamped


stamped = _make()


def _normal_scores(x: np.ndarray) -> np.ndarray:
    from scipy.stats import norm, rankdata
    return norm.ppf(rankdata(x) / (len(x) + 1))


def overlap_pairs(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    """(i, j): thread 1's call j overlapping thread 0's call i by more than half of call i (calls in
    start order on each thread)."""
    j = np.searchsorted(b0, a0)
    pairs = []
    for i in range(len(a0)):
        best, most = -1, 0
        for c in (j[i] - 1, j[i]):
            if 0 <= c < len(b0):
                ov = min(a1[i], b1[c]) - max(a0[i], b0[c])
                if ov > most:
                    best, most = c, ov
        if best >= 0 and most > 0.5 * (a1[i] - a0[i]):
            pairs.append((i, best))
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def speed_from_stamps(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> dict[str, float]:
    """``{"k2_speed_corr": ρ, "k2_speed_time_s": T, "k2_speed_pairs": n}`` from two threads' stamps (ns);
    {} when fewer than ``MIN_PAIRS`` calls overlap or no ρ_m lets T be estimated."""
    p = overlap_pairs(a0, a1, b0, b1)
    if len(p) < MIN_PAIRS:
        return {}
    za, zb = _normal_scores(a1 - a0), _normal_scores(b1 - b0)
    r0 = float(np.corrcoef(za[p[:, 0]], zb[p[:, 1]])[0, 1])
    dt0 = float(np.median(np.abs(b0[p[:, 1]] - a0[p[:, 0]]))) * 1e-9  # paired calls start this far apart
    times = []
    for m in LAGS:
        ok = p[:, 1] + m < len(b0)
        if ok.sum() < MIN_PAIRS or not r0 > 0:
            continue
        i, j = p[ok, 0], p[ok, 1] + m
        rm = float(np.corrcoef(za[i], zb[j])[0, 1])
        dt = float(np.median(b0[j] - a0[i])) * 1e-9
        if 0.05 < rm < r0 and dt > dt0:  # ρ·e^(−dt/T) against ρ·e^(−dt0/T)
            times.append((dt - dt0) / np.log(r0 / rm))
    if not times:
        return {}
    t = float(np.median(times))
    rho = min(1.0, r0 * float(np.exp(dt0 / t)))  # at the same instant, not dt0 apart
    return {"k2_speed_corr": rho, "k2_speed_time_s": t, "k2_speed_pairs": int(len(p))}


def host_speed(timer: Any, theta: np.ndarray, X: np.ndarray, y: np.ndarray, shape: Any, n_rows: int, batch: int,
               n: int, seed: int) -> dict[str, float]:
    """Two threads on the first two usable CPUs, ``n`` calls each (``timer``: :func:`stamped` with the
    workload's kernel bound); {} on a one-CPU machine."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {}
    go = np.zeros(1, np.int64)
    stamps = [(np.zeros(n, np.int64), np.zeros(n, np.int64)) for _ in range(2)]
    timer(theta.copy(), X, y, shape, n_rows, batch, np.zeros(2, np.int64), np.zeros(2, np.int64), seed, np.ones(1, np.int64))

    def body(k: int) -> None:
        os.sched_setaffinity(0, {cpus[k]})  # this thread only (Linux: per-thread affinity)
        timer(theta.copy(), X, y, shape, n_rows, batch, stamps[k][0], stamps[k][1], seed + 1 + k, go)

    ts = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(2)]
    for t in ts:
        t.start()
    time.sleep(0.02)  # both spinning on go before it is set
    go[0] = 1
    for t in ts:
        t.join(120)
    (a0, a1), (b0, b1) = stamps
    return speed_from_stamps(a0, a1, b0, b1)
