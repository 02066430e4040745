"""What an algorithm's entry in :data:`executors.cpu.wiring.IMPLEMENTATIONS` takes and gives.

:class:`Run` is the run's shared arrays and sizes that :func:`executors.cpu.wiring.wire` hands an entry;
:class:`Wiring` is the entry's answer: the worker loop, its extra arguments, θ at the end and the summary's
figures. The algorithm modules build their own entries from these, so they depend on this module and
``wiring`` on them, never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from executors.cpu.shared import S_ELIDED, slot


@dataclass
class Wiring:
    loop: Any                                   # the worker loop (numba dispatcher)
    extras: Callable[[int], tuple[Any, ...]]    # worker -> extra arguments after the common head
    final_theta: Callable[[], np.ndarray]       # θ at the end, once every thread has stopped
    extra: Callable[[int], dict[str, Any]] = field(default=lambda applied: {})  # summary figures
    records_per_worker: Callable[[int, int], int] = field(default=lambda w, n: n)  # cap per worker
    immediate_warmup: bool = False              # warm-up only compiles (the loop cannot finish alone)
    # (worker, its record count) -> optional updates.parquet columns of its rows (e.g. elastic "distance")
    row_columns: Callable[[int, int], dict[str, np.ndarray]] = field(default=lambda w, k: {})


@dataclass(frozen=True)
class Run:
    """What :func:`wire` hands an entry: the run's shared arrays and sizes."""
    loop: Any
    ctrl: np.ndarray
    cfg_i: np.ndarray
    cfg_f: np.ndarray
    theta: np.ndarray
    vel: np.ndarray
    workers: int
    scenario: Any = None  # the Scenario, for entries whose arrays follow from it (bounds, data shards)
    n_rows: int = 0       # training rows of the workload


def elided(ctrl: np.ndarray) -> dict[str, Any]:
    """The summary's count of reads of θ skipped, θ unchanged since the worker's own update (``S_ELIDED``)."""
    return {"reads_elided": int(ctrl[slot(S_ELIDED)])}
