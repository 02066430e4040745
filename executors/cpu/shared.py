"""What every worker loop shares: the control block, configuration slots and nopython primitives.

Layout. One int64 control array ``ctrl`` holds every shared word, each on its
own 64-byte cache line (slot ``k`` lives at ``ctrl[k * LINE]``) so that the
version counter, the lock and the stop flag do not falsely share a line.
Configuration travels as two small arrays ``cfg_i`` (int64) and ``cfg_f``
(float64) indexed by the ``C_*`` / ``F_*`` constants; per-attempt records go to
per-worker arrays ``ri`` (int64, rows ``R_VER, R_RV, R_RETRIES, R_APPLIED``)
and ``rf`` (float64, rows ``R_TREAD, R_TWRITE, R_WAIT`` and the phase boundaries
``R_TSTART, R_TGS, R_TGE``), with the count in ``nrec[w * LINE]``. Module-level
ints are compile-time constants for numba.

Losses are not measured on a live thread: the worker that applies version v,
when ``v % cfg_i[C_SNAP_EVERY] == 0``, copies θ into a preallocated ring
(:func:`take_snapshot`), and the runner evaluates the ring off the workers'
CPUs (:mod:`.monitor`).

Every spin loop here checks the stop word, so a failed or stopped run never
leaves a thread spinning on a lock nobody will release.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from simasgd.numerics import update_rule
from simasgd.numerics.memops import copy_into
from simasgd.numerics.update_rule import divisor, step, step_into, step_mirrored, step_scaled

LINE = 8  # int64 words per cache line

# ctrl slots (multiply by LINE)
S_VERSION, S_STOP, S_GO, S_T0, S_LOCK, S_RW, S_RW_WAITW, S_BAR_COUNT, S_BAR_SENSE, S_SEQ, \
    S_LATEST, S_ROUND_STOP, S_EXHAUSTED, S_CONTRIB, S_DEADLINE, S_SNAP_DONE, S_SNAP_FULL, S_MASTER_DONE, \
    S_ELIDED = range(19)
N_SLOTS = 19  # S_ELIDED: reads of θ skipped, the worker's copy being θ already (loops.py)

# values of the stop word: RUN, STOP (budget/ε: finish cleanly), ABORT (a worker failed: bail out anywhere)
RUN, STOP, ABORT = 0, 1, 2

# cfg_i
C_WORKERS, C_BATCH, C_NROWS, C_MAXU, C_BOKIND, C_PERSIST, C_STALE_AWARE, C_CAP, C_PRIO, C_DIM, \
    C_SNAP_EVERY, C_PROBES, C_RWLOCK, C_LOPEZ, C_LOCAL_COPY, C_SWEEP_ALTERNATE = range(16)
# C_LOPEZ: lopez's choices as bits (lopez.WITH_ADD, lopez.CONSISTENT); C_LOCAL_COPY, C_SWEEP_ALTERNATE: hogwild
N_CFG_I = 16
# cfg_f
F_LR, F_MOM, F_BO_INIT_NS, F_BO_MAX_NS = range(4)
N_CFG_F = 4

# record rows
R_VER, R_RV, R_RETRIES, R_APPLIED = range(4)
R_TREAD, R_TWRITE, R_WAIT, R_TSTART, R_TGS, R_TGE = range(6)
N_RF = 6
# snapshot ring metadata (int64, per slot p at p * LINE): the version held (-1 while being written), its time
M_VER, M_TNS = 0, 1

# backoff kinds (BackoffConfig.kind)
BACKOFF_KINDS = {"none": 0, "linear": 1, "exponential": 2, "random": 3}
BACKOFF_RANDOM_START = 8  # a bit of cfg_i[C_BOKIND]: BackoffConfig.start = "random"

# worker return codes
OK, STOPPED_WAITING, BUFFER_FULL = 0, 1, 2

SPINS_BEFORE_YIELD = 64   # pause instructions between sched_yield calls (oversubscribed machines)
CLAIMED = -(1 << 40)      # Leashed: reader count of a vector owned by a writer


def slot(k: int) -> int:
    return k * LINE


def new_ctrl() -> np.ndarray:
    return np.zeros(N_SLOTS * LINE, dtype=np.int64)


# --- stop, time ---------------------------------------------------------------

@njit(nogil=True, cache=True)
def stopped(ctrl: np.ndarray) -> bool:
    return A.load_relaxed(ctrl, S_STOP * LINE) != RUN


@njit(nogil=True, cache=True)
def aborted(ctrl: np.ndarray) -> bool:
    return A.load_relaxed(ctrl, S_STOP * LINE) == ABORT


@njit(nogil=True, cache=True)
def secs(ctrl: np.ndarray, t_ns: int) -> float:
    """Seconds since the run's start (the GO moment)."""
    return (t_ns - ctrl[S_T0 * LINE]) * 1e-9


@njit(nogil=True, cache=True)
def out_of_budget(ctrl: np.ndarray, cfg_i: np.ndarray) -> bool:
    """Stop word set, update budget spent, or wall-clock deadline passed."""
    if A.load_relaxed(ctrl, S_STOP * LINE) != RUN:
        return True
    if A.load_relaxed(ctrl, S_VERSION * LINE) >= cfg_i[C_MAXU]:
        return True
    return A.now_ns() >= ctrl[S_DEADLINE * LINE]


@njit(nogil=True, cache=True)
def wait_go(ctrl: np.ndarray) -> bool:
    """Spin until the main thread says go (all threads start together); False if stopped first."""
    spins = 0
    while A.load_acquire(ctrl, S_GO * LINE) == 0:
        A.cpu_relax()
        spins += 1
        if spins % SPINS_BEFORE_YIELD == 0:
            A.sched_yield()
            if stopped(ctrl):
                return False
    return True


@njit(nogil=True, cache=True)
def spin_pause(spins: int) -> None:
    A.cpu_relax()
    if spins % SPINS_BEFORE_YIELD == 0:
        A.sched_yield()


# --- backoff --------------------------------------------------------------------

@njit(nogil=True, cache=True)
def backoff(cfg_i: np.ndarray, cfg_f: np.ndarray, attempt: int) -> None:
    """Wait after the ``attempt``-th failure (1, 2, ...), per the scenario's backoff policy."""
    kind = cfg_i[C_BOKIND] & 7
    random_start = (cfg_i[C_BOKIND] & BACKOFF_RANDOM_START) != 0  # Ek 2021 §2.2.3 (simasgd/sim/primitives.py)
    if kind == 0:
        A.cpu_relax()
        return
    init, cap = cfg_f[F_BO_INIT_NS], cfg_f[F_BO_MAX_NS]
    if kind == 3:  # random: uniform in (0, max] (random start) or in the exponential window
        delay = np.random.random() * (cap if random_start else min(cap, init * 2.0 ** min(attempt - 1, 40)))
    else:
        delay = init * attempt if kind == 1 else init * 2.0 ** min(attempt - 1, 40)
        if random_start:
            delay = np.random.random() * delay
        delay = min(delay, cap)
    until = A.now_ns() + int(delay)
    spins = 0
    while A.now_ns() < until:
        spins += 1
        spin_pause(spins)


# --- spin lock (test-and-test-and-set) -----------------------------------------------

@njit(nogil=True, cache=True)
def word_lock(words: np.ndarray, at: int, ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray) -> int:
    """Take the lock word ``words[at]`` (its own cache line), with the scenario's backoff between failed
    attempts; returns ns waited, or -1 if the run stopped meanwhile."""
    if A.cas(words, at, 0, 1) == 0:
        return 0
    t0 = A.now_ns()
    attempt, spins = 0, 0
    while True:
        while A.load_relaxed(words, at) != 0:
            spins += 1
            spin_pause(spins)
            if spins % SPINS_BEFORE_YIELD == 0 and stopped(ctrl):
                return -1
        if A.cas(words, at, 0, 1) == 0:
            return A.now_ns() - t0
        attempt += 1
        backoff(cfg_i, cfg_f, attempt)


@njit(nogil=True, cache=True)
def lock_acquire(ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray, at: int) -> int:
    """Take the lock word ``ctrl[at]``; returns ns waited, or -1 if the run stopped meanwhile."""
    return word_lock(ctrl, at, ctrl, cfg_i, cfg_f)


@njit(nogil=True, cache=True)
def lock_release(words: np.ndarray, at: int) -> None:
    A.store_release(words, at, 0)


# --- reader/writer lock: word = 2 * readers + writer bit; waiting writers counted apart ---

@njit(nogil=True, cache=True)
def read_acquire(ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray) -> int:
    at, waitw = S_RW * LINE, S_RW_WAITW * LINE
    writer_first = cfg_i[C_PRIO] == 1
    t0 = A.now_ns()
    attempt, spins = 0, 0
    while True:
        s = A.load(ctrl, at)
        if (s & 1) == 0 and not (writer_first and A.load_relaxed(ctrl, waitw) > 0):
            if A.cas(ctrl, at, s, s + 2) == s:
                return A.now_ns() - t0
            attempt += 1
            backoff(cfg_i, cfg_f, attempt)
        else:
            spins += 1
            spin_pause(spins)
            if spins % SPINS_BEFORE_YIELD == 0 and stopped(ctrl):
                return -1


@njit(nogil=True, cache=True)
def read_release(ctrl: np.ndarray) -> None:
    A.fetch_add(ctrl, S_RW * LINE, -2)


@njit(nogil=True, cache=True)
def write_acquire(ctrl: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray) -> int:
    at, waitw = S_RW * LINE, S_RW_WAITW * LINE
    A.fetch_add(ctrl, waitw, 1)  # announces the writer (readers defer to it under writer priority)
    t0 = A.now_ns()
    attempt, spins = 0, 0
    waited = -1
    while True:
        if A.load(ctrl, at) == 0:
            if A.cas(ctrl, at, 0, 1) == 0:
                waited = A.now_ns() - t0
                break
            attempt += 1
            backoff(cfg_i, cfg_f, attempt)
        else:
            spins += 1
            spin_pause(spins)
            if spins % SPINS_BEFORE_YIELD == 0 and stopped(ctrl):
                break
    A.fetch_add(ctrl, waitw, -1)
    return waited


@njit(nogil=True, cache=True)
def write_release(ctrl: np.ndarray) -> None:
    A.fetch_add(ctrl, S_RW * LINE, -1)


# --- sense-reversing barrier -------------------------------------------------------------

@njit(nogil=True, cache=True)
def barrier(ctrl: np.ndarray, workers: int, sense: int) -> int:
    """Wait for all ``workers``; returns the new local sense, or -1 if the run was aborted."""
    new = 1 - sense
    if A.fetch_add(ctrl, S_BAR_COUNT * LINE, 1) == workers - 1:
        A.store(ctrl, S_BAR_COUNT * LINE, 0)
        A.store_release(ctrl, S_BAR_SENSE * LINE, new)
        return new
    spins = 0
    while A.load_acquire(ctrl, S_BAR_SENSE * LINE) != new:
        spins += 1
        spin_pause(spins)
        if spins % SPINS_BEFORE_YIELD == 0 and aborted(ctrl):
            return -1
    return new


# --- seqlock: lets the monitor copy θ consistently from a lone writer ----------------------

@njit(nogil=True, cache=True)
def seq_write_begin(ctrl: np.ndarray) -> None:
    A.fetch_add(ctrl, S_SEQ * LINE, 1)  # odd: a write is in progress


@njit(nogil=True, cache=True)
def seq_write_end(ctrl: np.ndarray) -> None:
    A.fence_release()
    A.fetch_add(ctrl, S_SEQ * LINE, 1)


@njit(nogil=True, cache=True)
def seq_copy(ctrl: np.ndarray, src: np.ndarray, out: np.ndarray) -> int:
    """Copy ``src`` when no write overlapped the copy; returns the version seen, -1 if stopped first."""
    spins = 0
    while True:
        s1 = A.load_acquire(ctrl, S_SEQ * LINE)
        if s1 % 2 == 0:
            v = A.load(ctrl, S_VERSION * LINE)
            copy_into(out, src)
            A.fence_acquire()
            if A.load(ctrl, S_SEQ * LINE) == s1:
                return v
        spins += 1
        spin_pause(spins)
        if spins % SPINS_BEFORE_YIELD == 0 and aborted(ctrl):
            return -1


# --- per-worker pieces ---------------------------------------------------------------------

@njit(nogil=True, cache=True)
def sample_batch(idx: np.ndarray, n_rows: int) -> None:
    """Rows uniformly with replacement, from this thread's numba RNG (seeded per worker)."""
    for i in range(idx.shape[0]):
        idx[i] = np.random.randint(0, n_rows)


@njit(nogil=True, cache=True)
def read_copy(ctrl: np.ndarray, copy: np.ndarray, theta: np.ndarray, held: bool) -> None:
    """A worker's read of θ into its copy, element by element (``memops.copy_into``); skipped, and counted
    (``S_ELIDED``), where the copy ``held`` θ already: the worker's own update left it there
    (``update_rule.step_mirrored``) and no one has written θ since."""
    if held:
        A.fetch_add(ctrl, S_ELIDED * LINE, 1)
    else:
        copy_into(copy, theta)


@njit(nogil=True, cache=True)
def straggle(slowdown: float, t_start: int) -> None:
    """A straggler takes ``slowdown`` × its gradient time: busy-wait the difference."""
    if slowdown <= 1.0:
        return
    now = A.now_ns()
    until = now + int((slowdown - 1.0) * (now - t_start))
    spins = 0
    while A.now_ns() < until:
        spins += 1
        spin_pause(spins)


@njit(nogil=True, cache=True)
def record(ri: np.ndarray, rf: np.ndarray, nrec: np.ndarray, ctrl: np.ndarray, w: int, version: int,
           read_version: int, retries: int, applied: bool, t_start: int, t_read: int, t_gs: int, t_ge: int,
           wait_ns: int) -> bool:
    """Append one attempt (times in clock ns; t_write is now); False when the buffer is full (stop)."""
    t_write = A.now_ns()
    n = nrec[w * LINE]
    if n >= ri.shape[1]:
        return False
    ri[R_VER, n], ri[R_RV, n], ri[R_RETRIES, n], ri[R_APPLIED, n] = version, read_version, retries, applied
    rf[R_TREAD, n], rf[R_TWRITE, n], rf[R_WAIT, n] = secs(ctrl, t_read), secs(ctrl, t_write), wait_ns * 1e-9
    rf[R_TSTART, n], rf[R_TGS, n], rf[R_TGE, n] = secs(ctrl, t_start), secs(ctrl, t_gs), secs(ctrl, t_ge)
    nrec[w * LINE] = n + 1
    return n + 1 < ri.shape[1]


# --- the loss snapshot ring -----------------------------------------------------------------

@njit(nogil=True, cache=True)
def snapshot_due(cfg_i: np.ndarray, ctrl: np.ndarray, v: int) -> bool:
    """Version ``v`` is one the ring keeps (every k-th), and the ring has not overflowed."""
    k = cfg_i[C_SNAP_EVERY]
    return k > 0 and v % k == 0 and A.load_relaxed(ctrl, S_SNAP_FULL * LINE) == 0


@njit(nogil=True, cache=True)
def take_snapshot(ctrl: np.ndarray, cfg_i: np.ndarray, ring: np.ndarray, meta: np.ndarray, v: int,
                  src: np.ndarray) -> None:
    """Copy θ at version ``v`` (a multiple of k) into ring slot (v/k − 1) mod R, by the worker that made v.

    A slot is reused only once the monitor has evaluated the snapshot in it (``S_SNAP_DONE`` counts
    those); a version that would overwrite an unevaluated one marks the ring full instead, and from
    then on no snapshot is taken (the curve ends there; the runner says so). So a monitor that cannot
    get a CPU never makes a worker wait."""
    i = v // cfg_i[C_SNAP_EVERY] - 1
    r = ring.shape[0]
    if i - A.load_acquire(ctrl, S_SNAP_DONE * LINE) >= r:
        A.cas(ctrl, S_SNAP_FULL * LINE, 0, i + 1)
        return
    p = (i % r) * LINE
    A.store(meta, p + M_VER, -1)
    copy_into(ring[i % r], src)
    meta[p + M_TNS] = A.now_ns()
    A.store_release(meta, p + M_VER, v)


# --- the update (simasgd.numerics.update_rule), with this run's configuration ------------------------------

def _make_update(rule_version: str = update_rule.SOURCE_HASH) -> Any:
    """:func:`apply_update` and :func:`seq_update`, in a closure over ``update_rule.SOURCE_HASH`` (a cached
    caller is not recompiled when a callee's file changes; closure values are part of numba's cache key)."""

    @njit(nogil=True, cache=True)
    def apply_update(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray,
                     staleness: int) -> None:
        """The update rule (:func:`simasgd.numerics.update_rule.step`) with this run's lr, momentum and
        staleness-awareness."""
        if len(rule_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return
        step(theta, vel, g, cfg_f[F_LR], cfg_f[F_MOM], staleness, cfg_i[C_STALE_AWARE] != 0)

    @njit(nogil=True, cache=True)
    def apply_update_mirrored(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, mirror: np.ndarray,
                              cfg_i: np.ndarray, cfg_f: np.ndarray, staleness: int) -> None:
        """:func:`apply_update`, the new θ also left in ``mirror``
        (:func:`simasgd.numerics.update_rule.step_mirrored`)."""
        if len(rule_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return
        step_mirrored(theta, vel, g, mirror, cfg_f[F_LR], cfg_f[F_MOM],
                      divisor(staleness, cfg_i[C_STALE_AWARE] != 0))

    @njit(nogil=True, cache=True)
    def update_into(out: np.ndarray, vout: np.ndarray, theta: np.ndarray, vel: np.ndarray, g: np.ndarray,
                    cfg_i: np.ndarray, cfg_f: np.ndarray, staleness: int) -> None:
        """:func:`apply_update` on a copy of θ, built in ``out`` in one pass
        (:func:`simasgd.numerics.update_rule.step_into`)."""
        if len(rule_version) == 0:  # never: makes it a closure cell, so part of numba's cache key
            return
        step_into(out, vout, theta, vel, g, cfg_f[F_LR], cfg_f[F_MOM], staleness, cfg_i[C_STALE_AWARE] != 0)

    @njit(nogil=True, cache=True)
    def seq_update_scaled(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, scale: float, cfg_i: np.ndarray,
                          cfg_f: np.ndarray, ctrl: np.ndarray, ring: np.ndarray, meta: np.ndarray) -> int:
        """:func:`seq_update` on ĝ = ``scale``·g, g read in the pass that writes θ
        (:func:`simasgd.numerics.update_rule.step_scaled`; the Lopez master, g its shared sum)."""
        seq_write_begin(ctrl)
        if scale == 1.0:
            apply_update(theta, vel, g, cfg_i, cfg_f, 0)
        else:
            step_scaled(theta, vel, g, cfg_f[F_LR], cfg_f[F_MOM], scale)
        seq_write_end(ctrl)
        v = A.fetch_add(ctrl, S_VERSION * LINE, 1) + 1
        if snapshot_due(cfg_i, ctrl, v):
            take_snapshot(ctrl, cfg_i, ring, meta, v, theta)
        return v

    @njit(nogil=True, cache=True)
    def seq_update(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, cfg_i: np.ndarray, cfg_f: np.ndarray,
                   ctrl: np.ndarray, ring: np.ndarray, meta: np.ndarray) -> int:
        """A lone writer's update (sequential, sync's worker 0; the Lopez master: :func:`seq_update_scaled`),
        staleness 0: the step inside the seqlock, the version bumped, θ copied into the loss ring when that
        version is one it keeps. Returns the new version."""
        return seq_update_scaled(theta, vel, g, 1.0, cfg_i, cfg_f, ctrl, ring, meta)

    return apply_update, apply_update_mirrored, update_into, seq_update, seq_update_scaled


apply_update, apply_update_mirrored, update_into, seq_update, seq_update_scaled = _make_update()
