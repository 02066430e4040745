"""A core's arithmetic peak, measured: a large GEMM with the BLAS the kernels call.

The MLP kernels' matrix products go through ``kernels.gemm``: in float32, numpy's own OpenBLAS where
the wheel carries one (simasgd/numerics/blas.py); otherwise ``np.dot``, which numba hands to the BLAS
that SciPy links (``scipy.linalg.cython_blas``). :func:`gemm_gflops` times that same call on square
matrices large enough for the BLAS to reach its steady state, on one thread: the roofline the
gradient's GFLOP/s is compared with (``benchmarks/cpu_throughput.py``).

No FMA-loop peak: numba-compiled loops of independent ``acc·x + y`` chains reach a quarter of the
GEMM's rate (7-27 GFLOP/s against 100, float32, on an AVX-512 core): they measure how LLVM vectorised
the loop, not the core. A tuned BLAS GEMM is the best compiled code for this core
there is, so it is the peak the kernels are held to.

``simasgd calibrate`` writes it into the profile's ``[peak]`` table (``peak_table``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from simasgd.numerics.workloads import kernels

GEMM_N = 1024  # 2 GFLOP a product: the BLAS's blocking is in steady state, and one call is ~10-40 ms


def _make(kernels_version: str = kernels.SOURCE_HASH) -> Any:
    """The timed GEMM loop, in a closure over ``kernels.SOURCE_HASH`` (see
    :mod:`simasgd.numerics.workloads.kernels`)."""

    @njit(nogil=True, cache=True)
    def gemm_loop(a: np.ndarray, b: np.ndarray, c: np.ndarray, reps: int) -> int:
        if len(kernels_version) == 0:  # referenced, so a kernel edit recompiles this loop
            return 0
        t0 = A.now_ns()
        for _ in range(reps):
            kernels.gemm(a, b, c, False, False)
        return A.now_ns() - t0

    return gemm_loop


_gemm_loop = _make()


def _best_rate(run: Any, flops_per_rep: float, seconds: float) -> float:
    """GFLOP/s of the fastest of several timed batches (peak: the least disturbed batch)."""
    run(1)  # compile and warm
    reps = 1
    while True:  # a batch long enough to time (≥ 20 ms)
        ns = run(reps)
        if ns >= 20e6 or reps >= 1 << 30:
            break
        reps *= 4
    best, until = flops_per_rep * reps / ns, time.monotonic() + seconds
    while time.monotonic() < until:
        best = max(best, flops_per_rep * reps / run(reps))
    return best  # flop per ns = GFLOP/s


def gemm_gflops(dtype: str = "float32", n: int = GEMM_N, seconds: float = 1.0) -> float:
    """One thread's GFLOP/s of C = A·B (n × n, ``dtype``) through the kernels' ``gemm``."""
    from executors.cpu.runner import single_threaded_blas

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
    c = np.empty((n, n), dtype)
    with single_threaded_blas():
        return _best_rate(lambda reps: _gemm_loop(a, b, c, reps), 2.0 * n ** 3, seconds)


def peak_table(quick: bool = False) -> dict[str, Any]:
    """``[peak]``: GEMM GFLOP/s of one thread, float32 and float64."""
    s = 0.1 if quick else 1.0
    n = 256 if quick else GEMM_N
    out: dict[str, Any] = {"gemm_n": n}
    for dt in ("float32", "float64"):
        out[f"gemm_gflops_{dt}"] = gemm_gflops(dt, n, s)
    return out
