"""The GEMM the MLP kernels call (simasgd/blas.py, ``kernels.gemm``).

Whichever provider this process registered — numpy's own OpenBLAS, or the ``np.dot`` fallback —
``gemm`` must compute op(A)·B as numpy does in float64, to float32 rounding."""

from __future__ import annotations

import ctypes
import inspect

import numpy as np
import pytest
from numba import njit

from simasgd import blas
from simasgd.workloads import kernels

SHAPES = [(16, 784, 128), (64, 784, 128), (64, 128, 128), (16, 128, 10), (3, 5, 7), (1, 1, 1)]


TRANSPOSES = [(False, False), (True, False), (False, True)]  # the products the MLP kernels make


@njit  # not cached: a cached caller in this file would keep an edited kernels.gemm's old code
def _gemm(A, B, C, trans_a, trans_b):  # type: ignore[no-untyped-def]
    kernels.gemm(A, B, C, trans_a, trans_b)


def _operands(m: int, k: int, n: int, trans_a: bool, trans_b: bool,
              dtype: type) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    A = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    return A, rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)


def _ops(A: np.ndarray, B: np.ndarray, trans_a: bool, trans_b: bool) -> tuple[np.ndarray, np.ndarray]:
    """op(A), op(B) in float64."""
    a, b = A.astype(np.float64), B.astype(np.float64)
    return (a.T if trans_a else a), (b.T if trans_b else b)


def _check(C: np.ndarray, A: np.ndarray, B: np.ndarray, trans_a: bool, trans_b: bool) -> None:
    """Each element within the bound on a sum of k float products' rounding, k·eps·Σ|a||b| (Higham, Thm 3.5)."""
    a, b = _ops(A, B, trans_a, trans_b)
    bound = a.shape[1] * float(np.finfo(C.dtype).eps) * (np.abs(a) @ np.abs(b)) + 1e-30
    assert np.all(np.abs(C - a @ b) <= bound)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES)
@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.slow
def test_gemm_matches_float64_product(m: int, k: int, n: int, trans_a: bool, trans_b: bool, dtype: type) -> None:
    A, B = _operands(m, k, n, trans_a, trans_b, dtype)
    C = np.full((m, n), np.nan, dtype)  # overwritten, not accumulated into
    _gemm(A, B, C, trans_a, trans_b)
    _check(C, A, B, trans_a, trans_b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_rejects_mismatched_shapes_and_double_transposes(dtype: type) -> None:
    A, B = _operands(4, 5, 6, False, False, dtype)
    with pytest.raises(ValueError, match="shapes"):
        _gemm(A, B[:4].copy(), np.empty((4, 6), dtype), False, False)
    with pytest.raises(ValueError, match="not supported"):
        _gemm(A.T.copy(), B.T.copy(), np.empty((4, 6), dtype), True, True)


def test_mlp_kernels_take_every_matrix_product_from_gemm() -> None:
    """One BLAS library per float32 gradient (blas.py: two alternating libraries' thread pools made an
    unlimited B = 64 gradient 80× slower), so no ``np.dot`` beside ``gemm`` in the MLP's passes."""
    for fn in (kernels._forward, kernels._backward):
        src = inspect.getsource(fn.py_func)
        assert "gemm(" in src and "np.dot(" not in src, fn.py_func.__name__


def test_the_registered_symbol_is_numpys_openblas_where_numpy_carries_it() -> None:
    found = blas._numpy_openblas()
    if found is None:
        assert blas.register() == blas._fallback()
        assert blas.provider().startswith("np.dot")
    else:
        assert blas.register() == found[0]
        assert blas.provider().startswith("numpy.libs") and "OpenBLAS" in blas.provider()


@pytest.mark.parametrize("trans_a,trans_b", TRANSPOSES)
@pytest.mark.slow
def test_fallback_has_the_cblas_abi(trans_a: bool, trans_b: bool) -> None:
    """Called as the kernels call the symbol (CBLAS arguments, 64-bit sizes): the same product."""
    m, k, n = 16, 33, 10
    A, B = _operands(m, k, n, trans_a, trans_b, np.float32)
    C = np.full((m, n), np.nan, np.float32)
    f32p = ctypes.POINTER(ctypes.c_float)
    i32, i64 = ctypes.c_int32, ctypes.c_int64
    fn = ctypes.CFUNCTYPE(None, i32, i32, i32, i64, i64, i64, ctypes.c_float, f32p, i64, f32p, i64,
                          ctypes.c_float, f32p, i64)(blas._fallback())
    ptr = lambda a: a.ctypes.data_as(f32p)
    flag = lambda t: blas.TRANS if t else blas.NO_TRANS
    fn(blas.ROW_MAJOR, flag(trans_a), flag(trans_b), m, n, k, 1.0, ptr(A), A.shape[1], ptr(B), B.shape[1],
       0.0, ptr(C), n)
    _check(C, A, B, trans_a, trans_b)
