"""Task bodies standing in for a backend: fast, deterministic in the task's seed, picklable."""

from __future__ import annotations

import os
import time
from pathlib import Path

from simasgd.runs.results import RunResult, RunSummary, curve_frame, empty_updates
from simasgd.spec import seeds
from simasgd.sweep.plan import Task

BOOM_LR = 0.666  # a cell with this step size raises


def fake_body(task: Task) -> RunResult:
    """A result drawn from the task's own seed and repeat: equal seeds give equal rows."""
    sc = task.scenario
    if sc.optimizer.lr == BOOM_LR:
        raise RuntimeError(f"boom in {task.task_id}")
    x = float(seeds.rng(sc.seed, task.repeat, seeds.Role.TIMING).random())
    crashed = x < 0.1
    summary = RunSummary(run=task.repeat, updates=int(1000 * x) + 1, time_s=x + 0.5,
                         updates_to_eps=None if crashed else int(500 * x) + 1,
                         time_to_eps=None if crashed else x / sc.optimizer.lr,
                         crashed=crashed, not_reached=False, initial_loss=2.0, final_loss=x,
                         mean_staleness=float(sc.workers.count - 1), updates_per_s=1000.0)
    return RunResult(sc.to_dict(), "fake", [summary], empty_updates(),
                     curve_frame(task.repeat, [0.0, x], [0, 1], [2.0, x]))


def counting_body(task: Task) -> RunResult:
    """fake_body that leaves one file per call in $SWEEP_CALLS, so tests can count (re)runs."""
    folder = Path(os.environ["SWEEP_CALLS"])
    (folder / f"{task.task_id}.{os.getpid()}.{time.monotonic_ns()}").touch()
    return fake_body(task)


def locked_interval_body(task: Task) -> RunResult:
    """Records [start, end] of its (host-locked) run, to check real-backend tasks never overlap."""
    start = time.time()
    time.sleep(0.3)
    end = time.time()
    (Path(os.environ["SWEEP_CALLS"]) / f"{task.task_id}").write_text(f"{start} {end}")
    return fake_body(task)


def dying_body(task: Task) -> RunResult:
    """Kills its worker process outright (as a segfault in native code would) in the BOOM_LR cells."""
    if task.scenario.optimizer.lr == BOOM_LR:
        os._exit(3)
    return fake_body(task)


def thread_env(_task: object) -> tuple[str | None, str | None]:
    return os.environ.get("OPENBLAS_NUM_THREADS"), os.environ.get("NUMBA_NUM_THREADS")
