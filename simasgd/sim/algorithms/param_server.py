"""Asynchronous SGD through a parameter server (Dean et al. 2012 "Downpour"; Wongpanich et al. §4.2).

A worker's cycle: pull θ from the server, compute the gradient at what it
pulled, push the gradient; the server applies it (``update_rule``; with
``optimizer.momentum`` the velocity lives on the server: Async MSGD) under
its lock. With ``shards = S`` θ is cut into S contiguous shards, each a
server of its own (its own lock, its own NIC on a network): a pull gathers
the shards one by one, each copied under its lock (so the θ a gradient is
taken at may mix versions of different shards, as Downpour's does) and a push updates shard after shard,
each shard independently of the others (pushes of two workers may
interleave across shards). With ``onebit`` the worker pushes Q(g + e) and
keeps the error e (:mod:`simasgd.numerics.compression`).

Rows: one per push (``Rows("update")``), ``read_version`` = the global version
when the pull started, ``version`` = the version the push made when its last
shard landed; each shard's step divides the gradient by
``update_rule.divisor`` of (versions at that shard's step − read_version)
— with one shard exactly the row's staleness. With ``[network]``, pulls and
pushes are messages through the servers' NICs (:mod:`simasgd.sim.network`);
without, copies of the shared θ on the worker's CPU.

Where a message costs the rank that receives it CPU time (the profile measured ``[network] handling_us``:
``Network.handles``), the cycle is the one ``dist``'s ranks run (executors/dist/param_server.py, ``serve`` and
``work``), because each server is then one process handling one message at a time: the worker sends its push
to every shard at once; server s takes the pushes in arrival order on its CPU (``Network.handle``: the message's
handling and the update of its shard, priced as the machine prices an update of that many parameters,
``costs.server_update_s``) and replies with the shard after that step — the worker's next pull, so there is no
pull of its own after the first (a request of a push's size, as ``work`` sends it); the worker takes the replies
in shard order, each a message it handles. The row's version is the one shard S−1's step made (``dist`` takes the
last shard's count), its ``t_write`` that step's time. Not priced: the server's loss snapshots (a copy of its
shard every ``stop.eval_every_updates``).
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import simpy

from simasgd.numerics import compression
from simasgd.sim import network as net
from simasgd.sim.costs import server_update_s
from simasgd.sim.engine import SimRun
from simasgd.sim.primitives import Mutex

Proc = Generator[simpy.Event, object, None]


def shard_bounds(dim: int, shards: int) -> list[slice]:
    """S contiguous shards of ``dim`` elements (the first ones one element longer where it does not divide)."""
    S = min(shards, max(1, dim))
    return [slice(s * dim // S, (s + 1) * dim // S) for s in range(S)]


class Server:
    def __init__(self, run: SimRun) -> None:
        sc = run.sc
        self.shards = int(sc.algorithm.param("shards"))
        self.onebit = bool(sc.algorithm.param("onebit"))
        self.locks = [Mutex(run.env) for _ in range(self.shards)]
        self.net = net.for_run(run, servers=self.shards)
        dim = run.platform.dim or (run.model.theta.size if run.model is not None else 0)
        self.parts = shard_bounds(dim, self.shards) if dim else [slice(0, 0)] * self.shards
        itemsize = run.platform.model_bytes // max(1, run.platform.dim)
        self.pull_bytes = [(s.stop - s.start) * itemsize for s in self.parts]
        self.push_bytes = [compression.message_bytes(s.stop - s.start) if self.onebit else b
                           for s, b in zip(self.parts, self.pull_bytes, strict=False)]
        m = run.model
        self.residual = [np.zeros_like(m.theta) for _ in range(run.n)] if m is not None and self.onebit else []
        # each shard's update on its server's CPU, where messages cost the ranks (the share of θ the platform has)
        whole = max(1, run.platform.dim)
        self.update_s = ([server_update_s(run.platform, (s.stop - s.start) / whole) for s in self.parts]
                         if self.net.handles else [])


def ps_worker(env: simpy.Environment, w: int, run: SimRun, srv: Server) -> Proc:
    p, m, nw = run.platform, run.model, srv.net
    S = srv.shards
    if nw.handles:
        yield from _ranks_worker(env, w, run, srv)
        return
    yield from run.start(w)
    while True:
        run.begin(w)
        rv, t_read = run.version, env.now
        wait = 0.0
        for s, part in enumerate(srv.parts):       # pull, shard by shard: the shard copied under its lock
            t0 = env.now
            req = srv.locks[s].request()
            p.block(w)
            yield req
            wait += env.now - t0
            if not nw.enabled:
                yield p.read(w, 1 / S, None, s == 0)
            if m is not None:
                m.snapshot(w, part)                # the worker's own buffer: time passes before the gradient
            srv.locks[s].release(req)
            if nw.enabled:                         # then it travels to the worker
                yield from nw.send(nw.servers[s], w, srv.pull_bytes[s])
        yield from _gradient(w, run, srv)
        for s, part in enumerate(srv.parts):       # push, shard by shard, each under its own lock
            if nw.enabled:
                yield from nw.send(w, nw.servers[s], srv.push_bytes[s])
            t0 = env.now
            req = srv.locks[s].request()
            p.block(w)
            yield req
            wait += env.now - t0
            yield p.update(w, 1 / S, None, True) if not nw.enabled else env.timeout(0)
            if m is not None:
                m.step(m.grad[w], run.version - rv, part if S > 1 else None)
            srv.locks[s].release(req)
        snap = run.snapshot(w, run.applied(w, rv, t_read, wait=wait))
        if snap is not None:  # the loss ring's copy (the executor takes it under the last shard's lock)
            yield snap


def _gradient(w: int, run: SimRun, srv: Server) -> Proc:
    """Worker ``w``'s gradient at what it pulled (with ``onebit``, Q(g + e), the error kept), on its CPU."""
    m = run.model
    run.computing(w)
    if m is not None:
        m.gradient(w)
        if srv.onebit:
            compression.quantize(m.grad[w], srv.residual[w], m.grad[w])
    yield run.platform.gradient(w)
    run.computed(w)


class _Read:
    """What a worker's replies carry: the version of θ its next gradient is taken at, and when it was taken."""

    __slots__ = ("t", "version")

    def __init__(self) -> None:
        self.version, self.t = 0, 0.0


def _ranks_worker(env: simpy.Environment, w: int, run: SimRun, srv: Server) -> Proc:
    """Worker ``w``'s cycles where messages cost the ranks' CPUs (module docstring): the first pull, then a
    gradient and a push to every shard at once, the replies taken in shard order."""
    p, nw = run.platform, srv.net
    read = _Read()
    yield from run.start(w)
    run.begin(w)
    pushed: tuple[int, float] | None = None  # (read version, time) of the gradient being pushed
    while True:
        rounds = [env.process(_shard_round(env, w, s, run, srv, srv.update_s[s], pushed, read))
                  for s in range(len(srv.parts))]
        p.block(w)  # the worker sleeps in its receives
        for r in rounds:  # the replies, in shard order: each a message this rank handles
            yield r
            yield from nw.handle(w)
        if pushed is not None:
            run.begin(w)
        rv, t_read = read.version, read.t
        yield from _gradient(w, run, srv)
        pushed = (rv, t_read)


def _shard_round(env: simpy.Environment, w: int, s: int, run: SimRun, srv: Server, update_s: float,
                 pushed: tuple[int, float] | None, read: _Read) -> Proc:
    """One message to server ``s`` and its reply: the push of the gradient read at ``pushed`` (None: the first
    pull's request), taken on the server's CPU and, for a push, applied to the shard; the reply carries the
    shard as it then is (into the worker's buffer) back to the worker. The last shard's step is the row."""
    m, nw, part = run.model, srv.net, srv.parts[s]
    node = nw.servers[s]
    yield from nw.send(w, node, srv.push_bytes[s])
    yield from nw.handle(node, update_s if pushed is not None else 0.0)
    if pushed is not None:  # no event between the CPU's release and here: the server's next message is later
        rv, t_read = pushed
        if m is not None:
            m.step(m.grad[w], run.version - rv, part if srv.shards > 1 else None)
        if s == srv.shards - 1:
            run.applied(w, rv, t_read)
    if s == srv.shards - 1:
        read.version, read.t = run.version, env.now
    if m is not None:
        m.snapshot(w, part)
    yield from nw.send(node, w, srv.pull_bytes[s])


def start_param_server(run: SimRun) -> None:
    srv = Server(run)
    for w in range(run.n):
        run.env.process(ps_worker(run.env, w, run, srv))
