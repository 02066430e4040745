"""CUDA kernels (numba.cuda) of the cuda backend: the models' forward/backward and the update rules.

Import only after :func:`executors.cuda.device.require` (it decides GPU or simulator).

Models, on the flat θ layout of ``simasgd/numerics/workloads/kernels.py`` and ``cnn_kernels.py``:
``matmul`` (shared-memory tiles, either operand transposed), ``bias_act`` (bias, ReLU),
``softmax_ce`` (loss per row, output delta in place), ``col_sum`` (bias gradients),
``relu_mask``, and for the cnn ``conv_relu``, ``max_pool``, ``unpool_mask``, ``conv_grad``.

Updates (:mod:`simasgd.numerics.update_rule`'s step, element by element, one thread per element):
``step`` (ĝ = scale·g / div with div from the attempt's recorded versions), ``accumulate``
(``cuda.atomic.add``), ``read_into`` (copy θ, note the version counter), ``bump`` (atomic
increment of the version counter), and Leashed-SGD's single-thread ``acquire`` / ``claim`` /
``publish`` on a device pool (the cpu executor's protocol, ``executors/cpu/lockfree.py``).
Lopez et al.'s kernels are in :mod:`executors.cuda.lopez`.
"""

from __future__ import annotations

import math
from typing import Any

from numba import cuda, float64

from executors.cuda.device import simulator

# Tiles: 16×16 threads on a GPU; 8×8 under the simulator, where every thread is a Python thread.
TILE = 8 if simulator() else 16
THREADS = 32 if simulator() else 256  # threads per block of the element-wise kernels
REDUCE = 4 if simulator() else 128    # at most this many threads per block of a reduction (conv_grad)
REDUCE_BLOCKS = 8                      # a reduction's blocks under the simulator (reduce_blocks)
CLAIMED = 1 << 40  # a pool vector's reader count while a writer owns it (as executors/cpu/shared.py)


# --------------------------------------------------------------------------- models

@cuda.jit(cache=True)
def matmul(A: Any, B: Any, C: Any, ta: int, tb: int) -> None:
    """C = op(A)·op(B); op = transpose where ``ta``/``tb``. Grid (ceil(o/TILE), ceil(m/TILE)), block (TILE, TILE)."""
    sA = cuda.shared.array((TILE, TILE), float64)
    sB = cuda.shared.array((TILE, TILE), float64)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    m, o = C.shape
    n = A.shape[0] if ta else A.shape[1]
    acc = 0.0
    for t in range((n + TILE - 1) // TILE):
        k = t * TILE + tx
        v = 0.0
        if row < m and k < n:
            v = A[k, row] if ta else A[row, k]
        sA[ty, tx] = v
        k = t * TILE + ty
        v = 0.0
        if col < o and k < n:
            v = B[col, k] if tb else B[k, col]
        sB[ty, tx] = v
        cuda.syncthreads()
        for j in range(TILE):
            acc += sA[ty, j] * sB[j, tx]
        cuda.syncthreads()
    if row < m and col < o:
        C[row, col] = acc


@cuda.jit(cache=True)
def gather(X: Any, idx: Any, A: Any) -> None:
    """A[r, :] = X[idx[r], :A.shape[1]]."""
    i = cuda.grid(1)
    m, n = A.shape
    if i < m * n:
        r, c = i // n, i % n
        A[r, c] = X[idx[r], c]


@cuda.jit(cache=True)
def bias_act(Z: Any, b: Any, relu: Any) -> None:
    i = cuda.grid(1)
    m, n = Z.shape
    if i < m * n:
        r, c = i // n, i % n
        v = Z[r, c] + b[c]
        Z[r, c] = v if (v > 0 or not relu) else 0.0


@cuda.jit(cache=True)
def softmax_ce(Z: Any, y: Any, idx: Any, scale: float, loss: Any) -> None:
    """One thread per row: loss[r] = CE of row r; Z[r] becomes scale·(softmax − onehot)."""
    r = cuda.grid(1)
    m, C = Z.shape
    if r < m:
        c0 = y[idx[r]]
        mx = Z[r, 0]
        for j in range(1, C):
            mx = max(mx, Z[r, j])
        s = 0.0
        for j in range(C):
            s += math.exp(Z[r, j] - mx)
        lse = mx + math.log(s)
        loss[r] = lse - Z[r, c0]
        for j in range(C):
            p = math.exp(Z[r, j] - lse) * scale
            Z[r, j] = p - scale if j == c0 else p


@cuda.jit(cache=True)
def col_sum(D: Any, out: Any) -> None:
    """out[j] = Σ_r D[r, j]."""
    j = cuda.grid(1)
    m, n = D.shape
    if j < n:
        s = 0.0
        for r in range(m):
            s += D[r, j]
        out[j] = s


@cuda.jit(cache=True)
def relu_mask(D: Any, A: Any) -> None:
    """D *= [A > 0] (A holds ReLU outputs)."""
    i = cuda.grid(1)
    m, n = D.shape
    if i < m * n:
        r, c = i // n, i % n
        if A[r, c] <= 0:
            D[r, c] = 0.0


@cuda.jit(cache=True)
def conv_relu(theta: Any, X: Any, idx: Any, dims: Any, out: Any) -> None:
    """out[s, (f·Ho + i)·Wo + j] = ReLU(conv); dims = [C, H, W, K, k, Ho, Wo]."""
    t = cuda.grid(1)
    C, H, W, K, k, Ho, Wo = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6]
    per = K * Ho * Wo
    if t < out.shape[0] * per:
        s, q = t // per, t % per
        f, ij = q // (Ho * Wo), q % (Ho * Wo)
        i, j = ij // Wo, ij % Wo
        row = idx[s]
        bc = K * C * k * k
        acc = theta[bc + f]
        for c in range(C):
            for a in range(k):
                for b in range(k):
                    acc += theta[((f * C + c) * k + a) * k + b] * X[row, (c * H + i + a) * W + j + b]
        out[s, q] = acc if acc > 0 else 0.0


@cuda.jit(cache=True)
def max_pool(conv: Any, dims: Any, pool: Any, arg: Any) -> None:
    """P×P max of the ReLU'd conv (first maximum wins); arg = flat conv index; dims = [K, Ho, Wo, P, Hp, Wp]."""
    t = cuda.grid(1)
    K, Ho, Wo, P, Hp, Wp = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]
    per = K * Hp * Wp
    if t < pool.shape[0] * per:
        s, o = t // per, t % per
        f, pij = o // (Hp * Wp), o % (Hp * Wp)
        pi, pj = pij // Wp, pij % Wp
        best = -1
        bv = -math.inf
        for a in range(P):
            for b in range(P):
                q = (f * Ho + pi * P + a) * Wo + pj * P + b
                if conv[s, q] > bv:
                    bv = conv[s, q]
                    best = q
        pool[s, o] = bv
        arg[s, o] = best


@cuda.jit(cache=True)
def conv_grad(X: Any, idx: Any, dpool: Any, pool: Any, arg: Any, dims: Any, g: Any) -> None:
    """A block per conv weight or bias (block b → g[b], g[b + blocks], …) -> None: its threads split the Σ over the
    batch and the pooled outputs whose (positive) maximum came from a window touching it, then add their
    parts in shared memory. dims = [C, H, W, K, k, Ho, Wo, Hp, Wp]; the block's size is a power of two
    ≤ ``REDUCE``.

    One thread per weight looping over the batch (about a thousand threads for the study's CNN) would leave
    a large GPU's SMs nearly idle, and this kernel most of the gradient's time (benchmarks/README_cuda.md)."""
    tid, nt = cuda.threadIdx.x, cuda.blockDim.x
    C, H, W, K, k, Ho, Wo, Hp, Wp = (dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6],
                                     dims[7], dims[8])
    nw = K * C * k * k
    per = Hp * Wp
    part = cuda.shared.array(REDUCE, float64)
    for t in range(cuda.blockIdx.x, nw + K, cuda.gridDim.x):  # the same t for all the block's threads
        f = t // (C * k * k) if t < nw else t - nw
        r = t % (C * k * k)
        c, ab = r // (k * k), r % (k * k)
        a, b = ab // k, ab % k
        acc = 0.0
        for n in range(tid, pool.shape[0] * per, nt):
            s, o = n // per, f * per + n % per
            d = dpool[s, o]
            if d != 0.0 and pool[s, o] > 0:
                if t >= nw:
                    acc += d
                else:
                    q = arg[s, o] - f * Ho * Wo
                    acc += d * X[idx[s], (c * H + q // Wo + a) * W + q % Wo + b]
        part[tid] = acc
        cuda.syncthreads()
        half = nt // 2
        while half > 0:
            if tid < half:
                part[tid] += part[tid + half]
            cuda.syncthreads()
            half //= 2
        if tid == 0:
            g[t] = part[0]  # thread 0 alone reads part[0] and alone writes it next: no barrier needed here


def reduce_blocks(items: int) -> int:
    """Blocks of a reduction over ``items`` sums: one each on a GPU; a few under the simulator, where every
    thread is a Python thread (each block then takes several sums in turn)."""
    return min(items, REDUCE_BLOCKS) if simulator() else items


def reduce_threads(items: int) -> int:
    """A reduction block's size: the power of two ≥ ``items``, at most ``REDUCE``."""
    return min(REDUCE, 1 << max(0, (items - 1).bit_length()))


# --------------------------------------------------------------------------- updates

@cuda.jit(cache=True)
def read_into(dst: Any, src: Any, ctr: Any, recr: Any, slot: Any) -> None:
    """dst = src; the version counter into recr[slot] (first thread, before its copy)."""
    i = cuda.grid(1)
    if i == 0:
        recr[slot] = cuda.atomic.add(ctr, 0, 0)  # an atomic read: the counter as other streams left it
    if i < dst.shape[0]:
        dst[i] = src[i]


@cuda.jit(cache=True)
def bump(ctr: Any, recv: Any, slot: Any) -> None:
    """recv[slot] = the version this update makes (atomic increment of the counter)."""
    if cuda.grid(1) == 0:
        recv[slot] = cuda.atomic.add(ctr, 0, 1) + 1


@cuda.jit(cache=True)
def note_version(ctr: Any, recv: Any, slot: Any) -> None:
    if cuda.grid(1) == 0:
        recv[slot] = cuda.atomic.add(ctr, 0, 0)


@cuda.jit(device=True)
def _div(aware: Any, recv: Any, recr: Any, slot: Any) -> Any:
    """update_rule.divisor of τ = the version the step is applied on (``note_version`` put it in
    recv[slot]) − the read version (slot < 0: staleness 0), as the cpu loops' ``cur − rv``."""
    if slot < 0 or not aware:
        return 1.0
    tau = recv[slot] - recr[slot]
    return float(tau) if tau > 1 else 1.0


@cuda.jit(device=True)
def _step_one(theta: Any, vel: Any, i: int, gi: Any, lr: float, mom: float, div: Any) -> None:
    """update_rule.step on element i (its plain and heavy-ball forms)."""
    if mom > 0.0:
        vel[i] = mom * vel[i] + (gi if div == 1.0 else gi / div)
        theta[i] -= lr * vel[i]
    elif div == 1.0:
        theta[i] -= lr * gi
    else:
        theta[i] -= lr * (gi / div)


def in_dtype(theta: Any, *xs: float) -> tuple[Any, ...]:
    """The step's scalars (scale, η, m) in θ's element type: the rule computes in it (update_rule.py)."""
    return tuple(theta.dtype.type(x) for x in xs)


@cuda.jit(cache=True)
def step(theta: Any, vel: Any, g: Any, scale: float, lr: float, mom: float, aware: Any, recv: Any, recr: Any,
         slot: Any) -> None:
    """θ ← update_rule.step(θ, scale·g) on version recv[slot] read at recr[slot]; racy when several streams run it."""
    i = cuda.grid(1)
    if i < theta.shape[0]:
        gi = g[i] if scale == 1.0 else g[i] * scale
        _step_one(theta, vel, i, gi, lr, mom, _div(aware, recv, recr, slot))


@cuda.jit(cache=True)
def accumulate(total: Any, g: Any) -> None:
    i = cuda.grid(1)
    if i < g.shape[0]:
        cuda.atomic.add(total, i, g[i])


@cuda.jit(cache=True)
def zero(a: Any) -> None:
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] = 0.0


# --------------------------------------------------------------------------- Leashed-SGD on a device pool
# ctrl[0]: index of the latest vector; per vector p: rc[p] readers (CLAIMED while a writer owns it),
# stale[p] (1: free once rc == 0), ver[p] its version. slots[k]: [mine, base, read] of stream k.

@cuda.jit(device=True)
def _acquire(ctrl: Any, rc: Any) -> Any:
    while True:
        p = cuda.atomic.add(ctrl, 0, 0)
        cuda.atomic.add(rc, p, 1)
        if cuda.atomic.add(ctrl, 0, 0) == p:
            return p
        cuda.atomic.add(rc, p, -1)


@cuda.jit(cache=True)
def acquire(ctrl: Any, rc: Any, ver: Any, slots: Any, k: int, col: Any, recr: Any, slot: Any) -> None:
    """A reader reference on the latest vector into slots[k, col]; with slot >= 0 its version into recr[slot]."""
    if cuda.grid(1) == 0:
        p = _acquire(ctrl, rc)
        slots[k, col] = p
        if slot >= 0:
            recr[slot] = ver[p]


@cuda.jit(cache=True)
def release(rc: Any, slots: Any, k: int, col: Any) -> None:
    if cuda.grid(1) == 0:
        cuda.atomic.add(rc, slots[k, col], -1)


@cuda.jit(cache=True)
def copy_slot(dst: Any, pool: Any, slots: Any, k: int, col: Any) -> None:
    i = cuda.grid(1)
    if i < dst.shape[0]:
        dst[i] = pool[slots[k, col], i]


@cuda.jit(cache=True)
def claim(rc: Any, stale: Any, slots: Any, k: int) -> None:
    """Own a free vector (stale, unread) into slots[k, 0]; -1 when none is free now (the host retries)."""
    if cuda.grid(1) != 0:
        return
    slots[k, 0] = -1
    for p in range(stale.shape[0]):
        if stale[p] == 1 and rc[p] == 0:  # noqa: SIM102 - check, claim (a CAS), re-check: three steps
            if cuda.atomic.cas(rc, p, 0, CLAIMED) == 0:
                if stale[p] == 1:
                    slots[k, 0] = p
                    return
                cuda.atomic.add(rc, p, -CLAIMED)


@cuda.jit(cache=True)
def build(pool: Any, vpool: Any, slots: Any, k: int, g: Any, lr: float, mom: float, aware: Any, ver: Any, recr: Any,
          slot: Any) -> None:
    """pool[mine] = step(pool[base], g) with staleness ver[base] − read version (velocity carried likewise)."""
    i = cuda.grid(1)
    mine, base = slots[k, 0], slots[k, 1]
    if i < pool.shape[1]:
        div = 1.0
        if aware:
            tau = ver[base] - recr[slot]
            div = float(tau) if tau > 1 else 1.0
        pool[mine, i] = pool[base, i]
        if mom > 0.0:
            vpool[mine, i] = vpool[base, i]
        _step_one(pool[mine], vpool[mine], i, g[i], lr, mom, div)


@cuda.jit(cache=True)
def publish(ctrl: Any, rc: Any, stale: Any, ver: Any, ctr: Any, slots: Any, k: int, max_updates: Any, status: Any,
            recv: Any, slot: Any) -> None:
    """CAS the latest index from base to mine. status[k]: 1 applied, 0 failed (retry), 2 budget spent."""
    if cuda.grid(1) != 0:
        return
    mine, base = slots[k, 0], slots[k, 1]
    cur = ver[base]
    if cur >= max_updates:  # the budget ran out while this stream computed: cut off, not applied
        cuda.atomic.add(rc, base, -1)
        status[k] = 2
        return
    ver[mine] = cur + 1
    stale[mine] = 0
    cuda.threadfence()
    if cuda.atomic.cas(ctrl, 0, base, mine) == base:
        cuda.atomic.add(rc, mine, -CLAIMED)
        stale[base] = 1
        cuda.atomic.add(rc, base, -1)
        cuda.atomic.add(ctr, 0, 1)
        recv[slot] = cur + 1
        status[k] = 1
    else:
        cuda.atomic.add(rc, base, -1)
        recv[slot] = ver[cuda.atomic.add(ctrl, 0, 0)] + 1  # the version it would have had
        status[k] = 0

