"""The simulator's cost per update attempt as workers grow: every algorithm at 16 … 1,024 workers.

Run: ``.venv/bin/python benchmarks/sim_scale.py [--workers 16 64 256 1024] [--budget 20]``; it prints the
table that goes in ``benchmarks/README_sim.md`` and writes ``results/sim_scale_<machine>.json``.

A cell is the quickstart scenario (the 64-32-10 MLP on digits, B = 16), timing only
(``sim.numerics = false``), one run of the ``sim`` backend:

- shared-memory algorithms on the two-socket 40-core preset (``--machine``, default ``xeon-e5-2698-v4``),
  placement ``os``; k_sync with k = workers / 4;
- algorithms over a network (``--network-algorithms``) on ``--network-machine`` (default ``cluster-1024``:
  1,024 nodes of one core each) with ``[network] preset = --network`` (default ``100g_ib``).

Beside it, the events each attempt costs and the wall time each event costs (SimPy events scheduled:
``Environment.scheduled``, marginal the same way): the first says how much more a wider run
simulates, the second whether an event costs more because more workers exist. And the passes an attempt: an
attempt's tries at publishing its update (1, and one more for each failed CAS it retried: Leashed-SGD builds a
whole new vector at every try), with the wall time a pass costs, so that the work the algorithm itself does more
of at scale is told from what each piece of it costs the simulator.

The figure is wall milliseconds per 1,000 update attempts (rows of ``updates.parquet``: gradients computed,
dropped ones included), marginal: each cell runs twice, a short pilot and a long run, and the cost is
(t_long − t_pilot) / (attempts_long − attempts_pilot), so the start-up (the workload, the processes, the
profile) is not counted. The long run is grown until it takes ``--budget`` seconds more than the pilot. The
ratio column is the widest cell over the narrowest-worker cell of the same algorithm: the goal is ≤ 2.
Ratios come from one run of this script; absolute times depend on the host and its load.

``--repeats R`` times every cell R times at the size its first pass found, the worker counts of an algorithm
one after another, in turn forwards and backwards, so that the two cells of a ratio are timed minutes
apart at most and a drift of the host's speed weighs on both alike. A cell's figure is its median; the
ratio is the median of the ratios of the same repeat, beside their range, and a cell whose repeats spread
by more than ``UNSTABLE`` of their median is reported as unstable (pyperf's warning).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record

from simasgd.sim import backend, primitives
from simasgd.sim.backend import run_once
from simasgd.spec import algorithms, loader

SCHEMA, VERSION = "sim_scale", 4
PILOT = 10  # updates of the short run whose time is subtracted
UNSTABLE = 0.2  # a cell whose repeats' range exceeds this share of their median is unstable
SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.toml"
SHARED = ("mutex", "rwlock", "ssp", "k_sync", "k_async", "leashed", "sync", "backup", "lopez", "hogwild",
          "keuper", "simuparallel")
OVER_NETWORK = ("param_server", "easgd", "eawild", "sync", "backup", "keuper", "simuparallel")


def overrides(algorithm: str, workers: int, machine: str, network: str | None, updates: int) -> list[str]:
    ov = ["sim.numerics=false", f"workers.count={workers}", f"algorithm.name={algorithm}",
          f'machine.preset="{machine}"', f"stop.max_updates={updates}", "stop.max_time_s=1e9", "repeats=1",
          f"stop.eval_every_updates={max(1, updates)}"]
    if algorithm in ("k_sync", "k_async"):
        ov.append(f"algorithm.k={max(1, workers // 4)}")
    if network is not None:
        ov.append(f'network.preset="{network}"')
    return ov


class _Seen(primitives.Environment):
    """The simulator's environment, the last one made kept: it counts the events its run scheduled."""

    last: primitives.Environment | None = None

    def __init__(self) -> None:
        super().__init__()
        _Seen.last = self


backend.Environment = _Seen  # type: ignore[misc,assignment]  # the runs below make theirs through this name


def timed(algorithm: str, workers: int, machine: str, network: str | None,
          updates: int) -> tuple[float, int, int, int]:
    """Wall seconds, update attempts, SimPy events and passes (attempts and their CAS retries) of one run."""
    sc = loader.load(SCENARIO, overrides(algorithm, workers, machine, network, updates))
    t0 = time.perf_counter()
    result = run_once(sc, 0)
    wall = time.perf_counter() - t0
    assert _Seen.last is not None  # the run made one
    passes = int(result.runs[0].attempts) + int(result.updates["retries"].sum())
    return wall, int(result.runs[0].attempts), _Seen.last.scheduled(), passes


def cell(algorithm: str, workers: int, machine: str, network: str | None, budget: float) -> dict[str, Any]:
    """Marginal wall ms per 1,000 attempts (pilot subtracted), with the attempts it was measured over."""
    pilot = _pilot(algorithm, workers, machine, network)
    t_pilot = pilot[0]
    updates = 2 * PILOT
    for _ in range(8):  # grow the run until it is ``budget`` seconds longer than the pilot
        long = timed(algorithm, workers, machine, network, updates)
        t_long = long[0]
        extra = t_long - t_pilot
        if extra >= budget or updates >= 400_000:
            break
        if extra < 0.2 * budget:
            updates *= 4  # too short to size from: start-up noise could dominate the difference
        else:
            updates = PILOT + int(1.3 * (updates - PILOT) * budget / extra)
    return {"algorithm": algorithm, "workers": workers, "machine": machine, "network": network,
            "updates": updates, **_marginal(pilot, long)}


def again(row: dict[str, Any]) -> dict[str, Any]:
    """``row``'s cell timed once more at the size its first pass found."""
    args = (row["algorithm"], row["workers"], row["machine"], row["network"])
    return _marginal(_pilot(*args), timed(*args, row["updates"]))


def _pilot(algorithm: str, workers: int, machine: str, network: str | None) -> tuple[float, int, int, int]:
    # the least of two pilots: the first run of a process also pays its imports and caches
    (t, a, e, p), (t_again, *_) = (timed(algorithm, workers, machine, network, PILOT) for _ in range(2))
    return min(t, t_again), a, e, p


def _marginal(pilot: tuple[float, int, int, int], long: tuple[float, int, int, int]) -> dict[str, Any]:
    (t_pilot, a_pilot, e_pilot, p_pilot), (t_long, a_long, e_long, p_long) = pilot, long
    more, events, passes = a_long - a_pilot, e_long - e_pilot, p_long - p_pilot
    return {"attempts": a_long, "wall_s": t_long,
            "ms_per_1000": 1e6 * (t_long - t_pilot) / more if more > 0 else math.nan,
            "events_per_attempt": events / more if more > 0 else math.nan,
            "us_per_event": 1e6 * (t_long - t_pilot) / events if events > 0 else math.nan,
            "passes_per_attempt": passes / more if more > 0 else math.nan,
            "ms_per_1000_passes": 1e6 * (t_long - t_pilot) / passes if passes > 0 else math.nan}


def repeat(group: list[dict[str, Any]], repeats: int) -> None:
    """Time the cells of one algorithm ``repeats`` times in all, in turn backwards and forwards; each row
    keeps its samples and takes their median."""
    for row in group:
        row["samples"] = [{k: row[k] for k in ("ms_per_1000", "events_per_attempt", "us_per_event",
                                               "passes_per_attempt", "ms_per_1000_passes")}]
    for r in range(1, repeats):
        for row in (reversed(group) if r % 2 else group):
            row["samples"].append({k: v for k, v in again(row).items() if k in row["samples"][0]})
    for row in group:
        summarize(row)


def summarize(row: dict[str, Any]) -> None:
    """A repeated cell's figures: its samples' medians, their spread, and whether that makes it unstable."""
    for k in row["samples"][0]:
        row[k] = statistics.median(s[k] for s in row["samples"])
    ms = [s["ms_per_1000"] for s in row["samples"]]
    row["spread"] = (max(ms) - min(ms)) / row["ms_per_1000"] if row["ms_per_1000"] > 0 else math.nan
    row["unstable"] = bool(row["spread"] > UNSTABLE)


def ratios(first: dict[str, Any], last: dict[str, Any]) -> list[float]:
    """The widest cell over the narrowest, repeat by repeat (one ratio without repeats)."""
    a, b = first.get("samples"), last.get("samples")
    if not a or not b:
        return [last["ms_per_1000"] / first["ms_per_1000"]]
    return [y["ms_per_1000"] / x["ms_per_1000"] for x, y in zip(a, b, strict=True)]


def table(rows: list[dict[str, Any]], workers: list[int]) -> str:
    lo, hi = f"{workers[0]:,}", f"{workers[-1]:,}"
    head = ("| algorithm | " + " | ".join(f"{n:,} workers" for n in workers) + f" | {hi} / {lo} "
            f"| events an attempt, {lo} → {hi} | µs an event, {lo} → {hi} | passes an attempt, {lo} → {hi} "
            f"| ms a 1,000 passes, {lo} → {hi} |")
    lines = [head, "|---" * (len(workers) + 6) + "|"]
    for name in dict.fromkeys(r["algorithm"] for r in rows):
        of = {r["workers"]: r for r in rows if r["algorithm"] == name}
        cells = [f"{of[n]['ms_per_1000']:,.1f} ms" + ("†" if of[n].get("unstable") else "") if n in of else "—"
                 for n in workers]
        first, last = of.get(workers[0]), of.get(workers[-1])
        if first and last:
            each = ratios(first, last)
            ratio = f"{statistics.median(each):.1f}×"
            if len(each) > 1:
                ratio += f" ({min(each):.1f}–{max(each):.1f})"
            events = f"{first['events_per_attempt']:.1f} → {last['events_per_attempt']:.1f}"
            cost = f"{first['us_per_event']:.1f} → {last['us_per_event']:.1f}"
            passes = f"{first['passes_per_attempt']:.1f} → {last['passes_per_attempt']:.1f}"
            per_pass = f"{first['ms_per_1000_passes']:,.1f} → {last['ms_per_1000_passes']:,.1f}"
        else:
            ratio = events = cost = passes = per_pass = "—"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {ratio} | {events} | {cost} | {passes} | {per_pass} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[16, 64, 256, 1024])
    ap.add_argument("--algorithms", nargs="*", default=list(SHARED))
    ap.add_argument("--network-algorithms", nargs="*", default=list(OVER_NETWORK))
    ap.add_argument("--machine", default="xeon-e5-2698-v4")
    ap.add_argument("--network-machine", default="cluster-1024")
    ap.add_argument("--network", default="100g_ib")
    ap.add_argument("--budget", type=float, default=20.0, help="about this many wall seconds a cell's long run")
    ap.add_argument("--repeats", type=int, default=1, help="time each cell this many times (median; see above)")
    ap.add_argument("--out", type=Path, default=None, help="record file (default results/sim_scale_<machine>.json)")
    args = ap.parse_args()
    commit = record.commit()  # the code that runs is the code of the start, whatever is committed meanwhile
    sections = [(args.algorithms, args.machine, None), (args.network_algorithms, args.network_machine, args.network)]
    rows: list[dict[str, Any]] = []
    for names, machine, network in sections:
        for name in names:
            d = algorithms.ALGORITHMS[name]
            group = []
            for n in args.workers:
                if n < d.min_workers or (d.max_workers is not None and n > d.max_workers):
                    continue
                r = cell(name, n, machine, network, args.budget)
                group.append(r)
                where = machine + (f" + {network}" if network else "")
                print(f"{name:13s} {n:5d} workers on {where}: {r['ms_per_1000']:10.1f} ms / 1,000 attempts "
                      f"({r['attempts']:,} attempts, {r['wall_s']:.1f} s)", file=sys.stderr, flush=True)
            if args.repeats > 1:
                repeat(group, args.repeats)
                for r in group:
                    if r["unstable"]:
                        print(f"WARNING: {name} at {r['workers']} workers is unstable: its {args.repeats} timings "
                              f"spread by {r['spread']:.0%} of their median", file=sys.stderr, flush=True)
            rows.extend(group)
    for names, machine, network in sections:
        part = [r for r in rows if r["machine"] == machine and r["network"] == network and r["algorithm"] in names]
        if part:
            print(f"\n{machine}" + (f", [network] preset = {network!r}" if network else ", shared memory") + "\n")
            print(table(part, args.workers))
    out = args.out or record.current_path(SCHEMA)
    record.write(out, SCHEMA, VERSION, {"workers": args.workers, "budget_s": args.budget, "repeats": args.repeats,
                                        "rows": rows}, commit_=commit)
    print(f"\nrecord: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
