"""What every role of a ``dist`` run does alike: a worker's gradient, its minibatch stream, its straggling."""

from __future__ import annotations

from typing import Any

import numpy as np

from executors import atomics as A
from executors.cpu.runner import slowdowns
from executors.cpu.shared import straggle
from executors.dist.world import Rank
from simasgd.spec import seeds


class Gradients:
    """Worker ``w``'s gradients: its minibatches (``Role.BATCH``), the workload's kernel, its slowdown."""

    def __init__(self, me: Rank, w: int, shard: np.ndarray | None = None) -> None:
        self.wl, self.batch = me.wl, me.sc.workload.batch_size
        self.rng = seeds.rng(me.sc.seed, me.run, seeds.Role.BATCH, w)
        self.slowdown = slowdowns(me.sc, me.sc.workers.count)[w]
        self.shard = shard  # minibatches from these training rows only (keuper's, simuparallel's partition)

    def __call__(self, theta: np.ndarray, out: np.ndarray) -> None:
        t = A.clock_ns()  # straggle's clock
        wl: Any = self.wl
        idx = (wl.sample_batch(self.rng, self.batch) if self.shard is None or not len(self.shard)
               else self.shard[self.rng.integers(0, len(self.shard), self.batch)])
        wl.kernel(theta, wl.X, wl.y, idx, out, wl.shape)
        straggle(self.slowdown, t)


def velocity(me: Rank, theta: np.ndarray) -> np.ndarray:
    """A velocity for θ (or a state, or a shard): empty without momentum (update_rule allows it)."""
    return np.zeros_like(theta) if me.sc.optimizer.momentum > 0 else np.zeros(0, theta.dtype)
