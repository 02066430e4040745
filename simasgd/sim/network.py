"""The interconnect of the distributed algorithms: NICs, latency, the server's link, message sizes.

Nodes are the workers ``0..n−1`` and, for algorithms with a centre or a
parameter server, the server :data:`SERVER` (= n). Every node has a NIC with
an outgoing and an incoming side, each a SimPy resource of capacity 1: a
message from ``a`` to ``b`` holds ``a``'s outgoing side and ``b``'s incoming
side for ``bytes / min(bandwidth_a, bandwidth_b)`` seconds, after a one-way
``latency`` that holds nothing. So the server's incoming side is the shared
bottleneck of every push and its outgoing side of every pull: n workers
pushing at once queue there (FIFO), as they do on a real server's link.
Peer-to-peer messages (Keuper's decentralised ASGD: :meth:`Network.send`
between two workers) hold only the two workers' NICs.

A ring all-reduce of ``m`` bytes over ``p`` nodes (``sync``) costs
``2(p−1)·(latency + m/(p·bandwidth))`` (Patarasuk & Yuan 2009: bandwidth
optimal; Wongpanich et al. §3.2 use it, hierarchically beyond 1K nodes):
every node sends and receives ``2(p−1)/p·m`` bytes, so it is charged to
every NIC at once, as one timeout. With ``preset = "this"`` (and no latency or
bandwidth of its own) the all-reduce is the measured one instead
(:class:`AllreduceTable`: ``calibrate --network``'s ``all_reduce(SUM)`` medians by
rank count and size): a collective's step costs what gloo's does — a hand-off to
the process group's thread, gloo's ring of 2p segments, the reduction — several
one-way latencies a step where it was measured (benchmarks/README_dist.md), more
than the one-way latency alone charges. Ranks between or beyond those measured
follow the ring's step count, ``t = a + b·2(p−1)`` fitted to the measured ranks.

A message's cost to the ranks. The latency above holds no CPU, so with it alone a server that handles
every push in Python is never its own bottleneck. Where ``calibrate --network`` measured ``handling_us``
(:func:`handling_from_cpu`: the CPU time ``dist``'s server process spends on a push at 2 ranks, all its threads,
less its update step), the rank that receives a message spends that much CPU time on it
(:meth:`Network.handle`), one message at a time (a rank's one thread, ``cpu``), and a server's or centre's update of
θ is priced on the same CPU as the machine prices an update of that many parameters
(:meth:`simasgd.sim.costs.Platform.server_update_s`). The algorithms then send the messages ``dist``'s ranks send
(a server's reply is its worker's next pull, EA-wild's requests and acknowledgements are messages of a header,
:data:`HEADER_BYTES`): a server with n workers saturates at 1/(handling + update) pushes a second, and one worker's
round trip is two transfers, two handlings and the update. That round trip is longer than a back-to-back one
measured on loopback (the one-way latency, timed by a ping-pong, already holds part of both ends' CPU work) and
close to a ``dist`` worker's after a gradient, when both ends wake from a wait (benchmarks/README_dist.md).
Waking is priced where the profile timed the server loop with the worker busy before each push
(``[network.server_loop.by_gap]``): a rank idle — nothing handled, nothing sent — longer than either rank ever
idles back to back adds to the message it takes its share of what that loop's round trip grew by
(:func:`wake_from_gaps`, :meth:`Network.wake_s`). A profile without ``handling_us`` (from a calibrator that
did not measure it), and every preset, leave the ranks' CPUs out: messages cost no rank's CPU, a server's update
is free, and the algorithms' messages are the simpler ones of their own docstrings.

Message sizes (:func:`model_bytes`, :func:`gradient_bytes`): the model or a
gradient is ``d × itemsize`` bytes; a 1-bit gradient is
:func:`simasgd.numerics.compression.message_bytes`. What one row of ``updates.parquet``
moves is :func:`row_bytes` — the bytes the row's worker sent and received for
it — the same for every backend (the cpu executor's threads send nothing; it
records what they would have sent), and the summary reports the totals
(:func:`traffic`).

``[network] preset = "none"`` (the default) is shared memory: no message is
timed, and the algorithms' reads and updates cost what the machine model says
(:mod:`simasgd.sim.costs`); the bytes are still reported. Presets
(:data:`PRESETS`): line rates from the standards (IEEE 802.3 for Ethernet,
IBTA for InfiniBand EDR: 4 lanes × 25.78125 Gb/s, 64b/66b, = 100 Gb/s —
ConnectX-4 user manual, docs.nvidia.com/networking); latencies are orders of
magnitude, not measurements: a TCP message through the kernel tens of µs
(Mellanox 2019, "Paving the road to exascale": 30–40 µs CPU-onloaded), an
RDMA message on InfiniBand about 1 µs; ``nvlink4`` is one H100's NVLink 4 ports through NVSwitch (450 GB/s
each way), the workers' messages at NVLink's rate, not a machine of 8 GPUs. Each preset's sources are in
:data:`SOURCES` (the catalogue, docs/reference/presets.md, is generated from them). ``preset = "this"`` takes the
measured transport instead: the calibrated profile's ``[network]`` table
(``simasgd calibrate --network``: latency, point-to-point bandwidth and the
server's link under N senders, measured over backend ``dist``'s gloo).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from simasgd.machines.networks import MEASURED, PRESETS
from simasgd.numerics import compression

Proc = Generator[simpy.Event, Any, None]
HEADER_BYTES = 32  # a message's header in backend dist (four int64 words); alone, a request or an acknowledgement


@dataclass(frozen=True)
class AllreduceTable:
    """``all_reduce(SUM)`` as ``calibrate --network`` measured it: ``seconds[i][j]`` the median time over
    ``ranks[i]`` ranks of ``sizes[j]`` bytes (the profile's ``[network.allreduce]``).

    :meth:`seconds_for`: at a measured rank count the measured time; at any other, the least-squares line
    ``a + b·2(p−1)`` over the measured rank counts (the ring's steps: gloo's all-reduce is a ring, its time
    grows with them). Between two measured sizes linear in bytes; below the smallest the smallest's time (a
    small collective is latency-bound); above the largest that time plus the ring's bytes beyond it,
    ``2(p−1)/p·Δm`` at ``bandwidth_Bps``."""

    sizes: tuple[int, ...]
    ranks: tuple[int, ...]
    seconds: tuple[tuple[float, ...], ...]

    @classmethod
    def of(cls, table: Any) -> AllreduceTable | None:
        """From the profile's table (a model with ``bytes``, ``ranks``, ``seconds``, or a dict); None where it is
        missing, empty or ragged."""
        def get(k: str) -> Any:
            return table.get(k) if isinstance(table, dict) else getattr(table, k, None)

        raw_b, raw_r, raw_s = get("bytes"), get("ranks"), get("seconds")
        if not raw_b or not raw_r or not raw_s:
            return None
        sizes, ranks = tuple(int(b) for b in raw_b), tuple(int(r) for r in raw_r)
        seconds = tuple(tuple(float(x) for x in row) for row in raw_s)
        if len(seconds) != len(ranks) or any(len(row) != len(sizes) for row in seconds) or min(ranks) < 2:
            return None
        order = sorted(range(len(sizes)), key=lambda j: sizes[j])
        return cls(tuple(sizes[j] for j in order), ranks, tuple(tuple(row[j] for j in order) for row in seconds))

    def line(self, j: int) -> tuple[float, float]:
        """(a, b) of ``t = a + b·2(p−1)`` at size ``j``, least squares over the measured rank counts (one count:
        the line through the origin)."""
        x = [2.0 * (r - 1) for r in self.ranks]
        y = [row[j] for row in self.seconds]
        if len(set(x)) < 2:
            return 0.0, y[0] / x[0]
        mx, my = sum(x) / len(x), sum(y) / len(y)
        b = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y, strict=True)) / sum((xi - mx) ** 2 for xi in x)
        return my - b * mx, b

    def at_size(self, j: int, parties: int) -> float:
        if parties in self.ranks:
            return self.seconds[self.ranks.index(parties)][j]
        a, b = self.line(j)
        return max(0.0, a + b * 2 * (parties - 1))

    def seconds_for(self, nbytes: float, parties: int, bandwidth_Bps: float) -> float:
        if parties < 2:
            return 0.0
        s = self.sizes
        if nbytes <= s[0]:
            return self.at_size(0, parties)
        if nbytes >= s[-1]:
            extra = 2 * (parties - 1) / parties * (nbytes - s[-1]) / bandwidth_Bps
            return self.at_size(len(s) - 1, parties) + extra
        j = next(k for k in range(1, len(s)) if nbytes <= s[k])
        lo, hi = self.at_size(j - 1, parties), self.at_size(j, parties)
        return lo + (hi - lo) * (nbytes - s[j - 1]) / (s[j] - s[j - 1])


@dataclass(frozen=True)
class Links:
    """Resolved ``[network]``: bytes/s of a worker's NIC and the server's, one-way latency in s, the measured
    all-reduce where the transport was measured (``preset = "this"``), and the seconds of a rank's CPU a received
    message costs (the profile's ``handling_us``; None where it was not measured: no rank's CPU is modelled), and a
    round trip to the process group's store (``store_round_trip_us``, where measured and the network is the one
    measured: ``dist``'s per-step version counter of ``keuper`` / ``simuparallel``; None: not charged)."""

    bandwidth_Bps: float
    server_bandwidth_Bps: float
    latency_s: float
    allreduce: AllreduceTable | None = None
    handling_s: float | None = None
    store_s: float | None = None
    wake: Wake | None = None


def resolve(cfg: Any) -> Links | None:
    """The scenario's ``[network]`` (``scenario.NetworkConfig``) as numbers; None for shared memory.
    ``preset = "this"``: the calibrated profile's measured transport (:func:`measured`)."""
    net = _measured_table() if cfg.preset == MEASURED else None
    base, server_base = (_transport(net) if net is not None else (PRESETS[cfg.preset], None))
    gbps = cfg.bandwidth_gbps if cfg.bandwidth_gbps is not None else (base[0] if base else None)
    lat_us = cfg.latency_us if cfg.latency_us is not None else (base[1] if base else 0.0)
    if gbps is None:
        return None
    server = cfg.server_bandwidth_gbps if cfg.server_bandwidth_gbps is not None else (server_base or gbps)
    # a latency or bandwidth of the scenario's own is another network than the one measured
    own = cfg.latency_us is not None or cfg.bandwidth_gbps is not None
    table = AllreduceTable.of(net.allreduce) if net is not None and not own else None
    # a rank's CPU per message is the host's, not the link's: it holds under a latency or bandwidth of the scenario's
    handling = None if net is None or net.handling_us is None else float(net.handling_us) * 1e-6
    # the store's round trip is the measured loopback's, like the all-reduce: not under a network of the scenario's own
    rt = None if net is None or own else net.store_round_trip_us
    store = None if rt is None else float(rt) * 1e-6
    # waking from idle is the host's too (its CPUs' idle states), like the handling: it holds under a link of the
    # scenario's own
    gaps = None if net is None or net.server_loop is None else net.server_loop.by_gap
    wake = None if gaps is None else wake_of(gaps)
    return Links(gbps * 1e9 / 8, server * 1e9 / 8, lat_us * 1e-6, table, handling, store, wake)


def measured(path: Any = None) -> tuple[tuple[float, float], float | None]:
    """((Gb/s, one-way µs), the server link's Gb/s) from the profile's ``[network]`` table, written by
    ``simasgd calibrate --network`` (the transport of backend ``dist``); the presets stay for networks
    not measured. A clear error where the profile or its table is missing."""
    return _transport(_measured_table(path))


def _measured_table(path: Any = None) -> Any:
    """The profile's ``[network]`` table, read once for the transport and its all-reduce
    (``[network.allreduce]``: None in a profile calibrated before it was measured, the ring formula then);
    a clear error where the profile or the table is missing."""
    from simasgd.machines import profile

    p = path or profile_path()
    if not p.is_file():
        raise ValueError(f'[network] preset = "this": no calibrated profile at {p}; run `simasgd calibrate '
                         f'--network --out {p}`')
    net = profile.read(p).network
    if net is None or net.bandwidth_gbps is None or net.latency_us is None:
        raise ValueError(f'[network] preset = "this": {p} has no measured [network] table; run `simasgd '
                         f'calibrate --network --out {p}`')
    return net


def _transport(net: Any) -> tuple[tuple[float, float], float | None]:
    server = net.server_bandwidth_gbps
    return (float(net.bandwidth_gbps), float(net.latency_us)), None if server is None else float(server)


def profile_path() -> Path:
    """``machine.profile_path()``, the calibrated profile's path (``SIMASGD_PROFILE`` or profiles/this.toml),
    read here without importing :mod:`simasgd.machines.machine`, which imports the scenario, which imports this module
    (tests/distributed/test_calibrate_network.py holds the two to the same answer)."""
    return Path(os.environ.get("SIMASGD_PROFILE", "profiles/this.toml"))


def handling_from_cpu(cpu_per_message_s: float, update_s: float) -> float:
    """The seconds a rank spends on a message it receives (``handling_us``): the CPU time ``dist``'s server
    process spent per push (all its threads: the transport's receive and send, ``serve``'s loop, the update) less
    the update step, which the simulator prices apart; 0 where the update takes it all."""
    return max(0.0, cpu_per_message_s - update_s)


@dataclass(frozen=True)
class Wake:
    """What a rank adds to the message it takes after idling longer than ``after_s`` (:meth:`at`)."""

    after_s: float
    wake_s: float

    def at(self, idle: float) -> float:
        return self.wake_s if idle > self.after_s else 0.0


def wake_from_gaps(round_trip_s: list[float], messages_per_s: list[float], main_cpu_per_message_s: list[float]
                   ) -> Wake:
    """What a rank adds to a message after idling (:class:`Wake`), from the server loop at 2 ranks with the
    worker busy a gap before each push (``[network.server_loop.by_gap]``: the first gap 0).

    A rank's idle per push is, for the worker, its round trip, and for the server, a push's cycle less its main
    thread's CPU. At gap 0 neither pays a wake (``handling_us`` is measured there), so ``after_s`` is the longest
    either idles there. At each longer gap the round trip's growth over gap 0 is the wake of the ranks idle past
    ``after_s`` there, shared equally; ``wake_s`` is the median over the gaps (a round trip that did not grow
    counts 0), so that one gap whose loop idled into a deeper state does not set it alone."""
    def idle(j: int) -> tuple[float, float]:  # (the worker's, the server's) idle per push at row j
        return round_trip_s[j], 1.0 / messages_per_s[j] - main_cpu_per_message_s[j]

    after = max(idle(0))
    shares = []
    for j in range(1, len(round_trip_s)):
        waking = sum(t > after for t in idle(j))
        if waking:
            shares.append(max(0.0, round_trip_s[j] - round_trip_s[0]) / waking)
    return Wake(after, float(np.median(shares)) if shares else 0.0)


def wake_of(by_gap: Any) -> Wake:
    """:func:`wake_from_gaps` of a ``[network.server_loop.by_gap]`` table, as the profile's model or as a
    document's mapping."""
    def get(key: str) -> list[float]:
        return list(by_gap[key] if isinstance(by_gap, dict) else getattr(by_gap, key))

    return wake_from_gaps(get("round_trip_s"), get("messages_per_s"), get("main_cpu_per_message_s"))


def model_bytes(dim: int, itemsize: int) -> int:
    return dim * itemsize


def gradient_bytes(dim: int, itemsize: int, onebit: bool) -> int:
    return compression.message_bytes(dim) if onebit else dim * itemsize


def _onebit(sc: Any) -> bool:
    from simasgd.spec import algorithms

    return "onebit" in algorithms.ALGORITHMS[sc.algorithm.name].param_names and bool(sc.algorithm.param("onebit"))


def row_bytes(sc: Any, dim: int, itemsize: int) -> int:
    """Bytes one row's worker sends and receives for it (0: a shared-memory algorithm).

    ``param_server``: pull θ + push g (1-bit: compressed). ``easgd``/``eawild``: an exchange sends
    x_j and receives x̃ (a group's leader; the group's own all-reduce is not counted here).
    ``sync`` (and ``backup``): the ring all-reduce, 2(p−1)/p of a (1-bit) gradient each way, per
    gradient. ``keuper``: one state sent every ``exchange_every`` steps — the average per row, m /
    exchange_every. ``simuparallel`` (one average at the end) and shared-memory algorithms: 0."""
    name, n = sc.algorithm.name, sc.workers.count
    m = model_bytes(dim, itemsize)
    if name == "param_server":
        return m + gradient_bytes(dim, itemsize, _onebit(sc))
    if name in ("easgd", "eawild"):
        return 2 * m
    if name in ("sync", "backup"):
        g = gradient_bytes(dim, itemsize, _onebit(sc))
        return round(2 * 2 * (n - 1) / n * g) if n > 1 else 0
    if name == "keuper":
        return round(m / int(sc.algorithm.param("exchange_every")))
    return 0


def traffic(sc: Any, dim: int, itemsize: int, rows: int) -> dict[str, int]:
    """The summary's network figures: bytes per row and in all (``rows`` = the run's rows)."""
    b = row_bytes(sc, dim, itemsize)
    return {"bytes_per_row": b, "bytes_total": b * rows} if b else {}


def for_run(run: Any, servers: int = 1) -> Network:
    """The network of a simulated run (``SimRun``): its scenario's ``[network]``, n workers, ``servers`` servers."""
    cfg = run.sc.network
    return Network(run.env, None if cfg is None else resolve(cfg), run.n, servers)


class Network:
    """The NICs of one simulated run (module docstring); ``links=None`` makes every message free."""

    def __init__(self, env: simpy.Environment, links: Links | None, workers: int, servers: int = 1) -> None:
        self.env, self.links, self.n = env, links, workers
        self.server = workers                 # the (first) server's node id
        self.servers = list(range(workers, workers + servers))  # Downpour: one server node per shard
        nodes = workers + servers
        self.out = [simpy.Resource(env, 1) for _ in range(nodes)]
        self.inn = [simpy.Resource(env, 1) for _ in range(nodes)]
        self.cpu = [simpy.Resource(env, 1) for _ in range(nodes)]  # each rank's one thread that handles messages
        self.active = [0.0] * nodes  # when each rank last handled or sent a message: its idle time's start
        self.bytes_sent = [0] * nodes

    @property
    def enabled(self) -> bool:
        return self.links is not None

    @property
    def handles(self) -> bool:
        """Messages cost the ranks that receive them CPU time (the profile measured ``handling_us``), and a
        server's or centre's update costs its CPU: the algorithms then run the messages as the ``dist``
        backend's ranks do (module docstring)."""
        return self.links is not None and self.links.handling_s is not None

    @property
    def handling_s(self) -> float:
        """Seconds of the receiving rank's CPU per message (0 where not measured)."""
        return 0.0 if self.links is None or self.links.handling_s is None else self.links.handling_s

    def handle(self, node: int, work_s: float = 0.0) -> Proc:
        """Rank ``node`` takes a message it received (``yield from``): its CPU, one message at a time in arrival
        order, for :attr:`handling_s`, the wake of a rank that idled (:meth:`wake_s`) and ``work_s`` (a server's
        update of θ)."""
        with self.cpu[node].request() as r:
            yield r
            yield self.env.timeout(self.handling_s + self.wake_s(node) + work_s)
        self.active[node] = self.env.now

    def wake_s(self, node: int) -> float:
        """What waking rank ``node`` adds to the message it takes now, by how long it has been idle — nothing
        handled, nothing sent (:class:`Wake`); 0 where the profile did not time it."""
        wake = None if self.links is None else self.links.wake
        return 0.0 if wake is None else wake.at(self.env.now - self.active[node])

    def bandwidth(self, node: int) -> float:
        assert self.links is not None
        return self.links.server_bandwidth_Bps if node >= self.n else self.links.bandwidth_Bps

    def transfer_s(self, src: int, dst: int, nbytes: float) -> float:
        """Latency plus serialisation at the slower NIC, without queueing."""
        if self.links is None:
            return 0.0
        return self.links.latency_s + nbytes / min(self.bandwidth(src), self.bandwidth(dst))

    def send(self, src: int, dst: int, nbytes: float) -> Proc:
        """Move ``nbytes`` from ``src`` to ``dst`` (``yield from``): queue for both NICs, then transfer."""
        self.bytes_sent[src] += int(nbytes)
        self.active[src] = self.env.now
        if self.links is None or nbytes <= 0:
            return
        yield self.env.timeout(self.links.latency_s)
        with self.out[src].request() as a:  # outgoing side first, then incoming: no circular wait
            yield a
            with self.inn[dst].request() as b:
                yield b
                yield self.env.timeout(nbytes / min(self.bandwidth(src), self.bandwidth(dst)))

    def allreduce_s(self, nbytes: float, parties: int) -> float:
        """Seconds of an all-reduce of ``nbytes`` over ``parties`` nodes: the measured one where the links carry
        it, else the ring's formula (module docstring)."""
        if self.links is None or parties < 2:
            return 0.0
        if self.links.allreduce is not None:
            return self.links.allreduce.seconds_for(nbytes, parties, self.links.bandwidth_Bps)
        return 2 * (parties - 1) * (self.links.latency_s + nbytes / (parties * self.links.bandwidth_Bps))
