"""Today's simulator against the corpus: every cell of a machine re-simulated on the machine's own profile.

A cell is simulated with the scenario as it was measured (same seeds, as many runs), the machine set to the
calibrated preset ``this`` on the entry's profile, the mechanisms at today's defaults plus the caller's
overrides (an ablation), and judged by the four goals of :data:`simasgd.fidelity.GOALS` over the versions
both sides made. The machine-exact ceiling of a cell is the share of its measured runs that, each taken as
the prediction of the others, meet every goal (:func:`simasgd.fidelity.self_prediction_of`); summed over the
cells it is the score a simulator that ran exactly like the machine would reach.

With ``refresh``, a cell whose gradient was re-timed right before its measured runs (``Cell.drift``) and had
drifted beyond ``simasgd.drift.THRESHOLD`` is simulated as ``simasgd compare --refresh`` predicts it: on a
copy of the profile whose gradient samples are rescaled by the measured ratio (``drift.refreshed_profile``).
By default every cell runs on the calibrated samples, as ``compare`` does.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simasgd import fidelity
from simasgd.corpus.store import Cell, Entry

# What a measured scenario's [sim] table keeps when it is re-simulated: the fields that say what is run (the
# numerics, how a read is chunked, whether the lock-based read takes the lock); every mechanism is today's.
SCENARIO_SIM_KEYS = ("numerics", "read_chunks", "read_lock", "startup_stagger_s", "gradient_cv")


@dataclass
class CellScore:
    cell: str
    values: dict[str, float] = field(default_factory=dict)
    ceiling: float | None = None
    error: str | None = None
    refreshed: float | None = None  # the gradient's re-timed ratio the prediction ran at (None: as calibrated)

    @property
    def verdicts(self) -> dict[str, bool | None]:
        return {k: (abs(v) <= g if math.isfinite(v) else None)
                for k, g in fidelity.GOALS.items() if (v := self.values.get(k, math.nan)) is not None}

    @property
    def met(self) -> bool:
        """Every goal that can be judged is met, and at least one can (ε never reached judges nothing)."""
        v = self.verdicts.values()
        return self.error is None and not any(x is False for x in v) and any(x is True for x in v)


@dataclass
class MachineScore:
    machine: str
    cells: list[CellScore]
    seconds: float = 0.0

    @property
    def met(self) -> int:
        return sum(c.met for c in self.cells)

    @property
    def ceiling(self) -> float:
        return float(sum(c.ceiling or 0.0 for c in self.cells))

    @property
    def ratio(self) -> float:
        return self.met / self.ceiling if self.ceiling > 0 else math.nan

    @property
    def refreshed(self) -> int:
        """Cells simulated at their gradient re-timed before the runs (:func:`drift_ratio`)."""
        return sum(c.refreshed is not None for c in self.cells)

    def goal_counts(self) -> dict[str, int]:
        return {k: sum(c.verdicts.get(k) is True for c in self.cells) for k in fidelity.GOALS}

    def to_json(self) -> dict[str, Any]:
        return {"machine": self.machine, "met": self.met, "cells": len(self.cells), "ceiling": self.ceiling,
                "ratio": None if math.isnan(self.ratio) else self.ratio, "goals": self.goal_counts(),
                "seconds": self.seconds, "refreshed": self.refreshed,
                "per_cell": [{"cell": c.cell, "met": c.met, "ceiling": c.ceiling, "error": c.error,
                              "refreshed": c.refreshed,
                              "values": {k: (v if math.isfinite(v) else None) for k, v in c.values.items()}}
                             for c in self.cells]}


def judge(cell: Cell, sim: Any) -> CellScore:
    """``sim`` (a RunResult of the cell's scenario) against the cell's measured runs."""
    from simasgd import analysis

    last = [int(g.max()) for _, g in analysis.applied(sim).groupby("run")["version"] if len(g)] + cell.last_versions
    cut = None if not last or min(last) == max(last) else min(last)
    if cut is not None:
        sim = analysis.up_to_version(sim, cut)
    hs, ss = fidelity.run_stats(sim)
    hm, sm = cell.stats(cut)
    values = fidelity.point_metrics(hs, ss, hm, sm)
    return CellScore(cell.name, {k: values[k] for k in fidelity.GOALS},
                     fidelity.self_prediction_of(hm, sm, len(sim.runs)))


def scenario_of(cell: Cell, overrides: dict[str, Any], seed_offset: int = 0) -> Any:
    """The cell's scenario as today's simulator runs it on the entry's profile, ``overrides`` applied to [sim]
    (``seed_offset`` added to the seed of its timing draws: another draw of the machine's timing, with the
    measured runs' data, θ₀ and minibatches, against the same measured runs)."""
    from simasgd import loader

    doc = dict(cell.scenario)
    kept = {k: v for k, v in (doc.get("sim") or {}).items() if k in SCENARIO_SIM_KEYS}
    timing = {"timing_seed": int(doc.get("seed", 0)) + seed_offset} if seed_offset else {}
    doc["sim"] = kept | timing | overrides
    doc["machine"] = dict(doc.get("machine") or {}) | {"preset": "this"}
    doc["repeats"] = len(cell.runs)
    return loader.from_dict(doc, base_dir=Path.cwd())


def simulate_cell(cell: Cell, overrides: dict[str, Any], seed_offset: int = 0,
                  refreshed: float | None = None) -> CellScore:
    """Simulate one cell on ``SIMASGD_PROFILE``'s profile and judge it; a failure is the cell's error. With
    ``refreshed``, on a copy whose gradient samples are × that ratio (``drift.write_refreshed``, as compare)."""
    from simasgd import backends, drift, machine

    try:
        sc = scenario_of(cell, overrides, seed_offset)
        with tempfile.TemporaryDirectory() as tmp:
            fresh = None if refreshed is None else drift.write_refreshed(machine.profile_path(), sc, refreshed,
                                                                          Path(tmp))
            with drift.using_profile(fresh):
                sim = backends.run(sc, "sim", repeats=len(cell.runs), out=Path(tmp) / "sim")
        return dataclasses.replace(judge(cell, sim), refreshed=refreshed)
    except Exception as e:  # one cell's failure is its row, the score goes on
        return CellScore(cell.name, error=f"{type(e).__name__}: {e}", refreshed=refreshed)


def drift_ratio(cell: Cell) -> float | None:
    """The ratio to rescale the cell's gradient samples by: its gradient re-timed right before the runs over
    the calibrated one, where that drifted beyond ``drift.THRESHOLD`` (as ``compare`` refreshes); else None."""
    from simasgd.drift import Drift

    if not cell.drift:
        return None
    d = Drift.from_json(cell.drift)
    return d.ratio if d.drifted else None


Task = tuple[Cell, dict[str, Any], int, "float | None"]


def _init(profile_path: str) -> None:
    os.environ["SIMASGD_PROFILE"] = profile_path


def _task(args: Task) -> CellScore:
    return simulate_cell(*args)


def score(entry: Entry, overrides: dict[str, Any] | None = None, jobs: int = 1,
          progress: Callable[[CellScore], None] | None = None, seed_offset: int = 0,
          refresh: bool = False) -> MachineScore:
    """Every cell of ``entry`` re-simulated with ``overrides`` on [sim], in ``jobs`` processes (``seed_offset``:
    :func:`scenario_of`; ``refresh``: a drifted cell on the profile refreshed to its re-timed gradient)."""
    from simasgd.profile import to_toml

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.toml"
        path.write_text(to_toml(entry.profile))
        tasks: list[Task] = [(c, overrides or {}, seed_offset, drift_ratio(c) if refresh else None)
                             for c in entry.cells]
        scores = list(_each(tasks, jobs, str(path), progress))
    order = {c.name: i for i, c in enumerate(entry.cells)}
    scores.sort(key=lambda s: order[s.cell])
    return MachineScore(entry.name, scores, time.perf_counter() - start)


def _each(tasks: list[Task], jobs: int, profile: str,
          progress: Callable[[CellScore], None] | None) -> Iterator[CellScore]:
    if jobs <= 1:
        saved = os.environ.get("SIMASGD_PROFILE")
        _init(profile)
        try:
            for t in tasks:
                s = _task(t)
                yield _report(s, progress)
        finally:
            if saved is None:
                os.environ.pop("SIMASGD_PROFILE", None)
            else:
                os.environ["SIMASGD_PROFILE"] = saved
        return
    import multiprocessing as mp

    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_init,
                             initargs=(profile,)) as pool:
        for s in pool.map(_task, tasks):
            yield _report(s, progress)


def _report(s: CellScore, progress: Callable[[CellScore], None] | None) -> CellScore:
    if progress is not None:
        progress(s)
    return s


def ceiling_only(entry: Entry) -> float:
    """The machine-exact ceiling over every version the measured runs made (no prediction needed)."""
    total = 0.0
    for cell in entry.cells:
        h, s = cell.stats(None)
        share = fidelity.self_prediction_of(h, s, len(cell.runs))
        total += share or 0.0
    return total


def table(scores: list[MachineScore], labels: dict[str, str] | None = None) -> list[list[str]]:
    """Rows of the per-machine table: machine, cells met / cells, ceiling, met / ceiling, per goal counts."""
    rows = []
    for s in scores:
        g = s.goal_counts()
        rows.append([(labels or {}).get(s.machine, s.machine), f"{s.met}/{len(s.cells)}", f"{s.ceiling:.1f}",
                     "n/a" if math.isnan(s.ratio) else f"{s.ratio:.2f}",
                     *(str(g[k]) for k in fidelity.GOALS), str(s.refreshed), f"{s.seconds:.0f}"])
    return rows


TABLE_HEAD = ("machine", "cells met", "ceiling", "met / ceiling", "τ̄ ±5%", "KS ≤ 0.1", "upd/s ±10%",
              "upd→ε ±15%", "refreshed", "seconds")
