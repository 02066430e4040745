"""The GEMM the MLP kernels call (simasgd/blas.py, ``kernels.gemm``).

Whichever provider this process registered — numpy's own OpenBLAS, or the ``np.dot`` fallback —
``gemm`` must compute op(A)·B as numpy does in float64, to float32 rounding."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from numba import njit

from simasgd import blas
from simasgd.workloads import kernels

SHAPES = [(16, 784, 128), (64, 784, 128), (64, 128, 128), (16, 128, 10), (3, 5, 7), (1, 1, 1)]


@njit(cache=True)
def _gemm(A, B, C, trans_a):  # type: ignore[no-untyped-def]
    kernels.gemm(A, B, C, trans_a)


def _operands(m: int, k: int, n: int, trans_a: bool, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    A = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    return A, rng.standard_normal((k, n)).astype(dtype)


def _tolerance(A: np.ndarray, B: np.ndarray, trans_a: bool, eps: float) -> np.ndarray:
    """Elementwise bound on a sum of k float products' rounding: k·eps·Σ|a||b| (Higham, Thm 3.5)."""
    a = np.abs(A.astype(np.float64))
    return A.shape[0 if trans_a else 1] * eps * ((a.T if trans_a else a) @ np.abs(B.astype(np.float64))) + 1e-30


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_gemm_matches_float64_product(m: int, k: int, n: int, trans_a: bool, dtype: type) -> None:
    A, B = _operands(m, k, n, trans_a, dtype)
    C = np.full((m, n), np.nan, dtype)  # overwritten, not accumulated into
    _gemm(A, B, C, trans_a)
    exact = (A.astype(np.float64).T if trans_a else A.astype(np.float64)) @ B.astype(np.float64)
    err = np.abs(C - exact)
    assert np.all(err <= _tolerance(A, B, trans_a, float(np.finfo(dtype).eps)))


def test_gemm_rejects_mismatched_shapes() -> None:
    A, B = _operands(4, 5, 6, False, np.float32)
    with pytest.raises(ValueError, match="shapes"):
        _gemm(A, B[:4].copy(), np.empty((4, 6), np.float32), False)


def test_the_registered_symbol_is_numpys_openblas_where_numpy_carries_it() -> None:
    found = blas._numpy_openblas()
    if found is None:
        assert blas.register() == blas._fallback()
        assert blas.provider().startswith("np.dot")
    else:
        assert blas.register() == found[0]
        assert blas.provider().startswith("numpy.libs") and "OpenBLAS" in blas.provider()


@pytest.mark.parametrize("trans_a", [False, True])
def test_fallback_has_the_cblas_abi(trans_a: bool) -> None:
    """Called as the kernels call the symbol (CBLAS arguments, 64-bit sizes): the same product."""
    m, k, n = 16, 33, 10
    A, B = _operands(m, k, n, trans_a, np.float32)
    C = np.full((m, n), np.nan, np.float32)
    f32p = ctypes.POINTER(ctypes.c_float)
    i32, i64 = ctypes.c_int32, ctypes.c_int64
    fn = ctypes.CFUNCTYPE(None, i32, i32, i32, i64, i64, i64, ctypes.c_float, f32p, i64, f32p, i64,
                          ctypes.c_float, f32p, i64)(blas._fallback())
    ptr = lambda a: a.ctypes.data_as(f32p)  # noqa: E731
    fn(blas.ROW_MAJOR, blas.TRANS if trans_a else blas.NO_TRANS, blas.NO_TRANS, m, n, k, 1.0, ptr(A),
       A.shape[1], ptr(B), n, 0.0, ptr(C), n)
    exact = (A.astype(np.float64).T if trans_a else A.astype(np.float64)) @ B.astype(np.float64)
    assert np.all(np.abs(C - exact) <= _tolerance(A, B, trans_a, float(np.finfo(np.float32).eps)))
