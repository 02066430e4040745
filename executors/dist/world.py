"""The processes of a ``dist`` run, their roles, their messages and their one clock.

One OS process per node: the server(s) or the centre on ranks ``0..S−1`` (``S`` = 0 for ``sync``,
``shards`` for ``param_server``, 1 for ``easgd``/``eawild``), worker ``w`` on rank ``S + w``. simasgd
forks them itself on loopback (``init_method = tcp://127.0.0.1:<free port>``), or they are the
processes ``torchrun`` started (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` in the environment: the
``env://`` rendezvous). Every rank waits at a start barrier, then reads ``time.perf_counter_ns``:
its times are seconds from there (on one machine one clock, CLOCK_MONOTONIC; across machines the
barrier's release aligns them to within its latency).

A message between two ranks (:class:`Rank` ``send`` / ``recv``) is one buffer of θ's dtype: a header
of :data:`HEADER` int64 words (kind, worker, two numbers; their bytes copied as they are) and the
payload. gloo's receive needs the size beforehand, so every message on a channel has the size its
receiver expects: a kind without a payload sent where one is expected (a stop, a first pull, a
goodbye: once per worker and run) carries that many elements of nothing. EA-wild's centre takes
header-only pull requests and pushes from any leader: there a header goes alone and the payload
after it (``send_split``, two gloo sends). Every rank counts the messages and bytes it sends and
receives, headers and padding included.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np

from simasgd.spec.scenario import Scenario

HEADER = 4                          # int64 words: kind, worker, a, b
FAIL_ENV = "SIMASGD_DIST_FAIL_RANK"  # test hook: this rank raises after the start barrier
SERVED = {"sync": 0, "easgd": 1, "eawild": 1, "keuper": 0, "simuparallel": 0,
          "ssp": 1, "backup": 1}  # ranks before the workers (param_server: its shards)


class DistError(RuntimeError):
    """A rank failed, hung, or the launch does not fit the scenario."""


@dataclass(frozen=True)
class Layout:
    """Who runs on which rank: ``servers`` server/centre ranks first, then ``workers`` worker ranks."""

    algorithm: str
    workers: int
    servers: int

    @classmethod
    def of(cls, sc: Scenario, dim: int) -> Layout:
        name = sc.algorithm.name
        servers = max(1, min(int(sc.algorithm.param("shards")), dim)) if name == "param_server" else SERVED[name]
        return cls(name, sc.workers.count, servers)

    @property
    def world(self) -> int:
        return self.workers + self.servers

    def role(self, rank: int) -> str:
        if rank < self.servers:
            kind = "centre" if self.algorithm in ("easgd", "eawild") else "server"
            return f"{kind} {rank}" if self.servers > 1 else kind
        return f"worker {rank - self.servers}"


COLUMNS = ("worker", "version", "read_version", "t_start", "t_read", "t_grad_start", "t_grad_end", "t_write",
           "lock_wait_s", "distance", "applied")


@dataclass
class Rows:
    """One rank's rows of ``updates.parquet`` (times in seconds from the start barrier)."""

    cols: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in COLUMNS})

    def add(self, worker: int, version: int, read_version: int, t_start: float, t_read: float, t_grad_start: float,
            t_grad_end: float, t_write: float, wait: float = 0.0, distance: float = float("nan"),
            applied: bool = True) -> None:
        for k, v in zip(COLUMNS, (worker, version, read_version, t_start, t_read, t_grad_start, t_grad_end, t_write,
                                  wait, distance, applied), strict=True):
            self.cols[k].append(v)

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.cols.items()}



@dataclass
class Rank:
    """This process in the run: its rank, role, scenario, workload, clock, rows and message counts."""

    sc: Scenario
    run: int
    wl: Any
    rank: int
    layout: Layout
    dtype: Any
    t0_ns: int = 0
    rows: Rows = field(default_factory=Rows)
    snaps: list[tuple[float, int, np.ndarray]] = field(default_factory=list)  # (t, version, θ or its shard)
    final: np.ndarray | None = None
    combine: str = "concat"  # θ from the holders' finals and snapshots: their shards joined, or their mean
    extra: dict[str, Any] = field(default_factory=dict)
    sent: list[int] = field(default_factory=lambda: [0, 0])      # messages, bytes
    received: list[int] = field(default_factory=lambda: [0, 0])
    _hdr: np.ndarray = field(default_factory=lambda: np.zeros(HEADER, np.int64))
    _bufs: dict[int, np.ndarray] = field(default_factory=dict)  # message buffers by payload length
    live: Any = None  # the ε watcher (executors.dist.live.Live) where this rank holds all of θ

    def clock(self) -> float:
        return (time.perf_counter_ns() - self.t0_ns) * 1e-9

    @property
    def deadline(self) -> float:
        return float(self.sc.stop.max_time_s)

    @property
    def eval_every(self) -> int:
        return self.sc.stop.eval_updates()

    def watch(self, theta0: np.ndarray) -> None:
        """This rank holds all of θ: evaluate its snapshots during the run when the scenario has an ε."""
        if self.sc.stop.has_target:
            from executors.dist.live import Live

            self.live = Live(self.sc, self.run, self.wl, theta0)

    def over(self) -> bool:
        """Past ``stop.max_time_s``, or ε reached (or the loss crashed) by what this rank watches."""
        if self.live is not None and self.live.done:
            self.extra["stopped_by"] = "epsilon" if self.live.mon.reached else "crashed"
            return True
        return self.clock() >= self.deadline

    def snapshot(self, version: int, theta: np.ndarray) -> None:
        """Keep θ (or this shard of it) at ``version`` when the loss curve has a point there."""
        if version % self.eval_every == 0:
            self.snaps.append((self.clock(), version, theta.copy()))
            if self.live is not None:
                self.live.todo.put(self.snaps[-1])

    def unwatch(self) -> None:
        if self.live is not None:
            self.live.close()

    def send(self, dst: int, kind: int, worker: int = 0, a: int = 0, b: int = 0,
             payload: np.ndarray | None = None, size: int = 0) -> None:
        """One message: the header and ``payload`` (or ``size`` elements of nothing, where the receiver
        expects a payload of that size and this kind carries none) in one buffer, one gloo send."""
        import torch
        import torch.distributed as dist

        buf = self._buffer(len(payload) if payload is not None else size)
        pack(buf, kind, worker, a, b, payload)
        dist.send(torch.from_numpy(buf), dst)
        self.sent[0] += 1
        self.sent[1] += buf.nbytes

    def recv(self, src: int | None = None, payload: np.ndarray | None = None,
             with_payload: Any = None, size: int = 0) -> tuple[int, np.ndarray]:
        """One message from ``src`` (None: any rank) of a header and ``len(payload)`` (or ``size``)
        elements; the elements go into ``payload`` when the header's kind is in ``with_payload`` (every
        kind when None). Returns (sender, header)."""
        import torch
        import torch.distributed as dist

        buf = self._buffer(len(payload) if payload is not None else size)
        got = dist.recv(torch.from_numpy(buf), src)
        hdr = header(buf)
        if payload is not None and (with_payload is None or int(hdr[0]) in with_payload):
            payload[:] = buf[header_elements(buf.dtype):]
        self.received[0] += 1
        self.received[1] += buf.nbytes
        return int(got), hdr

    def send_split(self, dst: int, kind: int, worker: int = 0, payload: np.ndarray | None = None) -> None:
        """A header alone, then ``payload`` if any: for a receiver that cannot know the size beforehand
        (EA-wild's centre takes pull requests and pushes from any leader): two gloo sends."""
        import torch
        import torch.distributed as dist

        self._hdr[:] = (kind, worker, 0, 0)
        dist.send(torch.from_numpy(self._hdr), dst)
        n = self._hdr.nbytes
        if payload is not None:
            dist.send(torch.from_numpy(np.ascontiguousarray(payload)), dst)
            n += payload.nbytes
        self.sent[0] += 1
        self.sent[1] += n

    def recv_split(self, src: int | None, payload: np.ndarray, with_payload: Any) -> tuple[int, np.ndarray]:
        """The other end of :meth:`send_split`."""
        import torch
        import torch.distributed as dist

        got = dist.recv(torch.from_numpy(self._hdr), src)
        hdr = self._hdr.copy()
        n = hdr.nbytes
        if int(hdr[0]) in with_payload:
            dist.recv(torch.from_numpy(payload), got)
            n += payload.nbytes
        self.received[0] += 1
        self.received[1] += n
        return int(got), hdr

    def _buffer(self, n: int) -> np.ndarray:
        if n not in self._bufs:
            self._bufs[n] = message_buffer(self.dtype, n)
        return self._bufs[n]

    def report(self) -> dict[str, Any]:
        return {"rank": self.rank, "role": self.layout.role(self.rank), "host": socket.gethostname(),
                "affinity": sorted(os.sched_getaffinity(0)), "threads": threads(),
                "rows": self.rows.arrays(),
                "snaps": self.snaps, "final": self.final, "combine": self.combine, "extra": self.extra,
                "sent": list(self.sent), "received": list(self.received)}


def threads() -> dict[str, list[int]]:
    """This process's threads other than the calling one, by name (several of one name: their CPUs joined), and
    the CPUs each may run on (``Cpus_allowed_list``): where a pinned rank's transport threads were. Empty where
    /proc cannot say."""
    out: dict[str, set[int]] = {}
    me = str(threading.get_native_id())
    try:
        for tid in os.listdir("/proc/self/task"):
            if tid == me:
                continue
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            out.setdefault(name, set()).update(os.sched_getaffinity(int(tid)))
    except OSError:
        return {}
    return {k: sorted(v) for k, v in sorted(out.items())}


def header_elements(dtype: Any) -> int:
    """Elements of θ's dtype the int64 header takes at the front of a message."""
    return -(-HEADER * 8 // np.dtype(dtype).itemsize)


def message_buffer(dtype: Any, n: int) -> np.ndarray:
    """A buffer for one message: the header (int64 words, their bytes as they are) and ``n`` elements."""
    return np.zeros(header_elements(dtype) + n, dtype)


def pack(buf: np.ndarray, kind: int, worker: int, a: int, b: int, payload: np.ndarray | None) -> None:
    h = header_elements(buf.dtype)
    buf[:h].view(np.int64)[:HEADER] = (kind, worker, a, b)
    if payload is not None:
        buf[h:] = payload


def header(buf: np.ndarray) -> np.ndarray:
    return buf[:header_elements(buf.dtype)].view(np.int64)[:HEADER].copy()


def under_torchrun() -> bool:
    """Started by torchrun (or any launcher that sets the ``env://`` rendezvous variables)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timeout_s(sc: Scenario) -> float:
    """How long a rank waits in any one operation before gloo gives up: the run's budget and a margin."""
    return float(sc.stop.max_time_s) + float(sc.cpu.join_timeout_s) + 60.0


def init(sc: Scenario, rank: int = 0, world: int = 1, port: int | None = None) -> None:
    """Join the process group: on loopback (``port``) or from torchrun's environment."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # one process per node, one intra-op thread each
    limit = timedelta(seconds=timeout_s(sc))
    if port is None:
        dist.init_process_group("gloo", init_method="env://", timeout=limit)
    else:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=limit)
