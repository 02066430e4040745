"""Master/worker ASGD with an atomically accumulated gradient (Lopez et al. 2020).

Worker 0 is the master: it steps ``w ← w − α/(N−1)·g``, reading the shared
gradient sum ``g`` and writing ``w``, whenever at least one new contribution
has landed since its previous step (as the cpu executor's master does); a
step is one update, one version. Between steps it waits (off its CPU).
Workers 1..N−1 read ``w``, compute ``g_new`` and atomically replace their
previous contribution, ``g ← g − g_old + g_new``.

Staleness (DESIGN.md, master/worker schemes): a gradient's ``version`` is the
first master step whose read of ``g`` includes it. A contribution replaced
before any step read it never reaches the model: ``applied = false``.
Contributions still unread when the run stops are left out.
"""

from __future__ import annotations

from typing import Generator

import numpy as np
import simpy

from simasgd.sim.engine import SimRun
from simasgd.sim.primitives import CacheLine, atomic

Proc = Generator[simpy.Event, object, None]


class Accumulator:
    """Shared state: the gradient sum and the contributions not yet read by the master."""

    def __init__(self, env: simpy.Environment, workers: int):
        self.env = env
        self.pending: dict[int, int] = {}  # worker -> its record row, not yet in any version
        self.fresh = env.event()
        self.line = CacheLine(env, 0.0)
        self.previous: list[np.ndarray | None] = [None] * workers


def master(env: simpy.Environment, run: SimRun, acc: Accumulator) -> Proc:
    p, model, rec = run.platform, run.model, run.rec
    while True:
        while not acc.pending:  # a step only when a new contribution has landed since the last one
            p.block(0)  # asleep: its CPU may be the one a worker needs
            yield acc.fresh
        version = run.version + 1
        for row in acc.pending.values():  # this step's read of g includes them
            rec.version[row] = version
            rec.applied[row] = True
        acc.pending.clear()
        yield p.read(0)
        yield p.update(0)
        if model is not None:
            model.master_step(run.n - 1)
        run.bump()


def lopez_worker(env: simpy.Environment, w: int, run: SimRun, acc: Accumulator) -> Proc:
    p, model, rec = run.platform, run.model, run.rec
    latency = p.cas_latency[w]
    yield from run.start(w)
    while True:
        run.begin(w)
        yield p.read(w)
        t_read, rv = env.now, run.version
        yield from run.compute(w)
        yield p.atomic_adds(w)  # d atomic adds: g ← g − g_old + g_new
        yield from atomic(env, acc.line, latency)
        if run.stopped:
            continue
        if model is not None:
            if acc.previous[w] is None:
                acc.previous[w] = np.zeros_like(model.theta)
            model.publish(w, acc.previous[w])
        old = acc.pending.pop(w, None)
        if old is not None:  # replaced before the master read it: never applied
            rec.version[old] = run.version + 1
        acc.pending[w] = rec.add(w, -1, rv, t_read, env.now, 0.0, 0, False)
        fresh, acc.fresh = acc.fresh, env.event()
        fresh.succeed()


def start_lopez(run: SimRun) -> None:
    acc = Accumulator(run.env, run.n)
    run.env.process(master(run.env, run, acc))
    for w in range(1, run.n):
        run.env.process(lopez_worker(run.env, w, run, acc))
