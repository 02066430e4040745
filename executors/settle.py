"""Wait until this process's other threads are idle before timing anything.

Why: a BLAS library keeps its pool threads spinning after a multi-threaded
call (OpenBLAS's ``blas_thread_server`` calls ``sched_yield`` in a loop for
2^28 TSC cycles, about 0.1 s, before it sleeps). A loss evaluated with
multi-threaded BLAS right before the workers start (θ0's, or the previous run's
snapshots') leaves the server thread spinning through the start of a run that
may last a fraction of a second, on a worker's CPU: the workers then wait on
the run queue instead of running. So the cpu backend keeps BLAS
single-threaded around the whole run and waits here until the process is idle
at the start.

Linux only (``/proc/self/task``); elsewhere nothing is waited for.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TASKS = Path("/proc/self/task")


@dataclass(frozen=True)
class Settled:
    waited_s: float
    busy: list[str] = field(default_factory=list)  # "tid (comm)" still runnable at the timeout

    @property
    def timed_out(self) -> bool:
        return bool(self.busy)


def _state(stat: str) -> tuple[str, str]:
    """(comm, state) of a ``/proc/<pid>/task/<tid>/stat`` line; comm may hold spaces and parentheses."""
    lo, hi = stat.index("("), stat.rindex(")")
    return stat[lo + 1:hi], stat[hi + 2:hi + 3]


def runnable(tasks: Path = TASKS, me: int | None = None) -> list[str]:
    """This process's threads other than ``me`` (the caller) that are running or waiting for a CPU."""
    me = threading.get_native_id() if me is None else me
    out: list[str] = []
    try:
        entries = list(tasks.iterdir())
    except OSError:
        return out
    for d in entries:
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            comm, state = _state((d / "stat").read_text())
        except (OSError, ValueError):
            continue  # the thread ended while we looked
        if state == "R":
            out.append(f"{d.name} ({comm})")
    return out


def settle(timeout_s: float = 1.0, quiet_polls: int = 3, poll_s: float = 0.002, tasks: Path = TASKS) -> Settled:
    """Wait until no other thread of this process is runnable for ``quiet_polls`` polls in a row.

    Returns how long it waited and, when ``timeout_s`` ran out first, the threads that kept running."""
    t0 = time.perf_counter()
    quiet = 0
    busy: list[str] = []
    while True:
        busy = runnable(tasks)
        quiet = 0 if busy else quiet + 1
        waited = time.perf_counter() - t0
        if quiet >= quiet_polls:
            return Settled(waited)
        if waited >= timeout_s:
            return Settled(waited, busy)
        time.sleep(poll_s)
