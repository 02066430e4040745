"""Process pools for independent work (a sweep's tasks, a run's repeats): spawned workers with one
BLAS/OpenMP/numba thread each, that exit when the process that started them is gone.

Spawn, not fork: the parent may hold numba's or BLAS's threads, which a forked child would inherit
half-initialised. The pool supplies the parallelism, so each worker computes on one thread.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
CONTEXT = "spawn"
JOBS_ENV = "SIMASGD_JOBS"  # the processes to use where none are asked for (a shared machine; the tests: 1)


class JobsError(ValueError):
    pass


def default_jobs() -> int:
    """The processes to use where none are asked for: ``$SIMASGD_JOBS`` where it is set, else the CPUs this
    process may use (its affinity)."""
    text = os.environ.get(JOBS_ENV, "").strip()
    if text:
        try:
            n = int(text)
        except ValueError:
            n = 0
        if n < 1:
            raise JobsError(f"{JOBS_ENV}={text!r}: give a number of processes, 1 or more")
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def in_worker() -> bool:
    """Whether this process is itself a multiprocessing child (a pool's worker): its parent supplies the
    parallelism, so work it starts runs here rather than on a pool of its own."""
    return multiprocessing.parent_process() is not None


@contextmanager
def one_thread_children() -> Iterator[None]:
    """Processes spawned inside the block start with one BLAS/OpenMP/numba thread each.

    Set in the environment they are spawned with (their imports read it before any task runs),
    then restored, so the calling process keeps its own settings. Keys the user set are left alone.
    """
    added = [k for k in THREAD_ENV if k not in os.environ]
    os.environ.update({k: "1" for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def watch_parent(parent: int) -> None:
    """In a pool worker: exit when the process that started it is gone (killed with SIGKILL, say).

    Without this an orphaned worker finishes its task and then waits for work forever.
    """
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="simasgd-watch-parent", daemon=True).start()


def _start(parent: int, then: Callable[..., None] | None, args: tuple[Any, ...]) -> None:
    watch_parent(parent)
    if then is not None:
        then(*args)


def spawn_pool(jobs: int, initializer: Callable[..., None] | None = None,
               initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    """A pool of ``jobs`` spawned workers that watch this process; ``initializer(*initargs)`` runs in each
    (``initargs`` may hold a queue of the spawn context: they travel with the spawn). Submit through
    :func:`submit`: workers start on demand, inside ``submit``, and that is where their environment is set."""
    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context(CONTEXT), initializer=_start,
                               initargs=(os.getpid(), initializer, initargs))


def submit(pool: ProcessPoolExecutor, fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """``pool.submit(fn, *args)``, any worker it starts on one thread (:func:`one_thread_children`)."""
    with one_thread_children():
        return pool.submit(fn, *args)


def close(pool: ProcessPoolExecutor, cancel: bool) -> None:
    """Shut ``pool`` down: wait for its work; with ``cancel``, drop what has not started and terminate what
    runs (an interrupt or a failure: its results are lost anyway, do not wait for them)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=not cancel, cancel_futures=cancel)
    if cancel:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(timeout=5)
