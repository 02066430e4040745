"""A minibatch gradient computed by one worker's block, with no host in the loop.

Each function is a device function run by all lanes of one worker (:mod:`.device`): work is split
lane-strided, and the lanes meet (``wsync``) between phases. Layouts are the CPU kernels' flat θ
(``simasgd/numerics/workloads/kernels.py``: per dense layer W row-major [in × out], then b; the cnn's conv
filters and biases first, ``cnn_kernels.py``). Scratch rows are per worker (``act[w]``, ``dl[w]``).

- :func:`build` (dtype, batch) returns the device functions for that element type and batch size:
  a lane keeps one output column's ``B`` batch sums in registers, so W is read once per gradient.
- ``mlp``: gather → per layer Z = A·W + b (ReLU but the last) → softmax cross-entropy delta
  (scale 1/B) → per layer gW = Aᵀ·D, gb = Σ_b D, D ← D·Wᵀ ⊙ [A > 0].
- ``cnn``: conv (valid, stride 1) + ReLU → P×P max-pool → the mlp above on the pooled features →
  the conv filters' and biases' gradients through the pool's argmax.
- ``const``: every element ``G`` (the conformance workload, ``simasgd.numerics.workloads.constant``).

Batches are drawn on the device: a xorshift64 stream per worker (``rng[w]``, seeded from
``seeds.rng(seed, run, Role.BATCH, w)``), rows uniform with replacement as ``Workload.sample_batch``.
"""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace
from typing import Any

import numpy as np
from numba import float32, float64

from executors.gpu.device import SLOTS, cuda, slot, wsync

ELEMENT = {np.dtype(np.float32): float32, np.dtype(np.float64): float64}
KT = 32  # a tile's columns: A's (or D's) columns staged in shared memory at once
WT = 8  # a lane's weights loaded together (in flight at once), then used: small enough to stay in registers
U = 8  # elements a lane moves per round of a copy: its loads in flight before its stores
KF = 8  # the cnn's filters a lane sums at once (registers), staged together in shared memory
# A block's static shared memory is at most 48 KiB: the dense tile (≤ 16 KiB: KT × 64 rows of float64),
# a cnn's image (24 KiB) and KF of its filters (6 KiB).
IMG_BYTES, FIL_BYTES = 24 * 1024, 6 * 1024


def shared_limits(dtype: str) -> tuple[int, int]:
    """(image elements, filter elements) a block stages in shared memory for θ of ``dtype``."""
    n = np.dtype(dtype).itemsize
    return IMG_BYTES // n, FIL_BYTES // n


def cnn_refusal(dtype: str, C: int, H: int, W: int, k: int) -> str | None:
    """Why a cnn of these sizes does not fit a block's shared memory (None: it fits)."""
    img, fil = shared_limits(dtype)
    pixels, weights = C * H * W, C * k * k
    if pixels > img:
        return (f"workload.features = {pixels} (C·H·W) exceeds the {img} {dtype} elements of an image a "
                "block stages in shared memory")
    if weights * KF > fil:
        return (f"a filter of C·k·k = {weights} weights exceeds the {fil // KF} of {dtype} a block stages "
                f"for {KF} filters at once")
    return None


@cuda.jit(device=True)
def draw(rng: Any, w: int, n: int) -> Any:
    """The next row index in [0, n) from worker w's xorshift64 state (lane 0 only)."""
    x = rng[w]
    x ^= x << np.uint64(13)
    x ^= x >> np.uint64(7)
    x ^= x << np.uint64(17)
    rng[w] = x
    return np.int64((x >> np.uint64(11)) % np.uint64(n))


@cuda.jit(device=True)
def sample(rng: Any, idx: Any, w: int, ln: Any, batch: int, n: int) -> None:
    """idx[w, :batch] ← a minibatch of rows (lane 0 draws; the caller syncs before reading)."""
    if ln == 0:
        for b in range(batch):
            idx[w, b] = draw(rng, w, n)


@functools.cache
def build(dtype: str, batch: int, g_const: float = 0.0) -> SimpleNamespace:
    """Device functions for θ of ``dtype`` and minibatches of ``batch`` rows (module docstring)."""
    DT = ELEMENT[np.dtype(dtype)]
    B = batch
    G = g_const
    SL = SLOTS
    IMG, FIL = shared_limits(dtype)

    @cuda.jit(device=True)
    def const(w: int, ln: Any, nl: Any, th: Any, g: Any) -> None:
        for i in range(ln, g.shape[1], nl):
            g[w, i] = G

    @cuda.jit(device=True)
    def copy(dst: Any, src: Any, ln: Any, nl: Any) -> None:
        """dst ← src, lane-strided, U loads in flight before their stores (a lone block is latency-bound)."""
        r = cuda.local.array(U, DT)
        n = dst.shape[0]
        for i0 in range(ln, n, nl * U):
            for u in range(U):
                if i0 + u * nl < n:
                    r[u] = src[i0 + u * nl]
            for u in range(U):
                if i0 + u * nl < n:
                    dst[i0 + u * nl] = r[u]

    @cuda.jit(device=True)
    def stage(sh: Any, s: Any, src: Any, w: int, off: Any, stride: Any, c0: Any, nc: Any, ln: Any, nl: Any) -> None:
        """sh[s, c, b] ← src[w, off + b·stride + c0 + c] for the tile's columns c, 0 from column nc on.
        Consecutive lanes read consecutive columns (coalesced); the caller syncs before and after."""
        n = min(KT, (nc - c0 + WT - 1) // WT * WT)  # the columns read: whole groups of WT
        for i in range(ln, n * B, nl):
            b, c = i // n, i % n
            sh[s, c, b] = src[w, off + b * stride + c0 + c] if c0 + c < nc else DT(0)

    @cuda.jit(device=True)
    def product(acc: Any, wv: Any, sh: Any, s: Any, src: Any, w: int, off: Any, nc: Any, th: Any, at: Any,
                step: Any, mine: Any, ln: Any, nl: Any) -> None:
        """acc[b] = Σ_c src[w, off + b·nc + c] · θ[at + c·step] over the nc columns c (all lanes: the
        columns staged KT at a time, :func:`stage`; ``mine``: this lane has an output, its weights loaded
        WT at a time into wv)."""
        for b in range(B):
            acc[b] = 0
        for c0 in range(0, nc, KT):
            wsync(w)
            stage(sh, s, src, w, off, nc, c0, nc, ln, nl)
            wsync(w)
            if mine:
                for c1 in range(0, min(KT, nc - c0), WT):
                    for cc in range(WT):
                        c = c0 + c1 + cc
                        wv[cc] = th[at + c * step] if c < nc else DT(0)
                    for cc in range(WT):
                        for b in range(B):
                            acc[b] += sh[s, c1 + cc, b] * wv[cc]

    @cuda.jit(device=True)
    def dense_forward(w: int, ln: Any, nl: Any, th: Any, first: Any, widths: Any, L: Any, act: Any, sh: Any) -> Any:
        """act[w]: [A0 | Z1 | … | ZL] (B rows each); layer l's W at θ[first + …]. Returns ZL's offset.
        A lane per output column j; A's columns staged KT at a time, the lane's weights loaded WT at a time."""
        s = slot()
        acc = cuda.local.array(B, DT)
        wv = cuda.local.array(WT, DT)
        oa, ot = 0, first
        for l in range(L):
            nin, nout = widths[l], widths[l + 1]
            on = oa + B * nin
            ob = ot + nin * nout
            for j0 in range(0, nout, nl):
                j = j0 + ln
                product(acc, wv, sh, s, act, w, oa, nin, th, ot + j, nout, j < nout, ln, nl)
                if j < nout:
                    bj = th[ob + j]
                    for b in range(B):
                        v = acc[b] + bj
                        if l < L - 1 and v < 0:
                            v = 0
                        act[w, on + b * nout + j] = v
            wsync(w)
            oa, ot = on, ob + nout
        return oa

    @cuda.jit(device=True)
    def softmax_delta(w: int, ln: Any, nl: Any, act: Any, oz: Any, C: Any, y: Any, idx: Any) -> None:
        """Logits act[w, oz + b·C + c] become (softmax − onehot)/B."""
        scale = DT(1.0 / B)
        for b in range(ln, B, nl):
            o = oz + b * C
            c0 = y[idx[w, b]]
            mx = act[w, o]
            for j in range(1, C):
                mx = max(mx, act[w, o + j])
            s = DT(0)
            for j in range(C):
                s += math.exp(act[w, o + j] - mx)
            lse = mx + math.log(s)
            for j in range(C):
                p = math.exp(act[w, o + j] - lse) * scale
                act[w, o + j] = p - scale if j == c0 else p
        wsync(w)

    @cuda.jit(device=True)
    def dense_backward(w: int, ln: Any, nl: Any, th: Any, first: Any, widths: Any, L: Any, act: Any, dl: Any, g: Any,
                       need_input: Any, sh: Any) -> None:
        """Gradients of the dense layers into g[w]; with ``need_input`` the delta at the first layer's
        input (unmasked) is left in dl[w, 0 : B·widths[0]]. Hidden deltas live in dl[w] after it.
        gW = Aᵀ·D: a lane per column j holds D's column in registers, A staged KT columns at a time;
        D·Wᵀ: a lane per input k, D staged KT columns at a time, the lane's weights loaded WT at a time."""
        s = slot()
        acc = cuda.local.array(B, DT)
        dr = cuda.local.array(B, DT)
        wv = cuda.local.array(WT, DT)
        offs_a = cuda.local.array(16, np.int64)
        offs_t = cuda.local.array(16, np.int64)
        oa, ot = 0, first
        for l in range(L):
            offs_a[l], offs_t[l] = oa, ot
            oa += B * widths[l]
            ot += widths[l] * widths[l + 1] + widths[l + 1]
        od = B * widths[0]  # dl: [input delta | D1 | … | D_{L-1}]
        offs_d = cuda.local.array(16, np.int64)
        for l in range(1, L):
            offs_d[l] = od
            od += B * widths[l]
        zs = oa  # the logits' delta: act[w, zs : zs + B·C]
        for l in range(L - 1, -1, -1):
            nin, nout = widths[l], widths[l + 1]
            oa, ot = offs_a[l], offs_t[l]
            ob = ot + nin * nout
            D = act if l == L - 1 else dl
            od = zs if l == L - 1 else offs_d[l + 1]
            for j0 in range(0, nout, nl):
                j = j0 + ln
                if j < nout:
                    sb = DT(0)
                    for b in range(B):
                        dr[b] = D[w, od + b * nout + j]
                        sb += dr[b]
                    g[w, ob + j] = sb
                for k0 in range(0, nin, KT):
                    wsync(w)
                    stage(sh, s, act, w, oa, nin, k0, nin, ln, nl)
                    wsync(w)
                    if j < nout:
                        for k1 in range(0, min(KT, nin - k0), WT):
                            for kk in range(WT):  # WT independent sums (the tile is 0 past nin)
                                wv[kk] = 0
                                for b in range(B):
                                    wv[kk] += sh[s, k1 + kk, b] * dr[b]
                            for kk in range(WT):
                                if k0 + k1 + kk < nin:
                                    g[w, ot + (k0 + k1 + kk) * nout + j] = wv[kk]
            if l > 0 or need_input:
                for k0 in range(0, nin, nl):
                    k = k0 + ln
                    product(acc, wv, sh, s, D, w, od, nout, th, ot + k * nout, 1, k < nin, ln, nl)
                    if k < nin:
                        for b in range(B):
                            if l > 0:
                                dl[w, offs_d[l] + b * nin + k] = acc[b] if act[w, oa + b * nin + k] > 0 else 0
                            else:
                                dl[w, b * nin + k] = acc[b]
            wsync(w)

    @cuda.jit(device=True)
    def dense(w: int, ln: Any, nl: Any, th: Any, first: Any, widths: Any, L: Any, act: Any, dl: Any, g: Any, y: Any,
              idx: Any, need_input: Any) -> None:
        """The softmax network on act[w]'s input rows: forward, cross-entropy delta, backward into g[w]."""
        sh = cuda.shared.array((SL, KT, B), DT, alignment=16)  # 16: a tile row's 4 elements in one load
        oz = dense_forward(w, ln, nl, th, first, widths, L, act, sh)
        softmax_delta(w, ln, nl, act, oz, widths[L], y, idx)
        dense_backward(w, ln, nl, th, first, widths, L, act, dl, g, need_input, sh)

    @cuda.jit(device=True)
    def mlp(w: int, ln: Any, nl: Any, th: Any, X: Any, y: Any, idx: Any, widths: Any, L: Any, act: Any, dl: Any,
            g: Any) -> None:
        F = widths[0]
        r = cuda.local.array(U, DT)
        for i0 in range(ln, B * F, nl * U):
            for u in range(U):
                i = i0 + u * nl
                if i < B * F:
                    r[u] = X[idx[w, i // F], i % F]
            for u in range(U):
                i = i0 + u * nl
                if i < B * F:
                    act[w, i] = r[u]
        wsync(w)
        dense(w, ln, nl, th, 0, widths, L, act, dl, g, y, idx, False)

    @cuda.jit(device=True)
    def conv_forward(w: int, ln: Any, nl: Any, th: Any, X: Any, idx: Any, cd: Any, conv: Any, img: Any, fil: Any,
                     s: Any) -> None:
        """conv[w]: ReLU(conv(X rows) + bias) (valid, stride 1), image by image: the image staged in
        img[s], KF filters at a time staged in fil[s] ([c·k·k + u·k + v][filter]), a lane per output
        pixel with the KF filters' sums in registers: each image value read once per KF filters."""
        C, H, Wd, K, k, Ho, Wo = cd[0], cd[1], cd[2], cd[3], cd[4], cd[5], cd[6]
        CKK, HoWo = C * k * k, Ho * Wo
        acc = cuda.local.array(KF, DT)
        for b in range(B):
            wsync(w)
            copy(img[s, :C * H * Wd], X[idx[w, b], :C * H * Wd], ln, nl)
            for f0 in range(0, K, KF):
                wsync(w)
                for i in range(ln, CKK * KF, nl):
                    f = f0 + i % KF
                    fil[s, i] = th[f * CKK + i // KF] if f < K else DT(0)
                wsync(w)
                for ij in range(ln, HoWo, nl):
                    i, j = ij // Wo, ij % Wo
                    for kf in range(KF):
                        acc[kf] = th[K * CKK + f0 + kf] if f0 + kf < K else DT(0)
                    for c in range(C):
                        for u in range(k):
                            at = (c * H + i + u) * Wd + j
                            o = ((c * k + u) * k) * KF
                            for v in range(k):
                                x = img[s, at + v]
                                for kf in range(KF):
                                    acc[kf] += fil[s, o + v * KF + kf] * x
                    for kf in range(KF):
                        if f0 + kf < K:
                            a = acc[kf]
                            conv[w, (b * K + f0 + kf) * HoWo + ij] = a if a > 0 else 0
        wsync(w)

    @cuda.jit(device=True)
    def pool(w: int, ln: Any, nl: Any, cd: Any, conv: Any, act: Any, arg: Any) -> None:
        """act[w, :B·K·Hp·Wp]: P×P max-pool of conv[w]; arg[w]: where each maximum's window starts in
        the input image (row·W + column of its top-left), for the filters' gradients."""
        Wd, K, Ho, Wo, P, Hp, Wp = cd[2], cd[3], cd[5], cd[6], cd[7], cd[8], cd[9]
        pp, per = K * Hp * Wp, K * Ho * Wo
        for t in range(ln, B * pp, nl):
            s, o = t // pp, t % pp
            f, pij = o // (Hp * Wp), o % (Hp * Wp)
            pi, pj = pij // Wp, pij % Wp
            best = -1
            bv = -math.inf
            for u in range(P):
                for v in range(P):
                    q = (f * Ho + pi * P + u) * Wo + pj * P + v
                    if conv[w, s * per + q] > bv:
                        bv = conv[w, s * per + q]
                        best = (pi * P + u) * Wd + pj * P + v
            act[w, t] = bv
            arg[w, t] = best
        wsync(w)

    @cuda.jit(device=True)
    def conv_backward(w: int, ln: Any, nl: Any, X: Any, idx: Any, cd: Any, act: Any, dl: Any, g: Any, arg: Any,
                      img: Any, s: Any) -> None:
        """The conv filters' and biases' gradients into g[w, :K·C·k·k + K] through the pool's maxima:
        dl[w, :B·K·Hp·Wp] holds the pooled maps' deltas (zeroed here where the ReLU was off). Image by
        image (staged in img[s]); a lane per filter weight or bias, U maxima's deltas in flight."""
        C, H, Wd, K, k, Hp, Wp = cd[0], cd[1], cd[2], cd[3], cd[4], cd[8], cd[9]
        CKK, HpWp = C * k * k, Hp * Wp
        pp, nw = K * HpWp, K * CKK
        for t in range(ln, B * pp, nl):
            if not act[w, t] > 0:
                dl[w, t] = 0
        dv = cuda.local.array(U, DT)
        av = cuda.local.array(U, np.int64)
        for b in range(B):
            wsync(w)
            copy(img[s, :C * H * Wd], X[idx[w, b], :C * H * Wd], ln, nl)
            wsync(w)
            for t in range(ln, nw + K, nl):
                f = t // CKK if t < nw else t - nw
                r = t % CKK
                c, ab = r // (k * k), r % (k * k)
                at = c * H * Wd + (ab // k) * Wd + ab % k
                o0 = b * pp + f * HpWp
                acc = DT(0)
                for o1 in range(0, HpWp, U):
                    for u in range(U):
                        if o1 + u < HpWp:
                            dv[u], av[u] = dl[w, o0 + o1 + u], arg[w, o0 + o1 + u]
                        else:
                            dv[u] = 0
                    for u in range(U):
                        if dv[u] != 0:
                            acc += dv[u] if t >= nw else dv[u] * img[s, at + av[u]]
                g[w, t] = acc if b == 0 else g[w, t] + acc
        wsync(w)

    @cuda.jit(device=True)
    def cnn(w: int, ln: Any, nl: Any, th: Any, X: Any, y: Any, idx: Any, widths: Any, L: Any, act: Any, dl: Any, g: Any,
            cd: Any, conv: Any, arg: Any) -> None:
        """cd = [C, H, W, K, k, Ho, Wo, P, Hp, Wp]; conv[w]: the ReLU'd conv maps; arg[w]: the pool's maxima.
        The dense part reads its input (the pooled maps) from act[w, 0 : B·widths[0]]."""
        s = slot()
        img = cuda.shared.array((SL, IMG), DT, alignment=16)
        fil = cuda.shared.array((SL, FIL), DT, alignment=16)
        conv_forward(w, ln, nl, th, X, idx, cd, conv, img, fil, s)
        pool(w, ln, nl, cd, conv, act, arg)
        dense(w, ln, nl, th, cd[3] * cd[0] * cd[4] * cd[4] + cd[3], widths, L, act, dl, g, y, idx, True)
        conv_backward(w, ln, nl, X, idx, cd, act, dl, g, arg, img, s)

    return SimpleNamespace(const=const, mlp=mlp, cnn=cnn, copy=copy, B=B, DT=DT)
