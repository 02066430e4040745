"""Synchronisation with a bound: stale-synchronous parallel (Ho et al. 2013) and backup workers (Chen et al. 2016).

- ``ssp``: the lock-based worker of :mod:`.locks` (lock, read, unlock,
  gradient, lock, update, unlock) behind a clock gate: a worker that has
  finished c iterations starts another only while c − min_j c_j ≤ s (the
  slowest worker's clock), else it sleeps until some clock moves. So every
  read of θ already holds each worker's first c − s updates (the SSP
  guarantee), and the clock gap at any start is at most s.
- ``backup``: ``k_sync``'s round (:mod:`.synchronous`) with k = N = count − b:
  the first N gradients of a round are averaged and applied, the b workers
  still reading or computing are cancelled and restart on the new model. A
  cancelled gradient is a dropped row (``applied = false``) with the round's
  version, so every round has exactly N applied and b dropped rows.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Generator
from typing import TYPE_CHECKING

import numpy as np
import simpy

from simasgd.sim.algorithms.locks import lock_worker
from simasgd.sim.algorithms.synchronous import Round, Wire, k_sync_worker
from simasgd.sim.engine import SimRun
from simasgd.sim.primitives import Mutex

if TYPE_CHECKING:
    import pandas as pd


class Moved(simpy.Event):
    """A move of some worker's clock, as the gate's sleepers see it: ``count`` sleepers wait on it, the first
    of them having looked at the clocks when the slowest was at ``low``."""

    __slots__ = ("count", "low")

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self.count, self.low = 0, -1


class Clocks:
    """Each worker's finished iterations, the slowest one's kept as they move (O(1) a tick: clocks only
    grow, one at a time); an event that fires whenever one of them moves.

    The gate's sleepers wake on each such event and look at the clocks again, in the order they went to
    sleep; those still too far ahead sleep on the next one, behind whoever came meanwhile. Only a move of
    the slowest clock can let one through, so at the others the sleepers are moved behind, in one step,
    as looking again would leave them: a move costs O(1), not one wake-up a sleeper."""

    def __init__(self, env: simpy.Environment, n: int, bound: int) -> None:
        self.env, self.bound = env, bound
        self.c = [0] * n
        self.low = 0  # the slowest worker's clock
        self.at: Counter[int] = Counter({0: n})  # how many workers have each clock
        # the sleepers in the order they wait: those of the oldest move not yet seen first
        self.sleepers: deque[tuple[int, simpy.Event]] = deque()
        self.moved = self._move()

    def gate(self, w: int, run: SimRun) -> Generator[simpy.Event, object, None]:
        """Sleep (off the CPU) while worker ``w`` is more than ``bound`` clocks ahead of the slowest."""
        while self.c[w] - self.low > self.bound:
            run.platform.block(w)
            wake = self.env.event()
            self._sleep(w, wake)
            yield wake

    def tick(self, w: int) -> None:
        c, at = self.c[w], self.at
        self.c[w] = c + 1
        at[c + 1] += 1
        at[c] -= 1
        if not at[c]:
            del at[c]
            if c == self.low:
                self.low = c + 1
        moved, self.moved = self.moved, self._move()
        moved.succeed()

    def _move(self) -> Moved:
        ev = Moved(self.env)
        ev.callbacks.append(self._look)
        return ev

    def _sleep(self, w: int, wake: simpy.Event) -> None:
        """``w`` sleeps on the latest move."""
        self._wait(1)
        self.sleepers.append((w, wake))

    def _wait(self, n: int) -> None:
        """``n`` more sleepers on the latest move, having looked at the clocks now."""
        latest = self.moved
        if not latest.count:
            latest.low = self.low
        latest.count += n

    def _look(self, moved: simpy.Event) -> None:
        """The sleepers of ``moved`` look at the clocks again, in their order: those the gate lets through
        go on in this step, the others sleep on the latest move."""
        assert isinstance(moved, Moved)
        n, sleepers = moved.count, self.sleepers
        if not n:
            return
        if moved.low == self.low:  # the slowest clock has not moved since any of them looked
            sleepers.rotate(-n)
            self._wait(n)
            return
        for _ in range(n):
            w, wake = sleepers.popleft()
            if self.c[w] - self.low > self.bound:
                self._sleep(w, wake)
                continue
            wake._ok, wake._value = True, None  # the sleeper goes on within this step, as SimPy would run it
            callbacks, wake.callbacks = wake.callbacks, None  # type: ignore[assignment]  # processed, as SimPy marks it
            for callback in callbacks:
                callback(wake)


def start_ssp(run: SimRun) -> None:
    lock = Mutex(run.env)
    clocks = Clocks(run.env, run.n, run.sc.algorithm.param("bound"))
    free = lambda: lock.free
    for w in range(run.n):
        run.env.process(lock_worker(run.env, w, run, lock.request, lock.request, free, free, lock.release,
                                    gate=lambda w_: clocks.gate(w_, run), done=clocks.tick))


class BackupRound(Round):
    """A ``k_sync`` round that records the gradients it discards (the workers not in the closed batch)
    and, with ``onebit``, sends the batch's gradients 1-bit quantised (``synchronous.Wire``, as ``sync``)."""

    def __init__(self, run: SimRun, wire: Wire | None) -> None:
        super().__init__(run.env)
        self.run, self.wire = run, wire
        self.comm_s = wire.allreduce_s if wire is not None else 0.0

    def close(self) -> tuple[list[tuple[int, int, float, float]], simpy.Event]:
        batch, done = super().close()
        run = self.run
        if run.stopped:
            return batch, done
        now, used = run.env.now, {b[0] for b in batch}
        for w in range(run.n):
            if w in used:
                continue
            marks = run.marks[w]
            if not marks[1] >= marks[0]:  # cancelled while reading: no gradient started this round
                marks[1] = now
            if not marks[2] >= marks[1]:  # cancelled while computing: its gradient ends here
                marks[2] = now
            # the version it would have had: this round's (global at the drop + 1)
            run.rec.add(w, run.version + 1, run.version, marks[1], now, applied=False)
        if self.wire is not None:
            for w in used:  # only a used gradient was sent: only its sender's residual moves
                self.wire.send(run, w)
        return batch, done


def start_backup(run: SimRun) -> None:
    a = run.sc.algorithm
    wire = Wire(run) if a.param("onebit") or run.sc.network is not None else None
    rnd = BackupRound(run, wire)
    k = run.n - a.param("backup")
    rnd.procs = [run.env.process(k_sync_worker(run.env, w, run, rnd, k)) for w in range(run.n)]


def clock_gaps(updates: pd.DataFrame) -> np.ndarray:
    """The clock gap at every read, from any backend's rows (one run): for the row of worker w's
    (i+1)-th iteration, i − min_j (j's updates with version ≤ its read_version) — how many iterations
    w had finished beyond the slowest worker's, counting only updates already in the θ it read. SSP
    with bound s keeps every gap ≤ s (its gate saw no larger clock than these)."""
    a = updates[updates["applied"]].sort_values("version", kind="stable")
    versions = [g["version"].to_numpy() for _, g in a.groupby("worker")]
    out = []
    for _, g in a.groupby("worker"):
        rv = g["read_version"].to_numpy()
        seen = np.min([np.searchsorted(v, rv, side="right") for v in versions], axis=0)
        out.append(np.arange(len(rv)) - seen)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
