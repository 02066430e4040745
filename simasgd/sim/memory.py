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
from simasgd.sim.sharing import Bandwidth


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
