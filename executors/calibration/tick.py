"""``[tick]``: the periodic interrupt that stops every CPU at once (the kernel's or the hypervisor's timer).

A spinning thread's pauses come at random but also *periodically*: on a VM most of the longer
pauses can be a timer's, one period apart, on every CPU at nearly the same instant. A gradient that
contains such an instant is slower by more than the pause (its caches disturbed too), and two workers
computing at once are slowed *together*: in the executor's Leashed-SGD runs most of one worker's slow
gradients have a slow partner in the other's same round, far more than independent draws pair
(benchmarks/README_sim.md, design measurements). Slowed together, two workers keep
their offset, so what depends on their phase (who wins a CAS, whose writes race) keeps its state
for many rounds.

:func:`tick_table` spins one thread per usable CPU (pinned), each reading the clock in a tight loop
and keeping the time and length of every jump above ``MIN_GAP_S``. Each candidate timer
frequency (``HZ``) folds the pauses onto one period: ``hit_rate`` is the share of its periods with a
pause within ``WINDOW`` of the modal phase. The timer is the highest frequency whose hit rate is
within ``TIE`` of the best: a multiple of its period folds them as well (100 Hz folds a
250 Hz timer to a hit rate of 1.0 too), and a frequency near it folds part of them (300 Hz: 0.33–0.5).
The simulator takes it where the hit rate is at least ``MIN_HIT`` and the pause is short beside the period
(``MAX_PAUSE``: on a loaded host the scheduler's time slices fold as well, a slice long; ``simasgd.sim.tick``).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.calibration.timing import run_threads

HZ = (100, 250, 300, 1000)  # the timer frequencies Linux builds with (CONFIG_HZ); a hypervisor's among them
MIN_GAP_S = 5e-6  # above a clock read's own jitter and the cache misses of a spinning loop (~2 µs)
WINDOW = 0.02  # of the period: a pause this close to the modal phase is the timer's
MIN_HIT = 0.5  # periods with a pause at the modal phase: fewer, and it is no timer
TIE = 0.05  # hit rates this close fold the pauses alike
MAX_PAUSE = 0.1  # of the period: a pause this long is the CPU given to another thread (a loaded host's time
                 # slices, one a period), not an interrupt's handler (microseconds)


@njit(nogil=True, cache=True)
def _spin(duration_ns: int, min_gap_ns: int, go: np.ndarray, t_out: np.ndarray, g_out: np.ndarray,
          stats: np.ndarray) -> None:
    """Spin reading the clock for ``duration_ns`` after ``go``: each jump above ``min_gap_ns``, its start
    (``t_out``) and length (``g_out``), as many as fit; ``stats[0]`` counts them all."""
    while A.load(go, 0) == 0:
        A.cpu_relax()
    start = A.now_ns()
    last = start
    n = 0
    while last - start < duration_ns:
        now = A.now_ns()
        if now - last > min_gap_ns:
            if n < t_out.shape[0]:
                t_out[n] = last
                g_out[n] = now - last
            n += 1
        last = now
    stats[0] = n


def pauses(cpus: list[int], duration_s: float, min_gap_s: float = MIN_GAP_S) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per CPU of ``cpus`` (one pinned spinning thread each, all at once): (starts, lengths) in seconds."""
    cap = int(max(1000, duration_s * 20_000))
    go = np.zeros(1, dtype=np.int64)
    outs = [(np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(1, np.int64)) for _ in cpus]
    _spin(1000, 1000, np.ones(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64))
    threading.Timer(0.02, lambda: go.__setitem__(0, 1)).start()  # once every thread is created and pinned
    run_threads(_spin, [(int(duration_s * 1e9), int(min_gap_s * 1e9), go, t, g, s) for t, g, s in outs], cpus=cpus)
    return [(t[:min(int(s[0]), cap)] * 1e-9, g[:min(int(s[0]), cap)] * 1e-9) for t, g, s in outs]


def fold(starts: np.ndarray, period_s: float, span_s: float) -> tuple[float, float]:
    """(modal phase in seconds, share of the ``span_s / period_s`` periods with a pause within ``WINDOW``
    of it) for pauses starting at ``starts``."""
    if not len(starts) or span_s < period_s:
        return 0.0, 0.0
    bins = 100
    hist = np.bincount(((starts % period_s) / period_s * bins).astype(int) % bins, minlength=bins)
    mode = (np.argmax(hist) + 0.5) / bins * period_s
    near = np.abs(_from_mode(starts, period_s, mode)) <= WINDOW
    periods = np.unique(np.floor(starts[near] / period_s)).size
    return mode, min(1.0, periods / (span_s / period_s))


def _from_mode(starts: np.ndarray, period_s: float, mode_s: float) -> np.ndarray:
    """Each start's phase minus the modal phase ``mode_s``, in periods, wrapped to [−½, ½)."""
    return ((starts % period_s) / period_s - mode_s / period_s + 0.5) % 1.0 - 0.5


def tick_table(duration_s: float, max_cpus: int = 4) -> dict[str, Any]:
    """``[tick]`` (docs/profile.md): the timer's period, how often a period has its pause, the
    pause's length on a spinning thread, and how far apart the CPUs take it."""
    cpus = sorted(os.sched_getaffinity(0))[:max_cpus]
    return {"duration_s": duration_s, "cpus": len(cpus), "min_gap_s": MIN_GAP_S,
            **timer(pauses(cpus, duration_s), duration_s)}


def timer(per_cpu: list[tuple[np.ndarray, np.ndarray]], span_s: float) -> dict[str, Any]:
    """The timer in the pauses (starts, lengths) of threads spinning at once for ``span_s`` on their CPUs:
    ``pauses_per_s``, ``hz``, ``period_s``, ``hit_rate``, and where that is at least ``MIN_HIT``,
    ``pause_s`` and ``skew_s``."""
    starts = [t for t, _ in per_cpu]
    t0 = min((t[0] for t in starts if len(t)), default=0.0)
    hits = {}
    for hz in HZ:
        rates = [fold(t - t0, 1.0 / hz, span_s)[1] for t in starts]
        hits[hz] = float(np.median(rates)) if rates else 0.0
    # the highest frequency of those that fold the pauses best: a multiple of the timer's period folds
    # them as well (and holds more pauses of any kind, one of which lands near its mode by chance)
    top = max(hits.values(), default=0.0)
    hz = max((h for h, r in hits.items() if r >= top - TIE), default=0)
    period, hit = (1.0 / hz, hits[hz]) if hz else (0.0, 0.0)
    out: dict[str, Any] = {"pauses_per_s": [float(len(t) / span_s) for t in starts], "hz": hz,
                           "period_s": period, "hit_rate": hit}
    if hit < MIN_HIT:
        return out
    phases, lengths = [], []
    for t, g in per_cpu:
        mode, _ = fold(t - t0, period, span_s)
        dev = _from_mode(t - t0, period, mode)
        near = np.abs(dev) <= WINDOW
        lengths.append(g[near])
        # the timer's instant on this CPU: the median start near the mode (a pause at random there is rare)
        phases.append(mode + float(np.median(dev[near])) * period)
    diff = [abs((p - phases[0] + period / 2) % period - period / 2) for p in phases]
    pause = float(np.median(np.concatenate(lengths)))
    if pause >= MAX_PAUSE * period:
        out["reason"] = (f"the periodic pauses last {pause * 1e6:.0f} µs of a {period * 1e6:.0f} µs period: the "
                         "CPUs given to other threads, not a timer's interrupt")
        return out
    out.update(pause_s=pause, skew_s=float(max(diff)))
    return out
