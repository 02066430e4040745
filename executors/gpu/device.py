"""Where a resident worker is, what time it is, and how a worker's threads meet — on a GPU and under
numba's CUDA simulator.

On a GPU a worker is one thread block: its id is ``blockIdx.x + first`` (``first``: the first worker of a
launch, 0 when all are resident), its lanes the block's threads, and its threads meet at
``syncthreads``. The time is the GPU's global nanosecond timer (``%globaltimer``), read by inline PTX.

numba's simulator runs a grid's blocks one after another, so blocks that wait for each other (a lock,
a device-wide barrier) would never meet. There all workers of a launch share one block, each a group
of ``SIM_LANES`` consecutive threads; a worker's threads meet at a ``threading.Barrier`` of their own,
and the time is the host's monotonic clock. The kernels are written once against :func:`worker`,
:func:`lane`, :func:`lanes`, :func:`wsync`, :func:`now` and :func:`slot` (a worker's part of its block's
shared memory); nothing else differs.

Import only after :func:`executors.cuda.device.require`.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import numpy as np
from numba import cuda as _numba_cuda
from numba import types
from numba.np import numpy_support

from executors.cuda.device import simulator

SIM = simulator()


class _SimCuda:
    """numba.cuda as the simulated thread sees it. The simulator swaps its fake module into a device
    function's globals for the call and swaps it back on return: two simulated threads in device functions
    of one module then undo each other's swap. This stand-in is never swapped; it asks the simulator for the
    running kernel's module on each use (numba.cuda itself outside a kernel, as when decorating)."""

    def __getattr__(self, name: str) -> Any:
        from numba.cuda.simulator.kernel import _get_kernel_context

        ctx = _get_kernel_context()
        got = getattr(ctx if ctx is not None else _numba_cuda, name)
        return _SimShared(got) if name == "shared" and ctx is not None else got


class _SimShared:
    """The simulator's shared memory with the GPU's signature: numba's built-in simulator lacks
    ``alignment``. As the simulator's own, an array is allocated once per call site and block."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def array(self, shape: Any, dtype: Any, alignment: int | None = None) -> Any:
        f = sys._getframe(1)
        key = (f.f_code.co_filename, f.f_lineno)
        allocations = self.real._allocations
        got = allocations.get(key)
        if got is None:
            dt = numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else np.dtype(dtype)
            got = allocations.setdefault(key, np.empty(shape, dt))
        return got


cuda: Any = _SimCuda() if SIM else _numba_cuda
SIM_LANES = 4  # threads of one worker under the simulator (each is a Python thread)
# Shared-memory tiles are per block: one worker's on a GPU, every simulated worker's under the simulator
# (a block of at most 1024 threads), each in its own slot.
SLOTS = 1024 // SIM_LANES if SIM else 1
_barriers: list[threading.Barrier] = []


def sim_barriers(workers: int) -> None:
    """One barrier per worker of the next simulated launch (its ``SIM_LANES`` threads)."""
    _barriers[:] = [threading.Barrier(SIM_LANES) for _ in range(workers)]


def sim_abort() -> None:
    """Release every simulated worker waiting at its barrier (a thread of it failed)."""
    for b in _barriers:
        b.abort()


if SIM:
    @cuda.jit(device=True)
    def worker(first: Any) -> Any:
        return first + cuda.threadIdx.x // SIM_LANES

    @cuda.jit(device=True)
    def lane() -> Any:
        return cuda.threadIdx.x % SIM_LANES

    @cuda.jit(device=True)
    def lanes() -> Any:
        return SIM_LANES

    @cuda.jit(device=True)
    def slot() -> Any:
        return cuda.threadIdx.x // SIM_LANES

    def wsync(w: int) -> None:
        _barriers[w % len(_barriers)].wait()

    def now() -> int:
        return time.perf_counter_ns()

else:  # pragma: no cover - compiled for a GPU only
    from llvmlite import ir

    try:
        from numba.cuda import types as _types
        from numba.cuda.extending import intrinsic
    except ImportError:  # numba's built-in CUDA target (numba < 0.61 without numba-cuda)
        from numba import types as _types
        from numba.core.extending import intrinsic

    @intrinsic
    def _globaltimer(typingctx: Any) -> Any:
        sig = _types.int64()

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), []), "mov.u64 $0, %globaltimer;", "=l",
                               side_effect=True)
            return builder.call(asm, [])

        return sig, codegen

    @cuda.jit(device=True, inline=True)
    def worker(first: Any) -> Any:
        return first + cuda.blockIdx.x

    @cuda.jit(device=True, inline=True)
    def lane() -> Any:
        return cuda.threadIdx.x

    @cuda.jit(device=True, inline=True)
    def lanes() -> Any:
        return cuda.blockDim.x

    @cuda.jit(device=True, inline=True)
    def slot() -> Any:
        return 0

    @cuda.jit(device=True, inline=True)
    def wsync(w: int) -> None:
        cuda.syncthreads()

    @cuda.jit(device=True, inline=True)
    def now() -> Any:
        return _globaltimer()


def launch_shape(workers: int, threads: int) -> tuple[int, int]:
    """(blocks, threads per block) of a launch of ``workers`` workers of ``threads`` lanes each."""
    if SIM:
        return 1, workers * SIM_LANES
    return workers, threads
