"""Synchronous and K-of-N schemes (Dutta, Wang, Joshi 2018).

- ``sync``: every worker reads the model, computes, and waits at a barrier;
  the last to arrive applies the average of the n gradients (one update a
  round) and releases the others onto the new model.
- ``k_sync``: the first k gradients of the round are averaged and applied; the
  workers still computing are cancelled and everyone restarts on the new model.
- ``k_async``: an update is applied whenever k gradients have arrived (from any
  worker, possibly stale); the k workers that sent them read the new model,
  the others keep computing on what they read.

Staleness is per gradient: one row per gradient with ``version`` = the
version that first includes it (0 for sync and k-sync).
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import simpy

from simasgd.sim.engine import SimRun
from simasgd.sim.memory import Transfer
from simasgd.sim.primitives import Barrier, Interrupts, Mutex, acquire

Proc = Generator[simpy.Event, object, None]


class Round:
    """Shared state of the gradients collected towards the next update."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.arrived: list[tuple[int, int, float, float]] = []  # worker, read version, t_read, t_arrival
        self.done = env.event()
        self.busy: dict[int, simpy.Event] = {}
        self.procs: list[simpy.Process] = []
        self.closed = False
        self.comm_s = 0.0  # a closed round's exchange over [network] before its update (backup: the all-reduce)

    def close(self) -> tuple[list[tuple[int, int, float, float]], simpy.Event]:
        """Take the collected gradients and the event their senders wait on; open the next round."""
        batch, done = self.arrived, self.done
        self.arrived, self.done = [], self.env.event()
        return batch, done


def apply_round(run: SimRun, w: int, batch: list[tuple[int, int, float, float]]) -> simpy.Event | None:
    """Worker ``w`` applies one update made of ``batch``'s gradients; one row per gradient. The loss
    ring's copy that worker then takes (``SimRun.snapshot``), if this version is one it keeps, to yield."""
    if run.stopped:
        return None
    if run.model is not None:
        run.model.step_mean([b[0] for b in batch], [run.version - b[1] for b in batch])
    v = run.bump()
    for u, rv, t_read, _t in batch:
        run.rec.add(u, v, rv, t_read, run.env.now)
    return run.snapshot(w, v, row=False)


def _read_and_compute(env: simpy.Environment, w: int, run: SimRun) -> Generator[simpy.Event, object, tuple[int, float]]:
    """Copy the model, compute the gradient on it; (read version, read time)."""
    run.begin(w)
    yield run.platform.read(w)
    read = run.version, env.now
    yield from run.compute(w)
    return read


class Wire:
    """``sync`` over ``[network]`` and with ``onebit``: the all-reduce time and each worker's 1-bit residual."""

    def __init__(self, run: SimRun) -> None:
        from simasgd.numerics import compression
        from simasgd.sim import network

        self.quantize = compression.quantize
        self.onebit = bool(run.sc.algorithm.param("onebit"))
        self.net = network.for_run(run)
        p, m = run.platform, run.model
        itemsize = p.model_bytes // max(1, p.dim)
        self.allreduce_s = self.net.allreduce_s(network.gradient_bytes(p.dim, itemsize, self.onebit), run.n)
        self.residual = [np.zeros_like(m.theta) for _ in range(run.n)] if m is not None and self.onebit else []

    def send(self, run: SimRun, w: int) -> None:
        """Worker ``w``'s gradient as it is sent: Q(g + e) with ``onebit`` (e kept), else g."""
        if self.residual and run.model is not None:  # residuals are kept only with the model
            g = run.model.grad[w]
            self.quantize(g, self.residual[w], g)


def sync_worker(env: simpy.Environment, w: int, run: SimRun, barrier: Barrier, rnd: Round,
                wire: Wire | None = None) -> Proc:
    p = run.platform
    yield from run.start(w)
    while True:
        rv, t_read = yield from _read_and_compute(env, w, run)
        if wire is not None:
            wire.send(run, w)
        rnd.arrived.append((w, rv, t_read, env.now))
        done = rnd.done
        p.block(w)
        index = yield barrier.wait()
        if index == barrier.parties - 1:  # the last to arrive applies the round's update
            if wire is not None and wire.allreduce_s > 0:  # the ring all-reduce of the gradients
                yield env.timeout(wire.allreduce_s)
            yield p.update(w)
            batch, done = rnd.close()
            snap = apply_round(run, w, batch)
            if snap is not None:
                yield snap
            done.succeed()
        else:
            yield done


def k_sync_worker(env: simpy.Environment, w: int, run: SimRun, rnd: Round, k: int) -> Proc:
    p, model = run.platform, run.model
    yield from run.start(w)
    while True:
        done = rnd.done
        try:  # reading or computing, the worker is cancelled when k others finish first
            run.begin(w)
            work = rnd.busy[w] = p.read(w)
            yield work
            rv, t_read = run.version, env.now
            run.computing(w)
            if model is not None:
                model.snapshot(w)
                model.gradient(w)
            work = rnd.busy[w] = p.gradient(w)
            yield work
            run.computed(w)
        except simpy.Interrupt as stop:
            if isinstance(work, simpy.Process) and work.is_alive:
                if isinstance(stop.cause, Interrupts):
                    stop.cause.later(work)  # with the other cancelled workers' work, in one event
                else:
                    work.interrupt()
            elif isinstance(work, Transfer):
                work.cancel()  # its misses not yet under way never start
            p.block(w)
            yield done
            continue
        del rnd.busy[w]
        if rnd.closed:  # finished in the same instant the round closed: too late, like a cancel
            p.block(w)
            yield done
            continue
        rnd.arrived.append((w, rv, t_read, env.now))
        if len(rnd.arrived) < k:
            p.block(w)
            yield done
            continue
        rnd.closed = True
        if rnd.busy:
            Interrupts(env, [rnd.procs[other] for other in rnd.busy])
        rnd.busy.clear()
        if rnd.comm_s > 0:
            yield env.timeout(rnd.comm_s)
        yield p.update(w)
        batch, done = rnd.close()
        snap = apply_round(run, w, batch)
        if snap is not None:
            yield snap
        rnd.closed = False
        done.succeed()


def k_async_worker(env: simpy.Environment, w: int, run: SimRun, rnd: Round, k: int, server: Mutex) -> Proc:
    p = run.platform
    backoff = run.backoff(w)
    yield from run.start(w)
    while True:
        rv, t_read = yield from _read_and_compute(env, w, run)
        rnd.arrived.append((w, rv, t_read, env.now))
        done = rnd.done
        if len(rnd.arrived) < k:
            p.block(w)
            yield done
            continue
        batch, done = rnd.close()  # the k-th arrival takes the batch to the (serial) server
        req = yield from acquire(env, server.request, lambda: server.free, backoff, lambda: p.block(w),
                                 p.handoff_s[w])
        yield p.update(w)
        snap = apply_round(run, w, batch)
        if snap is not None:
            yield snap
        server.release(req)
        done.succeed()


def start_sync(run: SimRun) -> None:
    barrier, rnd = Barrier(run.env, run.n), Round(run.env)
    wire = Wire(run) if run.sc.algorithm.param("onebit") or run.sc.network is not None else None
    for w in range(run.n):
        run.env.process(sync_worker(run.env, w, run, barrier, rnd, wire))


def start_k_sync(run: SimRun) -> None:
    rnd, k = Round(run.env), run.sc.algorithm.param("k")
    rnd.procs = [run.env.process(k_sync_worker(run.env, w, run, rnd, k)) for w in range(run.n)]


def start_k_async(run: SimRun) -> None:
    rnd, k, server = Round(run.env), run.sc.algorithm.param("k"), Mutex(run.env)
    for w in range(run.n):
        run.env.process(k_async_worker(run.env, w, run, rnd, k, server))
