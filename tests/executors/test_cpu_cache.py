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
from typing import Any

import pytest
from numba import njit

from executors.calibration import gradient
from executors.cpu import lockfree, locks, lopez, wiring
from executors.kernel import never_over
from simasgd.numerics.workloads import kernels
from simasgd.numerics.workloads.constant import ConstWorkload, const_grad

ROOT = Path(__file__).resolve().parents[2]

# Every algorithm once on a tiny workload, then the calibration's gradient timer; prints the seconds spent in
# the warm-ups (compile or cache load) and, for every cached numba function of the executor, how often this
# process loaded it from the cache (hits) and compiled it (misses). The workload is the one the other executor
# tests run that algorithm's loop on, so that they load what this compiled (a loop compiles once for each
# type of X and y): the quickstart's digits MLP (the types of every classification workload), and least
# squares (a float y: the hardware tests' convergence and bound checks, which run alone, where a compile
# keeps the other CPU idle) for the algorithms in REGRESSION; ssp and param_server run on both.
SCRIPT = textwrap.dedent("""
    import json, sys, time
    from numba.core.dispatcher import Dispatcher
    from executors.calibration import gradient
    from executors.cpu import runner
    from executors.cpu.wiring import IMPLEMENTATIONS
    from simasgd.spec.algorithms import ALGORITHMS
    from simasgd.spec import loader
    from simasgd.numerics.workloads import build_workload

    warm = 0.0
    _warm_up = runner.warm_up
    def timed(*a, **k):
        global warm
        t = time.perf_counter()
        _warm_up(*a, **k)
        warm += time.perf_counter() - t
    runner.warm_up = timed
    MLP = {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits", "batch_size": 16}
    LSQ = {"model": "least_squares", "dataset": "synthetic", "features": 32, "samples": 2000, "batch_size": 16}
    REGRESSION = {"sync": [LSQ], "backup": [LSQ], "keuper": [LSQ], "simuparallel": [LSQ], "easgd": [LSQ],
                  "eawild": [LSQ], "ssp": [MLP, LSQ], "param_server": [MLP, LSQ]}
    for alg in IMPLEMENTATIONS:  # every algorithm of the cpu backend, at 2 workers where its definition allows
        d = ALGORITHMS[alg]
        for workload in REGRESSION.get(alg, [MLP]):
            sc = loader.from_dict({"name": "tiny", "seed": 1,
                                   "workers": {"count": max(d.min_workers, d.max_workers or 2)},
                                   "workload": workload, "algorithm": {"name": alg}, "optimizer": {"lr": 0.01},
                                   "stop": {"max_updates": 20, "max_time_s": 10}, "cpu": {"pin": False}})
            wl = build_workload(sc.workload, sc.seed)
            runner.run_workload(sc, 0, wl)
            if workload is MLP:
                mlp = sc.workload
    t = time.perf_counter()
    gradient.gradient_times(mlp, 0, None, 0.01)  # the MLP's, as calibrate --quick on the quickstart times it
    warm += time.perf_counter() - t
    stats = {}
    for name, module in list(sys.modules.items()):
        if name.startswith("executors."):
            for f in vars(module).values():
                if isinstance(f, Dispatcher) and type(f._cache).__name__ == "FunctionCache":  # cache=True
                    s = f.stats
                    stats[f"{f.py_func.__module__}.{f.py_func.__qualname__}"] = (sum(s.cache_hits.values()),
                                                                               sum(s.cache_misses.values()))
    print(json.dumps({"warm_up_s": warm, "stats": stats}))
""")


def _name(dispatcher: Any) -> str:
    f = dispatcher.py_func
    return f"{f.__module__}.{f.__qualname__}"


def _version(dispatcher: Any) -> str:
    """The function's ``kernels_version`` closure cell: part of numba's cache key."""
    f = dispatcher.py_func
    (version,) = [c.cell_contents for v, c in zip(f.__code__.co_freevars, f.__closure__, strict=True)
                  if v == "kernels_version"]
    return str(version)


@pytest.mark.slow
def test_a_second_process_loads_every_loop_from_the_cache() -> None:
    # The checkout's own cache, as a user's second run finds it: where an earlier process (a test, or a
    # run before this session) compiled the loops already, the first process here loads them too. A
    # compile in the second process, of any cached function of the executor, is what must not happen;
    # numba counts it per function (a miss), whatever other processes write to the cache meanwhile.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    reports = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
        reports.append(json.loads(p.stdout.strip().splitlines()[-1]))
    print("warm-up (compile or cache load) s: first process {:.2f}, second {:.2f}".format(
        *(r["warm_up_s"] for r in reports)))
    stats = reports[1]["stats"]
    compiled = sorted(name for name, (_, misses) in stats.items() if misses)
    assert not compiled, f"the second process compiled {compiled}"
    loaded = {name for name, (hits, _) in stats.items() if hits}
    expected = {_name(e.loop) for e in wiring.IMPLEMENTATIONS.values()} | {_name(gradient.time_gradient)}
    assert expected <= loaded, f"not loaded from the cache: {sorted(expected - loaded)}"


def test_production_loops_are_cached_and_custom_kernels_get_the_same_code() -> None:
    # Real workloads run the cached loops; a test kernel runs the same bytecode, cached apart: its own files
    # (named by the kernel too), its own key (the kernel's name and file in the version cell).
    for name, loop in wiring.LOOPS.items():
        assert wiring.loop_for(name, kernels.loss_and_grad) is loop, name
        assert loop._cache.__class__.__name__ == "FunctionCache", name  # cache=True
        custom = wiring.loop_for(name, const_grad)
        assert custom is not loop and custom.py_func.__code__ is loop.py_func.__code__, name
        assert custom._cache.__class__.__name__ == "FunctionCache", name
        assert custom.py_func.__qualname__ == f"{loop.py_func.__qualname__}.const_grad", name
        assert _version(custom).startswith(_version(loop) + "+"), name
        assert "simasgd.numerics.workloads.constant.const_grad:" in _version(custom), name
        assert custom.py_func.__globals__["loss_and_grad"] is const_grad, name
        if "grad_over_theta" in loop.py_func.__code__.co_names:  # a kernel we do not know never gets θ as g
            assert custom.py_func.__globals__["grad_over_theta"] is never_over, name
        assert wiring.loop_for(name, const_grad) is custom, name  # built once per kernel
    assert {locks.run_locked, lockfree.run_leashed, lopez.run_lopez} <= set(wiring.LOOPS.values())
    over = {n for n, loop in wiring.LOOPS.items() if "grad_over_theta" in loop.py_func.__code__.co_names}
    assert {"mutex", "rwlock", "hogwild", "ssp", "param_server"} <= over, over
    assert ConstWorkload().kernel is const_grad


def test_a_kernel_built_in_a_function_gets_an_uncached_copy() -> None:
    # Its closure's values are in no file: a cache key from its name and file would not tell two of them apart.
    def make(g: float) -> Any:
        @njit(cache=True)
        def own(theta: Any, X: Any, y: Any, idx: Any, grad_out: Any, shape: Any) -> float:
            grad_out[:] = g
            return 0.0
        return own

    for name, loop in wiring.LOOPS.items():
        custom = wiring.loop_for(name, make(1.0))
        assert custom._cache.__class__.__name__ == "NullCache", name
        assert custom.py_func.__qualname__ == loop.py_func.__qualname__, name
        assert custom.py_func.__closure__ is loop.py_func.__closure__, name
