"""One worker process: its loop for the run's algorithm (:data:`IMPLEMENTATIONS`), over the shared state of
:mod:`.state`; each loop in its family's module (:mod:`.lockfree`, :mod:`.locks`, :mod:`.synchronous`).

The loops are the cpu backend's (:mod:`executors.cpu.lockfree`, `locks`, `synchronous`) written in Python
around the workload's kernel — the user's module, forward and backward on one
intra-op thread — with the same nopython pieces for everything that is shared:
the version counter (an atomic fetch-add on ``ctrl[S_VERSION]``, in HOGWILD!
too), the update rule (``shared.apply_update`` / ``seq_update``, HOGWILD!'s
element-wise ``hogwild_step``), the barrier, the loss ring and the records. So
a row means what it means on every backend: ``read_version`` is the counter at
the worker's read, ``version`` the one its update made, and the phase marks
(cycle start, read taken, gradient start and end, write) are taken with the
same monotonic clock.

- ``hogwild``: no lock; the gradient at a copy of θ taken while others write (``local_copy``, the
  default) or at the live θ (``local_copy = false``, PyTorch's example; the kernel of a torch model then
  copies the live θ into the module itself): a torn read either way; the write is element-wise racy.
- ``mutex`` / ``sequential``: one :class:`multiprocessing.Lock` (a futex: waiters
  sleep) around the read copy and around the update (Ek 2021, Alg. 2).
- ``sync``: all compute on the same θ, a barrier, worker 0 applies the mean, a barrier;
  one row per gradient.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from executors.cpu import shared
from executors.cpu.shared import (
    ABORT,
    BUFFER_FULL,
    S_STOP,
    slot,
)
from executors.torchmp import lockfree, locks, synchronous
from executors.torchmp.state import State, add_word
from simasgd.spec import seeds
from simasgd.spec.scenario import Scenario


def main(w: int, st: State, wl: Any, sc: Scenario, run: int, cpu: int | None, slowdown: float,
         errors: Any) -> None:
    """A worker process's whole life: one intra-op thread, pinning, the start line, its loop."""
    try:
        import torch

        torch.set_num_threads(1)  # one process per worker, one thread each (PyTorch's Hogwild example)
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        rng = seeds.rng(sc.seed, run, seeds.Role.BATCH, w)
        add_word(st.ready, 0, 1)
        if not shared.wait_go(st.ctrl):
            return
        code = IMPLEMENTATIONS[sc.algorithm.name](w, st, wl, sc.workload.batch_size, rng, slowdown)
        if code == BUFFER_FULL and st.ctrl[slot(S_STOP)] == shared.RUN:
            st.ctrl[slot(S_STOP)] = shared.STOP  # the run's record budget is spent: everyone stops
    except BaseException as e:
        st.ctrl[slot(S_STOP)] = ABORT  # the others leave every wait
        errors.put(f"worker {w} failed: {type(e).__name__}: {e}")
        sys.exit(1)


# Algorithm (a registry name) -> its loop, in its family's module (named as the simulator's): the torch
# backend's one list (backend.ALGORITHMS is its keys). sequential is the lock-based loop with one worker.
IMPLEMENTATIONS: dict[str, Callable[[int, State, Any, int, np.random.Generator, float], int]] = {
    "hogwild": lockfree.run_hogwild, "mutex": locks.run_locked, "sequential": locks.run_locked,
    "sync": synchronous.run_sync}
