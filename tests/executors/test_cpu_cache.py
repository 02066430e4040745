"""The executor's numba loops load from the on-disk cache in a new process.

Each loop calls ``kernels.loss_and_grad`` as a global (numba caches that by
source); a dispatcher passed as an argument would key the cache by its memory
address: a recompile, and one more cache file, in every process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from executors.cpu import leashed, loops, lopez, wiring
from executors.kernel import never_over
from simasgd.workloads import kernels
from simasgd.workloads.constant import ConstWorkload, const_grad

ROOT = Path(__file__).resolve().parents[2]
# Cache files of these modules are the executor's (numba names them module.qualname-line...).
EXECUTOR_MODULES = ("loops.", "leashed.", "lopez.", "snapshot.", "shared.", "gradient.", "steps.", "atomics.", "update_rule.")

# Every algorithm once on a tiny least-squares workload,
# then the calibration's gradient timer; prints the seconds spent in the warm-ups (compile or cache load).
SCRIPT = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    from executors.calibration import gradient
    from executors.cpu import runner
    from executors.cpu.wiring import TABLE
    from simasgd.algorithms import ALGORITHMS
    from simasgd import loader
    from simasgd.workloads import build_workload

    warm = 0.0
    _warm_up = runner.warm_up
    def timed(*a, **k):
        global warm
        t = time.perf_counter()
        _warm_up(*a, **k)
        warm += time.perf_counter() - t
    runner.warm_up = timed
    for alg in TABLE:  # every algorithm of the cpu backend, at 2 workers where its definition allows
        d = ALGORITHMS[alg]
        sc = loader.from_dict({"name": "tiny", "seed": 1, "workers": {"count": max(d.min_workers, d.max_workers or 2)},
                               "workload": {"model": "least_squares", "batch_size": 4},
                               "algorithm": {"name": alg}, "optimizer": {"lr": 0.01},
                               "stop": {"max_updates": 20, "max_time_s": 10}, "cpu": {"pin": False}})
        wl = build_workload(sc.workload, sc.seed)
        runner.run_workload(sc, 0, wl)
    t = time.perf_counter()
    gradient.gradient_times(sc.workload, 0, None, 0.01)
    warm += time.perf_counter() - t
    print(json.dumps({"warm_up_s": warm}))
""")


def _cache_files(cache: Path) -> set[str]:
    return {str(p.relative_to(cache)) for p in cache.rglob("*")
            if p.suffix in (".nbi", ".nbc") and p.name.startswith(EXECUTOR_MODULES)}


@pytest.mark.slow
def test_a_second_process_loads_every_loop_from_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "numba-cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    files, seconds = [], []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
        seconds.append(json.loads(p.stdout.strip().splitlines()[-1])["warm_up_s"])
        files.append(_cache_files(cache))
    print(f"warm-up (compile or cache load) s: first process {seconds[0]:.2f}, second {seconds[1]:.2f}")
    assert files[0], "the first process wrote no executor cache files (is NUMBA_CACHE_DIR honoured?)"
    assert files[1] == files[0], f"the second process added {sorted(files[1] - files[0])}"


def test_production_loops_are_cached_and_custom_kernels_get_the_same_code() -> None:
    # Real workloads run the cached loops; a test kernel runs the same bytecode, uncached.
    for name, loop in wiring.LOOPS.items():
        assert wiring.loop_for(name, kernels.loss_and_grad) is loop, name
        assert loop._cache.__class__.__name__ == "FunctionCache", name  # cache=True
        custom = wiring.loop_for(name, const_grad)
        assert custom is not loop and custom.py_func.__code__ is loop.py_func.__code__, name
        assert custom.py_func.__globals__["loss_and_grad"] is const_grad, name
        if "grad_over_theta" in loop.py_func.__code__.co_names:  # a kernel we do not know never gets θ as g
            assert custom.py_func.__globals__["grad_over_theta"] is never_over, name
        assert wiring.loop_for(name, const_grad) is custom, name  # built once per kernel
    assert {loops.run_locked, leashed.run_leashed, lopez.run_lopez} <= set(wiring.LOOPS.values())
    over = {n for n, loop in wiring.LOOPS.items() if "grad_over_theta" in loop.py_func.__code__.co_names}
    assert {"mutex", "rwlock", "hogwild", "ssp", "param_server"} <= over, over
    assert ConstWorkload().kernel is const_grad
