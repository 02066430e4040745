"""Factories the torch tests' scenarios name (``module = "torch_factories:..."``), imported from this folder.

Not a test module and imported by no test: simasgd imports it by name, as it imports a user's module.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

CREATOR = os.getpid()


def tiny() -> nn.Module:
    """Logistic regression on digits' 64 pixels."""
    return nn.Linear(64, 10)


def small_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 16), nn.Tanh(), nn.Linear(16, 10))


def wrong_width() -> nn.Module:
    return nn.Linear(63, 10)


def three_outputs() -> nn.Module:
    return nn.Linear(64, 3)


def raises() -> nn.Module:
    raise RuntimeError("no weights today")


def not_a_module() -> int:
    return 3


def four_features() -> nn.Module:
    return nn.Linear(4, 3)


def one_output() -> nn.Module:
    return nn.Linear(4, 1)


class FailsInWorkers(nn.Module):
    """Works in the process that built it, raises in a worker process (the backend's error path)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if os.getpid() != CREATOR:
            raise RuntimeError("forward failed in a worker")
        return self.lin(x)


def fails_in_workers() -> nn.Module:
    return FailsInWorkers()


def _blobs(n: int = 240) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(5)
    y = g.integers(0, 3, size=n)
    X = np.eye(3, 4)[y] * 3.0 + g.standard_normal((n, 4))
    return X.astype(np.float32), y.astype(np.int64)


def data_xy() -> tuple[torch.Tensor, torch.Tensor]:
    X, y = _blobs()
    return torch.from_numpy(X), torch.from_numpy(y)


def data_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    X, y = _blobs()
    return X[:200], y[:200], X[200:], y[200:]


def data_dataset() -> TensorDataset:
    X, y = data_xy()
    return TensorDataset(X, y)


def data_float_labels() -> tuple[np.ndarray, np.ndarray]:
    X, y = _blobs()
    return X, y.astype(np.float32)


def data_regression() -> tuple[np.ndarray, np.ndarray]:
    X, _ = _blobs()
    return X, (X @ np.array([1.0, -2.0, 0.5, 0.0], dtype=np.float32) + 0.3).astype(np.float32)


def data_bad() -> str:
    return "not data"


def half_mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A custom loss (workload.loss = "torch_factories:half_mse")."""
    return 0.5 * ((out.reshape(target.shape) - target) ** 2).mean()
