"""``backup`` (Chen et al. 2016; Hattendorf 2024 §3.2): N + b workers, the first N gradients of a round applied.

A server on rank 0 holds θ; the ``workers.count`` = N + b workers are ranks 1.. . A round: every
worker computes a gradient at the round's θ (with ``onebit``, Q(g + e) with its own residual) and
pushes it, header ``(PUSH, w, read_version)`` and the gradient; the server keeps the first N pushes
of the round, steps θ with their mean (``update_rule.step``, staleness 0) — one version — and sends
every worker the close of the round: header ``(OK or STOP, applied, version)`` and the new θ. The b
others are discarded: a push that arrives after its round closed is dropped by the server, and a
worker still computing when the close arrives (a thread receives it: :class:`Closes`) is cancelled
where it can be — a straggler's extra time (``workers.stragglers``) ends there, a gradient kernel
already running finishes first — and pushes nothing. Every worker records one row a round: applied
(one of the first N) or dropped, ``version`` the round's, ``read_version`` the previous round's.
The server stops at ``stop.max_updates`` rounds or ``stop.max_time_s`` (the close says ``STOP``);
each worker then says ``BYE`` after any push of its own, and the server ends when all have.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from executors import atomics as A
from executors.cpu.runner import slowdowns
from executors.dist.common import velocity
from executors.dist.world import Rank, header, header_elements, message_buffer
from simasgd.numerics import compression, update_rule
from simasgd.spec import seeds

PUSH, BYE, OK, STOP = 1, 2, 3, 4
POLL_S = 0.00005


def run_backup(me: Rank, theta0: np.ndarray) -> None:
    if me.rank == 0:
        serve(me, theta0)
    else:
        work(me, theta0)


def serve(me: Rank, theta0: np.ndarray) -> None:
    sc, opt, n = me.sc, me.sc.optimizer, me.layout.workers
    need = n - int(sc.algorithm.param("backup"))
    theta, vel = theta0.copy(), velocity(me, theta0)
    g, total = np.empty_like(theta), np.zeros_like(theta)
    me.watch(theta0)
    version, stopped, late = 0, False, 0
    members: list[int] = []
    bye: set[int] = set()
    while len(bye) < n:
        _, hdr = me.recv(None, g, with_payload=(PUSH,))
        kind, w, rv = int(hdr[0]), int(hdr[1]), int(hdr[2])
        if kind == BYE:
            bye.add(w)
            continue
        if stopped or rv < version:  # its round closed before it came: discarded
            late += 1
            continue
        total += g
        members.append(w)
        if len(members) < need:
            continue
        update_rule.step(theta, vel, total / need, opt.lr, opt.momentum, 0, opt.staleness_aware)
        version += 1
        me.snapshot(version, theta)
        stopped = version >= sc.stop.max_updates or me.over()
        for u in range(n):
            me.send(1 + u, STOP if stopped else OK, u, int(u in members), version, payload=theta)
        members.clear()
        total[:] = 0
    me.final = theta
    me.extra |= {"rounds": version, "late_pushes": late}


class Closes(threading.Thread):
    """A worker's receiver of the server's round closes (gloo's receives complete only in a blocking
    wait, so a worker computing could not see a close otherwise): the latest θ and version, and which
    rounds applied this worker's gradient."""

    def __init__(self, theta: np.ndarray) -> None:
        super().__init__(name="simasgd-dist-closes", daemon=True)
        self.buf, self.theta = message_buffer(theta.dtype, len(theta)), np.empty_like(theta)
        self.h = header_elements(theta.dtype)
        self.lock = threading.Lock()
        self.version, self.stop, self.got, self.bytes = 0, False, 0, 0
        self.applied: dict[int, bool] = {}
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        import torch
        import torch.distributed as dist

        tb = torch.from_numpy(self.buf)
        try:
            while True:
                dist.recv(tb, 0)
                hdr = header(self.buf)
                with self.lock:
                    self.theta[:] = self.buf[self.h:]
                    self.version, self.stop = int(hdr[3]), int(hdr[0]) == STOP
                    self.applied[self.version] = bool(hdr[2])
                    self.got += 1
                    self.bytes += self.buf.nbytes
                if self.stop:
                    return
        except BaseException as e:
            self.error = e
            self.stop = True

    def after(self, version: int) -> bool:
        if self.error is not None:
            raise RuntimeError(f"receiving the round's close failed: {self.error}") from self.error
        return self.version > version


def work(me: Rank, theta0: np.ndarray) -> None:
    sc = me.sc
    w = me.rank - 1
    wl: Any = me.wl
    rng = seeds.rng(sc.seed, me.run, seeds.Role.BATCH, w)
    slow = slowdowns(sc, sc.workers.count)[w]
    onebit = bool(sc.algorithm.param("onebit"))
    theta, g, resid = theta0.copy(), np.empty_like(theta0), np.zeros_like(theta0)
    box = Closes(theta0)
    rv = 0
    while True:
        t_s = me.clock()
        t0 = A.clock_ns()
        wl.kernel(theta, wl.X, wl.y, wl.sample_batch(rng, sc.workload.batch_size), g, wl.shape)
        now = A.clock_ns()
        until = now + int((slow - 1.0) * (now - t0)) if slow > 1.0 else now
        while A.clock_ns() < until and not box.after(rv):  # a straggler's extra time, cancelled by the close
            time.sleep(POLL_S)
        t_ge = me.clock()
        pushed = not box.after(rv)
        if pushed:
            if onebit:
                compression.quantize(g, resid, g)
            me.send(0, PUSH, w, rv, payload=g)
        while not box.after(rv):
            time.sleep(POLL_S)
        with box.lock:
            theta[:] = box.theta
            applied = pushed and box.applied.get(rv + 1, False)
            version, stop = box.version, box.stop
        me.rows.add(w, rv + 1, rv, t_s, t_s, t_s, t_ge, me.clock(), 0.0, applied=applied)
        rv = version
        if stop:
            break
    me.send(0, BYE, w, size=len(g))
    box.join()
    me.received[0] += box.got
    me.received[1] += box.bytes
