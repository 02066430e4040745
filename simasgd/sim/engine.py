"""One simulated run: the global version counter, the update records and the stop rule.

Algorithms call :meth:`SimRun.applied` (one gradient, one update) or
:meth:`SimRun.bump` plus :meth:`SimRun.record` (several gradients in one
update, master/worker schemes). Staleness is never computed here — the
updates table derives it from ``version`` and ``read_version``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Protocol

import numpy as np
import simpy

from simasgd.machines.machine import is_gpu
from simasgd.runs.convergence import Monitor
from simasgd.runs.progress import Advance
from simasgd.sim.executor import executor_traits
from simasgd.sim.numerics import Model
from simasgd.sim.primitives import Backoff, Req
from simasgd.spec import seeds
from simasgd.spec.scenario import Scenario


class LockCores(Protocol):
    """What a lock's waiters and holders tell the CPUs: :class:`~simasgd.sim.cpu.Cores`, or a GPU's
    (:class:`~simasgd.sim.gpu.DeviceCores`: waits are plain waits)."""

    def spin_wait(self, w: int, req: Req, request: Callable[[], Req]) -> Generator[simpy.Event, object, Req]: ...

    def hold(self, w: int, held: bool) -> None: ...


class WorkerPlatform(Protocol):
    """The machine as the workers see it, what the algorithms and :class:`SimRun` use of it: a CPU's
    (:class:`~simasgd.sim.costs.Platform`) or a GPU's (:class:`~simasgd.sim.gpu.GpuPlatform`). The
    methods are the steps of a worker ``w`` as SimPy events (their docs are in ``costs.Platform``)."""

    @property
    def dim(self) -> int: ...
    @property
    def model_bytes(self) -> int: ...
    @property
    def cas_latency(self) -> list[float]: ...
    @property
    def handoff_s(self) -> list[float]: ...
    @property
    def snapshot_s(self) -> float | None: ...
    @property
    def cores(self) -> LockCores: ...

    def gradient(self, w: int) -> simpy.Event: ...
    def read(self, w: int, part: float = 1.0, seconds: float | None = None, first: bool = True) -> simpy.Event: ...
    def update(self, w: int, part: float = 1.0, seconds: float | None = None, first: bool = True) -> simpy.Event: ...
    def update_into(self, w: int) -> simpy.Event: ...
    def private_copy(self, w: int) -> simpy.Event: ...
    def atomic_adds(self, w: int, reader: int | None = None) -> simpy.Event: ...
    def snapshot(self, w: int) -> simpy.Event: ...
    def bookkeeping(self, w: int) -> simpy.Event | None: ...
    def read_time(self, w: int) -> float | None: ...
    def update_time(self, w: int) -> float | None: ...
    def touch(self, w: int) -> None: ...
    def computes_on_copy(self, w: int) -> None: ...
    def fuses_read(self, w: int) -> None: ...
    def mirrors(self, w: int) -> None: ...
    def cycle_vectors(self, w: int, vectors: int) -> None: ...
    def first_turn(self, w: int) -> simpy.Event | None: ...
    def block(self, w: int) -> None: ...


class Recorder:
    """Preallocated column arrays of update attempts (grown by doubling when full)."""

    COLUMNS = (("worker", np.int32), ("version", np.int64), ("read_version", np.int64), ("t_read", np.float64),
               ("t_write", np.float64), ("lock_wait_s", np.float64), ("retries", np.int32), ("applied", np.bool_),
               ("t_start", np.float64), ("t_grad_start", np.float64), ("t_grad_end", np.float64),
               ("distance", np.float64))
    NAN_COLUMNS = ("distance",)  # NaN unless the algorithm sets it (elastic: ‖x_j − x̃‖ at the exchange)

    def __init__(self, capacity: int, marks: list[list[float]]) -> None:
        # marks[w] = [cycle start, gradient start, gradient end] of worker w's current cycle (SimRun.begin...)
        self.marks = marks
        self.n = 0
        self.cols = {name: np.full(capacity, np.nan, dtype) if name in self.NAN_COLUMNS else np.zeros(capacity, dtype)
                     for name, dtype in self.COLUMNS}
        self._bind()

    def _bind(self) -> None:
        c = self.cols
        self.worker, self.version, self.read_version = c["worker"], c["version"], c["read_version"]
        self.t_read, self.t_write, self.lock_wait = c["t_read"], c["t_write"], c["lock_wait_s"]
        self.retries, self.applied = c["retries"], c["applied"]
        self.t_start, self.t_grad_start, self.t_grad_end = c["t_start"], c["t_grad_start"], c["t_grad_end"]
        self.distance = c["distance"]
        self.capacity = len(self.worker)

    def add(self, w: int, version: int, read_version: int, t_read: float, t_write: float,
            wait: float = 0.0, retries: int = 0, applied: bool = True) -> int:
        i = self.n
        if i == self.capacity:
            self.cols = {k: np.concatenate([v, np.full_like(v, np.nan) if k in self.NAN_COLUMNS else np.zeros_like(v)])
                         for k, v in self.cols.items()}
            self._bind()
        self.worker[i] = w
        self.version[i] = version
        self.read_version[i] = read_version
        self.t_read[i] = t_read
        self.t_write[i] = t_write
        if wait:
            self.lock_wait[i] = wait
        if retries:
            self.retries[i] = retries
        self.applied[i] = applied
        self.t_start[i], self.t_grad_start[i], self.t_grad_end[i] = self.marks[w]
        self.n = i + 1
        return i

    def arrays(self, keep: np.ndarray | None = None) -> dict[str, np.ndarray]:
        out = {k: v[: self.n] for k, v in self.cols.items()}
        return out if keep is None else {k: v[keep] for k, v in out.items()}


class SimRun:
    """Shared state of one run: clock, version counter, records, numerics and stop."""

    def __init__(self, env: simpy.Environment, sc: Scenario, run: int, platform: WorkerPlatform,
                 model: Model | None, monitor: Monitor, advance: Advance | None = None) -> None:
        self.env, self.sc, self.run, self.platform, self.model = env, sc, run, platform, model
        self.monitor, self.advance = monitor, advance
        self.n = sc.workers.count
        self.version = 0
        self.max_updates = sc.stop.max_updates
        self.every = sc.stop.eval_updates()
        self.marks = [[math.nan] * 3 for _ in range(self.n)]
        self.rec = Recorder(min(self.max_updates + 4 * self.n, 1 << 22), self.marks)
        self.stop = env.event()
        self.stopped = False
        self.stagger = sc.sim.startup_stagger_s or 0.0
        self.traits = executor_traits(sc)
        # A worker whose copy of θ still is θ skips its read where the executor does (the cpu executor's locks,
        # HOGWILD! alone); a read time given in [timing] describes a system that copies every time, as the
        # cuda executor does.
        self.elide_reads = self.traits.reads == "elided" and sc.timing.read is None and not is_gpu(sc.machine)
        env.timeout(sc.stop.max_time_s).callbacks.append(lambda _ev: self.finish())

    def finish(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.stop.succeed()

    def start(self, w: int) -> Generator[simpy.Event, object, None]:
        """The start-up stagger: worker ``w`` begins at ``w × startup_stagger_s``; then, where its thread shares a
        CPU, it begins once the scheduler first gives it one (a thread's first read of the version is code it
        runs: not before it runs)."""
        if self.stagger > 0 and w:
            yield self.env.timeout(w * self.stagger)
        turn = self.platform.first_turn(w)
        if turn is not None:
            yield turn

    # Phase boundaries of worker w's current cycle, as the executors record them (results.UPDATE_COLUMNS).
    def begin(self, w: int) -> None:
        """The cycle starts (before any read-side wait)."""
        self.marks[w][0] = self.env.now

    def computing(self, w: int) -> None:
        """The read is done; the gradient starts."""
        self.marks[w][1] = self.env.now

    def computed(self, w: int) -> None:
        """The gradient is done; the update side starts."""
        self.marks[w][2] = self.env.now

    def compute(self, w: int) -> Generator[simpy.Event, object, None]:
        """A worker's gradient on the copy it just read: the phase marks around it, the numerics at
        that copy (numerics mode), and the gradient's time on the worker's CPU. Every worker that
        copies its model before computing shares this step (HOGWILD!'s torn read has its own)."""
        self.computing(w)
        if self.model is not None:
            self.model.snapshot(w)
            self.model.gradient(w)
        yield self.platform.gradient(w)
        self.computed(w)

    def backoff(self, w: int) -> Backoff:
        cfg = self.sc.algorithm.param("backoff") if "backoff" in _params(self.sc) else None
        return Backoff(cfg, seeds.rng(self.sc.timing_seed, self.run, seeds.Role.SCHEDULE, w))

    def bump(self) -> int:
        """One more applied update: the new global version (evaluates and stops as the budget says)."""
        if self.stopped:  # events of the stopping instant still run; they change nothing
            return self.version
        v = self.version = self.version + 1
        if v % self.every == 0 or v >= self.max_updates:
            self._checkpoint(v)
        return v

    def applied(self, w: int, read_version: int, t_read: float, wait: float = 0.0, retries: int = 0) -> int:
        if self.stopped:
            return self.version
        v = self.bump()
        self.rec.add(w, v, read_version, t_read, self.env.now, wait, retries, True)
        return v

    def snapshot(self, w: int, v: int, row: bool = True) -> simpy.Event | None:
        """The executor's loss snapshot of version ``v``, when ``v`` is one the loss ring keeps (every k-th):
        worker ``w``, which made it, copies θ into the ring right after its update, inside its lock if it
        holds one (executors/cpu/shared.py ``take_snapshot``). An event for the caller to yield, else None
        (not due, or not priced: ``Platform.snapshot_s``). ``row``: the last recorded row is this
        update's, and its update phase ends with the copy, as the executor records it."""
        if self.platform.snapshot_s is None or self.stopped or v % self.every:
            return None
        done = self.platform.snapshot(w)
        if row:
            i = self.rec.n - 1
            done.callbacks.append(lambda _ev: self.rec.t_write.__setitem__(i, self.env.now))
        return done

    def dropped(self, w: int, read_version: int, t_read: float, wait: float = 0.0, retries: int = 0) -> None:
        """An attempt given up (``version`` = the version it would have had)."""
        if not self.stopped:
            self.rec.add(w, self.version + 1, read_version, t_read, self.env.now, wait, retries, False)

    def _checkpoint(self, v: int) -> None:
        if self.model is not None and not self.monitor.done and \
                self.monitor.observe(self.env.now, v, self.model.loss(), self.model.result()):
            self.finish()
        if self.advance is not None:
            self.advance(self.every)
        if v >= self.max_updates:
            self.finish()

    def go(self) -> None:
        self.env.run(until=self.stop)


def _params(sc: Scenario) -> tuple[str, ...]:
    from simasgd.spec import algorithms
    return algorithms.ALGORITHMS[sc.algorithm.name].param_names
