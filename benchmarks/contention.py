"""What a model-sized step costs when k cores work on the same θ at once, at the model's own size.

``simasgd calibrate`` measures this as the profile's ``[contention]`` table at 1 MiB
(``executors/calibration/contention.py``: k threads applying θ -= lr·g to one θ; the executors' lock taken to
copy and update θ with k − 1 threads spinning); this runs the same loops at a θ of ``--dim`` float64 (85002:
``many_cores.py``'s MLP, 680 KB), for the many-core entry beside it (benchmarks/fidelity.md):

    .venv/bin/python benchmarks/contention.py --out OUT/contention.json [--threads 1 2 4 8 16] [--dim 85002]
        [--beside [--beside-passes 1000]] [--cycle [--cycles 300]] [--layers 64 256 256 10] [--batch 16]
        [--timeshare [--timeshare-threads 1 2 4 8] [--timeshare-s 1] [--timeshare-repeats 5]
         [--timeshare-batch 16 64]] [--held [--held-s 3]] [--sharers [--sharers-rounds 100]]

``--beside`` adds the same two steps with gradients computed beside them (``contention.beside``: k threads
computing that MLP's gradients at their own copies of θ, taking turns at one timed step on the shared θ) and
every gradient's time, the record's ``beside`` table: per k the median and p90 of the update, the lock's
hold (copy and update) and the gradient. ``--cycle`` adds the mutex executor's own cycle on k threads
(``contention.cycle``: the lock's two holds a cycle timed apart, the hand-off between holds, the lock's busy
share, updates/s), the record's ``cycle`` table. ``--timeshare`` adds what a gradient costs when k threads
time-share one CPU (``executors/calibration/timeshare.py``: the CPU time a gradient at k threads a CPU against
one thread, the preemptions a gradient, the CPU time a preemption adds), at each ``--timeshare-batch``, the
record's ``timeshare`` table (a list, one entry a batch size). ``--held`` adds ``[coherence]``'s rows at θ's size
(``executors/calibration/coherence.py``, two threads on the first two CPUs: a step on lines the other core wrote
last, and on lines this core wrote and the other then read, the plain update's and the lock workers' mirrored
update's), the record's ``held`` table: what a many-core host's entry needs where its profile predates
``held_mirrored_gbs``. ``--sharers`` adds the update and the mirrored update of θ's lines right after k − 1 other
cores copied them, for each k (``coherence.shared_by``; k = 1: its own lines), the record's ``sharers`` table:
whether a lock worker's step grows with the caches that hold θ, as the mutex cycle's holds do on 16 cores
(benchmarks/fidelity.md). Schema 3 (2: no ``beside`` table possible; the ``cycle``, ``timeshare``, ``held`` and
``sharers`` tables are optional in 3, as ``beside`` is).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # record

import record

from executors.calibration import coherence, timeshare
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
    p.add_argument("--timeshare", action="store_true", help="also gradients with k threads sharing one CPU")
    p.add_argument("--timeshare-threads", type=int, nargs="+", default=list(timeshare.THREADS))
    p.add_argument("--timeshare-s", type=float, default=1.0, help="wall seconds a k a pass (--timeshare)")
    p.add_argument("--timeshare-repeats", type=int, default=5, help="passes over the ks (--timeshare)")
    p.add_argument("--timeshare-batch", type=int, nargs="+", default=[BATCH, 64], help="batch sizes (--timeshare)")
    p.add_argument("--held", action="store_true", help="also [coherence]'s rows at θ's size, the mirrored update's")
    p.add_argument("--held-s", type=float, default=3.0, help="wall seconds for them (--held)")
    p.add_argument("--sharers", action="store_true", help="also the update of θ's lines held by k − 1 other caches")
    p.add_argument("--sharers-rounds", type=int, default=100, help="timed rounds a k a step (--sharers)")
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
    if args.timeshare:
        payload["timeshare"] = [_timeshare(args, batch) for batch in args.timeshare_batch]
    if args.held:
        payload["held"] = _held(args)
    if args.sharers:
        payload["sharers"] = _sharers(args, table["threads"])
    payload["seconds"] = time.perf_counter() - t0
    record.write(args.out, SCHEMA, SCHEMA_VERSION, payload)
    print(f"wrote {args.out} ({time.perf_counter() - t0:.1f} s)")
    return 0


def _sharers(args: argparse.Namespace, threads: list[int]) -> dict[str, Any]:
    t1 = time.perf_counter()
    table = coherence.shared_by(8 * args.dim, threads, args.sharers_rounds)
    print(f"\nθ's lines in k − 1 other caches too ({table['bytes'] / 1e3:.0f} KB, {args.sharers_rounds} rounds a k a "
          f"step, {time.perf_counter() - t1:.1f} s):")
    print("| threads | update µs | mirrored update µs |")
    print("|---|---|---|")
    for k, u, m in zip(table["threads"], table["update_s"], table["mirrored_s"], strict=True):
        print(f"| {k} | {1e6 * u:.1f} | {1e6 * m:.1f} |")
    return table


# [coherence]'s rows printed as µs a step at θ's size, each with the step whose model-sized streams it moves
HELD_ROWS = (("update_gbs", coherence.UPDATE), ("held_update_gbs", coherence.UPDATE),
             ("held_mirrored_gbs", coherence.MIRRORED))


def _held(args: argparse.Namespace) -> dict[str, Any]:
    t1 = time.perf_counter()
    size = 8 * args.dim
    table = coherence.coherence([size], args.held_s)
    if "reason" in table:
        print(f"\n[coherence] at θ's size: {table['reason']}")
        return table
    steps = ", ".join(f"{key.removesuffix('_gbs')} {coherence.STREAMS[op] * size / (table[key][0] * 1e3):.1f} µs"
                      for key, op in HELD_ROWS)
    print(f"\n[coherence] at θ's size ({size / 1e3:.0f} KB), CPUs {table['cpus']}, {table['rounds']} rounds, "
          f"{time.perf_counter() - t1:.1f} s: {steps}")
    return table


def _timeshare(args: argparse.Namespace, batch: int) -> dict[str, Any]:
    t1 = time.perf_counter()
    ts = timeshare.timeshare(args.timeshare_threads, args.timeshare_s, args.timeshare_repeats, args.layers, batch)
    print(f"\nk threads time-sharing CPU {ts['cpu']}, gradients of the MLP {'-'.join(map(str, ts['layers']))} at "
          f"B = {batch} on their own θ, {ts['repeats']} passes of {ts['window_s']:g} s a k, "
          f"{time.perf_counter() - t1:.1f} s:")
    print("| threads on the CPU | CPU µs a gradient | against 1 thread (median, range) | preemptions a gradient "
          "| CPU µs a preemption adds | CPU busy |")
    print("|---|---|---|---|---|---|")
    for i, k in enumerate(ts["threads"]):
        extra = ts["per_preemption_s"][i]
        print(f"| {k} | {1e6 * ts['cpu_per_gradient_s'][i]:.0f} | {ts['ratio'][i]:.3f} ({ts['ratio_min'][i]:.3f}"
              f"–{ts['ratio_max'][i]:.3f}) | {ts['preemptions_per_gradient'][i]:.3f} | "
              f"{'—' if extra is None else f'{1e6 * extra:.0f}'} | {ts['busy'][i]:.3f} |")
    return ts


if __name__ == "__main__":
    raise SystemExit(main())
