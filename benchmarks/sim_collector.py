"""What Python's cyclic collector costs a simulated run, as workers grow: CPython's own thresholds against the
simulator's (:mod:`simasgd.sim.collector`), the same seeded runs alternating in one process.

Run: ``.venv/bin/python benchmarks/sim_collector.py [--algorithms k_sync sync] [--workers 16 1024]``; it prints
the table that goes in ``benchmarks/README_sim.md``. The cells are ``sim_scale.py``'s (the quickstart scenario,
timing only, the two-socket ``xeon-e5-2698-v4`` preset, k = workers / 4), each about ``--attempts`` update
attempts. Each cell runs ``--repeats`` times with either collector in turn; the figures are CPU seconds of the
process (start-up included, the same in both), the median of the repeats, and the share of them spent inside
the collector (its start and stop callbacks) under CPython's thresholds. The runs' rows are the same either
way: the collector frees memory, it decides nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_events
import sim_scale

from simasgd.sim import collector

MACHINE = "xeon-e5-2698-v4"


class _InCollector:
    """CPU seconds spent inside the collector while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds, self._t0 = 0.0, 0.0

    def __call__(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.process_time()
        else:
            self.seconds += time.process_time() - self._t0

    @contextlib.contextmanager
    def installed(self) -> Iterator[_InCollector]:
        self.seconds = 0.0
        gc.callbacks.append(self)
        try:
            yield self
        finally:
            gc.callbacks.remove(self)


@contextlib.contextmanager
def _cpython_thresholds() -> Iterator[None]:
    """Runs under CPython's own collector: the simulator's quiet block made a no-op."""
    quiet = collector.quiet
    collector.quiet = contextlib.nullcontext  # type: ignore[assignment]
    try:
        yield
    finally:
        collector.quiet = quiet


def timed(algorithm: str, workers: int, updates: int, default: bool, spent: _InCollector) -> tuple[float, float]:
    """CPU seconds of one run, and of those the collector's."""
    with _cpython_thresholds() if default else contextlib.nullcontext(), spent.installed():
        c0 = time.process_time()
        sim_scale.timed(algorithm, workers, MACHINE, None, updates)
        return time.process_time() - c0, spent.seconds


def cell(algorithm: str, workers: int, attempts: int, repeats: int) -> dict[str, Any]:
    updates = sim_events.size(algorithm, workers, MACHINE, attempts)
    spent = _InCollector()
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for r in range(repeats):
        for default in ((True, False) if r % 2 == 0 else (False, True)):
            runs[default].append(timed(algorithm, workers, updates, default, spent))
    cpu = {d: statistics.median(c for c, _ in runs[d]) for d in runs}
    return {"algorithm": algorithm, "workers": workers, "updates": updates, "default_s": cpu[True],
            "quiet_s": cpu[False], "ratio": cpu[False] / cpu[True],
            "default_share": statistics.median(g / c for c, g in runs[True]),
            "quiet_share": statistics.median(g / c for c, g in runs[False])}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| algorithm | workers | CPU s, CPython's collector | in the collector | CPU s, the simulator's "
             "| in the collector | simulator's / CPython's |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['algorithm']} | {r['workers']:,} | {r['default_s']:.2f} | {r['default_share']:.0%} "
                     f"| {r['quiet_s']:.2f} | {r['quiet_share']:.0%} | {r['ratio']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithms", nargs="*", default=list(sim_scale.SHARED))
    ap.add_argument("--workers", type=int, nargs="+", default=[16, 1024])
    ap.add_argument("--attempts", type=int, default=5000, help="about this many attempts a cell")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each collector a cell, alternating")
    a = ap.parse_args(argv)
    rows = []
    for alg in a.algorithms:
        for n in a.workers:
            rows.append(cell(alg, n, a.attempts, a.repeats))
            r = rows[-1]
            print(f"{alg} {n}: {r['default_s']:.2f} → {r['quiet_s']:.2f} CPU s", file=sys.stderr, flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
