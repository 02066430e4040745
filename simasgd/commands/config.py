"""``simasgd config`` (a scenario as resolved, every default written out) and ``simasgd init`` (an example)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import tomlkit
import typer
from tomlkit.items import Table

from simasgd.commands import EXIT_BAD_INPUT, console, output_file, user_errors, version
from simasgd.commands.run import OverrideOpt


def register(app: typer.Typer) -> None:
    app.command("config")(config)
    app.command("init")(init)


def config(scenario: Path = typer.Argument(..., help="Scenario file (TOML)."),
           overrides: list[str] = OverrideOpt,
           sources: bool = typer.Option(False, "--sources",
                                        help="Print each key with where its value comes from: the scenario "
                                             "file, a -s override, or the default.")) -> None:
    """Print the scenario as resolved: every key with the value a run uses (TOML; unset keys as comments)."""
    from simasgd.spec import loader

    with user_errors(scenario):
        sc = loader.load(scenario, overrides)
        # The origins are read from what the loader resolved `sc` from: the file's TOML, then the overrides.
        text = sources_text(sc, scenario, loader.read_toml(scenario), overrides) if sources else resolved_toml(sc)
    sys.stdout.write(text)


def resolved_toml(sc: Any) -> str:
    """The scenario's every key as TOML: its values, the defaults of what it leaves out, and the chosen
    algorithm's parameters at their registry defaults. A key with no value (derived at run time, or an
    optional table left out) is a comment saying so. Loading the text gives the same resolved scenario."""
    doc, hints = resolved_doc(sc)
    out = tomlkit.document()
    out.add(tomlkit.comment(f"{sc.name}: the scenario as resolved by simasgd {version()} (`simasgd config`)"))
    out.add(tomlkit.comment(_machine_note(sc)))
    out.add(tomlkit.nl())
    for k, v in doc.items():
        if not isinstance(v, dict) and v is not None:
            out.add(k, _plain(v))
    for k, v in doc.items():
        if isinstance(v, dict):
            out.add(k, _table(v, hints.get(k, {})))
        elif v is None:
            out.add(tomlkit.nl())
            out.add(tomlkit.comment(f"[{k}] not set"))
    return tomlkit.dumps(out)


def resolved_doc(sc: Any) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """The scenario's every key and value (None: no value), and per table the note for a key without one."""
    from simasgd.spec import algorithms, loader

    doc = sc.model_dump(mode="python")
    algo = doc["algorithm"]
    for p in algorithms.ALGORITHMS[algo["name"]].params:
        if algo.get(p.name) is None:
            algo[p.name] = p.default
    # Through the loader once more, so that a parameter's default is written as the scenario reads it
    # (backoff = "none" becomes its table).
    filled = loader.from_dict({"algorithm": {k: v for k, v in algo.items() if v is not None},
                               "workers": {"count": sc.workers.count}})
    # Other algorithms' parameters do not apply: left out.
    doc["algorithm"] = filled.algorithm.model_dump(mode="python", exclude_none=True)
    hints = {"machine": {k: f"not set; the simulator takes {v}" for k, v in _machine_values(sc).items()}}
    if doc["workload"].get("data") is not None:  # the scenario refuses both: its data come from the factory
        doc["workload"]["dataset"] = None
        hints["workload"] = {"dataset": "not used: `data` gives the data"}
    return doc, hints


def origins(file_data: dict[str, Any], overrides: list[str]) -> dict[str, str]:
    """Dotted key -> ``"file"`` for each value the file gives (a table's keys, one by one), or ``-s KEY=VALUE``
    for each key an override sets (a table set as one value: its key). Overrides apply in order, as
    ``loader.apply_overrides`` applies them: the last one to set a key wins."""
    from simasgd.spec import loader

    out: dict[str, str] = {}

    def walk(value: Any, key: str, origin: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else k, origin)
        else:
            out[key] = origin
    walk(file_data, "", "file")
    for item in overrides:
        key, value = loader.parse_override(item)
        # An override replaces the key's whole value: what the file or an earlier override set under it is gone.
        for k in [k for k in out if k.startswith(key + ".")]:
            del out[k]
        walk(value, key, f"-s {item}")
    return out


def sources_text(sc: Any, path: Path, file_data: dict[str, Any], overrides: list[str]) -> str:
    """Every key of the resolved scenario, its value and where the value comes from: the file, a ``-s``
    override, or the default (the schema's, or the chosen algorithm's for its parameters); a key the
    simulator derives (an unset machine key) says what it takes."""
    doc, hints = resolved_doc(sc)
    given = origins(file_data, overrides)
    if "name" not in given:  # the loader names a scenario without `name` after its file
        given["name"] = f"{path} (its file name)"

    def source(key: str) -> str:
        parts = key.split(".")
        # The longest given prefix: a table given as one value (`backoff = "none"`, -s sim={...}) gives its keys.
        for n in range(len(parts), 0, -1):
            origin = given.get(".".join(parts[:n]))
            if origin is not None:
                return str(path) if origin == "file" else origin
        return "default"

    rows: list[tuple[str, str, str]] = []

    def add(prefix: str, d: dict[str, Any], notes: dict[str, str]) -> None:
        for k, v in d.items():
            key = prefix + k
            if isinstance(v, dict):
                add(key + ".", v, {})
            elif v is None:
                rows.append((key, notes.get(k, "not set"), source(key)))
            else:
                rows.append((key, _value(v), source(key)))
    for k, v in doc.items():
        if isinstance(v, dict):
            add(k + ".", v, hints.get(k, {}))
        else:
            rows.append((k, "not set" if v is None else _value(v), source(k)))
    widths = [max(len(r[i]) for r in [("key", "value", "source"), *rows]) for i in (0, 1)]
    lines = [f"# {sc.name}: where each key's value comes from (`simasgd config --sources`)",
             f"{'key':<{widths[0]}}  {'value':<{widths[1]}}  source"]
    lines += [f"{k:<{widths[0]}}  {v:<{widths[1]}}  {s}" for k, v, s in rows]
    return "\n".join(lines) + "\n"


def _machine_note(sc: Any) -> str:
    from simasgd.machines.machine import describe, simulated

    return "sim backend: " + describe(simulated(sc.machine))


def _machine_values(sc: Any) -> dict[str, str]:
    """What the simulator takes for each unset machine key: the preset's value (none for a GPU preset, or
    a profile that cannot be read: the run says why)."""
    from dataclasses import asdict

    from simasgd.machines import machine

    if machine.is_gpu(sc.machine):
        return {}
    try:
        m = machine.resolve(sc.machine)
    except machine.MachineError:
        return {}
    return {"preset": _value(machine.preset_of(sc.machine)),
            **{k: _value(v) for k, v in asdict(m).items() if k not in ("name", "profile")}}


def _table(d: dict[str, Any], hints: dict[str, str] | None = None) -> Table:
    """One table of the resolved scenario: its values, then a comment for each key without one, then the tables
    inside it."""
    table = tomlkit.table()
    for k, v in d.items():
        if v is None:
            table.add(tomlkit.comment(f"{k}: {(hints or {}).get(k) or 'not set'}"))
        elif not isinstance(v, dict):
            table.add(k, _plain(v))
    for k, v in d.items():
        if isinstance(v, dict):
            table.add(k, _table(v))
    return table


def _plain(v: Any) -> Any:
    """``v`` as TOML holds it: tuples as arrays, a dict's None values left out, what TOML has no type for as
    its text."""
    if isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        array = tomlkit.array()  # one line, its tables inline (a grid's list of settings)
        array.extend(_plain(x) for x in v)
        return array
    if isinstance(v, dict):
        inline = tomlkit.inline_table()
        inline.update({k: _plain(x) for k, x in v.items() if x is not None})
        return inline
    return str(v)


def _value(v: Any) -> str:
    """``v`` written as a TOML value (for a comment that gives it)."""
    return tomlkit.item(_plain(v)).as_string()


EXAMPLE = '''\
# An example scenario (written by `simasgd init`). Every key is optional; `simasgd config FILE` prints
# the whole scenario with its defaults, docs/reference/scenario.md describes each key.
name = "example"
seed = 0        # every random number of a run derives from (seed, repeat, role, worker)
repeats = 3     # independent runs of the same setting

# No [machine] table: the simulator runs on this machine's calibrated profile (`simasgd calibrate`)
# when there is one, else on the "laptop-2core" preset. Name one to simulate another machine:
# [machine]
# preset = "xeon-e5-2687w-v2"

[workers]
count = 4               # threads (or processes, streams) training one model
placement = "os"        # "os" | "uma" (fill a socket first) | "numa" (alternate sockets) | [cpu, ...]

[workload]
model = "mlp"           # "mlp" | "logreg" | "least_squares" | "cnn" | "torch"
layers = [64, 32, 10]   # input, hidden..., classes
dataset = "digits"      # scikit-learn's digits (no download) | "synthetic" | "mnist:PATH" | "cifar10:PATH"
batch_size = 16

[algorithm]
name = "hogwild"        # `simasgd list` shows every algorithm, its parameters and its backends

[optimizer]
lr = 0.05
momentum = 0.0

[stop]
epsilon = 0.1           # target: 10% of the initial training loss (0: no target, run the budget)
max_updates = 4000      # budget: whichever of updates and seconds runs out first
max_time_s = 10
eval_every_updates = 50 # how often the loss is measured
'''


def init(path: Path = typer.Argument(Path("scenario.toml"), help="Where to write the example scenario."),
         force: bool = typer.Option(False, "--force", help="Overwrite PATH if it exists.")) -> None:
    """Write an example scenario (commented) to start from."""
    if path.exists() and not force:
        print(f"error: {path} exists; choose another PATH or pass --force", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT)
    output_file(path, "PATH")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(EXAMPLE)
    console().print(f"wrote {path}: `simasgd run {path}` runs it on the simulator, "
                    f"`simasgd config {path}` shows every key", markup=False)
