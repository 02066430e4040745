"""The cuda backend's tests run under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set in
``tests/conftest.py`` before numba is imported; ``SIMASGD_TEST_GPU=1`` runs them on a real GPU).

Under the simulator every CUDA thread is a Python thread: shapes are tiny and runs short."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


@pytest.fixture(scope="session")
def cuda() -> Any:
    from executors.cuda import device

    return device.require()


@pytest.fixture(scope="session")
def rng() -> np.random.Generator:
    return np.random.default_rng(7)
