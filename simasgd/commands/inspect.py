"""``simasgd show`` and ``simasgd list``: read results, list what exists."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from simasgd.results import RunResult

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


def print_summary(result: RunResult, folder: Path | None = None) -> None:
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
    for line in model_lines(result):
        con.print(line, markup=False, soft_wrap=True)
    for w in stability_warnings(result):
        con.print(f"[yellow]warning:[/] {w}")
    print_busy_host(result)
    if folder is not None:
        con.print(f"results: {folder}", markup=False)


def machine_line(result: RunResult) -> str | None:
    """The machine the runs simulated (``metadata["machine"]``), or this host for a backend that measures it."""
    from simasgd import backends
    from simasgd.machine import describe

    if "machine" in result.metadata:
        return describe(result.metadata["machine"])
    try:
        measured = backends.measures_host(result.backend)
        simulates = hasattr(backends.load(result.backend), "simulated_machine")
    except backends.BackendError:  # imported (peer) or absent here: nothing to say
        return None
    if simulates:
        return "machine: not recorded (results written before simasgd recorded the machine it simulated)"
    cpu = result.metadata.get("cpu_model")
    return f"machine: the host it ran on, measured{f' ({cpu})' if cpu else ''}" if measured else None


def model_lines(result: RunResult) -> list[str]:
    """The model a simulated result ran (``metadata["model"]``: executor traits, mechanisms, profile); nothing
    for a backend that simulates no machine."""
    from simasgd import backends

    if "model" not in result.metadata:
        try:
            simulates = hasattr(backends.load(result.backend), "simulated_machine")
        except backends.BackendError:  # imported (peer) or absent here: nothing to say
            return []
        if not simulates:
            return []
    from simasgd.sim.model_record import describe

    return describe(result.metadata.get("model"))


def print_busy_host(result: RunResult, label: str | None = None) -> None:
    """A warning line per run of a real backend that ran while the machine was busy with other work, or
    with its CPUs placed elsewhere than at calibration (core-to-core latency, executors/c2c.py)."""
    from simasgd.metadata import busy_host_warnings, calibrated_c2c_ns, topology_warnings

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
    """List algorithms (with parameters and backends), backends, workloads, dataset forms, machine, GPU and
    network presets, and the shipped scenarios."""
    from rich.markup import escape
    from rich.table import Table

    from simasgd import algorithms, backends
    from simasgd.machine import FALLBACK_PRESET, corpus_folder, corpus_names, profile_path
    from simasgd.reference.presets_page import MACHINE_HEAD, machine_rows, network_rows
    from simasgd.sim import gpu

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
        except Exception:
            impls[b] = frozenset()
    for a in algorithms.ALGORITHMS.values():
        params = ", ".join(f"{p.name} ({p.default})" for p in a.params) or "—"
        t.add_row(a.name, a.title, params, ", ".join(b for b, s in impls.items() if a.name in s) or "—")
    con.print(t)
    con.print("serial runs any scenario as plain sequential SGD: the reference the others are compared with")
    con.print("backends: " + ", ".join(f"{b}{'' if ok else ' (unavailable)'}"
                                       for b, ok in backends.available().items()))
    con.print("workloads (workload.model): " + ", ".join(f"{k} ({v})" for k, v in WORKLOADS.items()), markup=False)
    con.print("datasets (workload.dataset): " + ", ".join(f"{k} ({v})" for k, v in DATASETS.items()), markup=False)
    m = Table(title="machine presets (machine.preset; every number's source: docs/reference/presets.md)")
    for c in MACHINE_HEAD:
        m.add_column(c)
    for row in machine_rows():
        m.add_row(*(escape(c) for c in row))
    con.print(m)
    here = "this machine's profile exists" if profile_path().is_file() else "none yet: `simasgd calibrate`"
    con.print(f"this: the calibrated profile {profile_path()} ({here}); no [machine]: this when the profile "
              f"exists, else {FALLBACK_PRESET}", markup=False)
    measured = corpus_names()
    con.print(f"measured machines of the corpus {corpus_folder()} (machine.preset, their calibrated profiles): "
              f"{', '.join(measured) or 'none'}", markup=False)
    con.print(f"GPU presets (machine.preset): {', '.join(gpu.names())} "
              f"({gpu.PROFILE_PRESET}: `simasgd calibrate --gpu`)",
              markup=False)
    con.print("network presets (network.preset): " + ", ".join(
        f"{name} ({gbps if not us else f'{gbps} Gb/s, {us} µs'})" for name, gbps, us in network_rows()),
        markup=False)
    s = Table(title="shipped scenarios")
    s.add_column("file", no_wrap=True)
    s.add_column("what")
    for path, what in shipped_scenarios():
        s.add_row(escape(path), escape(what))
    con.print(s)


WORKLOADS = {"mlp": "multi-layer perceptron, workload.layers", "logreg": "logistic regression",
             "least_squares": "linear least squares; sparse = true for sparse rows",
             "cnn": "conv, ReLU, pool, dense", "torch": "your nn.Module: module = \"pkg.mod:factory\""}
DATASETS = {"digits": "scikit-learn's 8x8 digits, no download", "synthetic": "a Gaussian mixture of "
            "workload.samples x features", "mnist:PATH": "MNIST's IDX files in PATH",
            "cifar10:PATH": "CIFAR-10's binary batches in PATH"}


def shipped_scenarios(root: Path | None = None, width: int = 110) -> list[tuple[str, str]]:
    """Each scenarios/**/*.toml with the first sentence of its opening comment (or its name, if it has
    none), cut to ``width`` characters; ``root``: the scenarios folder (default: the clone's)."""
    base = root or Path(__file__).resolve().parents[2] / "scenarios"
    out = []
    for p in sorted(base.rglob("*.toml")):
        head = []
        for line in p.read_text(encoding="utf-8").splitlines():
            if not line.startswith("#"):
                break
            head.append(line.lstrip("#").strip())
        text = " ".join(x for x in head if x)
        end = re.search(r"\.\s+(?=[A-Z])", text)  # a sentence's end, not "Fig. 4.2"
        text = text[: end.start() + 1] if end else text
        out.append((str(p.relative_to(base.parent)), text if len(text) <= width else text[: width - 1] + "…"))
    return [(path, what or Path(path).stem) for path, what in out]
