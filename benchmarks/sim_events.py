"""Where a simulated run's events go, per update attempt, as workers grow.

Run: ``.venv/bin/python benchmarks/sim_events.py [--algorithms hogwild sync] [--workers 16 1024]``; it prints
the table that goes in ``benchmarks/README_sim.md``. The same cells as ``sim_scale.py`` (the quickstart
scenario, timing only, the two-socket ``xeon-e5-2698-v4`` preset, k = workers / 4), at a fixed size: the
counts are the seeded run's own, so unlike times they carry no noise of the host.

Each SimPy event of the run is one of:

- a timer of a processor-sharing server (:mod:`simasgd.sim.sharing`: memory bandwidth, the inter-socket
  link) that finds a job through and resumes its waiter (*served*), or finds only parts of transfers whose
  other part is still under way, so that nobody resumes (*parts*);
- a timer that fires before any job is through, because submissions since it was set slowed its job down
  (*early*), or one that a later, sooner departure replaced (*stale*);
- every other event (*other*: the workers' steps, the CPUs' grants, the locks).

Beside the events, the sharing servers' *steps*: each look-up of a server's speed, one each time its sharers
change (a job taken in, a departure), one for each job submitted ahead (could it end before the live timer?)
and one for each entry of its calendar looked at to set its timer.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_scale

from simasgd.sim import memory, sharing

KINDS = ("served", "parts", "early", "stale", "other")


class Tally:
    """What each timer of the sharing servers found, counted while it is installed (:meth:`installed`)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.departures = 0  # parts through, in the timer being counted
        self.finals = 0  # of those, the last part of their transfer (a waiter resumes)
        self.steps = 0  # look-ups of a server's speed

    @contextlib.contextmanager
    def installed(self) -> Iterator[Tally]:
        """The servers' timer, the speed of each server made meanwhile and the transfers' part-done hook
        wrapped to count, until the block ends."""
        complete, part_done = sharing.SharedServer._complete, memory.Transfer.served
        init = sharing.SharedServer.__init__
        tally = self

        def counted_init(server: sharing.SharedServer, env: Any, speed: Any, tol_units: Any) -> None:
            def counted_speed(n: int, weight: float) -> float:
                tally.steps += 1
                return speed(n, weight)

            init(server, env, counted_speed, tol_units)

        def counted_complete(server: sharing.SharedServer, gen: int) -> None:
            if gen != server.generation:
                tally.counts["stale"] += 1
                return complete(server, gen)
            tally.departures = tally.finals = 0
            complete(server, gen)
            kind = "early" if not tally.departures else "served" if tally.finals else "parts"
            tally.counts[kind] += 1

        def counted_part(transfer: memory.Transfer) -> None:
            tally.departures += 1
            tally.finals += transfer.left == 1
            part_done(transfer)

        sharing.SharedServer._complete = counted_complete  # type: ignore[method-assign]
        sharing.SharedServer.__init__ = counted_init  # type: ignore[method-assign]
        memory.Transfer.served = counted_part  # type: ignore[method-assign]
        try:
            yield self
        finally:
            sharing.SharedServer._complete = complete  # type: ignore[method-assign]
            sharing.SharedServer.__init__ = init  # type: ignore[method-assign]
            memory.Transfer.served = part_done  # type: ignore[method-assign]


TALLY = Tally()


def cell(algorithm: str, workers: int, machine: str, updates: int) -> dict[str, Any]:
    """One seeded run's events an attempt, by kind."""
    TALLY.counts.clear()
    TALLY.steps = 0
    _wall, attempts, events = sim_scale.timed(algorithm, workers, machine, None, updates)
    timers = sum(TALLY.counts.values())
    row: dict[str, Any] = {"algorithm": algorithm, "workers": workers, "attempts": attempts, "events": events}
    row.update({k: TALLY.counts[k] / attempts for k in KINDS if k != "other"})
    row["other"] = (events - timers) / attempts
    row["total"] = events / attempts
    row["steps"] = TALLY.steps / attempts
    return row


def size(algorithm: str, workers: int, machine: str, attempts: int) -> int:
    """``updates`` for about ``attempts`` attempts, from a pilot's attempts an update (a round of sync is one
    update of every worker's gradient, k_async's of k, Lopez et al.'s master's of those it gathered)."""
    _wall, pilot, _events = sim_scale.timed(algorithm, workers, machine, None, sim_scale.PILOT)
    return max(2, round(attempts * sim_scale.PILOT / max(pilot, 1)))


def table(rows: list[dict[str, Any]]) -> str:
    head = "| algorithm | workers | events an attempt | " + " | ".join(KINDS) + " | server steps an attempt |"
    lines = [head, "|" + "---|" * (4 + len(KINDS))]
    for r in rows:
        lines.append(f"| {r['algorithm']} | {r['workers']:,} | {r['total']:.2f} | "
                     + " | ".join(f"{r[k]:.2f}" for k in KINDS) + f" | {r['steps']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithms", nargs="*", default=list(sim_scale.SHARED))
    ap.add_argument("--workers", type=int, nargs="+", default=[16, 1024])
    ap.add_argument("--machine", default="xeon-e5-2698-v4")
    ap.add_argument("--attempts", type=int, default=3000, help="about this many attempts a cell")
    a = ap.parse_args(argv)
    rows = []
    with TALLY.installed():
        for alg in a.algorithms:
            for n in a.workers:
                rows.append(cell(alg, n, a.machine, size(alg, n, a.machine, a.attempts)))
                print(f"{alg} {n}: {rows[-1]['total']:.2f} events an attempt", file=sys.stderr, flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
