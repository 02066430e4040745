"""Where a 2-thread cycle's time goes in each placement of the two CPUs the host gives this VM.

Run: ``.venv/bin/python benchmarks/placement_phases.py [--batch 16] [--dtype float64] [--runs 25]
[--algorithms hogwild,mutex] [--seconds 1]``

Each run of each algorithm (the cpu backend, 2 threads pinned ``uma``, issue 14's MLP,
``benchmarks/cpu_throughput.scenario``) sits between two core-to-core probes (executors/c2c.py) and
prints its updates/s, its gradient concurrency and the median of each phase of a cycle (µs). The host
moves the two vCPUs by itself every few seconds to minutes, so a few dozen runs usually catch both
placements; the summary groups the runs whose two probes agree by placement (one CCX, two CCXs, one
core's two hardware threads: benchmarks/README_cpu.md, "the bimodal rounds").
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

PHASES = ("read", "gradient", "update")


def one(alg: str, batch: int, dtype: str, seconds: float) -> dict[str, Any]:
    import cpu_throughput

    from executors import c2c

    row = c2c.measured(functools.partial(cpu_throughput.ours, alg, 2, batch, seconds, dtype), tries=1)
    return {"c2c_ns": [None, None], **row, "algorithm": alg}  # no probes with one usable CPU


def placement(ns: list[float | None]) -> str | None:
    """The runs' placement by their two probes, None when they disagree (the host moved the CPUs during
    the run) or are missing. Bands from benchmarks/README_cpu.md's 2-vCPU EPYC: 14-17 ns one core, 31-37 one
    CCX, 150-190 two CCXs; another machine prints its own latencies in the run lines."""
    from executors.c2c import same_mode

    if None in ns or not same_mode(ns[0], ns[1]):
        return None
    mid = statistics.mean(ns)
    return "one core (SMT)" if mid < 24 else "one CCX" if mid < 80 else "two CCXs"


def summary(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| algorithm | placement | runs | updates/s | gradients at once | read µs | gradient µs | update µs |",
           "|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["algorithm"], placement(r["c2c_ns"])) for r in rows}, key=lambda k: (k[0], str(k[1])))
    for alg, where in keys:
        if where is None:
            continue
        part = [r for r in rows if r["algorithm"] == alg and placement(r["c2c_ns"]) == where]

        def med(key: str) -> float:
            return statistics.median(r[key] for r in part)

        out.append(f"| {alg} | {where} | {len(part)} | {med('updates_per_s'):.0f} | {med('concurrency'):.2f} | "
                   + " | ".join(f"{med(p + '_us'):.0f}" for p in PHASES) + " |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--runs", type=int, default=25)
    ap.add_argument("--algorithms", default="hogwild,mutex")
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    rows = []
    for k in range(args.runs):
        for alg in args.algorithms.split(","):
            r = one(alg, args.batch, args.dtype, args.seconds)
            rows.append(r)
            ns = ", ".join("—" if x is None else f"{x:.0f}" for x in r["c2c_ns"])
            print(f"{k} {alg:8s} {r['updates_per_s']:6.0f} updates/s, gradients at once {r['concurrency']:.2f}, "
                  f"hand-off {ns} ns, " + " ".join(f"{p} {r[p + '_us']:.0f}" for p in PHASES) + " µs", flush=True)
    print()
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
