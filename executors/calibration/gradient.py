"""``[gradient."<key>"]``: a workload's gradient times, alone, in a worker's cycle, k threads at once.

The numba workloads are timed here in nogil loops on the executor's clock; a ``model = "torch"``
workload in forked processes (:mod:`executors.calibration.torch_gradient`). The model's steps inside a
cycle are :mod:`executors.calibration.steps`. Format: docs/profile.md.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.calibration.steps import step_samples, time_steps
from executors.calibration.timing import MAX_CONCURRENT, add_concurrent, gradient_table, run_threads, sample_stats
from executors.kernel import with_kernel
from simasgd.numerics.workloads.kernels import SOURCE_HASH, loss_and_grad


def _make(kernels_version: str = SOURCE_HASH) -> Any:
    """The gradient timer, in a closure over ``kernels.SOURCE_HASH`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def time_gradient(theta: np.ndarray, X: np.ndarray, y: np.ndarray, shape: np.ndarray, n_rows: np.ndarray,
                      batch: int, out_ns: np.ndarray, seed: int) -> None:
        """Per-call times (ns) of ``kernels.loss_and_grad`` on random batches, back to back, into ``out_ns``."""
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return
        np.random.seed(seed)
        g = np.zeros_like(theta)
        idx = np.empty(batch, dtype=np.int64)
        for k in range(out_ns.shape[0]):
            for i in range(batch):
                idx[i] = np.random.randint(0, n_rows)
            t0 = A.now_ns()
            loss_and_grad(theta, X, y, idx, g, shape)
            out_ns[k] = A.now_ns() - t0

    return time_gradient


time_gradient = _make()


def gradient_times(cfg: Any, seed: int, base_dir: str | None, seconds: float) -> dict[str, Any]:
    if cfg.model == "torch":  # the user's module: timed from Python, concurrently in processes (executors/torchmp)
        from executors.calibration.torch_gradient import gradient_times as torch_gradient_times
        return torch_gradient_times(cfg, seed, base_dir, seconds)
    from executors.cpu.runner import single_threaded_blas

    wl, theta, n_rows = _prepared(cfg, seed, base_dir)
    probe = np.zeros(3, dtype=np.int64)
    with single_threaded_blas():
        timer = with_kernel(time_gradient, wl.kernel)
        timer(theta, wl.X, wl.y, wl.shape, n_rows, cfg.batch_size, probe, seed)  # compile
        per_call = max(float(np.median(probe)) * 1e-9, 1e-7)
        n = int(min(20000, max(20, seconds / per_call)))
        out = np.zeros(n, dtype=np.int64)
        timer(theta, wl.X, wl.y, wl.shape, n_rows, cfg.batch_size, out, seed + 1)
        steps = {}  # the model's steps inside a one-thread worker's cycle (executors/calibration/steps.py)
        for name, ns in step_samples(with_kernel(time_steps, wl.kernel), theta, wl, n_rows, cfg.batch_size,
                                     max(20, min(n // 2, 5000)), seed + 1).items():
            st = sample_stats(ns * 1e-9, keep=200)
            steps[f"cycle_{name}_s"], steps[f"cycle_{name}_median_s"] = st["samples_s"], st["median_s"]
        concurrent: dict[str, Any] = {}
        for k in range(2, min(len(os.sched_getaffinity(0)), MAX_CONCURRENT) + 1):
            # k independent threads, each its own θ copy and output (no shared model): what one
            # gradient costs while k-1 others run beside it (shared caches, memory bandwidth, clocks)
            outs = [np.zeros(n, dtype=np.int64) for _ in range(k)]
            args = [(theta.copy(), wl.X, wl.y, wl.shape, n_rows, cfg.batch_size, outs[i], seed + 2 + i)
                    for i in range(k)]
            run_threads(timer, args)
            # thread i's samples interleaved with the others' (call j of every thread, then j+1, ...)
            add_concurrent(concurrent, f"k{k}", np.stack(outs, axis=1).reshape(-1), k)
    return gradient_table(out, concurrent, wl, cfg.batch_size, dtype=str(cfg.dtype), **steps)


def _prepared(cfg: Any, seed: int, base_dir: str | None) -> tuple[Any, np.ndarray, int]:
    """The workload, its initial θ and its training rows, as the timers take them."""
    from simasgd.numerics.workloads import build_workload

    wl = build_workload(cfg, seed, base_dir)
    return wl, wl.init_theta(np.random.default_rng(seed)), int(getattr(wl, "n_train", len(wl.y)))

