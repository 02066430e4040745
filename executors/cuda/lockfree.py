"""The lock-free algorithms on streams (the simulator's and the cpu backend's ``lockfree`` family).

- ``hogwild``: read θ (noting the version counter), gradient, the step on θ with no synchronisation
  (concurrent streams' element writes race), then the atomic increment of the counter; exactly
  ``max_updates`` attempts (:class:`Tickets`).
- ``leashed``: a device pool of vectors; reference the latest, copy it, release; gradient; claim a
  free vector, build step(latest, g) in it, CAS the latest index (``publish``); a failed CAS retries
  up to ``persistence`` times, then the attempt is dropped.
"""

from __future__ import annotations

import threading
from typing import Any

from executors.cuda import kernels as K
from executors.cuda.loops import read
from executors.cuda.model import launch, launch1, to_host


class Tickets:
    """The update budget for loops whose every attempt applies (hogwild): exactly ``n`` attempts."""

    def __init__(self, n: int) -> None:
        self.left, self.lock = n, threading.Lock()

    def take(self) -> bool:
        with self.lock:
            if self.left <= 0:
                return False
            self.left -= 1
            return True



def hogwild(r: Any, w: int) -> None:
    s, rec, grad, clock = r.streams[w], r.records[w], r.grads[w], r.clock
    local, g = r.local[w], r.g[w]
    opt = r.sc.optimizer
    while not r.stop.is_set() and r.tickets.take():
        slot = rec.slot
        m0 = clock.mark(s)
        read(r, w, local)
        m1 = clock.mark(s)
        grad.compute(local, r.batch(w), g)
        m2 = clock.mark(s)
        # As the cpu loop: the step on the version current now (τ = cur − rv), then the increment that
        # makes this update's version; so a snapshot never counts a version whose step is not in θ.
        launch1(K.note_version, s, r.ctr, rec.recv, slot)
        launch(K.step, r.dim, s, r.theta, r.vel, g, *K.in_dtype(r.theta, 1.0, opt.lr, opt.momentum),
               opt.staleness_aware, rec.recv, rec.recr, slot)
        launch1(K.bump, s, r.ctr, rec.recv, slot)
        m3 = clock.mark(s)
        s.synchronize()
        rec.done((m0, m1, m2, m3), 0, True)



def leashed(r: Any, w: int) -> None:
    s, rec, grad, clock = r.streams[w], r.records[w], r.grads[w], r.clock
    local, g, opt, p = r.local[w], r.g[w], r.sc.optimizer, r.pool
    persistence = r.persistence  # -1: unbounded
    have_mine = False
    while not r.stop.is_set():
        slot = rec.slot
        m0 = clock.mark(s)
        launch1(K.acquire, s, p.ctrl, p.rc, p.ver, p.slots, w, 2, rec.recr, slot)
        launch(K.copy_slot, r.dim, s, local, p.vectors, p.slots, w, 2)
        launch1(K.release, s, p.rc, p.slots, w, 2)
        m1 = clock.mark(s)
        grad.compute(local, r.batch(w), g)
        m2 = clock.mark(s)
        while not have_mine:  # a free vector to build the next one in (the pool never runs dry: 2n+2)
            launch1(K.claim, s, p.rc, p.stale, p.slots, w)
            have_mine = int(to_host(p.slots, s)[w, 0]) >= 0
            if not have_mine and r.stop.wait(1e-5):
                return
        retries, applied = 0, False
        while True:
            launch1(K.acquire, s, p.ctrl, p.rc, p.ver, p.slots, w, 1, rec.recr, -1)
            launch(K.build, r.dim, s, p.vectors, p.velocities, p.slots, w, g, opt.lr, opt.momentum,
                   opt.staleness_aware, p.ver, rec.recr, slot)
            launch1(K.publish, s, p.ctrl, p.rc, p.stale, p.ver, r.ctr, p.slots, w, r.sc.stop.max_updates,
                    p.status, rec.recv, slot)
            status = int(to_host(p.status, s)[w])
            if status == 1:
                applied, have_mine = True, False
                break
            if status == 2:  # the budget ran out while computing: cut off, no row
                r.stop.set()
                return
            retries += 1
            if 0 <= persistence < retries:
                break
            if r.stop.is_set():  # the run ended mid-retry: cut off, not dropped
                return
        m3 = clock.mark(s)
        rec.done((m0, m1, m2, m3), retries, applied)

