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
change (a job taken in, a departure), one for the first job of each weight submitted ahead (could it end before
the live timer? its speed alone is kept by weight) and one for each entry of its calendar looked at to set its
timer. And the *turns* of the CPUs' rotating pools
(:class:`simasgd.sim.cpu.Rotation`: the spinners of a held lock passing a CPU among themselves), each worked out
by arithmetic: one for each turn taken one by one, one for each spinner a whole-round jump moves on.

The three together are the run's *work*: what the simulator's Python does for a seeded run, whatever the host.
``--scale FILE`` reads a ``sim_scale.py`` record and divides each cell's wall time an attempt by the work an
attempt counted here: whether a unit of work costs more because more workers exist, or the run simulates more.
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

import record
import sim_scale

from simasgd.sim import cpu, memory, sharing

KINDS = ("served", "parts", "early", "stale", "other")


class Tally:
    """What each timer of the sharing servers found, counted while it is installed (:meth:`installed`)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.departures = 0  # parts through, in the timer being counted
        self.finals = 0  # of those, the last part of their transfer (a waiter resumes)
        self.steps = 0  # look-ups of a server's speed
        self.turns = 0  # a rotating pool's turns taken one by one, and spinners moved on by whole rounds

    @contextlib.contextmanager
    def installed(self) -> Iterator[Tally]:
        """The servers' timer, the speed of each server made meanwhile and the transfers' part-done hook
        wrapped to count, until the block ends."""
        complete, part_done = sharing.SharedServer._complete, memory.Transfer.served
        init = sharing.SharedServer.__init__
        check_round, jump = cpu._check_round, cpu.Cores._jump
        tally = self

        def counted_check(rot: cpu.Rotation, th: cpu.Thread, forfeits: int, lifted: bool, gained: float) -> None:
            tally.turns += 1  # called once at the end of each turn taken one by one (Cores._turns)
            check_round(rot, th, forfeits, lifted, gained)

        def counted_jump(cores: cpu.Cores, rq: cpu.RunQueue, rot: cpu.Rotation, rounds: int) -> None:
            tally.turns += len(rot.members)
            jump(cores, rq, rot, rounds)

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
        cpu._check_round = counted_check
        cpu.Cores._jump = counted_jump  # type: ignore[method-assign]
        try:
            yield self
        finally:
            sharing.SharedServer._complete = complete  # type: ignore[method-assign]
            sharing.SharedServer.__init__ = init  # type: ignore[method-assign]
            memory.Transfer.served = part_done  # type: ignore[method-assign]
            cpu._check_round = check_round
            cpu.Cores._jump = jump  # type: ignore[method-assign]


TALLY = Tally()


def cell(algorithm: str, workers: int, machine: str, updates: int) -> dict[str, Any]:
    """One seeded run's events an attempt, by kind."""
    TALLY.counts.clear()
    TALLY.steps = TALLY.turns = 0
    _wall, attempts, events, _passes = sim_scale.timed(algorithm, workers, machine, None, updates)
    timers = sum(TALLY.counts.values())
    row: dict[str, Any] = {"algorithm": algorithm, "workers": workers, "attempts": attempts, "events": events}
    row.update({k: TALLY.counts[k] / attempts for k in KINDS if k != "other"})
    row["other"] = (events - timers) / attempts
    row["total"] = events / attempts
    row["steps"] = TALLY.steps / attempts
    row["turns"] = TALLY.turns / attempts
    row["work"] = row["total"] + row["steps"] + row["turns"]
    return row


def size(algorithm: str, workers: int, machine: str, attempts: int) -> int:
    """``updates`` for about ``attempts`` attempts, from a pilot's attempts an update (a round of sync is one
    update of every worker's gradient, k_async's of k, Lopez et al.'s master's of those it gathered)."""
    _wall, pilot, _events, _passes = sim_scale.timed(algorithm, workers, machine, None, sim_scale.PILOT)
    return max(2, round(attempts * sim_scale.PILOT / max(pilot, 1)))


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| algorithm | workers | events an attempt | " + " | ".join(KINDS)
            + " | server steps an attempt | turns an attempt | work an attempt |")
    lines = [head, "|" + "---|" * (6 + len(KINDS))]
    for r in rows:
        lines.append(f"| {r['algorithm']} | {r['workers']:,} | {r['total']:.2f} | "
                     + " | ".join(f"{r[k]:.2f}" for k in KINDS) + f" | {r['steps']:.2f} | {r['turns']:.2f} "
                     f"| {r['work']:.2f} |")
    return "\n".join(lines)


def per_work(rows: list[dict[str, Any]], scale: dict[str, Any]) -> str:
    """Each counted cell's wall time an attempt in a ``sim_scale.py`` record (``scale``: its data), split into
    the work an attempt and the wall time a unit of work, with the widest cell over the narrowest of each."""
    timed = {(r["algorithm"], r["workers"]): r for r in scale["rows"] if r["network"] is None}
    lines = ["| algorithm | workers | µs an attempt | work an attempt | ns a unit of work |", "|---|---|---|---|---|"]
    ratios = []
    for name in dict.fromkeys(r["algorithm"] for r in rows):
        own = [r for r in rows if r["algorithm"] == name and (name, r["workers"]) in timed]
        for r in own:
            us = timed[(name, r["workers"])]["ms_per_1000"]
            lines.append(f"| {name} | {r['workers']:,} | {us:,.1f} | {r['work']:.2f} | {1e3 * us / r['work']:,.0f} |")
        if len(own) > 1:
            lo, hi = own[0], own[-1]
            t_lo, t_hi = (timed[(name, x["workers"])]["ms_per_1000"] for x in (lo, hi))
            ratios.append(f"| {name} | {t_hi / t_lo:.1f}× | {hi['work'] / lo['work']:.1f}× | "
                          f"{(t_hi / hi['work']) / (t_lo / lo['work']):.2f}× |")
    head = ["| algorithm | wall an attempt, widest / narrowest | work an attempt | wall a unit of work |",
            "|---|---|---|---|"]
    return "\n".join(lines) + "\n\n" + "\n".join(head + ratios)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithms", nargs="*", default=list(sim_scale.SHARED))
    ap.add_argument("--workers", type=int, nargs="+", default=[16, 1024])
    ap.add_argument("--machine", default="xeon-e5-2698-v4")
    ap.add_argument("--attempts", type=int, default=3000, help="about this many attempts a cell")
    ap.add_argument("--scale", type=Path, default=None,
                    help="a sim_scale.py record: its wall time an attempt split into work and wall a unit of work")
    a = ap.parse_args(argv)
    rows = []
    with TALLY.installed():
        for alg in a.algorithms:
            for n in a.workers:
                rows.append(cell(alg, n, a.machine, size(alg, n, a.machine, a.attempts)))
                print(f"{alg} {n}: {rows[-1]['total']:.2f} events an attempt", file=sys.stderr, flush=True)
    print(table(rows))
    if a.scale is not None:
        print()
        print(per_work(rows, record.read(a.scale, sim_scale.SCHEMA, sim_scale.VERSION)))


if __name__ == "__main__":
    main()
