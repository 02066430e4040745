"""Backend ``cpu``: the scenario run for real on OS threads (see :mod:`executors.cpu.runner`)."""

from __future__ import annotations

from executors.cpu.runner import NAME, ExecutorError, run_workload
from executors.cpu.wiring import TABLE
from simasgd import algorithms, metadata
from simasgd.progress import Advance
from simasgd.results import RunResult
from simasgd.scenario import Scenario

ALGORITHMS = frozenset(TABLE)  # one row per algorithm in executors/cpu/wiring.py
MEASURES_HOST = True   # real threads on this host: its timings are this machine's
NEEDS_PROFILE = False  # it measures; it reads no calibrated profile

__all__ = ["NAME", "ALGORITHMS", "MEASURES_HOST", "NEEDS_PROFILE", "ExecutorError", "run_once"]


def run_once(scenario: Scenario, run: int, advance: Advance | None = None) -> RunResult:
    algorithms.require(NAME, scenario.algorithm.name, ALGORITHMS)
    from simasgd.workloads import build_workload, check_backend

    check_backend(scenario.workload, NAME)  # model = "torch": its Python kernels cannot run in nopython loops
    wl = build_workload(scenario.workload, scenario.seed, scenario.base_dir)
    start = metadata.host_state()  # around the run, not in the worker loops: other load skews the timings
    result = run_workload(scenario, run, wl, advance)
    end = metadata.host_state()
    result.metadata["host"] = {"run": run, "loadavg_start": start["loadavg"], "loadavg_end": end["loadavg"],
                               "affinity_start": start["affinity"], "affinity_end": end["affinity"]}
    return result
