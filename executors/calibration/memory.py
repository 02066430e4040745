"""``[memory]``: the latency of a load that misses every cache (a pointer chase). Format: docs/profile.md."""

from __future__ import annotations

import numpy as np
from numba import njit

from executors import atomics as A


@njit(nogil=True, cache=True)
def _chase(nxt: np.ndarray, steps: int) -> tuple[int, int]:
    p = 0
    t0 = A.now_ns()
    for _ in range(steps):
        p = nxt[p]
    return A.now_ns() - t0, p


def memory_latency(n_bytes: int, steps: int, seed: int) -> float:
    n = n_bytes // 8
    perm = np.random.default_rng(seed).permutation(n)
    nxt = np.empty(n, dtype=np.int64)
    nxt[perm] = np.roll(perm, -1)  # one random cycle through every slot: each load misses the caches
    _chase(nxt, 10)
    ns, _ = _chase(nxt, steps)
    return ns / steps
