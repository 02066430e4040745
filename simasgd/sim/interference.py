"""Gradients that slow each other down while they compute at once (``[sim] gradient_interference``).

Two workers' gradients on two CPUs share what the CPUs share: the last-level cache, memory bandwidth and,
on a VM, whatever the host's cores share. Calibration measures it (docs/profile.md,
``[gradient."<key>"].concurrent``): a gradient with a worker's cycle traffic around it took 160.5 µs
alone and 179.4 µs beside another (``cycle_k2``), two CPUs sharing an L3. Drawing every gradient of a
2-worker run from the k = 2 samples charges the slowdown whether or not the other worker computes at
that moment, and draws the two workers' times independently. The measured gradients that overlap in
time had durations correlated at 0.4–0.9 (mutex, HOGWILD!, rwlock, 2 threads; simulated ~0), and the
lock-based workers fell into step.

Here a gradient is its work alone (a draw from the one-thread samples), done at rate 1 / s_m while m
gradients compute at once, s_m = median(k = m samples) / median(k = 1 samples): processor sharing with
a calibrated slowdown. Each change in the number computing reschedules every gradient under way.
Only where every worker has a CPU of its own (time-shared CPUs keep the k-at-once samples).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

_EPS = 1e-15


class Overlap:
    """The gradients computing now, and each one's rate by how many they are."""

    def __init__(self, env: simpy.Environment, slowdown: list[float]) -> None:
        self.env = env
        self.slowdown = slowdown      # slowdown[m - 1]: s_m, m gradients at once (s_1 = 1)
        self.computing = 0
        self.changed = env.event()    # succeeds (and is replaced) whenever `computing` changes

    def _change(self, by: int) -> None:
        self.computing += by
        old, self.changed = self.changed, self.env.event()
        old.succeed()

    def rate(self) -> float:
        """Work done per second by each gradient under way."""
        return 1.0 / self.slowdown[min(self.computing, len(self.slowdown)) - 1]

    def gradient(self, work: float) -> Generator[simpy.Event, object, None]:
        """A gradient of ``work`` seconds alone: done at the current rate, rescheduled at every change."""
        self._change(+1)
        left = work
        while left > _EPS:
            rate, t0, changed = self.rate(), self.env.now, self.changed
            yield self.env.any_of([self.env.timeout(left / rate), changed])
            left -= (self.env.now - t0) * rate
        self._change(-1)


def slowdowns(table: dict[str, Any] | None, at_once: int, in_cycle: bool) -> list[float] | None:
    """[1, s_2, …, s_k] from a gradient table's one-thread and k-thread samples (the in-cycle ones with
    ``in_cycle`` where the table has them), k = ``at_once``; None without the k-thread samples."""
    if not table or at_once < 2:
        return None
    prefix = "cycle_" if in_cycle and table.get("cycle_samples_s") else ""
    alone = table.get(f"{prefix}samples_s")
    conc = table.get("concurrent")
    if not alone or not isinstance(conc, dict):
        return None
    base = float(np.median(alone))
    out = [1.0]
    for k in range(2, at_once + 1):
        s = conc.get(f"{prefix}k{k}")
        if not isinstance(s, list) or not s:
            return None
        out.append(max(1.0, float(np.median(s)) / base))  # never faster together than alone
    return out
