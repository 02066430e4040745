"""How the simulator draws step durations: block samplers, a scenario's timing distributions and a gradient's
additions (stragglers' pauses, the host's long pauses).

Every draw comes from a worker's own ``Role.TIMING`` child streams (:mod:`simasgd.seeds`), in blocks, so the
hot path is an index into a list.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from simasgd import distributions
from simasgd.machine import Machine
from simasgd.scenario import DistSpec, Scenario
from simasgd.sim.noise import HostNoise

BLOCK = 1024


class Sampler:
    """Draws from a distribution in blocks; ``sampler()`` is the next duration."""

    __slots__ = ("_buf", "_draw", "_i")

    def __init__(self, draw: Callable[[int], np.ndarray]) -> None:
        self._draw = draw
        self._buf: list[float] = []
        self._i = 0

    def __call__(self) -> float:
        i = self._i
        if i == len(self._buf):
            self._buf = self._draw(BLOCK).tolist()
            i = 0
        self._i = i + 1
        return self._buf[i]


def timing_dist(spec: DistSpec | None, base_dir: str | None, key: str) -> distributions.Distribution | None:
    if spec is None:
        return None
    try:
        return spec.build(Path(base_dir) if base_dir else None)
    except (OSError, ValueError) as e:  # an empirical samples file that is missing or malformed
        from simasgd.loader import ScenarioError
        raise ScenarioError([f"{key}.path = \"{spec.path}\": {e}"]) from None


def host_noise(sc: Scenario, m: Machine, grad: distributions.Distribution, busy: int) -> HostNoise | None:
    """The calibrated long pauses (:mod:`noise`) when the gradient times are the profile's samples."""
    if not sc.sim.host_noise or sc.timing.gradient is not None or not isinstance(grad, distributions.Empirical):
        return None
    x = np.asarray(grad.samples, dtype=float)
    return HostNoise.from_profile(m.profile, busy, float(np.percentile(x, 99) - np.median(x)))


def additions(probability: float, pause: distributions.Distribution | None, prng: np.random.Generator,
               noise: HostNoise | None = None, nrng: np.random.Generator | None = None
               ) -> Callable[[np.ndarray], np.ndarray] | None:
    """Gradient times with a straggler's pauses (drawn with ``probability``) and the host's long pauses added;
    None when there are neither."""
    pauses = pause is not None and probability > 0
    noisy = noise is not None and nrng is not None
    if not (pauses or noisy):
        return None

    def add(x: np.ndarray) -> np.ndarray:
        if pause is not None and probability > 0:
            x = x + (prng.random(len(x)) < probability) * np.asarray(pause.sample(prng, len(x)), dtype=float)
        if noise is not None and nrng is not None:
            x = noise.add(nrng, x)
        return x
    return add


def gradient_draw(dist: distributions.Distribution, rng: np.random.Generator, slowdown: float,
                   probability: float, pause: distributions.Distribution | None,
                   prng: np.random.Generator, noise: HostNoise | None = None,
                   nrng: np.random.Generator | None = None) -> Callable[[int], np.ndarray]:
    add = additions(probability, pause, prng, noise, nrng)
    if add is None:
        return lambda k: np.asarray(dist.sample(rng, k), dtype=float) * slowdown
    return lambda k: add(np.asarray(dist.sample(rng, k), dtype=float) * slowdown)

