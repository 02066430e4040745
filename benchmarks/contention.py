"""What a model-sized step costs when k cores work on the same θ at once: the measurement the memory model lacks.

The simulator times a worker's read of θ and its update from the profile's per-size rates, with another core's
lines (``[coherence]``) measured between two CPUs; it charges the same step at 2 workers and at 16. On a
16-core machine HOGWILD!'s update phase grew from 40 µs at 1 thread to 261 µs at 16, and mutex's critical
section from 74 µs at 2 threads to 250 µs at 4-16 (benchmarks/fidelity.md, the 16-core entry), which that
model cannot give. This runs the two steps alone, no gradient, k = 1, 2, 4, ... threads pinned one a CPU:

- ``update``: every thread applies θ -= lr·g to the shared θ, pass after pass (HOGWILD!'s write, k writers);
- ``locked``: every thread takes the executors' TTAS lock (``executors/cpu/shared.word_lock``), copies θ
  into its own buffer, applies θ -= lr·g, releases (mutex's two critical sections back to back, k - 1
  threads spinning); the lock's hold (acquired to released) is timed.

Per k the median and p90 of a thread's pass (µs) and, for ``locked``, the passes a second; JSON to ``--out``:

    .venv/bin/python benchmarks/contention.py --out OUT/contention.json [--threads 1 2 4 8 16] [--dim 85002]

``--dim`` is θ's length in float64 (85002: many_cores.py's MLP, 680 KB).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # record

import record  # noqa: E402 - beside this file
from executors import atomics as A  # noqa: E402
from executors.calibration.copies import LR, _update  # noqa: E402
from executors.calibration.timing import run_threads  # noqa: E402
from executors.cpu.shared import LINE, N_CFG_F, N_CFG_I, N_SLOTS, S_LOCK, lock_release, word_lock  # noqa: E402
from simasgd.numerics.memops import copy_into  # noqa: E402

SCHEMA, SCHEMA_VERSION = "contention", 1
OPS = ("update", "locked")


@njit(nogil=True, cache=True)
def _go(start: np.ndarray, k: int) -> None:
    """All k threads arrive, then start together (the first passes of one must meet the others')."""
    A.fetch_add(start, 0, 1)
    spins = 0
    while A.load_acquire(start, 0) < k:
        A.cpu_relax()
        spins += 1
        if spins % 4096 == 0:
            A.sched_yield()


@njit(nogil=True, cache=True)
def _updates(theta: np.ndarray, g: np.ndarray, start: np.ndarray, k: int, out_ns: np.ndarray) -> None:
    _go(start, k)
    for r in range(out_ns.shape[0]):
        t0 = A.now_ns()
        _update(theta, g, LR)
        A.compiler_barrier()
        out_ns[r] = A.now_ns() - t0


@njit(nogil=True, cache=True)
def _locked(theta: np.ndarray, mine: np.ndarray, g: np.ndarray, ctrl: np.ndarray, cfg_i: np.ndarray,
            cfg_f: np.ndarray, start: np.ndarray, k: int, out_ns: np.ndarray, ends_ns: np.ndarray) -> None:
    _go(start, k)
    for r in range(out_ns.shape[0]):
        word_lock(ctrl, S_LOCK * LINE, ctrl, cfg_i, cfg_f)
        t0 = A.now_ns()
        copy_into(mine, theta)
        _update(theta, g, LR)
        A.compiler_barrier()
        t1 = A.now_ns()
        lock_release(ctrl, S_LOCK * LINE)
        out_ns[r] = t1 - t0
        ends_ns[r] = t1


def measure(op: str, k: int, cpus: list[int], dim: int, passes: int) -> dict[str, Any]:
    """k threads on CPUs ``cpus[:k]``, ``passes`` passes each (the first two warm and are dropped)."""
    theta, g = np.ones(dim), np.full(dim, 1e-9)
    start = np.zeros(LINE, dtype=np.int64)
    outs = [np.zeros(passes, dtype=np.int64) for _ in range(k)]
    if op == "update":
        args = [(theta, g, start, k, outs[i]) for i in range(k)]
        run_threads(_updates, args, cpus=cpus[:k])
        ends = None
    else:
        ctrl = np.zeros(N_SLOTS * LINE, dtype=np.int64)
        cfg_i, cfg_f = np.zeros(N_CFG_I, dtype=np.int64), np.zeros(N_CFG_F)  # backoff kind 0: a pause a retry
        ends = [np.zeros(passes, dtype=np.int64) for _ in range(k)]
        args = [(theta, np.empty(dim), g, ctrl, cfg_i, cfg_f, start, k, outs[i], ends[i]) for i in range(k)]
        run_threads(_locked, args, cpus=cpus[:k])
    ns = np.concatenate([o[2:] for o in outs]) / 1e3
    row: dict[str, Any] = {"op": op, "threads": k, "passes": int(ns.size), "median_us": float(np.median(ns)),
                           "p90_us": float(np.percentile(ns, 90)), "bytes": 8 * dim}
    if ends is not None:  # the lock's passes a second over the span every thread was passing
        t = np.sort(np.concatenate([e[2:] for e in ends]))
        row["passes_per_s"] = float((t.size - 1) / max((t[-1] - t[0]) / 1e9, 1e-9))
        row["lock_busy"] = float(row["passes_per_s"] * np.mean(ns) / 1e6)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--threads", type=int, nargs="*", default=[1, 2, 4, 8, 16])
    p.add_argument("--dim", type=int, default=85002)
    p.add_argument("--passes", type=int, default=200, help="passes a thread a cell")
    args = p.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    threads = [k for k in args.threads if k <= len(cpus)]
    if len(threads) < len(args.threads):
        print(f"contention: {len(cpus)} CPUs here: threads {sorted(set(args.threads) - set(threads))} left out")
    rows, t0 = [], time.perf_counter()
    print("| op | threads | median µs | p90 µs | passes/s | lock busy |\n|---|---|---|---|---|---|")
    for op in OPS:
        for k in threads:
            r = measure(op, k, cpus, args.dim, args.passes)
            rows.append(r)
            extra = (f"{r['passes_per_s']:.0f} | {r['lock_busy']:.2f}" if "passes_per_s" in r else "· | ·")
            print(f"| {op} | {k} | {r['median_us']:.1f} | {r['p90_us']:.1f} | {extra} |", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record.write(args.out, SCHEMA, SCHEMA_VERSION, {"dim": args.dim, "cpus": len(cpus), "rows": rows,
                                                     "seconds": time.perf_counter() - t0})
    print(f"wrote {args.out} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
