"""What a model-sized step costs when k cores work on the same θ at once, at the model's own size.

``simasgd calibrate`` measures this as the profile's ``[contention]`` table at 1 MiB
(``executors/calibration/contention.py``: k threads applying θ -= lr·g to one θ; the executors' lock taken to
copy and update θ with k − 1 threads spinning); this runs the same loops at a θ of ``--dim`` float64 (85002:
``many_cores.py``'s MLP, 680 KB), for the many-core entry beside it (benchmarks/fidelity.md):

    .venv/bin/python benchmarks/contention.py --out OUT/contention.json [--threads 1 2 4 8 16] [--dim 85002]
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

from executors.calibration.contention import contention

SCHEMA, SCHEMA_VERSION = "contention", 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--threads", type=int, nargs="*", default=[1, 2, 4, 8, 16])
    p.add_argument("--dim", type=int, default=85002)
    p.add_argument("--passes", type=int, default=200, help="passes a thread a cell")
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
    record.write(args.out, SCHEMA, SCHEMA_VERSION, {"cpus": cpus, "seconds": time.perf_counter() - t0, **table})
    print(f"wrote {args.out} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
