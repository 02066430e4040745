"""Master/worker ASGD with an atomically accumulated gradient (Lopez et al. 2020, §III-B, Alg. 2/3).

The definition (``simasgd.spec.algorithms``, ``lopez``), as simulated:

- **Master** (worker 0, Alg. 2), one step = one version, never waiting for gradients: it announces
  step s = version + 1 and reads the shared sum ``g`` (its value at the announcement), then writes
  ``w`` with the update rule on ``g·1/(N−1)`` (staleness 0; momentum as the paper's z = βz + (1−β)g is
  heavy ball with η = α(1−β)). ``model_read = "torn"`` (default, the paper): the write lands chunk by
  chunk (``[sim] read_chunks``), so a worker's copy can mix versions; ``"consistent"``: it lands whole.
- **Worker** (Alg. 3), per gradient: copy ``w`` (line 3: chunk by chunk while the master writes, or
  whole), ``g ← g − g_old`` (line 4), its gradient on the copy (line 6), ``g ← g + g_new`` (line 7).
  ``subtract = "with_add"`` does lines 4 and 7 as one pass ``g ← g − g_old + g_new`` after the gradient.
  A pass is d atomic adds (``Platform.atomic_adds``) and lands at its end; after the add the worker
  looks at the master's announced step, then keeps g_new as g_old (a private copy).
- **Row** (one per gradient): ``version`` = 1 + the step announced when the worker, its add done,
  looked — the first step that read ``g`` with it. ``read_version`` = the version when its copy of
  ``w`` began (torn) or ended (consistent). At the start of the pass that removes it: if the master
  has not announced ``version`` by then, no step began reading g with it: ``applied = false``. Rows
  the run's last step did not reach become ``applied = false`` when the run stops (as the cpu
  executor's ``drop_unincluded``).

In the simulator a step reads ``g`` at one instant, so the row's version is exact; on real threads a
step's read of ``g`` spans time and the step before ``version`` may hold part of the gradient
(docs/model.md, "Lopez").
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import simpy

from simasgd.sim.engine import SimRun
from simasgd.sim.primitives import CacheLine, atomic

Proc = Generator[simpy.Event, object, None]


class Accumulator:
    """Shared state: the gradient sum g, the master's announced step, each worker's last row."""

    def __init__(self, env: simpy.Environment, workers: int, dim: int | None) -> None:
        self.line = CacheLine(env, 0.0)
        self.announced = 0                          # the step whose read of g began last
        self.last_row: list[int] = [-1] * workers   # each worker's row whose gradient is in g
        self.g = None if dim is None else np.zeros(dim)
        self.old: list[np.ndarray | None] = [None] * workers  # numerics: each worker's gradient in g


def master(env: simpy.Environment, run: SimRun, acc: Accumulator, torn: bool) -> Proc:
    p, model = run.platform, run.model
    contributors = run.n - 1
    chunks = model.chunks if model is not None and torn and len(model.chunks) > 1 else None
    g = None if model is None else np.empty_like(model.theta)
    while True:
        began = env.now
        acc.announced = run.version + 1  # Alg. 2 line 3 begins: the read of g
        if acc.g is not None:  # kept exactly when the model is
            np.multiply(acc.g, 1.0 / contributors, out=g)  # g·1/(N−1), as the executors scale
        yield p.read(0)
        if chunks is None:
            yield p.update(0)
            if model is not None and g is not None:
                model.step(g, 0)
        else:  # the write lands chunk by chunk, no lock: workers copying now see a mix
            total = p.update_time(0)
            assert model is not None and g is not None  # chunks come from the model
            for i, part in enumerate(chunks):
                yield p.update(0, 1 / len(chunks), None if total is None else total / len(chunks), i == 0)
                model.step(g, 0, part)
        if env.now == began:  # free reads and updates ([timing] … mean_s = 0): a step still loads g,
            yield env.timeout(p.cas_latency[0])  # at least one line of it (no endless steps at one instant)
        snap = run.snapshot(0, run.bump(), row=False)
        if snap is not None:  # the loss ring's copy, taken by the master after its step (seq_update)
            yield snap


def _pass(env: simpy.Environment, run: SimRun, acc: Accumulator, w: int, latency: float) -> Proc:
    """d atomic adds into g (their time; the caller lands the values when it ends)."""
    yield run.platform.atomic_adds(w, reader=0)  # the master reads g at every step
    yield from atomic(env, acc.line, latency)


def _look(run: SimRun, acc: Accumulator, w: int) -> None:
    """At the start of the pass that removes the worker's previous gradient (the definition's look):
    its row was applied iff a step was announced since it went in. Steps announced during the pass
    still find it in g here (the pass lands at its end); on threads they read part of it: both are
    the "may" steps of the definition."""
    row = acc.last_row[w]
    if row >= 0 and acc.announced < run.rec.version[row]:
        run.rec.applied[row] = False
    acc.last_row[w] = -1


def _remove(acc: Accumulator, w: int) -> None:
    """The pass has landed: the worker's previous gradient leaves g."""
    old = acc.old[w]
    if acc.g is not None and old is not None:
        acc.g -= old


def _add(run: SimRun, acc: Accumulator, w: int, rv: int, t_read: float) -> Proc:
    """The new gradient lands in g; its row's version is the first step that reads g after now. Then the
    worker keeps it as g_old (Alg. 3: a private copy of d elements, which the executors make too): the
    time between the add and the next look includes it, so it bears on which rows a step reads."""
    model = run.model
    if model is not None and acc.g is not None:  # g is kept exactly when the model is
        old = acc.old[w]
        if old is None:
            old = acc.old[w] = np.empty_like(model.theta)
        np.copyto(old, model.grad[w])
        acc.g += old
    acc.last_row[w] = run.rec.add(w, acc.announced + 1, rv, t_read, run.env.now)
    yield run.platform.private_copy(w)


def lopez_worker(env: simpy.Environment, w: int, run: SimRun, acc: Accumulator, torn: bool,
                 before: bool) -> Proc:
    p, model = run.platform, run.model
    latency = p.cas_latency[w]
    chunks = model.chunks if model is not None and torn and len(model.chunks) > 1 else None
    # The copy is the worker's own buffer (a partial snapshot's): the subtraction pass comes between it
    # and the gradient, so the one scratch copy that workers share could be overwritten meanwhile.
    whole = slice(0, 0 if model is None else model.theta.size)
    yield from run.start(w)
    while True:
        run.begin(w)
        if torn:  # Alg. 3 line 3: a plain copy; the version is the one current when it starts
            t_read, rv = env.now, run.version
            if chunks is None:
                yield p.read(w)
                if model is not None:
                    model.snapshot(w, whole)
            else:
                total = p.read_time(w)
                assert model is not None  # chunks come from the model
                for i, part in enumerate(chunks):
                    yield p.read(w, 1 / len(chunks), None if total is None else total / len(chunks), i == 0)
                    model.snapshot(w, part)
        else:  # seqlock copy: one version (its retries are not charged)
            yield p.read(w)
            t_read, rv = env.now, run.version
            if model is not None:
                model.snapshot(w, whole)
        if before:  # Alg. 3 line 4: g ← g − g_old, before the gradient
            _look(run, acc, w)
            yield from _pass(env, run, acc, w, latency)
            if run.stopped:
                return
            _remove(acc, w)
        run.computing(w)
        if model is not None:
            model.gradient(w)
        yield p.gradient(w)
        run.computed(w)
        if not before:
            _look(run, acc, w)
        yield from _pass(env, run, acc, w, latency)  # line 7 (with_add: g ← g − g_old + g_new)
        if run.stopped:
            return
        if not before:
            _remove(acc, w)
        yield from _add(run, acc, w, rv, t_read)


def start_lopez(run: SimRun) -> None:
    model = run.model
    acc = Accumulator(run.env, run.n, None if model is None else model.theta.size)
    torn = run.sc.algorithm.param("model_read") == "torn"
    before = run.sc.algorithm.param("subtract") == "before_gradient"

    def unreached(_ev: simpy.Event) -> None:
        # Rows whose version the run did not make: no step read them (the executor's drop_unincluded).
        for row in acc.last_row:
            if row >= 0 and run.rec.version[row] > run.version:
                run.rec.applied[row] = False

    run.stop.callbacks.append(unreached)
    run.platform.fuses_read(0)  # its step reads the sum inside its update: one pass
    run.env.process(master(run.env, run, acc, torn))
    for w in range(1, run.n):
        run.env.process(lopez_worker(run.env, w, run, acc, torn, before))
