"""``sync`` in a worker process: all compute on the same θ, a barrier, worker 0 applies the mean, a
barrier; one row per gradient."""

from __future__ import annotations

from typing import Any

import numpy as np

from executors import atomics as A
from executors.cpu import shared
from executors.cpu.shared import (
    BUFFER_FULL,
    C_MAXU,
    LINE,
    OK,
    S_DEADLINE,
    S_ROUND_STOP,
    S_STOP,
    STOPPED_WAITING,
    slot,
)
from executors.torchmp.state import VER, State, gradient, load_word


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
        gradient(wl, st.theta, wl.sample_batch(rng, batch), mine)
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

