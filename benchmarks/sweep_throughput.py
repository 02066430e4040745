"""Sweep throughput: cells per minute on the process pool at --jobs 1 and 2, and Dask's overhead.

Every task is the same fixed amount of CPU work — serial SGD on digits for a
fixed number of updates (epsilon out of reach, so no run stops early) — so
cells/minute measures the sweep machinery and the parallelism, not the
hyperparameters. Pool and cluster start-up (spawn, imports, numba cache
load) are included: that is what a user waits for.

    .venv/bin/python benchmarks/sweep_throughput.py [--cells 32] [--updates 60000] [--rounds 2]

A control comes first: the same tasks in one and in two bare processes (no
sweep code at all), i.e. the parallelism the machine offers at that moment —
on a machine shared with other work the pool cannot beat it.

Prints markdown tables: they replace the results section of benchmarks/README_sweep.md,
its heading naming the machine and the date (earlier results live in git).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simasgd.sweep import load, plan, runner


def scenario(updates: int) -> dict:
    return {"name": "bench-sweep", "seed": 7, "repeats": 1,
            "workload": {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits", "batch_size": 32},
            "optimizer": {"lr": 0.01},
            "stop": {"epsilon": 1e-9, "max_updates": updates, "max_time_s": 1e6, "eval_every_updates": updates}}


def measure(p: plan.Plan, label: str, **kw: object) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        rep = runner.run(p, Path(tmp) / "s", show_progress=False, **kw)
        wall = time.perf_counter() - start
        df = load(Path(tmp) / "s")
    assert rep.ok == len(p.cells) and (df["updates"] == df["updates"].iloc[0]).all(), "every task the same work"
    workers = max(1, int(kw.get("jobs") or 1))  # type: ignore[call-overload]
    return {"label": label, "cells": rep.ok, "wall_s": wall, "cells_per_min": 60 * rep.ok / wall,
            "task_s": float(df["wall_s"].median()), "load": load_before,
            # Share of the workers' time spent inside tasks: what the sweep machinery loses is 1 - busy.
            "busy": float(df["wall_s"].sum()) / (workers * wall)}


_PLAIN = """
import sys, time
from simasgd.runs import backends
from simasgd.spec.scenario import Scenario
sc = Scenario.model_validate({scenario!r})
b = backends.load("serial")
b.run_once(sc, 0)  # warm-up, as a pool worker's first task would be
for r in range({tasks}):
    b.run_once(sc, r + 1)
"""


def plain_processes(updates: int, cells: int) -> tuple[float, float]:
    """Control: the same tasks in 1 and in 2 bare processes (no sweep code) — the parallelism available now."""
    env = {**os.environ, **{k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                             "NUMBA_NUM_THREADS")}}
    walls = []
    for procs in (1, 2):
        code = _PLAIN.format(scenario=scenario(updates), tasks=cells // procs)
        start = time.perf_counter()
        running = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(procs)]
        assert all(p.wait() == 0 for p in running)
        walls.append(time.perf_counter() - start)
    return walls[0], walls[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=32)
    ap.add_argument("--updates", type=int, default=60000)  # ~1.5 s a task: start-up is amortised
    ap.add_argument("--rounds", type=int, default=1, help="repeat the three measurements (a shared machine is noisy)")
    args = ap.parse_args()
    lrs = ",".join(f"{0.0001 * (i + 1):.4f}" for i in range(args.cells))
    p = plan.from_data(scenario(args.updates), [f"optimizer.lr={lrs}"], backend="serial")
    print("| round | executor | cells | wall [s] | cells/min | median task [s] | workers busy | speed-up vs pool "
          "jobs 1 | vs pool jobs 2 | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k in range(args.rounds):
        load = os.getloadavg()[0]
        one, two = plain_processes(args.updates, args.cells)
        rows = [{"label": "control: 1 bare process", "cells": args.cells, "wall_s": one,
                 "cells_per_min": 60 * args.cells / one, "task_s": math.nan, "load": load, "busy": math.nan},
                {"label": "control: 2 bare processes", "cells": args.cells, "wall_s": two,
                 "cells_per_min": 60 * args.cells / two, "task_s": math.nan, "load": load, "busy": math.nan},
                measure(p, "pool --jobs 1", jobs=1), measure(p, "pool --jobs 2", jobs=2),
                measure(p, "dask local, 2 workers", jobs=2, dask="local")]
        base, pool2 = rows[2]["cells_per_min"], rows[3]["cells_per_min"]
        for r in rows:
            busy = "–" if math.isnan(r["busy"]) else f"{100 * r['busy']:.0f}%"
            task = "–" if math.isnan(r["task_s"]) else f"{r['task_s']:.2f}"
            print(f"| {k + 1} | {r['label']} | {r['cells']} | {r['wall_s']:.1f} | {r['cells_per_min']:.1f} "
                  f"| {task} | {busy} | {r['cells_per_min'] / base:.2f}x | {r['cells_per_min'] / pool2:.2f}x "
                  f"| {r['load']:.1f} |", flush=True)


def overhead(cells: int) -> None:
    """Per-task cost of the machinery alone: tasks of one SGD update, after a warm-up sweep in each executor."""
    lrs = ",".join(f"{0.0001 * (i + 1):.4f}" for i in range(cells))
    p = plan.from_data(scenario(1), [f"optimizer.lr={lrs}"], backend="serial")
    print("\n| executor | tiny tasks | wall [s] | ms per task (incl. start-up) | load avg |")
    print("|---|---|---|---|---|")
    for label, kw in (("in process (--jobs 0)", {"jobs": 0}), ("pool --jobs 2", {"jobs": 2}),
                      ("dask local, 2 workers", {"jobs": 2, "dask": "local"})):
        r = measure(p, label, **kw)
        print(f"| {label} | {r['cells']} | {r['wall_s']:.1f} | {1000 * r['wall_s'] / r['cells']:.1f} "
              f"| {r['load']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
    overhead(200)
