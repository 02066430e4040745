"""Lopez et al. 2020, Alg. 2/3 (the ``lopez`` family): worker 0 is the master stepping θ with acc/(N−1)
without waiting; the others replace their contribution to acc with atomic adds."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from executors.cuda.kernels import _step_one
from executors.gpu import protocol as P
from executors.gpu.device import cuda, lane, lanes, now, worker, wsync


def build(c: SimpleNamespace) -> Any:
    """The kernel over the shared device functions and constants ``c`` (:func:`.kernels.build`)."""
    # closure cells: numba types functions, not namespaces
    copy, grad, begin, snapshot, due = c.copy, c.grad, c.begin, c.snapshot, c.due

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

    return lopez
