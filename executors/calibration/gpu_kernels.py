"""The micro-benchmark kernels of :mod:`executors.calibration.gpu` (module-level: the simulator swaps ``cuda`` here)."""

from __future__ import annotations

from typing import Any

from numba import cuda, float32


@cuda.jit
def empty() -> None:
    pass


@cuda.jit
def copy(dst: Any, src: Any) -> None:
    i = cuda.grid(1)
    if i < dst.shape[0]:
        dst[i] = src[i]


@cuda.jit
def atomics(a: Any, per: Any) -> None:
    i = cuda.grid(1)
    for _ in range(per):
        cuda.atomic.add(a, i % a.shape[0], 1.0)


@cuda.jit
def fma(out: Any, iters: Any) -> None:
    i = cuda.grid(1)
    x = float32(i) * float32(1e-6)
    y = float32(1.0)
    for _ in range(iters):
        y = y * x + float32(0.5)
    if i < out.shape[0]:
        out[i] = y
