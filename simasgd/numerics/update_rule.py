"""The SGD update, defined once: every backend applies a gradient with these functions.

One step with learning rate η, momentum m and a gradient g computed on
parameters τ versions old (τ = the row's staleness, ``version − 1 −
read_version``)::

    ĝ = g / max(1, τ)   if the optimizer is staleness-aware, else g
    v ← m·v + ĝ;  θ ← θ − η·v      (m > 0, heavy ball)
    θ ← θ − η·ĝ                    (m = 0; v untouched)

Staleness-aware (Zhang et al. 2016, "staleness-dependent learning rate"):
without momentum dividing g by τ and dividing η by τ are the same step. With
momentum they differ, and this rule divides the *gradient* before it enters
the velocity: the penalty falls on the stale gradient only, which then stays
damped in v for every later step. Dividing η instead (θ ← θ − (η/τ)·v)
would damp the whole velocity — the fresh gradients other workers folded into
it — for this one step, and leave the stale gradient at full weight in v for
the steps after it, so a stale gradient would still move θ by nearly its
undamped amount in total. (Before this module the simulator divided g and the
cpu executor divided η; ``tests/conformance`` holds every backend to this one.)

Callers:

- :func:`step` — the whole vector (serial, the simulator's numerics, the cpu
  loops with a lock, Leashed-SGD's private vector);
- :func:`step_range` — elements ``lo:hi`` only, for writes that land chunk by
  chunk (the simulator's chunked HOGWILD! write); its two forms
  :func:`plain_range` and :func:`heavy_ball_range` are inlined into a caller
  that chooses the form once and then writes cache line by cache line (the
  cpu executor's element-wise racy HOGWILD! write, ``executors/cpu/lockfree.py``);
- :func:`step_mirrored` — :func:`step_range` over the whole vector that also leaves the new θ in the
  worker's copy (the cpu loops' locked updates, and HOGWILD!'s with one worker), so that an unchanged θ
  need not be read again;
- :func:`step_scaled` — a staleness-0 step on ĝ = c·g, reading g element by
  element in the same pass (the Lopez master: g is the shared sum, c = 1/(N−1));
  bit for bit the product into a vector of its own, then :func:`step`;
- :func:`divisor` — max(1, τ) or 1: the same scaling where several gradients
  are averaged into one update (``sync``, ``k_sync``, ``k_async``).

A cached numba function in another file that calls these keeps its compiled
copy when this file changes (numba's cache watches only the caller's file):
such callers are built in a closure over :data:`SOURCE_HASH`, as over
``kernels.SOURCE_HASH`` (``executors/kernel.py``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from numba import njit

from simasgd.numerics import memops
from simasgd.numerics.memops import as_element

# memops' too: its as_element is inlined into the forms below
SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes() + memops.SOURCE_HASH.encode()).hexdigest()[:16]


@njit(nogil=True, cache=True)
def divisor(staleness: int, staleness_aware: bool) -> float:
    """What the gradient is divided by: max(1, τ) when staleness-aware, else 1."""
    if staleness_aware and staleness > 1:
        return float(staleness)
    return 1.0


# The two element-wise forms of one step on elements lo:hi, inlined into their callers (numba IR
# inlining), so that a caller looping over cache-line chunks with a constant trip count keeps each
# chunk one vector operation. Each element is one load-modify-store of θ (and of v), in index order,
# with no temporary vector: a racy caller's concurrent writes interleave element by element.
# The arithmetic is in θ's element type (η, m and the divisor are converted to it first), as in
# PyTorch's SGD: a float32 model's step in float64 would convert every element twice and run at
# about half the speed.

@njit(nogil=True, cache=True)
def sweeps_down(alternate: bool, worker: int) -> bool:
    """HOGWILD!'s ``[algorithm] sweep``: with ``alternate``, odd-numbered workers write their update from the top of
    θ down, so two overlapping updates cross once instead of one trailing the other line by line (convoys: the
    follower takes each line just as the leader wrote it, for the rest of the run). The arithmetic is the
    same either way; only the order of the writes differs."""
    return alternate and worker % 2 == 1


@njit(nogil=True, cache=True, inline="always")
def plain_range(theta: np.ndarray, g: np.ndarray, lr: float, div: float, lo: int, hi: int) -> None:
    """θ ← θ − lr·g/div on elements ``lo:hi`` (no momentum)."""
    eta = as_element(theta, lr)
    if div == 1.0:
        for i in range(lo, hi):
            theta[i] -= eta * g[i]
    else:
        d = as_element(theta, div)
        for i in range(lo, hi):
            theta[i] -= eta * (g[i] / d)


@njit(nogil=True, cache=True, inline="always")
def heavy_ball_range(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, lr: float, momentum: float, div: float,
                     lo: int, hi: int) -> None:
    """v ← m·v + g/div; θ ← θ − lr·v on elements ``lo:hi``."""
    eta, m = as_element(theta, lr), as_element(theta, momentum)
    if div == 1.0:
        for i in range(lo, hi):
            vel[i] = m * vel[i] + g[i]
            theta[i] -= eta * vel[i]
    else:
        d = as_element(theta, div)
        for i in range(lo, hi):
            vel[i] = m * vel[i] + g[i] / d
            theta[i] -= eta * vel[i]


@njit(nogil=True, cache=True)
def step_range(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, lr: float, momentum: float, div: float,
               lo: int, hi: int) -> None:
    """Elements ``lo:hi`` of one step with ĝ = g / ``div`` (see the module docstring); ``vel`` is read
    and written only when ``momentum > 0`` (it may be empty otherwise)."""
    if momentum > 0.0:
        heavy_ball_range(theta, vel, g, lr, momentum, div, lo, hi)
    else:
        plain_range(theta, g, lr, div, lo, hi)


@njit(nogil=True, cache=True)
def step(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, lr: float, momentum: float, staleness: int,
         staleness_aware: bool) -> None:
    """One SGD step on the whole vector with a gradient ``staleness`` versions old (module docstring)."""
    step_range(theta, vel, g, lr, momentum, divisor(staleness, staleness_aware), 0, theta.shape[0])



@njit(nogil=True, cache=True, inline="always")
def _mirrored_sweep(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, mirror: np.ndarray, eta: float, m: float,
                    d: float, heavy: bool, divided: bool) -> None:
    """The forms of :func:`plain_range` and :func:`heavy_ball_range` on the whole vector, each new θ
    element also stored into ``mirror`` in the same iteration (one form per loop, chosen outside it)."""
    n = theta.shape[0]
    if heavy:
        if divided:
            for i in range(n):
                vel[i] = m * vel[i] + g[i] / d
                t = theta[i] - eta * vel[i]
                theta[i] = t
                mirror[i] = t
        else:
            for i in range(n):
                vel[i] = m * vel[i] + g[i]
                t = theta[i] - eta * vel[i]
                theta[i] = t
                mirror[i] = t
    elif divided:
        for i in range(n):
            t = theta[i] - eta * (g[i] / d)
            theta[i] = t
            mirror[i] = t
    else:
        for i in range(n):
            t = theta[i] - eta * g[i]
            theta[i] = t
            mirror[i] = t


@njit(nogil=True, cache=True)
def step_mirrored(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, mirror: np.ndarray, lr: float,
                  momentum: float, div: float) -> None:
    """One step with ĝ = g / ``div`` on the whole vector (the arithmetic of :func:`step_range`), and
    ``mirror`` ← the new θ, in one sweep: bit for bit the step, then a copy of θ into ``mirror``.

    ``g`` may be ``mirror`` itself: a worker's copy of θ that its gradient was written over
    (``kernels.grad_over_theta``). Each element of g is read before the same element of the mirror is
    written. A worker that keeps its copy so, and finds at its next read that no one has written θ
    since, need not copy θ again (executors/cpu/locks.py). The sweep costs a little more than
    :func:`step` when g is the mirror, more when g is a third buffer, and less than the copy it saves."""
    eta, m, d = as_element(theta, lr), as_element(theta, momentum), as_element(theta, div)
    heavy, divided = momentum > 0.0, div != 1.0
    if g.ctypes.data == mirror.ctypes.data:
        # one buffer, one pointer: LLVM's overlap check between g and the mirror would fail at run time
        # and take its scalar loop, several times slower
        _mirrored_sweep(theta, vel, mirror, mirror, eta, m, d, heavy, divided)
    else:
        _mirrored_sweep(theta, vel, g, mirror, eta, m, d, heavy, divided)


@njit(nogil=True, cache=True)
def step_scaled(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, lr: float, momentum: float,
                scale: float) -> None:
    """One staleness-0 step on ĝ = ``scale``·g, each element of g loaded once, in the pass that writes θ.

    The same arithmetic as ``g' ← scale·g`` into a vector of its own and then :func:`step` on g' (the
    product is rounded to θ's element type either way), with one stream fewer and no third model-sized
    buffer: the Lopez master's three buffers (the sum, g', θ) can outgrow a core's L2 where two fit,
    and its step then runs at DRAM's pace."""
    eta, m, c = as_element(theta, lr), as_element(theta, momentum), as_element(theta, scale)
    n = theta.shape[0]
    if momentum > 0.0:
        for i in range(n):
            vel[i] = m * vel[i] + g[i] * c
            theta[i] -= eta * vel[i]
    else:
        for i in range(n):
            theta[i] -= eta * (g[i] * c)


@njit(nogil=True, cache=True, inline="always")
def _into(out: np.ndarray, vout: np.ndarray, theta: np.ndarray, vel: np.ndarray, g: np.ndarray, eta: float, m: float,
          d: float, heavy_ball: bool) -> None:
    """:func:`step_into`'s loops; ``d`` = 1 divides nothing (a division by 1 is exact, but not free)."""
    n = theta.shape[0]
    if heavy_ball:
        if d == 1.0:
            for i in range(n):
                vout[i] = m * vel[i] + g[i]
                out[i] = theta[i] - eta * vout[i]
        else:
            for i in range(n):
                vout[i] = m * vel[i] + g[i] / d
                out[i] = theta[i] - eta * vout[i]
    elif d == 1.0:
        for i in range(n):
            out[i] = theta[i] - eta * g[i]
    else:
        for i in range(n):
            out[i] = theta[i] - eta * (g[i] / d)


@njit(nogil=True, cache=True)
def step_into(out: np.ndarray, vout: np.ndarray, theta: np.ndarray, vel: np.ndarray, g: np.ndarray, lr: float,
              momentum: float, staleness: int, staleness_aware: bool) -> None:
    """``out`` (and ``vout``) ← :func:`step` applied to a copy of θ (and v), in one pass; θ and v are
    only read. Bit for bit the copy-then-step, with three model-sized streams instead of five: how
    Leashed-SGD builds ``θ_latest − η·g`` in a vector of its own.

    ``g`` may be ``out`` itself (a gradient computed into the vector that will hold the step): each
    element is read before it is written. That case passes ``out`` for g to the loops: given g and out
    as two arrays that are one, LLVM's run-time overlap check sends the loops to their scalar form,
    several times slower."""
    div = divisor(staleness, staleness_aware)
    eta, m, d = as_element(out, lr), as_element(out, momentum), as_element(out, div)
    if g.ctypes.data == out.ctypes.data:
        _into(out, vout, theta, vel, out, eta, m, d, momentum > 0.0)  # out for g: one array, seen as one
    else:
        _into(out, vout, theta, vel, g, eta, m, d, momentum > 0.0)
