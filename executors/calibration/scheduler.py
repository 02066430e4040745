"""``[scheduler]``: the quantum two spinners on one CPU get, a context switch, the executor's spinning
lock waiter between two ``sched_yield`` calls, and the kernel's fair scheduler (EEVDF or CFS) with its
slice parameters where readable. Format: docs/profile.md."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.calibration.timing import run_threads
from executors.calibration.topology import read_text
from executors.cpu.shared import SPINS_BEFORE_YIELD, new_ctrl, spin_pause, stopped


@njit(nogil=True, cache=True)
def _gaps(duration_ns: int, min_gap_ns: int, out: np.ndarray) -> int:
    """Spin reading the clock; a jump > min_gap means this thread was descheduled. Records run lengths."""
    start = A.now_ns()
    last = start
    run_start = start
    n = 0
    while last - start < duration_ns and n < out.shape[0]:
        now = A.now_ns()
        if now - last > min_gap_ns:
            out[n] = last - run_start
            n += 1
            run_start = now
        last = now
    return n


@njit(nogil=True, cache=True)
def _yield_loop(n: int) -> int:
    t0 = A.now_ns()
    for _ in range(n):
        A.sched_yield()
    return A.now_ns() - t0


@njit(nogil=True, cache=True)
def _spin_period(word: np.ndarray, ctrl: np.ndarray, yields: int) -> int:
    """The executor's lock-waiting loop (``shared.word_lock``'s inner loop) on a word that stays taken, for
    ``yields`` of its sched_yield calls; ns taken."""
    t0 = A.now_ns()
    spins = 0
    while A.load_relaxed(word, 0) != 0 and spins < yields * SPINS_BEFORE_YIELD:
        spins += 1
        spin_pause(spins)
        if spins % SPINS_BEFORE_YIELD == 0 and stopped(ctrl):
            break
    return A.now_ns() - t0


def spin_yield_s(yields: int = 20000) -> float:
    """Seconds between two sched_yield calls of a spinning lock waiter, alone on its CPU (the call returns
    at once): the least time it holds a CPU it shares before offering it (simasgd/sim/cpu.py spin_wait)."""
    word, ctrl = np.ones(1, dtype=np.int64), new_ctrl()
    _spin_period(word, ctrl, 10)
    return min(_spin_period(word, ctrl, yields) for _ in range(3)) * 1e-9 / yields


def scheduler(seconds: float) -> dict[str, Any]:
    """Two spinning threads on one CPU: the length of a thread's uninterrupted runs is the quantum."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    out = [np.zeros(10000, dtype=np.int64) for _ in range(2)]
    counts = run_threads(_gaps, [(int(seconds * 1e9), 50_000, out[0]), (int(seconds * 1e9), 50_000, out[1])],
                      cpus=[cpu, cpu])
    runs = np.concatenate([o[1:c] for o, c in zip(out, counts, strict=False)])  # the first run started before the other
    quantum = float(np.median(runs)) * 1e-9 if len(runs) else math.nan
    n = 20000
    ns = run_threads(_yield_loop, [(n,), (n,)], cpus=[cpu, cpu])
    switch = max(ns) * 1e-9 / (2 * n)
    spin = run_threads(spin_yield_s, [()], cpus=[cpu])[0]
    return {"quantum_s": quantum, "context_switch_s": switch, "runs": len(runs), "spin_yield_s": spin,
            "source": "two spinning threads pinned to one CPU; sched_yield ping-pong; spin_yield_s: the "
                      "executor's lock-waiting loop alone on a CPU, time between its sched_yield calls"}


_PARAMS = {"latency_s": "latency_ns", "min_granularity_s": "min_granularity_ns",
           "wakeup_granularity_s": "wakeup_granularity_ns", "base_slice_s": "base_slice_ns"}


def _kernel_version(release: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else None


def scheduler_params(root: Path = Path("/"), release: str | None = None) -> dict[str, Any]:
    """Which fair scheduler runs (EEVDF from 6.6) and its slice parameters where readable (ns -> s).

    CFS exposed them as sysctls (``/proc/sys/kernel/sched_*_ns``, before 5.13) or in debugfs
    (``/sys/kernel/debug/sched/*_ns``); EEVDF keeps only ``base_slice_ns`` there. debugfs is
    root-only, so usually none is readable: then the measured quantum stands for the slice.
    """
    out: dict[str, Any] = {}
    seen: set[str] = set()
    for key, name in _PARAMS.items():
        for path in (root / "proc/sys/kernel" / f"sched_{name}", root / "sys/kernel/debug/sched" / name):
            text = read_text(path)
            if text is not None:
                seen.add(name)
                try:
                    out[key] = int(text) * 1e-9
                    break
                except ValueError:
                    pass
    if release is None:
        release = read_text(root / "proc/sys/kernel/osrelease") or os.uname().release
    version = _kernel_version(release)
    if "base_slice_ns" in seen:
        kernel = "eevdf"  # the file EEVDF renamed min_granularity to
    elif "wakeup_granularity_ns" in seen or "latency_ns" in seen:
        kernel = "cfs"  # both went away with EEVDF
    elif version is not None:
        kernel = "eevdf" if version >= (6, 6) else "cfs"
    else:
        kernel = "unknown"
    out.update(kernel=kernel, kernel_release=release,
               params_source="kernel" if any(k in out for k in _PARAMS) else "measured")
    return out
