"""Time distributions for the timing model: one object per `dist` kind.

Every distribution is parameterised by the mean of the *whole* distribution
(`mean_s`), as the scenario format fixes (docs/reference/scenario.md), so that swapping `exponential` for
`deterministic` keeps the throughput and only changes the shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DIST_KINDS = ("deterministic", "exponential", "shifted_exponential", "lognormal", "gamma", "empirical")


class Distribution:
    """A non-negative random duration in seconds."""

    kind: str = ""

    @property
    def mean(self) -> float:
        raise NotImplementedError

    @property
    def variance(self) -> float:
        raise NotImplementedError

    def sample(self, rng: np.random.Generator, n: int | None = None) -> float | np.ndarray:
        """One draw (``n is None``) or an array of ``n`` draws."""
        raise NotImplementedError

    def scaled(self, factor: float) -> Distribution:
        """The distribution of ``factor * X`` (stragglers, calibration scaling)."""
        return Scaled(self, factor)


@dataclass(frozen=True)
class Deterministic(Distribution):
    value: float
    kind: str = field(default="deterministic", init=False)

    @property
    def mean(self) -> float:
        return self.value

    @property
    def variance(self) -> float:
        return 0.0

    def sample(self, rng: np.random.Generator, n: int | None = None) -> float | np.ndarray:
        return self.value if n is None else np.full(n, self.value)


@dataclass(frozen=True)
class Exponential(Distribution):
    mean_s: float
    kind: str = field(default="exponential", init=False)

    @property
    def mean(self) -> float:
        return self.mean_s

    @property
    def variance(self) -> float:
        return self.mean_s**2

    def sample(self, rng: np.random.Generator, n: int | None = None) -> float | np.ndarray:
        return rng.exponential(self.mean_s, n)


@dataclass(frozen=True)
class ShiftedExponential(Distribution):
    """``shift_s + Exp`` with the exponential part's mean ``mean_s - shift_s``."""

    shift_s: float
    mean_s: float
    kind: str = field(default="shifted_exponential", init=False)

    @property
    def mean(self) -> float:
        return self.mean_s

    @property
    def variance(self) -> float:
        return (self.mean_s - self.shift_s) ** 2

    def sample(self, rng: np.random.Generator, n: int | None = None) -> float | np.ndarray:
        return self.shift_s + rng.exponential(self.mean_s - self.shift_s, n)


@dataclass(frozen=True)
class LogNormal(Distribution):
    """Log-normal with the given mean and log-space standard deviation ``sigma``."""

    mean_s: float
    sigma: float
    kind: str = field(default="lognormal", init=False)

    @property
    def mu(self) -> float:
        return math.log(self.mean_s) - self.sigma**2 / 2

    @property
    def mean(self) -> float:
        return self.mean_s

    @property
    def variance(self) -> float:
        return (math.exp(self.sigma**2) - 1) * self.mean_s**2

    def sample(self, rng: np.random.Generator, n: int | None = None) -> float | np.ndarray:
        return rng.lognormal(self.mu, self.sigma, n)


@dataclass(frozen=True)
class Gamma(Distribution):
    mean_s: float
    shape: float
    kind: str = field(default="gamma", init=False)

    @property
    def mean(self) -> float:
        return self.mean_s

    @property
    def variance(self) -> float:
        return self.mean_s**2 / self.shape

    def sample(self, rng: np.random.Generator, n: int | None = None) -> float | np.ndarray:
        return rng.gamma(self.shape, self.mean_s / self.shape, n)


@dataclass(frozen=True, eq=False)
class Empirical(Distribution):
    """Resamples measured durations (e.g. from calibration) with replacement."""

    samples: np.ndarray
    kind: str = field(default="empirical", init=False)

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples))

    @property
    def variance(self) -> float:
        return float(np.var(self.samples))

    def sample(self, rng: np.random.Generator, n: int | None = None) -> float | np.ndarray:
        if n is None:
            return float(self.samples[rng.integers(len(self.samples))])
        return self.samples[rng.integers(len(self.samples), size=n)]


@dataclass(frozen=True)
class Scaled(Distribution):
    base: Distribution
    factor: float

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.base.kind

    @property
    def mean(self) -> float:
        return self.factor * self.base.mean

    @property
    def variance(self) -> float:
        return self.factor**2 * self.base.variance

    def sample(self, rng: np.random.Generator, n: int | None = None) -> float | np.ndarray:
        return self.factor * self.base.sample(rng, n)


def load_samples(path: Path) -> np.ndarray:
    """Durations in seconds: a ``.npy`` array or a text file, one number a line."""
    arr = np.load(path) if path.suffix == ".npy" else np.loadtxt(path, ndmin=1, dtype=float)
    arr = np.asarray(arr, dtype=float).ravel()
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{path}: empirical samples must be a non-empty list of finite durations >= 0")
    return arr


def make(kind: str, *, mean_s: float = 0.0, shift_s: float = 0.0, sigma: float = 0.5,
         shape: float = 2.0, samples: np.ndarray | None = None) -> Distribution:
    """Build a distribution from already-validated parameters."""
    if kind == "deterministic":
        return Deterministic(mean_s)
    if kind == "exponential":
        return Exponential(mean_s) if mean_s > 0 else Deterministic(0.0)
    if kind == "shifted_exponential":
        return ShiftedExponential(shift_s, mean_s) if mean_s > shift_s else Deterministic(shift_s)
    if kind == "lognormal":
        return LogNormal(mean_s, sigma) if mean_s > 0 else Deterministic(0.0)
    if kind == "gamma":
        return Gamma(mean_s, shape) if mean_s > 0 else Deterministic(0.0)
    if kind == "empirical":
        assert samples is not None
        return Empirical(samples)
    raise ValueError(f"unknown distribution {kind!r}; allowed: {', '.join(DIST_KINDS)}")
