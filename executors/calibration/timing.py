"""What every calibration table is built with: threads that time at once, and sample statistics.

:func:`run_threads` runs one timer per thread (pinned where asked) once the process's other threads are
idle (:mod:`executors.settle`) and raises what a thread raised; :func:`gradient_table` and
:func:`add_concurrent` turn a gradient's samples into a ``[gradient."<key>"]`` table (docs/profile.md),
whatever timed them (numba in :mod:`executors.calibration.gradient`, torch in
:mod:`executors.calibration.torch_gradient`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from executors import settle

MAX_CONCURRENT = 4  # gradient times are also measured with k = 2..min(CPUs, this) threads at once


def run_threads(target: Callable[..., Any], args_per_thread: Sequence[tuple[Any, ...]],
             cpus: Sequence[int | None] | None = None, timeout_s: float = 120.0) -> list[Any]:
    """``target(*args)`` on one thread per args tuple (pinned to ``cpus[i]`` where given), their results.

    A thread's exception is raised here, naming the thread, and so is a thread still running after
    ``timeout_s``: a calibration must not go on with the zeros a failed timer left in its arrays."""
    out: list[Any] = [None] * len(args_per_thread)
    errors: list[tuple[int, BaseException]] = []

    def body(i: int, args: tuple[Any, ...]) -> None:
        try:
            cpu = None if cpus is None else cpus[i]
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})
            out[i] = target(*args)
        except BaseException as e:
            errors.append((i, e))

    settle.settle()  # no BLAS pool still spinning from an earlier call takes the timed threads' CPUs
    ts = [threading.Thread(target=body, args=(i, a), daemon=True) for i, a in enumerate(args_per_thread)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout_s)
    if errors:
        i, e = min(errors, key=lambda x: x[0])
        raise RuntimeError(f"calibration thread {i} ({getattr(target, '__name__', target)}) failed: "
                           f"{type(e).__name__}: {e}") from e
    hung = [i for i, t in enumerate(ts) if t.is_alive()]
    if hung:
        raise RuntimeError(f"calibration threads {hung} ({getattr(target, '__name__', target)}) still running "
                           f"after {timeout_s:g} s")
    return out


def sample_stats(samples_s: np.ndarray, keep: int) -> dict[str, Any]:
    s = np.sort(samples_s)
    step = max(1, len(s) // keep)
    return {"mean_s": float(s.mean()), "median_s": float(np.median(s)), "p10_s": float(np.quantile(s, 0.1)),
            "p90_s": float(np.quantile(s, 0.9)), "std_s": float(s.std()), "n": len(s),
            "samples_s": [float(x) for x in samples_s[::step][:keep]]}


def add_concurrent(concurrent: dict[str, Any], key: str, samples_ns: np.ndarray, threads: int = 1) -> None:
    """Samples timed with k = ``threads`` gradients at once (call j of each, then j+1, ...) as
    ``concurrent.<key>``: kept by whole calls (call j of every thread together, so a stored list holds
    every thread's times)."""
    st = sample_stats(samples_ns * 1e-9, keep=200)
    k = max(1, threads)
    calls = (samples_ns[: len(samples_ns) // k * k] * 1e-9).reshape(-1, k)
    step = max(1, len(calls) // max(1, 200 // k))
    concurrent[key] = [float(x) for x in calls[::step][: max(1, 200 // k)].reshape(-1)]
    concurrent.update({f"{key}_mean_s": st["mean_s"], f"{key}_median_s": st["median_s"],
                       f"{key}_p90_s": st["p90_s"], f"{key}_n": st["n"]})


def gradient_table(out_ns: np.ndarray, concurrent: dict[str, Any], wl: Any, batch: int,
                   **extra: Any) -> dict[str, Any]:
    """One ``[gradient."<workload>"]`` table (docs/profile.md) from back-to-back and concurrent samples (ns),
    whatever timed them (numba here, torch in ``executors.calibration.torch_gradient``)."""
    d = sample_stats(out_ns * 1e-9, keep=200)
    d.update(batch_size=batch, dim=int(wl.dim), flops_per_sample=float(wl.flops_per_sample), **extra)
    d["gflops"] = wl.flops_per_sample * batch / d["median_s"] / 1e9
    if concurrent:
        d["concurrent"] = concurrent
    return d
