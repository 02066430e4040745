"""Run a planned sweep into a results folder: skip what is done, store each task as it finishes.

Resuming reruns tasks recorded as failed (their error may have been fixed)
unless ``retry_failed=False``; finished successes are never rerun.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from simasgd.runs import progress
from simasgd.sweep.execution import Body, Outcome, failed_row, make_pool, run_task
from simasgd.sweep.plan import Plan, Task, measures_host
from simasgd.sweep.store import MANIFEST, SweepStore


@dataclass
class SweepReport:
    out: Path
    total: int          # tasks in the plan
    skipped: int        # already done before this call
    ok: int             # finished now
    failed: int         # failed now
    elapsed_s: float

    @property
    def remaining(self) -> int:
        return self.total - self.skipped - self.ok - self.failed


def run(plan: Plan, out: str | Path, *, jobs: int | None = None, dask: str | None = None,
        resume: bool = False, keep_runs: bool = False, retry_failed: bool = True,
        body: Body | None = None, show_progress: bool | None = None) -> SweepReport:
    """Run every task of ``plan`` not already stored in ``out``.

    ``body`` replaces the backend call (tests; it must be picklable for pools).
    """
    start = time.perf_counter()
    store = SweepStore(out)
    existed, new = store.root.exists(), not (store.root / MANIFEST).exists()
    store.open(plan.identity(), plan.base.to_dict(), resume)
    try:
        return _run(plan, store, start, jobs, dask, keep_runs, retry_failed, body, show_progress)
    except BaseException:
        with contextlib.suppress(OSError):
            if new and not any(store.tasks_dir.iterdir()):  # refused before any task (a bad --dask): no sweep
                store.tasks_dir.rmdir()
                (store.root / MANIFEST).unlink()
                if not existed:
                    store.root.rmdir()
        raise


def _run(plan: Plan, store: SweepStore, start: float, jobs: int | None, dask: str | None, keep_runs: bool,
         retry_failed: bool, body: Body | None, show_progress: bool | None) -> SweepReport:
    ok, failed = store.finished()
    skip = ok | (set() if retry_failed else failed)
    tasks = plan.tasks(keep_runs)
    todo = [t for t in tasks if t.task_id not in skip]
    report = SweepReport(store.root, len(tasks), len(tasks) - len(todo), 0, 0, 0.0)
    fn: Callable[[Task], Outcome] = partial(run_task, body=body) if body is not None else run_task
    if todo:
        pool = make_pool(jobs, dask, real=measures_host(plan.backend))
        cancel = True
        try:
            with _bar(f"sweep {plan.base.name} on {plan.backend}", len(todo), show_progress) as tick:
                for task, outcome in pool.imap_unordered(fn, todo):
                    good = _store(store, task, outcome)
                    report.ok += good
                    report.failed += not good
                    tick(good)
            cancel = False
        finally:
            # On an interrupt (Ctrl-C, SIGTERM turned into SystemExit) do not wait for tasks in flight.
            pool.close(cancel=cancel)
    report.elapsed_s = time.perf_counter() - start
    return report


def _store(store: SweepStore, task: Task, outcome: Outcome | BaseException) -> bool:
    """Write the task's row (its full run first, so a row implies its run folder); True if it succeeded."""
    if isinstance(outcome, BaseException):
        row = failed_row(task, outcome)
    else:
        row = outcome.row
        if outcome.result is not None:
            store.save_run(task.task_id, outcome.result)
    store.write(row)
    return row["status"] == "ok"


@contextmanager
def _bar(description: str, total: int, enabled: bool | None) -> Iterator[Callable[[bool], None]]:
    """Done / failed / remaining with an ETA on a terminal; silent elsewhere (like :func:`progress.bar`)."""
    if not (progress.interactive() if enabled is None else enabled):
        yield lambda ok: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.completed:.0f}/{task.total:.0f} finished ({task.fields[failed]} failed), "
                          "{task.fields[left]} left"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, transient=False, console=Console(stderr=True)) as p:
        bar = p.add_task(description, total=total, failed=0, left=total)
        state = {"failed": 0, "left": total}

        def tick(ok: bool) -> None:
            state["failed"] += not ok
            state["left"] -= 1
            p.update(bar, advance=1, failed=state["failed"], left=state["left"])

        yield tick
