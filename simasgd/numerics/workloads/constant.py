"""A workload whose gradient is a known constant: every backend's θ recurrence has a closed form on it.

Every gradient is ``G`` in every element, whatever θ and the minibatch, so θ
after N applied updates depends only on N (and on momentum and the
staleness each update was applied with): ``θ0 = 1`` and ``LR·G = 2⁻¹⁶`` are
exact in float64, so a lossless algorithm without momentum leaves every
θ_i = 1 − N·2⁻¹⁶ exactly. The loss is θ[0] (``first_loss``, exact) or the
mean of θ (``mean_loss``). Not built from a scenario (``build_workload``
never returns it): tests hand it to a backend (``executors.cpu.runner.
run_workload``) or substitute it for ``build_workload``.

The kernels are separate numba functions, so a cpu loop computing with them
is a copy cached apart from the loop (``executors/kernel.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

G = 2.0 ** -8
LR = 2.0 ** -8
STEP = LR * G


@njit(nogil=True, cache=True)
def const_grad(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray, grad_out: np.ndarray,
               shape: np.ndarray) -> float:
    for i in range(grad_out.shape[0]):
        grad_out[i] = G
    return 0.0


@njit(nogil=True, cache=True)
def mean_loss(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray, shape: np.ndarray) -> float:
    return np.mean(theta)


@njit(nogil=True, cache=True)
def first_loss(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray, shape: np.ndarray) -> float:
    return theta[0]


@dataclass(eq=False)
class ConstWorkload:
    dim: int = 64
    kernel: Any = const_grad
    loss_kernel: Any = mean_loss
    shape: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    X: np.ndarray = field(default_factory=lambda: np.zeros((4, 1)))
    y: np.ndarray = field(default_factory=lambda: np.zeros(4, dtype=np.int64))
    eval_idx: np.ndarray = field(default_factory=lambda: np.arange(4, dtype=np.int64))
    dtype: Any = np.float64
    n_train: int = 4
    flops_per_sample: float = 1.0
    theta0: float = 1.0  # exact start; 1 − N·2⁻¹⁶ stays exact (and the loss positive) for N < 65536·θ0

    def init_theta(self, rng: np.random.Generator) -> np.ndarray:
        return np.full(self.dim, self.theta0)

    def eval_loss(self, theta: np.ndarray) -> float:
        return float(self.loss_kernel(theta, self.X, self.y, self.eval_idx, self.shape))

    def sample_batch(self, rng: np.random.Generator, batch_size: int | None = None) -> np.ndarray:
        return rng.integers(0, self.n_train, size=batch_size or 1, dtype=np.int64)

    def warmup(self) -> None:
        theta, g = np.full(self.dim, self.theta0), np.empty(self.dim)
        self.kernel(theta, self.X, self.y, self.eval_idx, g, self.shape)
        self.eval_loss(theta)
