"""The GEMM the MLP kernels call (simasgd/numerics/blas.py, ``kernels.gemm``).

Whichever provider this process registered — numpy's own OpenBLAS, or the ``np.dot`` fallback —
``gemm`` must compute op(A)·B as numpy does in float64, to float32 rounding."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys

import numpy as np
import pytest
from numba import njit

from simasgd.numerics import blas
from simasgd.numerics.workloads import kernels

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


# Run in a fresh process: the symbol points at a counting CBLAS sgemm (a ctypes callback that records each
# call and computes the product in float64) before the kernels are compiled or loaded, as blas.register
# would point it at the provider; then one float32 MLP gradient.
_PROBE = r"""
import ctypes, json, sys
import numpy as np
from simasgd.numerics import blas

calls = []
f32p = ctypes.POINTER(ctypes.c_float)
i32, i64, f32 = ctypes.c_int32, ctypes.c_int64, ctypes.c_float
PROTO = ctypes.CFUNCTYPE(None, i32, i32, i32, i64, i64, i64, f32, f32p, i64, f32p, i64, f32, f32p, i64)

def sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    ta, tb = ta == blas.TRANS, tb == blas.TRANS
    calls.append([order == blas.ROW_MAJOR, m, n, k, ta, tb])
    A = np.ctypeslib.as_array(a, (k, m) if ta else (m, k)).astype(np.float64)
    B = np.ctypeslib.as_array(b, (n, k) if tb else (k, n)).astype(np.float64)
    C = np.ctypeslib.as_array(c, (m, n))
    C[...] = alpha * ((A.T if ta else A) @ (B.T if tb else B)) + (beta * C if beta else 0.0)

counting = PROTO(sgemm)
address = ctypes.cast(counting, ctypes.c_void_p).value
import llvmlite.binding as ll
ll.add_symbol(blas.SYMBOL, address)
blas.register = lambda: address  # the kernels' import registers the provider: keep the counter
from simasgd.spec.scenario import WorkloadConfig
from simasgd.numerics.workloads import build_workload
cfg = WorkloadConfig.model_validate_json(sys.argv[1])
wl = build_workload(cfg, 0)
theta = wl.init_theta(np.random.default_rng(1))
g = np.zeros_like(theta)
wl.kernel(theta, wl.X, wl.y, np.arange(cfg.batch_size, dtype=np.int64), g, wl.shape)
print(json.dumps({"calls": calls, "grad": g.astype(np.float64).tolist()}))
"""


@pytest.mark.slow
def test_every_matrix_product_of_a_float32_mlp_gradient_goes_to_the_registered_gemm() -> None:
    """One BLAS library per float32 gradient (blas.py: two libraries' spinning thread pools stall each
    other), so every product of the MLP's forward and backward passes is a call of the registered CBLAS
    sgemm — none taken by ``np.dot`` through SciPy's BLAS beside it: per layer A·W forward, then from the
    top D·Wᵀ (no delta for the input layer) and Aᵀ·D; and the gradient so made is the provider's."""
    from simasgd.numerics.workloads import build_workload
    from simasgd.spec.scenario import WorkloadConfig

    layers, batch = [40, 24, 16, 10], 16
    cfg = WorkloadConfig(model="mlp", layers=layers, dtype="float32", batch_size=batch, dataset="synthetic",
                         features=layers[0], classes=layers[-1], samples=200)
    out = subprocess.run([sys.executable, "-c", _PROBE, cfg.model_dump_json()], capture_output=True, text=True,
                         timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    probe = json.loads(out.stdout.strip().splitlines()[-1])

    L = len(layers) - 1
    forward = [[True, batch, layers[l + 1], layers[l], False, False] for l in range(L)]
    backward = []
    for l in range(L - 1, -1, -1):
        if l > 0:
            backward.append([True, batch, layers[l], layers[l + 1], False, True])   # D·Wᵀ: the next delta
        backward.append([True, layers[l], layers[l + 1], batch, True, False])       # Aᵀ·D: g's W_l
    assert probe["calls"] == forward + backward

    wl = build_workload(cfg, 0)  # this process: the provider itself
    theta = wl.init_theta(np.random.default_rng(1))
    g = np.zeros_like(theta)
    wl.kernel(theta, wl.X, wl.y, np.arange(batch, dtype=np.int64), g, wl.shape)
    np.testing.assert_allclose(np.array(probe["grad"]), g, rtol=1e-4, atol=1e-6)


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
