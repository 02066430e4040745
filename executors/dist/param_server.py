"""``param_server`` (and ``ssp``) over point-to-point messages: shard servers on ranks ``0..S−1``, workers after them.

θ is cut into ``shards`` contiguous shards ``[s·d/S, (s+1)·d/S)`` (the cpu backend's cut); server
``s`` holds shard ``s`` (and, with ``optimizer.momentum``, its velocity: Async MSGD) and serves one
message at a time, from whichever worker sent first. A worker's cycle is one round trip per shard:

- push: header ``(PUSH, w, read_version)`` and its gradient's slice (with ``onebit``, Q(g + e) with
  the worker's own residual, dense floats on the wire); the server steps its shard with it
  (``update_rule.step``, divided by ``update_rule.divisor`` of its pushes since ``read_version``)
  and counts it;
- pull, in the same reply: header ``(OK, version of θ, version the push made)`` and the shard
  after that step — the next gradient's θ, so ``read_version`` of the next push is the version of
  θ this reply carries.

The first pull is ``(PULL, w)`` with a slice of nothing (every message to a server has a push's
size). The version is the count of the last shard's server
(rank S−1): the version a push made "when its last shard landed"; with one shard, θ at every
version is exact. A server refuses pushes past ``stop.max_updates`` or ``stop.max_time_s`` (reply
``STOP``, the gradient not applied, no row); a worker told ``STOP`` by one shard says ``BYE`` to the
others, and every server ends when each worker has left it. Shards count their pushes apart
(Downpour: independent shards), so with S > 1 the last pushes of a run may land on some shards and
not others; the rows are the last shard's. Rows: one per applied push, on the worker:
``t_start = t_read = t_grad_start`` when its θ arrived, ``t_write`` when the push's reply did.

``ssp`` (Ho et al. 2013) is this server with one shard and a clock gate: a worker's clock is its
applied pushes; the reply to its push (the θ of its next iteration) is held while its clock is more
than ``bound`` ahead of the slowest running worker's, so it starts iteration c + 1 only when
c − (the slowest's) ≤ s, and the θ it then gets holds every worker's first c − s updates.
"""

from __future__ import annotations

import numpy as np

from executors.dist.common import Gradients, velocity
from executors.dist.world import Rank
from simasgd.numerics import compression, update_rule

PULL, PUSH, BYE, OK, STOP = range(5)


def bounds(d: int, shards: int, s: int) -> tuple[int, int]:
    return s * d // shards, (s + 1) * d // shards


def run_param_server(me: Rank, theta0: np.ndarray) -> None:
    """``param_server``, and ``ssp``: the same server with a clock gate (:func:`serve`)."""
    if me.rank < me.layout.servers:
        serve(me, theta0, int(me.sc.algorithm.param("bound")) if me.layout.algorithm == "ssp" else None)
    else:
        work(me, theta0)


def serve(me: Rank, theta0: np.ndarray, bound: int | None = None) -> None:
    """Serve pushes and pulls; with ``bound`` (SSP, one shard), a worker's reply — the θ of its next
    iteration — waits while its clock (its applied pushes) is more than ``bound`` ahead of the slowest
    running worker's, and goes out as soon as the slowest catches up."""
    sc, s, S = me.sc, me.rank, me.layout.servers
    opt = sc.optimizer
    lo, hi = bounds(theta0.shape[0], S, s)
    theta = theta0[lo:hi].copy()
    vel, g = velocity(me, theta), np.empty_like(theta)
    count, refused = 0, 0
    left: set[int] = set()
    clocks = [0] * me.layout.workers
    gated: dict[int, int] = {}  # SSP: worker -> its rank, waiting for its next θ
    made = [0] * me.layout.workers  # the version each worker's latest push made (its reply says it)
    if S == 1:
        me.watch(theta0)
    while len(left) < me.layout.workers:
        src, hdr = me.recv(None, g, with_payload=(PUSH,))
        kind, w, rv = int(hdr[0]), int(hdr[1]), int(hdr[2])
        if kind == BYE:
            left.add(w)
            continue
        if count >= sc.stop.max_updates or me.over():
            refused += kind == PUSH
            me.send(src, STOP, w, count, size=len(theta))
            left.add(w)
            for u, at in gated.items():  # applied, held at the gate: let them go, to be told at their next push
                me.send(at, OK, u, count, made[u], payload=theta)
            gated.clear()
            continue
        if kind == PUSH:
            update_rule.step(theta, vel, g, opt.lr, opt.momentum, max(0, count - rv), opt.staleness_aware)
            count += 1
            clocks[w] += 1
            made[w] = count
            me.snapshot(count, theta)
        if bound is None:
            me.send(src, OK, w, count, made[w], payload=theta)
            continue
        gated[w] = src
        slowest = min(c for u, c in enumerate(clocks) if u not in left)
        for u in [u for u in gated if clocks[u] - slowest <= bound]:
            me.send(gated.pop(u), OK, u, count, made[u], payload=theta)
    me.final = theta
    me.extra |= {"pushes": count, "refused_pushes": refused}


def work(me: Rank, theta0: np.ndarray) -> None:
    sc, S = me.sc, me.layout.servers
    w = me.rank - S
    d = theta0.shape[0]
    cut = [bounds(d, S, s) for s in range(S)]
    theta, g = theta0.copy(), np.empty_like(theta0)
    onebit = me.layout.algorithm == "param_server" and bool(sc.algorithm.param("onebit"))
    resid = np.zeros_like(theta0)
    grad = Gradients(me, w)
    t_s = me.clock()
    for s in range(S):
        me.send(s, PULL, w, size=cut[s][1] - cut[s][0])
    ok, _, rv = _replies(me, theta, cut)
    while all(ok):
        t_r = me.clock()
        grad(theta, g)
        t_ge = me.clock()
        if onebit:
            compression.quantize(g, resid, g)
        for s, (lo, hi) in enumerate(cut):
            me.send(s, PUSH, w, rv, payload=g[lo:hi])
        ok, version, next_rv = _replies(me, theta, cut)
        t_w = me.clock()
        if ok[-1]:  # the last shard counted it: version `version`; its reply is the next read, at `next_rv`
            me.rows.add(w, version, rv, t_s if not len(me.rows.cols["version"]) else t_r, t_r, t_r, t_ge, t_w)
            rv = next_rv
    for s in range(S):
        if ok[s]:  # this server still counts the worker: tell it the worker leaves
            me.send(s, BYE, w, size=cut[s][1] - cut[s][0])


def _replies(me: Rank, theta: np.ndarray, cut: list[tuple[int, int]]) -> tuple[list[bool], int, int]:
    """Each shard's reply (its slice into θ where it is ``OK``): which said OK, and the last one's
    version of the push and version of the θ it sent (they differ where SSP held the reply)."""
    ok, version, read = [], 0, 0
    for s, (lo, hi) in enumerate(cut):
        _, hdr = me.recv(s, theta[lo:hi], with_payload=(OK,))
        ok.append(int(hdr[0]) == OK)
        read, version = int(hdr[2]), int(hdr[3])
    return ok, version, read
