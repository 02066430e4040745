"""``easgd`` and ``eawild`` over point-to-point messages: the centre x̃ on rank 0, workers after it.

Each worker (a group's leader, for ``eawild`` with ``group_size`` > 1) keeps its state x_j and its
own velocity; every ``tau`` local steps it exchanges with the centre, then takes a local step
(``update_rule.step``, staleness 0):

- ``easgd``: the centre serves the workers round-robin (it receives from worker 0, 1, …, n−1, 0, …:
  the simulator's token), one exchange at a time. The worker sends ``(EXCHANGE, w)`` and x_j; the
  centre replies ``(OK, version)`` and x̃ as it was, then steps x̃ += α(x_j − x̃); the worker steps
  x_j −= α(x_j − x̃) with the same x̃: the symmetric force, the same bits on both sides.
- ``eawild``: no order and no lock on the centre's state between a read and a write. The leader
  pulls x̃ (``(PULL, w)`` → ``(OK, version)`` and x̃), moves x_j −= α(x_j − x̃_read), and pushes
  the x_j it had (``(PUSH, w)`` and x_sent); the centre, serving whichever message came first,
  applies x̃ += α(x_sent − x̃) to its current x̃ — other leaders' pushes may have landed between
  this leader's pull and its push, as in the simulator's network model. A group's members are
  ranks of their own; after each exchange the leader broadcasts x_j and a stop word to its group
  (``broadcast`` on the group's process group), each member computes a gradient at x_j, one
  ``all_reduce`` sums them, and every member steps its copy of x_j with their mean.

The centre refuses an exchange past ``stop.max_updates`` or ``stop.max_time_s`` (``STOP``); it
ends when every worker has been told. Rows (one per exchange, by the worker or leader), as the
cpu backend's: ``version`` the centre version the exchange made, ``read_version`` the previous
exchange's read version + 1 (version − 1 at the first), ``distance`` ‖x_j − x̃‖ at the exchange.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from executors.dist.common import Gradients, velocity
from executors.dist.world import Rank
from simasgd.numerics import update_rule

EXCHANGE, PULL, PUSH, OK, STOP = range(5)


def run_elastic(me: Rank, theta0: np.ndarray) -> None:
    import torch.distributed as dist

    g = int(me.sc.algorithm.param("group_size")) if me.layout.algorithm == "eawild" else 1
    n = me.layout.workers
    groups = [dist.new_group(list(range(1 + k, 1 + k + g))) if g > 1 else None for k in range(0, n, g)]
    if me.rank == 0:
        centre(me, theta0, g)
    else:
        w = me.rank - 1
        worker(me, theta0, w, g, groups[w // g])


def centre(me: Rank, theta0: np.ndarray, g: int) -> None:
    sc = me.sc
    alpha = float(sc.algorithm.param("alpha"))
    locked = me.layout.algorithm == "easgd"
    leaders = list(range(0, me.layout.workers, g))
    x = theta0.copy()
    got, before = np.empty_like(x), np.empty_like(x)
    count, active, turn = 0, set(leaders), 0
    me.watch(theta0)
    while active:
        if locked:  # round-robin: the next leader still running
            while leaders[turn] not in active:
                turn = (turn + 1) % len(leaders)
            src, hdr = me.recv(1 + leaders[turn], got)
            turn = (turn + 1) % len(leaders)
        else:
            src, hdr = me.recv_split(None, got, with_payload=(PUSH,))
        kind, w = int(hdr[0]), int(hdr[1])
        if count >= sc.stop.max_updates or me.over():
            me.send(src, STOP, w, count, size=0 if kind == PUSH else len(x))  # the size the worker waits for
            active.discard(w)
            continue
        if kind == PULL:
            me.send(src, OK, w, count, payload=x)
            continue
        if locked:
            np.copyto(before, x)
            me.send(src, OK, w, count + 1, payload=before)
        x += alpha * (got - x)
        count += 1
        if not locked:
            me.send(src, OK, w, count)
        me.snapshot(count, x)
    me.final = x
    me.extra |= {"exchanges": count}


def worker(me: Rank, theta0: np.ndarray, w: int, g: int, group: Any) -> None:
    import torch
    import torch.distributed as dist

    sc, opt = me.sc, me.sc.optimizer
    alpha, tau = float(sc.algorithm.param("alpha")), int(sc.algorithm.param("tau"))
    locked = me.layout.algorithm == "easgd"
    leader = w % g == 0
    d = theta0.shape[0]
    shared = np.empty(d + 1, theta0.dtype)  # the group's x_j and the leader's stop word
    x, tshared = shared[:d], torch.from_numpy(shared)
    x[:] = theta0
    vel, grad_buf = velocity(me, x), np.empty(d, theta0.dtype)
    tgrad = torch.from_numpy(grad_buf)
    c = np.empty_like(x)
    grad = Gradients(me, w)
    steps, prev_rv, t_gs, t_ge = 0, -1, me.clock(), me.clock()
    while True:
        if steps % tau == 0:
            stop = 0.0
            if leader:
                t_s = me.clock()
                out = _exchange(me, w, x, c, alpha, locked)
                if out is None:
                    stop = 1.0
                else:
                    ver, rv, t_r, gap = out
                    read_version = ver - 1 if prev_rv < 0 else prev_rv + 1
                    prev_rv = rv
                    me.rows.add(w, ver, read_version, t_s, t_r, t_gs, t_ge, me.clock(), t_r - t_s, gap)
            if g > 1:
                shared[d] = stop
                dist.broadcast(tshared, src=1 + (w - w % g), group=group)
                stop = float(shared[d])
            if stop:
                return
        t_gs = me.clock()
        grad(x, grad_buf)
        if g > 1:
            dist.all_reduce(tgrad, op=dist.ReduceOp.SUM, group=group)
            grad_buf /= g
        t_ge = me.clock()
        update_rule.step(x, vel, grad_buf, opt.lr, opt.momentum, 0, opt.staleness_aware)
        steps += 1


def _exchange(me: Rank, w: int, x: np.ndarray, c: np.ndarray, alpha: float,
              locked: bool) -> tuple[int, int, float, float] | None:
    """One exchange of the leader's state with the centre; (version, read version, time the centre
    was read, ‖x_j − x̃‖), or None when the centre said stop."""
    if locked:
        me.send(0, EXCHANGE, w, payload=x)
        _, hdr = me.recv(0, c, with_payload=(OK,))
        if int(hdr[0]) == STOP:
            return None
        ver = int(hdr[2])
        t_r = me.clock()
        diff = x - c
        x -= alpha * diff
        return ver, ver - 1, t_r, float(np.sqrt(diff @ diff))
    me.send_split(0, PULL, w)
    _, hdr = me.recv(0, c, with_payload=(OK,))
    if int(hdr[0]) == STOP:
        return None
    rv, t_r = int(hdr[2]), me.clock()
    sent = x.copy()
    diff = sent - c
    x -= alpha * diff
    me.send_split(0, PUSH, w, payload=sent)
    _, hdr = me.recv(0)
    if int(hdr[0]) == STOP:
        return None
    return int(hdr[2]), rv, t_r, float(np.sqrt(diff @ diff))
