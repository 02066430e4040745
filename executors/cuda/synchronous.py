"""``sync`` on streams: read, gradient, ``cuda.atomic.add`` into the shared sum; a barrier whose action (one
host thread) steps θ with the mean (staleness 0) and increments the counter; a second barrier."""

from __future__ import annotations

import threading
from typing import Any

from executors.cuda import kernels as K
from executors.cuda.loops import read
from executors.cuda.model import launch, launch1


class SyncRound:
    """Two barriers a round; the first decides whether the round runs, the second steps θ once."""

    def __init__(self, r: Any) -> None:
        self.r, self.go, self.version = r, True, 0
        n = r.n
        self.start = threading.Barrier(n, action=self._decide)
        self.end = threading.Barrier(n, action=self._step)

    def _decide(self) -> None:
        r = self.r
        self.go = not r.stop.is_set() and self.version < r.sc.stop.max_updates

    def _step(self) -> None:
        r, opt = self.r, self.r.sc.optimizer
        s, rec = r.master_stream, r.records[0]
        launch(K.step, r.dim, s, r.theta, r.vel, r.gsum, *K.in_dtype(r.theta, 1.0 / r.n, opt.lr, opt.momentum),
               False, rec.recv, rec.recr, -1)
        launch1(K.bump, s, r.ctr, r.scratch, 0)
        launch(K.zero, r.dim, s, r.gsum)
        s.synchronize()
        self.version += 1

    def abort(self) -> None:
        self.start.abort()
        self.end.abort()


def sync(r: Any, w: int) -> None:
    s, rec, grad, clock = r.streams[w], r.records[w], r.grads[w], r.clock
    local, g = r.local[w], r.g[w]
    rnd: SyncRound = r.round
    while True:
        rnd.start.wait()
        if not rnd.go:
            return
        slot = rec.slot
        m0 = clock.mark(s)
        read(r, w, local)
        m1 = clock.mark(s)
        grad.compute(local, r.batch(w), g)
        m2 = clock.mark(s)
        launch(K.accumulate, r.dim, s, r.gsum, g)
        s.synchronize()
        rnd.end.wait()
        launch1(K.note_version, s, r.ctr, rec.recv, slot)
        m3 = clock.mark(s)
        s.synchronize()
        rec.done((m0, m1, m2, m3), 0, True)
