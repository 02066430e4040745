"""The ε stop during a ``dist`` run: the rank that holds all of θ evaluates its snapshots as they come.

On the server (one shard), the centre, or sync's rank 0, a thread takes each kept snapshot and feeds
its loss to a :class:`~simasgd.runs.convergence.Monitor` (the shared ε / crash rule); when the monitor
says done, the rank's next stop decision ends the run (``Rank.over()``), as the budget would. The
workload's loss kernel releases the GIL, so the rank's own loop runs on meanwhile. Where θ is spread
over ranks (several shards; keuper's and simuparallel's own states) ε is found after the run.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np

from simasgd.runs.convergence import Monitor
from simasgd.spec.scenario import Scenario


class Live(threading.Thread):
    def __init__(self, sc: Scenario, run: int, wl: Any, theta0: np.ndarray) -> None:
        super().__init__(name="simasgd-dist-eps", daemon=True)
        self.wl, self.mon = wl, Monitor(sc.stop, run)
        self.mon.observe(0.0, 0, wl.eval_loss(theta0))
        self.todo: queue.SimpleQueue[tuple[float, int, np.ndarray] | None] = queue.SimpleQueue()
        self.done = False
        self.start()

    def run(self) -> None:
        while (item := self.todo.get()) is not None:
            t, v, theta = item
            if self.mon.observe(t, v, self.wl.eval_loss(theta)):
                self.done = True
                return

    def close(self) -> None:
        self.todo.put(None)
