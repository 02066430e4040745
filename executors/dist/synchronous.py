"""``sync`` over a collective: every worker computes a gradient at the same θ, one all-reduce sums them.

Workers are ranks ``0..n−1`` (no server). A round: the gradient at θ (with ``onebit``, replaced
by Q(g + e) with this worker's residual: :func:`simasgd.numerics.compression.quantize`), one
``all_reduce(SUM)`` of ``[g, stop]`` — rank 0 sets ``stop`` when this round makes the budget's last
version or its clock is past ``stop.max_time_s`` — and every rank steps its copy of θ with the mean
(``update_rule.step``, staleness 0): the all-reduce hands every rank the same bits, so the copies
stay equal. Rows: one per gradient, ``version`` = the round (1, 2, ...), ``read_version`` = the
previous round's. The quantised gradient travels as dense floats (the all-reduce sums them); what a
packed 1-bit message would weigh is ``compression.message_bytes``, reported beside it.
"""

from __future__ import annotations

import numpy as np

from executors.dist.common import Gradients, velocity
from executors.dist.world import Rank
from simasgd.numerics import compression, update_rule


def run_sync(me: Rank, theta0: np.ndarray) -> None:
    import torch
    import torch.distributed as dist

    sc, n, w = me.sc, me.layout.workers, me.rank
    opt = sc.optimizer
    d = theta0.shape[0]
    theta, vel = theta0.copy(), velocity(me, theta0)
    buf = np.zeros(d + 1, theta.dtype)  # the gradient and rank 0's stop word, reduced together
    tbuf = torch.from_numpy(buf)
    onebit = bool(sc.algorithm.param("onebit"))
    resid = np.zeros_like(theta)
    grad = Gradients(me, w)
    version, bytes_each = 0, 0
    if w == 0:
        me.watch(theta0)
    while True:
        t_s = me.clock()
        grad(theta, buf[:d])
        t_ge = me.clock()
        if onebit:
            compression.quantize(buf[:d], resid, buf[:d])
        buf[d] = 1.0 if w == 0 and (version + 1 >= sc.stop.max_updates or me.over()) else 0.0
        dist.all_reduce(tbuf, op=dist.ReduceOp.SUM)
        bytes_each += round(2 * (n - 1) / n * buf.nbytes) if n > 1 else 0  # a ring all-reduce's share
        update_rule.step(theta, vel, buf[:d] / n, opt.lr, opt.momentum, 0, opt.staleness_aware)
        version += 1
        t_w = me.clock()
        me.rows.add(w, version, version - 1, t_s, t_s, t_s, t_ge, t_w, t_w - t_ge)
        if w == 0:
            me.snapshot(version, theta)
        if buf[d] > 0:
            break
    me.extra |= {"allreduce_calls": version, "allreduce_bytes_ring": bytes_each, "onebit_wire": "dense"
                if onebit else "", "onebit_message_bytes": compression.message_bytes(d) if onebit else 0}
    if w == 0:
        me.final = theta
