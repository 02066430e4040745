"""Host noise: the long pauses a busy thread sees, calibrated on this machine.

A thread that computes is not always running: timer and device interrupts,
kernel threads, other processes and — on a virtual machine — the hypervisor
take its CPU away now and then. ``simasgd calibrate`` measures it with k
threads spinning at once, each on its own CPU (``[noise.k<k>]``: pauses per
second of busy time, and their lengths, executors/PROFILE.md). With every CPU
busy the pauses are longer and rarer ones appear (a 2-vCPU VM: 15 µs typical,
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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class HostNoise:
    rate_per_s: float      # long pauses per second of a thread's compute time
    pauses_s: np.ndarray   # lengths of long pauses to draw from

    @classmethod
    def from_profile(cls, profile: dict[str, Any] | None, busy_threads: int,
                     longer_than_s: float) -> "HostNoise | None":
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
        long = pauses[pauses > longer_than_s]
        if not len(long):
            return None
        # pauses_s is an even subsample of every recorded pause: the long share of the rate is theirs
        return cls(rate * len(long) / len(pauses), long)

    def add(self, rng: np.random.Generator, busy_s: np.ndarray) -> np.ndarray:
        """``busy_s`` with the pauses that fall into each interval added."""
        counts = rng.poisson(self.rate_per_s * np.asarray(busy_s, dtype=float))
        out = np.array(busy_s, dtype=float, copy=True)
        for i in np.flatnonzero(counts):
            out[i] += rng.choice(self.pauses_s, size=counts[i]).sum()
        return out
