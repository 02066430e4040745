"""Backend ``cpu``: the scenario run for real on OS threads (see :mod:`executors.cpu.runner`)."""

from __future__ import annotations

from executors import c2c
from executors.cpu import TRAITS  # declared with the package: the simulator reads it without the executor
from executors.cpu.runner import NAME, ExecutorError, check_capacity, run_workload
from executors.cpu.wiring import IMPLEMENTATIONS
from simasgd.runs import metadata
from simasgd.runs.progress import Advance
from simasgd.runs.results import RunResult
from simasgd.spec import algorithms
from simasgd.spec.scenario import Scenario

ALGORITHMS = frozenset(IMPLEMENTATIONS)  # one row per algorithm in executors/cpu/wiring.py
MEASURES_HOST = True   # real threads on this host: its timings are this machine's
NEEDS_PROFILE = False  # it measures; it reads no calibrated profile

__all__ = ["ALGORITHMS", "MEASURES_HOST", "NAME", "NEEDS_PROFILE", "TRAITS", "ExecutorError", "run_once"]


def run_once(scenario: Scenario, run: int, advance: Advance | None = None) -> RunResult:
    algorithms.require(NAME, scenario.algorithm.name, ALGORITHMS)
    from simasgd.numerics.workloads import build_workload, check_backend

    check_backend(scenario.workload, NAME)  # model = "torch": its Python kernels cannot run in nopython loops
    wl = build_workload(scenario.workload, scenario.seed, scenario.base_dir)
    check_capacity(scenario, wl)  # before the probe and the threads: too many workers is refused in one line
    # Where the host has put the CPUs (a VM's CPUs move: executors/c2c.py), when lines move between workers.
    probe = c2c.latency_ns if scenario.workers.count > 1 else (lambda: None)
    start = metadata.host_state()  # around the run, not in the worker loops: other load skews the timings
    c2c_start = probe()
    result = run_workload(scenario, run, wl, advance)
    c2c_end = probe()
    end = metadata.host_state()
    result.metadata["host"] = {"run": run, "loadavg_start": start["loadavg"], "loadavg_end": end["loadavg"],
                               "affinity_start": start["affinity"], "affinity_end": end["affinity"]}
    if c2c_start is not None:
        result.metadata["host"] |= {"c2c_ns_start": c2c_start, "c2c_ns_end": c2c_end}
    return result
