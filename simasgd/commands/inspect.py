"""``simasgd show`` and ``simasgd list``: read results, list what exists."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from simasgd.evaluation.prediction_band import Band
    from simasgd.runs.results import RunResult

from simasgd.commands import console, user_errors


def register(app: typer.Typer) -> None:
    app.command("show")(show)
    app.command("list")(list_things)


def show(folder: Path = typer.Argument(..., help="A results folder written by `simasgd run`.")) -> None:
    """Print the summary table of a results folder."""
    from simasgd.runs.results import RunResult

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

    from simasgd.evaluation.stability import stability_warnings

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
    bands, band_line = result_bands(result)
    if bands:
        table.add_column(f"{next(iter(bands.values())).level:.0%} band", justify="right")
    for metric in SUMMARY_METRICS:
        values = [getattr(r, metric) for r in runs]
        band = [bands[metric].text() if metric in bands else ""] if bands else []
        table.add_row(metric, *(_stats(values) if many else [_fmt(v) for v in values]), *band)
    con = console()
    con.print(table)
    if band_line:
        con.print(band_line, markup=False, soft_wrap=True)
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


def result_bands(result: RunResult) -> tuple[dict[str, Band], str | None]:
    """The 90% band of one more run for each metric (:mod:`simasgd.evaluation.prediction_band`) and a line saying what
    went into them: for a simulated result, its runs' spread and the host noise of the profile it ran on; for a
    measured one, its runs' own spread. No bands (and no line) with fewer than 2 runs."""
    from simasgd.evaluation import prediction_band

    simulated, host = prediction_band.inputs(result)
    model = prediction_band.model_error_for(result, host) if simulated else None
    bands = prediction_band.of_result(result, host, model=model)
    if not bands:
        return {}, None
    return bands, prediction_band.describe(len(result.runs), host, simulated,
                                           placement=prediction_band.far_placement(result), model=model,
                                           algorithm=prediction_band.algorithm_of(result),
                                           shared=prediction_band.shared_of(result))


def machine_line(result: RunResult) -> str | None:
    """The machine the runs simulated (``metadata["machine"]``), or this host for a backend that measures it."""
    from simasgd.machines.machine import describe
    from simasgd.runs import backends

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
    from simasgd.runs import backends

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
    from simasgd.runs.metadata import busy_host_warnings, calibrated_c2c_ns, topology_warnings

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


def list_things(presets: bool = typer.Option(False, "--presets",
                                             help="List the machine, GPU and network presets with their "
                                                  "numbers instead.")) -> None:
    """List algorithms (with parameters and backends), backends, workloads, dataset forms, machine, GPU and
    network presets, and the shipped scenarios."""
    from rich.markup import escape
    from rich.table import Table

    from simasgd.machines import networks
    from simasgd.machines.machine import FALLBACK_PRESET, PRESETS, corpus_folder, corpus_names, profile_path
    from simasgd.runs import backends
    from simasgd.sim import gpu
    from simasgd.spec import algorithms

    con = console()
    if presets:
        print_presets()
        return
    t = Table(title="algorithms")
    for c in ("name", "what", "parameters (default)", "backends"):
        t.add_column(c, overflow="fold")  # a word wider than its column is folded, never cut
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
    con.print(f"machine presets (machine.preset): {', '.join(PRESETS)}", markup=False)
    here = "this machine's profile exists" if profile_path().is_file() else "none yet: `simasgd calibrate`"
    con.print(f"this: the calibrated profile {profile_path()} ({here}); no [machine]: this when the profile "
              f"exists, else {FALLBACK_PRESET}", markup=False)
    measured = corpus_names()
    con.print(f"measured machines of the corpus {corpus_folder()} (machine.preset, their calibrated profiles): "
              f"{', '.join(measured) or 'none'}", markup=False)
    con.print(f"GPU presets (machine.preset): {', '.join(gpu.names())} "
              f"({gpu.PROFILE_PRESET}: `simasgd calibrate --gpu`)",
              markup=False)
    con.print(f"network presets (network.preset): {', '.join(networks.PRESETS)} ({networks.MEASURED}: the "
              f"[network] table of this machine's calibrated profile, measured by `simasgd calibrate --network`)",
              markup=False)
    con.print("their numbers: `simasgd list --presets`; every number's source: docs/reference/presets.md",
              markup=False)
    s = Table(title="shipped scenarios")
    s.add_column("file", no_wrap=True)
    s.add_column("what", overflow="fold")
    for path, what in shipped_scenarios():
        s.add_row(escape(path), escape(what))
    con.print(s)


def print_presets() -> None:
    """Every machine, GPU and network preset, what it is and each number it carries (the presets' own fields),
    and the calibrated ones (``this``, ``this-gpu``, the corpus machines) as their profiles give them."""
    from dataclasses import fields

    from simasgd.machines import gpus, machine, networks
    from simasgd.machines import profile as profile_format
    from simasgd.sim import network

    con = console()
    width = max(con.width, 40)

    def say(text: str, indent: int = 0) -> None:
        lines = textwrap.wrap(text, width, initial_indent=" " * indent, subsequent_indent=" " * (indent + 4),
                              break_on_hyphens=False) or [""]
        con.print("\n".join(lines), markup=False, soft_wrap=True, highlight=False)

    def numbers(items: list[str], indent: int = 2) -> None:
        """``key = value`` items, as many a line as fit, none broken across lines."""
        lines, line = [], ""
        for item in items:
            if line and indent + len(line) + 2 + len(item) + 1 > width:  # + 1: the comma a full line ends with
                lines.append(line + ",")
                line = ""
            line = f"{line}, {item}" if line else item
        con.print("\n".join(" " * indent + x for x in [*lines, line]), markup=False, soft_wrap=True,
                  highlight=False)

    def preset(name: str, what: str, obj: Any) -> None:
        say(f"{name}: {what}")
        numbers([f"{f.name} = {_number(getattr(obj, f.name), f.name)}" for f in fields(obj)
                 if f.name not in ("name", "profile")])

    say("machine presets (machine.preset; every number's source: docs/reference/presets.md)")
    for name, m in machine.PRESETS.items():
        preset(name, machine.CITATIONS[name].what, m)
    path = machine.profile_path()
    what = f"this machine, as calibrated by `simasgd calibrate` (the profile {path})"
    try:
        this = machine.load_profile(path)
    except machine.MachineError:
        say(f"this: {what}: no profile yet")
    else:
        preset(this.name, what, this)
    for name in machine.corpus_names():
        try:
            m = machine.corpus_machine(name)
        except machine.MachineError as e:
            say(f"{name}: {e}")
            continue
        preset(name, f"a measured machine of the corpus {machine.corpus_folder()} (its calibrated profile)", m)
    say("")
    say("GPU presets (machine.preset)")
    for name, g in gpus.PRESETS.items():
        preset(name, gpus.SOURCES[name].what, g)
    what = f"this machine's GPU, as calibrated by `simasgd calibrate --gpu` (the [gpu] table of {path})"
    try:
        preset(gpus.PROFILE_PRESET, what, gpus.from_profile(profile_format.read(path), path))
    except (OSError, ValueError):
        say(f"{gpus.PROFILE_PRESET}: {what}: no such table yet")
    say("")
    say("network presets (network.preset; a worker's NIC and a message's one-way latency)")
    for name, v in networks.PRESETS.items():
        server = None
        if name == networks.MEASURED:  # no numbers of its own: this machine's, as measured
            try:
                v, server = network.measured(path)
            except (OSError, ValueError):
                say(f"{name}: {networks.SOURCES[name].what} No [network] table in {path} yet.")
                continue
        say(f"{name}: {networks.SOURCES[name].what}")
        if v is not None:
            numbers([f"{k} = {_number(x, k)}" for k, x in (("bandwidth_gbps", v[0]), ("latency_us", v[1]),
                                                           ("server_bandwidth_gbps", server)) if x is not None])
    say("")
    say("—: not modelled (a CPU preset without its clock, turbo clocks or caches: simasgd/sim/sockets.py)")


def _number(v: Any, key: str) -> str:
    """A preset's value with the unit its key's suffix names (``_gbs``: GB/s); 0 or () is "—": not modelled."""
    from simasgd.reference.common import unit
    from simasgd.reference.presets_page import fmt

    if not isinstance(v, (bool, str)) and not v:
        return "—"
    u = "/s" if key.endswith("_per_s") else unit(key)
    return f"{fmt(v)} {u}" if u and not isinstance(v, (tuple, str, bool)) else fmt(v)


WORKLOADS = {"mlp": "multi-layer perceptron, workload.layers", "logreg": "logistic regression",
             "least_squares": "linear least squares; sparse = true for sparse rows",
             "cnn": "conv, ReLU, pool, dense", "torch": "your nn.Module: module = \"pkg.mod:factory\""}
DATASETS = {"digits": "scikit-learn's 8x8 digits, no download", "synthetic": "a Gaussian mixture of "
            "workload.samples x features", "mnist:PATH": "MNIST's IDX files in PATH",
            "cifar10:PATH": "CIFAR-10's binary batches in PATH"}


# A sentence's end: a full stop before a word ("shared_memory.toml. study.py sets" too), not after an abbreviation
# ("et al. say", "e.g. x") nor inside a number or name ("Fig. 4.2", "study.py").
SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\bcf)(?<!\bvs)\.\s+(?=[A-Za-z])")


def shipped_scenarios(root: Path | None = None) -> list[tuple[str, str]]:
    """Each scenarios/**/*.toml with the first sentence of its opening comment, whole (or its name, if it has
    none); ``root``: the scenarios folder (default: the clone's)."""
    base = root or Path(__file__).resolve().parents[2] / "scenarios"
    out = []
    for p in sorted(base.rglob("*.toml")):
        head = []
        for line in p.read_text(encoding="utf-8").splitlines():
            # The first paragraph: up to a blank comment line or an indented one (a command to run).
            if not line.startswith("#") or not line.strip("# ") or line.startswith("#   "):
                break
            head.append(line.lstrip("#").strip())
        text = " ".join(head)
        end = SENTENCE_END.search(text)
        text = text[: end.start() + 1] if end else text
        out.append((str(p.relative_to(base.parent)), text))
    return [(path, what or Path(path).stem) for path, what in out]
