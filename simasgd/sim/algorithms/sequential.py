"""Sequential SGD in the simulator: one worker, read, gradient, update — staleness 0."""

from __future__ import annotations

from collections.abc import Generator

import simpy

from simasgd.sim.engine import SimRun


def sequential_worker(env: simpy.Environment, run: SimRun) -> Generator[simpy.Event, object, None]:
    p, model = run.platform, run.model
    while True:
        run.begin(0)
        yield p.read(0)
        t_read, rv = env.now, run.version
        run.computing(0)
        if model is not None:
            model.snapshot(0)
            model.gradient(0)
        yield p.gradient(0)
        run.computed(0)
        yield p.update(0)
        if model is not None:
            model.step(model.grad[0], 0)
        snap = run.snapshot(0, run.applied(0, rv, t_read))
        if snap is not None:  # the loss ring's copy of the version just made
            yield snap


def start_sequential(run: SimRun) -> None:
    run.env.process(sequential_worker(run.env, run))
