"""docs/profile.md: the calibrated machine profile's format, from the typed tables of
:mod:`simasgd.machines.profile_model` (each table's docstring, each key's type, unit and description), the format's
version and the keys older versions named otherwise."""

from __future__ import annotations

import datetime
import inspect

from simasgd.machines import profile_model as pm
from simasgd.reference.common import HEADER, cell, type_text, unit

INTRO = """\
`simasgd calibrate --out profiles/this.toml` measures this machine with
micro-benchmarks — never with the algorithm runs the simulation will be
compared with — and writes one TOML file. `[machine] preset = "this"` reads
it (as does a scenario without `[machine]` where the file exists; the
environment variable `SIMASGD_PROFILE` names another file): the `[machine]`
table becomes the simulated machine, and the simulator finds the
measurements below in the other tables. [The simulator's model](model.md)
says what each mechanism does with them.

Times are seconds unless the key says `_ns` or `_us`; bandwidths are GB/s (10⁹ bytes
per second, bytes read plus bytes written). One quantity has one name from
the calibrator to the step it times: `read` (a copy of θ), `update`
(θ −= η·g), `fresh` (Leashed-SGD's θ − η·g into another vector). A key the
simulator needs but the profile lacks switches the mechanism off (the model
falls back to a simpler rate; the run warns, naming the keys), and keys no
table declares (those of mechanisms removed from the model) are kept and
ignored, so older profiles keep working.

Every timed measurement with threads starts only once the process's other
threads are idle (a BLAS pool left spinning by an earlier call would
otherwise take the timed threads' CPUs). Calibrate on a quiet machine for a
quiet profile: other load shows in `[tick]`, `[cas]` and
`[calibration] loadavg`.

The format is simasgd's own: `simasgd/machines/profile_model.py` declares every table
(this page is generated from it), `simasgd/machines/profile.py` reads, writes, keys
workloads and digests the file; the measurements come from
`executors/calibration/`, one module per table."""

# Each table's name as the page heads it (a workload's gradient table is one per workload).
HEADING = {"gradient": 'gradient."<key>"'}


def _doc(cls: type) -> str:
    return inspect.cleandoc(cls.__doc__ or "")


def _keys(cls: type[pm.Table]) -> list[str]:
    rows = []
    for name, info in cls.model_fields.items():
        ann = info.annotation
        kind, _ = type_text(ann)
        if kind == "table" and name not in ("gradient_flops_per_s",):
            continue  # a table inside it: its own section
        kind = kind.replace(f"{datetime.datetime}", "date-time")
        rate = "1/s" if name.endswith("_per_s") else unit(name)  # a count a second, not seconds
        rows.append(f"| `{name}` | {kind} | {rate} | {cell(info.description or '')} |")
    rows += [f"| {', '.join(f'`{k}`' for k in keys.split(', '))} |  |  | {cell(meaning)} |"
             for keys, meaning in cls.KEYS.items()]
    return ["| key | type | unit | meaning |", "|---|---|---|---|", *rows] if rows else []


def _section(name: str, cls: type[pm.Table], level: int) -> list[str]:
    title = f" — {cls.TITLE}" if cls.TITLE else ""
    out = ["", f"{'#' * level} `[{name}]`{title}", ""]
    if _doc(cls):
        out += [_doc(cls), ""]
    out += _keys(cls)
    for field, info in cls.model_fields.items():
        inner = info.annotation
        sub = next((a for a in getattr(inner, "__args__", (inner,)) if isinstance(a, type)
                    and issubclass(a, pm.Table)), None)
        if sub is not None:
            out += _section(f"{name}.{field}", sub, level + 1)
    return out


def _versions() -> list[str]:
    """How older versions read: the keys each version renamed and the tables it dropped."""
    rows = [f"| {v} | {', '.join(f'`{old}` → `{new}`' for old, new in names.items())} |"
            for v, names in sorted(pm.RENAMED.items())]
    rows += [f"| {v} | without {what}: in a profile of an older version they are ignored |"
             for v, what in sorted(pm.DROPPED.items())]
    return ["", "A profile of an older version reads as this version "
            "(`simasgd.machines.profile_model.migrate`): the keys a version renamed are read under their new names, "
            "and what a version dropped is ignored.", "",
            "| version | change |", "|---|---|", *sorted(rows, key=lambda r: int(r.split("|")[1]))]


def profile_page() -> str:
    lines = [HEADER.rstrip("\n"), "", "# Machine profile format", "", INTRO]
    for name, cls in pm.TABLES.items():
        lines += _section(HEADING.get(name, name), cls, 2)
        if name == "profile":
            lines += _versions()
            lines += ["", "Results of runs on preset `this` record the profile they read in `metadata.profile`: "
                      "`path`, `sha256` (of the file) and `created` (from `[calibration]`)."]
    return "\n".join(lines) + "\n"
