"""Running tasks: the task function, and where it runs (this process, a process pool, Dask).

The task function never raises for a task's own failure: an exception in the
backend becomes a ``failed`` row carrying the error, and the sweep goes on.
Crashed runs, or runs that did not reach ε, are outcomes of a successful task, not failures.

Real backends (``cpu``, ``cuda``) measure the machine, so two of them must
never run at once on one host: every such task holds an exclusive file lock
named after the host for its whole run, which covers local pools and Dask
workers sharing a temp folder; on Dask it also holds a ``distributed.Lock``
named after the host, for workers whose temp folders differ (containers).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from simasgd.runs import pools
from simasgd.runs.results import RunResult
from simasgd.sweep.plan import Task

Body = Callable[[Task], RunResult]
LOCK_DIR_ENV = "SIMASGD_SWEEP_LOCK_DIR"


class SweepError(ValueError):
    """A sweep cannot start as asked (no Dask, an unreachable scheduler): the user's input, not a bug."""


@dataclass
class Outcome:
    row: dict[str, Any]
    result: RunResult | None = None  # the full result, only when the task keeps its run


def run_backend(task: Task) -> RunResult:
    """Run one repeat of the cell's scenario on the task's backend."""
    from simasgd.runs import backends

    # only a kept results folder carries metadata (it costs a git call and package look-ups)
    meta = backends.run_metadata(task.backend, task.scenario) if task.keep_run else {}
    result = backends.load(task.backend).run_once(task.scenario, task.repeat)
    if task.keep_run:
        result.metadata = {**meta, **result.metadata}
    return result


def run_task(task: Task, body: Body | None = None) -> Outcome:
    """Run ``task`` with ``body`` (default: its backend) and return its row; never raises for the task's failure."""
    row = base_row(task)
    start = time.perf_counter()
    try:
        with _isolation(task):
            result = (body or run_backend)(task)
        summary = result.runs[0]
        fields = asdict(summary)
        row.update({k: v for k, v in fields.items() if k not in ("run", "extra")},
                   status="ok", extra=json.dumps(fields["extra"], default=str))
    except Exception as e:
        row.update(status="failed", error=describe(e))
        result = None
    row["wall_s"] = time.perf_counter() - start
    return Outcome(row, result if task.keep_run else None)


def base_row(task: Task) -> dict[str, Any]:
    return {"task_id": task.task_id, "cell_id": task.cell_id, "repeat": task.repeat, "seed": task.seed,
            "host": socket.gethostname(), "status": "failed", "error": None}


def failed_row(task: Task, error: BaseException) -> dict[str, Any]:
    """The row of a task whose worker itself failed (a dead process, a lost Dask worker)."""
    return {**base_row(task), "error": describe(error)}


def describe(e: BaseException) -> str:
    """``Type: message (at file:line in function)`` — the innermost frame says where."""
    text = "".join(traceback.format_exception_only(type(e), e)).strip()
    frames = traceback.extract_tb(e.__traceback__)
    if frames:
        f = frames[-1]
        text += f" (at {Path(f.filename).name}:{f.lineno} in {f.name})"
    return text


@contextmanager
def _isolation(task: Task) -> Iterator[None]:
    """Real backends hold the host's lock. Simulated and serial tasks need nothing here: pool workers are
    spawned with one BLAS thread each (``pools.one_thread_children``; Dask's nanny does the same for its workers)."""
    if task.real:
        with host_lock(), _dask_host_lock():
            yield
        return
    yield


@contextmanager
def host_lock(directory: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """An exclusive lock for this host, held across processes (released if the holder dies)."""
    folder = Path(directory or os.environ.get(LOCK_DIR_ENV) or tempfile.gettempdir())
    path = folder / f"simasgd-sweep-{socket.gethostname()}.lock"
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def _dask_host_lock() -> Iterator[None]:
    """Inside a Dask worker, also a cluster-wide lock named after the host (workers with private temp folders)."""
    try:
        from distributed import Lock, get_worker

        get_worker()
    except (ImportError, ValueError):  # not on Dask
        yield
        return
    with Lock(f"simasgd-sweep-host-{socket.gethostname()}"):
        yield


# -- pools ---------------------------------------------------------------------------------------------
TaskFn = Callable[[Task], Outcome]
Finished = tuple[Task, Outcome | BaseException]


class Pool(Protocol):
    jobs: int

    def imap_unordered(self, fn: TaskFn, tasks: Iterable[Task]) -> Iterator[Finished]: ...

    def close(self, cancel: bool) -> None: ...


class InlinePool:
    """Tasks one after another in this process (``--jobs 0``: debugging, and fast unit tests)."""

    jobs = 1

    def imap_unordered(self, fn: TaskFn, tasks: Iterable[Task]) -> Iterator[Finished]:
        for t in tasks:
            try:
                yield t, fn(t)
            except Exception as e:
                yield t, e

    def close(self, cancel: bool) -> None:
        pass


class LocalPool:
    """A process pool (:mod:`simasgd.runs.pools`: spawned, one thread per worker); a pool broken by a dead worker
    is replaced."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self._ex = self._new()

    def _new(self) -> ProcessPoolExecutor:
        return pools.spawn_pool(self.jobs)

    def _submit(self, fn: TaskFn, task: Task) -> Future[Outcome]:
        # Workers are spawned on demand inside submit: that is where their environment is decided.
        try:
            return pools.submit(self._ex, fn, task)
        except BrokenProcessPool:
            self._ex.shutdown(wait=False, cancel_futures=True)
            self._ex = self._new()
            return pools.submit(self._ex, fn, task)

    def imap_unordered(self, fn: TaskFn, tasks: Iterable[Task]) -> Iterator[Finished]:
        # A bounded window of tasks in flight: a kill loses only those, and memory stays flat.
        it = iter(tasks)
        pending: dict[Future[Outcome], Task] = {}
        for t in _take(it, 2 * self.jobs):
            pending[self._submit(fn, t)] = t
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                task = pending.pop(fut)
                exc = fut.exception()
                yield task, (exc if exc is not None else fut.result())
                for t in _take(it, 1):
                    pending[self._submit(fn, t)] = t

    def close(self, cancel: bool) -> None:
        pools.close(self._ex, cancel)  # cancel: tasks in flight are lost anyway; do not wait for them to finish


class DaskPool:
    """Tasks on a Dask cluster: ``"local"`` starts a LocalCluster, anything else is a scheduler address."""

    def __init__(self, address: str, jobs: int, processes: bool = True) -> None:
        import logging

        try:
            from dask.distributed import Client, LocalCluster
        except ImportError as e:
            raise SweepError(f"--dask needs dask.distributed (pip install 'simasgd[dask]'): {e}") from None
        self.jobs = jobs
        self._cluster = None
        if address == "local":
            self._cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=processes,
                                         dashboard_address=None, silence_logs=logging.ERROR)
            self._client = Client(self._cluster)
            return
        _probe(address)
        try:
            self._client = Client(address, timeout="20s")
        # Any failure to start a client is the address's: Dask's loop runner can fail with an AssertionError
        # as well as the OSError or TimeoutError of a refused or silent host.
        except Exception as e:
            raise SweepError(f"--dask {address}: cannot reach a Dask scheduler there ({type(e).__name__}: {e}); "
                             f"{_ADDRESS_HINT}") from None
        workers = self._client.scheduler_info().get("workers", {})
        self.jobs = max(1, sum(w.get("nthreads", 1) for w in workers.values()))

    def imap_unordered(self, fn: TaskFn, tasks: Iterable[Task]) -> Iterator[Finished]:
        from dask.distributed import as_completed

        it = iter(tasks)
        pending: dict[object, Task] = {}  # by the future's key
        # pure=False: a task is an experiment, not a cacheable function of its inputs.
        futures = []
        for t in _take(it, 2 * self.jobs):
            fut = self._client.submit(fn, t, pure=False)
            pending[fut.key] = t
            futures.append(fut)
        queue = as_completed(futures)
        for fut in queue:
            task = pending.pop(fut.key)
            try:
                yield task, fut.result()
            except Exception as e:
                yield task, e
            fut.release()
            for t in _take(it, 1):
                nxt = self._client.submit(fn, t, pure=False)
                pending[nxt.key] = t
                queue.add(nxt)

    def close(self, cancel: bool) -> None:
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()


_ADDRESS_HINT = "use 'local' or an address like tcp://host:8786"


def _probe(address: str) -> None:
    """Refuse an address without a host and port, and fail fast on a TCP one that nothing answers (Dask itself
    retries until its timeout)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(address if "://" in address else f"tcp://{address}")
        host, port = parts.hostname, parts.port
    except ValueError as e:
        raise SweepError(f"--dask {address}: not an address ({e}); {_ADDRESS_HINT}") from None
    if parts.scheme not in ("tcp", "tls"):
        return  # other transports (inproc, ucx, ws) are Dask's to check
    if not host or not port:
        raise SweepError(f"--dask {address}: a scheduler address needs a host and a port; {_ADDRESS_HINT}")
    if parts.scheme == "tcp":
        try:
            socket.create_connection((host, port), timeout=5).close()
        except OSError as e:
            raise SweepError(f"--dask {address}: cannot reach a Dask scheduler there ({e}); "
                             f"{_ADDRESS_HINT}") from None


def _take(it: Iterator[Task], n: int) -> list[Task]:
    out = []
    for _ in range(n):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


def make_pool(jobs: int | None, dask: str | None, real: bool) -> Pool:
    """The pool for a sweep. Real backends get one local process: they must not measure each other."""
    if dask:
        return DaskPool(dask, jobs or pools.default_jobs())
    n = pools.default_jobs() if jobs is None else jobs
    if n == 0:
        return InlinePool()
    return LocalPool(1 if real else n)

