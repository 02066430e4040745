"""One worker process: its loop for the run's algorithm, over the shared state of :mod:`.state`.

The loops are the cpu backend's (:mod:`executors.cpu.loops`) written in Python
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
from typing import Any

import numpy as np

from executors import atomics as A
from executors.cpu import shared
from executors.cpu.loops import hogwild_step
from executors.cpu.shared import (
    ABORT,
    BUFFER_FULL,
    C_LOCAL_COPY,
    C_MAXU,
    C_STALE_AWARE,
    C_SWEEP_ALTERNATE,
    F_LR,
    F_MOM,
    LINE,
    OK,
    S_DEADLINE,
    S_ROUND_STOP,
    S_STOP,
    S_VERSION,
    STOPPED_WAITING,
    slot,
)
from executors.torchmp.state import State, add_word, load_word
from simasgd import seeds
from simasgd.memops import copy_into
from simasgd.scenario import Scenario
from simasgd.update_rule import divisor, sweeps_down

LOCK_POLL_S = 0.05   # a waiter for the lock looks at the stop word this often (a failed run never hangs)
VER = S_VERSION * LINE


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
        code = LOOPS[sc.algorithm.name](w, st, wl, sc.workload.batch_size, rng, slowdown)
        if code == BUFFER_FULL and st.ctrl[slot(S_STOP)] == shared.RUN:
            st.ctrl[slot(S_STOP)] = shared.STOP  # the run's record budget is spent: everyone stops
    except BaseException as e:
        st.ctrl[slot(S_STOP)] = ABORT  # the others leave every wait
        errors.put(f"worker {w} failed: {type(e).__name__}: {e}")
        sys.exit(1)


def _grad(wl: Any, theta: np.ndarray, idx: np.ndarray, g: np.ndarray) -> None:
    wl.kernel(theta, wl.X, wl.y, idx, g, wl.shape)


def _acquire(st: State) -> int:
    """Take the lock; ns waited, or -1 when the run was aborted meanwhile."""
    t0 = A.clock_ns()
    while not st.lock.acquire(timeout=LOCK_POLL_S):
        if shared.aborted(st.ctrl):
            return -1
    return A.clock_ns() - t0


def run_hogwild(w: int, st: State, wl: Any, batch: int, rng: np.random.Generator, slowdown: float) -> int:
    g = np.empty_like(st.theta)
    aware = st.cfg_i[C_STALE_AWARE] != 0
    down = sweeps_down(st.cfg_i[C_SWEEP_ALTERNATE] != 0, w)
    # local_copy (Ek 2021 §3.1, the default): the gradient at a copy of θ taken element by element while the
    # others write, as the cpu loop's; false: at the live θ, as PyTorch's mnist_hogwild example
    local = np.empty_like(st.theta) if st.cfg_i[C_LOCAL_COPY] != 0 else None
    ri, rf = st.ri[w], st.rf[w]
    while not shared.out_of_budget(st.ctrl, st.cfg_i):
        t_s = A.clock_ns()
        rv = load_word(st.ctrl, VER)
        at, t_r = st.theta, t_s  # live: no read phase
        if local is not None:
            copy_into(local, st.theta)
            at, t_r = local, A.clock_ns()
        _grad(wl, at, wl.sample_batch(rng, batch), g)
        shared.straggle(slowdown, t_s)
        t_ge = A.clock_ns()
        cur = load_word(st.ctrl, VER)
        hogwild_step(st.theta, st.vel, g, st.cfg_f[F_LR], st.cfg_f[F_MOM], divisor(cur - rv, aware), st.canary, False,
                     down)
        v = add_word(st.ctrl, VER, 1)
        if shared.snapshot_due(st.cfg_i, st.ctrl, v):
            shared.take_snapshot(st.ctrl, st.cfg_i, st.ring.data, st.ring.meta, v, st.theta)
        if not shared.record(ri, rf, st.nrec, st.ctrl, w, v, rv, 0, True, t_s, t_r, t_r, t_ge, 0):
            return BUFFER_FULL
    return OK


def run_locked(w: int, st: State, wl: Any, batch: int, rng: np.random.Generator, slowdown: float) -> int:
    local, g = np.empty_like(st.theta), np.empty_like(st.theta)
    ri, rf = st.ri[w], st.rf[w]
    while not shared.out_of_budget(st.ctrl, st.cfg_i):
        t_s = A.clock_ns()
        wait = _acquire(st)
        if wait < 0:
            return STOPPED_WAITING
        local[:] = st.theta
        rv = load_word(st.ctrl, VER)
        st.lock.release()
        t_r = A.clock_ns()
        _grad(wl, local, wl.sample_batch(rng, batch), g)
        shared.straggle(slowdown, t_r)
        t_ge = A.clock_ns()
        wait2 = _acquire(st)
        if wait2 < 0:
            return STOPPED_WAITING
        cur = load_word(st.ctrl, VER)
        if cur >= st.cfg_i[C_MAXU]:  # the budget ran out while computing: the gradient is not applied
            st.lock.release()
            break
        shared.apply_update(st.theta, st.vel, g, st.cfg_i, st.cfg_f, cur - rv)
        v = add_word(st.ctrl, VER, 1)
        if shared.snapshot_due(st.cfg_i, st.ctrl, v):
            shared.take_snapshot(st.ctrl, st.cfg_i, st.ring.data, st.ring.meta, v, st.theta)
        st.lock.release()
        if not shared.record(ri, rf, st.nrec, st.ctrl, w, v, rv, 0, True, t_s, t_r, t_r, t_ge, wait + wait2):
            return BUFFER_FULL
    return OK


def run_sync(w: int, st: State, wl: Any, batch: int, rng: np.random.Generator, slowdown: float) -> int:
    """One update a round: worker 0 applies the mean of the round's gradients between two barriers;
    every worker records its gradient's row after the second (the cpu loop's protocol)."""
    n = st.grads.shape[0]
    mine, mean = st.grads[w], np.empty_like(st.theta)
    ri, rf = st.ri[w], st.rf[w]
    sense = 0
    while True:
        t_s = A.clock_ns()
        rv = load_word(st.ctrl, VER)
        _grad(wl, st.theta, wl.sample_batch(rng, batch), mine)
        shared.straggle(slowdown, t_s)
        t_ge = A.clock_ns()
        sense = shared.barrier(st.ctrl, n, sense)
        if sense < 0:
            return STOPPED_WAITING
        wait = A.clock_ns() - t_ge
        if w == 0:
            np.copyto(mean, st.grads[0])
            for k in range(1, n):
                mean += st.grads[k]
            mean /= n
            v = shared.seq_update(st.theta, st.vel, mean, st.cfg_i, st.cfg_f, st.ctrl, st.ring.data, st.ring.meta)
            full = st.nrec[w * LINE] + 1 >= ri.shape[1]  # this round's rows fill every buffer
            done = full or st.ctrl[slot(S_STOP)] != 0 or v >= st.cfg_i[C_MAXU] \
                or A.clock_ns() >= st.ctrl[slot(S_DEADLINE)]
            st.ctrl[slot(S_ROUND_STOP)] = 1 if done else 0  # published by the barrier's release
        sense = shared.barrier(st.ctrl, n, sense)
        if sense < 0:
            return STOPPED_WAITING
        v = load_word(st.ctrl, VER)  # the round's update (worker 0 made it before the barrier)
        room = shared.record(ri, rf, st.nrec, st.ctrl, w, v, rv, 0, True, t_s, t_s, t_s, t_ge, wait)
        if st.ctrl[slot(S_ROUND_STOP)] != 0:
            return OK if room else BUFFER_FULL


LOOPS = {"hogwild": run_hogwild, "mutex": run_locked, "sequential": run_locked, "sync": run_sync}
