"""Fixtures shared across the test folders (tests never import each other's modules)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numba import njit

from executors import atomics as A
from simasgd.workloads.constant import G


@njit(nogil=True, cache=True)
def jitter_grad(theta, X, y, idx, grad_out, shape):  # noqa: ANN001
    """The constant gradient after a random 0–20 µs: breaks the lock-step two equal threads fall into."""
    until = A.now_ns() + np.random.randint(0, 20_000)
    while A.now_ns() < until:
        A.cpu_relax()
    for i in range(grad_out.shape[0]):
        grad_out[i] = G
    return 0.0


@pytest.fixture(scope="session")
def jitter_kernel() -> Any:
    """A kernel with the constant gradient ``G`` of :mod:`simasgd.workloads.constant`, after a random delay."""
    return jitter_grad
