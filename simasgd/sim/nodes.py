"""The memory of a cluster's nodes: a machine whose sockets are nodes (``Machine.nodes``, preset ``cluster-1024``).

Nodes share no memory. Each worker's copy of the model, or its own state (an elastic worker's x_j, a decentralised
worker's θ_i), is in its own node's DRAM, so every read, update and stream of a worker goes through its node's
memory — the :class:`~simasgd.sim.memory.Memory` of a one-socket machine with the preset's figures, shared only by
the workers placed on that node — never over an inter-socket link. What crosses between nodes is ``[network]``'s
messages (:mod:`simasgd.sim.network`); ``machine.check_nodes`` refuses a run on such a machine without them.
"""

from __future__ import annotations

from dataclasses import replace

import simpy

from simasgd.machines.machine import Machine
from simasgd.sim.memory import Memory, Part, Transfer


class NodeMemory:
    """:class:`Memory`'s interface (``move``, ``stream``, ``latency``) over one memory per node."""

    def __init__(self, env: simpy.Environment, machine: Machine, sockets: list[int]) -> None:
        one = replace(machine, sockets=1, nodes=False)
        node = {s: Memory(env, one, [0]) for s in sorted(set(sockets))}
        self.of = [node[s] for s in sockets]  # each worker's node
        self.socket = list(sockets)
        self.remote = [False] * len(sockets)
        self.latency = [m.latency[0] for m in self.of]
        self.latency_local = machine.local_latency_ns * 1e-9

    def move(self, w: int, nbytes: float, first: bool = True, after: float = 0.0) -> Transfer:
        """Worker ``w`` moves ``nbytes`` of its model copy or state: its own node's memory."""
        return self.of[w].move(0, nbytes, first, after)

    def stream(self, w: int, nbytes: float, after: float = 0.0) -> Transfer:
        """Worker ``w`` streams ``nbytes`` of its private data from its node's memory."""
        return self.of[w].stream(0, nbytes, after)

    def move_part(self, w: int, nbytes: float, first: bool = True, after: float = 0.0) -> Part:
        return self.of[w].move_part(0, nbytes, first, after)

    def stream_part(self, w: int, nbytes: float, after: float = 0.0) -> Part:
        return self.of[w].stream_part(0, nbytes, after)
