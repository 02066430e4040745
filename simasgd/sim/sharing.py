"""Processor sharing on a virtual-time clock: the servers that slow every job down together.

A processor-sharing server serves all of its jobs at once, each at a speed set by how many share it
(memory bandwidth, an inter-socket link, a GPU's SMs and atomic units). Walking every job at every
arrival and departure to subtract what it received costs n steps an event, n² for n concurrent jobs.
Instead the server keeps a virtual clock ``V``, the service one unit of weight has received since the
start (dV/dt = the speed of a unit weight now). A job of ``size`` and weight ``w`` that arrives at
``V₀`` is done when ``V`` reaches ``V₀ + size / w``, whatever happens to the number of sharers
meanwhile: its finish in virtual time is fixed on arrival and goes on a heap: O(log n) an arrival or a
departure.

Only a departure needs an event: someone waits on it. A job submitted to start later (a thread's misses,
after its work and the memory's latency) waits in the server's calendar of arrivals; the arrivals before
the next departure are taken by arithmetic, in order of time, when the server next looks (at a departure,
or a submission). One timer is kept, for the next departure with the known arrivals counted in. A
submission only slows the others down (or brings a smaller job that finishes first, which re-arms the
timer), so the timer already set fires no later than the departure it was set for: it stays, fires early,
finds nothing done and is set again.

Where the first job to leave is in service, the server keeps its finish in virtual time (``first``). A job
submitted then that would end no sooner in virtual time — from ``V`` now, as ``V`` never runs back — is not
the first to leave: from its start the two are served at one speed a unit weight, and the other has less
left. A job only slows the others down, so the first departure is the same job, later: the timer stays,
with no walk over the calendar. Without this, n threads sharing a server and submitting their misses ahead
each walk the others' arrivals: n² steps. (Where the first to leave is still in the calendar, a job that
starts before it may fill an idle spell and move its start in ``V``: there the walk decides.)
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable
from typing import Any

import simpy
from simpy.events import NORMAL

_EPS = 1e-12

Job = tuple[float, int, float, simpy.Event]  # in service: (finish in V, order, weight, done)
Arrival = tuple[float, int, float, float, simpy.Event]  # to start: (at, order, size, weight, done)


class SharedServer:
    """A processor-sharing server: job ``i`` of weight ``wᵢ`` is served at ``wᵢ · speed(n, Σw)`` units/s.

    ``speed(n, total_weight)`` is the rate of a unit weight when ``n`` jobs of total weight ``Σw`` are in
    service; it never grows with ``n`` or ``Σw`` (a sharer only slows the others down) and depends on nothing
    else. ``tol_units(now, rate)``: work left (in the job's own units) below which a job counts as done, a unit
    weight being served at ``rate`` — the clock's resolution at time ``now``, so that float rounding never
    re-arms a zero-length wait forever.
    """

    def __init__(self, env: simpy.Environment, speed: Callable[[int, float], float],
                 tol_units: Callable[[float, float], float]) -> None:
        self.env = env
        self._speed = speed
        self._tol = tol_units
        self._solo: dict[float, float] = {}  # a job's speed alone, by its weight: speed(1, w) · w
        self.heap: list[Job] = []
        self.arrivals: list[Arrival] = []  # sorted by (at, order): jobs submitted to start later
        self.weight = 0.0
        self.rate = 0.0  # speed(n, Σw) of the jobs in service: set at each change of them, read at each advance
        self.virtual = 0.0  # V: service per unit weight since the start
        self.last = 0.0
        self.generation = 0
        self.timer_at = math.inf  # when the live timer fires (inf: none)
        self.first = math.inf  # the finish in V of the first to leave, where it is in service (else inf)
        self._order = itertools.count()

    def __len__(self) -> int:
        """Jobs in service now."""
        self._settle()
        return len(self.heap)

    def submit(self, size: float, weight: float = 1.0, done: simpy.Event | None = None,
               after: float = 0.0) -> simpy.Event:
        """A job of ``size`` units and ``weight`` that starts ``after`` seconds from now: ``done`` succeeds
        when it has been served."""
        done = done if done is not None else self.env.event()
        if after > 0:
            at = self.env._now + after
            size = max(size, 0.0)
            bisect.insort(self.arrivals, (at, next(self._order), size, weight, done))
            solo = self._solo.get(weight)
            if solo is None:
                solo = self._solo[weight] = weight * self._speed(1, weight)
            if at + size / solo >= self.timer_at:
                return done  # it only slows the others down and ends no sooner than the live timer: that stays
            self._settle()
        elif size <= 0:
            return done.succeed()
        else:
            self._settle()
            heapq.heappush(self.heap, (self.virtual + size / weight, next(self._order), weight, done))
            self.weight += weight
            self.rate = self._speed(len(self.heap), self.weight)
        if self.virtual + size / weight >= self.first:
            return done  # not the first to leave: the first departure is the same job, no sooner
        self._rearm()
        return done

    def withdraw(self, done: simpy.Event) -> float:
        """Take the jobs of ``done`` that have not started yet off the calendar; the units they held."""
        self._settle()
        gone = [a for a in self.arrivals if a[4] is done]
        if gone:
            self.arrivals = [a for a in self.arrivals if a[4] is not done]
            self.timer_at = math.inf  # the live timer counted them in: it may be late now
            self.generation += 1
            self._rearm()
        return sum(a[2] for a in gone)

    def _settle(self) -> None:
        """Admit the arrivals due by now, each at its instant, and bring ``V`` to now. No job departs
        meanwhile: the timer is set for the first departure with these arrivals counted in. (In locals: it runs
        at every arrival and departure of every transfer.)"""
        arrivals, heap = self.arrivals, self.heap
        now = self.env._now
        virtual, last = self.virtual, self.last
        if arrivals and arrivals[0][0] <= now:
            rate, weight, speed = self.rate, self.weight, self._speed
            i, n = 0, len(arrivals)
            while i < n and arrivals[i][0] <= now:
                at, order, size, w, done = arrivals[i]
                if at > last:  # V brought to the arrival's instant
                    if heap:
                        virtual += (at - last) * rate
                    last = at
                heapq.heappush(heap, (virtual + size / w, order, w, done))
                weight += w
                rate = speed(len(heap), weight)
                i += 1
            del arrivals[:i]
            self.rate, self.weight = rate, weight
        if now > last:
            if heap:
                virtual += (now - last) * self.rate
            last = now
        self.virtual, self.last = virtual, last

    def _next_departure(self) -> float:
        """When the first job will be done, the arrivals before it counted in, were nothing else submitted;
        its finish in ``V`` kept as ``first`` if it is in service."""
        t, v = self.last, self.virtual
        n, weight = len(self.heap), self.weight
        top = self.heap[0][0] if n else math.inf
        first = top
        speed = self.rate
        for at, _order, size, w, _done in self.arrivals:
            if n:
                departs = t + (top - v) / speed
                if departs <= at:
                    self.first = first
                    return departs
                v += (at - t) * speed
            t = at
            n += 1
            weight += w
            ends = v + size / w
            if ends < top:
                top, first = ends, math.inf
            speed = self._speed(n, weight)
        self.first = first
        return t + (top - v) / speed if n else math.inf

    def _rearm(self) -> None:
        if not self.heap:
            self.weight = 0.0  # no drift from adding and removing weights carries into the next busy period
            if not self.arrivals:
                self.first = math.inf
                return
        now = self.env._now
        at = self._next_departure()
        if at < now:
            at = now
        if self.timer_at <= at:
            return  # the live timer fires first: it will look again then
        self.generation += 1
        self.timer_at = at
        _Timer(self, at - now)

    def _complete(self, gen: int) -> None:
        if gen != self.generation:
            return  # superseded by a job that finishes first
        self.timer_at = math.inf
        self._settle()
        tol = self._tol(self.env._now, self.rate)
        heap = self.heap
        served = []
        while heap and (heap[0][0] - self.virtual) * heap[0][2] <= tol:
            _finish, _order, weight, done = heapq.heappop(heap)
            self.weight -= weight
            served.append(done)
        if served:
            self.rate = self._speed(len(heap), self.weight)
        self._rearm()  # before any waiter runs: one that submits again finds the server as it is now
        for done in served:
            if isinstance(done, Completion):
                done.served()
            else:
                done.succeed()


class _Timer(simpy.Event):
    """A server's timer for its next departure, set ``delay`` seconds from now: at it, the server looks
    (:meth:`SharedServer._complete`) unless it has set another since (its generation has moved on). A timeout
    written out, with no closure: one is set for nearly every part of every transfer."""

    def __init__(self, server: SharedServer, delay: float) -> None:
        env = server.env
        self.env, self.server, self.gen = env, server, server.generation
        self.callbacks = [_fire]
        self._value, self._ok = None, True
        env.schedule(self, NORMAL, delay)


def _fire(timer: Any) -> None:  # a _Timer; SimPy types its callbacks' argument as any event
    timer.server._complete(timer.gen)


class Completion(simpy.Event):
    """A job's done event whose waiters run in the step of the server's timer that found the job served: the
    timer stands for the event, so a departure costs one event, not two (the timer's, then the done event's
    at the same instant). Elsewhere it succeeds as any event does."""

    __slots__ = ()

    def served(self) -> None:
        """The job is through: the waiters go on now, within the step that found it so."""
        self._ok = True
        self._value = None
        callbacks, self.callbacks = self.callbacks, None  # type: ignore[assignment]  # processed, as SimPy marks it
        for callback in callbacks:
            callback(self)


class Bandwidth:
    """A processor-sharing link: ``n`` transfers in flight each get ``min(cap, rate / n)`` bytes/s.

    Not a queue, so not a ``BaseResource``: nothing waits to start, everything slows down together.
    """

    def __init__(self, env: simpy.Environment, bytes_per_s: float, cap_bytes_per_s: float) -> None:
        self.env = env
        self.rate = bytes_per_s
        self.cap = cap_bytes_per_s
        self.bytes_moved = 0.0  # bytes of the transfers submitted, less those withdrawn before they started
        self.server = SharedServer(env, self._share, self._tolerance)

    def _share(self, n: int, _weight: float) -> float:
        return min(self.cap, self.rate / n) if n else self.cap

    def _tolerance(self, now: float, rate: float) -> float:
        return rate * _EPS * max(1.0, now) + 1e-6

    def transfer(self, nbytes: float, done: simpy.Event | None = None, after: float = 0.0) -> simpy.Event:
        """``nbytes`` through the link, starting ``after`` seconds from now."""
        if nbytes > 0:
            self.bytes_moved += nbytes
        return self.server.submit(float(nbytes), 1.0, done, after)

    def withdraw(self, done: simpy.Event) -> None:
        """Transfers of ``done`` not started yet never start."""
        self.bytes_moved -= self.server.withdraw(done)
