"""Where the model's bytes live: the cache hierarchy, calibrated per buffer size.

A worker's read copies the model (θ → its private copy) and its update does
θ ← θ − η·g: each touches model-sized buffers of ``S = d·itemsize`` bytes. How
fast one core moves them depends on where they live, and that depends on the
machine: a 680 KB model sits in a core's L2 or the shared L3 and copies at
cache speed, while a copy bandwidth calibrated on a buffer larger than the
caches (the old ``[copy]`` table: 8 MB) charges DRAM speed to every step —
on an Intel Xeon that predicted a 1-thread cycle of 688 µs where the executor
took 551 µs, and on an AMD EPYC the error had the other sign (issue 9).

So the simulator takes one core's bandwidth at the model's buffer size from
the profile's ``[copy_by_size]`` table (``simasgd calibrate``: a warm copy
``dst[:] = src`` and a warm ``θ -= lr·g`` per size, executors/PROFILE.md),
interpolated log-log between the measured sizes and clamped at the ends:

- read   = 2·S / gbs(S)         (bytes read + written, the table's accounting)
- update = 3·S / update_gbs(S)  (θ and g read, θ written)

Sharing. Per-core caches (L1, L2) are private, and a shared last-level cache
serves its cores from per-core slices, so concurrent copies of cache-resident
buffers do not split one bandwidth: the step is a fixed time on the worker's
CPU. Only when the run's footprint — the shared model plus one private
model-sized buffer per worker — exceeds the last-level cache (its capacity
divided among the threads using it) do transfers go to DRAM, where
:mod:`memory` shares the socket's bandwidth (at most ``gbs(S)`` each).
``[sim] cache_model = false`` switches this off (the older single-bandwidth
model); the theory scenarios give ``[timing]`` and never reach it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CacheModel:
    sizes: np.ndarray          # buffer sizes (bytes) the table was measured at, ascending
    copy_gbs: np.ndarray       # one core's copy bandwidth at each size (read + written bytes)
    update_gbs: np.ndarray     # one core's θ -= lr·g bandwidth at each size (3 × bytes)
    llc_bytes: float           # last-level cache capacity (inf when unknown: never DRAM by this rule)

    @classmethod
    def from_profile(cls, profile: dict[str, Any] | None) -> "CacheModel | None":
        """The model from a calibrated profile, or None when it lacks ``[copy_by_size]``."""
        table = (profile or {}).get("copy_by_size") or {}
        sizes, gbs, upd = table.get("sizes_bytes"), table.get("gbs"), table.get("update_gbs")
        if not (isinstance(sizes, list) and isinstance(gbs, list) and isinstance(upd, list)):
            return None
        if not sizes or not (len(sizes) == len(gbs) == len(upd)) or min(gbs + upd) <= 0:
            return None
        order = np.argsort(sizes)
        cache = (profile or {}).get("cache") or {}
        levels = cache.get("sizes_bytes") or []
        llc = float(levels[-1]) if levels else math.inf
        return cls(np.asarray(sizes, float)[order], np.asarray(gbs, float)[order] * 1e9,
                   np.asarray(upd, float)[order] * 1e9, llc)

    def _rate(self, table: np.ndarray, size: float) -> float:
        x = math.log(max(size, 1.0))
        return float(math.exp(np.interp(x, np.log(self.sizes), np.log(table))))

    def read_s(self, model_bytes: float) -> float:
        """One core copying the model into a private buffer (cache-resident)."""
        return 2 * model_bytes / self._rate(self.copy_gbs, model_bytes)

    def update_s(self, model_bytes: float) -> float:
        """One core applying θ -= lr·g to the model (cache-resident)."""
        return 3 * model_bytes / self._rate(self.update_gbs, model_bytes)

    def copy_cap_bytes_s(self, model_bytes: float) -> float:
        """What one core streams at this buffer size: the cap of a DRAM transfer's share."""
        return self._rate(self.copy_gbs, model_bytes)

    def in_cache(self, model_bytes: float, workers: int) -> bool:
        """The shared model and one private model-sized buffer per worker fit the last-level cache."""
        return model_bytes * (1 + workers) <= self.llc_bytes
