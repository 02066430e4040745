"""``simasgd compare``: simulated against measured — run both (or load two folders), report fidelity."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer

if TYPE_CHECKING:
    from simasgd.evaluation.fidelity import Fidelity
    from simasgd.evaluation.phases import PhaseComparison
    from simasgd.runs.results import RunResult

from simasgd.commands import console, user_errors
from simasgd.commands.run import OverrideOpt


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)


def compare(scenario: Path | None = typer.Argument(None, help="Scenario file (TOML) to run on both backends."),
            backend: list[str] = typer.Option(["sim", "cpu"], "--backend", "-b", "--backends",
                                              metavar="A,B",
                                              help="The two backends, -b sim -b cpu or -b sim,cpu: the simulator "
                                                   "is the prediction, the other the reference."),
            out: Path | None = typer.Option(None, "--out", "-o", metavar="DIR",
                                              help="Folder (default: compare-NAME under results/)."),
            overrides: list[str] = OverrideOpt,
            repeats: int | None = typer.Option(None, "--repeats", "-n", min=1, metavar="N",
                                                help="Overrides `repeats`."),
            results: list[Path] | None = typer.Option(None, "--results", metavar="DIR",
                                                      help="Compare two existing results folders: "
                                                           "--results PREDICTED --results REFERENCE (or two paths)."),
            extra: list[Path] = typer.Argument(None, hidden=True),
            svg: bool = typer.Option(False, "--svg", help="Also write SVG next to each PNG (in OUT/figures)."),
            quick_calibration: bool = typer.Option(False, "--quick-calibration",
                                                   help="If this machine has no profile yet, calibrate briefly."),
            refresh: bool = typer.Option(False, "--refresh/--no-refresh",
                                         help="Right before the runs compare re-times the scenario's gradient (one "
                                              "thread, a fraction of a second) and the CPUs' placement against the "
                                              "profile, and says whether a miss is model error or a stale "
                                              "calibration (docs/model.md). With --refresh, where the gradient "
                                              "drifted more than 10%, the simulator runs at the re-timed speed (its "
                                              "gradient samples rescaled, in a copy of the profile in OUT). Off by "
                                              "default: why, in docs/model.md."),
            placements: bool = typer.Option(True, "--placements/--one-placement",
                                            help="The simulator's bands mix the host's far placement, as "
                                                 "`simasgd run`'s; --one-placement: the calibrated one alone."),
            ) -> None:
    """Fidelity of the simulator: KS, Wasserstein, staleness/throughput/ε errors with CIs, a report and figures;
    against this host, whether a miss is model error or a calibration gone stale since (--refresh)."""
    from simasgd.evaluation import fidelity, plots

    with user_errors():
        folders = _result_folders(scenario, results, extra)
        if folders:
            where = out or Path("results") / f"compare-{folders[0].name}-vs-{folders[1].name}"
            fid, res = fidelity.compare_folders(folders[0], folders[1], where)
        else:
            assert scenario is not None  # _result_folders refused a call with neither
            fid, res, where = _run(scenario, ",".join(backend), out, overrides, repeats, quick_calibration,
                                   refresh, placements)
        report = plots.write_report(where, fid, res, svg)
    print_fidelity(fid)
    print_bands(fid, res)
    print_drift(fid)
    _machines(res)
    _stability(res)
    console().print(f"fidelity: {where / 'fidelity.json'}\nreport:   {report}", markup=False)


def _machines(results: dict) -> None:
    """The machine each simulated side ran on (metadata["machine"]), one line each, and the model it ran
    (metadata["model"]: executor traits, mechanisms, profile)."""
    from simasgd.commands.inspect import model_lines
    from simasgd.machines.machine import describe

    for label, r in results.items():
        if "machine" in r.metadata:
            console().print(f"{label}: {describe(r.metadata['machine'])}", markup=False, soft_wrap=True)
        for line in model_lines(r):
            console().print(f"{label}: {line}", markup=False, soft_wrap=True)


def _stability(results: dict) -> None:
    """Repeats that disagree among themselves make any fidelity verdict shaky: say so."""
    from simasgd.evaluation.stability import stability_warnings

    con = console()
    for label, r in results.items():
        for w in stability_warnings(r):
            con.print(f"[yellow]warning ({label}):[/] {w}")
    from simasgd.commands.inspect import print_busy_host

    for label, r in results.items():
        print_busy_host(r, label)
    _host_away(results)


def _host_away(results: dict) -> None:
    """The reference's workers away (cycles past twice their median) more than the prediction's, or taking
    turns in one of its runs: the host took their CPUs more than calibration measured
    (simasgd.evaluation.phases.host_away, simasgd.evaluation.phases.took_turns)."""
    import os

    from simasgd.evaluation import phases
    from simasgd.runs.metadata import run_cpus

    if len(results) != 2:
        return
    (la, a), (lb, b) = results.items()
    workers = int((b.scenario.get("workers") or {}).get("count", 1))
    cpus = run_cpus(b.metadata) or len(os.sched_getaffinity(0))
    low = phases.took_turns(a.updates, b.updates, workers, cpus)
    if low is not None:
        console().print(f"warning ({lb}): in one of its runs the workers were inside a gradient at once {low:.0%} as "
                        f"much as in {la}'s: they took turns, with every worker on its CPU by the guest's account — "
                        "the host ran the vCPUs on fewer physical CPUs (simasgd.evaluation.phases.took_turns)",
                        markup=False, soft_wrap=True)
    gap = phases.host_away(a.updates, b.updates, workers, cpus)
    if gap is not None:
        console().print(f"warning ({lb}): its workers were away {phases.mean_absence(b.updates):.0%} of the time "
                        f"(cycles past twice their median), {la}'s {phases.mean_absence(a.updates):.0%}: the host took "
                        "their CPUs more than the simulated workers lost theirs, and each gap gives the other workers "
                        "a run of τ = 0 (simasgd.evaluation.phases.absence)", markup=False, soft_wrap=True)


def _result_folders(scenario: Path | None, results: list[Path] | None, extra: list[Path] | None) -> list[Path]:
    from simasgd.evaluation.fidelity import FidelityError

    if not results:
        if scenario is None:
            raise FidelityError("compare needs a SCENARIO file, or --results PREDICTED REFERENCE")
        return []
    # `--results A B` leaves B as a positional argument: gather both forms.
    folders = list(results) + ([scenario] if scenario is not None else []) + list(extra or [])
    if len(folders) != 2:
        raise FidelityError(f"--results: give exactly two results folders (got {len(folders)})")
    return folders


def _calibrate(workloads: list, quick: bool, seed: int, base_dir: str | None) -> dict:
    """The CLI's calibrator for a machine without a profile (simasgd itself imports nothing from executors)."""
    from executors.calibration.calibrate import calibrate as measure

    return measure(workloads, quick=quick, seed=seed, base_dir=base_dir)


def _probe(workload: Any, seed: int, base_dir: str | None, seconds: float) -> dict[str, Any]:
    """The CLI's drift probe (simasgd.evaluation.drift; simasgd itself imports nothing from executors)."""
    from executors.calibration.drift_probe import probe

    return probe(workload, seed, base_dir, seconds)


def print_bands(fid: Fidelity, results: dict[str, RunResult]) -> None:
    """The prediction's 90% band of one more run per metric, over the versions both sides made (as the errors
    above), and how many of the reference's runs fall inside it (simasgd.evaluation.prediction_band)."""
    from rich.table import Table

    from simasgd.evaluation import analysis, prediction_band
    from simasgd.evaluation.fidelity import run_stats

    p, r = fid.predicted, fid.reference
    if p.label not in results or r.label not in results:
        return
    a, b = results[p.label], results[r.label]
    simulated, host = prediction_band.inputs(a)  # its runs, and the host noise of the profile it ran on
    model = prediction_band.model_error_for(a, host) if simulated else None
    share, other = prediction_band.other_placement(a)  # its runs in the far placement, whole (not cut)
    cut = analysis.common_version(a, b)
    if cut is not None:
        a, b = analysis.up_to_version(a, cut), analysis.up_to_version(b, cut)
    ref = prediction_band.per_run_of_stats(*run_stats(b))
    checks = prediction_band.check(prediction_band.per_run_of_stats(*run_stats(a)), ref, host, other=other,
                                   share=share, model=model, algorithm=prediction_band.algorithm_of(a),
                                   shared=prediction_band.shared_of(a))
    if not checks:
        return
    table = Table(title=f"{p.label}'s {prediction_band.LEVEL:.0%} band of one more run against {r.label}'s runs")
    for head in ("metric", f"{p.label} band", f"{r.label} runs", "inside"):
        table.add_column(head, justify="left" if head == "metric" else "right")
    for m, c in checks.items():
        runs = ", ".join(f"{v:.4g}" for v in ref[m] if math.isfinite(v))
        table.add_row(prediction_band.LABELS[m], c.band.text(), runs, f"{c.inside}/{c.runs}")
    con = console()
    con.print(table)
    con.print(prediction_band.describe(p.runs, host, simulated, placement=prediction_band.far_placement(a),
                                       model=model, algorithm=prediction_band.algorithm_of(a),
                                       shared=prediction_band.shared_of(a)),
              markup=False, soft_wrap=True)


def print_drift(fid: Fidelity) -> None:
    """What the drift check re-measured before the runs, and whether the misses are the model's or a stale
    calibration's (simasgd.evaluation.drift.verdict), one line each."""
    from simasgd.evaluation import drift

    d = drift.recorded(fid)
    v = drift.verdict(fid, d)
    if d is None or v is None:
        return
    con = console()
    con.print(f"drift since calibration: {d.gradient_line()}; {d.placement_line()}", markup=False, soft_wrap=True)
    style = {"stale": "bold yellow", "model": "bold red", "current": "green"}.get(v.kind, "")
    con.print(v.line, style=style, markup=False, soft_wrap=True)


def _run(scenario: Path, backends: str, out: Path | None, overrides: list[str], repeats: int | None,
         quick_calibration: bool, refresh: bool = False,
         placements: bool = True) -> tuple[Fidelity, dict[str, RunResult], Path]:
    from simasgd.evaluation import fidelity
    from simasgd.runs import progress
    from simasgd.spec import loader

    sc = loader.load(scenario, overrides)
    names = [b.strip() for b in backends.split(",") if b.strip()]
    fidelity.roles(names)
    out = out or Path("results") / f"compare-{sc.name}"
    n = repeats or sc.repeats
    with progress.bar(f"{sc.name} on {' and '.join(names)}", 2 * n * sc.stop.max_updates) as advance:
        fid, res = fidelity.run_and_compare(sc, names, out, repeats=repeats, advance=advance,
                                            quick_calibration=quick_calibration, calibrate=_calibrate,
                                            refresh=refresh, probe=_probe, placements=placements)
    return fid, res, out


def print_fidelity(fid: Fidelity) -> None:
    from rich.table import Table

    from simasgd.evaluation.plots import (
        disagreements,
        fmt_value,
        summary_rows,
        undefined,
        unstable,
        why_undefined,
        window_line,
    )

    p, r = fid.predicted, fid.reference
    con = console()
    table = Table(title=f"{p.label} ({p.runs} runs) against {r.label} ({r.runs} runs): "
                        f"errors are {p.label} − {r.label}")
    columns: tuple[tuple[str, Literal["left", "right", "center"]], ...] = (
        ("metric", "left"), ("value", "right"), (f"{fid.level:.0%} CI", "right"), ("goal", "right"), ("", "center"))
    for c, j in columns:
        table.add_column(c, justify=j)
    for row in summary_rows(fid):
        style = {"✓": "green", "✗": "bold red"}.get(row["verdict"], "")
        table.add_row(row["metric"], row["value"], row["ci"], row["goal"], row["verdict"], style=style)
    con.print(table)
    if fid.per_worker:
        w = Table(title="per worker")
        for c in ("worker", "mean staleness rel err", "KS", "Wasserstein", "updates/s rel err"):
            w.add_column(c, justify="right")
        for worker, ms in fid.per_worker.items():
            w.add_row(str(worker), *[fmt_value(n, ms[n].value) for n in
                                ("mean_staleness_rel_err", "ks", "wasserstein", "updates_per_s_rel_err")])
        con.print(w)
    if fid.scenario_diff:
        con.print("scenarios differ only in: " + "; ".join(fid.scenario_diff), markup=False)
    if fid.info.get("up_to_version"):
        con.print(window_line(fid), markup=False, soft_wrap=True)
    bad = disagreements(fid)
    if bad:
        con.print("[bold red]where they disagree:[/]")
        for b in bad:
            con.print(f"  ✗ {b}", markup=False)
    else:
        met = [k for k, ok in fid.verdicts.items() if ok]
        con.print("they agree on every goal that could be checked: " + (", ".join(met) or "none could be"),
                  markup=False)
    for k in undefined(fid):
        con.print(f"  · {k}: not checked — {why_undefined(k)}", markup=False)
    for u in unstable(fid):
        con.print(f"  ⚠ unstable reference: {u}", markup=False, soft_wrap=True)
    if fid.phases is not None:
        print_phases(fid.phases)


def print_phases(pc: PhaseComparison) -> None:
    """Where a cycle's time goes on each side (µs), and the phase behind most of the cycle-time error."""
    from rich.table import Table

    con = console()
    if not pc.available:
        con.print(pc.unavailable_line(), markup=False, soft_wrap=True)
        return
    la, lb = pc.labels
    table = Table(title=f"where a cycle's time goes (µs; err = mean rel err of {la} against {lb})")
    rows = pc.rows()
    for c in rows[0]:
        table.add_column(c, justify="left" if c == "phase" else "right", no_wrap=c in ("phase", "err"),
                         min_width=8 if c == "phase" else None)
    for r in rows:
        table.add_row(*r.values(), style="bold" if r["phase"] == "cycle" else "")
    con.print(table)
    if pc.explanation is not None:
        con.print(pc.explanation.sentence(), markup=False, soft_wrap=True)
