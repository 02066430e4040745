"""The lock-based kernel (the ``locks`` family): ``mutex``, a CAS spin lock around the copy and around the
step (Ek 2021, Alg. 2); ``sequential`` is one worker of it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from executors.gpu import protocol as P
from executors.gpu.device import cuda, lane, lanes, now, worker, wsync


def build(c: SimpleNamespace) -> Any:
    """The kernel over the shared device functions and constants ``c`` (:func:`.kernels.build`)."""
    # closure cells: numba types functions, not namespaces
    copy, grad, begin, snapshot, step_all, due = c.copy, c.grad, c.begin, c.snapshot, c.step_all, c.due

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

    return mutex
