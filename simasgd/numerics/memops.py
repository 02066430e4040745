"""Bulk memory operations for nopython code: copies that compile to full-width vector loops.

numba lowers ``dst[:] = src`` through its general broadcasting assignment, which on the 1-d
contiguous vectors the executors copy every cycle runs well below the speed of a plain indexed
loop (benchmarks/README_cpu.md, design measurements).
Every per-cycle copy of a model-sized vector — the executors' reads of θ, a Lopez worker's
last gradient, the loss ring's snapshots, the calibrator's copy benchmark that the simulator's copy rates
come from — goes through :func:`copy_into`, so that what is measured is what is modelled.

A copy is element by element in index order; on x86 each aligned element is loaded and stored
whole, so a copy racing with writers (HOGWILD!'s read) mixes versions element by element, as C's
``memcpy`` would.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit
from numba.extending import overload

SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


@njit(nogil=True, cache=True)
def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[i] ← src[i] for every i of two 1-d arrays of the same length."""
    for i in range(src.shape[0]):
        dst[i] = src[i]


def as_element(arr: np.ndarray, x: float) -> float:
    """``x`` converted to ``arr``'s element type (nopython only; a float32 model computes in float32)."""
    raise NotImplementedError("as_element is for numba-compiled code")


@overload(as_element, inline="always")
def _as_element(arr: Any, x: Any) -> Any:
    elem = arr.dtype

    def impl(arr: Any, x: Any) -> Any:
        return elem(x)

    return impl
