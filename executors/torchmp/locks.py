"""``mutex`` / ``sequential`` in a worker process: one :class:`multiprocessing.Lock` (a futex: waiters
sleep) around the read copy and around the update (Ek 2021, Alg. 2); ``sequential`` is the same loop alone."""

from __future__ import annotations

from typing import Any

import numpy as np

from executors import atomics as A
from executors.cpu import shared
from executors.cpu.shared import (
    BUFFER_FULL,
    C_MAXU,
    OK,
    STOPPED_WAITING,
)
from executors.torchmp.state import VER, State, add_word, gradient, load_word

LOCK_POLL_S = 0.05   # a waiter for the lock looks at the stop word this often (a failed run never hangs)



def acquire(st: State) -> int:
    """Take the lock; ns waited, or -1 when the run was aborted meanwhile."""
    t0 = A.clock_ns()
    while not st.lock.acquire(timeout=LOCK_POLL_S):
        if shared.aborted(st.ctrl):
            return -1
    return A.clock_ns() - t0



def run_locked(w: int, st: State, wl: Any, batch: int, rng: np.random.Generator, slowdown: float) -> int:
    local, g = np.empty_like(st.theta), np.empty_like(st.theta)
    ri, rf = st.ri[w], st.rf[w]
    while not shared.out_of_budget(st.ctrl, st.cfg_i):
        t_s = A.clock_ns()
        wait = acquire(st)
        if wait < 0:
            return STOPPED_WAITING
        local[:] = st.theta
        rv = load_word(st.ctrl, VER)
        st.lock.release()
        t_r = A.clock_ns()
        gradient(wl, local, wl.sample_batch(rng, batch), g)
        shared.straggle(slowdown, t_r)
        t_ge = A.clock_ns()
        wait2 = acquire(st)
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

