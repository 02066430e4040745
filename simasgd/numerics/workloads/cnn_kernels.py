"""Numba CPU kernels of the ``cnn`` workload: conv → ReLU → max-pool → dense → ReLU → dense → softmax CE.

The model of Lopez et al. 2020 §IV-B (one convolution, one max pooling, two
fully connected layers; their dropout layer is left out: it changes neither
the cost structure nor the synchronisation, and makes gradients random).

``shape = [CNN, C, H, W, K, k, P, Hd, classes]``: C×H×W input images (a row of
X is the image in C, H, W order), K filters of k×k (valid, stride 1), P×P max
pooling (stride P, floor), Hd hidden units. θ is flat, in this order::

    conv W (K, C, k, k) | conv b (K) | W1 (F1 × Hd, row-major, in × out) | b1 (Hd) | W2 (Hd × classes) | b2

with F1 = K·Hp·Wp, Hp = (H−k+1)//P — the dense layers in the MLP's layout
(``kernels.py``). The CUDA kernels (``executors/cuda/model.py``) use the same
layout; ``tests/cuda`` checks the two against each other and against torch.

These functions are reached through ``kernels.loss_and_grad`` (tag ``CNN``),
whose ``SOURCE_HASH`` covers this file, so cpu worker loops built in a closure
over it follow edits here. ``kernels.loss_and_grad``'s own numba cache stamps
only ``kernels.py``: after editing this file, clear ``__pycache__`` (or touch
``kernels.py``) so that the dispatcher is recompiled.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

CNN = 3  # model tag in shape[0] (kernels.SOFTMAX = 1, LEAST_SQUARES = 2)

_JIT = dict(nogil=True, cache=True)


@njit(**_JIT)
def dims(shape: np.ndarray) -> Any:
    """(C, H, W, K, k, P, Hd, classes, Ho, Wo, Hp, Wp, F1)."""
    C, H, W, K, k, P, Hd, nc = shape[1], shape[2], shape[3], shape[4], shape[5], shape[6], shape[7], shape[8]
    Ho, Wo = H - k + 1, W - k + 1
    Hp, Wp = Ho // P, Wo // P
    return C, H, W, K, k, P, Hd, nc, Ho, Wo, Hp, Wp, K * Hp * Wp


@njit(**_JIT)
def offsets(shape: np.ndarray) -> Any:
    """Offsets in θ of conv W, conv b, W1, b1, W2, b2, and len θ."""
    C, _H, _W, K, k, _P, Hd, nc, _Ho, _Wo, _Hp, _Wp, F1 = dims(shape)
    wc = 0
    bc = wc + K * C * k * k
    w1 = bc + K
    b1 = w1 + F1 * Hd
    w2 = b1 + Hd
    b2 = w2 + Hd * nc
    return wc, bc, w1, b1, w2, b2, b2 + nc


@njit(**_JIT)
def _forward_one(theta: np.ndarray, x: np.ndarray, shape: np.ndarray, conv: np.ndarray, arg: np.ndarray,
                 pool: np.ndarray, h: np.ndarray, z: np.ndarray) -> None:
    """One image: ReLU'd conv, pooled values and their argmax (flat conv index), hidden h, logits z."""
    C, H, W, K, k, P, Hd, nc, Ho, Wo, Hp, Wp, F1 = dims(shape)
    wc, bc, w1, b1, w2, b2, _ = offsets(shape)
    for f in range(K):
        for i in range(Ho):
            for j in range(Wo):
                s = np.float64(theta[bc + f])
                for c in range(C):
                    for a in range(k):
                        for b in range(k):
                            s += theta[wc + ((f * C + c) * k + a) * k + b] * x[(c * H + i + a) * W + j + b]
                conv[(f * Ho + i) * Wo + j] = s if s > 0 else 0.0
    for f in range(K):
        for pi in range(Hp):
            for pj in range(Wp):
                best = -1
                bv = -np.inf
                for a in range(P):
                    for b in range(P):
                        q = (f * Ho + pi * P + a) * Wo + pj * P + b
                        if conv[q] > bv:  # first maximum wins (as torch's max_pool2d)
                            bv = conv[q]
                            best = q
                o = (f * Hp + pi) * Wp + pj
                pool[o] = bv
                arg[o] = best
    for u in range(Hd):
        h[u] = theta[b1 + u]
    for i in range(F1):
        v = pool[i]
        if v != 0.0:
            for u in range(Hd):
                h[u] += v * theta[w1 + i * Hd + u]
    for u in range(Hd):
        if h[u] < 0:
            h[u] = 0.0
    for c in range(nc):
        z[c] = theta[b2 + c]
    for u in range(Hd):
        for c in range(nc):
            z[c] += h[u] * theta[w2 + u * nc + c]


@njit(**_JIT)
def _ce(z: np.ndarray, label: np.ndarray) -> float:
    """Cross-entropy of logits z; z becomes softmax(z) in place."""
    mx = z.max()
    s = 0.0
    for c in range(z.shape[0]):
        s += math.exp(z[c] - mx)
    lse = mx + math.log(s)
    loss = lse - z[label]
    for c in range(z.shape[0]):
        z[c] = math.exp(z[c] - lse)
    return loss


@njit(**_JIT)
def cnn_rows(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray, grad_out: np.ndarray, shape: np.ndarray,
             mode: int) -> float:
    """mode 0: mean loss and mean gradient into ``grad_out``; 1: mean loss; 2: argmax labels into grad_out."""
    C, H, W, K, k, _P, Hd, nc, Ho, Wo, _Hp, _Wp, F1 = dims(shape)
    wc, bc, w1, b1, w2, b2, dim = offsets(shape)
    B = idx.shape[0]
    if mode == 0:
        grad_out[:] = 0
    if B == 0:
        return np.nan
    conv = np.empty(K * Ho * Wo, np.float64)
    arg = np.empty(F1, np.int64)
    pool = np.empty(F1, np.float64)
    h = np.empty(Hd, np.float64)
    z = np.empty(nc, np.float64)
    dh = np.empty(Hd, np.float64)
    dconv = np.zeros(K * Ho * Wo, np.float64)
    g = np.zeros(dim if mode == 0 else 0, np.float64)  # float64 accumulation whatever θ's dtype
    scale = 1.0 / B
    total = 0.0
    for r in range(B):
        x = X[idx[r]]
        _forward_one(theta, x, shape, conv, arg, pool, h, z)
        if mode == 2:
            grad_out[r] = np.argmax(z)
            continue
        lab = int(y[idx[r]])
        total += _ce(z, lab)
        if mode != 0:
            continue
        z[lab] -= 1.0
        for c in range(nc):
            z[c] *= scale  # dL/dz of the mean loss
            g[b2 + c] += z[c]
        for u in range(Hd):
            s = 0.0
            for c in range(nc):
                g[w2 + u * nc + c] += h[u] * z[c]
                s += theta[w2 + u * nc + c] * z[c]
            dh[u] = s if h[u] > 0 else 0.0
            g[b1 + u] += dh[u]
        for i in range(F1):
            v = pool[i]
            s = 0.0
            for u in range(Hd):
                g[w1 + i * Hd + u] += v * dh[u]
                s += theta[w1 + i * Hd + u] * dh[u]
            if v > 0:  # the ReLU before the pool: only a positive maximum passes a gradient
                dconv[arg[i]] = s
        for f in range(K):
            for i in range(Ho):
                for j in range(Wo):
                    d = dconv[(f * Ho + i) * Wo + j]
                    if d == 0.0:
                        continue
                    dconv[(f * Ho + i) * Wo + j] = 0.0  # leave it zeroed for the next row
                    g[bc + f] += d
                    for c in range(C):
                        for a in range(k):
                            for b in range(k):
                                g[wc + ((f * C + c) * k + a) * k + b] += d * x[(c * H + i + a) * W + j + b]
    if mode == 0:
        for i in range(dim):
            grad_out[i] = g[i]
    return total * scale
