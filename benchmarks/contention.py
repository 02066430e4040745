"""What a model-sized step costs when k cores work on the same θ at once, at the model's own size.

``simasgd calibrate`` measures this as the profile's ``[contention]`` table at 1 MiB
(``executors/calibration/contention.py``: k threads applying θ -= lr·g to one θ; the executors' lock taken to
copy and update θ with k − 1 threads spinning); this runs the same loops at a θ of ``--dim`` float64 (85002:
``many_cores.py``'s MLP, 680 KB), for the many-core entry beside it (benchmarks/fidelity.md):

    .venv/bin/python benchmarks/contention.py --out OUT/contention.json [--threads 1 2 4 8 16] [--dim 85002]
        [--beside [--beside-passes 1000]] [--cycle [--cycles 300]] [--layers 64 256 256 10] [--batch 16]

``--beside`` adds the same two steps with gradients computed beside them (``contention.beside``: k threads
computing that MLP's gradients at their own copies of θ, taking turns at one timed step on the shared θ) and
every gradient's time, the record's ``beside`` table: per k the median and p90 of the update, the lock's
hold (copy and update) and the gradient. ``--cycle`` adds the mutex executor's own cycle on k threads
(``contention.cycle``: the lock's two holds a cycle timed apart, the hand-off between holds, the lock's busy
share, updates/s), the record's ``cycle`` table. Schema 3 (2: no ``beside`` table possible; the ``cycle`` table
is optional in 3, as ``beside`` is).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # record

import record

from executors.calibration.contention import BATCH, LAYERS, beside, contention, cycle

SCHEMA, SCHEMA_VERSION = "contention", 3  # 3: the optional ``beside`` (and ``cycle``) tables


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--threads", type=int, nargs="*", default=[1, 2, 4, 8, 16])
    p.add_argument("--dim", type=int, default=85002)
    p.add_argument("--passes", type=int, default=200, help="passes a thread a cell")
    p.add_argument("--beside", action="store_true", help="also the steps with gradients computed beside them")
    p.add_argument("--beside-passes", type=int, default=1000, help="timed steps of each kind a k, all threads")
    p.add_argument("--cycle", action="store_true", help="also the mutex executor's cycle, its holds timed apart")
    p.add_argument("--cycles", type=int, default=300, help="timed cycles a thread a k (--cycle)")
    p.add_argument("--layers", type=int, nargs="+", default=list(LAYERS), help="the MLP beside (digits: 64 … 10)")
    p.add_argument("--batch", type=int, default=BATCH)
    args = p.parse_args(argv)
    cpus = len(os.sched_getaffinity(0))
    left = sorted(k for k in args.threads if k > cpus)
    if left:
        print(f"contention: {cpus} CPUs here: threads {left} left out")
    t0 = time.perf_counter()
    table = contention(8 * args.dim, args.passes, args.threads)
    print("| threads | update µs (median, p90) | locked hold µs (median, p90) | locked passes/s | lock busy |")
    print("|---|---|---|---|---|")
    for i, k in enumerate(table["threads"]):
        print(f"| {k} | {1e6 * table['update_s'][i]:.1f}, {1e6 * table['update_p90_s'][i]:.1f} | "
              f"{1e6 * table['locked_hold_s'][i]:.1f}, {1e6 * table['locked_hold_p90_s'][i]:.1f} | "
              f"{table['locked_per_s'][i]:.0f} | {table['locked_busy'][i]:.2f} |")
    payload = {"cpus": cpus, **table}
    if args.beside:
        t1 = time.perf_counter()
        near = beside(args.beside_passes, table["threads"], args.layers, args.batch)
        print(f"\nbeside gradients of the MLP {'-'.join(map(str, near['layers']))} (B = {near['batch']}, θ "
              f"{near['bytes'] / 1e3:.0f} KB), one thread a turn at the step, {time.perf_counter() - t1:.1f} s:")
        print("| threads | update µs (median, p90) | hold µs (median, p90) | gradient µs (median, p90) | steps "
              "| gradients | s |")
        print("|---|---|---|---|---|---|---|")
        for i, k in enumerate(near["threads"]):
            print(f"| {k} | {1e6 * near['update_s'][i]:.1f}, {1e6 * near['update_p90_s'][i]:.1f} | "
                  f"{1e6 * near['hold_s'][i]:.1f}, {1e6 * near['hold_p90_s'][i]:.1f} | "
                  f"{1e6 * near['gradient_s'][i]:.1f}, {1e6 * near['gradient_p90_s'][i]:.1f} | "
                  f"{near['steps'][i]} | {near['gradients'][i]} | {near['seconds'][i]:.2f} |")
        payload["beside"] = near
    if args.cycle:
        t1 = time.perf_counter()
        cyc = cycle(args.cycles, table["threads"], args.layers, args.batch)
        print(f"\nthe mutex cycle (lock, read θ, release; gradient; lock, update, release), {args.cycles} cycles a "
              f"thread, {time.perf_counter() - t1:.1f} s:")
        print("| threads | read hold µs | update hold µs | hand-off µs (median, mean) | lock busy | updates/s "
              "| gradient µs |")
        print("|---|---|---|---|---|---|---|")
        for i, k in enumerate(cyc["threads"]):
            print(f"| {k} | {1e6 * cyc['read_hold_s'][i]:.1f} | {1e6 * cyc['update_hold_s'][i]:.1f} | "
                  f"{1e6 * cyc['handoff_s'][i]:.1f}, {1e6 * cyc['handoff_mean_s'][i]:.1f} | {cyc['busy'][i]:.2f} | "
                  f"{cyc['updates_per_s'][i]:.0f} | {1e6 * cyc['gradient_s'][i]:.1f} |")
        payload["cycle"] = cyc
    payload["seconds"] = time.perf_counter() - t0
    record.write(args.out, SCHEMA, SCHEMA_VERSION, payload)
    print(f"wrote {args.out} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
