"""``[gradient."<key>"]``: a workload's gradient times, alone, in a worker's cycle, k threads at once.

The numba workloads are timed here in nogil loops on the executor's clock; a ``model = "torch"``
workload in forked processes (:mod:`executors.calibration.torch_gradient`). The model's steps inside a
cycle are :mod:`executors.calibration.steps`, the host's shared speed :mod:`executors.calibration.speed`.
Format: docs/profile.md.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.c2c import latency_ns as c2c_latency_ns
from executors.c2c import wait_for as c2c_wait_for
from executors.calibration.speed import speed_from_stamps
from executors.calibration.steps import (
    SHARED_FRESH_TRIES,
    leashed_pool,
    shared_fresh_samples,
    step_samples,
    time_shared_fresh,
    time_steps,
)
from executors.calibration.timing import MAX_CONCURRENT, add_concurrent, gradient_table, run_threads, sample_stats
from executors.kernel import with_kernel
from simasgd.memops import copy_into
from simasgd.workloads.kernels import SOURCE_HASH, grad_over_theta, loss_and_grad

# Before each run of the two-thread Leashed pass, wait up to this long (s) for the CPUs to be where the
# other line-moving tables saw them: a VM's host moves its CPUs and brings them back within seconds
SETTLE_S = 10.0


def _make(kernels_version: str = SOURCE_HASH) -> Any:
    """The gradient timer, in a closure over ``kernels.SOURCE_HASH`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def time_gradient(theta: np.ndarray, X: np.ndarray, y: np.ndarray, shape: np.ndarray, n_rows: np.ndarray,
                      batch: int, out_ns: np.ndarray, seed: np.ndarray, shared: np.ndarray,
                      starts_ns: np.ndarray) -> None:
        """Per-call times (ns) of ``kernels.loss_and_grad`` on random batches, into ``out_ns``; with a
        ``starts_ns`` as long as it (else :data:`NO_STARTS`), each call's start on the shared monotonic
        clock too (two threads' calls paired by time: :mod:`executors.calibration.speed`).

        With a model-sized ``shared`` buffer, each call is preceded (untimed) by a worker's memory
        traffic around its gradient: an update of the shared model (``shared -= η·g``) and a copy of
        it into the buffer the gradient reads (``copy_into(theta, shared)``; the gradient then written over that
        copy where the executor's loops write it, ``kernels.grad_over_theta``). Those 5 model-sized streams
        evict part of the gradient's operands from the core's private cache, which a gradient timed
        back to back on one warm buffer never pays (docs/profile.md, ``cycle_samples_s``)."""
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return
        np.random.seed(seed)
        g = np.zeros_like(theta)
        idx = np.empty(batch, dtype=np.int64)
        cycle = shared.shape[0] == theta.shape[0]
        stamp = starts_ns.shape[0] == out_ns.shape[0]
        # in a cycle, over the copy where the executor's loops write it (kernels.grad_over_theta)
        gr = theta if cycle and grad_over_theta(X, idx, shape) else g
        for k in range(out_ns.shape[0]):
            for i in range(batch):
                idx[i] = np.random.randint(0, n_rows)
            if cycle:
                for j in range(shared.shape[0]):
                    shared[j] -= 1e-12 * gr[j]  # the previous call's gradient (at first: θ or zeros, as small)
                copy_into(theta, shared)
            t0 = A.now_ns()
            loss_and_grad(theta, X, y, idx, gr, shape)
            out_ns[k] = A.now_ns() - t0
            if stamp:
                starts_ns[k] = t0

    return time_gradient


time_gradient = _make()


NO_STARTS = np.zeros(0, dtype=np.int64)  # time_gradient's starts_ns when the starts are not wanted


def gradient_times(cfg: Any, seed: int, base_dir: str | None, seconds: float) -> dict[str, Any]:
    if cfg.model == "torch":  # the user's module: timed from Python, concurrently in processes (executors/torchmp)
        from executors.calibration.torch_gradient import gradient_times as torch_gradient_times
        return torch_gradient_times(cfg, seed, base_dir, seconds)
    from executors.cpu.runner import single_threaded_blas

    wl, theta, n_rows = _prepared(cfg, seed, base_dir)
    probe = np.zeros(3, dtype=np.int64)
    none = np.zeros(0, dtype=theta.dtype)
    with single_threaded_blas():
        timer = with_kernel(time_gradient, wl.kernel)
        timer(theta, wl.X, wl.y, wl.shape, n_rows, cfg.batch_size, probe, seed, none, NO_STARTS)  # compile
        per_call = max(float(np.median(probe)) * 1e-9, 1e-7)
        n = int(min(20000, max(20, seconds / per_call)))
        out = np.zeros(n, dtype=np.int64)
        timer(theta, wl.X, wl.y, wl.shape, n_rows, cfg.batch_size, out, seed + 1, none, NO_STARTS)
        in_cycle = np.zeros(n, dtype=np.int64)
        timer(theta.copy(), wl.X, wl.y, wl.shape, n_rows, cfg.batch_size, in_cycle, seed + 1, theta.copy(),
              NO_STARTS)
        steps = {}  # the model's steps inside a one-thread worker's cycle (executors/calibration/steps.py)
        for name, ns in step_samples(with_kernel(time_steps, wl.kernel), theta, wl, n_rows, cfg.batch_size,
                                     max(20, min(n // 2, 5000)), seed + 1).items():
            st = sample_stats(ns * 1e-9, keep=200)
            steps[f"cycle_{name}_s"], steps[f"cycle_{name}_median_s"] = st["samples_s"], st["median_s"]
        concurrent: dict[str, Any] = {}
        for k in range(2, min(len(os.sched_getaffinity(0)), MAX_CONCURRENT) + 1):
            # k independent threads, each its own θ copy and output (no shared model): what one
            # gradient costs while k-1 others run beside it (shared caches, memory bandwidth, clocks);
            # then the same with each thread's cycle traffic around its calls (``cycle_k<k>``)
            for prefix, shared in (("", False), ("cycle_", True)):
                outs = [np.zeros(n, dtype=np.int64) for _ in range(k)]
                # the plain k = 2 calls' starts too: the host's speed as its CPUs share it (speed.py)
                starts = [np.zeros(n if k == 2 and not shared else 0, dtype=np.int64) for _ in range(k)]
                args = [(theta.copy(), wl.X, wl.y, wl.shape, n_rows, cfg.batch_size, outs[i], seed + 2 + i,
                         theta.copy() if shared else none, starts[i]) for i in range(k)]
                run_threads(timer, args)
                # thread i's samples interleaved with the others' (call j of every thread, then j+1, ...)
                add_concurrent(concurrent, f"{prefix}k{k}", np.stack(outs, axis=1).reshape(-1), k)
                if len(starts[0]):
                    concurrent.update(speed_from_stamps(starts[0], starts[0] + outs[0], starts[1], starts[1] + outs[1]))
    return gradient_table(out, in_cycle, concurrent, wl, cfg.batch_size, dtype=str(cfg.dtype), **steps)


def _prepared(cfg: Any, seed: int, base_dir: str | None) -> tuple[Any, np.ndarray, int]:
    """The workload, its initial θ and its training rows, as the timers take them."""
    from simasgd.workloads import build_workload

    wl = build_workload(cfg, seed, base_dir)
    return wl, wl.init_theta(np.random.default_rng(seed)), int(getattr(wl, "n_train", len(wl.y)))


def leashed_pass_times(cfg: Any, table: dict[str, Any], seed: int, base_dir: str | None, seconds: float,
                       like: float | None) -> dict[str, Any]:
    """``cycle_fresh_k2_*`` of a gradient table (docs/profile.md): Leashed-SGD's pass with two workers
    on two CPUs (:func:`executors.calibration.steps.shared_fresh_samples`), measured in the placement of the
    CPUs ``like`` names (the core-to-core hand-off ``[coherence]`` saw): with the two CPUs in different
    CCXs (hand-off 155-165 ns against 32 in one) each line of the pass crosses the slower link, and the
    pass took 290 µs against 40. ``table``: the workload's gradient table, whose in-cycle gradient and
    pass size the runs. With unbounded retries, then (half as many passes) with persistence 0:
    ``cycle_fresh_k2_<kind>_median_s`` for a claimed destination, a retry's and a kept one's
    (``steps.PASS_KINDS``). Each run starts once the CPUs are in that placement (waiting up to
    ``SETTLE_S``); where no run was, after as many
    tries as allowed, ``cycle_fresh_k2_in_placement = false`` says the figures are another placement's (a profile
    timed in the far one makes the simulator put Leashed at 2 threads, B = 16, at about half the rate
    measured in the near one; ``simasgd.metadata.profile_placement_warnings`` warns of it). Empty for a
    torch workload or with one usable CPU."""
    if cfg.model == "torch":
        return {}
    from executors.cpu.runner import single_threaded_blas

    wl, theta, n_rows = _prepared(cfg, seed, base_dir)
    timer = with_kernel(time_shared_fresh, wl.kernel)
    cycle = max(table["cycle_median_s"] + table.get("cycle_fresh_median_s", 0.0), 1e-6)
    n = int(min(2000, max(20, seconds / 2 / SHARED_FRESH_TRIES / cycle)))
    with single_threaded_blas():
        pool, shared = leashed_pool(theta, 1)  # compile (or load) before anything is timed: one pass alone
        timer(pool, wl.X, wl.y, wl.shape, n_rows, cfg.batch_size, np.zeros(1, np.int64), np.zeros(1, np.int64),
              -1, seed, *shared)
        cpus = sorted(os.sched_getaffinity(0))
        home = (lambda ns: c2c_wait_for(ns, SETTLE_S)) if like is not None else None
        two = shared_fresh_samples(timer, theta, wl, n_rows, cfg.batch_size, n, seed + 3, cpus, run_threads,
                                   probe=c2c_latency_ns, like=like, settle=home)
        # persistence 0: the vector an attempt dropped is built in again after the next gradient
        dropping = None if two is None else shared_fresh_samples(
            timer, theta, wl, n_rows, cfg.batch_size, max(20, n // 2), seed + 5, cpus, run_threads,
            probe=c2c_latency_ns, like=like, persistence=0, settle=home)
    if two is None:
        return {}
    out = {"cycle_fresh_k2_s": sample_stats(two["samples_ns"] * 1e-9, keep=200)["samples_s"],
           "cycle_fresh_k2_median_s": two["median_ns"] * 1e-9, "cycle_fresh_k2_c2c_ns": two["c2c_ns"],
           "cycle_fresh_k2_in_placement": two["in_placement"] and (dropping is None or dropping["in_placement"])}
    by_kind = dict(two["by_kind_ns"])  # claimed and retry; kept from the dropping runs
    if dropping is not None and "kept" in dropping["by_kind_ns"]:
        by_kind["kept"] = dropping["by_kind_ns"]["kept"]
    # ... and their claimed passes: with persistence 0 the workers fall into step, a drop every round, and a
    # claimed pass mostly overlaps the other's, so it is slower than with retries (e.g. 51-53 µs against 46)
    if dropping is not None and "claimed" in dropping["by_kind_ns"]:
        by_kind["claimed_dropping"] = dropping["by_kind_ns"]["claimed"]
    out.update({f"cycle_fresh_k2_{kind}_median_s": ns * 1e-9 for kind, ns in by_kind.items()})
    return out
