"""The backends behind one interface: ``run_once(scenario, run, advance) -> RunResult``.

Backends are imported lazily by name, so that ``simasgd validate`` never
pays for numba or SimPy, and a backend that is absent says so plainly.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from simasgd.runs import metadata
from simasgd.runs.progress import Advance
from simasgd.runs.results import RunResult, merge
from simasgd.spec.scenario import Scenario
from simasgd.spec.traits import ExecutorTraits


class Backend(Protocol):
    NAME: str
    ALGORITHMS: frozenset[str]
    MEASURES_HOST: bool  # its timings are this host's (real threads): never two at once on one host
    # TRAITS: ExecutorTraits | None, how its workers read, wait, snapshot and book (simasgd/spec/traits.py)
    # NEEDS_PROFILE: bool, or needs_profile(scenario) -> bool where the scenario decides (sim: preset "this")

    def run_once(self, scenario: Scenario, run: int, advance: Advance | None = None) -> RunResult: ...


BACKENDS: dict[str, str] = {
    "serial": "simasgd.runs.serial",
    "sim": "simasgd.sim.backend",
    "cpu": "executors.cpu.backend",
    "torch": "executors.torchmp.backend",  # one process per worker (torch.multiprocessing); needs simasgd[torch]
    "cuda": "executors.cuda.backend",
    "gpu": "executors.gpu.backend",  # workers resident on the GPU, or a fused attempt per stream launch
    "dist": "executors.dist.backend",  # one torch.distributed (gloo) process per node; needs simasgd[torch]
}
DEFAULT = "sim"


class BackendError(ValueError):
    pass


def load(name: str) -> Backend:
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; allowed: {', '.join(BACKENDS)}")
    try:
        return importlib.import_module(BACKENDS[name])
    except ModuleNotFoundError as e:
        if e.name and (BACKENDS[name].startswith(e.name) or e.name.startswith(BACKENDS[name].split(".")[0])):
            raise BackendError(f"backend {name!r} is not available in this build of simasgd "
                               f"(module {BACKENDS[name]} is missing)") from None
        raise


def available() -> dict[str, bool]:
    out = {}
    for name, module in BACKENDS.items():
        try:
            out[name] = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            out[name] = False
    return out


def pairs() -> list[tuple[str, str]]:
    """Every (algorithm, backend) pair of the present backends: the algorithms a backend lists, or, for a
    backend with ``RUNS_AS`` (serial, the reference), the one definition its runs follow."""
    from simasgd.spec import algorithms

    out = []
    for name, present in available().items():
        if not present:
            continue
        mod = load(name)
        runs = [mod.RUNS_AS] if hasattr(mod, "RUNS_AS") else [a for a in algorithms.ALGORITHMS if a in mod.ALGORITHMS]
        out += [(a, name) for a in runs]
    return out


def measures_host(name: str) -> bool:
    """The backend's ``MEASURES_HOST`` trait (BackendError if it is unknown or absent)."""
    return bool(load(name).MEASURES_HOST)


def traits(name: str) -> ExecutorTraits | None:
    """The backend's executor traits (``TRAITS``): None where it declares none, or declares that the
    simulator models no CPU executor of it (BackendError if it is unknown or absent). A backend may declare
    them in its package (``executors/cpu/__init__.py``), which is read first: the simulator then imports
    no executor to learn them."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; allowed: {', '.join(BACKENDS)}")
    package = BACKENDS[name].rpartition(".")[0]
    try:
        found = getattr(importlib.import_module(package), "TRAITS", None) if package else None
    except ModuleNotFoundError:
        found = None
    if found is None:
        found = getattr(load(name), "TRAITS", None)
    return found if isinstance(found, ExecutorTraits) else None


def with_traits() -> list[str]:
    """The present backends that declare executor traits: the values ``[sim] traits`` may name."""
    return [b for b, ok in available().items() if ok and traits(b) is not None]


def needs_profile(name: str, scenario: Scenario) -> bool:
    """Whether running ``scenario`` on the backend reads the calibrated profile (``needs_profile`` or
    ``NEEDS_PROFILE``)."""
    impl = load(name)
    decide = getattr(impl, "needs_profile", None)
    if callable(decide):
        return bool(decide(scenario))
    return bool(getattr(impl, "NEEDS_PROFILE"))  # noqa: B009 - not in Backend: some decide per scenario


def run_metadata(backend: str, scenario: Scenario) -> dict[str, object]:
    """What ``backends.run`` records with a result: :func:`metadata.collect`, and the profile it read, if any."""
    out = metadata.collect(backend, scenario.hash)
    if needs_profile(backend, scenario):
        from simasgd.machines import machine, profile

        path = machine.profile_path()
        if path.exists():
            out["profile"] = profile.describe(path)
    return out


def repeat_jobs(backend: str, repeats: int, jobs: int | None = None) -> int:
    """How many processes run ``repeats`` repeats on ``backend``: one (this process) for a backend that measures
    this host (its repeats must not time each other); else ``jobs`` — None: every CPU this process may use,
    or 1 in a process that is itself a pool's worker (a sweep's, a corpus score's) — at most one per repeat."""
    from simasgd.runs import pools

    if measures_host(backend):
        return 1
    n = (1 if pools.in_worker() else pools.default_jobs()) if jobs is None else jobs
    return max(1, min(n, repeats))


def run(scenario: Scenario, backend: str = DEFAULT, *, repeats: int | None = None,
        out: str | Path | None = None, advance: Advance | None = None,
        on_run: Callable[[RunResult], None] | None = None, jobs: int | None = None) -> RunResult:
    """Run every repeat; with ``out``, the folder is rewritten after each repeat so a crash keeps the finished ones.

    The repeats are independent replications: a backend that does not measure this host runs them on
    :func:`repeat_jobs` processes (``jobs``: None = every CPU; 1 = one after another in this process), and
    the result is the one a serial run gives, merged in repeat order (its time stamp ``metadata.created``
    aside)."""
    load(backend)  # a missing backend fails here, before any repeat
    n = repeats or scenario.repeats
    workers = repeat_jobs(backend, n, jobs)
    if workers > 1:
        return _run_pool(scenario, backend, n, workers, out, advance, on_run)
    done: list[RunResult] = []
    for r in range(n):
        done.append(run_repeat(scenario, backend, r, advance))
        _keep(merge(done), out, on_run)
    return merge(done)


def run_repeat(scenario: Scenario, backend: str, run: int, advance: Advance | None = None) -> RunResult:
    """Repeat ``run`` of the scenario on ``backend``, in this process, with the run's metadata."""
    meta = run_metadata(backend, scenario)  # before the run: the profile it reads
    result = load(backend).run_once(scenario, run, advance)
    result.metadata = {**meta, **result.metadata}
    return result


def _keep(merged: RunResult, out: str | Path | None, on_run: Callable[[RunResult], None] | None) -> None:
    """The repeats finished so far: saved to ``out``, passed to ``on_run``."""
    if out is not None:
        merged.save(out)
    if on_run is not None:
        on_run(merged)


# -- repeats on a process pool -------------------------------------------------------------------------
Caught = list[tuple[str, type[Warning], str, int]]  # a warning as it travels back: message, category, where
_ticks: Any = None  # in a pool worker: the queue its repeats' progress goes to (None: no progress asked)
TICK_S = 0.1  # a worker sends its progress at most this often


def _run_pool(scenario: Scenario, backend: str, n: int, jobs: int, out: str | Path | None,
              advance: Advance | None, on_run: Callable[[RunResult], None] | None) -> RunResult:
    """The repeats on ``jobs`` spawned processes (:mod:`simasgd.runs.pools`), each saved as it finishes (the folder
    holds
    the finished ones, in repeat order). A repeat's error stops what has not started; the repeats already running
    finish and are saved (every repeat before the failed one, as a serial run saves them), then the first error in
    repeat order is raised. An interrupt stops the pool at once: what runs is terminated."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, wait

    from simasgd.runs import pools

    ticks = multiprocessing.get_context(pools.CONTEXT).Queue() if advance is not None else None
    pool = pools.spawn_pool(jobs, _worker_start, (ticks,))
    done: dict[int, RunResult] = {}  # by repeat
    shown: set[tuple[str, type[Warning], str, int]] = set()  # each warning once, as one process shows it
    cancel = True
    try:
        runs: dict[Future[tuple[RunResult, Caught, float]], int] = {}
        metas = []
        for r in range(n):
            metas.append(run_metadata(backend, scenario))  # before the run: the profile it reads
            runs[pools.submit(pool, _repeat, BACKENDS[backend], scenario, r)] = r
        pending = set(runs)
        failed: dict[int, Future[tuple[RunResult, Caught, float]]] = {}
        while pending:
            finished, pending = wait(pending, timeout=TICK_S if ticks is not None else None,
                                     return_when=FIRST_COMPLETED)
            _drain(ticks, advance)
            for fut in sorted(finished, key=runs.__getitem__):
                if fut.cancelled():
                    continue
                if fut.exception() is not None:
                    if not failed:
                        for other in pending:
                            other.cancel()  # those not started; the running ones finish
                    failed[runs[fut]] = fut
                    continue
                result, caught, held = fut.result()
                _show(caught, shown)
                if advance is not None and held:
                    advance(held)
                r = runs[fut]
                result.metadata = {**metas[r], **result.metadata}
                done[r] = result
                _keep(merge([done[k] for k in sorted(done)]), out, on_run)
        if failed:
            failed[min(failed)].result()  # raises the repeat's own error (its traceback from the worker as __cause__)
        cancel = False
    finally:
        pools.close(pool, cancel)
        if ticks is not None:
            if not cancel:  # the workers have exited: every tick they sent is in the queue
                _drain(ticks, advance)
            with contextlib.suppress(OSError, ValueError):
                ticks.close()
    return merge([done[k] for k in sorted(done)])


def _drain(ticks: Any, advance: Advance | None) -> None:
    import queue

    if ticks is None or advance is None:
        return
    total = 0.0
    while True:
        try:
            total += ticks.get_nowait()
        except (queue.Empty, OSError, ValueError):
            break
    if total:
        advance(total)


def _show(caught: Caught, shown: set[tuple[str, type[Warning], str, int]]) -> None:
    """A worker's warnings, raised again here (this process's filters and ``showwarning``), each once a run."""
    import warnings

    for w in caught:
        if w not in shown:
            shown.add(w)
            warnings.warn_explicit(*w)


def _worker_start(ticks: Any) -> None:
    """In each pool worker: Ctrl-C is the parent's to handle (it terminates the workers), and progress goes
    to ``ticks``."""
    import signal

    global _ticks
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _ticks = ticks


class _Ticker:
    """A worker's ``advance``: sums the steps and sends them at most every ``TICK_S``; ``held`` is what is
    left unsent (returned with the repeat)."""

    def __init__(self, ticks: Any) -> None:
        self.ticks, self.held, self.sent = ticks, 0.0, time.monotonic()

    def __call__(self, n: float = 1.0) -> None:
        self.held += n
        now = time.monotonic()
        if now - self.sent >= TICK_S:
            self.ticks.put(self.held)
            self.held, self.sent = 0.0, now


def _repeat(module: str, scenario: Scenario, run: int) -> tuple[RunResult, Caught, float]:
    """One repeat in a pool worker, on the backend ``module`` (the parent's registry entry): its result, the
    warnings it raised, and the progress it did not send."""
    import warnings

    impl: Backend = importlib.import_module(module)
    ticker = _Ticker(_ticks) if _ticks is not None else None
    with warnings.catch_warnings(record=True) as caught:
        result = impl.run_once(scenario, run, ticker)
    return result, [(str(w.message), w.category, w.filename, w.lineno) for w in caught], \
        ticker.held if ticker is not None else 0.0
