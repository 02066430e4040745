"""Keuper & Pfreundt's decentralised step with Parzen-window acceptance, written once (sim and cpu).

Node i holds its own state θ_i and, possibly, a state θ_j another node sent it
(Keuper & Pfreundt 2015, Alg. 5 and "ASGD: Parzen-Window Updates")::

    δ(i, j) = 1  if ‖(θ_i − ε·Δθ_i) − θ_j‖² < ‖θ_i − θ_j‖²   (the local step goes towards θ_j)
              0  otherwise
    Δ̄ = [θ_i − ½(θ_i + θ_j)]·δ(i, j) + Δ        θ_i ← θ_i − ε·Δ̄

There is no window width: the "window" is whether the local step goes towards
the received state. "The local step" is the step :mod:`simasgd.numerics.update_rule`
would take with the gradient alone (ε·Δ without momentum, ε·(m·v + Δ) with
it); the merged step is then one update-rule step with ĝ = Δ + δ·½(θ_i − θ_j),
so the pull towards θ_j enters the velocity as a gradient does. A node's
gradient is on its own current state: staleness 0.

:func:`merge_step` is the one call (njit, ``cache=True``; callable from Python
and from nopython loops). :data:`SOURCE_HASH`: a cached numba caller in
another file builds itself in a closure over it (as over ``update_rule.SOURCE_HASH``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from numba import njit

from simasgd.numerics import update_rule
from simasgd.numerics.update_rule import step

SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16] + update_rule.SOURCE_HASH


@njit(nogil=True, cache=True)
def accepts(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, peer: np.ndarray, lr: float,
            momentum: float) -> bool:
    """δ(i, j): the local update-rule step on ``theta`` with ``g`` ends closer to ``peer`` than ``theta`` is."""
    before, after = 0.0, 0.0
    for k in range(theta.shape[0]):
        d = theta[k] - peer[k]
        s = lr * (momentum * vel[k] + g[k]) if momentum > 0.0 else lr * g[k]
        before += d * d
        after += (d - s) * (d - s)
    return after < before


@njit(nogil=True, cache=True)
def merge_step(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, peer: np.ndarray, has_peer: bool, lr: float,
               momentum: float, staleness_aware: bool) -> bool:
    """One step of node i: ``g`` (overwritten with ĝ) plus, when ``has_peer`` and δ = 1, ½(θ_i − θ_j).

    Returns δ (False without a received state)."""
    accepted = has_peer and accepts(theta, vel, g, peer, lr, momentum)
    if accepted:
        for k in range(theta.shape[0]):
            g[k] += 0.5 * (theta[k] - peer[k])
    step(theta, vel, g, lr, momentum, 0, staleness_aware)
    return accepted


def spread(states: np.ndarray) -> float:
    """How far the workers' states are apart: RMS distance from their mean, √(mean_i ‖θ_i − θ̄‖²)."""
    centre = states.mean(axis=0)
    return float(np.sqrt(((states - centre) ** 2).sum(axis=1).mean()))
