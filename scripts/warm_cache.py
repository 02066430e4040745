"""Compile the cpu executor's numba loops into the checkout's cache once, before the test suite runs.

A fresh clone has no compiled loops: the suite's workers would each compile the ones their first tests touch,
at the same time, the same functions several times over (about two minutes of one CPU for the whole set).
Compiled here once, split over ``--jobs`` processes by algorithm, every later process loads them
(``cache=True``; tests/executors/test_cpu_cache.py checks that a second process compiles nothing). A warm
cache costs a few seconds to check.

Run: ``.venv/bin/python scripts/warm_cache.py [--jobs N]`` (scripts/test.sh does, before pytest).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def warm(algorithms: list[str]) -> None:
    """Each algorithm's loop, at 2 workers where its definition allows, compiled (or loaded) by a short run."""
    from executors.cpu import runner
    from simasgd.numerics.workloads import build_workload
    from simasgd.spec import loader
    from simasgd.spec.algorithms import ALGORITHMS

    for alg in algorithms:
        d = ALGORITHMS[alg]
        sc = loader.from_dict({"name": "warm", "seed": 1, "workers": {"count": max(d.min_workers, d.max_workers or 2)},
                               "workload": {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits",
                                            "batch_size": 16},
                               "algorithm": {"name": alg}, "optimizer": {"lr": 0.01},
                               "stop": {"max_updates": 20, "max_time_s": 10}, "cpu": {"pin": False}})
        runner.run_workload(sc, 0, build_workload(sc.workload, sc.seed))


def warm_gradient() -> None:
    """The calibration's gradient timer (executors/calibration/gradient.py)."""
    from executors.calibration import gradient
    from simasgd.spec.scenario import WorkloadConfig

    gradient.gradient_times(WorkloadConfig(model="mlp", layers=[64, 32, 10], dataset="digits", batch_size=16),
                            0, None, 0.01)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: every CPU)")
    args = ap.parse_args()
    from executors.cpu.wiring import IMPLEMENTATIONS

    algorithms = sorted(IMPLEMENTATIONS)
    jobs = max(1, min(args.jobs, len(algorithms)))
    t = time.perf_counter()
    if jobs == 1:
        warm(algorithms)
        warm_gradient()
    else:
        import multiprocessing as mp

        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
            parts = [pool.submit(warm, algorithms[i::jobs]) for i in range(jobs)]
            grad = pool.submit(warm_gradient)
            for f in [*parts, grad]:
                f.result()
    print(f"numba cache: the cpu executor's {len(algorithms)} loops ready in {time.perf_counter() - t:.0f} s "
          f"({jobs} processes)", file=sys.stderr)


if __name__ == "__main__":
    main()
