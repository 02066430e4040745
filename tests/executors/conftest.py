"""A tiny workload with the standard kernel signature whose gradient is a known constant.

θ0 = 1 and lr·g = 2⁻¹⁶ are exact in float64, so after N applied updates a
lossless algorithm leaves every θ_i = 1 − N·2⁻¹⁶ exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from numba import njit

from simasgd import loader

G = 2.0 ** -8
LR = 2.0 ** -8
STEP = LR * G


@njit(nogil=True, cache=True)
def const_grad(theta, X, y, idx, grad_out, shape):  # noqa: ANN001
    for i in range(grad_out.shape[0]):
        grad_out[i] = G
    return 0.0


@njit(nogil=True, cache=True)
def mean_loss(theta, X, y, idx, shape):  # noqa: ANN001
    return np.mean(theta)


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
    theta0: float = 1.0  # exact start; 1 − N·2⁻¹⁶ stays exact (and the loss positive) for N < 65536·θ0

    def init_theta(self, rng: np.random.Generator) -> np.ndarray:
        return np.full(self.dim, self.theta0)

    def eval_loss(self, theta: np.ndarray) -> float:
        return float(self.loss_kernel(theta, self.X, self.y, self.eval_idx, self.shape))


def scenario(algorithm: dict[str, Any], workers: int = 2, max_updates: int = 2000, max_time_s: float = 20.0,
             placement: Any = "os", **more: Any) -> Any:
    data = {"name": "const", "seed": 7, "workers": {"count": workers, "placement": placement},
            "workload": {"model": "least_squares", "batch_size": 1},
            "algorithm": algorithm, "optimizer": {"lr": LR},
            "stop": {"max_updates": max_updates, "max_time_s": max_time_s, "epsilon": 0.001},
            "cpu": {"join_timeout_s": 10.0}}
    for k, v in more.items():
        data[k] = {**data.get(k, {}), **v}
    return loader.from_dict(data)


@pytest.fixture(scope="session")
def const_workload() -> ConstWorkload:
    return ConstWorkload()
