"""The float32 GEMM the MLP kernels call: numpy's own OpenBLAS where the wheel carries one.

numba compiles ``np.dot`` into a call to the BLAS that SciPy links (``scipy.linalg.cython_blas``).
numpy's manylinux wheels carry a second, newer OpenBLAS (``numpy.libs/libscipy_openblas64_*``,
64-bit integers). On an AVX-512 core its single-precision GEMM runs the MLP's ``A·B`` and
``Aᵀ·B`` faster than SciPy's, its ``A·Bᵀ`` slower, and its float64 GEMM no faster (the
figures: benchmarks/README_cpu.md, design measurements). So
``kernels.gemm`` takes every float32 product from it, ``A·Bᵀ`` included, and leaves float64 to
``np.dot``.

Why ``A·Bᵀ`` too: one library per gradient. Each OpenBLAS keeps its own pool of threads, which
spin for about 0.1 s after a multi-threaded call. Where the thread count is not limited to one
(the simulator's loss evaluations, a notebook), a gradient alternating between the two libraries
has each library's call wait on a pool thread the other's spinning pool keeps off the CPU: such a
gradient is many times slower than one from a single library.

How the kernels reach it and stay cacheable: they call an external function named
:data:`SYMBOL`, declared with the CBLAS ABI below. :func:`register` points that name at numpy's
``scipy_cblas_sgemm64_`` in LLVM's symbol table (as numba does for its own helpers), before any
kernel is compiled or loaded from numba's cache. No address is baked into machine code, so a cached
kernel links against whichever provider this process registered. Where numpy carries no such
library (a source build, another platform) the name points at :func:`_fallback`, a compiled
function with the same ABI that calls ``np.dot``: the kernels then use SciPy's BLAS, as numba does.

The library is the one numpy loaded (``dlopen`` of the same file returns the same handle), so
``threadpoolctl`` limits its threads together with SciPy's (``executors.cpu.runner.single_threaded_blas``).
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

SYMBOL = "simasgd_cblas_sgemm64"

# CBLAS enums (cblas.h)
ROW_MAJOR = 101
NO_TRANS = 111
TRANS = 112

_NUMPY_SYMBOL = "scipy_cblas_sgemm64_"
_CONFIG_SYMBOL = "scipy_openblas_get_config64_"


def signature() -> Any:
    """void cblas_sgemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), 64-bit ints."""
    from numba import types

    i32, i64, f32 = types.int32, types.int64, types.float32
    p = types.CPointer(f32)
    return types.void(i32, i32, i32, i64, i64, i64, f32, p, i64, p, i64, f32, p, i64)


@lru_cache(maxsize=1)
def _numpy_openblas() -> tuple[int, str] | None:
    """Address of numpy's ``scipy_cblas_sgemm64_`` and the library's build string, if numpy carries it."""
    libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    for path in sorted(libs.glob("libscipy_openblas64_*")):
        try:
            lib = ctypes.CDLL(str(path))
            fn = getattr(lib, _NUMPY_SYMBOL)
        except (OSError, AttributeError):
            continue
        config = getattr(lib, _CONFIG_SYMBOL, None)
        name = path.name
        if config is not None:
            config.restype = ctypes.c_char_p
            name = f"{config().decode(errors='replace').strip()} ({path.name})"
        return ctypes.cast(fn, ctypes.c_void_p).value or 0, name
    return None


def provider() -> str:
    """What :data:`SYMBOL` runs in this process (recorded with each run's versions)."""
    found = _numpy_openblas()
    return f"numpy.libs {found[1]}" if found else "np.dot (numba's BLAS: scipy.linalg.cython_blas)"


@lru_cache(maxsize=1)
def _fallback_cfunc() -> Any:
    """A compiled CBLAS-ABI sgemm that calls ``np.dot`` (kept alive by the cache: its code is registered)."""
    from numba import carray, cfunc

    @cfunc(signature(), nopython=True, cache=True)
    def sgemm_by_dot(order: int, ta: int, tb: int, m: int, n: int, k: int, alpha: float, a: Any, lda: int, b: Any,
                     ldb: int,
                     beta: float, c: Any, ldc: int) -> None:
        # Only the calls kernels.gemm makes: row-major, ld = the row's width, A and B not both
        # transposed, alpha 1, beta 0 (C overwritten).
        C = carray(c, (m, n))
        if ta == TRANS:
            np.dot(carray(a, (k, m)).T, carray(b, (k, n)), C)
        elif tb == TRANS:
            np.dot(carray(a, (m, k)), carray(b, (n, k)).T, C)
        else:
            np.dot(carray(a, (m, k)), carray(b, (k, n)), C)

    return sgemm_by_dot


def _fallback() -> int:
    """Address of :func:`_fallback_cfunc`'s function."""
    return _fallback_cfunc().address


@lru_cache(maxsize=1)
def register() -> int:
    """Point :data:`SYMBOL` at the provider, once. Returns the address registered."""
    import llvmlite.binding as ll

    found = _numpy_openblas()
    address = found[0] if found else _fallback()
    ll.add_symbol(SYMBOL, address)
    return address


def single_threaded() -> Any:
    """BLAS limited to one thread, the libraries numba's kernels call included (a context manager).

    numba reaches BLAS through ``scipy.linalg.cython_blas``, whose OpenBLAS is loaded lazily, by the first
    compile, and threadpoolctl only limits libraries already loaded: so load it first. Otherwise a process's
    small GEMMs (a worker's gradient, the simulator's numerics) fan out over busy-waiting BLAS threads, and
    on a loaded machine gradients and simulations slow down by orders of magnitude."""
    import scipy.linalg.cython_blas  # noqa: F401 - loads the library numba calls
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)
