"""What drifts between calibration and a run, re-measured cheaply right before a compare
(:mod:`simasgd.evaluation.drift`).

Two figures, a fraction of a second in all: the scenario's gradient, timed as ``[gradient."<key>"]
samples_s`` was (:mod:`executors.calibration.gradient`'s timer, one thread, BLAS on one thread, the
scenario's batch size; its median), and the core-to-core hand-off (:func:`executors.c2c.latency_ns`:
which placement the host has put the CPUs in). ``simasgd.evaluation.drift`` loads this module by name
(``simasgd.evaluation.drift.PROBE``), as ``simasgd.machines.profile`` loads the calibrator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from executors import c2c, settle
from executors.calibration.gradient import _prepared, time_gradient
from executors.kernel import with_kernel

WARM_CALLS = 5  # untimed calls first: a kernel loaded from numba's cache still runs its first call cold
MAX_CALLS = 20_000


def probe(workload: Any, seed: int, base_dir: str | None, seconds: float) -> dict[str, Any]:
    """``gradient_median_s`` (None for a ``model = "torch"`` workload: its gradients are timed in processes,
    seconds, not a probe's fraction of one; ``reason`` says so) and ``c2c_ns`` (None with one usable CPU)."""
    out: dict[str, Any] = {"gradient_median_s": None}
    if workload.model == "torch":
        out["reason"] = "a torch workload's gradient is not re-timed before a compare"
    else:
        out["gradient_median_s"] = gradient_median_s(workload, seed, base_dir, seconds)
    out["c2c_ns"] = c2c.latency_ns()
    return out


def gradient_median_s(cfg: Any, seed: int, base_dir: str | None, seconds: float) -> float:
    """The median of back-to-back gradient calls on random batches for about ``seconds`` (at least 20 calls)."""
    from executors.cpu.runner import single_threaded_blas

    wl, theta, n_rows = _prepared(cfg, seed, base_dir)
    settle.settle()  # no BLAS pool left spinning by an earlier call takes the timed thread's CPU
    with single_threaded_blas():
        timer = with_kernel(time_gradient, wl.kernel)
        warm = np.zeros(WARM_CALLS, dtype=np.int64)
        timer(theta, wl.X, wl.y, wl.shape, n_rows, cfg.batch_size, warm, seed)
        per_call = max(float(np.median(warm)) * 1e-9, 1e-7)
        ns = np.zeros(int(min(MAX_CALLS, max(20, seconds / per_call))), dtype=np.int64)
        timer(theta, wl.X, wl.y, wl.shape, n_rows, cfg.batch_size, ns, seed + 1)
    return float(np.median(ns)) * 1e-9
