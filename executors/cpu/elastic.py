"""Elastic averaging on threads: EASGD and EA-wild (definitions: ``simasgd.spec.algorithms``; model: sim/elastic.py).

One thread per worker; the centre x̃ is the run's ``theta`` (what the loss
ring snapshots), each group's state x_j a row of ``xloc``. A group's leader
(worker ``k·g``; every worker when ``group_size`` = 1) exchanges with the
centre every ``tau`` local steps, then the group takes a local step:

- exchange, ``easgd``: wait for the round-robin token (``turn``: group 0, 1,
  …, 0, …), then with the centre to itself: d = α(x_j − x̃), x_j −= d,
  x̃ += d, bump the version, pass the token;
- exchange, ``eawild``: copy x̃ without synchronisation, x_j −= α(x_j − x̃_read),
  then x̃ += α(x_j_sent − x̃) element by element against the live centre (one
  cache line between compiler barriers, as HOGWILD!'s writes): concurrent
  exchanges interleave;
- local step: every member computes a gradient at x_j on its own minibatch
  (a group barrier before and after), the leader steps x_j with their mean
  (``shared.apply_update``, staleness 0, its own velocity row).

Rows (one per exchange, by the leader) as the simulator's: ``read_version`` =
the previous exchange's read version + 1 (version − 1 at the first),
``distance`` = ‖x_j − x̃‖ at the exchange (``dist``, per worker and row; the
runner puts it in ``updates.parquet``). The bytes an exchange would carry
over a network are ``simasgd.sim.network.row_bytes`` (the summary's
``bytes_per_row``, ``bytes_total``): the threads share memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.entry import Run, Wiring
from executors.cpu.loops import CODE_VERSION
from executors.cpu.shared import (
    BUFFER_FULL,
    C_BATCH,
    C_MAXU,
    C_NROWS,
    LINE,
    OK,
    S_VERSION,
    STOPPED_WAITING,
    aborted,
    apply_update,
    out_of_budget,
    record,
    sample_batch,
    snapshot_due,
    spin_pause,
    straggle,
    take_snapshot,
    wait_go,
)
from simasgd.numerics.memops import copy_into
from simasgd.numerics.workloads.kernels import loss_and_grad

P_ALPHA, P_TAU, P_LOCKED, P_GROUP = range(4)   # params (float64)
G_COUNT, G_SENSE, G_STOP = 0, 1, 2              # a group's words in gctl, each on its own line
G_WORDS = 3
CHUNK = 8                                        # elements between compiler barriers in a wild write


@njit(nogil=True, cache=True)
def group_barrier(gctl: np.ndarray, base: int, parties: int, sense: int, ctrl: np.ndarray) -> int:
    """Sense-reversing barrier of one group (words at ``base``); the new sense, or -1 if aborted."""
    new = 1 - sense
    if A.fetch_add(gctl, base + G_COUNT * LINE, 1) == parties - 1:
        A.store(gctl, base + G_COUNT * LINE, 0)
        A.store_release(gctl, base + G_SENSE * LINE, new)
        return new
    spins = 0
    while A.load_acquire(gctl, base + G_SENSE * LINE) != new:
        spins += 1
        spin_pause(spins)
        if spins % 64 == 0 and aborted(ctrl):
            return -1
    return new


@njit(nogil=True, cache=True)
def wild_pull(theta: np.ndarray, sent: np.ndarray, alpha: float) -> None:
    """x̃ += α(x_sent − x̃) element by element on the live centre, no synchronisation (EA-wild)."""
    d = theta.shape[0]
    for lo in range(0, d, CHUNK):
        for i in range(lo, min(lo + CHUNK, d)):
            theta[i] += alpha * (sent[i] - theta[i])
        A.compiler_barrier()


def _make(kernels_version: str = CODE_VERSION) -> Any:
    """The loop, in a closure over ``loops.CODE_VERSION`` (see :mod:`executors.kernel`)."""

    @njit(nogil=True, cache=True)
    def run_elastic(w: int, X: np.ndarray, y: np.ndarray, shape: np.ndarray, theta: np.ndarray, vel: np.ndarray,
                    ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, ri: np.ndarray, rf: np.ndarray,
                    nrec: np.ndarray, seed: np.ndarray, slowdown: float,
                    ring: np.ndarray, meta: np.ndarray, params: np.ndarray, xloc: np.ndarray, vloc: np.ndarray,
                    grads: np.ndarray, gctl: np.ndarray, turn: np.ndarray, dist: np.ndarray) -> int:
        if len(kernels_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return OK
        np.random.seed(seed)
        alpha, tau = params[P_ALPHA], int(params[P_TAU])
        locked, g = params[P_LOCKED] != 0.0, int(params[P_GROUP])
        groups = xloc.shape[0]
        grp = w // g
        leader = w % g == 0
        base = grp * G_WORDS * LINE
        x, v = xloc[grp], vloc[grp]
        mine = grads[w]
        mean = np.empty_like(theta)
        cread, sent = np.empty_like(theta), np.empty_like(theta)
        idx = np.empty(cfg_i[C_BATCH], dtype=np.int64)
        sense = 0
        steps = 0
        prev_rv = -1
        t_gs = t_ge = 0
        code = OK
        if not wait_go(ctrl):
            return STOPPED_WAITING
        t_gs = t_ge = A.now_ns()
        while True:
            if leader:
                t_s = A.now_ns()
                done = out_of_budget(ctrl, cfg_i)
                if not done and steps % tau == 0:
                    wait = 0
                    if locked:  # round-robin: this group's turn
                        spins = 0
                        while A.load_acquire(turn, 0) != grp and not done:
                            spins += 1
                            spin_pause(spins)
                            if spins % 64 == 0:
                                done = out_of_budget(ctrl, cfg_i)
                        wait = A.now_ns() - t_s
                    if not done:
                        rv = A.load(ctrl, S_VERSION * LINE)
                        if locked and rv >= cfg_i[C_MAXU]:  # the budget ran out while waiting
                            done = True
                    if not done:
                        t_r = A.now_ns()
                        if locked:
                            ss = 0.0
                            for i in range(x.shape[0]):
                                s, c = x[i], theta[i]
                                ss += (s - c) * (s - c)
                                dd = alpha * (s - c)
                                x[i] = s - dd
                                theta[i] = c + dd
                        else:
                            copy_into(cread, theta)  # racy: other leaders may be writing
                            copy_into(sent, x)
                            ss = 0.0
                            for i in range(x.shape[0]):
                                ss += (sent[i] - cread[i]) * (sent[i] - cread[i])
                                x[i] = sent[i] - alpha * (sent[i] - cread[i])
                            wild_pull(theta, sent, alpha)
                        ver = A.fetch_add(ctrl, S_VERSION * LINE, 1) + 1
                        if snapshot_due(cfg_i, ctrl, ver):
                            take_snapshot(ctrl, cfg_i, ring, meta, ver, theta)
                        if locked:
                            A.store_release(turn, 0, (grp + 1) % groups)
                        read_version = ver - 1 if prev_rv < 0 else prev_rv + 1
                        prev_rv = rv
                        k = nrec[w * LINE]
                        if not record(ri, rf, nrec, ctrl, w, ver, read_version, 0, True, t_s, t_r, t_gs, t_ge, wait):
                            done = True
                            code = BUFFER_FULL
                        if k < dist.shape[1]:
                            dist[w, k] = np.sqrt(ss)
                if g > 1:
                    A.store(gctl, base + G_STOP * LINE, 1 if done else 0)
                if done:
                    if g > 1:
                        group_barrier(gctl, base, g, sense, ctrl)
                    return code
            if g > 1:  # the members wait for the leader's exchange and its decision to go on
                sense = group_barrier(gctl, base, g, sense, ctrl)
                if sense < 0:
                    return STOPPED_WAITING
                if A.load(gctl, base + G_STOP * LINE) != 0:
                    return OK
            t_gs = A.now_ns()
            sample_batch(idx, cfg_i[C_NROWS])
            loss_and_grad(x, X, y, idx, mine, shape)
            straggle(slowdown, t_gs)
            t_ge = A.now_ns()
            if g > 1:
                sense = group_barrier(gctl, base, g, sense, ctrl)
                if sense < 0:
                    return STOPPED_WAITING
            if leader:
                if g > 1:
                    copy_into(mean, grads[w])
                    for k in range(w + 1, w + g):
                        mean += grads[k]
                    mean /= g
                    apply_update(x, v, mean, cfg_i, cfg_f, 0)
                else:
                    apply_update(x, v, mine, cfg_i, cfg_f, 0)
            steps += 1
        return code

    return run_elastic


run_elastic = _make()


def wire(r: Run) -> Wiring:
    """``wiring.IMPLEMENTATIONS``'s entry for easgd / eawild: the groups' states, barriers, token and distances."""
    from executors.cpu.shared import C_CAP, F_MOM
    a, n, theta = r.scenario.algorithm, r.workers, r.theta
    locked = a.name == "easgd"
    g = 1 if locked else int(a.param("group_size"))
    g = g if n % g == 0 else 1  # the one-thread warm-up only compiles
    groups = n // g
    params = np.array([a.param("alpha"), a.param("tau"), 1.0 if locked else 0.0, g], dtype=np.float64)
    xloc = np.repeat(theta[None, :], groups, axis=0)
    vloc = np.zeros((groups, theta.shape[0] if r.cfg_f[F_MOM] > 0 else 0), dtype=theta.dtype)
    grads = np.zeros((n, theta.shape[0]), dtype=theta.dtype)
    gctl = np.zeros(groups * G_WORDS * LINE, dtype=np.int64)
    turn = np.zeros(LINE, dtype=np.int64)
    held: dict[str, np.ndarray] = {}

    def distances() -> np.ndarray:  # sized once the runner knows the record capacity
        if "dist" not in held:
            held["dist"] = np.full((n, int(r.cfg_i[C_CAP])), np.nan)
        return held["dist"]

    return Wiring(r.loop, lambda w: (params, xloc, vloc, grads, gctl, turn, distances()), lambda: r.theta,
                  row_columns=lambda w, k: {"distance": distances()[w, :k]},
                  extra=lambda applied: {"spread_final": float(np.sqrt(np.mean(
                      np.sum((xloc - r.theta[None, :]) ** 2, axis=1))))})
