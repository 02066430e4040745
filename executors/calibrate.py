"""Calibrate this machine with micro-benchmarks and write the profile ``machine.preset = "this"`` reads.

Micro-benchmarks only — never the algorithm runs the profile will be compared
with. Each is a numba nogil loop timed with the same monotonic ns clock the
executor records with. See ``executors/PROFILE.md`` for the file format;
in short::

    [machine]                 # every simasgd.machine.Machine field
    sockets = 1 ...
    [calibration]             # when, how long, quick or full
    [gradient."mlp-64-32-10-digits-b16-float64"]
    samples_s = [...]         # per-call gradient times (s)
    mean_s, median_s, p10_s, p90_s, std_s, batch_size, flops_per_sample, dim
    [gradient."mlp-64-32-10-digits-b16-float64".concurrent]
    k2 = [...]                # the same, one of k = 2..min(CPUs, 4) independent threads at once
    k2_mean_s, k2_median_s, k2_p90_s, k2_n
    [copy]                    # θ-sized copies, k threads at once
    threads = [1, 2]; gbs = [...] (aggregate GB/s); bytes = ...
    [locks]  handoff_s, uncontended_s
    [cas]    latency_s, contended_s, failure_rate, failure_cost_s
    [passes] add_s, add_shared_s (an atomic-add pass alone / beside a reader: executors/calibrate_passes.py)
    [c2c]    latency_ns, samples_ns (core-to-core hand-off around [coherence] and [passes]: executors/c2c.py)
    [memory] latency_ns
    [executor] bookkeeping_s (a worker's record and checks between its bump of the version and its next
               read of it: executors/calibrate_bookkeeping.py)
    [scheduler] quantum_s, context_switch_s, source, kernel, latency_s, base_slice_s, ...
    [cache] [copy_by_size] [coherence] [noise.k1] ...   # executors/calibrate_machine.py
    [tick]   hz, period_s, hit_rate, pause_s, skew_s (the timer that stops every CPU at once:
             executors/calibrate_tick.py)
    [peak] gemm_n, gemm_gflops_float32, gemm_gflops_float64   # executors/peak.py (not used by the simulator)
"""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from numba import njit

from executors import atomics as A
from executors import settle
from executors.c2c import latency_ns as c2c_latency_ns
from executors.c2c import ping_pong as _ping_pong
from executors.c2c import wait_for as c2c_wait_for
from executors.calibrate_speed import speed_from_stamps
from executors.calibrate_steps import (SHARED_FRESH_TRIES, shared_fresh_samples, step_samples, time_shared_fresh,
                                      time_steps)
from executors.cpu.shared import SPINS_BEFORE_YIELD, new_ctrl, spin_pause, stopped
from executors.kernel import with_kernel
from simasgd.memops import copy_into
from simasgd import profile as _profile
from simasgd.profile import workload_key  # re-exported: the key is simasgd's
from simasgd.workloads.kernels import SOURCE_HASH, grad_over_theta, loss_and_grad

DEFAULT_WORKLOADS: list[dict[str, Any]] = [
    {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits", "batch_size": 16},
    {"model": "mlp", "layers": [784, 128, 128, 128, 10], "dataset": "synthetic", "batch_size": 16},
    {"model": "mlp", "layers": [784, 128, 128, 128, 10], "dataset": "synthetic", "batch_size": 64},
]

MAX_CONCURRENT = 4  # gradient times are also measured with k = 2..min(CPUs, this) threads at once
# Before each run of the two-thread Leashed pass, wait up to this long (s) for the CPUs to be where the
# other line-moving tables saw them: the host moves a VM's vCPUs and brings them back within seconds
SETTLE_S = 10.0


# --- nopython micro-benchmarks ------------------------------------------------------------------

def _make(kernels_version: str = SOURCE_HASH) -> Any:
    """The gradient timer, in a closure over ``kernels.SOURCE_HASH`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def time_gradient(theta, X, y, shape, n_rows, batch, out_ns, seed, shared, starts_ns):  # noqa: ANN001
        """Per-call times (ns) of ``kernels.loss_and_grad`` on random batches, into ``out_ns``; with a
        ``starts_ns`` as long as it (else :data:`NO_STARTS`), each call's start on the shared monotonic
        clock too (two threads' calls paired by time: :mod:`executors.calibrate_speed`).

        With a model-sized ``shared`` buffer, each call is preceded (untimed) by a worker's memory
        traffic around its gradient: an update of the shared model (``shared -= η·g``) and a copy of
        it into the buffer the gradient reads (``copy_into(theta, shared)``; the gradient then written over that
        copy where the executor's loops write it, ``kernels.grad_over_theta``). Those 5 model-sized streams
        evict part of the gradient's operands from the core's private cache, which a gradient timed
        back to back on one warm buffer never pays (executors/PROFILE.md, ``cycle_samples_s``)."""
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


@njit(nogil=True, cache=True)
def _copy_loop(dst: np.ndarray, src: np.ndarray, reps: int, go: np.ndarray) -> int:
    while A.load(go, 0) == 0:
        A.cpu_relax()
    t0 = A.now_ns()
    for _ in range(reps):
        copy_into(dst, src)
        A.compiler_barrier()
    return A.now_ns() - t0


@njit(nogil=True, cache=True)
def _lock_cycle(word: np.ndarray, n: int) -> int:
    t0 = A.now_ns()
    for _ in range(n):
        while A.cas(word, 0, 0, 1) != 0:
            A.cpu_relax()
        A.store_release(word, 0, 0)
    return A.now_ns() - t0


@njit(nogil=True, cache=True)
def _cas_window(word: np.ndarray, duration_ns: int, counts: np.ndarray, slot: int, go: np.ndarray) -> None:
    """CAS-increment one word for a fixed window after ``go``; counts successes and failures."""
    while A.load(go, 0) == 0:
        A.cpu_relax()
    until = A.now_ns() + duration_ns
    ok, fail = 0, 0
    while A.now_ns() < until:
        for _ in range(64):
            old = A.load(word, 0)
            if A.cas(word, 0, old, old + 1) == old:
                ok += 1
            else:
                fail += 1
    counts[2 * slot] = ok
    counts[2 * slot + 1] = fail


@njit(nogil=True, cache=True)
def _chase(nxt: np.ndarray, steps: int) -> tuple[int, int]:
    p = 0
    t0 = A.now_ns()
    for _ in range(steps):
        p = nxt[p]
    return A.now_ns() - t0, p


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


# --- helpers ----------------------------------------------------------------------------------------

def _threads(target: Callable[..., Any], args_per_thread: Sequence[tuple[Any, ...]],
             cpus: Sequence[int | None] | None = None, timeout_s: float = 120.0) -> list[Any]:
    """``target(*args)`` on one thread per args tuple (pinned to ``cpus[i]`` where given), their results.

    A thread's exception is raised here, naming the thread, and so is a thread still running after
    ``timeout_s``: a calibration must not go on with the zeros a failed timer left in its arrays."""
    out: list[Any] = [None] * len(args_per_thread)
    errors: list[tuple[int, BaseException]] = []

    def body(i: int, args: tuple[Any, ...]) -> None:
        try:
            if cpus is not None and cpus[i] is not None:
                os.sched_setaffinity(0, {cpus[i]})
            out[i] = target(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the calling thread
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


def _stats(samples_s: np.ndarray, keep: int) -> dict[str, Any]:
    s = np.sort(samples_s)
    step = max(1, len(s) // keep)
    return {"mean_s": float(s.mean()), "median_s": float(np.median(s)), "p10_s": float(np.quantile(s, 0.1)),
            "p90_s": float(np.quantile(s, 0.9)), "std_s": float(s.std()), "n": int(len(s)),
            "samples_s": [float(x) for x in samples_s[::step][:keep]]}


# --- measurements -----------------------------------------------------------------------------------

def gradient_times(cfg: Any, seed: int, base_dir: str | None, seconds: float) -> dict[str, Any]:
    if cfg.model == "torch":  # the user's module: timed from Python, concurrently in processes (executors/torchmp)
        from executors.torchmp.calibrate import gradient_times as torch_gradient_times
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
        steps = {}  # the model's steps inside a one-thread worker's cycle (executors/calibrate_steps.py)
        for name, ns in step_samples(with_kernel(time_steps, wl.kernel), theta, wl, n_rows, cfg.batch_size,
                                     max(20, min(n // 2, 5000)), seed + 1).items():
            st = _stats(ns * 1e-9, keep=200)
            steps[f"cycle_{name}_s"], steps[f"cycle_{name}_median_s"] = st["samples_s"], st["median_s"]
        concurrent = {}
        for k in range(2, min(len(os.sched_getaffinity(0)), MAX_CONCURRENT) + 1):
            # k independent threads, each its own θ copy and output (no shared model): what one
            # gradient costs while k-1 others run beside it (shared caches, memory bandwidth, clocks);
            # then the same with each thread's cycle traffic around its calls (``cycle_k<k>``)
            for prefix, shared in (("", False), ("cycle_", True)):
                outs = [np.zeros(n, dtype=np.int64) for _ in range(k)]
                # the plain k = 2 calls' starts too: the host's speed as its CPUs share it (calibrate_speed.py)
                starts = [np.zeros(n if k == 2 and not shared else 0, dtype=np.int64) for _ in range(k)]
                args = [(theta.copy(), wl.X, wl.y, wl.shape, n_rows, cfg.batch_size, outs[i], seed + 2 + i,
                         theta.copy() if shared else none, starts[i]) for i in range(k)]
                _threads(timer, args)
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
    """``cycle_fresh_k2_*`` of a gradient table (executors/PROFILE.md): Leashed-SGD's pass with two workers
    on two CPUs (:func:`executors.calibrate_steps.shared_fresh_samples`), measured in the placement of the
    CPUs ``like`` names (the core-to-core hand-off ``[coherence]`` saw): where the host put the two vCPUs
    in different CCXs of the 2-vCPU EPYC (hand-off 155-165 ns against 32) the pass took 290 µs, against
    40. ``table``: the workload's gradient table, whose in-cycle gradient and pass size the runs. With
    unbounded retries, then (half as many passes) with persistence 0: ``cycle_fresh_k2_<kind>_median_s``
    for a claimed destination, a retry's and a kept one's (``calibrate_steps.PASS_KINDS``). Each run
    starts once the CPUs are in that placement (waiting up to ``SETTLE_S``); where no run was, after as many
    tries as allowed, ``cycle_fresh_k2_in_placement = false`` says the figures are another placement's (at
    13:11 on 2026-11-26 every run of a calibration was in the far one: the simulator then put Leashed at
    2 threads, B = 16, at half the measured rate, benchmarks/fidelity.md;
    ``simasgd.metadata.profile_placement_warnings``). Empty for a torch workload or with one usable CPU."""
    if cfg.model == "torch":
        return {}
    from executors.calibrate_steps import leashed_pool
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
        two = shared_fresh_samples(timer, theta, wl, n_rows, cfg.batch_size, n, seed + 3, cpus, _threads,
                                   probe=c2c_latency_ns, like=like, settle=home)
        # persistence 0: the vector an attempt dropped is built in again after the next gradient
        dropping = None if two is None else shared_fresh_samples(
            timer, theta, wl, n_rows, cfg.batch_size, max(20, n // 2), seed + 5, cpus, _threads,
            probe=c2c_latency_ns, like=like, persistence=0, settle=home)
    if two is None:
        return {}
    out = {"cycle_fresh_k2_s": _stats(two["samples_ns"] * 1e-9, keep=200)["samples_s"],
           "cycle_fresh_k2_median_s": two["median_ns"] * 1e-9, "cycle_fresh_k2_c2c_ns": two["c2c_ns"],
           "cycle_fresh_k2_in_placement": two["in_placement"] and (dropping is None or dropping["in_placement"])}
    by_kind = dict(two["by_kind_ns"])  # claimed and retry; kept from the dropping runs
    if dropping is not None and "kept" in dropping["by_kind_ns"]:
        by_kind["kept"] = dropping["by_kind_ns"]["kept"]
    # ... and their claimed passes: with persistence 0 the workers fall into step, a drop every round, and a
    # claimed pass mostly overlaps the other's (on the 2-vCPU EPYC 51-53 µs against 46 with retries)
    if dropping is not None and "claimed" in dropping["by_kind_ns"]:
        by_kind["claimed_dropping"] = dropping["by_kind_ns"]["claimed"]
    out.update({f"cycle_fresh_k2_{kind}_median_s": ns * 1e-9 for kind, ns in by_kind.items()})
    return out


def add_concurrent(concurrent: dict[str, Any], key: str, samples_ns: np.ndarray, threads: int = 1) -> None:
    """Samples timed with k = ``threads`` gradients at once (call j of each, then j+1, ...) as
    ``concurrent.<key>``: kept by whole calls (call j of every thread together, so a stored list holds
    every thread's times). Call j of two threads is not at the same moment (their starts and speeds
    differ), so what the CPUs share is measured apart, by time (:mod:`executors.calibrate_speed`)."""
    st = _stats(samples_ns * 1e-9, keep=200)
    k = max(1, threads)
    calls = (samples_ns[: len(samples_ns) // k * k] * 1e-9).reshape(-1, k)
    step = max(1, len(calls) // max(1, 200 // k))
    concurrent[key] = [float(x) for x in calls[::step][: max(1, 200 // k)].reshape(-1)]
    concurrent.update({f"{key}_mean_s": st["mean_s"], f"{key}_median_s": st["median_s"],
                       f"{key}_p90_s": st["p90_s"], f"{key}_n": st["n"]})


def gradient_table(out_ns: np.ndarray, in_cycle_ns: np.ndarray, concurrent: dict[str, Any], wl: Any, batch: int,
                   **extra: Any) -> dict[str, Any]:
    """One ``[gradient."<workload>"]`` table (executors/PROFILE.md) from back-to-back, in-cycle and
    concurrent samples (ns), whatever timed them (numba here, torch in ``executors.torchmp.calibrate``)."""
    d = _stats(out_ns * 1e-9, keep=200)
    cyc = _stats(in_cycle_ns * 1e-9, keep=200)
    d.update(cycle_samples_s=cyc["samples_s"], cycle_mean_s=cyc["mean_s"], cycle_median_s=cyc["median_s"],
             cycle_p90_s=cyc["p90_s"])
    d.update(batch_size=batch, dim=int(wl.dim), flops_per_sample=float(wl.flops_per_sample), **extra)
    d["gflops"] = wl.flops_per_sample * batch / d["median_s"] / 1e9
    if concurrent:
        d["concurrent"] = concurrent
    return d


def copy_bandwidth(n_bytes: int, max_threads: int, seconds: float) -> dict[str, Any]:
    n = n_bytes // 8
    gbs, threads = [], list(range(1, max_threads + 1))
    for k in threads:
        bufs = [(np.zeros(n), np.ones(n)) for _ in range(k)]
        go = np.ones(1, dtype=np.int64)
        t1 = _copy_loop(bufs[0][0], bufs[0][1], 1, go)
        reps = int(max(1, min(10000, seconds / len(threads) / max(t1 * 1e-9, 1e-7))))
        go[0] = 0
        args = [(dst, src, reps, go) for dst, src in bufs]
        timer = threading.Timer(0.05, lambda: go.__setitem__(0, 1))
        timer.start()
        ns = _threads(_copy_loop, args)
        # bytes read + written per copy, all threads, over the slowest thread's time
        gbs.append(2 * n * 8 * reps * k / (max(ns) * 1e-9) / 1e9)
    return {"threads": threads, "gbs": gbs, "bytes": n * 8}


def lock_figures(rounds: int, seconds: float = 1.0) -> dict[str, Any]:
    word, ready = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    trial = _threads(_ping_pong, [(word, ready, 0, 200), (word, ready, 1, 200)])  # on a loaded machine a
    rounds = int(max(200, min(rounds, seconds / max(max(trial) * 1e-9 / 400, 1e-9))))  # hand-off can take a quantum
    word[0], ready[0] = 0, 0
    ns = _threads(_ping_pong, [(word, ready, 0, rounds), (word, ready, 1, rounds)])
    handoff = max(ns) * 1e-9 / (2 * rounds)
    w = np.zeros(1, dtype=np.int64)
    unc = _lock_cycle(w, rounds * 10) * 1e-9 / (rounds * 10)
    return {"handoff_s": handoff, "uncontended_s": unc, "rounds": rounds}


def cas_figures(seconds: float) -> dict[str, Any]:
    """CAS cost alone, then two threads on one word for the same window (time-sliced threads overlap less)."""
    word = np.zeros(1, dtype=np.int64)
    counts = np.zeros(4, dtype=np.int64)
    go = np.ones(1, dtype=np.int64)
    window = int(seconds * 1e9)
    _cas_window(word, window, counts, 0, go)
    latency = seconds / max(1, counts[0] + counts[1])
    go[0], counts[:] = 0, 0
    timer = threading.Timer(0.05, lambda: go.__setitem__(0, 1))
    timer.start()
    _threads(_cas_window, [(word, window, counts, 0, go), (word, window, counts, 1, go)])
    ok, fail = int(counts[0] + counts[2]), int(counts[1] + counts[3])
    contended = seconds / max(1, ok)  # wall time per successful increment, both threads together
    return {"latency_s": latency, "contended_s": contended, "failure_rate": fail / max(1, ok + fail),
            "failure_cost_s": max(0.0, (contended - latency) * ok / fail) if fail else 0.0,
            "operations": ok + fail}


def memory_latency(n_bytes: int, steps: int, seed: int) -> float:
    n = n_bytes // 8
    perm = np.random.default_rng(seed).permutation(n)
    nxt = np.empty(n, dtype=np.int64)
    nxt[perm] = np.roll(perm, -1)  # one random cycle through every slot: each load misses the caches
    _chase(nxt, 10)
    ns, _ = _chase(nxt, steps)
    return ns / steps


def scheduler(seconds: float) -> dict[str, Any]:
    """Two spinning threads on one CPU: the length of a thread's uninterrupted runs is the quantum."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    out = [np.zeros(10000, dtype=np.int64) for _ in range(2)]
    counts = _threads(_gaps, [(int(seconds * 1e9), 50_000, out[0]), (int(seconds * 1e9), 50_000, out[1])],
                      cpus=[cpu, cpu])
    runs = np.concatenate([o[1:c] for o, c in zip(out, counts)])  # the first run started before the other
    quantum = float(np.median(runs)) * 1e-9 if len(runs) else math.nan
    n = 20000
    ns = _threads(_yield_loop, [(n,), (n,)], cpus=[cpu, cpu])
    switch = max(ns) * 1e-9 / (2 * n)
    spin = _threads(spin_yield_s, [()], cpus=[cpu])[0]
    return {"quantum_s": quantum, "context_switch_s": switch, "runs": int(len(runs)), "spin_yield_s": spin,
            "source": "two spinning threads pinned to one CPU; sched_yield ping-pong; spin_yield_s: the "
                      "executor's lock-waiting loop alone on a CPU, time between its sched_yield calls"}


def topology() -> dict[str, int]:
    from executors.cpu.placement import read_topology

    t = read_topology()
    return {"sockets": t.machine.sockets, "cores_per_socket": t.machine.cores_per_socket,
            "threads_per_core": t.machine.threads_per_core, "numa_nodes": t.numa_nodes}


def calibrate(workloads: Sequence[Any] | None = None, quick: bool = False, seed: int = 0,
              base_dir: str | None = None, log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Measure everything; returns the profile as a dict (``write_profile`` saves it)."""
    from simasgd.scenario import WorkloadConfig

    t_start = time.monotonic()
    scale = 0.1 if quick else 1.0
    topo = topology()
    cfgs = list(workloads) if workloads is not None else [
        WorkloadConfig(**w) for w in (DEFAULT_WORKLOADS[:1] if quick else DEFAULT_WORKLOADS)]
    grads = {}
    for cfg in cfgs:
        log(f"gradient {workload_key(cfg)}")
        grads[workload_key(cfg)] = gradient_times(cfg, seed, base_dir, 4.0 * scale)
    log("copy bandwidth")
    biggest = max((g["dim"] for g in grads.values()), default=100_000)
    copy = copy_bandwidth(max(biggest * 8, 8 << 20 if not quick else 1 << 20), os.cpu_count() or 1, 3.0 * scale)
    log("locks")
    locks = lock_figures(int(100_000 * scale))
    log("memory latency")
    lat = memory_latency((256 << 20) if not quick else (16 << 20), int(2_000_000 * scale), seed)
    log("scheduler")
    sched = scheduler(2.0 * scale)
    machine_tables = _machine_tables(quick, log)
    log("arithmetic peak")
    from executors.peak import peak_table

    peak = peak_table(quick)
    log("CAS, atomic passes beside a reader")
    from executors import c2c
    from executors.calibrate_passes import passes_table

    coh = machine_tables.get("coherence") or {}
    like = float(np.median(coh["c2c_ns"])) if coh.get("c2c_ns") else None
    if not c2c.same_mode(locks["handoff_s"] * 1e9, like):  # the lock hand-off is a line moving too
        locks = c2c.measured(lock_figures, int(100_000 * scale), like=like)
    cas = c2c.measured(cas_figures, 0.5 * scale, like=like)  # two threads' CAS on one word move its line too
    sizes = sorted({g["dim"] * np.dtype(g.get("dtype", "float64")).itemsize for g in grads.values()}) or [biggest * 8]
    passes = c2c.measured_rows(passes_table, sizes, 1.0 * scale, like=like)  # in the placement [coherence] saw
    for cfg in cfgs:  # Leashed's pass with two workers, in that placement too
        log(f"Leashed's pass, two workers: {workload_key(cfg)}")
        key = workload_key(cfg)
        grads[key].update(leashed_pass_times(cfg, grads[key], seed, base_dir, 2.0 * scale, like))
    log("the executor's bookkeeping")
    from executors.calibrate_bookkeeping import bookkeeping_table

    books = bookkeeping_table(rounds=40 if not quick else 8)
    sched.update(machine_tables.pop("scheduler"))
    top = max(grads.values(), key=lambda g: g["flops_per_sample"] * g["batch_size"]) if grads else None
    mach = {
        "sockets": topo["sockets"], "cores_per_socket": topo["cores_per_socket"],
        "threads_per_core": topo["threads_per_core"],
        "local_latency_ns": lat, "remote_latency_ns": lat,  # one NUMA node: no remote memory to measure
        "mem_bandwidth_gbs": max(copy["gbs"]) / max(1, topo["sockets"]),
        "link_bandwidth_gbs": max(copy["gbs"]),
        "gflops_per_core": top["gflops"] if top else 1.0,
        "quantum_s": sched["quantum_s"] if math.isfinite(sched["quantum_s"]) else 4e-3,
        "context_switch_s": sched["context_switch_s"],
    }
    return {"machine": mach,
            "calibration": {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": quick,
                            "seconds": time.monotonic() - t_start, "numa_nodes": topo["numa_nodes"],
                            "cpu_count": os.cpu_count() or 1, "loadavg": list(os.getloadavg()),
                            "remote_latency": "measured" if topo["numa_nodes"] > 1 else "= local (one NUMA node)"},
            "gradient": grads, "copy": copy, "locks": locks, "cas": cas, "memory": {"latency_ns": lat},
            "scheduler": sched, "peak": peak, "passes": passes, "executor": books, **_c2c_table(like, coh, passes),
            **machine_tables}


def _c2c_table(like: float | None, *tables: dict[str, Any]) -> dict[str, Any]:
    """``[c2c]``: the core-to-core hand-off latency the line-moving tables were measured at (executors/c2c.py):
    ``like``, the placement ``[coherence]`` was measured in, and every probe taken around ``tables``."""
    samples = [x for t in tables for x in t.get("c2c_ns") or []]
    return {"c2c": {"latency_ns": like, "samples_ns": samples}} if like is not None else {}


def _machine_tables(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """[cache], [copy_by_size], [coherence], [noise], [tick] and the kernel's scheduler parameters.

    About 8 s on a 2-CPU machine (under 1.5 s when quick): copy 2.5 s, coherence 2.5 s, noise 2 s, tick 1 s.
    """
    from executors import calibrate_machine as cm

    scale = 0.1 if quick else 1.0
    cache = cm.cache_levels()
    sizes = cm.copy_sizes(cache, quick)
    log("copy bandwidth by size")
    by_size = cm.copy_by_size(sizes, 2.5 * scale)
    # coherence only where A's lines can still sit in a cache (up to 2 x LLC): beyond, both read DRAM
    llc = max(cache["sizes_bytes"] or [16 << 20])
    top = min(max(2 * llc, 1 << 20), 64 << 20)
    log("coherence")
    from executors import c2c

    coh = c2c.measured_rows(cm.coherence, [s for s in sizes if 64 << 10 <= s <= top], 2.5 * scale,
                            dict(zip(by_size["sizes_bytes"], by_size["gbs"])))  # in one placement of the CPUs
    log("host noise")
    n_cpus = len(os.sched_getaffinity(0))
    noise = cm.noise(max(0.05, 4.0 * scale / n_cpus))  # long pauses are rare: seconds to see a few dozen
    log("timer tick")
    from executors.calibrate_tick import tick_table

    tick = tick_table(max(0.2, 1.0 * scale))  # 250 periods of a 250 Hz timer
    return {"cache": cache, "copy_by_size": by_size, "coherence": coh, "noise": noise, "tick": tick,
            "scheduler": cm.scheduler_params()}


# --- TOML out: the format is simasgd's (simasgd/profile.py) -------------------------------------------

def to_toml(profile: dict[str, Any]) -> str:
    return _profile.to_toml(profile)


def write_profile(profile: dict[str, Any], path: Path) -> Path:
    """``simasgd.profile.write``: atomic, with the ``[profile]`` format table."""
    return _profile.write(profile, path)
