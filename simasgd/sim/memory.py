"""Memory: moving the d-dimensional model costs bytes through shared bandwidth.

Each socket's memory is a processor-sharing server (:mod:`simasgd.sim.sharing`): the transfers in flight
split its bandwidth equally (none faster than one core can stream,
``core_bandwidth_gbs``). The model lives on its home socket (socket 0, where
the main thread first touched it). A thread on another socket pays the remote
latency and moves its bytes over the inter-socket link, which is itself a
processor-sharing server (the link, narrower than local memory, is the
bottleneck of a remote copy; the home socket's controller is not charged twice).
"""

from __future__ import annotations

import simpy

from simasgd.machines.machine import Machine
from simasgd.sim.sharing import Bandwidth, Completion


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

    def move(self, w: int, nbytes: float, first: bool = True, after: float = 0.0) -> Transfer:
        """Thread ``w`` moves ``nbytes`` of the model, ``after`` seconds from now: latency, then a share of its
        path's bandwidth.

        ``first = False`` continues a stream already started (a chunk after the
        first of a chunked copy): no second latency.
        """
        return Transfer(self.env, [self.move_part(w, nbytes, first, after)])

    def stream(self, w: int, nbytes: float, after: float = 0.0) -> Transfer:
        """Thread ``w`` streams ``nbytes`` of its own (first-touched, so local) data from its socket's DRAM,
        ``after`` seconds from now."""
        return Transfer(self.env, [self.stream_part(w, nbytes, after)])

    def move_part(self, w: int, nbytes: float, first: bool = True, after: float = 0.0) -> Part:
        """:meth:`move` as a part of a :class:`Transfer`."""
        path = self.link if self.remote[w] else self.local[self.home]
        return path, nbytes, after + (self.latency[w] if first else 0.0)

    def stream_part(self, w: int, nbytes: float, after: float = 0.0) -> Part:
        """:meth:`stream` as a part of a :class:`Transfer`."""
        return self.local[self.socket[w]], nbytes, after + self.latency_local


Part = tuple[Bandwidth, float, float]  # a transfer's path, its bytes, and the seconds from now before it starts


class Transfer(Completion):
    """Bytes through one or more paths at once, each part starting after its delay; it succeeds when the last
    part is through, in the step that found it so. A part waits in its path's calendar, not as an event of
    its own: a thread's work followed by its misses is a delay, not a step. Cancelled (k-sync's cancelled
    work), the parts not yet started never start and the transfer never succeeds."""

    __slots__ = ("cancelled", "left", "parts")

    def __init__(self, env: simpy.Environment, parts: list[Part]) -> None:
        # simpy.Event.__init__ written out, as SimPy's own events do: one is made for most steps at scale
        self.env, self.callbacks = env, []
        self.left = len(parts)
        self.cancelled = False
        self.parts = parts
        for path, nbytes, delay in parts:
            path.transfer(nbytes, self, delay if delay > 0.0 else 0.0)

    def succeed(self, value: object = None) -> Transfer:
        """A part of nothing is through at once: the transfer succeeds, as an event, if it was the last."""
        self.left -= 1
        if self.left == 0:
            super().succeed(value)
        return self

    def served(self) -> None:
        """A part is through (its path's timer found it so); the transfer is with the last."""
        self.left -= 1
        if self.left == 0:
            super().served()

    def cancel(self) -> None:
        self.cancelled = True
        for path in dict.fromkeys(path for path, _nbytes, _delay in self.parts):
            path.withdraw(self)
