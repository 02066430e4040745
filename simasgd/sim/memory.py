"""Memory: moving the d-dimensional model costs bytes through shared bandwidth.

Each socket's memory is a processor-sharing server: the transfers in flight
split its bandwidth equally (none faster than one core can stream,
``core_bandwidth_gbs``). The model lives on its home socket (socket 0, where
the main thread first touched it). A thread on another socket pays the remote
latency and moves its bytes over the inter-socket link, which is itself a
processor-sharing server (the link, narrower than local memory, is the
bottleneck of a remote copy; the home socket's controller is not charged twice).
"""

from __future__ import annotations

import simpy

from simasgd.machine import Machine

_EPS = 1e-12


class Bandwidth:
    """A processor-sharing link: ``n`` transfers in flight each get ``min(cap, rate / n)`` bytes/s.

    Not a queue, so not a ``BaseResource``: nothing waits to start, everything
    slows down together. One completion timer is kept for the earliest finisher.
    """

    def __init__(self, env: simpy.Environment, bytes_per_s: float, cap_bytes_per_s: float) -> None:
        self.env = env
        self.rate = bytes_per_s
        self.cap = cap_bytes_per_s
        self.active: dict[simpy.Event, float] = {}
        self.last = 0.0
        self.generation = 0
        self.bytes_moved = 0.0

    def share(self) -> float:
        n = len(self.active)
        return min(self.cap, self.rate / n) if n else self.cap

    def transfer(self, nbytes: float, done: simpy.Event | None = None) -> simpy.Event:
        done = done if done is not None else self.env.event()
        if nbytes <= 0:
            return done.succeed()
        self._advance()
        self.active[done] = float(nbytes)
        self.bytes_moved += nbytes
        self._reschedule()
        return done

    def _advance(self) -> None:
        now = self.env.now
        if self.active and now > self.last:
            moved = (now - self.last) * self.share()
            for ev in self.active:
                self.active[ev] -= moved
        self.last = now

    def _reschedule(self) -> None:
        self.generation += 1
        if not self.active:
            return
        gen = self.generation
        wait = max(0.0, min(self.active.values()) / self.share())
        self.env.timeout(wait).callbacks.append(lambda _ev: self._complete(gen))

    def _complete(self, gen: int) -> None:
        if gen != self.generation:
            return  # superseded by a later arrival or completion
        self._advance()
        # Done when what is left would take less than the clock's resolution at this time
        # (otherwise float rounding could reschedule a zero-length wait forever).
        tol = self.share() * _EPS * max(1.0, self.env.now) + 1e-6
        finished = [ev for ev, left in self.active.items() if left <= tol]
        for ev in finished:
            del self.active[ev]
            ev.succeed()
        self._reschedule()


class Memory:
    """Per-socket bandwidth, the link between sockets, and where each thread sits."""

    def __init__(self, env: simpy.Environment, machine: Machine, sockets: list[int], home: int = 0) -> None:
        self.env = env
        cap = machine.core_bandwidth_gbs * 1e9
        self.local = [Bandwidth(env, machine.mem_bandwidth_gbs * 1e9, cap) for _ in range(machine.sockets)]
        self.link = Bandwidth(env, machine.link_bandwidth_gbs * 1e9, cap)
        self.home = home
        self.socket = list(sockets)
        self.remote = [s != home for s in sockets]
        self.latency = [(machine.remote_latency_ns if r else machine.local_latency_ns) * 1e-9 for r in self.remote]
        self.latency_local = machine.local_latency_ns * 1e-9

    def move(self, w: int, nbytes: float, first: bool = True) -> simpy.Event:
        """Thread ``w`` moves ``nbytes`` of the model: latency, then a share of its path's bandwidth.

        ``first = False`` continues a stream already started (a chunk after the
        first of a chunked copy): no second latency.
        """
        path = self.link if self.remote[w] else self.local[self.home]
        lat = self.latency[w] if first else 0.0
        if lat <= 0:
            return path.transfer(nbytes)
        done = self.env.event()

        def start(_ev: simpy.Event) -> None:
            path.transfer(nbytes, done)
        self.env.timeout(lat).callbacks.append(start)
        return done

    def stream(self, w: int, nbytes: float) -> simpy.Event:
        """Thread ``w`` streams ``nbytes`` of its own (first-touched, so local) data from its socket's DRAM."""
        done = self.env.event()
        path = self.local[self.socket[w]]

        def start(_ev: simpy.Event) -> None:
            path.transfer(nbytes, done)
        self.env.timeout(self.latency_local).callbacks.append(start)
        return done
