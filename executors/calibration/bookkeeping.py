"""``[executor] bookkeeping_s``: the cpu executor's own work between a worker's bump of the version and its
next read of it.

After its update a HOGWILD! or Leashed worker bumps the version (or publishes), checks whether the loss
ring wants a snapshot, appends its record (a clock read and a dozen stores), checks the stop word, the
budget and the deadline (another clock read), reads the clock for the next cycle's start and only then
loads the version its next gradient starts from. Two unlocked writers may end one line's hand-off apart
(tens of nanoseconds between cores sharing an L3), so whether the leader's next read counts the
follower's update depends on this time. This loop makes the same calls back to back on one thread,
and times what the executor's HOGWILD! runs show as the gap between a worker's record and its next
cycle's start (benchmarks/README_cpu.md, design measurements; the simulator's ``Platform.bookkeeping``,
simasgd/sim/costs.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.shared import (
    C_MAXU,
    LINE,
    N_CFG_I,
    N_RF,
    S_DEADLINE,
    S_VERSION,
    new_ctrl,
    out_of_budget,
    record,
    snapshot_due,
)

ROWS = 4096  # record buffer columns: rewritten in turn, as a run's buffer is written once a row


@njit(nogil=True, cache=True)
def _bookkeeping(ctrl: np.ndarray, cfg_i: np.ndarray, ri: np.ndarray, rf: np.ndarray, nrec: np.ndarray,
                 n: int, out_ns: np.ndarray) -> int:
    """``out_ns[k]``: the mean time of ``n`` rounds of the executor's bump-to-read path (round k)."""
    rv = sink = 0
    for k in range(len(out_ns)):
        t0 = A.now_ns()
        for i in range(n):
            v = A.fetch_add(ctrl, S_VERSION * LINE, 1) + 1
            if snapshot_due(cfg_i, ctrl, v):
                rv += 1
            nrec[0] = i % (ri.shape[1] - 1)
            record(ri, rf, nrec, ctrl, 0, v, rv, 0, True, t0, t0, t0, t0, 0)
            if out_of_budget(ctrl, cfg_i):
                rv += 1
            sink += A.now_ns()  # the next cycle's start
            rv = A.load(ctrl, S_VERSION * LINE)
        out_ns[k] = (A.now_ns() - t0) / n
    return rv + sink


def bookkeeping_table(rounds: int = 40, n: int = 20_000) -> dict[str, float | int]:
    """``[executor]``: the median over ``rounds`` of the mean time of the path (``bookkeeping_s``) and the
    rounds' spread, on the calling thread."""
    ctrl = new_ctrl()
    ctrl[S_DEADLINE * LINE] = np.iinfo(np.int64).max  # never out of budget: the checks run, never stop
    cfg_i = np.zeros(N_CFG_I, np.int64)
    cfg_i[C_MAXU] = np.iinfo(np.int64).max
    ri, rf = np.zeros((4, ROWS), np.int64), np.zeros((N_RF, ROWS))
    nrec = np.zeros(LINE, np.int64)
    _bookkeeping(ctrl, cfg_i, ri, rf, nrec, 10, np.zeros(2))  # compile (or load) and warm
    out = np.zeros(max(1, rounds))
    _bookkeeping(ctrl, cfg_i, ri, rf, nrec, max(1, n), out)
    return {"bookkeeping_s": float(np.median(out)) * 1e-9, "p10_s": float(np.percentile(out, 10)) * 1e-9,
            "p90_s": float(np.percentile(out, 90)) * 1e-9, "rounds": len(out), "calls": int(n)}
