"""Master/worker ASGD with an atomically accumulated gradient (Lopez et al. 2020, §III-B, Alg. 2/3).

The definition is ``simasgd.spec.algorithms`` ``lopez``; this is its mechanics on OS threads.

- **Master** (worker 0, Alg. 2), one step = one version, never waiting for gradients: it announces
  step s = version + 1 (``lctl[ANNOUNCED]``, a seq_cst store, so it precedes every load of g), then
  applies the update rule to g·1/(N−1) with staleness 0, reading g element by element in the pass
  that writes θ (``acc``: plain loads racing with the workers' atomic adds, not a snapshot; each
  aligned element is loaded whole on x86, as a relaxed atomic load would be; ``shared.seq_update_scaled``,
  :func:`simasgd.numerics.update_rule.step_scaled`; the version is bumped after the write). The scale is a
  multiplication by the reciprocal, as the simulator and the cuda backend scale (a division per
  element makes the step several times slower than its memory traffic), and no copy of g is made:
  with one, the sum, the copy and θ can outgrow a core's L2 and the step then runs at DRAM's pace. The
  write takes the seqlock, which only ``model_read = "consistent"`` readers honour: with the default
  ``"torn"`` a worker copies w while the master writes it (the paper: "the updates are not done
  atomically allowing for slave workers to read the model during the update").
- **Worker** (Alg. 3), per gradient: copy w (line 3; ``read_version`` = the version loaded before
  a torn copy, or the seqlock's version), ``g ← g − g_old`` (line 4, d atomic float adds), the
  gradient on the copy (6), ``g ← g + g_new`` (7, d atomic adds); then it loads the announced step a
  and records its row with ``version = a + 1``. ``subtract = "with_add"``: lines 4 and 7 as one
  pass of ``g_new − g_old`` after the gradient.
- **Row** (one per gradient): version = the first step that began reading g after the gradient was
  wholly in it (step a may have read all, part or none of it: its loads race with the adds). Before
  the pass that removes it the worker loads the announced step again: below the row's version, no
  step began reading g with it, so the row becomes ``applied = false`` (version kept). Once the master
  has stopped, rows whose version the run did not make become ``applied = false``
  (:func:`drop_unincluded`). The simulator counts the same way (docs/model.md, "Lopez").
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.loops import CODE_VERSION
from executors.cpu.shared import (
    BUFFER_FULL,
    C_BATCH,
    C_LOPEZ,
    C_NROWS,
    C_WORKERS,
    LINE,
    OK,
    R_APPLIED,
    R_VER,
    RUN,
    S_CONTRIB,
    S_MASTER_DONE,
    S_STOP,
    S_VERSION,
    SPINS_BEFORE_YIELD,
    STOP,
    STOPPED_WAITING,
    aborted,
    out_of_budget,
    record,
    sample_batch,
    seq_copy,
    seq_update_scaled,
    spin_pause,
    straggle,
    wait_go,
)
from simasgd.numerics.memops import copy_into
from simasgd.numerics.workloads.kernels import loss_and_grad

WITH_ADD, CONSISTENT = 1, 2  # bits of cfg_i[C_LOPEZ]: subtract = "with_add", model_read = "consistent"
ANNOUNCED = 0                # lctl word: the step whose read of g began last (its own cache line)


def flags(algorithm: Any) -> int:
    """cfg_i[C_LOPEZ] for an ``AlgorithmConfig`` of ``lopez``."""
    return ((WITH_ADD if algorithm.param("subtract") == "with_add" else 0)
            | (CONSISTENT if algorithm.param("model_read") == "consistent" else 0))


@njit(nogil=True, cache=True)
def drop_unincluded(ctrl: np.ndarray, ri: np.ndarray, nrec: np.ndarray, w: int, code: int) -> int:
    """Once the master has made its last step: this worker's last rows whose version the run did not
    make become dropped (``applied = false``, the version they would have had), so every applied row's
    version is one the run made. Returns ``code``, or ``STOPPED_WAITING`` if the run was aborted first."""
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
    def run_lopez_master(ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, theta: np.ndarray, vel: np.ndarray,
                         acc: np.ndarray, lctl: np.ndarray, ring: np.ndarray, meta: np.ndarray) -> int:
        """Alg. 2: step on whatever g holds, as fast as it can, until the budget."""
        if len(rule_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        scale = 1.0 / max(1, cfg_i[C_WORKERS] - 1)
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while not out_of_budget(ctrl, cfg_i):
            A.store(lctl, ANNOUNCED, A.load(ctrl, S_VERSION * LINE) + 1)
            seq_update_scaled(theta, vel, acc, scale, cfg_i, cfg_f, ctrl, ring, meta)  # reads g as it writes θ
        return OK

    return run_lopez_master


run_lopez_master = _make_master()


@njit(nogil=True, cache=True)
def _remove(ri: np.ndarray, lctl: np.ndarray, k: int) -> None:
    """Before the pass that takes row ``k``'s gradient out of g: no step announced since it went in
    means none read it."""
    if k >= 0 and A.load(lctl, ANNOUNCED) < ri[R_VER, k]:
        ri[R_APPLIED, k] = 0


def _make(kernels_version: str = CODE_VERSION) -> Any:
    """The worker loop, in a closure over ``loops.CODE_VERSION`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def run_lopez(w: int, X: np.ndarray, y: np.ndarray, shape: np.ndarray, theta: np.ndarray, vel: np.ndarray,
                  ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, ri: np.ndarray, rf: np.ndarray,
                  nrec: np.ndarray, seed: np.ndarray, slowdown: float,
                  ring: np.ndarray, meta: np.ndarray, acc: np.ndarray, lctl: np.ndarray) -> int:
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        if w == 0:
            code = run_lopez_master(ctrl, cfg_i, cfg_f, theta, vel, acc, lctl, ring, meta)
            A.store_release(ctrl, S_MASTER_DONE * LINE, 1)  # the final version is known
            return code
        with_add = (cfg_i[C_LOPEZ] & WITH_ADD) != 0
        consistent = (cfg_i[C_LOPEZ] & CONSISTENT) != 0
        np.random.seed(seed)
        local, g, old = np.empty_like(theta), np.empty_like(theta), np.zeros_like(theta)
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        k = -1  # this worker's row whose gradient is in g
        if not wait_go(ctrl):
            return STOPPED_WAITING
        while not out_of_budget(ctrl, cfg_i):
            t_s = A.now_ns()
            if consistent:
                rv = seq_copy(ctrl, theta, local)
                if rv < 0:
                    return STOPPED_WAITING
            else:  # Alg. 3 line 3: a plain copy, racing with the master's write
                rv = A.load(ctrl, S_VERSION * LINE)
                for i in range(theta.shape[0]):
                    local[i] = theta[i]
            t_r = A.now_ns()
            if not with_add:  # line 4: g ← g − g_old before the gradient
                _remove(ri, lctl, k)
                k = -1
                for i in range(g.shape[0]):
                    A.fetch_add(acc, i, -old[i])
            t_gs = A.now_ns()  # the pass is the read side's, as the simulator records it
            sample_batch(idx, cfg_i[C_NROWS])
            loss_and_grad(local, X, y, idx, g, shape)
            straggle(slowdown, t_gs)
            t_ge = A.now_ns()
            if with_add:  # one pass g ← g − g_old + g_new
                _remove(ri, lctl, k)
                for i in range(g.shape[0]):
                    A.fetch_add(acc, i, g[i] - old[i])
            else:  # line 7: g ← g + g_new
                for i in range(g.shape[0]):
                    A.fetch_add(acc, i, g[i])
            v = A.load(lctl, ANNOUNCED) + 1  # the first step to begin reading g after the adds
            copy_into(old, g)
            A.fetch_add(ctrl, S_CONTRIB * LINE, 1)
            if not record(ri, rf, nrec, ctrl, w, v, rv, 0, True, t_s, t_r, t_gs, t_ge, 0):
                A.cas(ctrl, S_STOP * LINE, RUN, STOP)  # no room: the run stops (the master too)
                return drop_unincluded(ctrl, ri, nrec, w, BUFFER_FULL)
            k = nrec[w * LINE] - 1
        return drop_unincluded(ctrl, ri, nrec, w, OK)

    return run_lopez


run_lopez = _make()
