"""``simasgd corpus``: the fidelity corpus — add a machine's measured runs, list the machines, score the simulator."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from simasgd.commands import console, output_file, output_folder, refuse, user_errors

if TYPE_CHECKING:
    from simasgd.corpus import cell_view
    from simasgd.corpus.score import CellScore, MachineScore

corpus_app = typer.Typer(no_args_is_help=True, help="The fidelity corpus: measured cells of every machine, "
                                                    "re-simulated with today's model (docs/corpus.md).")


def default_corpus() -> Path:
    """``SIMASGD_CORPUS``, else the corpus this checkout ships (``corpus/`` at its root), else ``./corpus``: the
    folder whose machines ``machine.preset`` names too (:func:`simasgd.machines.machine.corpus_folder`)."""
    from simasgd.machines.machine import corpus_folder

    return corpus_folder()


CorpusOpt = typer.Option(None, "--corpus", "-c", help="Corpus folder (default: $SIMASGD_CORPUS, else this "
                                                      "checkout's corpus/).")


def register(app: typer.Typer) -> None:
    app.add_typer(corpus_app, name="corpus")


@corpus_app.command("add")
def add(paths: list[Path] = typer.Argument(..., help="Results folders of measured runs, or folders holding them "
                                                    "(a fidelity_sweep.py --out folder)."),
        profile: Path = typer.Option(..., "--profile", "-p", help="The profile the runs were calibrated with."),
        machine: str = typer.Option(..., "--machine", "-m", help="The machine's name in the corpus, e.g. "
                                                                 "amd_epyc_2vcpu (a new name is a new entry)."),
        corpus: Path | None = CorpusOpt) -> None:
    """Add measured runs to the corpus (a cell of the same name is replaced; one profile per machine)."""
    from simasgd.corpus import store
    from simasgd.machines import profile as prof

    where = corpus or default_corpus()
    if not store.NAME.match(machine):  # before any path is made of it (a name past 255 bytes, a slash)
        refuse(f"--machine {machine!r}: use lower-case letters, digits, '_', '-', '.' (at most 64, e.g. "
               "amd_epyc_2vcpu)")
    output_folder(where, "--corpus")
    with user_errors():
        try:
            doc = prof.read(profile).to_doc()
        except prof.ProfileError as e:
            raise store.CorpusError(f"--profile: {e}") from None
        new = store.entry_from(store.measured_folders(paths), doc, machine)
        path = where / f"{machine}{store.SUFFIX}"
        entry = store.merged(store.load(path), new) if path.exists() else new
        store.save(entry, where)
    d = store.describe(entry)
    console().print(f"{path}: {d['cells']} cells, {d['runs']} runs, {path.stat().st_size / 1024:.0f} KiB; "
                    f"today's model against it: simasgd corpus score -m {machine}", markup=False, soft_wrap=True)


@corpus_app.command("list")
def list_machines(corpus: Path | None = CorpusOpt) -> None:
    """The corpus's machines: CPU, when calibrated, cells, the ceiling (an upper bound on any predictor's
    expected score) and the replica share (what a replica of the machine would meet)."""
    from rich.table import Table

    from simasgd.corpus import score, store

    where = corpus or default_corpus()
    with user_errors():
        entries = [store.load(p) for p in store.machines(where)]
    t = Table(title=f"corpus {where}")
    for h in ("machine", "cpu", "cpus", "calibrated", "cells", "runs", "ceiling", "replica"):
        t.add_column(h)
    for e in entries:
        d = store.describe(e)
        t.add_row(d["machine"], str(d["cpu_model"]), str(d["cpus"]), d["calibrated"][:10], str(d["cells"]),
                  str(d["runs"]), f"{score.bound_only(e):.1f}", f"{score.ceiling_only(e):.1f}")
    console().print(t)


@corpus_app.command("score")
def score_cmd(corpus: Path | None = CorpusOpt,
              machine: list[str] = typer.Option([], "--machine", "-m", help="Only these machines (repeatable)."),
              overrides: list[str] = typer.Option([], "--set", "-s", help="A [sim] mechanism for this score, "
                                                  "e.g. -s coherence=false (repeatable): an ablation."),
              jobs: int = typer.Option(0, "--jobs", "-j", min=0, help="Processes (default: the CPUs)."),
              refresh: bool = typer.Option(False, "--refresh", help="Simulate a cell whose gradient, re-timed "
                                           "right before its runs, had drifted beyond 10% at the re-timed speed "
                                           "(as compare --refresh predicts); by default every cell runs on the "
                                           "calibrated samples."),
              placements: bool = typer.Option(True, "--placements/--one-placement", help=(
                  "Bands of two or more workers mix in the host's far placement, where its core-to-core probes "
                  "saw one (each such cell simulated twice); --one-placement: the calibrated placement alone.")),
              no_model_error: bool = typer.Option(False, "--no-model-error", help=(
                  "Bands of the simulator's and the host's spreads alone; by default each machine's bands take "
                  "the model's error fitted on the other machines' cells (two or more machines scored; a machine "
                  "scored alone takes the corpus's written fit where that was fitted without it).")),
              write_fit: bool = typer.Option(False, "--write-fit", help=(
                  "Fit the model's error on every machine scored and write it beside the corpus machines, where "
                  "the bands of run, show and compare for a calibrated machine take it.")),
              runs: int | None = typer.Option(None, "--runs", min=2, help=(
                  "The simulator's runs of a cell (default: as many as were measured); more give its spread, "
                  "and so its bands, more exactly.")),
              cells: bool = typer.Option(False, "--cells", help="Also print every cell's errors."),
              out: Path | None = typer.Option(None, "--json", help="Write the scores to this JSON file.")) -> None:
    """Re-simulate every cell of every machine with today's model; per machine the cells that meet all four
    goals beside the ceiling (more than any predictor meets in expectation) and the replica share (what a
    simulator that ran exactly like the machine would meet), then whether the simulator orders the algorithms
    of each (threads, batch) group as the machine does (Kendall's τ, the fastest)."""
    from simasgd.corpus import score, store
    from simasgd.machines import capacity
    from simasgd.spec import loader

    where = corpus or default_corpus()
    if out is not None:
        output_file(out, "--json")  # before the scoring: minutes of simulation, then nowhere to write
    if write_fit and overrides:
        refuse("--write-fit with --set: an ablation's error is not the model's (score without --set)")
    room = capacity.thread_room()
    if room is not None and jobs > room:
        refuse(f"--jobs {jobs}: more processes than this machine lets this one start (at most {room})")
    with user_errors():
        paths = [p for p in store.machines(where) if not machine or p.name.removesuffix(store.SUFFIX) in machine]
        if not paths:
            raise store.CorpusError(f"{where}: no machine{' named ' + ', '.join(machine) if machine else ''} "
                                    f"(`simasgd corpus list` shows them)")
        sim = dict(loader.parse_override(o.removeprefix("sim.")) for o in overrides)
        entries = [store.load(p) for p in paths]
    if write_fit and len(entries) < 2:
        refuse(f"--write-fit: {len(entries)} machine scored; the model's error is fitted over two or more")
    n = jobs or len(os.sched_getaffinity(0))
    results = []
    for e in entries:
        console().print(f"{e.name}: {len(e.cells)} cells, {n} processes", markup=False)
        results.append(score.score(e, sim, n, _progress(len(e.cells)), refresh=refresh, placements=placements,
                                   sim_runs=runs))
    if not no_model_error:
        from simasgd.evaluation import prediction_band

        score.held_out_model_error(results, prediction_band.corpus_fit(where))
    if write_fit:
        _write_fit(where, results)
    _print(results, cells)
    _print_bands(results, model_error=not no_model_error)
    _print_ranking(results)
    if out is not None:
        out.write_text(json.dumps({"overrides": sim, "refresh": refresh, "placements": placements,
                                   "model_error": not no_model_error, "runs": runs,
                                   "machines": [r.to_json() for r in results]}, indent=2))
        console().print(f"scores: {out}", markup=False)


@corpus_app.command("cell")
def cell_cmd(machine: str = typer.Argument(..., help="The machine, as `simasgd corpus list` names it."),
             cell: str = typer.Argument(..., help="One of its cells, e.g. fid-mutex-n2-b16 (`corpus score --cells` "
                                                  "lists them)."),
             corpus: Path | None = CorpusOpt,
             overrides: list[str] = typer.Option([], "--set", "-s", help="A [sim] mechanism for this simulation, "
                                                 "e.g. -s coherence=false (repeatable)."),
             runs: int | None = typer.Option(None, "--runs", min=2, help="The simulator's runs (default: as many "
                                             "as were measured)."),
             seed_offset: int = typer.Option(0, "--seed-offset", min=0, help="Another draw of the simulator's "
                                             "timing (added to the seed of its timing draws), against the same "
                                             "measured runs."),
             out: Path | None = typer.Option(None, "--json", help="Write the comparison to this JSON file."),
             plot: Path | None = typer.Option(None, "--plot", help="Draw it: PATH-staleness.png (both sides' "
                                              "staleness distributions) and PATH-cycle.png (each side's mean "
                                              "cycle cut into its phases).")) -> None:
    """One cell beside today's simulation of it: both sides' runs, the four goals and where each side's cycle
    goes (read, gradient, update, between), with the phase whose mean differs most."""
    from simasgd.corpus import cell_view, store
    from simasgd.spec import loader

    where = corpus or default_corpus()
    if out is not None:
        output_file(out, "--json")
    if plot is not None:  # before the simulation: checked as the files it writes
        if not plot.name or plot.name in (".", ".."):
            refuse(f"--plot {str(plot)!r}: give a path the figures' names start with, e.g. figs/mutex-n8")
        for kind in cell_view.FIGURES:
            output_file(plot.parent / f"{plot.name}-{kind}.png", "--plot")
    with user_errors():
        # the machine found among the corpus's files, never a path made of the argument
        paths = {p.name.removesuffix(store.SUFFIX): p for p in store.machines(where)}
        if machine not in paths:
            raise store.CorpusError(f"{where}: no machine named {machine} (it has: {', '.join(paths) or 'none'})")
        sim = dict(loader.parse_override(o.removeprefix("sim.")) for o in overrides)
        entry = store.load(paths[machine])
        found = cell_view.find(entry, cell)
    v = cell_view.view(entry, found, sim, seed_offset, runs)
    _print_cell(v)
    if out is not None:
        out.write_text(json.dumps(v.to_json(), indent=2, allow_nan=False))
        console().print(f"comparison: {out}", markup=False)
    if plot is not None:
        from simasgd.evaluation import plots

        for kind, fig in cell_view.figures(v).items():
            for f in plots.save(fig, plot.parent / f"{plot.name}-{kind}"):
                console().print(f"figure: {f}", markup=False)


def _print_cell(v: cell_view.CellView) -> None:
    """The runs of both sides, the goals, and the phases (µs) as Markdown tables."""
    from simasgd.corpus import cell_view

    con = console()
    if v.score.error:
        con.print(f"{v.machine} {v.cell}: the simulation failed: {v.score.error}", markup=False, soft_wrap=True)
        return
    con.print(f"{v.machine} {v.cell}: {'✓ meets every goal' if v.score.met else '✗ misses'}; "
              f"{', '.join(cell_view.goal_lines(v))}; ceiling {v.score.bound or 0:.2f}, "
              f"replica {v.score.ceiling or 0:.2f}", markup=False, soft_wrap=True)
    labels = {"updates_per_s": "updates/s", "mean_staleness": "τ̄", "updates_to_eps": "updates to ε",
              "time_to_eps": "time to ε (s)"}
    drops = any(x > 0 for vs in v.dropped.values() for x in vs if math.isfinite(x))  # only where a side drops
    heads = [*labels.values(), *(["dropped"] if drops else [])]
    lines = ["", "| run | side | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    for side, name in (("measured", "measured"), ("sim", "simulated")):
        d = v.runs.get(side, {})
        n = max((len(x) for x in d.values()), default=0)
        for i in range(n):
            cells = [_fmt(vals[i] if i < len(vals := d.get(m, [])) else math.nan, m) for m in labels]
            if drops:
                share = vals[i] if i < len(vals := v.dropped.get(side, [])) else math.nan
                cells.append(f"{share:.1%}" if math.isfinite(share) else "n/a")
            lines.append(f"| {i} | {name} | " + " | ".join(cells) + " |")
    con.print("\n".join(lines), markup=False, soft_wrap=True)
    if not v.phases:
        con.print("\nphases: not recorded on either side", markup=False)
        return
    head = ["phase", *(f"{s} measured / sim" for s in cell_view.STATS), "mean err"]
    lines = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in v.phases:
        err = r.mean_rel_err
        lines.append(f"| {r.phase} | " + " | ".join(f"{_us(r.measured[s])} / {_us(r.simulated[s])}"
                                                   for s in cell_view.STATS)
                     + f" | {f'{err:+.1%}' if math.isfinite(err) else 'n/a'} |")
    con.print("\n".join(lines), markup=False, soft_wrap=True)
    widest, dc = v.widest(), v.cycle_delta_s()
    if widest is not None and math.isfinite(dc):
        con.print(f"\nthe phase whose mean differs most: {widest.phase}, {widest.mean_delta_s * 1e6:+.1f} µs of the "
                  f"cycle's {dc * 1e6:+.1f} µs (simulated − measured; updates/s goes as one over the cycle)",
                  markup=False, soft_wrap=True)


def _fmt(x: float, metric: str) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x:.3f}" if metric in ("mean_staleness", "time_to_eps") else f"{x:,.0f}"


def _us(seconds: float) -> str:
    return "n/a" if not math.isfinite(seconds) else f"{seconds * 1e6:,.1f}"


def _write_fit(corpus: Path, results: list[MachineScore]) -> None:
    """The model's error fitted on every cell of every machine scored, written beside the corpus machines."""
    from simasgd.evaluation import prediction_band
    from simasgd.formats import model_error_file as files
    from simasgd.runs.metadata import git_commit

    names = [r.machine for r in results]
    fitted = prediction_band.fit_model_error([k for r in results for k in r.cases()], "")
    doc = files.ModelErrorDoc.model_validate({
        "level": prediction_band.LEVEL, "sigma_log": fitted.sigma, "by_algorithm": fitted.by_algorithm,
        "by_sharing": fitted.by_sharing, "machines": names, "cells": fitted.cells, "simulator_commit": git_commit()})
    path = files.path_in(corpus)
    files.write(path, doc)
    console().print(f"model error σ (log) {fitted.text()}, fitted on {fitted.cells} cells of {', '.join(names)}: "
                    f"{path}", markup=False, soft_wrap=True)


def _progress(total: int):  # noqa: ANN202 (a closure over a counter)
    done = [0]

    def show(s: CellScore) -> None:
        done[0] += 1
        mark = "✓" if s.met else ("error" if s.error else "✗")
        console(stderr=True).print(f"  [{done[0]}/{total}] {s.cell} {mark}", markup=False)

    return show


def _print(results: list[MachineScore], cells: bool) -> None:
    """The per-machine table as Markdown (it goes into benchmarks/fidelity.md as it is), then the cells."""
    from simasgd.corpus import score

    con = console()
    lines = ["| " + " | ".join(score.TABLE_HEAD) + " |", "|" + "---|" * len(score.TABLE_HEAD)]
    lines += ["| " + " | ".join(row) + " |" for row in score.table(results)]
    con.print("\n".join(lines), markup=False, soft_wrap=True)
    for r in results:
        for c in r.cells:
            if c.error:
                con.print(f"[yellow]{r.machine} {c.cell}:[/] {c.error}", soft_wrap=True)
            elif cells:
                errs = ", ".join(f"{k.removesuffix('_rel_err')} {v:+.1%}" if "rel" in k else f"{k} {v:.3f}"
                                 for k, v in c.values.items())
                at = "" if c.refreshed is None else f"; gradient re-timed ×{c.refreshed:.2f}"
                con.print(f"{r.machine} {c.cell}: {'✓' if c.met else '✗'} {errs}; ceiling {c.bound or 0:.2f}, "
                          f"replica {c.ceiling or 0:.2f}{at}",
                          markup=False, soft_wrap=True)


def _print_ranking(results: list[MachineScore]) -> None:
    """Whether the simulator orders each (threads, batch) group's algorithms as the machine does: per group,
    then per machine (Markdown, as the score table)."""
    from simasgd.corpus import ranking

    by_machine = {r.machine: r.ranking() for r in results}
    con = console()
    for head, rows in ((ranking.GROUP_HEAD, [row for g in by_machine.values() for row in ranking.group_rows(g)]),
                       (ranking.SUMMARY_HEAD, ranking.summary_rows(by_machine))):
        lines = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        con.print("\n".join(lines), markup=False, soft_wrap=True)


def _print_bands(results: list[MachineScore], model_error: bool = True) -> None:
    """Per machine, the simulated 90% bands against the measured runs (simasgd.evaluation.prediction_band):
    coverage (the
    share of measured runs inside their band, every cell and metric) and sharpness (the band's width over the
    measured runs' own 90% spread, median over cells), as Markdown; then what each machine's host noise and
    model error are (``model_error``: whether the bands were to take one)."""
    from simasgd.corpus import score

    lines = ["", "| " + " | ".join(score.BAND_HEAD) + " |", "|" + "---|" * len(score.BAND_HEAD)]
    lines += ["| " + " | ".join(row) + " |" for row in score.band_table(results)]
    con = console()
    con.print("\n".join(lines), markup=False, soft_wrap=True)
    for r in results:
        what = ("none: the bands are the simulator's spread alone" if r.host is None
                else f"σ = {r.host.sigma:.3f} on the log scale, from {r.host.source}")
        con.print(f"{r.machine}: host noise {what}", markup=False, soft_wrap=True)
        if r.placement is not None:
            con.print(f"{r.machine}: placement: {r.placement.text()}", markup=False, soft_wrap=True)
        if r.model is None and model_error:
            con.print(f"{r.machine}: model error none: the bands have no error fitted without this machine (score it "
                      f"with others, or write a fit without it)", markup=False, soft_wrap=True)
        if r.model is not None:
            own = "; ".join(f"{a}: {r.model.text(a)}" + "".join(  # a regime's text names it
                f"; {r.model.text(a, shared)}" for shared in (True, False) if r.model.regime(a, shared))
                for a in sorted(r.model.by_algorithm))
            con.print(f"{r.machine}: model error σ (log) {r.model.text()}{'; by algorithm: ' + own if own else ''}; "
                      f"{r.model.source} ({r.model.cells} cells)", markup=False, soft_wrap=True)
