"""How the simulator draws step durations: block samplers, a scenario's timing distributions and a gradient's
additions (stragglers' pauses).

Every draw comes from a worker's own ``Role.TIMING`` child streams (:mod:`simasgd.spec.seeds`), in blocks, so the
hot path is an index into a list.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from simasgd.spec import distributions
from simasgd.spec.scenario import DistSpec

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
        from simasgd.spec.loader import ScenarioError
        raise ScenarioError([f"{key}.path = \"{spec.path}\": {e}"]) from None


def additions(probability: float, pause: distributions.Distribution | None,
              prng: np.random.Generator) -> Callable[[np.ndarray], np.ndarray] | None:
    """Gradient times with a straggler's pauses (drawn with ``probability``) added; None without them."""
    if pause is None or probability <= 0:
        return None
    return lambda x: x + (prng.random(len(x)) < probability) * np.asarray(pause.sample(prng, len(x)), dtype=float)


def gradient_draw(dist: distributions.Distribution, rng: np.random.Generator, slowdown: float,
                   probability: float, pause: distributions.Distribution | None,
                   prng: np.random.Generator) -> Callable[[int], np.ndarray]:
    add = additions(probability, pause, prng)
    if add is None:
        return lambda k: np.asarray(dist.sample(rng, k), dtype=float) * slowdown
    return lambda k: add(np.asarray(dist.sample(rng, k), dtype=float) * slowdown)

