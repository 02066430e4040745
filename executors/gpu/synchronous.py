"""The synchronous kernel (the ``synchronous`` family): ``sync``, gradients at θ, a device-wide barrier,
each worker steps its slice of θ with the mean of all gradients, a barrier whose last arrival makes the
version."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from executors.cuda.kernels import _step_one
from executors.gpu import gradients
from executors.gpu import protocol as P
from executors.gpu.device import cuda, lane, lanes, now, worker, wsync


def build(c: SimpleNamespace) -> Any:
    """The kernel over the shared device functions and constants ``c`` (:func:`.kernels.build`)."""
    # closure cells: numba types functions, not namespaces
    B, grad, snapshot, due = c.B, c.grad, c.snapshot, c.due

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

    return sync
