"""Master/worker ASGD with an atomically accumulated gradient (Lopez et al. 2020).

Workers keep the sum ``acc`` of every worker's latest gradient: each new
gradient is added and the worker's previous one subtracted, element by
element with atomic float adds. Worker 0 is the master: it steps
θ -= lr · acc / (workers − 1) whenever a new gradient has arrived; each master
step is one applied update (one version). Workers 1.. compute gradients, so
the algorithm needs ``workers.count >= 2``.

Staleness of a gradient (DESIGN.md): versions between the read of θ it was
computed on and the first master step that includes it, i.e. the step after
the version current when its addition finished. So a row's ``version`` is
that step, and versions repeat across rows (several gradients per step).
(Off by one when the master was mid-step and had already read ``acc``.)
Contributions that landed after the master's last step are in no version:
once the master has stopped, each worker turns those rows into dropped
attempts (:func:`drop_unincluded`). The simulator counts updates and
staleness the same way: simasgd/sim/MODEL.md, "Lopez: update and staleness".
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.shared import (BUFFER_FULL, C_BATCH, C_NROWS, C_WORKERS, LINE, OK, R_APPLIED, R_VER, RUN,
                                  S_CONTRIB, S_MASTER_DONE, S_STOP, S_VERSION, SPINS_BEFORE_YIELD, STOP,
                                  STOPPED_WAITING, aborted, out_of_budget, record, sample_batch, seq_copy,
                                  seq_update, spin_pause, straggle, wait_go)
from executors.cpu.loops import CODE_VERSION
from simasgd.workloads.kernels import loss_and_grad


@njit(nogil=True, cache=True)
def drop_unincluded(ctrl: np.ndarray, ri: np.ndarray, nrec: np.ndarray, w: int, code: int) -> int:
    """Once the master has made its last step: this worker's last contributions that no step
    included (recorded with ``version`` = final + 1) become dropped rows (``applied = false``, the
    version they would have had), so every applied row's version is one the run made. Returns
    ``code``, or ``STOPPED_WAITING`` if the run was aborted first."""
    spins = 0
    while A.load_acquire(ctrl, S_MASTER_DONE * LINE) == 0:
        spins += 1
        spin_pause(spins)
        if spins % SPINS_BEFORE_YIELD == 0 and aborted(ctrl):
            return STOPPED_WAITING
    final = A.load(ctrl, S_VERSION * LINE)
    k = nrec[w * LINE] - 1
    while k >= 0 and ri[R_VER, k] > final:  # a worker's rows are in version order
        ri[R_APPLIED, k] = 0
        k -= 1
    return code


def _make_master(rule_version: str = CODE_VERSION) -> Any:
    """The master's loop, in a closure over ``loops.CODE_VERSION`` (its cache follows the update rule)."""

    @njit(nogil=True, cache=True)
    def run_lopez_master(ctrl, cfg_i, cfg_f, theta, vel, acc, ring, meta):  # noqa: ANN001
        """Step on the accumulated gradient each time a new one has landed."""
        if len(rule_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        n = max(1, cfg_i[C_WORKERS] - 1)
        g = np.empty_like(theta)
        seen = 0
        if not wait_go(ctrl):
            return STOPPED_WAITING
        spins = 0
        while not out_of_budget(ctrl, cfg_i):
            c = A.load(ctrl, S_CONTRIB * LINE)
            if c == seen:
                spins += 1
                spin_pause(spins)
                continue
            seen = c
            for i in range(g.shape[0]):
                g[i] = A.load_relaxed(acc, i) / n
            seq_update(theta, vel, g, cfg_i, cfg_f, ctrl, ring, meta)
        return OK

    return run_lopez_master


run_lopez_master = _make_master()


def _make(kernels_version: str = CODE_VERSION) -> Any:
    """The worker loop, in a closure over ``loops.CODE_VERSION`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def run_lopez(w, X, y, shape, theta, vel, ctrl, cfg_i, cfg_f, ri, rf, nrec, seed, slowdown,  # noqa: ANN001
                  ring, meta, acc):
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        if w == 0:
            code = run_lopez_master(ctrl, cfg_i, cfg_f, theta, vel, acc, ring, meta)
            A.store_release(ctrl, S_MASTER_DONE * LINE, 1)  # the final version is known
            return code
        np.random.seed(seed)
        local, g, old = np.empty_like(theta), np.empty_like(theta), np.zeros_like(theta)
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while not out_of_budget(ctrl, cfg_i):
            t_s = A.now_ns()
            rv = seq_copy(ctrl, theta, local)
            if rv < 0:
                return STOPPED_WAITING
            t_r = A.now_ns()
            sample_batch(idx, cfg_i[C_NROWS])
            loss_and_grad(local, X, y, idx, g, shape)
            straggle(slowdown, t_r)
            t_ge = A.now_ns()
            for i in range(g.shape[0]):
                A.fetch_add(acc, i, g[i] - old[i])
            old[:] = g
            A.fetch_add(ctrl, S_CONTRIB * LINE, 1)
            v = A.load(ctrl, S_VERSION * LINE) + 1
            if not record(ri, rf, nrec, ctrl, w, v, rv, 0, True, t_s, t_r, t_r, t_ge, 0):
                A.cas(ctrl, S_STOP * LINE, RUN, STOP)  # no room: the run stops (the master too)
                return drop_unincluded(ctrl, ri, nrec, w, BUFFER_FULL)
        return drop_unincluded(ctrl, ri, nrec, w, OK)

    return run_lopez


run_lopez = _make()


