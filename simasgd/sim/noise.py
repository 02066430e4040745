"""Host noise: the long pauses a busy thread sees, calibrated on this machine.

A thread that computes is not always running: timer and device interrupts,
kernel threads, other processes and — on a virtual machine — the hypervisor
take its CPU away now and then. ``simasgd calibrate`` measures it with k
threads spinning at once, each on its own CPU (``[noise.k<k>]``: pauses per
second of busy time, and their lengths, docs/profile.md). With every CPU
busy the pauses are longer and rarer ones appear (on a small VM: 15 µs typical,
up to tens of ms) — and a worker paused for milliseconds misses dozens of the
others' updates, which is where measured staleness gets its τ = 0 share and
its tail, and measured updates/s its mean-cycle excess over the median.

The calibrated gradient samples already hold the short, frequent pauses of the
moment they were taken (a 200-sample subsample of thousands of calls); what
they cannot hold is the rare long ones. So only pauses longer than the
samples' own spread (their p99 − median) are added, as a Poisson process over
the worker's compute time with the calibrated rate of such pauses, each
lasting a draw from the calibrated long pauses. ``[sim] host_noise = false``
switches it off.

``pauses_s`` keeps at most a few hundred of the thousands of recorded pauses
(:func:`quantile_grid`): the longest half of them verbatim — the rare long pauses
are what the simulator needs most — and values at evenly spaced ranks for the
rest, each standing for the recorded pauses nearest it in rank
(:func:`rank_weights`); a draw weights them so. An even rank grid of all the
pauses, drawn uniformly, had given the largest one (25.6 ms, once in 2 s of
calibration) the weight of 5.3 recorded pauses and put the mean k2 pause at
80 µs where 52 µs had been recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class HostNoise:
    rate_per_s: float      # long pauses per second of a thread's compute time
    pauses_s: np.ndarray   # lengths of long pauses to draw from
    weights: np.ndarray | None = None  # their probabilities (None: equal)

    @classmethod
    def from_profile(cls, profile: dict[str, Any] | None, busy_threads: int,
                     longer_than_s: float) -> HostNoise | None:
        """The long pauses of ``[noise.k<k>]`` with k the largest measured ≤ ``busy_threads``; None if absent."""
        noise = (profile or {}).get("noise") or {}
        ks = [k for k in range(1, max(1, busy_threads) + 1) if isinstance(noise.get(f"k{k}"), dict)]
        if not ks:
            return None
        table = noise[f"k{max(ks)}"]
        pauses = np.asarray(table.get("pauses_s") or [], dtype=float)
        rate = float(table.get("rate_per_s") or 0.0)
        if not len(pauses) or rate <= 0:
            return None
        w = rank_weights(len(pauses), recorded(table), int(table.get("top") or 0))
        keep = pauses > longer_than_s
        if not keep.any():
            return None
        # the long pauses' share of every recorded pause is their share of the rate
        share = float(w[keep].sum())
        return cls(rate * share, pauses[keep], w[keep] / share)

    def add(self, rng: np.random.Generator, busy_s: np.ndarray) -> np.ndarray:
        """``busy_s`` with the pauses that fall into each interval added."""
        counts = rng.poisson(self.rate_per_s * np.asarray(busy_s, dtype=float))
        out = np.array(busy_s, dtype=float, copy=True)
        for i in np.flatnonzero(counts):
            out[i] += rng.choice(self.pauses_s, size=counts[i], p=self.weights).sum()
        return out

    @property
    def mean_s(self) -> float:
        """The mean length of a drawn pause."""
        return float(np.average(self.pauses_s, weights=self.weights))


def recorded(table: dict[str, Any]) -> int:
    """How many pauses ``table`` recorded: ``count``, else rate × spin time × threads (older profiles),
    else as many as it lists."""
    listed = len(table.get("pauses_s") or [])
    if table.get("count"):
        return int(table["count"])
    rate, dur, k = table.get("rate_per_s"), table.get("duration_s"), table.get("threads")
    if rate and dur and k:
        return max(listed, round(float(rate) * float(dur) * int(k)))
    return listed


def quantile_grid(sorted_values: np.ndarray, keep: int) -> tuple[np.ndarray, int]:
    """At most ``keep`` of ``sorted_values`` (ascending), and how many of the largest are kept verbatim
    (``top``): all of them if they fit; else the largest ``keep // 2`` as they are and ``keep − top``
    values at evenly spaced ranks among the others, the smallest and the largest of those included.
    Calibrate writes them as ``pauses_s`` and ``top`` with ``count = len(sorted_values)``."""
    n = len(sorted_values)
    if n <= keep:
        return np.asarray(sorted_values), n
    top = keep // 2
    body = sorted_values[:n - top]
    ranks = np.linspace(0, len(body) - 1, keep - top).round().astype(np.int64)
    return np.concatenate([body[ranks], sorted_values[n - top:]]), top


def rank_weights(keep: int, n: int, top: int = 0) -> np.ndarray:
    """The share of ``n`` recorded values each of ``keep`` kept ones stands for (:func:`quantile_grid`):
    each of the ``top`` largest for itself; each of the others for the ranks nearest it among the rest
    (so the two ends of those stand for about half as many as the others). ``top = 0``: a rank grid of
    all ``n`` (profiles written before ``top``)."""
    if keep <= 0:
        return np.zeros(0)
    if n <= keep:
        return np.full(keep, 1.0 / keep)
    rest = n - top
    ranks = np.linspace(0, rest - 1, keep - top).round()
    edges = np.concatenate([[-0.5], (ranks[1:] + ranks[:-1]) / 2, [rest - 0.5]])
    return np.concatenate([np.diff(edges), np.ones(top)]) / n
