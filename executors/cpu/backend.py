"""Backend ``cpu``: the scenario run for real on OS threads (see :mod:`executors.cpu.runner`)."""

from __future__ import annotations

from executors.cpu.runner import NAME, ExecutorError, run_workload
from executors.cpu.wiring import TABLE
from simasgd import algorithms
from simasgd.progress import Advance
from simasgd.results import RunResult
from simasgd.scenario import Scenario

ALGORITHMS = frozenset(TABLE)  # one row per algorithm in executors/cpu/wiring.py

__all__ = ["NAME", "ALGORITHMS", "ExecutorError", "run_once"]


def run_once(scenario: Scenario, run: int, advance: Advance | None = None) -> RunResult:
    algorithms.require(NAME, scenario.algorithm.name, ALGORITHMS)
    from simasgd.workloads import build_workload

    wl = build_workload(scenario.workload, scenario.seed, scenario.base_dir)
    return run_workload(scenario, run, wl, advance)
