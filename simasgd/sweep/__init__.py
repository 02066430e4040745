"""Sweeps: hyperparameter grids over a scenario, run resumably on a process pool or Dask.

``plan.build`` validates every cell up front, ``runner.run`` executes the
tasks (cell x repeat) into a folder of one Parquet file per task, ``load``
reads it back as one row per (cell, repeat), and ``summary`` gives the
Ek (2021) Table 4.3 view. Submodules import lazily: pandas and Dask only
load when used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from simasgd.sweep.runner import SweepReport


def run(scenario: Any, out: Any, grid: Sequence[str] = (), overrides: Sequence[str] = (), backend: str = "sim",
        repeats: int | None = None, **kwargs: Any) -> SweepReport:
    """``simasgd sweep`` from Python: ``run("s.toml", "sweeps/x", ["optimizer.lr=0.001:0.009:0.001"])``.

    ``kwargs`` go to :func:`simasgd.sweep.runner.run` (jobs, dask, resume, keep_runs, retry_failed).
    """
    from simasgd.sweep import plan, runner

    return runner.run(plan.build(scenario, grid, overrides, backend=backend, repeats=repeats), out, **kwargs)


def load(root: Any) -> pd.DataFrame:
    """One pandas row per finished (cell, repeat) of the sweep stored in ``root``."""
    from simasgd.sweep.store import load as _load

    return _load(root)


def summary(df: pd.DataFrame, **kwargs: Any) -> pd.DataFrame:
    """The fastest stable setting per algorithm x threads (see :func:`simasgd.sweep.analysis.table`)."""
    from simasgd.sweep.analysis import table

    return table(df, **kwargs)
