"""The device words a resident run shares, and the single-lane protocol steps on them.

``ctl`` (int64) holds the run's shared words, each on a 128-byte line of its own (``LINE`` elements
apart) so that spinning on one does not invalidate another. ``cfg`` (int64) and ``cfgf`` (θ's dtype)
hold the run's constants. Rows are written by a worker's lane 0 into ``rows_i`` / ``rows_t`` at an
index taken with an atomic add; the snapshot ring (``snap``, ``meta``) is how the host monitor
sees θ without stopping anyone (a slot's version is written last, after a fence, and cleared first).
"""

from __future__ import annotations

from typing import Any

from executors.gpu.device import cuda, now

LINE = 16  # int64 words per 128-byte line
# ctl words (index · LINE)
VERSION, TICKET, STOP, ROWS, LOCK, BAR_N, BAR_GEN, ANN, SEQ, LATEST, GO, T0 = range(12)
CTL_WORDS = 12
# STOP values: why a run stopped
RUNNING, BUDGET, ROWS_FULL, HOST = 0, 1, 2, 3
# cfg (int64)
MAXU, BATCH, NROWS, EVERY, RING, LOCAL, PERSIST, AWARE, WORKERS, ATTEMPTS, WITH_ADD, CONSISTENT, CAP, DIM, \
    LAYERS = range(15)
WIDTHS = 16  # cfg[WIDTHS : WIDTHS + LAYERS + 1]: the dense layers' widths
CONV = 40    # cfg[CONV : CONV + 10]: C, H, W, K, k, Ho, Wo, P, Hp, Wp
CFG_LEN = 50
# rows_i columns; rows_t: t_start, t_grad_start, t_grad_end, t_write (device ns)
R_WORKER, R_VERSION, R_READ, R_RETRIES, R_APPLIED, R_WAIT = range(6)
ROW_COLS = 6
# per-worker words (wsw[w, ·]): broadcast from lane 0 to the worker's lanes
W_GO, W_READ, W_CUR, W_T0, W_T1, W_T2, W_STATUS, W_AUX, W_WAIT, W_RETRIES, W_SLOT = range(11)
WS_COLS = 11
# A word lane 0 broadcasts is written again only after a wsync that follows every lane's read of it.
CLAIMED = 1 << 40  # a pool vector's reader count while a writer owns it (as executors/cpu/shared.py)


@cuda.jit(device=True)
def load(ctl: Any, k: int) -> Any:
    """An atomic read of ctl word k (what other workers left, not a cached copy)."""
    return cuda.atomic.add(ctl, k * LINE, 0)


@cuda.jit(device=True)
def stopped(ctl: Any) -> Any:
    return cuda.atomic.add(ctl, STOP * LINE, 0) != RUNNING


@cuda.jit(device=True)
def stop(ctl: Any, why: Any) -> None:
    """Set the stop word unless already set (the first reason stays)."""
    cuda.atomic.cas(ctl, STOP * LINE, RUNNING, why)


@cuda.jit(device=True)
def record(ctl: Any, cfg: Any, rows_i: Any, rows_t: Any, w: int, version: Any, read: Any, retries: Any, applied: Any,
           wait: Any, t0: Any, t1: Any, t2: Any, t3: Any) -> Any:
    """One row; returns its index, or -1 when the buffer is full (the run then stops)."""
    r = cuda.atomic.add(ctl, ROWS * LINE, 1)
    if r >= cfg[CAP]:
        stop(ctl, ROWS_FULL)
        return -1
    rows_i[r, R_WORKER] = w
    rows_i[r, R_VERSION] = version
    rows_i[r, R_READ] = read
    rows_i[r, R_RETRIES] = retries
    rows_i[r, R_APPLIED] = applied
    rows_i[r, R_WAIT] = wait
    rows_t[r, 0] = t0
    rows_t[r, 1] = t1
    rows_t[r, 2] = t2
    rows_t[r, 3] = t3
    return r


@cuda.jit(device=True)
def lock(ctl: Any, cfg: Any) -> Any:
    """Spin on the lock word with CAS (one lane); returns ns waited, or -1 if the run stopped meanwhile."""
    t = now()
    while cuda.atomic.cas(ctl, LOCK * LINE, 0, 1) != 0:
        if stopped(ctl):
            return -1
    cuda.threadfence()
    return now() - t


@cuda.jit(device=True)
def unlock(ctl: Any) -> None:
    cuda.threadfence()
    cuda.atomic.exch(ctl, LOCK * LINE, 0)


@cuda.jit(device=True)
def barrier(ctl: Any, cfg: Any, n: int, action: Any) -> None:
    """A device-wide barrier of ``n`` workers (one lane each; all resident). With ``action`` the last to
    arrive, before releasing the others, makes the round's version and decides whether a next round
    runs (``GO``): the one step of :func:`sync` is then in θ for everyone."""
    gen = cuda.atomic.add(ctl, BAR_GEN * LINE, 0)
    if cuda.atomic.add(ctl, BAR_N * LINE, 1) == n - 1:
        cuda.atomic.exch(ctl, BAR_N * LINE, 0)
        if action:
            v = cuda.atomic.add(ctl, VERSION * LINE, 1) + 1
            if v >= cfg[MAXU]:
                stop(ctl, BUDGET)
            go = 1 if not stopped(ctl) else 0
            cuda.atomic.exch(ctl, GO * LINE, go)
        cuda.threadfence()
        cuda.atomic.add(ctl, BAR_GEN * LINE, 1)
    else:
        while cuda.atomic.add(ctl, BAR_GEN * LINE, 0) == gen:
            pass
    cuda.threadfence()


@cuda.jit(device=True)
def divisor(aware: Any, tau: Any) -> Any:
    """update_rule.divisor: max(1, τ) when staleness-aware, else 1."""
    if aware != 0 and tau > 1:
        return float(tau)
    return 1.0


@cuda.jit(device=True)
def snapshot_begin(meta: Any, cfg: Any, v: Any) -> Any:
    """The ring slot of version v's snapshot, marked invalid while it is written (lane 0)."""
    slot = (v // cfg[EVERY]) % cfg[RING]
    cuda.atomic.exch(meta, slot * 2, -1)
    cuda.threadfence()
    return slot


@cuda.jit(device=True)
def snapshot_end(meta: Any, slot: Any, v: Any) -> None:
    cuda.threadfence()
    meta[slot * 2 + 1] = now()
    cuda.threadfence()
    cuda.atomic.exch(meta, slot * 2, v)




@cuda.jit(device=True)
def mark_start(ctl: Any, t: Any) -> None:
    """The run's time origin: the first attempt's start (lane 0)."""
    if cuda.atomic.add(ctl, T0 * LINE, 0) == 0:
        cuda.atomic.cas(ctl, T0 * LINE, 0, t)
