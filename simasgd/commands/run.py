"""``simasgd run`` and ``simasgd validate``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from simasgd.commands import RegistryHelp, console, output_folder, user_errors

OverrideOpt = typer.Option([], "--set", "-s", metavar="KEY=VALUE",
                           help="Override a scenario key: -s workers.count=16 (repeatable).")
# {backends}, {measuring}, {not_measuring}: filled from the backend registry when help is shown (RegistryHelp).
BACKEND_HELP = "Backend: {backends} (`simasgd list` shows which runs what)."
JOBS_HELP = ("Processes running the repeats at once (default: every CPU, or $SIMASGD_JOBS, for a backend that does "
             "not time this machine: {not_measuring}). Backends that time this machine ({measuring}) always run "
             "them one at a time.")


def backend_option(default: str = "sim") -> Any:  # typer.Option: typed as the parameter it fills
    """``-b/--backend``: the one meaning of ``-b`` in every command (compare takes it twice)."""
    return typer.Option(default, "--backend", "-b", metavar="NAME", help=BACKEND_HELP)


def say_machine(scenario: object, backend: str) -> None:
    """A line on stderr: the machine a simulating backend will simulate, and why that one; another: whose
    executor traits it will simulate (``[sim] traits``)."""
    from simasgd.machines.machine import describe
    from simasgd.runs import backends
    from simasgd.spec.traits import describe as describe_traits

    impl = backends.load(backend)
    which = getattr(impl, "simulated_machine", None)
    if which is not None:
        console(stderr=True).print(describe(which(scenario)), markup=False, soft_wrap=True)
    whose = getattr(impl, "simulated_traits", None)
    if whose is not None:
        console(stderr=True).print(describe_traits(whose(scenario)), markup=False, soft_wrap=True)
    if which is not None:
        line = beyond_measured(scenario)
        if line:
            console(stderr=True).print(line, markup=False, soft_wrap=True)


def beyond_measured(scenario: Any) -> str | None:
    """:func:`simasgd.evaluation.validated.note` for a simulated CPU machine (a GPU's model is its own); None
    where the machine cannot be resolved (the run says why)."""
    from simasgd.evaluation.validated import note
    from simasgd.machines.machine import is_gpu, resolve
    from simasgd.spec.algorithms import NETWORKED

    if is_gpu(scenario.machine):
        return None
    try:
        m = resolve(scenario.machine)
    except (ValueError, OSError):  # an unknown preset, a missing or bad profile: the run refuses it by name
        return None
    name = scenario.algorithm.name
    return note(scenario.workers.count, m.sockets * m.cores_per_socket, name,
                name in NETWORKED or bool(m.nodes))


def note_one_at_a_time(backend: str, jobs: int | None) -> None:
    """A note on stderr where ``--jobs`` asks a backend that measures this machine for repeats at once."""
    from simasgd.runs import backends

    if jobs is not None and jobs > 1 and backends.measures_host(backend):
        print(f"note: backend {backend!r} measures this machine; running one repeat at a time (not --jobs {jobs})",
              file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("run", cls=RegistryHelp)(run)
    app.command("validate")(validate)


def run(scenario: Path = typer.Argument(..., help="Scenario file (TOML)."),
        overrides: list[str] = OverrideOpt,
        backend: str = backend_option(),
        repeats: int | None = typer.Option(None, "--repeats", "-n", min=1, metavar="N", help="Overrides `repeats`."),
        out: Path | None = typer.Option(None, "--out", "-o", metavar="DIR",
                                          help="Results folder (default: results/NAME-BACKEND)."),
        jobs: int | None = typer.Option(None, "--jobs", "-j", min=1, metavar="N", help=JOBS_HELP),
        placements: bool = typer.Option(True, "--placements/--one-placement",
                                        help="A simulated run of two or more workers on a calibrated profile whose "
                                             "core-to-core probes saw the CPUs in a slower placement is simulated "
                                             "there too, and its bands mix both (docs/results.md); "
                                             "--one-placement: bands of the calibrated placement alone."),
        ) -> None:
    """Run a scenario on a backend and write the results folder."""
    from simasgd.commands.inspect import print_summary
    from simasgd.runs import backends, progress
    from simasgd.spec import loader

    with user_errors(scenario):
        sc = loader.load(scenario, overrides)
        out = out or Path("results") / f"{sc.name}-{backend}"
        n = repeats or sc.repeats
        say_machine(sc, backend)  # an unknown backend is refused here, before its name makes a folder name
        note_one_at_a_time(backend, jobs)
        output_folder(out)  # before the run: a folder it could not write would lose the run at its end
        with progress.bar(f"{sc.name} on {backend}", n * sc.stop.max_updates) as advance:
            result = backends.run(sc, backend, repeats=n, out=out, advance=advance, jobs=jobs)
        if placements:
            simulate_far(result, lambda advance: backends.run(sc, backend, repeats=n, jobs=jobs, advance=advance),
                         f"{sc.name} on {backend}", n * sc.stop.max_updates)
        record_bands(result, out)
    print_summary(result, out)


def simulate_far(result: Any, rerun: Callable[[Any], Any], what: str, total: int) -> None:
    """The result's runs simulated again in the host's far placement, for its bands, where there is one
    (:func:`simasgd.evaluation.prediction_band.simulate_far`): a line on stderr says so, and ``rerun(advance)``
    runs under a progress bar of ``total`` updates."""
    from simasgd.evaluation import prediction_band
    from simasgd.runs import progress

    def announced() -> Any:
        print(f"{what}: the same runs in the host's slower placement of the CPUs, for the bands "
              "(--one-placement: not)", file=sys.stderr)
        with progress.bar(f"{what}, far placement", total) as advance:
            return rerun(advance)

    prediction_band.simulate_far(result, announced)


def record_bands(result: Any, out: Path) -> None:
    """The result's 90% bands and the host noise they used, into its ``summary.json``
    (simasgd.evaluation.prediction_band):
    a simulated run on the calibrated profile takes the host's noise from that profile."""
    from simasgd.evaluation import prediction_band

    prediction_band.record(out, result, prediction_band.inputs(result)[1])


def validate(files: list[Path] = typer.Argument(..., help="Scenario files to check."),
             overrides: list[str] = OverrideOpt) -> None:
    """Check scenario files; print every problem, one line each (exit 2 if any)."""
    from simasgd.spec import loader

    bad = 0
    for f in files:
        try:
            sc = loader.load(f, overrides)
        except loader.ScenarioError as e:
            bad += 1
            # Plain print: one problem per line, never wrapped by the terminal renderer.
            print("\n".join(e.problems), file=sys.stderr)
            continue
        console().print(f"{f}: ok ({sc.algorithm.name}, {sc.workers.count} workers, {sc.workload.model})",
                        markup=False)
    if bad:
        raise typer.Exit(2)
