"""The backends' page: which algorithms each backend runs, and the parameter values it refuses."""

from __future__ import annotations

from simasgd.reference.common import HEADER, cell, toml


def backends_page() -> str:
    from simasgd.runs import backends
    from simasgd.spec import algorithms

    present = {name: backends.load(name) for name, ok in backends.available().items() if ok}
    out = [HEADER + "# Backend support", "",
           ("Which algorithms each backend implements (✓), and the parameter values it runs where it does not "
            "run every value. Anything else it refuses before a run starts, naming the backend, the key and the "
            "values it has: a backend never runs a parameter as something else. See [Backends](../backends.md) "
            "for what each one measures."), "",
           "| algorithm | " + " | ".join(f"`{n}`" for n in present) + " |",
           "|---|" + "---|" * len(present)]
    for a in algorithms.ALGORITHMS:
        marks = []
        for mod in present.values():
            runs_as = getattr(mod, "RUNS_AS", None)
            if a not in mod.ALGORITHMS:
                marks.append("")
            elif runs_as is not None and runs_as != a:
                marks.append(f"as `{runs_as}`")
            else:
                marks.append("✓")
        out.append(f"| `{a}` | " + " | ".join(marks) + " |")
    out += ["", "## Values a backend restricts", "", "| backend | algorithm | parameter | runs only | why |",
            "|---|---|---|---|---|"]
    for name, mod in present.items():
        why = getattr(mod, "WHY", {})
        for a, keys in getattr(mod, "VALUES", {}).items():
            for key, values in keys.items():
                reason = why.get(key, "") if isinstance(why, dict) else str(why)
                shown = ", ".join(toml(v) for v in values)
                choice = algorithms.ALGORITHMS[a].param(key).choice
                shown_key = f"{key}.{choice}" if choice else key
                out.append(f"| `{name}` | `{a}` | `{shown_key}` | {shown} | {cell(reason)} |")
    out += ["", "## Parameters that choose nothing on a backend", "",
            "| backend | algorithm | parameter | why |", "|---|---|---|---|"]
    for name, mod in present.items():
        for a, keys in getattr(mod, "MOOT", {}).items():
            for key, reason in keys.items():
                out.append(f"| `{name}` | `{a}` | `{key}` | {cell(str(reason))} |")
    return "\n".join(out + _traits(list(present))) + "\n"


def _traits(names: list[str]) -> list[str]:
    """The executor traits each backend declares (``TRAITS``): what ``[sim] traits`` may name."""
    from dataclasses import asdict

    from simasgd.runs import backends

    declared = {n: t for n in names if (t := backends.traits(n)) is not None}
    keys = list(asdict(next(iter(declared.values()))))
    out = ["", "## Executor traits", "",
           ("How each backend's workers read, wait on a lock, take the loss snapshot and book between cycles "
            "(`TRAITS`, [the model](../model.md#executor-traits-sim-traits)): the simulator models the backend "
            "`[sim] traits` names, and `compare --backends sim,X` names X. The others declare none: "
            + ", ".join(f"`{n}`" for n in names if n not in declared) + "."), "",
           "| backend | " + " | ".join(f"`{k}`" for k in keys) + " |", "|---|" + "---|" * len(keys)]
    for name, t in declared.items():
        out.append(f"| `{name}` | " + " | ".join(toml(v) for v in asdict(t).values()) + " |")
    return out
