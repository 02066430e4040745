"""Lopez et al. 2020 Alg. 2/3 on CUDA streams (the definition: ``simasgd.spec.algorithms`` ``lopez``;
the same mechanics on threads: ``executors/cpu/lopez.py``).

- **Master** (stream 0): steps without waiting for gradients until the budget. A step is three
  kernels on its stream: ``announce`` (ann ← version + 1, before any read of the sum), ``step``
  (θ ← update_rule.step(θ, acc/(N−1)), staleness 0, plain reads of acc racing with the workers'
  atomic adds), ``bump`` (version + 1). With ``model_read = "consistent"`` a seqlock word is
  incremented before and after (odd while θ is written).
- **Worker** (streams 1..N−1), per gradient: copy θ (``read_into``: a torn copy while the master
  writes, as the paper; or the seqlock copy, retried until one version), ``acc −= old`` with
  ``cuda.atomic.add`` (Alg. 3 line 4), the gradient, ``acc += g`` (line 7), then the row's version
  = ann + 1 noted on the device (``note_announced``). ``subtract = "with_add"``: one pass
  ``acc += g − old`` after the gradient.
- **Rows**: before the pass that removes a gradient, the host reads ann: below the row's version no
  step began reading acc with it, so the row becomes ``applied = false``; after the run, rows whose
  version the master did not make are ``applied = false`` (the runner).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from executors.cuda import kernels as K
from executors.cuda.model import launch, launch1, to_host

# --------------------------------------------------------------------------- kernels
# ann[0]: the master step whose read of the gradient sum began last (announced before it reads acc).

@cuda.jit(cache=True)
def announce(ann: Any, ctr: Any) -> None:
    if cuda.grid(1) == 0:
        cuda.atomic.exch(ann, 0, cuda.atomic.add(ctr, 0, 0) + 1)
        cuda.threadfence()


@cuda.jit(cache=True)
def note_announced(ann: Any, recv: Any, slot: Any) -> None:
    """recv[slot] = the first step to begin reading the sum after this stream's add (ann + 1)."""
    if cuda.grid(1) == 0:
        recv[slot] = cuda.atomic.add(ann, 0, 0) + 1


@cuda.jit(cache=True)
def accumulate_scaled(total: Any, g: Any, c: Any) -> None:
    """total += c·g, element by element with cuda.atomic.add (Alg. 3 lines 4 and 7)."""
    i = cuda.grid(1)
    if i < g.shape[0]:
        cuda.atomic.add(total, i, c * g[i])


@cuda.jit(cache=True)
def accumulate_delta(total: Any, g: Any, old: Any) -> None:
    """total += g − old in one pass (``subtract = "with_add"``)."""
    i = cuda.grid(1)
    if i < g.shape[0]:
        cuda.atomic.add(total, i, g[i] - old[i])


@cuda.jit(cache=True)
def copy(dst: Any, src: Any) -> None:
    i = cuda.grid(1)
    if i < dst.shape[0]:
        dst[i] = src[i]


@cuda.jit(cache=True)
def note(src: Any, out: Any, k: int) -> None:
    """out[k] = src[0] (an atomic read) -> None: the seqlock word before and after a consistent copy."""
    if cuda.grid(1) == 0:
        out[k] = cuda.atomic.add(src, 0, 0)


def master(r: Any) -> None:
    s, opt, n = r.streams[0], r.sc.optimizer, max(1, r.n - 1)
    rec = r.records[0]
    while not r.stop.is_set() and r.tickets.take():
        if r.consistent:
            launch1(K.bump, s, r.seq, r.scratch, 0)
        launch1(announce, s, r.ann, r.ctr)
        launch(K.step, r.dim, s, r.theta, r.vel, r.acc, *K.in_dtype(r.theta, 1.0 / n, opt.lr, opt.momentum), False,
               rec.recv, rec.recr, -1)
        launch1(K.bump, s, r.ctr, r.scratch, 0)
        if r.consistent:
            launch1(K.bump, s, r.seq, r.scratch, 0)
        s.synchronize()
    r.stop.set()  # the master's budget is the run's: the workers stop with it


def _read(r: Any, w: int, local: Any) -> None:
    s, rec = r.streams[w], r.records[w]
    if not r.consistent:  # Alg. 3 line 3: a plain copy racing with the master's write
        launch(K.read_into, r.dim, s, local, r.theta, r.ctr, rec.recr, rec.slot)
        return
    marks = r.marks[w]
    while True:  # seqlock: the copy is one version when the word was even and unchanged around it
        launch1(note, s, r.seq, marks, 0)
        launch(K.read_into, r.dim, s, local, r.theta, r.ctr, rec.recr, rec.slot)
        launch1(note, s, r.seq, marks, 1)
        a, b = to_host(marks, s)
        if a == b and a % 2 == 0:
            return
        if r.stop.is_set():
            return


def worker(r: Any, w: int) -> None:
    if w == 0:
        master(r)
        return
    s, rec, grad, clock = r.streams[w], r.records[w], r.grads[w], r.clock
    local, g, old = r.local[w], r.g[w], r.old[w]
    with_add = r.sc.algorithm.param("subtract") == "with_add"
    last: tuple[int, int] | None = None  # (row index, version) of the gradient now in acc

    def remove() -> None:
        """Before the pass that takes the last gradient out: no step announced since it went in → dropped."""
        nonlocal last
        if last is not None and int(to_host(r.ann, s)[0]) < last[1]:
            rec.applied[last[0]] = False
        last = None

    while not r.stop.is_set():
        slot = rec.slot
        m0 = clock.mark(s)
        _read(r, w, local)
        if not with_add:  # line 4: acc ← acc − g_old before the gradient
            remove()
            launch(accumulate_scaled, r.dim, s, r.acc, old, -1.0)
        m1 = clock.mark(s)  # the pass is the read side's, as the simulator records it
        grad.compute(local, r.batch(w), g)
        m2 = clock.mark(s)
        if with_add:
            remove()
            launch(accumulate_delta, r.dim, s, r.acc, g, old)
        else:  # line 7: acc ← acc + g_new
            launch(accumulate_scaled, r.dim, s, r.acc, g, 1.0)
        launch1(note_announced, s, r.ann, rec.recv, slot)
        launch(copy, r.dim, s, old, g)
        m3 = clock.mark(s)
        v = int(to_host(rec.recv, s)[slot])
        rec.done((m0, m1, m2, m3), 0, True)
        last = (len(rec.applied) - 1, v)


def state(r: Any, cuda: Any, dt: np.dtype) -> None:
    """The device words and buffers of a Lopez run, on the run's namespace ``r``."""
    r.acc = cuda.to_device(np.zeros(r.dim, dt))
    r.ann = cuda.to_device(np.zeros(1, np.int64))
    r.seq = cuda.to_device(np.zeros(1, np.int64))
    r.consistent = r.sc.algorithm.param("model_read") == "consistent"
    r.old = [cuda.to_device(np.zeros(r.dim, dt), stream=s) for s in r.streams]
    r.marks = [cuda.to_device(np.zeros(2, np.int64), stream=s) for s in r.streams]
