"""Synchronisation primitives of the simulated machine, built on SimPy's resource hooks.

- :class:`Mutex` — a FIFO (futex-like) lock; free, it is taken and given back without an event.
- :class:`RWLock` — a read-write lock with reader or writer priority
  (``BaseResource`` with read/write ``Put`` requests and a ``Get`` release).
- :class:`CacheLine` — one contended cache line: atomic instructions on it
  (CAS, fetch-add) serialise, each holding it for the atomic's latency.
- :class:`CasCell` / :class:`AtomicCounter` — words living on a cache line.
- :class:`Barrier` — a cyclic barrier (``BaseResource``: arrivals are ``Put``
  requests released together once ``parties`` have arrived).
- :class:`Backoff` — none / linear / exponential / random delays between failed
  attempts; :func:`acquire` and the CAS loops use it.
- :class:`Interrupts` — many processes interrupted at one instant, as one event.
- :class:`Environment` — SimPy's environment, knowing how far the instant it is at has got, its runs out of
  the cyclic collector's way (:mod:`simasgd.sim.collector`).

Waiting threads release their core (``on_block``) so an oversubscribed machine
can run someone else — including, or not, the lock holder (convoys).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import simpy
from simpy.core import BoundClass
from simpy.events import URGENT
from simpy.resources.base import BaseResource, Get, Put

from simasgd.sim import collector
from simasgd.spec.scenario import BackoffConfig

Req = TypeVar("Req", bound=simpy.Event)  # a lock's request event, as its acquire() returns it


class Environment(simpy.Environment):
    """SimPy's environment that can keep the highest rank (priority, then id: SimPy's order of the events of
    one instant) among the events it has processed at the current instant. So an event that was never
    scheduled (a turn taken by arithmetic, :class:`simasgd.sim.cpu.Rotation`) can tell whether it would have
    run yet. Only once asked (:meth:`rank_instants`): it costs every event a look at the queue."""

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self.passed: tuple[int, int] = (-1, -1)
        self.ranking = False
        self.reranked = 0  # events scheduled on a rank already taken (simasgd.sim.cpu.Cores._handed_on)
        self._peeks = 0  # ids taken by scheduled() itself

    def run(self, until: float | simpy.Event | None = None) -> object:
        """SimPy's run, with Python's cyclic collector kept out of its way (:mod:`simasgd.sim.collector`)."""
        with collector.quiet():
            return super().run(until)

    def scheduled(self) -> int:
        """Events scheduled so far: each takes an id or reuses a rank."""
        n = next(self._eid) - self._peeks + self.reranked
        self._peeks += 1
        return n

    def rank_instants(self) -> None:
        """Keep the ranks from the next instant on (:meth:`ran` may be asked about those instants)."""
        if not self.ranking:
            self.ranking = True
            setattr(self, "step", self._ranked_step)  # noqa: B010 - run() calls self.step

    def _ranked_step(self) -> None:
        queue = self._queue
        if queue:
            t, priority, eid, _ = queue[0]
            if t != self._now or (priority, eid) > self.passed:
                self.passed = (priority, eid)
        simpy.Environment.step(self)

    def ran(self, t: float, rank: tuple[int, int]) -> bool:
        """Whether an event of rank ``rank`` at time ``t`` would have been processed by now (``t`` at an
        instant after :meth:`rank_instants` was called)."""
        assert self.ranking
        return t < self._now or (t == self._now and rank < self.passed)


class LockRequest(simpy.Event):
    """A request of a :class:`Mutex`: succeeds when the lock is the requester's."""

    __slots__ = ("lock",)

    def __init__(self, lock: Mutex) -> None:
        super().__init__(lock.env)
        self.lock = lock

    def cancel(self) -> None:
        """Withdraw a request still waiting (a spinner that lost its CPU); a granted one is released instead."""
        if not self.triggered:
            self.lock.withdraw(self)


class Mutex:
    """A blocking FIFO mutex (what a futex-based ``std::mutex`` does under contention).

    A free lock is taken at once: the request comes back already processed, so the taker goes on in the
    same step and an uncontended acquire or release costs no event of its own (no other worker can see
    the lock between the two). A waiter's request succeeds, as an event, when the holder releases."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.holder: LockRequest | None = None
        self.queue: deque[LockRequest] = deque()
        # told when a release leaves the lock free: spinners the scheduler rotates without events
        # (simasgd.sim.cpu.Rotation) are not in the queue, and the first of them to turn takes it
        self.on_free: Callable[[Mutex], None] | None = None

    @property
    def free(self) -> bool:
        return self.holder is None and not self.queue

    @property
    def users(self) -> list[LockRequest]:
        return [] if self.holder is None else [self.holder]

    def request(self) -> LockRequest:
        req = LockRequest(self)
        if self.free:
            _granted(req)
            self.holder = req
        else:
            self.queue.append(req)
        return req

    def release(self, req: LockRequest) -> None:
        if self.holder is not req:
            raise RuntimeError("release of a mutex request that does not hold the lock")
        self.holder = None
        if self.queue:
            self.holder = self.queue.popleft()
            self.holder.succeed()
        elif self.on_free is not None:
            self.on_free(self)

    def withdraw(self, req: LockRequest) -> None:
        self.queue.remove(req)


def _granted(ev: simpy.Event) -> None:
    """Mark ``ev`` succeeded and processed without scheduling it: a process that yields it goes on at once."""
    ev._ok = True
    ev._value = None
    ev.callbacks = None  # type: ignore[assignment]  # simpy: None marks a processed event


class RWRequest(Put):
    """A request of an :class:`RWLock`: a read or a write."""

    write: bool


class ReadRequest(RWRequest):
    write = False


class WriteRequest(RWRequest):
    write = True

    def __init__(self, resource: RWLock) -> None:
        # Counted before Put.__init__ runs the grant loop, so writer priority sees this writer.
        resource.writers_waiting += 1
        super().__init__(resource)

    def cancel(self) -> None:
        """Withdraw a waiting writer for good: readers it held back may go."""
        if not self.triggered:
            self.resource.writers_waiting -= 1
            super().cancel()
            self.resource._trigger_put(None)

    def park(self) -> None:
        """Leave the queue but stay announced: a waiting writer descheduled by the OS. Under writer
        priority, readers keep deferring to it until it runs again (the executor's lock counts waiting
        writers in a word that only the writer itself decrements, once it has the lock)."""
        if not self.triggered:
            super().cancel()
            self.resource._trigger_put(None)

    def unpark(self) -> None:
        """Drop a parked request's announcement: the writer asks again with a new request."""
        self.resource.writers_waiting -= 1


class RWRelease(Get):
    def __init__(self, resource: RWLock, request: RWRequest) -> None:
        self.request = request
        super().__init__(resource)


class RWLock(BaseResource):
    """Many readers or one writer; ``writer_priority`` stops new readers while a writer waits."""

    def __init__(self, env: simpy.Environment, writer_priority: bool = True) -> None:
        super().__init__(env, capacity=1)
        self.writer_priority = writer_priority
        self.readers = 0
        self.writer: Put | None = None
        self.writers_waiting = 0
        # Writers spinning on it that the scheduler rotates without events (simasgd.sim.cpu.Rotation) are in
        # no queue. A release that leaves it free for a writer serves the queue only once the release is
        # processed, later in the instant: ``on_release`` is told as it is made (a rotating turn before then
        # asks in between, as its event would), ``on_free`` once the queue is served and left it free.
        self.on_release: Callable[[RWLock], None] | None = None
        self.on_free: Callable[[RWLock], None] | None = None

    # simpy's BoundClass.__get__ is typed for BoundClass instances only: the methods these bind, typed as
    # simpy.Resource types its own request/release
    if TYPE_CHECKING:
        def read(self) -> ReadRequest: ...
        def write(self) -> WriteRequest: ...
        def release(self, request: RWRequest) -> RWRelease: ...
    else:
        read = BoundClass(ReadRequest)
        write = BoundClass(WriteRequest)
        release = BoundClass(RWRelease)

    def can_read(self) -> bool:
        return self.writer is None and not self.put_queue and not (self.writer_priority and self.writers_waiting)

    @property
    def free_for_writer(self) -> bool:
        return self.writer is None and self.readers == 0

    def can_write(self) -> bool:
        return self.free_for_writer and not self.put_queue

    def _do_put(self, event: RWRequest) -> bool:
        if self.writer is not None:
            return False  # nobody passes an active writer
        if event.write:
            if self.readers == 0:
                self.writer = event
                self.writers_waiting -= 1
                event.succeed()
            # Reader priority lets readers queued behind a blocked writer in.
            return not self.writer_priority
        if not (self.writer_priority and self.writers_waiting):
            self.readers += 1
            event.succeed()
        return True

    def _do_get(self, event: RWRelease) -> bool:
        if event.request.write:
            self.writer = None
        else:
            self.readers -= 1
        event.succeed()
        if self.on_release is not None and self.free_for_writer:
            self.on_release(self)
            event.callbacks.append(self._served)  # after the queue is served (Get's _trigger_put)
        return True

    def _served(self, _event: simpy.Event) -> None:
        if self.on_free is not None and self.free_for_writer:
            self.on_free(self)


class Barrier(BaseResource):
    """A cyclic barrier: ``wait()`` succeeds, with the arrival index, once ``parties`` arrived.

    The last arrival gets index ``parties - 1`` (the leader that may act for the round).
    """

    def __init__(self, env: simpy.Environment, parties: int) -> None:
        super().__init__(env, capacity=parties)
        self.parties = parties
        self._to_release = 0
        self._index = 0

    if TYPE_CHECKING:  # as RWLock's: what the BoundClass binds
        def wait(self) -> Put: ...
    else:
        wait = BoundClass(Put)

    def _do_put(self, event: Put) -> bool:
        if self._to_release == 0:
            if len(self.put_queue) < self.parties:
                return False
            self._to_release, self._index = self.parties, 0
        self._to_release -= 1
        event.succeed(self._index)
        self._index += 1
        return True

    def _do_get(self, event: Get) -> bool:  # pragma: no cover - a barrier has no gets
        return False


class CacheLine(Mutex):
    """A contended cache line: atomics on it execute one at a time, ``latency_s`` each (FIFO, as a
    :class:`Mutex`: a free line costs an atomic no event but its latency)."""

    def __init__(self, env: simpy.Environment, latency_s: float) -> None:
        super().__init__(env)
        self.latency_s = latency_s


def atomic(env: simpy.Environment, line: CacheLine,
           latency_s: float | None = None) -> Generator[simpy.Event, object, None]:
    """Hold the cache line for one atomic instruction (nothing to wait for when it is free)."""
    lat = line.latency_s if latency_s is None else latency_s
    if lat <= 0:
        return
    req = line.request()
    yield req
    yield env.timeout(lat)
    line.release(req)


class CasCell:
    """A word updated only by compare-and-swap: here the version of the published parameter vector."""

    __slots__ = ("failures", "line", "value")

    def __init__(self, line: CacheLine, value: int = 0) -> None:
        self.value = value
        self.line = line
        self.failures = 0

    def compare_and_swap(self, expected: int, new: int) -> bool:
        """The instruction's effect; its latency is charged with :func:`atomic` on ``line``."""
        if self.value != expected:
            self.failures += 1
            return False
        self.value = new
        return True


class AtomicCounter:
    """A fetch-and-add word (the shared gradient sum of Lopez et al. is d of these)."""

    __slots__ = ("line", "value")

    def __init__(self, line: CacheLine, value: float = 0) -> None:
        self.value = value
        self.line = line

    def fetch_add(self, n: float) -> float:
        old = self.value
        self.value = old + n
        return old


class Backoff:
    """Delay before the next attempt after ``attempt`` failures (attempt counts from 0)."""

    __slots__ = ("initial", "kind", "max", "random_start", "rng")

    def __init__(self, cfg: BackoffConfig | None, rng: np.random.Generator) -> None:
        cfg = cfg or BackoffConfig()
        self.kind, self.initial, self.max, self.rng = cfg.kind, cfg.initial_s, cfg.max_s, rng
        self.random_start = cfg.start == "random"

    @property
    def spins(self) -> bool:
        """Whether a lock is taken by test-and-set retries (with this backoff) rather than by queueing."""
        return self.kind != "none"

    def delay(self, attempt: int) -> float:
        """With a random start (Ek 2021 §2.2.3) the growth is scaled by a uniform draw, one per wait
        (the thesis draws it once per lock attempt; per wait keeps the policy stateless, as the cpu
        executor's): the same distribution of each delay, without their correlation."""
        if self.kind == "none":
            return 0.0
        if self.kind == "random":
            # per thread: each worker draws from its own stream
            cap = self.max if self.random_start else min(self.max, self.initial * 2.0 ** min(attempt, 60))
            return float(self.rng.uniform(0.0, cap))
        grow = (attempt + 1) if self.kind == "linear" else 2.0 ** min(attempt, 60)
        scale = float(self.rng.uniform(0.0, 1.0)) if self.random_start else 1.0
        return min(self.max, self.initial * scale * grow)


def acquire(env: simpy.Environment, request: Callable[[], Req], is_free: Callable[[], bool],
            backoff: Backoff, on_block: Callable[[], None], handoff_s: float = 0.0,
            spin: Callable[[Req, Callable[[], Req]], Generator[simpy.Event, object, Req]] | None = None,
            ) -> Generator[simpy.Event, object, Req]:
    """Take a lock; returns the granted request.

    Without backoff the thread queues, and either sleeps (``on_block`` gives its
    core away) or, with ``spin``, spins on its core until the lock is its
    (:meth:`simasgd.sim.cpu.Cores.spin_wait`). With backoff it retries
    test-and-set after each delay, so a newcomer may overtake it — the unfair
    spin lock that backoff policies are tuned for. A lock taken after waiting
    costs ``handoff_s`` more, inside the lock: the lock's cache line moving from
    the last holder to this one.
    """
    waited = not is_free()
    if backoff.spins:
        attempt = 0
        while not is_free():
            on_block()
            yield env.timeout(backoff.delay(attempt))
            attempt += 1
    elif waited and spin is None:
        on_block()
    req = request()
    if waited and spin is not None and not backoff.spins:
        req = yield from spin(req, request)
    else:
        yield req
    if waited and handoff_s > 0:
        yield env.timeout(handoff_s)
    return req


class Interrupts(simpy.Event):
    """Interrupts for many processes at one instant, as one event: each is thrown into its process in turn, in
    the order given, as the same number of ``Process.interrupt()`` calls made one after another would have them
    thrown (their events take consecutive ranks, so nothing runs between them but what each interrupted process
    does). A round's close cancels every worker still busy (k-sync): at a thousand workers, hundreds an update.

    The interrupt a process receives carries this event as its cause: a process that would interrupt another in
    its handler asks :meth:`later` instead, and those interrupts are thrown together by one more such event, in
    the order asked, right after these. That is the order their own events would have had wherever the handlers
    schedule no urgent event of their own (the urgent ones run first, by rank)."""

    __slots__ = ("processes", "then")

    def __init__(self, env: simpy.Environment, processes: list[simpy.Process], checked: bool = True) -> None:
        # simpy.Event.__init__ written out, as SimPy's Interruption does
        self.env, self.callbacks = env, [self._throw]
        self._ok, self._value = True, None
        for p in processes if checked else ():
            if not p.is_alive:
                raise RuntimeError(f"{p} has terminated and cannot be interrupted.")
            if p is env.active_process:
                raise RuntimeError("A process is not allowed to interrupt itself.")
        self.processes = processes
        self.then: list[simpy.Process] = []
        env.schedule(self, URGENT)

    def later(self, process: simpy.Process) -> None:
        """Interrupt ``process`` (alive now) right after this event's own, as an interrupt called from one of
        their handlers would be."""
        self.then.append(process)

    def _throw(self, _event: simpy.Event) -> None:
        for p in self.processes:
            if not p.is_alive:  # ended by one interrupted before it, as SimPy's Interruption ignores it
                continue
            p._target.callbacks.remove(p._resume)  # a live process waits on its target
            interruption = simpy.Event(self.env)
            interruption._ok, interruption._value = False, simpy.Interrupt(self)
            p._resume(interruption)
        if self.then:  # each was alive when asked for: checked then, as an Interruption is when made
            Interrupts(self.env, self.then, checked=False)
