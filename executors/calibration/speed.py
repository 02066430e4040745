"""The host's speed, shared by its CPUs: ``concurrent.k2_speed_corr`` and ``k2_speed_time_s``.

``simasgd calibrate`` times a gradient with two independent threads at once (``concurrent.k2``: each its
own θ and data, back to back); ``executors.calibration.gradient.time_gradient`` stamps each of those calls' starts on
the shared monotonic clock. Here each call of thread 0 is paired with the call of thread 1 that overlaps
it most (more than half of it), and with the calls that follow that one. ρ is the correlation of the
pairs' normal scores (each thread's durations ranked, then Φ⁻¹: long pauses weigh no more than their
rank); its decay with the time between the two calls' starts, ρ_m = ρ·exp(−Δt_m/T), gives T (median
over the next 1–3 calls whose ρ_m is still > 0.05).

Pairing by call index instead pairs calls that the threads' start offsets and their different speeds
have moved apart by many calls: it gave 0.01–0.20 where pairs by time give 0.70–0.74
(simasgd/sim/host_speed.py).
"""

from __future__ import annotations

import numpy as np

MIN_PAIRS = 50
LAGS = (1, 2, 3)


def normal_scores(x: np.ndarray) -> np.ndarray:
    """Φ⁻¹ of each value's rank / (n + 1)."""
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
    za, zb = normal_scores(a1 - a0), normal_scores(b1 - b0)
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
    return {"k2_speed_corr": rho, "k2_speed_time_s": t, "k2_speed_pairs": len(p)}
