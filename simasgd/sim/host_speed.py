"""The host's speed, shared by its CPUs: why gradients that compute at once take alike times.

Two threads computing gradients at once on a two-CPU VM, each its own θ and data, no shared
model: the normal scores of their durations, paired by overlap in time, correlate at 0.70
to 0.74 (B = 16 and 64, pinned or not); one thread's successive gradients correlate too, and the
correlation across the two CPUs falls with the time between the calls as exp(−Δt/T), T ≈ 450 µs at
both batch sizes. So most of a gradient's variation is the
host's, not the call's: its clock, its other tenants. Drawn independently, simulated workers drift
apart; the lock algorithms' measured workers instead keep the phase they fell into (mutex at
2 threads, B = 16: τ̄ 0.62 measured, 0.89 simulated with independent draws).

The model is a Gaussian copula over the calibrated samples, so each gradient's marginal
distribution stays exactly the profile's:

    z = √ρ · S(t) + √(1 − ρ) · e,    time = Q(Φ(z))

with S a stationary Ornstein–Uhlenbeck process (mean 0, variance 1, time constant T) shared by
every worker, sampled at the gradient's start t; e a worker's own standard normal; Q the quantile
function of the samples. ρ and T are calibrated (``concurrent.k2_speed_corr``,
``concurrent.k2_speed_time_s``; executors/calibration/speed.py). ``[sim] shared_speed = false``: every
draw independent (ρ = 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

BLOCK = 1024
_SQRT2 = math.sqrt(2.0)


class HostSpeed:
    """Shared state: S(t), advanced lazily to each time asked (SimPy's clock never goes back)."""

    def __init__(self, rng: np.random.Generator, time_s: float) -> None:
        if not time_s > 0:
            raise ValueError(f"host speed time constant must be > 0 s, got {time_s}")
        self.time_s = time_s
        self._rng = rng
        self._normals: list[float] = []
        self._i = 0
        self._t = 0.0
        self._s = self._normal()  # stationary from the start

    def _normal(self) -> float:
        if self._i == len(self._normals):
            self._normals = self._rng.standard_normal(BLOCK).tolist()
            self._i = 0
        self._i += 1
        return self._normals[self._i - 1]

    def at(self, t: float) -> float:
        """S(t): the exact OU transition from the last time asked (a = e^(−Δt/T))."""
        dt = t - self._t
        if dt > 0:
            a = math.exp(-dt / self.time_s)
            self._s = a * self._s + math.sqrt(1.0 - a * a) * self._normal()
            self._t = t
        return self._s


class SharedDraw:
    """One worker's gradient times: the copula's quantile at its start, times ``slowdown``, plus what
    ``extra`` adds (stragglers' pauses, the host's long pauses) for a provisional time, a draw of the
    same marginal (their rate depends on the busy time only to first order)."""

    __slots__ = ("_a", "_b", "_clock", "_e", "_extra", "_i", "_n", "_q", "_rng", "_slow", "_speed", "_x")

    def __init__(self, samples: np.ndarray, rho: float, speed: HostSpeed, clock: Callable[[], float],
                 slowdown: float, rng: np.random.Generator,
                 extra: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"host speed correlation must be in [0, 1], got {rho}")
        self._q = np.sort(np.asarray(samples, dtype=float)).tolist()
        self._n = len(self._q)
        self._a, self._b = math.sqrt(rho), math.sqrt(1.0 - rho)
        self._speed, self._clock, self._slow = speed, clock, slowdown
        self._rng, self._extra = rng, extra  # extra: times -> times with the additions
        self._e: list[float] = []
        self._x: list[float] = []
        self._i = 0

    def _refill(self) -> None:
        e = self._rng.standard_normal(BLOCK)
        base = np.zeros(BLOCK)
        if self._extra is not None:  # the additions for the time the private part alone would give
            x = np.asarray(self._q)[np.minimum((_phi(e) * self._n).astype(int), self._n - 1)]
            base = self._extra(x * self._slow) - x * self._slow  # what was added to each
        self._e, self._x, self._i = e.tolist(), base.tolist(), 0

    def __call__(self) -> float:
        if self._i == len(self._e):
            self._refill()
        i = self._i
        self._i = i + 1
        z = self._a * self._speed.at(self._clock()) + self._b * self._e[i]
        u = 0.5 * math.erfc(-z / _SQRT2)
        return self._q[min(int(u * self._n), self._n - 1)] * self._slow + self._x[i]


def _phi(z: np.ndarray) -> np.ndarray:
    """Φ element-wise (math.erfc: scipy.special's import would cost a short simulation 0.7 s)."""
    return np.array([0.5 * math.erfc(-v / _SQRT2) for v in z.tolist()])


def speed_params(table: dict[str, Any] | None) -> tuple[float, float] | None:
    """(ρ, T) from a profile's ``[gradient."<workload>"]`` table, when calibrated."""
    conc = (table or {}).get("concurrent")
    if not isinstance(conc, dict):
        return None
    rho, t = conc.get("k2_speed_corr"), conc.get("k2_speed_time_s")
    if not isinstance(rho, (int, float)) or not isinstance(t, (int, float)) or not t > 0:
        return None
    return min(max(float(rho), 0.0), 1.0), float(t)
