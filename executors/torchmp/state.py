"""What the worker processes share: θ, the control block, the records, the loss ring — in shared memory.

Every array is a torch tensor moved to shared memory (``share_memory_()``, as
PyTorch's Hogwild example shares its model) and used through its numpy view, so
the nopython primitives of :mod:`executors.cpu.shared` (version counter,
barrier, records, loss ring, the update rule) work on it unchanged from each
process: their atomics are CPU instructions on memory every process maps. The
layout is the cpu backend's (``ctrl`` slots, ``cfg_i``/``cfg_f``, ``ri``/``rf``
records, :class:`executors.cpu.monitor.Ring`), so its records and monitor code
read it as they read a threaded run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu import monitor, runner, shared
from executors.cpu.lockfree import hogwild_step
from executors.cpu.shared import LINE, S_VERSION
from simasgd.numerics.workloads.torch_model import INSTALL  # the one install hint
from simasgd.runs.backends import BackendError
from simasgd.spec.scenario import Scenario


def import_torch() -> Any:
    """``torch``, or a :class:`BackendError` (a user error: no traceback) that says how to install it."""
    try:
        import torch
    except ImportError as e:
        raise BackendError(f"backend 'torch' needs PyTorch, which is not installed ({e}); "
                           f"install it with: {INSTALL}") from None
    return torch


@njit(nogil=True, cache=True)
def load_word(arr: np.ndarray, i: int) -> int:
    """An atomic load of ``arr[i]`` (the version counter, the ready count), callable from Python."""
    return A.load(arr, i)


@njit(nogil=True, cache=True)
def add_word(arr: np.ndarray, i: int, v: int) -> int:
    """Atomic ``arr[i] += v``; the value after it."""
    return A.fetch_add(arr, i, v) + v


VER = S_VERSION * LINE  # the version counter's word in ctrl


def gradient(wl: Any, theta: np.ndarray, idx: np.ndarray, g: np.ndarray) -> None:
    """The workload's gradient at ``theta`` on rows ``idx`` into ``g`` (a loop's one call into its kernel)."""
    wl.kernel(theta, wl.X, wl.y, idx, g, wl.shape)


@dataclass
class State:
    """One run's shared arrays (numpy views of shared torch tensors) and its lock."""

    ctrl: np.ndarray
    cfg_i: np.ndarray
    cfg_f: np.ndarray
    theta: np.ndarray
    vel: np.ndarray
    grads: np.ndarray          # sync: one gradient row per worker
    ring: monitor.Ring
    ri: np.ndarray
    rf: np.ndarray
    nrec: np.ndarray
    ready: np.ndarray          # worker processes that reached the start line
    canary: np.ndarray         # hogwild_step's probe words: unused (no lost-update probes here)
    lock: Any                  # the mutex: a multiprocessing lock (waiters sleep in the kernel)
    keep: list[Any] = field(default_factory=list)  # the tensors behind the views

    def final_theta(self) -> np.ndarray:
        return self.theta.copy()


def shared_copy(a: np.ndarray, keep: list[Any]) -> np.ndarray:
    """``a`` copied into shared memory; the numpy view (its tensor kept alive in ``keep``)."""
    torch = import_torch()
    t = torch.from_numpy(np.ascontiguousarray(a).copy()).share_memory_()
    keep.append(t)
    return t.numpy()


def allocate(sc: Scenario, wl: Any, theta0: np.ndarray, workers: int, ctx: Any) -> State:
    """Every shared array of one run; ``ctx`` is the multiprocessing context (for the lock)."""
    keep: list[Any] = []
    max_updates = sc.stop.max_updates
    theta = shared_copy(theta0, keep)
    cap = min(max_updates + 8, max(1024, runner.MAX_RECORDS // workers))
    cfg_i, cfg_f = runner.config(sc, wl, workers, max_updates, cap)
    ring = monitor.new_ring(theta, sc.stop.eval_updates(), max_updates)
    ring = monitor.Ring(ring.every, shared_copy(ring.data, keep), shared_copy(ring.meta, keep))
    monitor.configure(cfg_i, ring)
    grads = np.zeros((workers if sc.algorithm.name == "sync" else 0, theta.shape[0]), dtype=theta.dtype)
    return State(ctrl=shared_copy(shared.new_ctrl(), keep), cfg_i=cfg_i, cfg_f=cfg_f, theta=theta,
                 vel=shared_copy(np.zeros_like(theta), keep), grads=shared_copy(grads, keep), ring=ring,
                 ri=shared_copy(np.zeros((workers, 4, cap), dtype=np.int64), keep),
                 rf=shared_copy(np.zeros((workers, shared.N_RF, cap), dtype=np.float64), keep),
                 nrec=shared_copy(np.zeros(workers * LINE, dtype=np.int64), keep),
                 ready=shared_copy(np.zeros(LINE, dtype=np.int64), keep),
                 canary=np.zeros(1),
                 lock=ctx.Lock(), keep=keep)


def warm_up(st: State) -> None:
    """Compile (or load from numba's cache) every nopython helper the workers call, in this process,
    before it forks: the children inherit the compiled code and no worker compiles on the clock."""
    ctrl, theta = shared.new_ctrl(), np.zeros_like(st.theta)
    g, vel = np.zeros_like(theta), np.zeros_like(theta)
    ri, rf, nrec = np.zeros((4, 2), dtype=np.int64), np.zeros((shared.N_RF, 2)), np.zeros(LINE, dtype=np.int64)
    load_word(ctrl, 0)
    add_word(ctrl, 0, 1)
    A.clock_ns()
    shared.out_of_budget(ctrl, st.cfg_i)
    shared.aborted(ctrl)
    shared.straggle(1.0, 0)
    shared.apply_update(theta, vel, g, st.cfg_i, st.cfg_f, 0)
    ring = monitor.new_ring(theta, 1, 1)
    shared.seq_update(theta, vel, g, st.cfg_i, st.cfg_f, ctrl, ring.data, ring.meta)
    shared.snapshot_due(st.cfg_i, ctrl, 1)
    shared.take_snapshot(ctrl, st.cfg_i, ring.data, ring.meta, 1, theta)
    hogwild_step(theta, vel, g, 0.0, 0.0, 1.0, np.zeros(1), False)
    shared.barrier(ctrl, 1, 0)
    ctrl[shared.slot(shared.S_GO)] = 1
    shared.wait_go(ctrl)
    shared.record(ri, rf, nrec, ctrl, 0, 1, 0, 0, True, 0, 0, 0, 0, 0)
    monitor.warm_up(theta)
