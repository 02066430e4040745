"""Every numba kernel of every workload, in one module, behind one dispatcher.

Why one module: numba's on-disk cache only watches the file that defines a
cached function. A cached function calling a kernel from *another* file keeps
the old machine code after that file is edited. Keeping all kernel code here
means editing any kernel invalidates the cache of the entry points below.

Why one dispatcher: ``loss_and_grad`` serves every workload. It dispatches at
compile time on the type of ``X`` (a 2-D array, or a CSR tuple
``(indptr, indices, values)``) and at run time on ``shape[0]``, the model tag.
A worker loop can therefore reference ``kernels.loss_and_grad`` as a global
and stay cacheable, and one compiled worker serves every model. (Passing the
dispatcher as an argument works too, but numba then keys the caller's cache
by the dispatcher's memory address: it recompiles in every process and, with
``cache=True``, adds one more cache file per process.)

A cached caller in another file is not invalidated when this file changes
(numba stamps only the caller's own file). To make it follow kernel edits,
build it in a closure over ``SOURCE_HASH``; closure values are part of
numba's cache key::

    def _make(kernels_version=kernels.SOURCE_HASH):
        @njit(nogil=True, cache=True)
        def worker(...):
            if len(kernels_version) == 0:   # reference it, so it is a closure cell
                return
            ... kernels.loss_and_grad(theta, X, y, idx, grad, shape) ...
        return worker

Conventions shared by all kernels:
- ``shape = [tag, dims...]``: ``[SOFTMAX, n0, n1, ..., nL]`` (an MLP; dense or
  sparse logistic regression is the one-layer case ``[SOFTMAX, F, C]``) or
  ``[LEAST_SQUARES, F]``.
- θ is flat: per layer W (in×out, row-major) then b.
- ``grad_out`` is overwritten with the *mean* gradient over ``idx``, never
  accumulated into; it must have θ's dtype. The return value is the mean loss.
- No shared scratch: buffers are allocated per call (one allocation sized by
  the batch for the MLP), so kernels are thread-safe and run without the GIL.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit, types
from numba.extending import intrinsic, overload

import simasgd.numerics.workloads.cnn_kernels as cnn_kernels
from simasgd.numerics import blas
from simasgd.numerics.workloads.cnn_kernels import CNN, cnn_rows

# Changes whenever any kernel's source changes (see the module docstring); cnn_kernels.py and the
# GEMM binding's ABI (blas.py) included.
SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes() + Path(cnn_kernels.__file__).read_bytes()
                             + Path(blas.__file__).read_bytes()).hexdigest()[:16]

blas.register()  # before any kernel below is compiled or loaded from the cache: they link against it

SOFTMAX = 1        # softmax cross-entropy network: mlp, logreg
LEAST_SQUARES = 2  # mean ½(xᵀw + b − y)²

# Rows per block: bounds scratch memory when evaluating the loss on thousands
# of rows; usual minibatches (<= CHUNK) take the single-block fast path.
CHUNK = 256

_JIT = dict(nogil=True, cache=True)
# Reassociation lets LLVM vectorise the dot-product reductions of the loop
# kernels; NaN/inf semantics are kept (no nnan/ninf) so crashes stay visible.
_LOOP_JIT = dict(nogil=True, cache=True, fastmath={"reassoc", "contract"})


# --------------------------------------------------------------------------
# Softmax networks (dense X): batched forward/backward with BLAS.
# --------------------------------------------------------------------------

_sgemm = types.ExternalFunction(blas.SYMBOL, blas.signature())


@intrinsic
def _data(typingctx: Any, arr: types.Type) -> Any:
    """The address of a contiguous array's first element, typed, for the external GEMM."""
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return context.make_array(sig.args[0])(context, builder, args[0]).data
    return types.CPointer(arr.dtype)(arr), codegen


def gemm(A: np.ndarray, B: np.ndarray, C: np.ndarray, trans_a: int,
         trans_b: int) -> Any:  # pragma: no cover - typed by overload
    """C = op(A)·op(B), op(X) = Xᵀ where its flag is set; C is overwritten."""


@njit(**_JIT)
def _gemm_dims(A: np.ndarray, B: np.ndarray, C: np.ndarray, trans_a: int, trans_b: int) -> Any:
    """m, n, k of C (m × n) = op(A) (m × k) · op(B) (k × n); a ValueError where they do not fit."""
    if trans_a and trans_b:
        raise ValueError("gemm: Aᵀ·Bᵀ is not supported")  # no kernel needs it
    m, n = C.shape
    k = B.shape[1] if trans_b else B.shape[0]
    rows, cols = (A.shape[1], A.shape[0]) if trans_a else (A.shape[0], A.shape[1])
    if rows != m or cols != k or (B.shape[0] if trans_b else B.shape[1]) != n:
        raise ValueError("gemm: shapes do not match")
    return m, n, k


@overload(gemm, jit_options={"nogil": True})
def _gemm(A: Any, B: Any, C: Any, trans_a: Any, trans_b: Any) -> Any:
    f32 = all(getattr(a, "dtype", None) == types.float32 and a.layout == "C" and a.ndim == 2 for a in (A, B, C))
    if not f32:  # float64 (blas.py: numpy's build was no faster there) or strided views: numba's np.dot
        def by_dot(A: Any, B: Any, C: Any, trans_a: Any, trans_b: Any) -> None:
            _gemm_dims(A, B, C, trans_a, trans_b)
            if trans_a:
                np.dot(A.T, B, C)
            elif trans_b:
                np.dot(A, B.T, C)
            else:
                np.dot(A, B, C)
        return by_dot

    def by_sgemm(A: Any, B: Any, C: Any, trans_a: Any, trans_b: Any) -> None:
        m, n, k = _gemm_dims(A, B, C, trans_a, trans_b)
        _sgemm(blas.ROW_MAJOR, blas.TRANS if trans_a else blas.NO_TRANS, blas.TRANS if trans_b else blas.NO_TRANS,
               m, n, k, np.float32(1), _data(A), A.shape[1], _data(B), B.shape[1], np.float32(0), _data(C), n)
    return by_sgemm


@njit(**_JIT)
def _layout(shape: np.ndarray, rows: int) -> Any:
    """Offsets of W_l and b_l in θ, of A_l in the scratch buffer, and its size."""
    L = shape.shape[0] - 2
    woff = np.empty(L, np.int64)
    boff = np.empty(L, np.int64)
    aoff = np.empty(L + 1, np.int64)
    o = 0
    a = 0
    widest_hidden = 0
    for l in range(L):
        nin, nout = shape[l + 1], shape[l + 2]
        woff[l] = o
        boff[l] = o + nin * nout
        o += nin * nout + nout
        aoff[l] = a
        a += rows * nin
        if l >= 1 and nin > widest_hidden:
            widest_hidden = nin
    aoff[L] = a
    a += rows * shape[L + 1]
    # Two ping-pong buffers for the hidden-layer deltas follow the activations.
    return woff, boff, aoff, a, a + 2 * rows * widest_hidden


@njit(**_JIT)
def _forward(theta: np.ndarray, X: np.ndarray, idx: np.ndarray, lo: int, m: int, shape: np.ndarray, woff: np.ndarray,
             boff: np.ndarray, aoff: np.ndarray, buf: np.ndarray) -> None:
    """Fill A_0 (gathered rows), the ReLU activations, and the logits Z_L."""
    L = shape.shape[0] - 2
    n0 = shape[1]
    A0 = buf[aoff[0]:aoff[0] + m * n0].reshape((m, n0))
    for i in range(m):  # an indexed loop: numba's slice assignment is a slower broadcasting copy (memops)
        r = idx[lo + i]
        for k in range(n0):
            A0[i, k] = X[r, k]
    for l in range(L):
        nin, nout = shape[l + 1], shape[l + 2]
        A = buf[aoff[l]:aoff[l] + m * nin].reshape((m, nin))
        Z = buf[aoff[l + 1]:aoff[l + 1] + m * nout].reshape((m, nout))
        W = theta[woff[l]:woff[l] + nin * nout].reshape((nin, nout))
        b = theta[boff[l]:boff[l] + nout]
        gemm(A, W, Z, False, False)
        if l < L - 1:
            for i in range(m):
                for j in range(nout):
                    v = Z[i, j] + b[j]
                    Z[i, j] = v if v > 0 else 0
        else:
            for i in range(m):
                for j in range(nout):
                    Z[i, j] += b[j]


@njit(**_JIT)
def _softmax_ce(Z: np.ndarray, y: np.ndarray, idx: np.ndarray, lo: int, scale: float, grad: np.ndarray) -> float:
    """Sum of cross-entropies of the logit rows; with ``grad``, Z becomes
    scale·(softmax − onehot), the output delta, in place."""
    m, C = Z.shape
    e = np.empty(C, np.float64)  # each exponential once: they are a large share of a step's non-GEMM time
    total = 0.0
    for i in range(m):
        c = int(y[idx[lo + i]])
        mx = np.float64(Z[i, 0])
        for j in range(1, C):
            mx = max(mx, np.float64(Z[i, j]))
        s = 0.0
        for j in range(C):
            e[j] = math.exp(Z[i, j] - mx)
            s += e[j]
        total += mx + math.log(s) - Z[i, c]  # log-sum-exp, stable for any logit scale
        if grad:
            inv = scale / s
            for j in range(C):
                p = e[j] * inv
                Z[i, j] = p - scale if j == c else p
    return total


@njit(**_JIT)
def _backward(theta: np.ndarray, shape: np.ndarray, woff: np.ndarray, boff: np.ndarray, aoff: np.ndarray,
              dbuf: np.ndarray, buf: np.ndarray,
              m: int, g: np.ndarray) -> None:
    """Overwrite g with the gradient; the output delta sits in Z_L's place.

    Layer by layer from the top, W_l is read (for the next delta) before g's W_l and b_l are
    written, and never after: ``g`` may be ``theta`` itself (:func:`grad_over_theta`)."""
    L = shape.shape[0] - 2
    nout = shape[L + 1]
    D = buf[aoff[L]:aoff[L] + m * nout].reshape((m, nout))
    nxt = dbuf
    half = (buf.shape[0] - dbuf) // 2
    for l in range(L - 1, -1, -1):
        nin, nout = shape[l + 1], shape[l + 2]
        A = buf[aoff[l]:aoff[l] + m * nin].reshape((m, nin))
        Dn = D
        if l > 0:  # no delta for the input layer: it has no parameters
            W = theta[woff[l]:woff[l] + nin * nout].reshape((nin, nout))
            Dn = buf[nxt:nxt + m * nin].reshape((m, nin))
            gemm(D, W, Dn, False, True)
            for i in range(m):
                for j in range(nin):
                    if A[i, j] <= 0:  # ReLU'(z) = [z > 0]; A = max(z, 0)
                        Dn[i, j] = 0
            nxt = dbuf + half if nxt == dbuf else dbuf
        gemm(A, D, g[woff[l]:woff[l] + nin * nout].reshape((nin, nout)), True, False)
        gb = g[boff[l]:boff[l] + nout]
        gb[:] = 0
        for i in range(m):
            for j in range(nout):
                gb[j] += D[i, j]
        D = Dn


@njit(**_JIT)
def mlp_loss_and_grad(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray, grad_out: np.ndarray,
                      shape: np.ndarray) -> float:
    B = idx.shape[0]
    if B == 0:
        grad_out[:] = 0
        return np.nan
    rows = min(B, CHUNK)
    woff, boff, aoff, dbuf, size = _layout(shape, rows)
    buf = np.empty(size, theta.dtype)  # the one scratch allocation per call
    gtmp = np.empty(grad_out.shape[0] if B > CHUNK else 0, theta.dtype)
    C = shape[shape.shape[0] - 1]
    L = shape.shape[0] - 2
    scale = 1.0 / B
    total = 0.0
    for lo in range(0, B, CHUNK):
        m = min(CHUNK, B - lo)
        _forward(theta, X, idx, lo, m, shape, woff, boff, aoff, buf)
        Z = buf[aoff[L]:aoff[L] + m * C].reshape((m, C))
        total += _softmax_ce(Z, y, idx, lo, scale, True)
        if lo == 0:
            _backward(theta, shape, woff, boff, aoff, dbuf, buf, m, grad_out)
        else:  # later blocks: gradient into a temporary, then add
            _backward(theta, shape, woff, boff, aoff, dbuf, buf, m, gtmp)
            grad_out += gtmp
    return total * scale


@njit(**_JIT)
def _mlp_blocks(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray, shape: np.ndarray,
                labels_out: np.ndarray, want_loss: bool) -> Any:
    """Forward over idx in blocks: the summed loss, or argmax labels."""
    B = idx.shape[0]
    rows = min(max(B, 1), CHUNK)
    woff, boff, aoff, dbuf, _size = _layout(shape, rows)
    buf = np.empty(dbuf, theta.dtype)  # forward only: no delta buffers
    C = shape[shape.shape[0] - 1]
    L = shape.shape[0] - 2
    total = 0.0
    for lo in range(0, B, CHUNK):
        m = min(CHUNK, B - lo)
        _forward(theta, X, idx, lo, m, shape, woff, boff, aoff, buf)
        Z = buf[aoff[L]:aoff[L] + m * C].reshape((m, C))
        if want_loss:
            total += _softmax_ce(Z, y, idx, lo, 1.0, False)
        else:
            for i in range(m):
                labels_out[lo + i] = np.argmax(Z[i])
    return total


# --------------------------------------------------------------------------
# Least squares (dense X) and the sparse-row (CSR) linear models: row loops.
# One function per model serves loss_and_grad (grad=True) and loss (grad=False,
# grad_out unused) so the two can never disagree on the loss.
# --------------------------------------------------------------------------

@njit(**_LOOP_JIT)
def lsq_rows(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray, grad_out: np.ndarray, shape: np.ndarray,
             grad: np.ndarray) -> float:
    F = shape[1]
    B = idx.shape[0]
    if grad:
        grad_out[:] = 0
    if B == 0:
        return np.nan
    scale = 1.0 / B
    total = 0.0
    for i in range(B):
        r = idx[i]
        z = np.float64(theta[F])
        for j in range(F):
            z += X[r, j] * theta[j]
        res = z - y[r]
        total += 0.5 * res * res
        if grad:
            res *= scale
            for j in range(F):
                grad_out[j] += res * X[r, j]
            grad_out[F] += res
    return total * scale


@njit(**_LOOP_JIT)
def sparse_lsq_rows(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray, grad_out: np.ndarray,
                    shape: np.ndarray, grad: np.ndarray) -> float:
    indptr, indices, values = X
    F = shape[1]
    B = idx.shape[0]
    if grad:
        grad_out[:] = 0  # dense-shaped; only touched coordinates become nonzero
    if B == 0:
        return np.nan
    scale = 1.0 / B
    total = 0.0
    for i in range(B):
        r = idx[i]
        z = np.float64(theta[F])
        for k in range(indptr[r], indptr[r + 1]):
            z += values[k] * theta[indices[k]]
        res = z - y[r]
        total += 0.5 * res * res
        if grad:
            res *= scale
            for k in range(indptr[r], indptr[r + 1]):
                grad_out[indices[k]] += res * values[k]
            grad_out[F] += res
    return total * scale


@njit(**_LOOP_JIT)
def sparse_logreg_rows(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray, grad_out: np.ndarray,
                       shape: np.ndarray, mode: int) -> float:
    """mode 0: loss and gradient; 1: loss only; 2: argmax labels into grad_out."""
    indptr, indices, values = X
    F, C = shape[1], shape[2]
    B = idx.shape[0]
    if mode == 0:
        grad_out[:] = 0  # dense-shaped; only touched coordinates become nonzero
    if B == 0:
        return np.nan
    scale = 1.0 / B
    z = np.empty(C, np.float64)
    total = 0.0
    for i in range(B):
        r = idx[i]
        for c in range(C):
            z[c] = theta[F * C + c]
        for k in range(indptr[r], indptr[r + 1]):
            base = indices[k] * C
            v = values[k]
            for c in range(C):
                z[c] += v * theta[base + c]
        if mode == 2:
            grad_out[i] = np.argmax(z)
            continue
        lab = int(y[r])
        mx = z.max()
        s = 0.0
        for c in range(C):
            s += math.exp(z[c] - mx)
        lse = mx + math.log(s)
        total += lse - z[lab]
        if mode == 0:
            for c in range(C):
                z[c] = math.exp(z[c] - lse) * scale
            z[lab] -= scale
            for k in range(indptr[r], indptr[r + 1]):
                base = indices[k] * C
                v = values[k]
                for c in range(C):
                    grad_out[base + c] += v * z[c]
            for c in range(C):
                grad_out[F * C + c] += z[c]
    return total * scale


# --------------------------------------------------------------------------
# The entry points: one dispatcher each, for every workload.
# --------------------------------------------------------------------------

def _by_layout_grad(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray, grad_out: np.ndarray,
                    shape: np.ndarray) -> Any:  # pragma: no cover - typed by overload
    raise NotImplementedError


def _by_layout_over(X: np.ndarray, idx: np.ndarray, shape: np.ndarray) -> Any:  # pragma: no cover - typed by overload
    raise NotImplementedError


def _by_layout_loss(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray,
                    shape: np.ndarray) -> Any:  # pragma: no cover
    raise NotImplementedError


def _by_layout_predict(theta: np.ndarray, X: np.ndarray, idx: np.ndarray, shape: np.ndarray,
                       out: np.ndarray) -> Any:  # pragma: no cover
    raise NotImplementedError


@overload(_by_layout_grad, jit_options={"nogil": True})
def _ov_grad(theta: Any, X: Any, y: Any, idx: Any, grad_out: Any,
             shape: Any) -> Any:
    if isinstance(X, types.BaseTuple):
        def sparse(theta: Any, X: Any, y: Any, idx: Any, grad_out: Any,
                   shape: Any) -> Any:
            if shape[0] == SOFTMAX:
                return sparse_logreg_rows(theta, X, y, idx, grad_out, shape, 0)
            if shape[0] == LEAST_SQUARES:
                return sparse_lsq_rows(theta, X, y, idx, grad_out, shape, True)
            raise ValueError("loss_and_grad: unknown model tag in shape[0] (sparse X)")
        return sparse

    def dense(theta: Any, X: Any, y: Any, idx: Any, grad_out: Any,
              shape: Any) -> Any:
        if shape[0] == SOFTMAX:
            return mlp_loss_and_grad(theta, X, y, idx, grad_out, shape)
        if shape[0] == LEAST_SQUARES:
            return lsq_rows(theta, X, y, idx, grad_out, shape, True)
        if shape[0] == CNN:
            return cnn_rows(theta, X, y, idx, grad_out, shape, 0)
        raise ValueError("loss_and_grad: unknown model tag in shape[0] (dense X)")
    return dense


@overload(_by_layout_over, jit_options={"nogil": True})
def _ov_over(X: Any, idx: Any, shape: Any) -> Any:
    if isinstance(X, types.BaseTuple):
        def sparse(X: Any, idx: Any, shape: Any) -> Any:
            return False  # the row kernels zero grad_out before they read θ
        return sparse

    def dense(X: Any, idx: Any, shape: Any) -> Any:
        # The MLP in one block reads each W_l for the last time before writing its gradient
        # (_backward); more blocks need θ again for the next block's forward pass.
        return shape[0] == SOFTMAX and idx.shape[0] <= CHUNK
    return dense


@overload(_by_layout_loss, jit_options={"nogil": True})
def _ov_loss(theta: Any, X: Any, y: Any, idx: Any, shape: Any) -> Any:
    if isinstance(X, types.BaseTuple):
        def sparse(theta: Any, X: Any, y: Any, idx: Any, shape: Any) -> Any:
            if shape[0] == SOFTMAX:
                return sparse_logreg_rows(theta, X, y, idx, np.empty(0, theta.dtype), shape, 1)
            if shape[0] == LEAST_SQUARES:
                return sparse_lsq_rows(theta, X, y, idx, np.empty(0, theta.dtype), shape, False)
            raise ValueError("loss: unknown model tag in shape[0] (sparse X)")
        return sparse

    def dense(theta: Any, X: Any, y: Any, idx: Any, shape: Any) -> Any:
        if shape[0] == SOFTMAX:
            t = _mlp_blocks(theta, X, y, idx, shape, np.empty(0, np.int64), True)
            return t / idx.shape[0] if idx.shape[0] else np.nan
        if shape[0] == LEAST_SQUARES:
            return lsq_rows(theta, X, y, idx, np.empty(0, theta.dtype), shape, False)
        if shape[0] == CNN:
            return cnn_rows(theta, X, y, idx, np.empty(0, theta.dtype), shape, 1)
        raise ValueError("loss: unknown model tag in shape[0] (dense X)")
    return dense


@overload(_by_layout_predict, jit_options={"nogil": True})
def _ov_predict(theta: Any, X: Any, idx: Any, shape: Any, out: Any) -> Any:
    if isinstance(X, types.BaseTuple):
        def sparse(theta: Any, X: Any, idx: Any, shape: Any, out: Any) -> None:
            if shape[0] != SOFTMAX:
                raise ValueError("predict: only classification models predict labels")
            sparse_logreg_rows(theta, X, out, idx, out, shape, 2)  # y unused when predicting
        return sparse

    def dense(theta: Any, X: Any, idx: Any, shape: Any, out: Any) -> None:
        if shape[0] == CNN:
            cnn_rows(theta, X, out, idx, out, shape, 2)  # y unused when predicting
            return
        if shape[0] != SOFTMAX:
            raise ValueError("predict: only classification models predict labels")
        _mlp_blocks(theta, X, out, idx, shape, out, False)
    return dense


@njit(**_JIT)
def loss_and_grad(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray, grad_out: np.ndarray,
                  shape: np.ndarray) -> float:
    """Mean loss over rows ``idx``; writes the mean gradient into ``grad_out``."""
    return _by_layout_grad(theta, X, y, idx, grad_out, shape)


@njit(**_JIT)
def grad_over_theta(X: np.ndarray, idx: np.ndarray, shape: np.ndarray) -> bool:
    """Whether ``loss_and_grad(theta, X, y, idx, theta, shape)`` is right: the gradient written over
    the θ it is taken at (the MLP with at most ``CHUNK`` rows; never the row kernels or the CNN).

    For a worker's private copy of θ, discarded after its gradient: a worker that copies θ and
    computes the gradient beside the copy keeps three model-sized vectors hot (the shared θ, the
    copy, g), and where they outgrow a core's L2 the copy costs a lock-based worker a good part of
    sequential SGD's rate; over the copy it keeps two, as sequential SGD does (θ, g).
    A worker loop that uses it calls it as a global, like
    ``loss_and_grad``: a workload's own kernel gets ``executors.kernel.never_over`` in its place."""
    return _by_layout_over(X, idx, shape)


@njit(**_JIT)
def loss(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray, shape: np.ndarray) -> float:
    """Mean loss over rows ``idx`` (forward only, memory bounded by CHUNK rows)."""
    return _by_layout_loss(theta, X, y, idx, shape)


@njit(**_JIT)
def predict(theta: np.ndarray, X: np.ndarray, idx: np.ndarray, shape: np.ndarray, out: np.ndarray) -> None:
    """Write the predicted class of each row of ``idx`` into ``out`` (int64)."""
    _by_layout_predict(theta, X, idx, shape, out)
