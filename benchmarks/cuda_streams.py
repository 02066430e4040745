"""Updates/s, staleness and time to ε per CUDA stream count — measured on a GPU, predicted by the simulator.

One table per backend, same columns, so the two are compared with one command::

    # on a machine with an NVIDIA GPU (numba.cuda): calibrate the GPU model, then measure and predict
    simasgd calibrate --gpu --out profiles/this.toml
    .venv/bin/python benchmarks/cuda_streams.py --backends cuda,sim -s machine.preset=this-gpu \\
        --out benchmarks/cuda_streams

    # anywhere: the simulator's prediction for the paper's V100 (timing only: no time to ε)
    .venv/bin/python benchmarks/cuda_streams.py --backends sim --algorithms sync,lopez,hogwild \\
        -s sim.numerics=false -s stop.max_time_s=0.1 --out /tmp/gpu_streams

The scenario is ``scenarios/lopez2020/gpu_streams.toml`` (Lopez et al. 2020 §IV-B: the CNN,
batch 32, lr 1e-3, momentum 0.99); ``-s`` overrides apply to every cell (the sim backend reads
``machine.preset``; the cuda backend ignores it and uses the GPU it runs on). Each cell's
results folder is kept under ``--out/<backend>/<algorithm>-<streams>``, so ``simasgd compare``
and ``simasgd plot`` work on any pair. ``--out`` gets ``<backend>.md`` per backend, with two
backends ``compare.md`` (the second's figure over the first's), and ``cells.json``: every cell's figures
as a ``cuda_streams`` record (``record.py``: schema version, commit, machine, date).

Algorithms: the cuda backend implements ``sync``, ``lopez``, ``hogwild`` and ``leashed``; a cell a
backend lacks is written as "not implemented", not skipped silently.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # record.py, also when this file is imported by path
import record

SCHEMA, SCHEMA_VERSION = "cuda_streams", 1

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios/lopez2020/gpu_streams.toml"
# updates/s: versions of θ a second; gradients/s: applied gradients a second (sync: streams × updates/s;
# lopez: gradients the master's steps took in, while its steps do not wait for them).
COLUMNS = ("updates/s", "gradients/s", "mean staleness", "p95 staleness", "time to ε (s)", "reached ε")


def cell(backend: str, algorithm: str, streams: int, overrides: list[str], repeats: int | None,
         out: Path) -> dict[str, Any]:
    """One (backend, algorithm, streams) cell: run it, keep its folder, summarise the runs."""
    import numpy as np

    from simasgd.runs import backends
    from simasgd.spec import loader

    impl = backends.load(backend)
    if algorithm not in impl.ALGORITHMS:
        return {"note": "not implemented"}
    sc = loader.load(SCENARIO, [*overrides, f"algorithm.name={algorithm}", f"workers.count={streams}"])
    r = backends.run(sc, backend, repeats=repeats, out=out / backend / f"{algorithm}-{streams}")
    u = r.updates[r.updates["applied"]]
    eps = [s.time_to_eps for s in r.runs if s.time_to_eps is not None]
    grads = [int(u["run"].eq(s.run).sum()) / s.time_s for s in r.runs if s.time_s > 0]
    return {"updates/s": float(np.mean([s.updates_per_s for s in r.runs])),
            "gradients/s": float(np.mean(grads)) if grads else math.nan,
            "mean staleness": float(u["staleness"].mean()) if len(u) else math.nan,
            "p95 staleness": float(np.percentile(u["staleness"], 95)) if len(u) else math.nan,
            "time to ε (s)": float(np.median(eps)) if eps else math.nan,
            "reached ε": f"{len(eps)}/{len(r.runs)}" if sc.sim.numerics or backend != "sim" else "— (timing only)",
            "device": r.metadata.get("device")}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "—" if math.isnan(v) else (f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}")
    return str(v)


def table(rows: dict[tuple[str, int], dict[str, Any]], title: str) -> str:
    lines = [f"### {title}", "", "| algorithm | streams | " + " | ".join(COLUMNS) + " |",
             "|---|---:|" + "---:|" * len(COLUMNS)]
    for (alg, n), c in rows.items():
        vals = [c.get("note", "")] + [""] * (len(COLUMNS) - 1) if "note" in c else [_fmt(c[k]) for k in COLUMNS]
        lines.append(f"| {alg} | {n} | " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


def ratios(a: dict[tuple[str, int], dict[str, Any]], b: dict[tuple[str, int], dict[str, Any]],
           names: tuple[str, str]) -> str:
    """``names[1]`` over ``names[0]`` per cell, for the numeric columns."""
    num = ("updates/s", "gradients/s", "mean staleness", "time to ε (s)")
    lines = [f"### {names[1]} / {names[0]}", "", "| algorithm | streams | " + " | ".join(num) + " |",
             "|---|---:|" + "---:|" * len(num)]
    for key, x in a.items():
        y = b.get(key, {})
        vals = []
        for k in num:
            if "note" in x or "note" in y or not x.get(k) or math.isnan(x[k]) or math.isnan(y.get(k, math.nan)):
                vals.append("—")
            else:
                vals.append(f"{y[k] / x[k]:.2f}")
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="cuda,sim", help="comma-separated: cuda, sim (first = reference)")
    ap.add_argument("--algorithms", default="sync,lopez", help="comma-separated registry names")
    ap.add_argument("--streams", default="1,2,4,8,16,32", help="comma-separated stream (worker) counts")
    ap.add_argument("--repeats", type=int, default=None, help="runs per cell (default: the scenario's)")
    ap.add_argument("-s", dest="overrides", action="append", default=[], help="dotted override, every cell")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/cuda_streams"))
    args = ap.parse_args()
    from simasgd.spec import algorithms

    names = args.backends.split(",")
    streams = [int(x) for x in args.streams.split(",")]
    tables: dict[str, dict[tuple[str, int], dict[str, Any]]] = {}
    for b in names:
        rows: dict[tuple[str, int], dict[str, Any]] = {}
        for alg in args.algorithms.split(","):
            for n in streams:
                if algorithms.check(alg, _Defaults(alg), n):  # e.g. lopez needs a master and a worker
                    rows[(alg, n)] = {"note": f"{alg} needs other stream counts"}
                    continue
                rows[(alg, n)] = cell(b, alg, n, args.overrides, args.repeats, args.out)
                print(b, alg, n, {k: _fmt(v) for k, v in rows[(alg, n)].items()}, flush=True)
        tables[b] = rows
        device = next((c.get("device") for c in rows.values() if c.get("device")), None)
        title = f"{b}" + (f" — {device.get('device')}" if isinstance(device, dict) else "")
        (args.out / f"{b}.md").write_text(table(rows, title))
    if len(names) == 2:
        (args.out / "compare.md").write_text(ratios(tables[names[0]], tables[names[1]], (names[0], names[1])))
    cells = {b: {f"{a}-{n}": c for (a, n), c in t.items()} for b, t in tables.items()}
    record.write(args.out / "cells.json", SCHEMA, SCHEMA_VERSION,
                 {"backends": names, "overrides": args.overrides,
                  "cells": json.loads(json.dumps(cells, default=str))})  # NaN stays NaN; devices as text
    for b in names:
        print((args.out / f"{b}.md").read_text())
    if len(names) == 2:
        print((args.out / "compare.md").read_text())


class _Defaults:
    """An algorithm's registry defaults, for :func:`simasgd.spec.algorithms.check` (cells set no parameters)."""

    def __init__(self, name: str):
        from simasgd.spec import algorithms

        self.d = algorithms.ALGORITHMS[name]

    def param(self, key: str) -> Any:
        return self.d.param(key).default


if __name__ == "__main__":
    main()
