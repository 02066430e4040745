"""A stream's attempt records: versions noted on the device, times from CUDA events (host clock under the simulator).

The device writes each attempt's read version (``recr``) and version
(``recv``) into a ring of ``RING`` slots; the host keeps the rest (retries,
applied) and four time marks per attempt: cycle start, gradient start,
gradient end, update end. On a GPU a mark is an event recorded on the
stream, resolved (``run_start.elapsed_time(mark)``) when the ring is
flushed, after the stream has synchronised; under the simulator kernels run
at launch, so the host's monotonic clock at the same point is the time.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

RING = 1024  # attempts between two flushes of a stream's device records


class Clock:
    def __init__(self, cuda: Any, simulated: bool) -> None:
        self.cuda, self.simulated = cuda, simulated
        self.t0_host = time.perf_counter()
        self.t0 = None if simulated else cuda.event()
        if self.t0 is not None:
            self.t0.record()  # on the default stream, before any worker's stream starts

    def now(self) -> float:
        """Host seconds since the run started (budgets, the monitor)."""
        return time.perf_counter() - self.t0_host

    def mark(self, stream: Any) -> Any:
        if self.simulated:
            return self.now()
        e = self.cuda.event()
        e.record(stream)
        return e

    def seconds(self, mark: Any) -> float:
        if self.simulated or self.t0 is None:  # t0 is None exactly when simulated
            return float(mark)
        return self.t0.elapsed_time(mark) / 1e3


class Records:
    """One stream's attempts: device ring (versions) + host lists (the rest)."""

    def __init__(self, cuda: Any, stream: Any, clock: Clock, worker: int) -> None:
        self.cuda, self.stream, self.clock, self.worker = cuda, stream, clock, worker
        self.recr = cuda.to_device(np.zeros(RING, np.int64), stream=stream)
        self.recv = cuda.to_device(np.zeros(RING, np.int64), stream=stream)
        self.read: list[int] = []
        self.version: list[int] = []
        self.retries: list[int] = []
        self.applied: list[bool] = []
        self.marks: list[tuple[Any, Any, Any, Any]] = []
        self.times: list[tuple[float, float, float, float]] = []
        self.pending = 0  # attempts in the ring not yet copied back

    @property
    def slot(self) -> int:
        """The ring slot of the attempt being made."""
        return self.pending

    def done(self, marks: tuple[Any, Any, Any, Any], retries: int, applied: bool) -> None:
        """The attempt in ``slot`` is finished (its kernels enqueued)."""
        self.marks.append(marks)
        self.retries.append(retries)
        self.applied.append(applied)
        self.pending += 1
        if self.pending == RING:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        self.stream.synchronize()
        n = self.pending
        self.read += self.recr.copy_to_host(stream=self.stream)[:n].tolist()
        self.version += self.recv.copy_to_host(stream=self.stream)[:n].tolist()
        self.stream.synchronize()
        self.times += [tuple(self.clock.seconds(m) for m in ms) for ms in self.marks]  # type: ignore[misc]
        self.marks.clear()
        self.pending = 0

    def arrays(self) -> dict[str, np.ndarray]:
        self.flush()
        t = np.asarray(self.times, dtype=np.float64).reshape(-1, 4)
        return {"worker": np.full(len(self.read), self.worker), "version": np.asarray(self.version, np.int64),
                "read_version": np.asarray(self.read, np.int64), "retries": np.asarray(self.retries, np.int32),
                "applied": np.asarray(self.applied, bool), "t_start": t[:, 0], "t_grad_start": t[:, 1],
                "t_grad_end": t[:, 2], "t_write": t[:, 3]}
