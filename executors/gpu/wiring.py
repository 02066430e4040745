"""The gpu backend's host side of each algorithm: its kernel, rows, configuration words and extra arrays.

One :class:`Entry` per algorithm; ``executors.gpu.IMPLEMENTATIONS`` maps each algorithm to its
entry here (lazily: this module imports the device protocol, so numba.cuda), and :mod:`.runner`
reads nothing algorithm-specific but the entry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from executors.gpu import protocol as P

ROW_SLACK = 4  # rows buffer = (max_updates + workers) × this for algorithms that drop or record per gradient


def _one(n: int) -> int:
    return 1


def _slack(n: int) -> int:
    return ROW_SLACK


def _slack_per_worker(n: int) -> int:
    return ROW_SLACK * n


def _over_others(n: int) -> float:
    return 1.0 / max(1, n - 1)


def _over_all(n: int) -> float:
    return 1.0 / n


def _no_config(a: Any, cfg: np.ndarray) -> None:
    return None


def _no_aux(theta0: np.ndarray, n: int, momentum: bool) -> dict[str, np.ndarray]:
    dt = theta0.dtype
    return {"af": np.zeros((1, 1), dt), "af2": np.zeros((1, 1), dt), "ai": np.zeros(1, np.int64)}


def _all_applied(ri: np.ndarray, version: int, applied: np.ndarray) -> np.ndarray:
    return applied


def _shared_theta(a: dict[str, Any]) -> tuple[int, np.ndarray]:
    ctl = a["ctl"].copy_to_host()
    return int(ctl[P.VERSION * P.LINE]), a["theta"].copy_to_host()


@dataclass(frozen=True)
class Entry:
    kernel: str                                        # its kernel in kernels.build(...)'s set
    rows: Callable[[int], int] = _one                  # rows buffer per (update + worker), of n workers
    scale: Callable[[int], float] = _over_others       # cfgf's third word, of n workers
    configure: Callable[[Any, np.ndarray], None] = _no_config  # (AlgorithmConfig, cfg): its own words
    aux: Callable[[np.ndarray, int, bool], dict[str, np.ndarray]] = _no_aux  # af, af2, ai of (θ0, n, momentum)
    together: bool = False                             # its workers wait for each other: all resident at once
    applied: Callable[[np.ndarray, int, np.ndarray], np.ndarray] = _all_applied  # (rows_i, final version, applied)
    final: Callable[[dict[str, Any]], tuple[int, np.ndarray]] = _shared_theta    # (version, θ) at the end


def _hogwild_config(a: Any, cfg: np.ndarray) -> None:
    cfg[P.LOCAL] = int(bool(a.param("local_copy")))


def _leashed_config(a: Any, cfg: np.ndarray) -> None:
    pers = a.param("persistence")
    cfg[P.PERSIST] = -1 if pers is None or math.isinf(float(pers)) else int(pers)


def _lopez_config(a: Any, cfg: np.ndarray) -> None:
    cfg[P.WITH_ADD] = int(a.param("subtract") == "with_add")
    cfg[P.CONSISTENT] = int(a.param("model_read") == "consistent")


def _leashed_aux(theta0: np.ndarray, n: int, momentum: bool) -> dict[str, np.ndarray]:
    """Leashed's pool (2n + 2 vectors: one claimed and one read per worker, the latest, the monitor's) and
    its words [rc | stale | ver | held]."""
    dt, dim = theta0.dtype, theta0.shape[0]
    size = 2 * n + 2
    pool = np.zeros((size, dim), dt)
    pool[0] = theta0
    stale = np.ones(size, np.int64)
    stale[0] = 0
    words = np.concatenate([np.zeros(size, np.int64), stale, np.zeros(size, np.int64), np.full(n, -1, np.int64)])
    return {"af": pool, "af2": np.zeros((size, dim) if momentum else (size, 1), dt), "ai": words}


def _lopez_aux(theta0: np.ndarray, n: int, momentum: bool) -> dict[str, np.ndarray]:
    """Lopez's [acc, old_1 … old_{N−1}] and [last row, last version]."""
    dt, dim = theta0.dtype, theta0.shape[0]
    return {"af": np.zeros((n, dim), dt), "af2": np.zeros((1, 1), dt), "ai": np.tile(np.array([-1, 0], np.int64), n)}


def _lopez_applied(ri: np.ndarray, version: int, applied: np.ndarray) -> np.ndarray:
    return applied & (ri[:, P.R_VERSION] <= version)  # gradients no step of the run took in (algorithms.py, lopez)


def _leashed_final(a: dict[str, Any]) -> tuple[int, np.ndarray]:
    """Leashed's latest pool vector and its version."""
    ctl = a["ctl"].copy_to_host()
    size = a["af"].shape[0]
    latest = int(ctl[P.LATEST * P.LINE])
    words = a["ai"].copy_to_host()
    return int(words[2 * size + latest]), a["af"][latest].copy_to_host()


# The entries executors.gpu.IMPLEMENTATIONS names, one per algorithm.
SEQUENTIAL = Entry("mutex")  # one worker of the mutex kernel
MUTEX = Entry("mutex", together=True)
HOGWILD = Entry("hogwild", configure=_hogwild_config)
LEASHED = Entry("leashed", rows=_slack, configure=_leashed_config, aux=_leashed_aux, final=_leashed_final)
SYNC = Entry("sync", rows=_slack_per_worker, scale=_over_all, together=True)
LOPEZ = Entry("lopez", rows=_slack_per_worker, configure=_lopez_config, aux=_lopez_aux, applied=_lopez_applied)
