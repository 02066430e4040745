"""What recording a cycle costs the cpu executor: the clock reads and the per-attempt record.

Every cycle reads the monotonic clock at its phase boundaries (cycle start, read done, gradient
done; the write time is read by ``record``) and appends one record (``shared.record``). This
times both in a nopython loop and reports them against a cycle's length.

    .venv/bin/python benchmarks/record_cost.py [--cycle-us 220]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu import shared

EXTRA_CLOCK_READS = 3  # t_start, t_read/t_grad_start, t_grad_end (record reads t_write itself)


@njit(nogil=True)
def _clocks(n: int) -> int:
    s = 0
    for _ in range(n):
        s += A.now_ns()
    return s


@njit(nogil=True)
def _records(ri: np.ndarray, rf: np.ndarray, nrec: np.ndarray, ctrl: np.ndarray, n: int) -> None:
    for i in range(n):
        nrec[0] = 0
        shared.record(ri, rf, nrec, ctrl, 0, i, i, 0, True, i, i, i, i, 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cycle-us", type=float, default=220.0, help="a cycle's length to compare with (MLP B=16: ~220)")
    p.add_argument("-n", type=int, default=2_000_000)
    args = p.parse_args(argv)
    ctrl = shared.new_ctrl()
    ri, rf = np.zeros((4, 8), np.int64), np.zeros((shared.N_RF, 8))
    nrec = np.zeros(shared.LINE, np.int64)
    _clocks(10)
    _records(ri, rf, nrec, ctrl, 10)
    t = time.perf_counter()
    _clocks(args.n)
    clock = (time.perf_counter() - t) / args.n
    t = time.perf_counter()
    _records(ri, rf, nrec, ctrl, args.n)
    rec = (time.perf_counter() - t) / args.n
    per_cycle = rec + EXTRA_CLOCK_READS * clock
    print(f"clock read {clock * 1e9:.1f} ns, record {rec * 1e9:.1f} ns: {per_cycle * 1e9:.0f} ns a cycle = "
          f"{per_cycle / (args.cycle_us * 1e-6):.3%} of a {args.cycle_us:g} µs cycle (target ≤ 2%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
