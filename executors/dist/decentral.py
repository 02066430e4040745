"""``keuper`` and ``simuparallel``: every worker a rank stepping its own state; Keuper's nodes send it to each other.

Worker ``w`` is rank ``w`` (no server). It steps its own state θ_w (its own velocity) with
gradients on minibatches of its partition (``partition``: :func:`simasgd.spec.algorithms.partition`).
Keuper & Pfreundt's Alg. 5 (``keuper``): after every ``exchange_every`` steps the node sends its
state to a random other node (``Role.SCHEDULE`` draws the peer); a thread of the receiving node
(:class:`Inbox`) takes it at once, and before each step the node takes the latest state that
arrived since its previous step: the step merges it (:func:`simasgd.numerics.parzen.merge_step`: ĝ = g + ½(θ_i − θ_j) when the
local step moves towards θ_j). SimuParallelSGD (``simuparallel``) sends nothing; its result is the
mean of the final states.

The global version — "the global count of steps, every worker's counted" — is a counter in the
process group's key-value store (``store.add``: one round trip to the store's host, rank 0's
machine, per step; the shared counter the cpu backend increments with a CAS). A worker takes the
next version after its gradient and steps only with one within ``stop.max_updates`` (and before
``stop.max_time_s``), so versions 1..N are each one step. The round trip is not Keuper & Pfreundt's (their
nodes coordinate with no one) but the stop rule's and the rows': ``stop.max_updates`` counts every node's steps
and a step is taken only while the count is within it (the first N to finish), and node 0's curve states are
kept at global multiples of ``eval_every`` — neither is exact without asking a shared count before each step
(versions drawn ahead or counted locally and renumbered at the end would change which steps the run takes, or
need a copy of node 0's state every step). So it stays, and the simulator charges it where the profile measured
it (``[network] store_round_trip_us``, ``calibrate --network``). Curve points: each worker keeps its state
at every multiple of ``stop.eval_every_updates`` its steps straddle (the state it had then);
rank 0 takes node 0's (keuper) or the mean of every worker's (simuparallel).

Ending without a message in flight: a send returns once the peer's inbox has the state, so when
the store counts every node done, no state is on its way; then each node sends the next one an
``END`` header, which ends that node's inbox thread. Rows: one per step, ``read_version``
= version − 1, ``distance`` = ‖θ_i − θ_j‖ to the state merged or refused (keuper).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from executors.dist.common import Gradients, velocity
from executors.dist.world import Rank, header, header_elements, message_buffer
from simasgd.numerics import parzen
from simasgd.spec import algorithms, seeds

POLL_S = 0.0005
STATE, END = 1, 2


class Inbox(threading.Thread):
    """A thread that keeps one receive posted from any node (gloo's receives complete only in a
    blocking wait, so a sender never waits for this node's loop); ``take()`` gives the latest state
    received since the previous call. Each message is a header ``(STATE, src)`` and a state;
    ``(END, src)`` ends the thread."""

    def __init__(self, theta: np.ndarray) -> None:
        super().__init__(name="simasgd-dist-inbox", daemon=True)
        self.buf, self.latest = message_buffer(theta.dtype, len(theta)), np.empty_like(theta)
        self.h = header_elements(theta.dtype)
        self.lock = threading.Lock()
        self.fresh, self.got, self.bytes = False, 0, 0
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        import torch
        import torch.distributed as dist

        tb = torch.from_numpy(self.buf)
        try:
            while True:
                dist.recv(tb)
                self.bytes += self.buf.nbytes
                if int(header(self.buf)[0]) == END:
                    return
                with self.lock:
                    self.latest[:] = self.buf[self.h:]
                    self.fresh = True
                    self.got += 1
        except BaseException as e:
            self.error = e

    def take(self, peer: np.ndarray) -> bool:
        if self.error is not None:
            raise RuntimeError(f"receiving states failed: {self.error}") from self.error
        with self.lock:
            if not self.fresh:
                return False
            peer[:] = self.latest
            self.fresh = False
            return True


def run_own(me: Rank, theta0: np.ndarray) -> None:
    from torch.distributed.distributed_c10d import _get_default_store

    sc, n, w = me.sc, me.layout.workers, me.rank
    opt, a = sc.optimizer, sc.algorithm
    keuper = a.name == "keuper"
    exchange = int(a.param("exchange_every")) if keuper and n > 1 else 0
    store, key = _get_default_store(), f"simasgd-dist/{me.run}/"
    rows = _n_rows(me.wl)
    shard = algorithms.partition(rows, n, sc.seed)[w] if a.param("partition") and rows else None
    grad = Gradients(me, w, None if shard is None else np.ascontiguousarray(shard, dtype=np.int64))
    x, g = theta0.copy(), np.empty_like(theta0)
    vel = velocity(me, x)
    box = Inbox(x) if exchange else None
    peer = np.empty_like(x)
    keeps = not keuper or w == 0  # whose states make the curve
    pick = seeds.rng(sc.seed, me.run, seeds.Role.SCHEDULE, w)
    prev_v, steps, accepted, refused = 0, 0, 0, 0
    while me.clock() < me.deadline:
        t_s = me.clock()
        grad(x, g)
        t_ge = me.clock()
        v = int(store.add(key + "version", 1))
        if v > sc.stop.max_updates:
            break
        if keeps:
            _keep(me, prev_v, v, x)
        has = box is not None and box.take(peer)
        gap = float(np.sqrt(np.sum((x - peer) ** 2))) if has else float("nan")
        if parzen.merge_step(x, vel, g, peer, has, opt.lr, opt.momentum, opt.staleness_aware):
            accepted += 1
        elif has:
            refused += 1
        me.rows.add(w, v, v - 1, t_s, t_s, t_s, t_ge, me.clock(), 0.0, gap)
        steps, prev_v = steps + 1, v
        if box is not None and steps % exchange == 0:
            j = int(pick.integers(0, n - 1))
            j += j >= w
            me.send(j, STATE, w, payload=x)  # returns once j's inbox thread has it
    total = min(int(store.add(key + "version", 0)), sc.stop.max_updates)
    if keeps:
        _keep(me, prev_v, total + 1, x)
    if box is not None:
        _close(me, store, key, box, n)
        me.received[0] += box.got + 1
        me.received[1] += box.bytes
        me.extra["states_received"] = box.got
    if keeps:
        me.final = x
    me.combine = "concat" if keuper else "mean"
    me.extra |= {"steps": steps} | ({"merges_accepted": accepted, "merges_refused": refused} if keuper else {})


def _keep(me: Rank, prev_v: int, v: int, x: np.ndarray) -> None:
    """The state after version ``prev_v`` is this worker's at every curve point in [prev_v, v)."""
    e = me.eval_every
    for k in range(max(e, -(-prev_v // e) * e), v, e):
        me.snaps.append((me.clock(), k, x.copy()))


def _close(me: Rank, store: Any, key: str, box: Inbox, n: int) -> None:
    """When every node has sent its last state (each send returns once received), end the next node's
    inbox, and wait for this one's end from the previous node."""
    store.add(key + "done", 1)
    while int(store.add(key + "done", 0)) < n:
        time.sleep(POLL_S)
    me.send((me.rank + 1) % n, END, me.rank, size=len(box.latest))
    box.join()
    if box.error is not None:
        raise RuntimeError(f"receiving states failed: {box.error}") from box.error


def _n_rows(wl: Any) -> int:
    return int(getattr(wl, "n_train", None) or len(getattr(wl, "y", ())))
