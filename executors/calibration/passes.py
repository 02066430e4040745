"""``[passes]``: an atomic-add pass over a buffer another core is reading, measured on two CPUs.

A Lopez worker adds its gradient into the shared sum g with d locked adds (one pass) while the
master, on another CPU, reads g whole and writes θ at every step. Each line of g the master has just
read sits shared in its cache, so each locked add must first invalidate that copy, and each line the
master reads next may have to come back from the adder's cache. Alone, a pass costs d × the
uncontended add; beside the reader it slows down (d = 85k float64, cores sharing an L3: 2.5 → 4.1 ns
an add, the pass 215 → 350 µs). The reader's steps, timed beside passes the same way, were not slowed
(30-34 µs either way), so the simulator stretches only the pass.

Measured here, on the two first usable CPUs, over a buffer of each calibrated model's size
(``sizes_bytes``):

- ``add_s``: seconds per element of a pass alone;
- ``add_shared_s``: the same while the other CPU runs the master's step back to back (θ ← θ − η·acc/(N−1),
  acc read in the pass that writes θ: :func:`simasgd.update_rule.step_scaled`, as the executor's master);
- ``step_s``, ``step_shared_s``: that master's step (median), alone and beside the passes. It reads the
  sum and writes θ where a warm update reads g and writes θ, but the sum's lines come back from the
  adder's cache (680 KB: 17.3 µs alone, 19.3 beside the passes, on a core with a 2 MB L2).

The simulator charges a pass ``add_shared_s`` per element (interpolated in log size to the model's) when
the reader (the master) holds a CPU as the pass begins, and a master's step ``step_shared_s`` when a
worker's pass is under way as it begins, else ``step_s`` (docs/model.md, "Lopez").
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from simasgd.update_rule import step_scaled


@njit(nogil=True, cache=True)
def _passes(acc: np.ndarray, src: np.ndarray, k: int, out: np.ndarray) -> None:
    """``k`` passes of locked adds ``acc[i] += src[i]``; each pass's ns into ``out``."""
    for j in range(k):
        t0 = A.now_ns()
        for i in range(acc.shape[0]):
            A.fetch_add(acc, i, src[i])
        out[j] = A.now_ns() - t0


@njit(nogil=True, cache=True)
def _steps(acc: np.ndarray, theta: np.ndarray, stop: np.ndarray, out: np.ndarray) -> int:
    """The Lopez master's steps (θ ← θ − η·acc/(N−1), one pass) back to back until ``stop`` is set (at
    least one), each step's ns into the ring ``out``; returns the number of steps."""
    n = 0
    while True:
        t0 = A.now_ns()
        step_scaled(theta, theta[:0], acc, 1e-12, 0.0, 0.5)
        out[n % out.shape[0]] = A.now_ns() - t0
        n += 1
        if A.load(stop, 0) != 0:
            return n


def _median_of_ring(out: np.ndarray, n: int) -> float:
    return float(np.median(out[:min(n, out.shape[0])]))


def _pinned(cpu: int, fn: Any, *args: Any) -> Any:
    os.sched_setaffinity(0, {cpu})
    return fn(*args)


def passes_table(model_bytes: Sequence[int], seconds: float) -> dict[str, Any]:
    """``[passes]`` for buffers of each size in ``model_bytes`` (the calibrated models'; ``seconds``:
    roughly the time it may take). The shared add depends on the size: the reader's step is longer on a
    larger buffer, so it takes each line back less often (e.g. 4.1 ns an add at 680 KB, 3.3 at 1 MB)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {"reason": "one usable CPU: no second core to read the buffer"}
    sizes = sorted({max(1024, int(b) // 8) * 8 for b in model_bytes})
    rows = [_one_size(cpus, b // 8, seconds / len(sizes)) for b in sizes]
    return {"sizes_bytes": sizes, "add_s": [r[0] for r in rows], "add_shared_s": [r[1] for r in rows],
            "step_s": [r[3] for r in rows], "step_shared_s": [r[4] for r in rows],
            "passes": min(r[2] for r in rows), "cpus": cpus[:2]}


def _one_size(cpus: list[int], d: int, seconds: float) -> tuple[float, float, int, float, float]:
    """(add alone, add beside the reader, passes timed, the reader's step alone, its step beside the passes)
    for a buffer of ``d`` float64."""
    rng = np.random.default_rng(0)
    acc, src, theta = (rng.random(d) * 1e-3 for _ in range(3))
    k = max(5, int(seconds / 4 / max(d * 3e-9, 1e-6)))  # passes per phase (~3 ns an add)
    pass_ns = np.zeros(k, np.int64)
    stop = np.zeros(1, np.int64)
    mine = os.sched_getaffinity(0)
    step_ns = np.zeros(4096, np.int64)
    try:
        _passes(acc, src, 2, pass_ns)  # compile and warm
        _steps(acc, theta, np.ones(1, np.int64), step_ns)
        _pinned(cpus[0], _passes, acc, src, k, pass_ns)
        add_alone = float(np.median(pass_ns)) / d
        # the reader's steps alone, for as long as the passes took
        timer = threading.Timer(float(pass_ns.sum()) * 1e-9, lambda: stop.__setitem__(0, 1))
        timer.start()
        n = _pinned(cpus[1], _steps, acc, theta, stop, step_ns)
        timer.join()
        step_alone = _median_of_ring(step_ns, n)
        # beside: the reader runs back to back on its CPU while the passes are timed on the other CPU
        stop[0] = 0
        count = [0]
        t = threading.Thread(target=lambda: count.__setitem__(0, _pinned(cpus[1], _steps, acc, theta, stop,
                                                                           step_ns)), daemon=True)
        t.start()
        time.sleep(0.02)
        _pinned(cpus[0], _passes, acc, src, k, pass_ns)
        stop[0] = 1
        t.join()
        add_shared = float(np.median(pass_ns)) / d
        step_shared = _median_of_ring(step_ns, count[0])  # the last steps: those beside the passes
    finally:
        os.sched_setaffinity(0, mine)
    return add_alone * 1e-9, add_shared * 1e-9, k, step_alone * 1e-9, step_shared * 1e-9

