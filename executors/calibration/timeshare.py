"""What a gradient costs when threads time-share one CPU (``benchmarks/contention.py --timeshare``).

The simulator gives a time-shared thread the gradient's calibrated CPU time and, each time it gets its CPU,
the context switch (``[machine] context_switch_s``, a yield ping-pong of two threads with nothing in their
caches). A thread preempted in the middle of a gradient comes back to caches the other threads of its CPU
have refilled with their own buffers; what that costs is not in either figure. This measures it: k threads
pinned to the same CPU, each computing the MLP's gradients (the workloads' ``kernels.loss_and_grad``, the cpu
executor's) at its own copy of θ and stepping that copy, for a window of wall time. Per k: the CPU time a
gradient takes (the threads' CPU time, ``CLOCK_THREAD_CPUTIME_ID``, over the gradients made) and the
preemptions a gradient (the threads' involuntary context switches, ``getrusage(RUSAGE_THREAD)``). Against
k = 1, timed in the same pass: the ratio, and the CPU time each preemption adds,
(c_k − c_1) / preemptions a gradient at k.

Nothing is shared between the threads but the CPU (no θ, no lock, no line another core writes), so a
difference is the time-sharing's alone. The ks of one pass run one after another, and the passes alternate
their order (forwards, backwards), so that a drift of the host's speed weighs on every k alike.
"""

from __future__ import annotations

import os
import resource
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors import settle
from executors.calibration.contention import LAYERS, _go, mlp_workload
from executors.calibration.copies import LR, _update
from executors.cpu.shared import LINE
from executors.kernel import with_kernel
from simasgd.numerics.workloads.kernels import SOURCE_HASH, loss_and_grad

THREADS = (1, 2, 4, 8)


def _make_loop(kernels_version: str = SOURCE_HASH) -> Any:
    """The time-sharing loop, in a closure over ``kernels.SOURCE_HASH`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def timeshare_loop(k: int, own: np.ndarray, g: np.ndarray, X: np.ndarray, y: np.ndarray, shape: np.ndarray,
                       n_rows: int, batch: int, seed: int, start: np.ndarray, stop: np.ndarray,
                       count: np.ndarray) -> None:
        """One of k threads: once all k have arrived, gradients at ``own`` into ``g``, each followed by the
        step of ``own``, until ``stop[0]`` is set; the gradients made into ``count[0]``."""
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return
        np.random.seed(seed)
        idx = np.empty(batch, dtype=np.int64)
        _go(start, k)
        m = 0
        while A.load_acquire(stop, 0) == 0:
            for j in range(batch):
                idx[j] = np.random.randint(0, n_rows)
            loss_and_grad(own, X, y, idx, g, shape)
            _update(own, g, LR)
            m += 1
        count[0] = m

    return timeshare_loop


timeshare_loop = _make_loop()


def measure(k: int, cpu: int, wl: Any, theta0: np.ndarray, batch: int, window_s: float,
            seed: int = 0) -> dict[str, Any]:
    """k threads pinned to ``cpu`` for ``window_s`` of wall time: the CPU time a gradient, the preemptions a
    gradient, the gradients made and the share of the window the threads' CPU time fills."""
    loop = with_kernel(timeshare_loop, wl.kernel)
    start, stop = np.zeros(LINE, dtype=np.int64), np.zeros(LINE, dtype=np.int64)
    counts = [np.zeros(1, dtype=np.int64) for _ in range(k)]
    used: list[tuple[float, int] | None] = [None] * k
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            os.sched_setaffinity(0, {cpu})
            r0, c0 = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time()
            loop(k, theta0.copy(), np.zeros_like(theta0), wl.X, wl.y, wl.shape, int(wl.n_train), batch,
                 seed + 1 + i, start, stop, counts[i])
            c1, r1 = time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD)
            used[i] = (c1 - c0, r1.ru_nivcsw - r0.ru_nivcsw)
        except BaseException as e:  # the window ends for the others too (below); raised after
            errors.append(e)

    # timing.run_threads joins its threads before it returns; this window is ended from outside, so the threads
    # are started here, after the same wait for this process's other threads to go idle
    settle.settle()
    ts = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(k)]
    for t in ts:
        t.start()
    deadline = time.perf_counter() + 60.0
    while start[0] < k and not errors and time.perf_counter() < deadline:
        time.sleep(1e-3)
    arrived = int(start[0])
    t0 = time.perf_counter()
    if arrived == k and not errors:
        time.sleep(window_s)
    stop[0] = 1
    start[0] = k + 1  # those still waiting for the others in _go go on, see the stop, and end
    for t in ts:
        t.join(60.0)
    wall = time.perf_counter() - t0
    if arrived < k and not errors:
        raise RuntimeError(f"timeshare: {arrived} of the {k} threads on CPU {cpu} started within 60 s")
    if errors:
        raise RuntimeError(f"timeshare: a thread of k = {k} failed: {type(errors[0]).__name__}: {errors[0]}")
    if any(u is None for u in used):
        raise RuntimeError(f"timeshare: threads of k = {k} did not finish within 60 s of the window's end")
    made = sum(int(c[0]) for c in counts)
    cpu_s = sum(u[0] for u in used if u is not None)
    preempted = sum(u[1] for u in used if u is not None)
    return {"cpu_per_gradient_s": cpu_s / max(made, 1), "preemptions_per_gradient": preempted / max(made, 1),
            "gradients": made, "busy": cpu_s / wall}


def timeshare(threads: Sequence[int] = THREADS, window_s: float = 1.0, repeats: int = 5,
              layers: Sequence[int] = LAYERS, batch: int = 16, seed: int = 0,
              cpu: int | None = None) -> dict[str, Any]:
    """Every k of ``threads`` (1 first: the reference) on one CPU (``cpu``, default the last this process may
    use), ``repeats`` passes. Per k: the median over the passes of the CPU time a gradient and the
    preemptions a gradient; the ratio to k = 1 pass by pass (median, least, largest); the CPU time a
    preemption adds (median over the passes); every pass's figures under ``samples``."""
    ks = sorted(set(threads) | {1})
    if min(ks) < 1 or repeats < 1 or window_s <= 0:
        raise ValueError(f"timeshare: threads {list(threads)} (each ≥ 1), repeats {repeats} (≥ 1), window "
                         f"{window_s} s (> 0)")
    cpu = sorted(os.sched_getaffinity(0))[-1] if cpu is None else cpu
    wl, theta0 = mlp_workload(layers, batch, seed)
    from executors.cpu.runner import single_threaded_blas

    passes: list[dict[int, dict[str, Any]]] = []
    with single_threaded_blas():
        measure(1, cpu, wl, theta0, batch, min(window_s, 0.2), seed)  # compiled or loaded here, not timed
        for r in range(repeats):
            order = ks if r % 2 == 0 else ks[::-1]
            passes.append({k: measure(k, cpu, wl, theta0, batch, window_s, seed) for k in order})
    return {"layers": list(layers), "batch": batch, "dim": int(theta0.size), "cpu": cpu, "window_s": window_s,
            "repeats": repeats, "threads": ks, **summarize(ks, passes)}


def summarize(ks: Sequence[int], passes: Sequence[dict[int, dict[str, Any]]]) -> dict[str, Any]:
    """The table's columns from the passes' rows (``passes[r][k]``: :func:`measure`'s row)."""
    def med(k: int, key: str) -> float:
        return statistics.median(p[k][key] for p in passes)

    ratios = {k: [p[k]["cpu_per_gradient_s"] / p[1]["cpu_per_gradient_s"] for p in passes] for k in ks}
    per_preemption = {k: [(p[k]["cpu_per_gradient_s"] - p[1]["cpu_per_gradient_s"])
                          / p[k]["preemptions_per_gradient"] for p in passes
                          if k > 1 and p[k]["preemptions_per_gradient"] > 0]
                      for k in ks}  # k = 1 is the reference: none
    return {"cpu_per_gradient_s": [med(k, "cpu_per_gradient_s") for k in ks],
            "preemptions_per_gradient": [med(k, "preemptions_per_gradient") for k in ks],
            "busy": [med(k, "busy") for k in ks],
            "ratio": [statistics.median(ratios[k]) for k in ks],
            "ratio_min": [min(ratios[k]) for k in ks], "ratio_max": [max(ratios[k]) for k in ks],
            "per_preemption_s": [statistics.median(v) if v else None for v in per_preemption.values()],
            "samples": [{str(k): p[k] for k in ks} for p in passes]}
