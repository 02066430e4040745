"""The profile keys and mechanisms today's simulator reads on the fidelity corpus, machine by machine.

Every cell of every corpus machine is simulated briefly (timing only, ``--updates`` updates) on the
machine's profile with today's defaults; a sim result names the keys it read and the mechanisms that acted
(``metadata["model"]``, :mod:`simasgd.sim.model_record`). Their union over the cells is the model's size on
that machine: the count benchmarks/fidelity.md reports. ``[machine]``'s keys are counted apart: every
preset gives them too (topology, latency, bandwidth, the scheduler's quantum).

    .venv/bin/python benchmarks/profile_keys.py [--corpus corpus] [--machine NAME] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simasgd.corpus import score, store
from simasgd.machines.profile import to_toml

ROOT = Path(__file__).resolve().parents[1]


def model_of(entry: store.Entry, updates: int, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The union over ``entry``'s cells of the keys read and the mechanisms that acted."""
    from simasgd.runs import backends

    keys: set[str] = set()
    acted: set[str] = set()
    saved = os.environ.get("SIMASGD_PROFILE")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.toml"
        path.write_text(to_toml(entry.profile))
        os.environ["SIMASGD_PROFILE"] = str(path)
        try:
            for cell in entry.cells:
                sc = score.scenario_of(cell, {"numerics": False})
                sc = sc.model_copy(update={"stop": sc.stop.model_copy(update={"max_updates": updates}),
                                           "repeats": 1})
                model = backends.run(sc, "sim", repeats=1, out=Path(tmp) / cell.name).metadata["model"]
                keys.update(model["keys"])
                acted.update(model["mechanisms"])
                if progress is not None:
                    progress(cell.name)
        finally:
            if saved is None:
                os.environ.pop("SIMASGD_PROFILE", None)
            else:
                os.environ["SIMASGD_PROFILE"] = saved
    machine = sorted(k for k in keys if k.startswith("machine."))
    rest = sorted(k for k in keys if not k.startswith("machine."))
    return {"keys": rest, "machine_keys": machine, "mechanisms": sorted(acted)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, default=ROOT / "corpus")
    p.add_argument("--machine", nargs="*", default=None)
    p.add_argument("--updates", type=int, default=300, help="updates a cell is simulated for")
    p.add_argument("--json", type=Path, default=None, help="write the counts and lists here")
    args = p.parse_args(argv)
    out: dict[str, Any] = {}
    for path in store.machines(args.corpus):
        name = path.name.removesuffix(store.SUFFIX)
        if args.machine is not None and name not in args.machine:
            continue
        m = out[name] = model_of(store.load(path), args.updates)
        print(f"{name}: {len(m['mechanisms'])} mechanisms acted, {len(m['keys'])} profile keys read "
              f"(+ {len(m['machine_keys'])} of [machine])")
        print(f"  mechanisms: {', '.join(m['mechanisms'])}")
        print(f"  keys: {', '.join(m['keys'])}")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
