"""The workers' kernels: one per algorithm, each a loop of attempts run by one worker's block.

A launch runs ``cfg[ATTEMPTS]`` attempts per worker (−1: until the run stops). Resident mode launches
every worker once with −1; streams mode launches one worker's block per attempt from its host thread,
with the worker's state (its batch stream, claimed vector, last gradient) kept on the device between
launches. The algorithms are those of :mod:`simasgd.algorithms`, step for step as the cpu loops
(``executors/cpu/loops.py``, ``leashed.py``, ``lopez.py``) and the streams backend
(``executors/cuda/loops.py``) make them:

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
from executors.resident import gradients
from executors.resident import protocol as P
from executors.resident.device import cuda, lane, lanes, now, worker, wsync

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

    @cuda.jit
    def hogwild(first: Any, theta: Any, vel: Any, X: Any, y: Any, ctl: Any, cfg: Any, cfgf: Any, local: Any, g: Any,
                act: Any, dl: Any, conv: Any, arg: Any, idx: Any, rng: Any, wsw: Any,
                rows_i: Any, rows_t: Any, snap: Any, meta: Any, af: Any, af2: Any, ai: Any) -> None:
        w, ln, nl = worker(first), lane(), lanes()
        lr, mom, aware = cfgf[0], cfgf[1], cfg[P.AWARE]
        done = 0
        while cfg[P.ATTEMPTS] < 0 or done < cfg[P.ATTEMPTS]:
            done += 1
            if not begin(w, ln, ctl, cfg, rng, idx, wsw, True):
                break
            if ln == 0:
                wsw[w, P.W_READ] = P.load(ctl, P.VERSION)
            src = theta
            if cfg[P.LOCAL] != 0:
                src = local[w]
                copy(src, theta, ln, nl)
            wsync(w)
            if ln == 0:  # no copy, no read phase: the draw of the batch counts with the gradient, as on cpu
                wsw[w, P.W_T1] = now() if cfg[P.LOCAL] != 0 else wsw[w, P.W_T0]
            grad(w, ln, nl, src, X, y, idx, cfg, act, dl, g, conv, arg)
            if ln == 0:
                wsw[w, P.W_T2] = now()
                wsw[w, P.W_CUR] = P.load(ctl, P.VERSION)  # the version the step lands on: τ = cur − read
            wsync(w)
            step_all(theta, vel, g[w], ln, nl, lr, mom, P.divisor(aware, wsw[w, P.W_CUR] - wsw[w, P.W_READ]))
            wsync(w)
            if ln == 0:
                v = cuda.atomic.add(ctl, P.VERSION * P.LINE, 1) + 1
                wsw[w, P.W_CUR] = v
                P.record(ctl, cfg, rows_i, rows_t, w, v, wsw[w, P.W_READ], 0, 1, 0, wsw[w, P.W_T0],
                         wsw[w, P.W_T1], wsw[w, P.W_T2], now())
            wsync(w)
            snapshot(w, ln, nl, theta, cfg, snap, meta, wsw, wsw[w, P.W_CUR], due(cfg, wsw[w, P.W_CUR]))

    @cuda.jit
    def mutex(first: Any, theta: Any, vel: Any, X: Any, y: Any, ctl: Any, cfg: Any, cfgf: Any, local: Any, g: Any,
              act: Any, dl: Any, conv: Any, arg: Any, idx: Any, rng: Any, wsw: Any,
              rows_i: Any, rows_t: Any, snap: Any, meta: Any, af: Any, af2: Any, ai: Any) -> None:
        w, ln, nl = worker(first), lane(), lanes()
        lr, mom, aware = cfgf[0], cfgf[1], cfg[P.AWARE]
        mine = local[w]
        done = 0
        while cfg[P.ATTEMPTS] < 0 or done < cfg[P.ATTEMPTS]:
            done += 1
            if not begin(w, ln, ctl, cfg, rng, idx, wsw, False):
                break
            if ln == 0:
                wait = P.lock(ctl, cfg)
                wsw[w, P.W_STATUS] = 1 if wait >= 0 else 0
                wsw[w, P.W_WAIT] = wait
                wsw[w, P.W_READ] = P.load(ctl, P.VERSION)
            wsync(w)
            if wsw[w, P.W_STATUS] == 0:
                break
            copy(mine, theta, ln, nl)
            wsync(w)
            if ln == 0:
                P.unlock(ctl)
                wsw[w, P.W_T1] = now()
            grad(w, ln, nl, mine, X, y, idx, cfg, act, dl, g, conv, arg)
            if ln == 0:
                wsw[w, P.W_T2] = now()
                wait = P.lock(ctl, cfg)
                cur = P.load(ctl, P.VERSION)
                go = 1 if wait >= 0 else 0
                if go == 1 and cur >= cfg[P.MAXU]:  # the budget ran out while computing: not applied
                    P.unlock(ctl)
                    P.stop(ctl, P.BUDGET)
                    go = 0
                wsw[w, P.W_STATUS] = go
                wsw[w, P.W_CUR] = cur
                wsw[w, P.W_WAIT] += wait
            wsync(w)
            if wsw[w, P.W_STATUS] == 0:
                break
            step_all(theta, vel, g[w], ln, nl, lr, mom, P.divisor(aware, wsw[w, P.W_CUR] - wsw[w, P.W_READ]))
            wsync(w)
            if ln == 0:
                v = cuda.atomic.add(ctl, P.VERSION * P.LINE, 1) + 1
                wsw[w, P.W_CUR] = v
                if v >= cfg[P.MAXU]:
                    P.stop(ctl, P.BUDGET)
            wsync(w)
            v = wsw[w, P.W_CUR]
            snapshot(w, ln, nl, theta, cfg, snap, meta, wsw, v, due(cfg, v))  # under the lock, as the cpu loop
            if ln == 0:
                P.unlock(ctl)
                P.record(ctl, cfg, rows_i, rows_t, w, v, wsw[w, P.W_READ], 0, 1, wsw[w, P.W_WAIT],
                         wsw[w, P.W_T0], wsw[w, P.W_T1], wsw[w, P.W_T2], now())
            wsync(w)

    @cuda.jit(device=True)
    def acquire(ctl: Any, rc: Any) -> Any:
        """A reader reference on the latest pool vector (lane 0)."""
        while True:
            p = P.load(ctl, P.LATEST)
            cuda.atomic.add(rc, p, 1)
            if P.load(ctl, P.LATEST) == p:
                return p
            cuda.atomic.add(rc, p, -1)

    @cuda.jit(device=True)
    def claim(ctl: Any, rc: Any, stale: Any) -> Any:
        """Own a free vector (stale, unread); −1 if the run stopped while none was free (lane 0)."""
        while True:
            for p in range(stale.shape[0]):
                if stale[p] == 1 and cuda.atomic.add(rc, p, 0) == 0:  # noqa: SIM102 - check, claim, re-check
                    if cuda.atomic.cas(rc, p, 0, P.CLAIMED) == 0:
                        if stale[p] == 1:
                            return p
                        cuda.atomic.add(rc, p, -P.CLAIMED)
            if P.stopped(ctl):
                return -1

    @cuda.jit
    def leashed(first: Any, theta: Any, vel: Any, X: Any, y: Any, ctl: Any, cfg: Any, cfgf: Any, local: Any, g: Any,
                act: Any, dl: Any, conv: Any, arg: Any, idx: Any, rng: Any, wsw: Any,
                rows_i: Any, rows_t: Any, snap: Any, meta: Any, af: Any, af2: Any, ai: Any) -> None:
        w, ln, nl = worker(first), lane(), lanes()
        lr, mom, aware = cfgf[0], cfgf[1], cfg[P.AWARE]
        size = af.shape[0]
        rc, stale, ver, held = ai[0:size], ai[size:2 * size], ai[2 * size:3 * size], ai[3 * size:]
        persistence = cfg[P.PERSIST]
        done = 0
        while cfg[P.ATTEMPTS] < 0 or done < cfg[P.ATTEMPTS]:
            done += 1
            if not begin(w, ln, ctl, cfg, rng, idx, wsw, False):
                break
            if ln == 0:
                p = acquire(ctl, rc)
                wsw[w, P.W_AUX] = p
                wsw[w, P.W_READ] = ver[p]
            wsync(w)
            copy(local[w], af[wsw[w, P.W_AUX]], ln, nl)
            wsync(w)
            if ln == 0:
                cuda.atomic.add(rc, wsw[w, P.W_AUX], -1)
                wsw[w, P.W_T1] = now()
            grad(w, ln, nl, local[w], X, y, idx, cfg, act, dl, g, conv, arg)
            if ln == 0:
                wsw[w, P.W_T2] = now()
                if held[w] < 0:
                    held[w] = claim(ctl, rc, stale)
                wsw[w, P.W_STATUS] = 0 if held[w] >= 0 else 2
                wsw[w, P.W_RETRIES] = 0
            wsync(w)
            while True:
                status = wsw[w, P.W_STATUS]
                wsync(w)  # every lane has read it before lane 0 writes it again
                if status != 0:
                    break
                if ln == 0:
                    base = acquire(ctl, rc)
                    wsw[w, P.W_AUX] = base
                    if ver[base] >= cfg[P.MAXU]:  # the budget ran out while computing: cut off, no row
                        cuda.atomic.add(rc, base, -1)
                        P.stop(ctl, P.BUDGET)
                        wsw[w, P.W_STATUS] = 2
                wsync(w)
                if wsw[w, P.W_STATUS] != 0:
                    status = wsw[w, P.W_STATUS]
                    break
                base, mine = wsw[w, P.W_AUX], held[w]
                div = P.divisor(aware, ver[base] - wsw[w, P.W_READ])
                dst, src, vd, vs = af[mine], af[base], af2[mine], af2[base]
                for i in range(ln, dst.shape[0], nl):
                    dst[i] = src[i]
                    if mom > 0:
                        vd[i] = vs[i]
                    _step_one(dst, vd, i, g[w, i], lr, mom, div)
                cuda.threadfence()
                wsync(w)
                if ln == 0:
                    cur = ver[base]
                    ver[mine] = cur + 1
                    stale[mine] = 0
                    cuda.threadfence()
                    if cuda.atomic.cas(ctl, P.LATEST * P.LINE, base, mine) == base:
                        cuda.atomic.add(rc, mine, -P.CLAIMED)
                        stale[base] = 1
                        cuda.atomic.add(rc, base, -1)
                        cuda.atomic.add(ctl, P.VERSION * P.LINE, 1)
                        held[w] = -1
                        wsw[w, P.W_CUR] = cur + 1
                        wsw[w, P.W_STATUS] = 1
                    else:
                        cuda.atomic.add(rc, base, -1)
                        wsw[w, P.W_CUR] = ver[P.load(ctl, P.LATEST)] + 1  # the version it would have had
                        wsw[w, P.W_RETRIES] += 1
                        if 0 <= persistence < wsw[w, P.W_RETRIES]:
                            wsw[w, P.W_STATUS] = 3  # dropped
                        elif P.stopped(ctl):
                            wsw[w, P.W_STATUS] = 2  # the run ended mid-retry: cut off, not dropped
                wsync(w)
            if status == 2:
                break
            if ln == 0:
                retries = wsw[w, P.W_RETRIES] - (1 if status == 3 else 0)
                P.record(ctl, cfg, rows_i, rows_t, w, wsw[w, P.W_CUR], wsw[w, P.W_READ], retries,
                         1 if status == 1 else 0, 0, wsw[w, P.W_T0], wsw[w, P.W_T1], wsw[w, P.W_T2], now())
                v = wsw[w, P.W_CUR]
                if status == 1 and v >= cfg[P.MAXU]:
                    P.stop(ctl, P.BUDGET)
                wsw[w, P.W_AUX] = acquire(ctl, rc) if status == 1 and due(cfg, v) else -1
            wsync(w)
            p = wsw[w, P.W_AUX]
            if p >= 0:  # the latest vector under a reader reference: it cannot be reclaimed while copied
                snapshot(w, ln, nl, af[p], cfg, snap, meta, wsw, ver[p], True)
                if ln == 0:
                    cuda.atomic.add(rc, p, -1)
                wsync(w)

    @cuda.jit
    def sync(first: Any, theta: Any, vel: Any, X: Any, y: Any, ctl: Any, cfg: Any, cfgf: Any, local: Any, g: Any,
             act: Any, dl: Any, conv: Any, arg: Any, idx: Any, rng: Any, wsw: Any,
             rows_i: Any, rows_t: Any, snap: Any, meta: Any, af: Any, af2: Any, ai: Any) -> None:
        w, ln, nl = worker(first), lane(), lanes()
        lr, mom = cfgf[0], cfgf[1]
        n = cfg[P.WORKERS]
        d = theta.shape[0]
        chunk = (d + n - 1) // n
        scale = cfgf[2]  # 1/N in θ's dtype
        done = 0
        while cfg[P.ATTEMPTS] < 0 or done < cfg[P.ATTEMPTS]:
            done += 1
            if ln == 0:
                t = now()
                P.mark_start(ctl, t)
                wsw[w, P.W_T0] = t
                wsw[w, P.W_GO] = P.load(ctl, P.GO)
                wsw[w, P.W_READ] = P.load(ctl, P.VERSION)
                if wsw[w, P.W_GO] != 0:
                    gradients.sample(rng, idx, w, 0, B, cfg[P.NROWS])
            wsync(w)
            if wsw[w, P.W_GO] == 0:
                break
            if ln == 0:
                wsw[w, P.W_T1] = now()
            grad(w, ln, nl, theta, X, y, idx, cfg, act, dl, g, conv, arg)  # nobody writes θ in this phase
            if ln == 0:
                wsw[w, P.W_T2] = now()
                P.barrier(ctl, cfg, n, False)
            wsync(w)
            for i in range(w * chunk + ln, min(d, (w + 1) * chunk), nl):
                s = g[0, i]
                for k in range(1, n):
                    s += g[k, i]
                _step_one(theta, vel, i, s * scale, lr, mom, 1.0)
            cuda.threadfence()
            wsync(w)
            if ln == 0:
                P.barrier(ctl, cfg, n, True)
                v = wsw[w, P.W_READ] + 1
                P.record(ctl, cfg, rows_i, rows_t, w, v, v - 1, 0, 1, 0, wsw[w, P.W_T0], wsw[w, P.W_T1],
                         wsw[w, P.W_T2], now())
            v = wsw[w, P.W_READ] + 1  # read before the wsync: lane 0 writes W_READ again right after it
            wsync(w)
            if w == 0:
                snapshot(w, ln, nl, theta, cfg, snap, meta, wsw, v, due(cfg, v))

    @cuda.jit
    def lopez(first: Any, theta: Any, vel: Any, X: Any, y: Any, ctl: Any, cfg: Any, cfgf: Any, local: Any, g: Any,
              act: Any, dl: Any, conv: Any, arg: Any, idx: Any, rng: Any, wsw: Any,
              rows_i: Any, rows_t: Any, snap: Any, meta: Any, af: Any, af2: Any, ai: Any) -> None:
        w, ln, nl = worker(first), lane(), lanes()
        lr, mom = cfgf[0], cfgf[1]
        scale = cfgf[2]  # 1/(N − 1) in θ's dtype
        acc = af[0]
        consistent = cfg[P.CONSISTENT] != 0
        done = 0
        while cfg[P.ATTEMPTS] < 0 or done < cfg[P.ATTEMPTS]:
            done += 1
            if w == 0:  # the master (Alg. 2): announce, step with what it reads of acc, version
                if ln == 0:
                    P.mark_start(ctl, now())
                    go = 1
                    if P.stopped(ctl) or cuda.atomic.add(ctl, P.TICKET * P.LINE, 1) >= cfg[P.MAXU]:
                        go = 0
                        P.stop(ctl, P.BUDGET)  # the master's budget is the run's
                    if go == 1:
                        if consistent:
                            cuda.atomic.add(ctl, P.SEQ * P.LINE, 1)
                        cuda.atomic.exch(ctl, P.ANN * P.LINE, P.load(ctl, P.VERSION) + 1)
                        cuda.threadfence()
                    wsw[w, P.W_GO] = go
                wsync(w)
                if wsw[w, P.W_GO] == 0:
                    break
                for i in range(ln, theta.shape[0], nl):
                    _step_one(theta, vel, i, acc[i] * scale, lr, mom, 1.0)
                cuda.threadfence()
                wsync(w)
                if ln == 0:
                    wsw[w, P.W_CUR] = cuda.atomic.add(ctl, P.VERSION * P.LINE, 1) + 1
                    if consistent:
                        cuda.threadfence()
                        cuda.atomic.add(ctl, P.SEQ * P.LINE, 1)
                wsync(w)
                snapshot(w, ln, nl, theta, cfg, snap, meta, wsw, wsw[w, P.W_CUR], due(cfg, wsw[w, P.W_CUR]))
                continue
            old = af[w]  # af[1 + k] for worker k ≥ 1 is its last gradient (af[0] the sum)
            if not begin(w, ln, ctl, cfg, rng, idx, wsw, False):
                break
            mine = local[w]
            while True:  # Alg. 3 line 3: torn copy, or a seqlock copy retried until it is one version
                if ln == 0:
                    wsw[w, P.W_AUX] = P.load(ctl, P.SEQ)
                    wsw[w, P.W_READ] = P.load(ctl, P.VERSION)
                wsync(w)
                copy(mine, theta, ln, nl)
                cuda.threadfence()
                wsync(w)
                if ln == 0:
                    s0 = wsw[w, P.W_AUX]
                    wsw[w, P.W_STATUS] = 1 if (not consistent or (s0 == P.load(ctl, P.SEQ) and s0 % 2 == 0)
                                                or P.stopped(ctl)) else 0
                wsync(w)
                if wsw[w, P.W_STATUS] == 1:
                    break
            with_add = cfg[P.WITH_ADD] != 0
            if not with_add:
                if ln == 0:
                    _drop_unseen(ctl, ai, rows_i, w)
                wsync(w)
                for i in range(ln, acc.shape[0], nl):  # line 4: acc ← acc − g_old
                    cuda.atomic.add(acc, i, -old[i])
            wsync(w)
            if ln == 0:
                wsw[w, P.W_T1] = now()
            grad(w, ln, nl, mine, X, y, idx, cfg, act, dl, g, conv, arg)
            if ln == 0:
                wsw[w, P.W_T2] = now()
                if with_add:
                    _drop_unseen(ctl, ai, rows_i, w)
            wsync(w)
            for i in range(ln, acc.shape[0], nl):  # line 7: acc ← acc + g_new (with_add: + g_new − g_old)
                cuda.atomic.add(acc, i, g[w, i] - old[i] if with_add else g[w, i])
            cuda.threadfence()
            wsync(w)
            if ln == 0:
                v = P.load(ctl, P.ANN) + 1  # the first step to begin reading acc after the add
                r = P.record(ctl, cfg, rows_i, rows_t, w, v, wsw[w, P.W_READ], 0, 1, 0, wsw[w, P.W_T0],
                             wsw[w, P.W_T1], wsw[w, P.W_T2], now())
                ai[2 * w] = r
                ai[2 * w + 1] = v
            copy(old, g[w], ln, nl)
            wsync(w)

    @cuda.jit(device=True)
    def _drop_unseen(ctl: Any, ai: Any, rows_i: Any, w: int) -> None:
        """Before the pass that removes this worker's last gradient from acc: if no step was announced
        since it went in, no step read it — its row is not applied (lane 0)."""
        r = ai[2 * w]
        if r >= 0 and P.load(ctl, P.ANN) < ai[2 * w + 1]:
            rows_i[r, P.R_APPLIED] = 0
        ai[2 * w] = -1

    return SimpleNamespace(hogwild=hogwild, mutex=mutex, sequential=mutex, leashed=leashed, sync=sync,
                           lopez=lopez)


def kind_of(wl: object) -> str | None:
    """The device gradient of a workload: "mlp", "cnn", "const" (the conformance workload), or None."""
    from simasgd.workloads import kernels as cpu_kernels
    from simasgd.workloads.cnn_kernels import CNN
    from simasgd.workloads.constant import ConstWorkload

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
