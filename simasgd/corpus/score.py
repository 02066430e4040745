"""Today's simulator against the corpus: every cell of a machine re-simulated on the machine's own profile.

A cell is simulated with the scenario as it was measured (same seeds, as many runs), the machine set to the
calibrated preset ``this`` on the entry's profile, the mechanisms at today's defaults plus the caller's
overrides (an ablation), and judged by the four goals of :data:`simasgd.evaluation.fidelity.GOALS` over the versions
both sides made. The machine-exact ceiling of a cell is the share of its measured runs that, each taken as
the prediction of the others, meet every goal (:func:`simasgd.evaluation.fidelity.self_prediction_of`); summed over the
cells it is the score a simulator that ran exactly like the machine would reach.

With ``refresh``, a cell whose gradient was re-timed right before its measured runs (``Cell.drift``) and had
drifted beyond ``simasgd.evaluation.drift.THRESHOLD`` is simulated as ``simasgd compare --refresh`` predicts it: on a
copy of the profile whose gradient samples are rescaled by the measured ratio (``drift.refreshed_profile``).
By default every cell runs on the calibrated samples, as ``compare`` does.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simasgd.corpus import ranking
from simasgd.corpus.store import Cell, Entry
from simasgd.evaluation import fidelity, placement, prediction_band
from simasgd.evaluation.placement import Placement
from simasgd.machines import profile

# What a measured scenario's [sim] table keeps when it is re-simulated: the fields that say what is run (the
# numerics, how a read is chunked, whether the lock-based read takes the lock); every mechanism is today's.
SCENARIO_SIM_KEYS = ("numerics", "read_chunks", "read_lock", "startup_stagger_s", "gradient_cv")


@dataclass
class CellScore:
    cell: str
    values: dict[str, float] = field(default_factory=dict)
    ceiling: float | None = None  # the replica share (fidelity.self_prediction_of): not an upper bound
    error: str | None = None
    refreshed: float | None = None  # the gradient's re-timed ratio the prediction ran at (None: as calibrated)
    bound: float | None = None  # the ceiling: no predictor meets the cell more often in expectation (fidelity.bound_of)
    speeds: ranking.Speeds | None = None  # what the ranking of its group needs of the cell
    # per side ("sim", "measured"; "other": the simulator's runs in the host's far placement, cells of two or
    # more workers), per metric, one value per run over the versions both made (band_runs)
    runs: dict[str, dict[str, list[float]]] | None = None
    algorithm: str | None = None  # the cell's algorithm (its scenario's algorithm.name): whose model error it takes
    shared: bool | None = None  # its threads outnumber the simulated machine's CPUs: the regime of that error

    def band_checks(self, host: prediction_band.HostNoise | None, where: Placement | None = None,
                    model: prediction_band.ModelError | None = None) -> dict[str, prediction_band.BandCheck]:
        """The simulated runs' 90% bands (with the machine's ``host`` noise; with ``where``, mixed with the runs
        in its far placement at its share; with ``model``'s error) against the measured runs."""
        case = self.case(host, where)
        if case is None:
            return {}
        return prediction_band.check(case.predicted, case.measured, case.host, other=case.other, share=case.share,
                                     model=model, algorithm=case.algorithm, shared=case.shared)

    def case(self, host: prediction_band.HostNoise | None,
             where: Placement | None = None) -> prediction_band.Case | None:
        """The cell's runs as its bands are judged on them (None: the cell was not simulated)."""
        if self.runs is None:
            return None
        other = self.runs.get("other") if where is not None else None
        return prediction_band.Case(self.runs["sim"], self.runs["measured"], host, other,
                                    where.share if where is not None and other is not None else 0.0, self.algorithm,
                                    self.shared)

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
    host: prediction_band.HostNoise | None = None  # the machine's host noise, its bands' (host_noise_of_entry)
    placement: Placement | None = None  # the host's far placement, mixed into the bands (placement.of_entry)
    # the model's error in the bands, fitted on the other machines' cells (held_out_model_error); None: not in them
    model: prediction_band.ModelError | None = None

    def band_checks(self) -> list[prediction_band.BandCheck]:
        return [b for c in self.cells for b in c.band_checks(self.host, self.placement, self.model).values()]

    def cases(self) -> list[prediction_band.Case]:
        """Every simulated cell's runs as its bands are judged on them."""
        return [k for c in self.cells if (k := c.case(self.host, self.placement)) is not None]

    @property
    def band_coverage(self) -> tuple[int, int]:
        """(measured runs inside the simulated 90% band, measured runs), over every cell and metric."""
        return prediction_band.coverage(self.band_checks())

    @property
    def band_sharpness(self) -> float:
        """The median over cells and metrics of the band's width over the measured runs' own 90% spread."""
        return prediction_band.sharpness(self.band_checks())

    def bands_json(self) -> dict[str, Any]:
        inside, total = self.band_coverage
        per_metric = {m: {"inside": (cov := prediction_band.coverage(
            cs := [b for c in self.cells
                   if (b := c.band_checks(self.host, self.placement, self.model).get(m)) is not None]))[0],
            "runs": cov[1], "sharpness": _finite_or_none(prediction_band.sharpness(cs))}
            for m in prediction_band.METRICS}
        return {"level": prediction_band.LEVEL, "host_noise": None if self.host is None else self.host.to_json(),
                "placement": None if self.placement is None else self.placement.to_json(),
                "model_error": None if self.model is None else self.model.to_json(),
                "inside": inside, "runs": total, "coverage": inside / total if total else None,
                "sharpness": _finite_or_none(self.band_sharpness), "per_metric": per_metric,
                "per_cell": {c.cell: {m: b.to_json()
                                      for m, b in c.band_checks(self.host, self.placement, self.model).items()}
                             for c in self.cells if c.runs is not None}}

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
    def bound(self) -> float:
        """The ceiling: Σ of the cells' :func:`simasgd.evaluation.fidelity.bound_of`, more than any predictor meets in
        expectation."""
        return float(sum(c.bound or 0.0 for c in self.cells))

    @property
    def bound_sd(self) -> float:
        """The spread of the count met by a predictor at the ceiling in every cell (``fidelity.count_spread``)."""
        return fidelity.count_spread([c.bound or 0.0 for c in self.cells])

    @property
    def replica_sd(self) -> float:
        """The spread of the count met by a replica of the machine (the cells' replica shares)."""
        return fidelity.count_spread([c.ceiling or 0.0 for c in self.cells])

    @property
    def met_over_bound(self) -> float:
        return self.met / self.bound if self.bound > 0 else math.nan

    def ranking(self) -> list[ranking.GroupRanking]:
        """The machine's (threads, batch) groups, the simulator's order of the algorithms against the
        machine's (:mod:`simasgd.corpus.ranking`); cells that failed are left out of their group."""
        return ranking.rank(self.machine, [c.speeds for c in self.cells if c.speeds is not None])

    def ranking_json(self) -> dict[str, Any]:
        groups = self.ranking()
        return {"groups": [g.to_json() for g in groups],
                "summary": {m: ranking.summary(groups, m).to_json() for m in ranking.METRICS}}

    @property
    def refreshed(self) -> int:
        """Cells simulated at their gradient re-timed before the runs (:func:`drift_ratio`)."""
        return sum(c.refreshed is not None for c in self.cells)

    def goal_counts(self) -> dict[str, int]:
        return {k: sum(c.verdicts.get(k) is True for c in self.cells) for k in fidelity.GOALS}

    def to_json(self) -> dict[str, Any]:
        return {"machine": self.machine, "met": self.met, "cells": len(self.cells), "ceiling": self.ceiling,
                "ratio": None if math.isnan(self.ratio) else self.ratio, "goals": self.goal_counts(),
                "seconds": self.seconds, "refreshed": self.refreshed, "bands": self.bands_json(),
                "bound": self.bound, "bound_sd": self.bound_sd, "replica_sd": self.replica_sd,
                "met_over_bound": None if math.isnan(self.met_over_bound) else self.met_over_bound,
                "ranking": self.ranking_json(),
                "per_cell": [{"cell": c.cell, "met": c.met, "ceiling": c.ceiling, "error": c.error,
                              "refreshed": c.refreshed, "bound": c.bound,
                              "speeds": None if c.speeds is None else c.speeds.to_json(),
                              "values": {k: (v if math.isfinite(v) else None) for k, v in c.values.items()}}
                             for c in self.cells]}


def held_out_model_error(scores: list[MachineScore],
                         written: tuple[prediction_band.ModelError, Sequence[str]] | None = None) -> None:
    """Each machine's bands take the model error fitted on every other machine's cells
    (:func:`simasgd.evaluation.prediction_band.fit_model_error`): a band never learns from the runs it is judged
    on. A machine scored alone takes ``written`` (the corpus's fit and the machines it was fitted on,
    :func:`simasgd.evaluation.prediction_band.corpus_fit`) where that fit did not see it, as a machine just added
    to the corpus; otherwise nothing is set."""
    if len(scores) < 2:
        if written is not None:
            fit, fitted_on = written
            for s in scores:
                if s.machine not in fitted_on:
                    s.model = fit
        return
    for s in scores:
        others = [o for o in scores if o is not s]
        cases = [k for o in others for k in o.cases()]
        s.model = prediction_band.fit_model_error(cases, "fitted on " + ", ".join(o.machine for o in others))


def judge(cell: Cell, sim: Any) -> CellScore:
    """``sim`` (a RunResult of the cell's scenario) against the cell's measured runs."""
    from simasgd.evaluation import analysis

    cut = common_cut(cell, sim)
    if cut is not None:
        sim = analysis.up_to_version(sim, cut)
    hs, ss = fidelity.run_stats(sim)
    hm, sm = cell.stats(cut)
    values = fidelity.point_metrics(hs, ss, hm, sm)
    return CellScore(cell.name, {k: values[k] for k in fidelity.GOALS},
                     fidelity.self_prediction_of(hm, sm, len(sim.runs)),
                     bound=fidelity.bound_of(hm, sm), speeds=ranking.speeds_of(cell.scenario, ss, sm),
                     algorithm=prediction_band.algorithm_name(cell.scenario), shared=prediction_band.shared_of(sim))


def common_cut(cell: Cell, sim: Any) -> int | None:
    """The last version every simulated and measured run made, where they did not all stop at the same one."""
    from simasgd.evaluation import analysis

    last = [int(g.max()) for _, g in analysis.applied(sim).groupby("run")["version"] if len(g)] + cell.last_versions
    return None if not last or min(last) == max(last) else min(last)


def band_runs(cell: Cell, sim: Any) -> dict[str, dict[str, list[float]]]:
    """Both sides' per-run metrics over the versions both made (as :func:`judge` compares them), as
    :mod:`simasgd.evaluation.prediction_band` takes them: ``{"sim": ..., "measured": ...}``."""
    from simasgd.evaluation import analysis, prediction_band

    cut = common_cut(cell, sim)
    if cut is not None:
        sim = analysis.up_to_version(sim, cut)
    return {"sim": prediction_band.per_run_of_stats(*fidelity.run_stats(sim)),
            "measured": prediction_band.per_run_of_stats(*cell.stats(cut))}


def scenario_of(cell: Cell, overrides: dict[str, Any], seed_offset: int = 0, runs: int | None = None) -> Any:
    """The cell's scenario as today's simulator runs it on the entry's profile, ``overrides`` applied to [sim]
    (``seed_offset`` added to the seed of its timing draws: another draw of the machine's timing, with the
    measured runs' data, θ₀ and minibatches, against the same measured runs), as many runs as were measured
    or ``runs`` (the first of them the same either way)."""
    from simasgd.spec import loader

    doc = dict(cell.scenario)
    kept = {k: v for k, v in (doc.get("sim") or {}).items() if k in SCENARIO_SIM_KEYS}
    timing = {"timing_seed": int(doc.get("seed", 0)) + seed_offset} if seed_offset else {}
    doc["sim"] = kept | timing | overrides
    doc["machine"] = dict(doc.get("machine") or {}) | {"preset": "this"}
    doc["repeats"] = runs or len(cell.runs)
    return loader.from_dict(doc, base_dir=Path.cwd())


def simulate_cell(cell: Cell, overrides: dict[str, Any], seed_offset: int = 0,
                  refreshed: float | None = None, other: str | None = None,
                  sim_runs: int | None = None) -> CellScore:
    """Simulate one cell on ``SIMASGD_PROFILE``'s profile and judge it; a failure is the cell's error. With
    ``refreshed``, on a copy whose gradient samples are × that ratio (``drift.write_refreshed``, as compare).
    With ``other`` (the profile in the host's far placement, :func:`placement.moved`), a cell of two or more
    workers is simulated there too, for its bands (``runs["other"]``)."""
    from simasgd.evaluation import drift
    from simasgd.machines import machine
    from simasgd.runs import backends

    try:
        sc = scenario_of(cell, overrides, seed_offset, sim_runs)
        with tempfile.TemporaryDirectory() as tmp:
            fresh = None if refreshed is None else drift.write_refreshed(machine.profile_path(), sc, refreshed,
                                                                          Path(tmp))
            with drift.using_profile(fresh):
                sim = backends.run(sc, "sim", repeats=sc.repeats, out=Path(tmp) / "sim")
            runs = band_runs(cell, sim)
            if other is not None and sc.workers.count >= 2:
                moved = Path(other) if refreshed is None else drift.write_refreshed(Path(other), sc, refreshed,
                                                                                    Path(tmp) / "other")
                with drift.using_profile(moved):
                    far = backends.run(sc, "sim", repeats=sc.repeats, out=Path(tmp) / "sim-other")
                runs["other"] = band_runs(cell, far)["sim"]
        return dataclasses.replace(judge(cell, sim), refreshed=refreshed, runs=runs)
    except Exception as e:  # one cell's failure is its row, the score goes on
        return CellScore(cell.name, error=f"{type(e).__name__}: {e}", refreshed=refreshed,
                         algorithm=prediction_band.algorithm_name(cell.scenario))


def drift_ratio(cell: Cell) -> float | None:
    """The ratio to rescale the cell's gradient samples by: its gradient re-timed right before the runs over
    the calibrated one, where that drifted beyond ``drift.THRESHOLD`` (as ``compare`` refreshes); else None."""
    from simasgd.evaluation.drift import Drift

    if not cell.drift:
        return None
    d = Drift.from_json(cell.drift)
    return d.ratio if d.drifted else None


Task = tuple[Cell, dict[str, Any], int, "float | None", "str | None", "int | None"]


def _init(profile_path: str) -> None:
    os.environ["SIMASGD_PROFILE"] = profile_path


def _task(args: Task) -> CellScore:
    return simulate_cell(*args)


def score(entry: Entry, overrides: dict[str, Any] | None = None, jobs: int = 1,
          progress: Callable[[CellScore], None] | None = None, seed_offset: int = 0,
          refresh: bool = False, placements: bool = True, sim_runs: int | None = None) -> MachineScore:
    """Every cell of ``entry`` re-simulated with ``overrides`` on [sim], in ``jobs`` processes (``seed_offset``:
    :func:`scenario_of`; ``refresh``: a drifted cell on the profile refreshed to its re-timed gradient;
    ``placements``: a cell of two or more workers simulated in the host's far placement too, where its probes
    saw one, for the bands — the goals judge the calibrated placement alone; ``sim_runs``: the simulator's runs
    of a cell, as many as were measured by default)."""
    from simasgd.machines.profile import to_toml

    start = time.perf_counter()
    typed = profile.typed(entry.profile, entry.name)
    where = placement.of_entry(typed, [c.drift for c in entry.cells]) if placements else None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.toml"
        path.write_text(to_toml(typed))
        other = None
        if where is not None and where.share > 0:
            other = Path(tmp) / "profile-far.toml"
            other.write_text(to_toml(placement.moved(typed, where.factor)))
        tasks: list[Task] = [(c, overrides or {}, seed_offset, drift_ratio(c) if refresh else None,
                              None if other is None else str(other), sim_runs) for c in entry.cells]
        scores = list(_each(tasks, jobs, str(path), progress))
    order = {c.name: i for i, c in enumerate(entry.cells)}
    scores.sort(key=lambda s: order[s.cell])
    host = prediction_band.host_noise_of_entry(typed, [c.drift for c in entry.cells], refresh)
    return MachineScore(entry.name, scores, time.perf_counter() - start, host=host, placement=where)


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


def bound_only(entry: Entry) -> float:
    """The ceiling (:func:`simasgd.evaluation.fidelity.bound_of`) over every version the measured runs made."""
    return float(sum(fidelity.bound_of(*cell.stats(None)) or 0.0 for cell in entry.cells))


def ceiling_only(entry: Entry) -> float:
    """The replica share over every version the measured runs made (no prediction needed)."""
    total = 0.0
    for cell in entry.cells:
        h, s = cell.stats(None)
        share = fidelity.self_prediction_of(h, s, len(cell.runs))
        total += share or 0.0
    return total


def table(scores: list[MachineScore], labels: dict[str, str] | None = None) -> list[list[str]]:
    """Rows of the per-machine table: machine, cells met / cells, the ceiling (an upper bound) ± its spread,
    met / ceiling, the replica share ± its spread, per goal counts."""
    rows = []
    for s in scores:
        g = s.goal_counts()
        rows.append([(labels or {}).get(s.machine, s.machine), f"{s.met}/{len(s.cells)}",
                     f"{s.bound:.1f} ± {s.bound_sd:.1f}",
                     "n/a" if math.isnan(s.met_over_bound) else f"{s.met_over_bound:.2f}",
                     f"{s.ceiling:.1f} ± {s.replica_sd:.1f}",
                     *(str(g[k]) for k in fidelity.GOALS), str(s.refreshed), f"{s.seconds:.0f}"])
    return rows


TABLE_HEAD = ("machine", "cells met", "ceiling ± sd", "met / ceiling", "replica ± sd", "τ̄ ±5%", "KS ≤ 0.1",
              "upd/s ±10%", "upd→ε ±15%", "refreshed", "seconds")


def band_table(scores: list[MachineScore]) -> list[list[str]]:
    """Rows of the per-machine band table: the host noise the bands used, coverage (measured runs inside the
    simulated 90% band, over every cell and metric) and sharpness (median band width over the measured runs'
    own 90% spread), then both per metric."""
    rows = []
    for s in scores:
        inside, total = s.band_coverage
        per = s.bands_json()["per_metric"]
        rows.append([s.machine, "none" if s.host is None else f"{s.host.sigma:.3f} ({s.host.samples} "
                     f"{'probes' if 'probe' in s.host.source else 'workloads'})",
                     "none" if s.model is None else " / ".join(f"{s.model.of(m):.3f}" for m in prediction_band.METRICS),
                     f"{inside}/{total} = {inside / total:.0%}" if total else "n/a", _fmt_ratio(s.band_sharpness),
                     *(f"{p['inside'] / p['runs']:.0%}, {_fmt_ratio(p['sharpness'])}" if p["runs"] else "n/a"
                       for p in (per[m] for m in prediction_band.METRICS))])
    return rows


BAND_HEAD = ("machine", "host σ (log)",
             "model σ (log): " + " / ".join(prediction_band.LABELS[m] for m in prediction_band.METRICS),
             "coverage", "sharpness",
             *(f"{prediction_band.LABELS[m]}: coverage, sharpness" for m in prediction_band.METRICS))


def _fmt_ratio(v: float | None) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.2f}"


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None
