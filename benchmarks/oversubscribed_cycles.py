"""Do workers time-sharing one CPU pay more CPU per cycle than one worker alone? K threads pinned to one CPU.

Run: ``.venv/bin/python benchmarks/oversubscribed_cycles.py [--batch 16] [--rounds 5]`` (Linux; needs CPU 1)

Each thread runs a Lopez worker's cycle on the fidelity sweep's model (MLP 64-256-256-10 on digits): copy θ,
gradient into its own g, ``acc += g − g_old`` on a shared vector, ``g_old ← g``. That is three private
model-sized buffers a worker (2 MB at 680 KB, this core's whole L2). With K = 3 or 7 such threads on one CPU
the OS switches between them, and a worker whose lines were evicted meanwhile refills them. The script prints
the CPU time per cycle (wall time ÷ all threads' cycles) for K = 1, 3, 7, in interleaved rounds.

On the 2-vCPU Intel Xeon (benchmarks/fidelity.md, 2026-11-25 05:47): K = 7 against K = 1 was +1.6% and +0.6%
at B = 16 (two runs), +4.5% at B = 64, and +3.6% at B = 16 with ``--atomic`` (623 µs a cycle, the atomic pass
about 340 µs of it). That is too little to explain the simulator's Lopez workers contributing 8–13% faster
than measured at 4 and 8 threads.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import numpy as np
from numba import njit

from executors import atomics as A
from simasgd.loader import from_dict
from simasgd.memops import copy_into
from simasgd.workloads import build_workload
from simasgd.workloads.kernels import loss_and_grad


@njit(nogil=True, cache=True)
def cycles(theta, acc, X, y, shape, batch, n, seed, atomic):  # noqa: ANN001, ANN201
    """``n`` Lopez-like worker cycles; the pass into ``acc`` with plain adds, or atomic ones as Lopez's."""
    np.random.seed(seed)
    local, g, old = np.empty_like(theta), np.empty_like(theta), np.zeros_like(theta)
    idx = np.empty(batch, np.int64)
    for _ in range(n):
        copy_into(local, theta)
        for i in range(batch):
            idx[i] = np.random.randint(0, X.shape[0])
        loss_and_grad(local, X, y, idx, g, shape)
        if atomic:
            for i in range(g.shape[0]):
                A.fetch_add(acc, i, g[i] - old[i])
        else:
            for i in range(g.shape[0]):
                acc[i] += g[i] - old[i]
        copy_into(old, g)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--atomic", action="store_true", help="the pass with atomic adds, as a Lopez worker's")
    ap.add_argument("--cpu", type=int, default=1, help="the CPU the K threads share (this thread sits elsewhere)")
    args = ap.parse_args()
    sc = from_dict({"name": "oversubscribed", "seed": 1, "workload": {
        "model": "mlp", "layers": [64, 256, 256, 10], "dataset": "digits", "batch_size": args.batch}})
    wl = build_workload(sc.workload, sc.seed)
    theta = wl.init_theta(np.random.default_rng(0))
    acc = np.zeros_like(theta)
    cycles(theta, acc, wl.X, wl.y, wl.shape, args.batch, 5, 0, args.atomic)  # compile (or load) first
    others = sorted(os.sched_getaffinity(0) - {args.cpu})
    if others:
        os.sched_setaffinity(0, set(others))
    total = 3000 if args.batch <= 16 else 1000

    def run(k: int) -> float:
        n = total // k

        def body(w: int) -> None:
            os.sched_setaffinity(0, {args.cpu})
            cycles(theta, acc, wl.X, wl.y, wl.shape, args.batch, n, w, args.atomic)
        threads = [threading.Thread(target=body, args=(w,)) for w in range(k)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return (time.perf_counter() - t0) / (k * n) * 1e6

    res: dict[int, list[float]] = {k: [] for k in (1, 3, 7)}
    for _ in range(args.rounds):
        for k in res:
            res[k].append(run(k))
    base = float(np.median(res[1]))
    for k, v in res.items():
        med = float(np.median(v))
        print(f"B = {args.batch}, K = {k}: {med:7.1f} µs CPU a cycle ({med / base - 1:+.1%} against K = 1; "
              f"rounds {', '.join(f'{x:.0f}' for x in v)})")


if __name__ == "__main__":
    main()
