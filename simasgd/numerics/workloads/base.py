"""The Workload: a model, its data and its numba kernels, as every backend sees it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Dense rows (n × features), or CSR rows as (indptr int64, indices int64, values).
CSR = tuple[np.ndarray, np.ndarray, np.ndarray]
DataMatrix = np.ndarray | CSR


class WorkloadError(ValueError):
    """A `[workload]` table that cannot be built; the message names the key."""


@dataclass(frozen=True, eq=False)
class ModelSpec:
    """What a model builder decides; :func:`build_workload` adds data and kernels."""

    shape: np.ndarray                      # int64 [tag, dims...], read by the kernels
    dim: int                               # len θ
    flops_per_sample: float                # forward + backward estimate
    init: Callable[[np.random.Generator], np.ndarray]  # float64 θ₀ from the rng
    description: str


@dataclass(frozen=True, eq=False)  # eq=False: arrays do not compare as a bool
class Workload:
    """A model on its data. ``kernel`` and ``loss_kernel`` are the same numba
    dispatchers for every workload (see :mod:`simasgd.numerics.workloads.kernels`); they
    find the model in ``shape``. θ and gradient buffers have ``dtype`` and are
    C-contiguous 1-D arrays of length ``dim``. ``X``/``y`` are the training
    rows (read-only, shared between runs); ``eval_idx`` indexes them."""

    name: str
    kernel: Any             # numba dispatcher: (θ, X, y, idx, grad_out, shape) -> mean loss
    loss_kernel: Any        # numba dispatcher: (θ, X, y, idx, shape) -> mean loss
    predict_kernel: Any     # numba dispatcher: (θ, X, idx, shape, out int64) -> None
    shape: np.ndarray
    X: DataMatrix
    y: np.ndarray           # int64 labels (classification) or dtype targets (least squares)
    X_test: DataMatrix
    y_test: np.ndarray
    eval_idx: np.ndarray    # int64 training rows the ε loss is measured on
    dim: int
    dtype: np.dtype
    flops_per_sample: float
    bytes_per_sample: float | None = None
    features: int = 0
    classes: int = 0        # 0: regression
    sparse: bool = False
    batch_size: int = 1
    description: str = ""
    init_fn: Callable[[np.random.Generator], np.ndarray] | None = field(default=None, repr=False)

    # -- sizes ------------------------------------------------------------
    @property
    def n_train(self) -> int:
        return int(self.y.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.y_test.shape[0])

    @property
    def classification(self) -> bool:
        return self.classes > 0

    # -- parameters and batches -------------------------------------------
    def init_theta(self, rng: np.random.Generator) -> np.ndarray:
        """Initial parameters drawn from ``rng``, in the workload dtype.

        Drawn in float64 and then rounded, so float32 runs start from the
        float64 run's point."""
        if self.init_fn is None:
            raise WorkloadError(f"{self.name}: no initialiser")
        return np.ascontiguousarray(self.init_fn(rng), dtype=self.dtype)

    def warmup(self) -> None:
        """Compile the kernels for this workload's types now (or load them from
        numba's cache), so the first timed update does not pay for it."""
        theta, idx = np.zeros(self.dim, dtype=self.dtype), np.zeros(1, dtype=np.int64)
        self.kernel(theta, self.X, self.y, idx, self.new_grad(), self.shape)
        self.loss_kernel(theta, self.X, self.y, idx, self.shape)

    def new_grad(self) -> np.ndarray:
        """A gradient buffer of the right size and dtype."""
        return np.empty(self.dim, dtype=self.dtype)

    def sample_batch(self, rng: np.random.Generator, batch_size: int | None = None) -> np.ndarray:
        """Training rows drawn uniformly with replacement (int64)."""
        b = self.batch_size if batch_size is None else batch_size
        return rng.integers(0, self.n_train, size=b, dtype=np.int64)

    # -- kernels, bound to this workload's shape ---------------------------
    def loss_and_grad(self, theta: np.ndarray, X: DataMatrix, y: np.ndarray, idx: np.ndarray,
                      grad_out: np.ndarray) -> float:
        """Mean loss over rows ``idx`` of (X, y); the mean gradient overwrites ``grad_out``."""
        return float(self.kernel(theta, X, y, idx, grad_out, self.shape))

    def loss(self, theta: np.ndarray, X: DataMatrix, y: np.ndarray, idx: np.ndarray) -> float:
        return float(self.loss_kernel(theta, X, y, idx, self.shape))

    def gradient(self, theta: np.ndarray, idx: np.ndarray, grad_out: np.ndarray | None = None) -> np.ndarray:
        """The mean training gradient over ``idx`` (a new buffer unless given)."""
        g = self.new_grad() if grad_out is None else grad_out
        self.kernel(theta, self.X, self.y, idx, g, self.shape)
        return g

    def eval_loss(self, theta: np.ndarray) -> float:
        """The loss ε is measured with: the mean training loss on ``eval_idx``."""
        return float(self.loss_kernel(theta, self.X, self.y, self.eval_idx, self.shape))

    def test_loss(self, theta: np.ndarray) -> float:
        idx = np.arange(self.n_test, dtype=np.int64)
        return float(self.loss_kernel(theta, self.X_test, self.y_test, idx, self.shape))

    def predict(self, theta: np.ndarray, test: bool = True) -> np.ndarray:
        if not self.classification:
            raise WorkloadError(f"{self.name} is a regression workload: it predicts no classes")
        X, n = (self.X_test, self.n_test) if test else (self.X, self.n_train)
        out = np.empty(n, dtype=np.int64)
        self.predict_kernel(theta, X, np.arange(n, dtype=np.int64), self.shape, out)
        return out

    def accuracy(self, theta: np.ndarray, test: bool = True) -> float:
        """Fraction of correctly classified test (or training) rows."""
        y = self.y_test if test else self.y
        if y.shape[0] == 0:
            raise WorkloadError("no test rows: workload.test_fraction = 0 and the dataset has no test files")
        return float(np.mean(self.predict(theta, test) == y))
