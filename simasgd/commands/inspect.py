"""``simasgd show`` and ``simasgd list``: read results, list what exists."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from simasgd.commands import console, user_errors


def register(app: typer.Typer) -> None:
    app.command("show")(show)
    app.command("list")(list_things)


def show(folder: Path = typer.Argument(..., help="A results folder written by `simasgd run`.")) -> None:
    """Print the summary table of a results folder."""
    from simasgd.results import RunResult

    with user_errors():
        result = RunResult.load(folder)
    print_summary(result, folder)


def _fmt(v: object) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def print_summary(result, folder: Path | None = None) -> None:
    """Metrics as rows and runs as columns, so the table fits a terminal (or a log) at any repeat count."""
    from rich.table import Table

    from simasgd.stability import stability_warnings

    sc = result.scenario
    title = (f"{sc.get('name')} · {result.backend} · {sc['algorithm']['name']} · "
             f"{sc['workers']['count']} workers · {sc['workload']['model']} B={sc['workload']['batch_size']}")
    table = Table(title=title)
    table.add_column("metric")
    runs = result.runs
    many = len(runs) > MAX_RUN_COLUMNS
    heads = ["mean", "min", "max"] if many else [f"run {r.run}" for r in runs]
    for h in heads:
        table.add_column(h, justify="right")
    for metric in SUMMARY_METRICS:
        values = [getattr(r, metric) for r in runs]
        table.add_row(metric, *(_stats(values) if many else [_fmt(v) for v in values]))
    con = console()
    con.print(table)
    line = machine_line(result)
    if line:
        con.print(line, markup=False, soft_wrap=True)
    for w in stability_warnings(result):
        con.print(f"[yellow]warning:[/] {w}")
    print_busy_host(result)
    if folder is not None:
        con.print(f"results: {folder}", markup=False)


def machine_line(result) -> str | None:
    """The machine the runs simulated (``metadata["machine"]``), or this host for a backend that measures it."""
    from simasgd import backends
    from simasgd.machine import describe

    if "machine" in result.metadata:
        return describe(result.metadata["machine"])
    try:
        measured = backends.measures_host(result.backend)
    except backends.BackendError:  # imported (peer) or absent here: nothing to say
        return None
    cpu = result.metadata.get("cpu_model")
    return f"machine: the host it ran on, measured{f' ({cpu})' if cpu else ''}" if measured else None


def print_busy_host(result, label: str | None = None) -> None:
    """A warning line per run of a real backend that ran while the machine was busy with other work, or
    with its CPUs placed elsewhere than at calibration (core-to-core latency, executors/c2c.py)."""
    from simasgd.metadata import busy_host_warnings

    from simasgd.metadata import calibrated_c2c_ns, topology_warnings

    workers = int((result.scenario.get("workers") or {}).get("count", 1))
    lines = busy_host_warnings(result.metadata, workers) + topology_warnings(result.metadata, calibrated_c2c_ns())
    for w in lines:
        console().print(f"warning{f' ({label})' if label else ''}: {w}", markup=False, soft_wrap=True)


SUMMARY_METRICS = ("updates", "attempts", "time_s", "updates_per_s", "mean_staleness", "updates_to_eps",
                   "time_to_eps", "crashed", "not_reached", "initial_loss", "final_loss")
MAX_RUN_COLUMNS = 5


def _stats(values: list[object]) -> list[str]:
    if all(isinstance(v, bool) for v in values):
        return [f"{sum(values)}/{len(values)}", "", ""]  # type: ignore[arg-type]
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not nums:
        return ["—", "—", "—"]
    return [_fmt(sum(nums) / len(nums)), _fmt(min(nums)), _fmt(max(nums))]


def list_things() -> None:
    """List algorithms (with parameters), backends, workloads and machine presets."""
    from rich.table import Table

    from simasgd import algorithms, backends
    from simasgd.machine import PRESETS

    con = console()
    t = Table(title="algorithms")
    for c in ("name", "what", "parameters (default)", "backends"):
        t.add_column(c)
    impls = {}
    for b in backends.BACKENDS:
        if b == "serial":  # runs every scenario as sequential SGD: it implements none of them as such
            continue
        try:
            impls[b] = backends.load(b).ALGORITHMS
        except Exception:  # noqa: BLE001 - an unavailable backend just has no algorithms
            impls[b] = frozenset()
    for a in algorithms.ALGORITHMS.values():
        params = ", ".join(f"{p.name} ({p.default})" for p in a.params) or "—"
        t.add_row(a.name, a.title, params, ", ".join(b for b, s in impls.items() if a.name in s) or "—")
    con.print(t)
    con.print("serial runs any scenario as plain sequential SGD: the reference the others are compared with")
    con.print("backends: " + ", ".join(f"{b}{'' if ok else ' (unavailable)'}" for b, ok in backends.available().items()))
    con.print("workloads: mlp, logreg, least_squares (sparse = true for sparse rows); datasets: digits, synthetic, mnist:PATH")
    con.print("  torch: your own nn.Module (module = \"pkg.mod:factory\"; backends sim, serial, torch; "
              "pip install 'simasgd[torch]')", markup=False)
    con.print("machine presets: " + ", ".join([*PRESETS, "this (calibrated: simasgd calibrate)"]))
