"""The workers' kernels: one per algorithm, each a loop of attempts run by one worker's block; built here over
the device functions they share (the gradient, an attempt's start, the snapshot, the step), each in its
family's module, named as the simulator's: :mod:`.lockfree` (hogwild, leashed), :mod:`.locks` (mutex,
sequential), :mod:`.synchronous` (sync), :mod:`.lopez`.

A launch runs ``cfg[ATTEMPTS]`` attempts per worker (−1: until the run stops). Resident mode launches
every worker once with −1; streams mode launches one worker's block per attempt from its host thread,
with the worker's state (its batch stream, claimed vector, last gradient) kept on the device between
launches. The algorithms are those of :mod:`simasgd.spec.algorithms`, step for step as the cpu loops
(``executors/cpu/locks.py``, ``lockfree.py``, ``lopez.py``) and the streams backend
(``executors/cuda/lockfree.py``, ``synchronous.py``, ``lopez.py``) make them:

- ``hogwild``: a ticket (the update budget), read the version, θ → own copy (``local_copy``) or the
  live θ, gradient, the step on θ with no synchronisation (lanes write element-wise; other workers
  race), then the version's atomic increment.
- ``mutex``: a CAS spin lock around the copy and around the step (Ek 2021, Alg. 2); ``sequential`` is
  one worker of it.
- ``leashed``: Leashed-SGD on a device pool of vectors (Bäckström et al. 2021): reference the latest,
  copy, release; gradient; claim a free vector, build step(latest, g) in it, CAS the latest index;
  a failed CAS retries up to ``persistence`` times (−1: unbounded), then the attempt is dropped.
- ``sync``: gradients at θ, a device-wide barrier, each worker steps its slice of θ with the mean of
  all gradients, a barrier whose last arrival makes the version.
- ``lopez``: worker 0 is the master stepping θ with acc/(N−1) without waiting; the others replace
  their contribution to acc with atomic adds (Lopez et al. 2020, Alg. 2/3).

Arguments, the same for every kernel: ``first`` (worker id of block 0), θ, velocity, X, y, ``ctl``,
``cfg``, ``cfgf`` ([lr, momentum] in θ's dtype), per-worker rows ``local``, ``g``, ``act``, ``dl``,
``conv``, ``arg``, ``idx``, ``rng``, ``wsw``, the rows, the snapshot ring, and ``af``/``af2``/``ai``
(Leashed's pool and its words; Lopez's sum and last gradients).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import numpy as np

from executors.cuda.kernels import _step_one
from executors.gpu import gradients, lockfree, locks, lopez, synchronous
from executors.gpu import protocol as P
from executors.gpu.device import cuda, now, wsync

KINDS = ("mlp", "cnn", "const")


@functools.cache
def build(kind: str, dtype: str, batch: int, g_const: float = 0.0) -> SimpleNamespace:
    """The kernels for a workload ``kind`` (mlp, cnn, const), θ's dtype and the batch size."""
    F = gradients.build(dtype, batch, g_const)
    B, DT, U = batch, F.DT, gradients.U
    CNN, MLP = kind == "cnn", kind == "mlp"
    # closure cells: numba types functions, not namespaces
    cnn_grad, mlp_grad, const_grad, copy = F.cnn, F.mlp, F.const, F.copy

    @cuda.jit(device=True)
    def grad(w: int, ln: Any, nl: Any, th: Any, X: Any, y: Any, idx: Any, cfg: Any, act: Any, dl: Any, g: Any,
             conv: Any, arg: Any) -> None:
        if CNN:
            cnn_grad(w, ln, nl, th, X, y, idx, cfg[P.WIDTHS:], cfg[P.LAYERS], act, dl, g, cfg[P.CONV:], conv, arg)
        elif MLP:
            mlp_grad(w, ln, nl, th, X, y, idx, cfg[P.WIDTHS:], cfg[P.LAYERS], act, dl, g)
        else:
            const_grad(w, ln, nl, th, g)
        wsync(w)

    @cuda.jit(device=True)
    def begin(w: int, ln: Any, ctl: Any, cfg: Any, rng: Any, idx: Any, wsw: Any, ticket: Any) -> Any:
        """Lane 0: the attempt's start time, whether it runs (the stop word; a ticket where the budget is
        counted in tickets), its minibatch. All lanes: meet, then read the answer."""
        if ln == 0:
            t = now()
            P.mark_start(ctl, t)
            wsw[w, P.W_T0] = t
            go = 0 if P.stopped(ctl) else 1
            if go == 1 and ticket and cuda.atomic.add(ctl, P.TICKET * P.LINE, 1) >= cfg[P.MAXU]:
                go = 0
                P.stop(ctl, P.BUDGET)
            wsw[w, P.W_GO] = go
            if go == 1:
                gradients.sample(rng, idx, w, 0, B, cfg[P.NROWS])
        wsync(w)
        return wsw[w, P.W_GO] != 0

    @cuda.jit(device=True)
    def snapshot(w: int, ln: Any, nl: Any, th: Any, cfg: Any, snap: Any, meta: Any, wsw: Any, v: Any,
                 take: Any) -> None:
        """Version v's θ into the ring when ``take`` (all lanes)."""
        if not take:
            return
        if ln == 0:
            wsw[w, P.W_SLOT] = P.snapshot_begin(meta, cfg, v)
        wsync(w)
        slot = wsw[w, P.W_SLOT]
        copy(snap[slot], th, ln, nl)
        wsync(w)
        if ln == 0:
            P.snapshot_end(meta, slot, v)
        wsync(w)

    @cuda.jit(device=True)
    def step_all(theta: Any, vel: Any, gw: Any, ln: Any, nl: Any, lr: float, mom: float, div: Any) -> None:
        """update_rule.step of θ with gradient gw, lane-strided, then a fence (the caller syncs): a round's U
        elements of θ, g (and velocity) loaded first, each stepped by ``_step_one`` in registers, then stored."""
        tv = cuda.local.array(U, DT)
        gv = cuda.local.array(U, DT)
        vv = cuda.local.array(U, DT)
        n = theta.shape[0]
        for i0 in range(ln, n, nl * U):
            for u in range(U):
                i = i0 + u * nl
                if i < n:
                    tv[u], gv[u] = theta[i], gw[i]
                    if mom > 0.0:
                        vv[u] = vel[i]
            for u in range(U):
                i = i0 + u * nl
                if i < n:
                    _step_one(tv, vv, u, gv[u], lr, mom, div)
                    theta[i] = tv[u]
                    if mom > 0.0:
                        vel[i] = vv[u]
        cuda.threadfence()

    @cuda.jit(device=True)
    def due(cfg: Any, v: Any) -> Any:
        return v > 0 and v % cfg[P.EVERY] == 0

    c = SimpleNamespace(B=B, DT=DT, U=U, copy=copy, grad=grad, begin=begin, snapshot=snapshot, step_all=step_all,
                        due=due)
    hogwild, leashed = lockfree.build(c)
    mutex = locks.build(c)
    sync = synchronous.build(c)
    lopez_ = lopez.build(c)
    return SimpleNamespace(hogwild=hogwild, mutex=mutex, sequential=mutex, leashed=leashed, sync=sync,
                           lopez=lopez_)


def kind_of(wl: object) -> str | None:
    """The device gradient of a workload: "mlp", "cnn", "const" (the conformance workload), or None."""
    from simasgd.numerics.workloads import kernels as cpu_kernels
    from simasgd.numerics.workloads.cnn_kernels import CNN
    from simasgd.numerics.workloads.constant import ConstWorkload

    if isinstance(wl, ConstWorkload):
        return "const"
    shape = getattr(wl, "shape", np.zeros(0))
    dense = isinstance(getattr(wl, "X", None), np.ndarray)
    tag = int(shape[0]) if len(shape) else -1
    if dense and tag == cpu_kernels.SOFTMAX:
        return "mlp"
    if dense and tag == CNN:
        return "cnn"
    return None
