"""Warnings when a measurement is too unstable to trust one number (pyperf-style).

Two kinds: repeats that disagree with each other (:func:`stability_warnings`' coefficient of
variation), and one run whose machine changed under it (:func:`regime_ratios`). On a VM the host
may move the CPUs between placements every few seconds (executors/c2c.py): a 2-thread cycle more than
doubles while the two CPUs sit in two CCXs, and comes back, within one run. Probes before and after
the run can read the same placement, so only the run's own cycles can tell.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simasgd.evaluation import phases
from simasgd.runs import metadata
from simasgd.runs.results import RunResult

UNSTABLE_CV = 0.10
WINDOWS = 8  # a run is cut into this many equal spans of its time
MIN_PER_WINDOW = 10  # cycles a window needs for its median to count
# Slowest over fastest window median past this: the run changed regime. It lies between the ratios of
# steady runs (one thread's host bursts, HOGWILD!'s overlapping writes) and those of runs whose CPUs moved
# into or out of two CCXs, or onto one core's two hardware threads (benchmarks/README_cpu.md, design
# measurements).
SHIFT = 1.4
WARMUP = 0.05  # the first share of a run's time left out (start-up, first-touch)


def stability_warnings(result: RunResult) -> list[str]:
    """pyperf-style warnings: repeats that disagree too much to trust one number, runs whose cycle time
    changed regime partway (:func:`regime_ratios`), crashed runs."""
    out = []
    rates = np.array([r.updates_per_s for r in result.runs if r.updates_per_s > 0])
    if len(rates) >= 2:
        cv = float(np.std(rates, ddof=1) / np.mean(rates))
        if cv > UNSTABLE_CV:
            out.append(f"updates/s varies by {cv:.0%} (std/mean) across {len(rates)} repeats: "
                       f"the measurement is unstable (other load on the machine? too short a run?)")
    for run, ratio in sorted(regime_ratios(result.updates).items() if _times_this_host(result) else ()):
        if ratio > SHIFT:
            out.append(f"run {run}: its median cycle changed ×{ratio:.2f} between spans of the run: the machine "
                       "changed under it (on a VM, the host moved the CPUs or gave them to another tenant "
                       "partway), so its figures mix two machines")
    crashed = sum(r.crashed for r in result.runs)
    if crashed:
        out.append(f"{crashed} of {len(result.runs)} runs crashed (loss NaN/inf or exploded)")
    return out


def _times_this_host(result: RunResult) -> bool:
    """Whether the run's cycles are this host's timings with a CPU for every worker: a backend that
    measures the host records its CPUs (``metadata.run_cpus``), and ``SHIFT`` was measured with no more
    workers than CPUs. A simulated run's virtual time, or time-sliced workers' cycles, can change
    regime with the machine unchanged (more simulated workers than cores: their cycles interleave)."""
    cpus = metadata.run_cpus(result.metadata)
    workers = int(((result.scenario or {}).get("workers") or {}).get("count", 1))
    return cpus is not None and workers <= cpus


def regime_ratios(updates: pd.DataFrame | None, windows: int = WINDOWS) -> dict[int, float]:
    """Per run: its slowest time window's median cycle over its fastest's.

    A cycle is the time from one attempt's start to the same worker's next (``phases.cycle_table``'s
    ``cycle``), placed in the window where it starts; the run's span after ``WARMUP`` is cut into ``windows`` equal
    parts, and the
    windows with at least ``MIN_PER_WINDOW`` cycles count. 1.0 is a steady run; a run with fewer than two
    such windows, or without start times, has no entry."""
    out: dict[int, float] = {}
    if updates is None or len(updates) == 0 or "t_start" not in updates.columns:
        return out
    table = phases.cycle_table(updates, warmup=0.0)
    table = table[np.isfinite(table["cycle"].to_numpy())]
    for run, df in table.groupby("run"):
        start, cycle = df["start"].to_numpy(), df["cycle"].to_numpy()
        if len(cycle) < 2 * MIN_PER_WINDOW:
            continue
        keep = start >= start.min() + WARMUP * (start.max() - start.min())
        start, cycle = start[keep], cycle[keep]
        edges = np.linspace(start.min(), start.max(), windows + 1)
        where = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, windows - 1)
        medians = [float(np.median(cycle[where == k])) for k in range(windows)
                   if np.count_nonzero(where == k) >= MIN_PER_WINDOW]
        if len(medians) >= 2 and min(medians) > 0:
            out[int(run)] = max(medians) / min(medians)
    return out
