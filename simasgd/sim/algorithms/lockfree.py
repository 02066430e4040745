"""Lock-free AsyncSGD: HOGWILD! (Recht et al. 2011) and Leashed-SGD (Bäckström et al. 2021).

HOGWILD!: read without synchronisation into a local copy (``local_copy``, Ek
2021 §3.1; false: the gradient reads the live θ and the read costs nothing
here), compute, write element-wise without synchronisation (with ``sweep = "alternate"``, the default,
odd-numbered workers from the top of θ down, as the executor's: the order in which a torn write's chunks
land). A worker alone in
the run leaves the new θ in its copy too and reads only once where the executor does (the
cpu executor's ``run_hogwild``: its traits' ``reads = "elided"``). In numerics mode with
``[sim] read_chunks`` > 1 the read is torn — copied chunk by chunk while other workers' writes land chunk by chunk —
so the gradient is taken at a vector that never existed as a whole. The read
version is the one current when the read starts; a write bumps the version
when its last chunk lands.

Leashed-SGD: one pointer to the latest parameter vector, swapped by CAS. A
worker computes its gradient on the latest vector itself (published vectors are
immutable: it holds a reference, no copy), then repeatedly builds
``θ_latest − η·g`` in a fresh vector in one pass (``update_rule.step_into``, an
update's worth of work) and CASes the pointer; a CAS fails when someone published in between. After ``persistence``
failed attempts the update is dropped (``applied = false``), with backoff
between attempts. A pass costs what the lines it finds cost (``Platform.update_into``). Beside other workers
a cycle touches four model-sized vectors where the calibrated gradient touches two, and each gradient pays
for the larger footprint (``Platform.cycle_vectors``).
"""

from __future__ import annotations

import math
from collections.abc import Generator

import simpy

from simasgd.machines.machine import is_gpu
from simasgd.numerics.update_rule import sweeps_down
from simasgd.sim.engine import SimRun
from simasgd.sim.primitives import CacheLine, CasCell, atomic


def hogwild_worker(env: simpy.Environment, w: int, run: SimRun) -> Generator[simpy.Event, object, None]:
    p, model = run.platform, run.model
    chunks = model.chunks if model is not None and len(model.chunks) > 1 else None
    # the cpu executor's order of the writes; a GPU stream's update kernel writes all of θ at once
    down = sweeps_down(run.sc.algorithm.param("sweep") == "alternate", w) and not is_gpu(run.sc.machine)
    writes = None if chunks is None else (chunks[::-1] if down else chunks)
    local = bool(run.sc.algorithm.param("local_copy"))  # false: the gradient reads the live θ, no copy
    elide = local and run.elide_reads and run.n == 1  # alone in the run, the copy is θ after its own update
    held = False
    yield from run.start(w)
    while True:
        t_read, rv = env.now, run.version
        run.begin(w)
        if not local:
            if model is not None:
                model.snapshot(w)  # θ as the gradient starts reading it (its own reads are not timed)
        elif held:  # the update left θ in the copy: nothing to read
            if model is not None:
                model.snapshot(w)
        elif chunks is None:
            yield p.read(w)
            if model is not None:
                model.snapshot(w)
        else:
            total = p.read_time(w)
            assert model is not None  # chunks come from the model
            for i, part in enumerate(chunks):  # torn read: each chunk as it is at the moment it is copied
                yield p.read(w, 1 / len(chunks), None if total is None else total / len(chunks), i == 0)
                model.snapshot(w, part)
        run.computing(w)
        if model is not None:
            model.gradient(w)
        if local:
            p.computes_on_copy(w)
        yield p.gradient(w)
        run.computed(w)
        if writes is None:
            yield p.update(w)
            if model is not None:
                model.step(model.grad[w], run.version - rv)
        else:
            tau, total = run.version - rv, p.update_time(w)
            assert model is not None  # writes come from the model's chunks
            for i, part in enumerate(writes):  # element-wise writes land chunk by chunk, in the sweep's order
                part_s = None if total is None else total / len(writes)
                yield p.update(w, 1 / len(writes), part_s, i == 0)
                model.step(model.grad[w], tau, part)
        held = elide
        snap = run.snapshot(w, run.applied(w, rv, t_read))
        if snap is not None:  # the loss ring's copy of θ as it is now (as torn as a worker's read)
            yield snap
        books = p.bookkeeping(w)
        if books is not None:  # the record and the budget check before the next read of the version
            yield books


def leashed_worker(env: simpy.Environment, w: int, run: SimRun, cell: CasCell,
                   persistence: float) -> Generator[simpy.Event, object, None]:
    p, model = run.platform, run.model
    backoff = run.backoff(w)
    latency = p.cas_latency[w]
    # the latest vector, the gradient, the fresh vector and the latest one it is built from; a lone worker computes
    # its gradient into the vector it publishes: two, as the calibration's
    if run.n > 1:
        p.cycle_vectors(w, 4)
    yield from run.start(w)
    while True:
        run.begin(w)
        t_read, rv = env.now, cell.value  # a reference on the latest vector: no copy
        p.touch(w)  # the gradient reads that vector's lines into this worker's cache
        yield from run.compute(w)
        failures = 0
        while True:
            expected = cell.value  # load the pointer, build θ_latest − η·g in its own vector
            # A lone worker computed its gradient into that vector (its CAS cannot fail): the pass is an
            # update over it, as in place (executors/cpu/lockfree.py)
            yield p.update(w) if run.n == 1 else p.update_into(w)
            yield from atomic(env, cell.line, latency)
            if cell.compare_and_swap(expected, expected + 1):
                if model is not None:
                    model.step(model.grad[w], expected - rv)
                snap = run.snapshot(w, run.applied(w, rv, t_read, retries=failures))
                if snap is not None:  # the loss ring's copy of the vector just published
                    yield snap
                break
            failures += 1
            if failures > persistence:
                run.dropped(w, rv, t_read, retries=failures)
                break
            delay = backoff.delay(failures - 1)
            if delay > 0:
                p.block(w)
                yield env.timeout(delay)
        books = p.bookkeeping(w)
        if books is not None:  # the record and the budget check before the next load of the pointer
            yield books


def start_hogwild(run: SimRun) -> None:
    for w in range(run.n):
        run.env.process(hogwild_worker(run.env, w, run))


def start_leashed(run: SimRun) -> None:
    cell = CasCell(CacheLine(run.env, 0.0))
    persistence = run.sc.algorithm.param("persistence")
    persistence = math.inf if persistence is None else persistence
    for w in range(run.n):
        run.env.process(leashed_worker(run.env, w, run, cell, persistence))
