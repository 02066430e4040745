"""`simasgd run` with its repeats one after another (-j 1) and on a process pool (-j N): wall times.

The command a user types, start-up included (imports, spawn, each worker's first repeat). A control row runs
the same repeats as two bare `-j 1` commands at once, half the repeats each: the parallelism the machine
offers at that moment, which on a shared machine the pool cannot beat. Rounds alternate the rows, so a load
that changes during the benchmark falls on all of them alike; each row reports its median.

    .venv/bin/python benchmarks/repeats_pool.py                     # quickstart, 8 repeats x 20 000 updates
    .venv/bin/python benchmarks/repeats_pool.py --repeats 8 --updates 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIMASGD = [str(Path(sys.executable).with_name("simasgd"))]  # the command a user types


def command(scenario: str, repeats: int, updates: int, jobs: int, out: Path) -> list[str]:
    return [*SIMASGD, "run", scenario, "-s", "sim.numerics=false", "-s", f"stop.max_updates={updates}",
            "-n", str(repeats), "-j", str(jobs), "-o", str(out)]


def timed(cmds: list[list[str]]) -> float:
    """Wall seconds of ``cmds`` started together, until the last one ends (each must succeed)."""
    start = time.perf_counter()
    procs = [subprocess.Popen(c, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for c in cmds]
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"{' '.join(p.args)} failed:\n{err}")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="scenarios/quickstart.toml")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--updates", type=int, default=20_000)
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    half = a.repeats // 2
    rows: dict[str, list[tuple[float, float]]] = {"-j 1": [], f"-j {a.jobs}": [], "control: 2 bare -j 1": []}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        runs = {"-j 1": [command(a.scenario, a.repeats, a.updates, 1, out / "serial")],
                f"-j {a.jobs}": [command(a.scenario, a.repeats, a.updates, a.jobs, out / "pool")],
                "control: 2 bare -j 1": [command(a.scenario, half, a.updates, 1, out / "c1"),
                                         command(a.scenario, a.repeats - half, a.updates, 1, out / "c2")]}
        for _ in range(a.rounds):
            for name, cmds in runs.items():
                load = os.getloadavg()[0]
                rows[name].append((timed(cmds), load))
    base = statistics.median(w for w, _ in rows["-j 1"])
    print(f"{a.scenario}, {a.repeats} repeats x {a.updates} updates (timing only), {a.rounds} rounds, "
          f"{len(os.sched_getaffinity(0))} CPUs\n")
    print("| command | wall [s] (median) | runs [s] | speed-up vs -j 1 | 1-min load at the starts |")
    print("|---|---|---|---|---|")
    for name, got in rows.items():
        med = statistics.median(w for w, _ in got)
        print(f"| {name} | {med:.1f} | {', '.join(f'{w:.1f}' for w, _ in got)} | {base / med:.2f}x | "
              f"{', '.join(f'{x:.1f}' for _, x in got)} |")


if __name__ == "__main__":
    main()
