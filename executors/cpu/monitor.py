"""The loss monitor: evaluates θ snapshots off the workers' CPUs.

A monitor that evaluates the training loss on a live thread competes with the
workers: on a 2-core machine with 2 workers it preempts one of them for a whole
evaluation (milliseconds, dozens of cycles): the other worker's updates then
go in at τ = 0 and the cycle's tail grows by an evaluation. So the
workers never wait for it: the worker that makes every k-th version copies θ
into a preallocated ring (:func:`executors.cpu.shared.take_snapshot`, a
memcpy), and this module evaluates the ring in version order:

- during the run, when the workers leave a CPU free, in a thread of its own at
  ``SCHED_IDLE`` (Linux), so it stops the run at ε;
- after the run, when the workers have every CPU (``live = False``): even an
  idle-class thread gets a CPU whenever a spinning waiter calls
  ``sched_yield`` and then keeps it until the next tick (a tick's worth of
  milliseconds in the update phase's tail); the run
  then goes to its budget and ε is found in the ring afterwards.

Updates to ε are exact to k = ``stop.eval_updates()`` on every backend alike.
If the ring fills with unevaluated snapshots (a starved monitor), no further
snapshot is taken and the summary says where the curve stops.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.shared import (
    C_SNAP_EVERY,
    LINE,
    M_TNS,
    M_VER,
    RUN,
    S_DEADLINE,
    S_SNAP_DONE,
    S_SNAP_FULL,
    S_STOP,
    S_T0,
    STOP,
    new_ctrl,
    slot,
)
from simasgd.numerics.memops import copy_into
from simasgd.runs.convergence import Monitor
from simasgd.runs.progress import Advance

# Memory the ring may take (bytes); it holds at least 2 snapshots whatever θ's size.
RING_BUDGET_BYTES = 128 << 20
POLL_S = 0.001


@dataclass
class Ring:
    every: int           # k: a snapshot every k versions
    data: np.ndarray     # (R, d) snapshots
    meta: np.ndarray     # int64, slot p at p * LINE: version held (-1 while written), its clock ns
    done: int = 0        # snapshots evaluated so far (mirrored in ctrl[S_SNAP_DONE])

    @property
    def slots(self) -> int:
        return self.data.shape[0]


def new_ring(theta: np.ndarray, every: int, max_updates: int, budget: int = RING_BUDGET_BYTES) -> Ring:
    """A ring for a run of at most ``max_updates``: one slot per snapshot when that fits the budget."""
    want = max_updates // every + 1
    fit = max(2, budget // max(1, theta.nbytes))
    r = max(2, min(want, fit))
    meta = np.zeros(r * LINE, dtype=np.int64)
    data = np.empty((r, theta.shape[0]), dtype=theta.dtype)
    # Touch every page now: np.zeros maps zero pages lazily, and the first copy into a fresh slot would
    # take its page faults inside the worker's update, on the clock; a memset here moves that cost
    # before the clock starts.
    data.fill(0)
    return Ring(every, data, meta)


def configure(cfg_i: np.ndarray, ring: Ring) -> None:
    cfg_i[C_SNAP_EVERY] = ring.every


@njit(nogil=True, cache=True)
def _take(data: np.ndarray, meta: np.ndarray, i: int, v: int, out: np.ndarray) -> int:
    """Copy snapshot ``i`` (version ``v``) into ``out`` if it is in its slot; its clock ns, else -1."""
    p = i % data.shape[0]
    if A.load_acquire(meta, p * LINE + M_VER) != v:
        return -1
    copy_into(out, data[p])
    return meta[p * LINE + M_TNS]


@njit(nogil=True, cache=True)
def _release_slot(ctrl: np.ndarray, done: int) -> None:
    A.store_release(ctrl, S_SNAP_DONE * LINE, done)


def warm_up(theta: np.ndarray) -> None:
    """Compile (or load) the monitor's nopython helpers before any clock starts."""
    r = new_ring(theta, 1, 1)
    _take(r.data, r.meta, 0, 1, np.empty_like(theta))
    _release_slot(new_ctrl(), 0)  # a real control block: the atomic store is unchecked


def next_snapshot(ring: Ring, ctrl: np.ndarray, buf: np.ndarray) -> tuple[int, float] | None:
    """(version, seconds since the start) of the next snapshot, copied into ``buf``; None if not there yet."""
    v = (ring.done + 1) * ring.every
    t_ns = _take(ring.data, ring.meta, ring.done, v, buf)
    if t_ns < 0:
        return None
    ring.done += 1
    _release_slot(ctrl, ring.done)
    return v, (t_ns - int(ctrl[slot(S_T0)])) * 1e-9


def evaluate(ring: Ring, ctrl: np.ndarray, loss: Callable[[np.ndarray], float], mon: Monitor,
             buf: np.ndarray) -> int | None:
    """Evaluate the next snapshot into the monitor; its version, or None if it is not there yet."""
    got = next_snapshot(ring, ctrl, buf)
    if got is None:
        return None
    v, t = got
    mon.observe(t, v, loss(buf), buf)
    return v


def idle_priority() -> bool:
    """Put the calling thread at SCHED_IDLE (pid 0 = this thread on Linux); False where not possible."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return True
    except (AttributeError, OSError):
        return False


class Watcher(threading.Thread):
    """The live monitor thread: evaluates the ring until ε, a crash, or the workers stop."""

    def __init__(self, ring: Ring, ctrl: np.ndarray, loss: Callable[[np.ndarray], float], mon: Monitor,
                 alive: Callable[[], bool], advance: Advance | None, live: bool = True,
                 threads: list[threading.Thread] | None = None) -> None:
        super().__init__(name="simasgd-monitor", daemon=True)
        self.ring, self.ctrl, self.loss, self.mon, self.alive, self.advance = ring, ctrl, loss, mon, alive, advance
        self.live = live
        self.threads = threads or []  # the workers: a monitor that is not live just waits for them
        self.reason = ""
        self.idle = False
        self.error: BaseException | None = None

    def run(self) -> None:
        self.idle = idle_priority()
        buf = np.empty(self.ring.data.shape[1], dtype=self.ring.data.dtype)
        try:
            self._watch(buf)
        except BaseException as e:
            self.error = e
            self.reason = "monitor error"

    def _watch(self, buf: np.ndarray) -> None:
        if not self.live and self.threads:
            self._sleep_through()
            return
        last = 0
        while True:
            v = evaluate(self.ring, self.ctrl, self.loss, self.mon, buf) if self.live else None
            if v is None:
                if not self.alive() or int(self.ctrl[slot(S_STOP)]) != RUN:
                    self.reason = "workers finished"
                    return
                if A.clock_ns() >= int(self.ctrl[slot(S_DEADLINE)]):
                    # workers stop themselves at the deadline; one that does not (hung in its
                    # gradient) is named by the runner's join timeout, so the monitor stops here
                    self.reason = "budget"
                    return
                time.sleep(POLL_S)
                continue
            if self.advance is not None:
                self.advance(v - last)
            last = v
            if self.mon.crashed or self.mon.reached:
                self.reason = "crashed" if self.mon.crashed else "epsilon"
                if self.ctrl[slot(S_STOP)] == RUN:
                    self.ctrl[slot(S_STOP)] = STOP
                return


    def _sleep_through(self) -> None:
        """Not live: block on the workers until they stop or the deadline passes, with no periodic
        wake-up (a polling monitor woke 50 times a second on CPUs the workers were using)."""
        for t in self.threads:
            left = (int(self.ctrl[slot(S_DEADLINE)]) - A.clock_ns()) * 1e-9
            t.join(max(0.0, left) + 0.05)
        # hung past the deadline: the runner's join timeout names the thread
        self.reason = "budget" if any(t.is_alive() for t in self.threads) else "workers finished"


def drain(ring: Ring, ctrl: np.ndarray, loss: Callable[[np.ndarray], float], mon: Monitor) -> None:
    """After the run: evaluate the snapshots the live monitor did not reach (until ε or a crash)."""
    buf = np.empty(ring.data.shape[1], dtype=ring.data.dtype)
    while not mon.done and evaluate(ring, ctrl, loss, mon, buf) is not None:
        pass


def notes(ring: Ring, ctrl: np.ndarray, watcher: Watcher) -> dict[str, Any]:
    """Summary figures: how the losses were taken."""
    full = int(ctrl[slot(S_SNAP_FULL)])
    out: dict[str, Any] = {"loss_every_updates": ring.every, "loss_ring_slots": ring.slots,
                           "monitor": ("live" if watcher.live else "after the run")
                           + (", idle priority" if watcher.idle else "")}
    if full:
        out["loss_curve_ends_at"] = full * ring.every - ring.every
        out["note_ring"] = (f"the loss ring ({ring.slots} snapshots) filled before the monitor could evaluate it: "
                            f"no loss after version {out['loss_curve_ends_at']} (raise stop.eval_every_updates)")
    return out

