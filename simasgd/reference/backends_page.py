"""The backends' page: which algorithms each backend runs, and the parameter values it refuses."""

from __future__ import annotations

from simasgd.reference.common import HEADER, cell, toml


def backends_page() -> str:
    from simasgd import algorithms, backends

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
    return "\n".join(out) + "\n"
