"""``simasgd sweep`` and ``simasgd sweep-summary``: hyperparameter grids, resumable, on a pool or Dask."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from simasgd.commands import RegistryHelp, console, output_folder, user_errors
from simasgd.commands.run import backend_option, say_machine

GRID_HELP = ("Sweep a key: KEY=V1,V2,... (TOML values; bare words are strings) or KEY=START:STOP:STEP "
             "(inclusive) or KEY=START:STOP:*FACTOR. Repeatable; several form the product; "
             "replaces the same key of the file's \\[sweep.grid] table.")


def register(app: typer.Typer) -> None:
    app.command("sweep", cls=RegistryHelp)(sweep)
    app.command("sweep-summary")(sweep_summary)


def sweep(scenario: Path = typer.Argument(..., help="Scenario file (TOML); may hold a \\[sweep.grid] table."),
          grid: list[str] = typer.Option([], "--grid", "-g", metavar="KEY=VALUES", help=GRID_HELP),
          overrides: list[str] = typer.Option([], "--set", "-s", metavar="KEY=VALUE",
                                              help="Override a key for every cell: -s stop.max_updates=1000."),
          backend: str = backend_option(),
          repeats: int | None = typer.Option(None, "--repeats", "-n", min=1, metavar="N",
                                             help="Repeats per cell (overrides `repeats`)."),
          out: Path | None = typer.Option(None, "--out", "-o", metavar="DIR",
                                            help="Sweep folder (default: sweeps/NAME-BACKEND)."),
          jobs: int | None = typer.Option(None, "--jobs", "-j", min=0, metavar="N",
                                             help="Parallel tasks (default: all cores, or $SIMASGD_JOBS; 0 = in this "
                                                  "process). Backends that time this machine ({measuring}) run "
                                                  "one task at a time per host."),
          dask: str | None = typer.Option(None, "--dask", metavar="ADDRESS",
                                          help="'local' (a LocalCluster of --jobs workers) or a scheduler address, "
                                               "e.g. tcp://host:8786."),
          resume: bool = typer.Option(False, "--resume", help="Continue a sweep in --out: skip finished tasks."),
          retry_failed: bool = typer.Option(True, "--retry-failed/--keep-failed",
                                            help="On --resume, rerun tasks recorded as failed (default) or keep them."),
          keep_runs: bool = typer.Option(False, "--keep-runs", help="Also keep each task's full results folder "
                                                                    "under OUT/runs/<task>/ (large)."),
          dry_run: bool = typer.Option(False, "--dry-run", help="Validate every cell, print the grid and what "
                                                                "is left to run, run nothing."),
          ) -> None:
    """Run a scenario over a grid of settings x repeats; results go to one Parquet file per task."""
    from simasgd.sweep import plan as planmod
    from simasgd.sweep import runner

    with user_errors(scenario):
        p = planmod.build(scenario, grid, overrides, backend=backend, repeats=repeats)
        out = out or Path("sweeps") / f"{p.base.name}-{backend}"
        output_folder(out)  # before any task runs: their results would have nowhere to go
        if dry_run:
            _describe(p, out)
            return
        _note_real_backend(p.backend, jobs, dask)
        if not any(k.startswith("machine.") for k in p.grid):  # one machine for every cell: say which
            say_machine(p.base, p.backend)
        with _sigterm_unwinds():
            report = runner.run(p, out, jobs=jobs, dask=dask, resume=resume, keep_runs=keep_runs,
                                retry_failed=retry_failed)
    skipped = f", {report.skipped} already done" if report.skipped else ""
    console().print(f"sweep {p.base.name} on {backend}: {len(p.cells)} cells x {p.repeats} repeats = "
                    f"{report.total} tasks{skipped}; {report.ok} ok, {report.failed} failed now, in "
                    f"{report.elapsed_s:.1f} s -> {report.out}\nsummary: simasgd sweep-summary {report.out}",
                    markup=False, highlight=False)


def _describe(p: Any, out: Path) -> None:
    """The grid, and what a run into ``out`` would do; a folder of another sweep is the same error as a run."""
    from simasgd.sweep.grid import toml_literal
    from simasgd.sweep.store import MANIFEST, SweepStore

    for key, values in p.grid.items():
        print(f"{key}: {', '.join(map(toml_literal, values))}")
    store, ids = SweepStore(out), {t.task_id for t in p.tasks()}
    head = f"{len(p.cells)} cells x {p.repeats} repeats = {len(ids)} tasks on {p.backend}"
    if not (out / MANIFEST).exists():
        print(f"{head}; {out} is new")
        return
    store.check_same(p.identity())
    ok, failed = store.finished()
    print(f"{head}; {out}: {len(ok & ids)} done, {len(failed & ids)} failed, "
          f"{len(ids - ok)} left to run with --resume")


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM (a batch system's kill) unwinds like Ctrl-C: the pool is stopped, finished tasks are on disk.

    The previous handler comes back afterwards (the command may run inside another program, e.g. tests).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _note_real_backend(backend: str, jobs: int | None, dask: str | None) -> None:
    from simasgd.sweep.plan import measures_host

    if measures_host(backend) and not dask and jobs not in (None, 0, 1):
        print(f"note: backend {backend!r} measures this machine; running one task at a time (not --jobs {jobs})",
              file=sys.stderr)


def sweep_summary(folder: Path = typer.Argument(..., help="A sweep folder written by `simasgd sweep`."),
                  figures: Path | None = typer.Option(None, "--figures", "-f",
                                                         help="Write heatmaps (PNG) to this folder."),
                  svg: bool = typer.Option(False, "--svg", help="Also write SVG next to each PNG."),
                  max_crash: float = typer.Option(0.1, "--max-crash", min=0.0, max=1.0,
                                                  help="Largest fraction of crashed repeats a setting may have."),
                  within: float = typer.Option(0.1, "--within", min=0.0,
                                               help="Count settings within this fraction of the fastest."),
                  plots: Path | None = typer.Option(None, "--plots", hidden=True, help="Old name of --figures."),
                  ) -> None:
    """The fastest stable setting per algorithm x threads (Ek 2021, Table 4.3), and heatmaps."""
    from simasgd.sweep import analysis, store

    with user_errors():
        df = store.load(folder)
        manifest = store.SweepStore(folder).manifest()
        table = analysis.table(df, manifest=manifest, max_crash=max_crash, within=within)
    con = console()
    if not con.is_terminal:
        con.width = max(con.width, 200)  # a file or pipe: do not squeeze the table into 80 columns
    analysis.print_table(table, con, title=f"{manifest['scenario'].get('name')} · {manifest['backend']} · "
                                                  f"{len(df)} runs")
    figures = figures or plots
    if figures is not None:
        output_folder(figures, "--figures")
        written = analysis.heatmaps(df, figures, manifest=manifest, svg=svg)
        console().print(f"{len(written)} figures -> {figures}", markup=False)
