"""``hogwild`` in a worker process: no lock; the gradient at a copy of θ taken while others write
(``local_copy``, the default) or at the live θ; the write is the cpu loop's element-wise racy
``hogwild_step``. (The cpu backend's lock-free family, :mod:`executors.cpu.lockfree`; no ``leashed`` here.)"""

from __future__ import annotations

from typing import Any

import numpy as np

from executors import atomics as A
from executors.cpu import shared
from executors.cpu.lockfree import hogwild_step
from executors.cpu.shared import (
    BUFFER_FULL,
    C_LOCAL_COPY,
    C_STALE_AWARE,
    C_SWEEP_ALTERNATE,
    F_LR,
    F_MOM,
    OK,
)
from executors.torchmp.state import VER, State, add_word, gradient, load_word
from simasgd.numerics.memops import copy_into
from simasgd.numerics.update_rule import divisor, sweeps_down


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
        gradient(wl, at, wl.sample_batch(rng, batch), g)
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

