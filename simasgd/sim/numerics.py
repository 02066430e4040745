"""Numerics mode: the real parameters, gradients and optimizer, applied in simulated event order.

The simulated machine holds one parameter vector ``theta``. A worker's read
copies it (whole, or chunk by chunk for a torn Hogwild! read) into the
worker's local buffer; its gradient is the workload's kernel at exactly that
buffer on the worker's own minibatch stream; updates land on ``theta`` when
the simulation applies them (whole, or chunk by chunk). The math runs at the
simulated instant the data is available; simulated time is charged separately
by :mod:`costs`, so the numbers do not depend on how fast this host is.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from simasgd.numerics import update_rule
from simasgd.spec import seeds
from simasgd.spec.scenario import Scenario


class Model:
    """Shared parameters and optimizer state, plus each worker's local copy and gradient."""

    def __init__(self, sc: Scenario, run: int, wl: Any) -> None:
        n = sc.workers.count
        self.wl = wl
        self.batch = sc.workload.batch_size
        opt = sc.optimizer
        self.lr, self.momentum, self.staleness_aware = opt.lr, opt.momentum, opt.staleness_aware
        self.theta = np.ascontiguousarray(wl.init_theta(seeds.rng(sc.seed, run, seeds.Role.INIT)))
        self.velocity = np.zeros_like(self.theta) if self.momentum else np.zeros(0, self.theta.dtype)
        # A whole read is followed by its gradient in the same simulated instant, so one scratch copy
        # serves every worker (less memory traffic); a torn read spans time and needs its own buffer.
        self.scratch = np.empty_like(self.theta)
        self.torn: list[np.ndarray | None] = [None] * n
        self.read_into = [self.scratch] * n
        self.grad = [np.zeros_like(self.theta) for _ in range(n)]
        self.rngs = seeds.worker_rngs(sc.seed, run, seeds.Role.BATCH, n)
        chunks = max(1, min(sc.sim.read_chunks, self.theta.size))
        bounds = np.linspace(0, self.theta.size, chunks + 1).astype(int)
        self.chunks = [slice(int(a), int(b)) for a, b in itertools.pairwise(bounds)]
        # the monitor's loss: the shared θ's, unless the algorithm's result is something else (it replaces this)
        self.loss: Callable[[], float] = self.shared_loss

    def snapshot(self, w: int, part: slice | None = None) -> None:
        """Worker ``w`` copies the shared parameters (or one chunk of them) into its buffer."""
        if part is None:
            np.copyto(self.scratch, self.theta)
            self.read_into[w] = self.scratch
            return
        buf = self.torn[w]
        if buf is None:
            buf = self.torn[w] = np.empty_like(self.theta)
        buf[part] = self.theta[part]
        self.read_into[w] = buf

    def gradient(self, w: int) -> float:
        """The gradient at what the worker last read, on its next minibatch; returns the minibatch loss.

        Call it in the same simulated instant as a whole :meth:`snapshot` (the scratch copy is shared).
        """
        wl = self.wl
        idx = wl.sample_batch(self.rngs[w], self.batch)
        return float(wl.kernel(self.read_into[w], wl.X, wl.y, idx, self.grad[w], wl.shape))

    def step(self, g: np.ndarray, staleness: int, part: slice | None = None) -> None:
        """One :mod:`simasgd.numerics.update_rule` step with a gradient ``staleness`` versions old (``part``: those
        elements only, a chunk of a HOGWILD! write)."""
        lo, hi = (0, self.theta.size) if part is None else (part.start, part.stop)
        update_rule.step_range(self.theta, self.velocity, g, self.lr, self.momentum,
                               update_rule.divisor(staleness, self.staleness_aware), lo, hi)

    def step_mean(self, workers: list[int], staleness: list[int]) -> None:
        """One update with the average of several workers' gradients (sync, k-sync, k-async), each
        divided by ``update_rule.divisor`` of its own staleness."""
        total = np.zeros_like(self.theta)
        for w, tau in zip(workers, staleness, strict=False):
            div = update_rule.divisor(tau, self.staleness_aware)
            total += self.grad[w] / div if div != 1.0 else self.grad[w]
        total /= len(workers)
        self.step(total, 0)

    def shared_loss(self) -> float:
        return float(self.wl.eval_loss(self.theta))

    def result(self) -> np.ndarray:
        """The parameters the loss is taken on (the curve's accuracy too): the shared θ. An algorithm
        whose result is something else replaces it, as it replaces :attr:`loss`."""
        return self.theta
