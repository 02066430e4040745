"""Lock-based AsyncSGD (Ek 2021, Alg. 2): read a copy under the lock, compute, update under the lock.

The update leaves the new θ in the worker's copy too, so a read that finds θ at the version the
worker's own update made costs nothing where the executor skips it (the cpu executor's ``run_locked``:
its traits' ``reads = "elided"``, simasgd/spec/traits.py); that update, on lines it wrote last and another
core has read since, runs at the rate calibrated for it (``Platform.mirrors``).

``mutex`` uses one :class:`~simasgd.sim.primitives.Mutex`; ``rwlock`` reads
under a shared read lock and updates under the exclusive write lock. With
``[sim] read_lock = false`` the read is a lock-free snapshot and each cycle
takes the lock once (the finite-source M/M/1//M queue of docs/theory.md).
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import simpy

from simasgd.sim.engine import SimRun
from simasgd.sim.primitives import Mutex, Req, RWLock, acquire


def lock_worker(env: simpy.Environment, w: int, run: SimRun, read_req: Callable[[], Req],
                write_req: Callable[[], Req], read_free: Callable[[], bool],
                write_free: Callable[[], bool], release: Callable[[Req], object],
                gate: Callable[[int], Generator[simpy.Event, object, None]] | None = None,
                done: Callable[[int], None] | None = None) -> Generator[simpy.Event, object, None]:
    """``gate`` (``yield from``) runs at the start of every cycle, ``done`` after every update (SSP's clock)."""
    p, model = run.platform, run.model
    read_lock = run.sc.sim.read_lock
    backoff = run.backoff(w)
    spins = backoff.spins
    handoff = p.handoff_s[w]
    block = lambda: p.block(w)
    # a spinning one keeps it, burning its quantum (the cpu executor's locks spin); a sleeping one (a futex,
    # the torch executor's multiprocessing.Lock) gives it away
    spin = (lambda ev, again: p.cores.spin_wait(w, ev, again)) if run.traits.lock_waiters != "sleep" else None
    hold = lambda held: p.cores.hold(w, held)
    elide = run.elide_reads
    if run.traits.updates == "mirrored":  # the executor's update leaves the new θ in the worker's copy
        p.mirrors(w)
    mine = -1  # the version this worker's last update made: its copy of θ holds it
    yield from run.start(w)
    while True:
        wait = 0.0
        run.begin(w)
        if gate is not None:
            yield from gate(w)
        if read_lock:
            t0 = env.now
            if spins or not read_free():
                req = yield from acquire(env, read_req, read_free, backoff, block, handoff, spin)
            else:  # uncontended: take it without a nested generator (the hot path)
                req = read_req()
                yield req
            wait = env.now - t0
            hold(True)
            if not (elide and run.version == mine):  # else no one updated θ since: the copy is θ
                yield p.read(w)
            hold(False)
            release(req)
        elif not (elide and run.version == mine):
            yield p.read(w)
        t_read, rv = env.now, run.version
        p.computes_on_copy(w)
        yield from run.compute(w)
        t0 = env.now
        if spins or not write_free():
            req = yield from acquire(env, write_req, write_free, backoff, block, handoff, spin)
        else:
            req = write_req()
            yield req
        wait += env.now - t0
        hold(True)
        yield p.update(w)
        if model is not None:
            model.step(model.grad[w], run.version - rv)
        mine = run.applied(w, rv, t_read, wait)
        snap = run.snapshot(w, mine)
        if snap is not None:  # the loss ring's copy, taken inside the lock as the executor takes it
            yield snap
        hold(False)
        release(req)
        if done is not None:
            done(w)


def start_mutex(run: SimRun) -> None:
    lock = Mutex(run.env)
    free = lambda: lock.free
    for w in range(run.n):
        run.env.process(lock_worker(run.env, w, run, lock.request, lock.request, free, free, lock.release))


def start_rwlock(run: SimRun) -> None:
    lock = RWLock(run.env, writer_priority=run.sc.algorithm.param("priority") == "writer")
    for w in range(run.n):
        run.env.process(lock_worker(run.env, w, run, lock.read, lock.write,
                                    lock.can_read, lock.can_write, lock.release))
