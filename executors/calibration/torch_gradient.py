"""Gradient times of a ``model = "torch"`` workload for the machine profile (``simasgd calibrate --scenario``).

The same table as ``executors.calibration.gradient.gradient_times`` writes for the numba
workloads (docs/profile.md): per-call samples, and again with k = 2..
min(CPUs, ``MAX_CONCURRENT``) computing at once (``concurrent.k<k>``). What is timed is what a ``torch`` backend worker
does per gradient: draw the minibatch, load θ into the module, forward,
backward, flatten the gradient — on one intra-op thread; the k at once are k
forked processes, as the backend's workers are (k Python threads would share
one interpreter lock and measure that instead).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from executors.calibration.timing import MAX_CONCURRENT, add_concurrent, gradient_table
from executors.torchmp.backend import START_METHOD, one_thread
from executors.torchmp.state import import_torch, shared_copy


def time_calls(wl: Any, theta: np.ndarray, batch: int, out_ns: np.ndarray, seed: int) -> None:
    """Per-gradient times (ns), back to back, into ``out_ns``."""
    rng = np.random.default_rng(seed)
    g = np.zeros_like(theta)
    for k in range(out_ns.shape[0]):
        t0 = time.perf_counter_ns()
        wl.kernel(theta, wl.X, wl.y, wl.sample_batch(rng, batch), g, wl.shape)
        out_ns[k] = time.perf_counter_ns() - t0


def _child(i: int, wl: Any, theta: np.ndarray, batch: int, out: np.ndarray, seed: int, go: np.ndarray) -> None:
    import torch

    torch.set_num_threads(1)
    go[1 + i] = 1
    while go[0] == 0:  # start together: the k measurements overlap
        time.sleep(1e-4)
    time_calls(wl, theta.copy(), batch, out[i], seed)


def concurrent_times(wl: Any, theta: np.ndarray, batch: int, n: int, k: int, seed: int) -> np.ndarray:
    """``n`` gradient times (ns) in each of ``k`` forked processes at once: shape (k, n)."""
    import torch.multiprocessing as mp

    keep: list[Any] = []
    out = shared_copy(np.zeros((k, n), dtype=np.int64), keep)
    go = shared_copy(np.zeros(k + 1, dtype=np.int64), keep)
    ctx = mp.get_context(START_METHOD)
    procs = [ctx.Process(target=_child, args=(i, wl, theta, batch, out, seed + i, go), daemon=True)
             for i in range(k)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 60
    while go[1:].sum() < k and time.monotonic() < deadline and all(p.is_alive() for p in procs):
        time.sleep(1e-3)
    go[0] = 1
    for p in procs:
        p.join(300)
    failed = [p for p in procs if p.exitcode != 0]
    for p in failed:
        if p.is_alive():
            p.kill()
    if failed:
        raise RuntimeError(f"calibrating {wl.description}: a timing process exited with code {failed[0].exitcode}")
    return out.copy()


def gradient_times(cfg: Any, seed: int, base_dir: str | None, seconds: float) -> dict[str, Any]:
    """The profile's ``[gradient."<workload_key>"]`` table for a torch workload (see the module docstring)."""
    from simasgd.numerics.workloads import build_workload

    import_torch()
    wl = build_workload(cfg, seed, base_dir)
    theta = wl.init_theta(np.random.default_rng(seed))
    b = cfg.batch_size
    concurrent: dict[str, Any] = {}
    with one_thread():
        probe = np.zeros(3, dtype=np.int64)
        time_calls(wl, theta.copy(), b, probe, seed)  # also the first calls' lazy initialisation
        per_call = max(float(np.median(probe)) * 1e-9, 1e-6)
        n = int(min(20000, max(20, seconds / per_call)))
        out = np.zeros(n, dtype=np.int64)
        time_calls(wl, theta.copy(), b, out, seed + 1)
        for k in range(2, min(len(os.sched_getaffinity(0)), MAX_CONCURRENT) + 1):
            times = concurrent_times(wl, theta, b, n, k, seed + 2)  # call j of every process, then j+1, ...
            add_concurrent(concurrent, f"k{k}", times.T.reshape(-1), k)
    return gradient_table(out, concurrent, wl, b, dtype=str(cfg.dtype), module=str(cfg.module),
                          timed="python: minibatch draw, θ into the module, forward, backward, flat gradient")
