"""The scenario format's page: every table of :mod:`simasgd.spec.scenario` and the algorithms' parameters."""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

from pydantic import BaseModel

from simasgd.reference.common import (
    HEADER,
    cell,
    constraints,
    default_text,
    field_comments,
    toml,
    type_text,
    unit,
)
from simasgd.reference.key_docs import KEY_DOCS

# A complete scenario, shown first on the page; the docs test loads it, so it stays valid.
EXAMPLE = """\
name = "leashed-8-threads"
seed = 42
repeats = 10                      # independent runs, random streams derived from seed

[machine]                         # or preset = "xeon-e5-2687w-v2", or "this" (the calibrated profile)
sockets = 2
cores_per_socket = 8
threads_per_core = 2
local_latency_ns = 90
remote_latency_ns = 150
mem_bandwidth_gbs = 40            # per socket
link_bandwidth_gbs = 16           # between sockets

[workers]
count = 8
placement = "numa"                # "uma" | "numa" | "os" | [logical CPU ids]
stragglers = { count = 1, slowdown = 4.0 }

[workload]
model = "mlp"
layers = [64, 128, 10]
dataset = "digits"
batch_size = 64

[timing]                          # optional: left out, times come from the machine
gradient = { dist = "exponential", mean_s = 1e-3 }

[algorithm]
name = "leashed"
persistence = 1                   # failed CAS attempts before an update is dropped
backoff = { kind = "exponential", initial_s = 1e-6, max_s = 1e-4 }

[optimizer]
lr = 0.005
momentum = 0.0

[stop]
epsilon = 0.05                    # stop at 5% of the initial loss
max_time_s = 60
max_updates = 100000

[sim]
numerics = true                   # false: timing only (staleness, throughput), much faster
"""


def extra_allowed() -> dict[tuple[str, str], str]:
    """Values checked outside the field's type (names of presets, of algorithms, dataset forms)."""
    from simasgd.machines import machine, networks
    from simasgd.spec import algorithms

    q = ", ".join
    return {
        ("MachineConfig", "preset"): q(f'"{n}"' for n in machine.preset_names()),
        ("NetworkConfig", "preset"): q(f'"{n}"' for n in networks.PRESETS),
        ("AlgorithmConfig", "name"): q(f'"{n}"' for n in algorithms.names()),
        ("WorkloadConfig", "dataset"): '"digits", "synthetic", "mnist:PATH", "cifar10:PATH"',
    }


def models_in(ann: Any) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for a in typing.get_args(ann) for m in models_in(a)]


def tables() -> list[tuple[str, type[BaseModel]]]:
    """(table, model) of every table, depth first; a model used in several places (a distribution) once,
    under its own heading, and the algorithm's backoff with the algorithms."""
    from simasgd.spec import scenario

    out: list[tuple[str, type[BaseModel]]] = [("top level", scenario.Scenario)]

    def walk(prefix: str, model: type[BaseModel]) -> None:
        for name, f in model.model_fields.items():
            subs = models_in(f.annotation)
            if subs and all(issubclass(m, scenario.AlgorithmConfig) for m in subs):
                subs = [scenario.AlgorithmConfig]  # one model per algorithm: documented as one table
            for sub in subs:
                if sub in shared_models() or model is scenario.AlgorithmConfig:
                    continue
                key = f"{prefix}.{name}" if prefix else name
                out.append((f"[{key}]", sub))
                walk(key, sub)

    walk("", scenario.Scenario)
    return out


def shared_models() -> dict[type[BaseModel], str]:
    """Models used in several places, documented once under their own anchor."""
    from simasgd.spec import scenario

    return {scenario.DistSpec: "distribution"}


def description(model: type[BaseModel], name: str, comments: dict[str, str]) -> str:
    f = model.model_fields[name]
    return f.description or comments.get(name) or KEY_DOCS.get(f"{model.__name__}.{name}", "")


def undescribed() -> list[str]:
    """Scenario keys with no description anywhere (the docs test requires none)."""
    from simasgd.spec import scenario

    out = []
    models: list[type[BaseModel]] = [m for _, m in tables()] + [*shared_models(), scenario.BackoffConfig]
    for model in models:
        comments = field_comments(model)
        for name, f in model.model_fields.items():
            if f.exclude or (model is scenario.Scenario and models_in(f.annotation)):
                continue
            if model is scenario.AlgorithmConfig:
                continue  # its parameters are described in simasgd/spec/algorithms.py
            if not description(model, name, comments):
                out.append(f"{model.__name__}.{name}")
    return out


def field_rows(model: type[BaseModel]) -> list[str]:
    comments, extra = field_comments(model), extra_allowed()
    rows = ["| key | type | default | unit | allowed | description |", "|---|---|---|---|---|---|"]
    for name, f in model.model_fields.items():
        if f.exclude or (model.__name__ == "Scenario" and models_in(f.annotation)):
            continue  # tables have their own sections
        kind, allowed = type_text(f.annotation)
        shared = [shared_models()[m] for m in models_in(f.annotation) if m in shared_models()]
        if shared:
            kind = f"[{shared[0]}](#{shared[0]})"
        allowed = ", ".join(x for x in (allowed, extra.get((model.__name__, name), "")) if x)
        allowed = allowed or ", ".join(constraints(list(f.metadata)))
        if typing.get_origin(f.annotation) in (typing.Union, types.UnionType) and \
                type(None) in typing.get_args(f.annotation):
            kind += " (optional)"
        rows.append(f"| `{name}` | {kind} | {default_text(f)} | {unit(name)} | {cell(allowed)} | "
                    f"{cell(description(model, name, comments))} |")
    return rows


def algorithm_section() -> list[str]:
    from simasgd.spec import algorithms, scenario

    out = ["## `[algorithm]`", "",
           ("`name` (required where the table is given; default `\"sequential\"`) chooses the algorithm. "
            "Each algorithm takes only its own parameters: any other key is refused, naming the ones it takes. "
            "A parameter left out takes its default. [Algorithms](../algorithms.md) says what each one does "
            "and where it comes from."), "",
           "| `name` | algorithm | workers | parameters |", "|---|---|---|---|"]
    for d in algorithms.ALGORITHMS.values():
        if d.max_workers == d.min_workers:
            bound = f"{d.min_workers}"
        else:
            bound = f"≥ {d.min_workers}" + (f", ≤ {d.max_workers}" if d.max_workers is not None else "")
        params = ", ".join(f"`{p}`" for p in d.param_names) or "—"
        out.append(f"| `{d.name}` | {cell(d.title)} | {bound} | {params} |")
    out += ["", "| parameter | of | type | default | allowed | description |", "|---|---|---|---|---|---|"]
    rows: dict[algorithms.Param, list[str]] = {}  # one row per parameter definition, with its algorithms
    for d in algorithms.ALGORITHMS.values():
        for p in d.params:
            rows.setdefault(p, []).append(d.name)
    for p, users in rows.items():
        kind, allowed = type_text(scenario.ALGORITHM_MODELS[users[0]].model_fields[p.name].annotation)
        if p.allowed:
            allowed = " | ".join(toml(a) for a in p.allowed)
        if p.name == "persistence":
            kind, allowed = "integer or \"inf\"", "≥ 0, \"inf\""
        if p.name == "backoff":
            kind = "string or [table](#backoff)"
        of = ", ".join(f"`{u}`" for u in users)
        out.append(f"| `{p.name}` | {of} | {kind} | `{toml(p.default)}` | {cell(allowed)} | {cell(p.doc)} |")
    out += ["", "### `backoff` {#backoff}", "",
            "`backoff = \"exponential\"` is short for `backoff = { kind = \"exponential\" }`; the table's keys:", ""]
    return out + field_rows(scenario.BackoffConfig)


def scenario_page() -> str:
    from simasgd.spec import scenario

    out = [HEADER + "# Scenario format", "",
           ("A scenario is one experiment in a TOML file: machine, workers, workload, timing, algorithm, "
            "optimizer, stop rule, repeats and seed. Every table and key below is optional unless marked "
            "*required*. A file is validated as a whole: each problem is reported on its own line naming the "
            "file, the key path and what is allowed. `-s workers.count=8` on the command line overrides any "
            "key by its dotted path; `simasgd validate FILE` checks a file without running it. Relative paths "
            "in the file resolve against the file's folder."), "",
           ("Units follow the key's suffix: `_s` seconds, `_ns` nanoseconds, `_us` microseconds, "
            "`_gbs` GB/s (10⁹ bytes/s), `_gbps` Gb/s (line rate, bits), `_ghz` GHz, `_mb`/`_kb` MB/KB."), "",
           "## Example", "", "```toml", EXAMPLE.rstrip(), "```", ""]
    for table, model in tables():
        if model is scenario.AlgorithmConfig:
            out += [*algorithm_section(), ""]
            continue
        out += [f"## `{table}`" if table.startswith("[") else f"## {table.capitalize()}", ""]
        if model.__doc__ is not None:
            out += [" ".join((inspect.getdoc(model) or "").split()), ""]
        out += [*field_rows(model), ""]
    for model, anchor in shared_models().items():
        out += [f"## {anchor.capitalize()} {{#{anchor}}}", "",
                " ".join((inspect.getdoc(model) or "").split()) + " Written inline, e.g. "
                "`gradient = { dist = \"exponential\", mean_s = 1e-3 }`.", ""]
        out += [*field_rows(model), ""]
    return "\n".join(out).rstrip() + "\n"
