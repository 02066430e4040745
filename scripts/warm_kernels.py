"""Compile the project's numba kernels into numba's on-disk cache, once, in parallel jobs.

    .venv/bin/python scripts/warm_kernels.py [--jobs N]

On a fresh checkout nothing is in numba's cache: every process that first calls a kernel compiles it, and
processes started at the same time (the test suite's workers, a sweep's pool, a Dask cluster) each compile
the same kernels, since none has written them yet. This compiles each kernel once, with the types the runs
call it with (it runs them: a few updates of every model and dtype on the serial backend, every algorithm
of the cpu executor), split into jobs that compile different kernels. Later processes load them.
``scripts/test.sh`` runs it before the suite. Nothing here is timed or measured; it prints each job's wall
time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The workloads the runs build, by the types their kernels are compiled for (model, dataset, dtype, sparse):
# the loss-and-gradient, loss and prediction kernels dispatch on the model at run time, so one dense
# workload a dtype compiles the dense kernels of every model; sparse matrices are a type of their own.
WORKLOADS = [("mlp", "digits", "float64", False), ("mlp", "digits", "float32", False),
             ("least_squares", "synthetic", "float64", False), ("logreg", "synthetic", "float64", True),
             ("least_squares", "synthetic", "float64", True)]


def tiny(**over: object) -> dict[str, object]:
    doc: dict[str, object] = {"name": "warm", "seed": 1,
                              "workload": {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits",
                                           "batch_size": 16},
                              "optimizer": {"lr": 0.01},
                              "stop": {"max_updates": 20, "max_time_s": 10, "eval_every_updates": 10}}
    doc.update(over)
    return doc


def kernels() -> None:
    """The workloads' kernels, as a serial run calls them."""
    from simasgd.runs import backends
    from simasgd.spec import loader

    for model, dataset, dtype, sparse in WORKLOADS:
        wl = {"model": model, "dataset": dataset, "dtype": dtype, "batch_size": 16, "sparse": sparse,
              "features": 64, "samples": 200}
        if model == "mlp":
            wl["layers"] = [64, 32, 10]
        backends.load("serial").run_once(loader.from_dict(tiny(workload=wl)), 0)


def loops() -> None:
    """Every algorithm's loop of the cpu executor, and the calibration's gradient timer, on the digits MLP."""
    from executors.calibration import gradient
    from executors.cpu import runner
    from executors.cpu.wiring import IMPLEMENTATIONS
    from simasgd.numerics.workloads import build_workload
    from simasgd.spec import loader
    from simasgd.spec.algorithms import ALGORITHMS

    for alg in IMPLEMENTATIONS:
        d = ALGORITHMS[alg]
        sc = loader.from_dict(tiny(workers={"count": max(d.min_workers, d.max_workers or 2)},
                                   algorithm={"name": alg}, cpu={"pin": False}))
        runner.run_workload(sc, 0, build_workload(sc.workload, sc.seed))
    gradient.gradient_times(sc.workload, 0, None, 0.01)


JOBS = {"kernels": kernels, "loops": loops}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=min(len(JOBS), os.cpu_count() or 1),
                    help="processes (default: one a job, at most one a CPU)")
    ap.add_argument("--job", choices=sorted(JOBS), help=argparse.SUPPRESS)  # one job, in this process
    a = ap.parse_args(argv)
    if a.job:
        t = time.perf_counter()
        JOBS[a.job]()
        print(f"[warm_kernels] {a.job}: {time.perf_counter() - t:.0f} s", flush=True)
        return 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    names, rc = list(JOBS), 0
    for start in range(0, len(names), max(1, a.jobs)):
        procs = [subprocess.Popen([sys.executable, __file__, "--job", n], env=env)
                 for n in names[start:start + max(1, a.jobs)]]
        rc = max([rc, *(p.wait() for p in procs)])
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
