"""The lock-free kernels (the simulator's and the cpu backend's ``lockfree`` family).

- ``hogwild``: a ticket (the update budget), read the version, θ → own copy (``local_copy``) or the
  live θ, gradient, the step on θ with no synchronisation (lanes write element-wise; other workers
  race), then the version's atomic increment.
- ``leashed``: Leashed-SGD on a device pool of vectors (Bäckström et al. 2021): reference the latest,
  copy, release; gradient; claim a free vector, build step(latest, g) in it, CAS the latest index;
  a failed CAS retries up to ``persistence`` times (−1: unbounded), then the attempt is dropped.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from executors.cuda.kernels import _step_one
from executors.gpu import protocol as P
from executors.gpu.device import cuda, lane, lanes, now, worker, wsync


def build(c: SimpleNamespace) -> tuple[Any, Any]:
    """The kernels over the shared device functions and constants ``c`` (:func:`.kernels.build`)."""
    # closure cells: numba types functions, not namespaces
    copy, grad, begin, snapshot, step_all, due = c.copy, c.grad, c.begin, c.snapshot, c.step_all, c.due

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

    return hogwild, leashed
