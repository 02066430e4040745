"""Processor sharing on a virtual-time clock: the servers that slow every job down together.

A processor-sharing server serves all of its jobs at once, each at a speed set by how many share it
(memory bandwidth, an inter-socket link, a GPU's SMs and atomic units). Walking every job at every
arrival and departure to subtract what it received costs n steps an event, n² for n concurrent jobs.
Instead the server keeps a virtual clock ``V``, the service one unit of weight has received since the
start (dV/dt = the speed of a unit weight now). A job of ``size`` and weight ``w`` that arrives at
``V₀`` is done when ``V`` reaches ``V₀ + size / w``, whatever happens to the number of sharers
meanwhile: its finish in virtual time is fixed on arrival and goes on a heap. An arrival or a
departure advances ``V``; one timer is kept for the heap's top: O(log n) an event. An arrival only slows
the others down, so the timer already set fires no later than the top's finish: it stays, fires early,
finds nothing done and is set again — one event at the next departure instead of one at every arrival.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable

import simpy

_EPS = 1e-12


class SharedServer:
    """A processor-sharing server: job ``i`` of weight ``wᵢ`` is served at ``wᵢ · speed(n, Σw)`` units/s.

    ``speed(n, total_weight)`` is the rate of a unit weight when ``n`` jobs of total weight ``Σw`` are in
    service. ``tol_units(now)``: work left (in the job's own units) below which a job counts as done — the
    clock's resolution at time ``now``, so that float rounding never re-arms a zero-length wait forever.
    """

    def __init__(self, env: simpy.Environment, speed: Callable[[int, float], float],
                 tol_units: Callable[[float], float]) -> None:
        self.env = env
        self._speed = speed
        self._tol = tol_units
        self.heap: list[tuple[float, int, float, simpy.Event]] = []  # (finish in V, arrival order, weight, done)
        self.weight = 0.0
        self.virtual = 0.0  # V: service per unit weight since the start
        self.last = 0.0
        self.generation = 0
        self.timer_at = math.inf  # when the live timer fires (inf: none)
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self.heap)

    def speed(self) -> float:
        """Units/s of a unit weight now."""
        return self._speed(len(self.heap), self.weight)

    def submit(self, size: float, weight: float = 1.0, done: simpy.Event | None = None) -> simpy.Event:
        """A job of ``size`` units and ``weight``: ``done`` succeeds when it has been served."""
        done = done if done is not None else self.env.event()
        if size <= 0:
            return done.succeed()
        self._advance()
        heapq.heappush(self.heap, (self.virtual + size / weight, next(self._order), weight, done))
        self.weight += weight
        self._rearm()
        return done

    def _advance(self) -> None:
        now = self.env.now
        if self.heap and now > self.last:
            self.virtual += (now - self.last) * self.speed()
        self.last = now

    def _rearm(self) -> None:
        if not self.heap:
            self.weight = 0.0  # no drift from adding and removing weights carries into the next busy period
            return
        wait = max(0.0, (self.heap[0][0] - self.virtual) / self.speed())
        if self.timer_at <= self.env.now + wait:
            return  # the live timer fires first: it will look again then
        self.generation += 1
        gen = self.generation
        self.timer_at = self.env.now + wait
        self.env.timeout(wait).callbacks.append(lambda _ev: self._complete(gen))

    def _complete(self, gen: int) -> None:
        if gen != self.generation:
            return  # superseded by an arrival that finishes first
        self.timer_at = math.inf
        self._advance()
        tol = self._tol(self.env.now)
        heap = self.heap
        while heap and (heap[0][0] - self.virtual) * heap[0][2] <= tol:
            _finish, _order, weight, done = heapq.heappop(heap)
            self.weight -= weight
            done.succeed()
        self._rearm()


class Bandwidth:
    """A processor-sharing link: ``n`` transfers in flight each get ``min(cap, rate / n)`` bytes/s.

    Not a queue, so not a ``BaseResource``: nothing waits to start, everything slows down together.
    """

    def __init__(self, env: simpy.Environment, bytes_per_s: float, cap_bytes_per_s: float) -> None:
        self.env = env
        self.rate = bytes_per_s
        self.cap = cap_bytes_per_s
        self.bytes_moved = 0.0
        self.server = SharedServer(env, self._share, self._tolerance)

    def _share(self, n: int, _weight: float) -> float:
        return min(self.cap, self.rate / n) if n else self.cap

    def _tolerance(self, now: float) -> float:
        return self.share() * _EPS * max(1.0, now) + 1e-6

    def share(self) -> float:
        """Bytes/s each transfer in flight gets now."""
        return self._share(len(self.server), 0.0)

    def transfer(self, nbytes: float, done: simpy.Event | None = None) -> simpy.Event:
        if nbytes > 0:
            self.bytes_moved += nbytes
        return self.server.submit(float(nbytes), 1.0, done)
