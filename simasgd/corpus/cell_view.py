"""One corpus cell beside today's simulation of it: where a prediction misses, run by run and phase by phase.

``corpus score`` says which cells miss; this says why one does. The cell's scenario is simulated on its machine's
profile as :func:`simasgd.corpus.score.simulate_cell` simulates it, then shown against the measured runs: each
side's runs (updates/s, τ̄, updates and time to ε over the versions both made), the four goals as the score
judges them with the cell's ceiling, and where a worker's cycle goes on each side — the measured phase statistics
the corpus keeps (:mod:`simasgd.evaluation.phases`: read, gradient, update, between, cycle) beside the same
statistics of the simulated runs, with the phase whose mean differs most: since updates/s is one over the
cycle, that phase carries most of an updates/s miss. Where a side's runs dropped updates (an algorithm that gives
an attempt up: Leashed-SGD at a finite persistence, backup workers), the share of each run's attempts dropped
stands beside them, since updates/s counts only the applied ones.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simasgd.corpus.score import CellScore, band_runs, common_cut, judge, scenario_of
from simasgd.corpus.store import Cell, CorpusError, Entry
from simasgd.evaluation import fidelity, phases, plots

STATS = ("mean", "median", "p90", "p99")  # the phase statistics shown, as the corpus keeps them (seconds)
FIGURES = ("staleness", "cycle")  # what :func:`figures` draws, by name


class CellNotFound(CorpusError):
    """The entry has no cell of that name."""


@dataclass(frozen=True)
class PhaseRow:
    """One phase of a cycle: its statistics (seconds) on each side; NaN where a side has none."""

    phase: str
    measured: Mapping[str, float]
    simulated: Mapping[str, float]

    @property
    def mean_delta_s(self) -> float:
        """Simulated mean − measured mean."""
        return self.simulated["mean"] - self.measured["mean"]

    @property
    def mean_rel_err(self) -> float:
        m = self.measured["mean"]
        return self.mean_delta_s / m if m > 0 else (0.0 if self.mean_delta_s == 0 else math.nan)


@dataclass(frozen=True)
class CellView:
    """A cell and its simulation: the score, both sides' runs and their phases."""

    machine: str
    cell: str
    scenario: Mapping[str, Any]
    score: CellScore
    runs: Mapping[str, Mapping[str, list[float]]]  # "measured" / "sim" → metric → one value per run
    phases: list[PhaseRow]
    staleness: Mapping[str, np.ndarray]  # "measured" / "simulated" → updates at τ = k, all runs, as judged
    dropped: Mapping[str, list[float]]  # "measured" / "sim" → each whole run's dropped share of its attempts

    def widest(self) -> PhaseRow | None:
        """The phase of a cycle (not the cycle) whose simulated mean is furthest from the measured one."""
        rows = [r for r in self.phases if r.phase in phases.PHASES and math.isfinite(r.mean_delta_s)]
        return max(rows, key=lambda r: abs(r.mean_delta_s)) if rows else None

    def cycle_delta_s(self) -> float:
        """Simulated mean cycle − measured mean cycle (NaN without a cycle on both sides)."""
        row = next((r for r in self.phases if r.phase == "cycle"), None)
        return math.nan if row is None else row.mean_delta_s

    def to_json(self) -> dict[str, Any]:
        def num(v: float) -> float | None:
            return v if math.isfinite(v) else None

        widest = self.widest()
        return {"machine": self.machine, "cell": self.cell, "met": self.score.met, "error": self.score.error,
                "ceiling": self.score.bound, "replica": self.score.ceiling,
                "goals": {k: num(v) for k, v in self.score.values.items()},
                "runs": {side: {m: [num(v) for v in vs] for m, vs in d.items()} for side, d in self.runs.items()},
                "phases": [{"phase": r.phase, "measured": {k: num(v) for k, v in r.measured.items()},
                            "simulated": {k: num(v) for k, v in r.simulated.items()}} for r in self.phases],
                "staleness": {side: [int(x) for x in c] for side, c in self.staleness.items()},
                "dropped": {side: [num(v) for v in vs] for side, vs in self.dropped.items()},
                "widest_phase": None if widest is None else widest.phase,
                "cycle_delta_s": num(self.cycle_delta_s())}


def find(entry: Entry, name: str) -> Cell:
    """The entry's cell ``name``; :class:`CellNotFound` naming the cells it has."""
    cell = next((c for c in entry.cells if c.name == name), None)
    if cell is None:
        raise CellNotFound(f"{entry.name} has no cell {name!r}; its cells: {', '.join(c.name for c in entry.cells)}")
    return cell


def view(entry: Entry, cell: Cell, overrides: Mapping[str, Any] | None = None, seed_offset: int = 0,
         sim_runs: int | None = None) -> CellView:
    """``cell`` of ``entry`` (:func:`find`) simulated on the entry's profile (``overrides`` on [sim], ``seed_offset``
    and ``sim_runs`` as :func:`simasgd.corpus.score.scenario_of` takes them) and set beside its measured runs."""
    from simasgd.evaluation import drift
    from simasgd.machines import profile
    from simasgd.runs import backends

    typed = profile.typed(entry.profile, entry.name)
    sc = scenario_of(cell, dict(overrides or {}), seed_offset, sim_runs)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.toml"
        path.write_text(profile.to_toml(typed))
        with drift.using_profile(path):
            sim = backends.run(sc, "sim", repeats=sc.repeats, out=Path(tmp) / "sim")
    simulated = phases.phase_stats(phases.phase_frame(sim.updates)) if phases.has_phases(sim) else None
    return CellView(entry.name, cell.name, cell.scenario, judge(cell, sim), band_runs(cell, sim),
                    phase_rows(cell.phases, [] if simulated is None else simulated.to_dict("records")),
                    staleness_counts(cell, sim),
                    {"measured": dropped_shares(cell.runs), "sim": dropped_shares(sim.runs)})


def dropped_shares(runs: Sequence[Any]) -> list[float]:
    """Each run's attempts dropped (attempts − applied updates) over its attempts; NaN where the run's summary does
    not count its attempts (a result written before it did)."""
    return [(r.attempts - r.updates) / r.attempts if r.attempts > 0 else math.nan for r in runs]


def staleness_counts(cell: Cell, sim: Any) -> dict[str, np.ndarray]:
    """Both sides' staleness histograms, all runs pooled, over the versions both made (as the goals judge them)."""
    from simasgd.evaluation import analysis

    cut = common_cut(cell, sim)
    hs, _ = fidelity.run_stats(sim if cut is None else analysis.up_to_version(sim, cut))
    hm, _ = cell.stats(cut)
    return {"measured": np.asarray(hm, dtype=float).sum(axis=0), "simulated": np.asarray(hs, dtype=float).sum(axis=0)}


def figures(v: CellView) -> dict[str, Any]:
    """The view drawn: ``staleness`` (both sides' distributions overlaid) and, where both sides have phases,
    ``cycle`` (each side's mean cycle cut into its phases): :data:`FIGURES`."""
    out: dict[str, Any] = {"staleness": plots.staleness_counts_histogram(dict(v.staleness))}
    out["staleness"].axes[0].set_title(f"Staleness: {v.machine}, {v.cell}")
    means = {side: {r.phase: getattr(r, side)["mean"] for r in v.phases} for side in ("measured", "simulated")}
    if all(any(math.isfinite(x) for x in m.values()) for m in means.values()):
        out["cycle"] = plots.cycle_bars(means, f"Where a cycle's time goes: {v.machine}, {v.cell}")
    return out


def phase_rows(measured: Sequence[Mapping[str, Any]], simulated: Sequence[Mapping[str, Any]]) -> list[PhaseRow]:
    """Both sides' statistics per phase, in cycle order; a phase one side lacks has NaN there."""
    def by_phase(stats: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
        return {str(s["phase"]): {k: float(s[k]) for k in STATS} for s in stats}

    m, s = by_phase(measured), by_phase(simulated)
    none = dict.fromkeys(STATS, math.nan)
    return [PhaseRow(p, m.get(p, none), s.get(p, none)) for p in phases.ALL_PHASES if p in m or p in s]


GOAL_LABELS = {"mean_staleness_rel_err": "τ̄", "ks": "KS", "updates_per_s_rel_err": "updates/s",
               "updates_to_eps_rel_err": "updates to ε"}


def goal_lines(v: CellView) -> list[str]:
    """One line a goal: the error, the goal, met or not (· where not judged: ε never reached), as the fidelity
    report writes them (:func:`simasgd.evaluation.plots.fmt_value`, ``fmt_goal``, ``verdict_mark``)."""
    verdicts, values = v.score.verdicts, v.score.values
    return [f"{label} {plots.fmt_value(k, values.get(k, math.nan))} (|·| {plots.fmt_goal(k, fidelity.GOALS[k])}) "
            f"{plots.verdict_mark(verdicts.get(k))}" for k, label in GOAL_LABELS.items()]
