"""Score a committed ``dist_fidelity`` results file offline: its measured runs against the simulator run now.

    python benchmarks/dist_fidelity_rescore.py RESULTS.md --profile P.toml [--network-from-header]
        [--handling-us X | --handling-from ALGORITHM:PROCESSES] [--store-us X | --store-from keuper:2]
        [--wake-from PROFILE | --no-wake] [--dim 4810] [--out TABLE.md]

``RESULTS.md`` holds ``benchmarks/dist_fidelity.py``'s lines (each run's measured updates/s and staleness, the
median time a row spends after its gradient, and each cell's ceiling and KS distance). No device is needed:
each cell's simulated runs (the same seeds, run r = 0, 1, …) are run here on ``--profile``'s ``[network]``, three
ways — as the file's simulator ran them (the model size and ``handling_us`` its ``[network]:`` line names; a line
that names no model size: the digits' 65 parameters without handling — the column checks that the re-run
reproduces the file's simulator), at the measured model's ``--dim`` parameters without handling (``before``),
and with a ``handling_us`` (``after``) — and the last two are judged against the file's measured runs.

- ``--network-from-header`` takes latency, bandwidth and the server's link from the file's ``[network]:`` line
  (the session's own ``calibrate --network``, as printed: rounded) instead of the profile's; the profile's
  all-reduce table stays (a session's is not in its lines).
- ``--handling-us X``: that value. ``--handling-from param_server:2``: derived from that cell's measured round
  trips — the median over its runs of the measured "after the gradient" medians (push, the server's handling,
  reply: exactly a round trip at 2 ranks) — by :func:`handling_from_round_trip`, with the
  server's update as the simulator prices it for that cell (so the simulated round trip at that cell equals the
  measured one by construction: that cell is the calibration, every other cell is held out). Without either, the
  profile's own ``handling_us``.
- ``--store-us X``: ``store_round_trip_us`` in ``after`` (dist's per-step version counter of keuper and
  simuparallel, a round trip to rank 0's store). ``--store-from keuper:2``: from that cell — the median over
  its runs of the measured "after the gradient" medians (the store's round trip, then the merge step) less the
  update as the simulator prices it; an upper bound (the merge step does more than an update), and that cell is
  its calibration. Without either, the profile's own (none in a profile calibrated before it was measured).
- Waking (``[network.server_loop.by_gap]``, :func:`simasgd.sim.network.wake_from_gaps`): in ``after`` the
  profile's own; ``--wake-from PROFILE``: that profile's (another session's timing); ``--no-wake``: none. The
  as-run column takes the profile's where the file's ``[network]:`` line names a wake, else none.

Judged on what the file keeps: updates/s (pooled means: ``fidelity``'s ``updates_per_s_rel_err``, goal 10%),
mean staleness (the runs' τ̄ averaged, goal 5%; the file prints them to two decimals) and the file's KS distance
(the committed simulator's: the file has no staleness histograms, so KS is not recomputed — a re-simulated τ̄
that moves says where it might have changed). The ceiling is the file's. ``--out`` writes the table as
markdown.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # dist_fidelity: the benchmark's scenario and parser

import dist_fidelity as df

from simasgd.sim import network

RUN = re.compile(r"^\| (?P<spec>[^|]+?) \| (?P<p>\d+) \| (?P<run>\d+) \| (?P<sim>[\d.]+) \| (?P<dist>[\d.]+) \| "
                 r"[^|]+\| (?P<simtau>[\d.]+) \| (?P<disttau>[\d.]+) \|")
AFTER = re.compile(r"after the gradient, median: sim (?P<sim>[\d.]+) µs, dist (?P<dist>[\d.]+) µs")
CELL = re.compile(r"^\| (?P<spec>[^|]+?) \| (?P<p>\d+) \| cell \| ceiling (?P<ceiling>[\d.]+|n/a) \| "
                  r"sim meets: (?P<met>yes|no) \|.*KS (?P<ks>[\d.]+) \|")
HEADER = re.compile(r"^\[network\]: latency (?P<lat>[\d.]+) us, (?P<bw>[\d.]+) Gb/s, server (?P<server>[\d.]+) Gb/s")
AS_RUN = re.compile(r"handling (?:not measured|(?P<handling>[\d.]+) us), (?P<wake>wake [^|]*?, )?"
                    r"sim model (?P<dim>\d+) parameters")
UPDATES_GOAL, TAU_GOAL, KS_GOAL = 0.10, 0.05, 0.10  # fidelity.GOALS' three a results file can judge


@dataclass
class Cell:
    """One cell of the file: its measured runs and the committed simulator's."""

    spec: str
    processes: int
    dist: list[float] = field(default_factory=list)       # updates/s, per run
    dist_tau: list[float] = field(default_factory=list)
    sim: list[float] = field(default_factory=list)        # the committed simulator's updates/s
    after_dist_s: list[float] = field(default_factory=list)  # per run: the measured rows' median after the gradient
    ceiling: float | None = None
    ks: float = math.nan
    met: bool = False


@dataclass
class Header:
    """The file's ``[network]:`` line: the session's transport, and how its simulator ran."""

    net: dict[str, float]
    dim: int | None = None              # the simulator's model size (None: the digits' 65 parameters)
    handling_us: float | None = None    # the handling its profile had (None: none)
    woken: bool = False                 # its profile timed waking (``[network.server_loop.by_gap]``)


def parse(text: str) -> tuple[Header | None, list[Cell]]:
    """(the ``[network]:`` line; the cells in file order)."""
    head, cells, by = None, [], {}
    last: Cell | None = None
    for line in text.splitlines():
        if (h := HEADER.match(line)) and head is None:
            head = Header({"latency_us": float(h["lat"]), "bandwidth_gbps": float(h["bw"]),
                           "server_bandwidth_gbps": float(h["server"])})
            if a := AS_RUN.search(line):
                head.dim = int(a["dim"])
                head.handling_us = None if a["handling"] is None else float(a["handling"])
                head.woken = a["wake"] is not None
        elif r := RUN.match(line):
            key = (r["spec"], int(r["p"]))
            if key not in by:
                by[key] = Cell(*key)
                cells.append(by[key])
            last = c = by[key]
            c.dist.append(float(r["dist"]))
            c.dist_tau.append(float(r["disttau"]))
            c.sim.append(float(r["sim"]))
        elif (a := AFTER.search(line)) and last is not None:
            last.after_dist_s.append(float(a["dist"]) * 1e-6)
        elif c_ := CELL.match(line):
            c = by[(c_["spec"], int(c_["p"]))]
            c.ceiling = None if c_["ceiling"] == "n/a" else float(c_["ceiling"])
            c.ks, c.met = float(c_["ks"]), c_["met"] == "yes"
            last = None
    return head, cells


def simulate(cell: Cell, dim: int | None, profile_path: str) -> tuple[float, float]:
    """The cell's simulated runs on the profile at ``profile_path``: (mean updates/s, mean staleness)."""
    from simasgd.runs import backends

    os.environ["SIMASGD_PROFILE"] = profile_path
    name, params = df.parse_algorithm(cell.spec)
    sc = df.scenario(name, cell.processes, dim, True, 400, params)
    rates, taus = [], []
    for run in range(len(cell.dist)):
        s = backends.load("sim").run_once(sc, run).runs[0]
        rates.append(s.updates_per_s)
        taus.append(s.mean_staleness)
    return float(np.mean(rates)), float(np.mean(taus))


def judge(cell: Cell, rate: float, tau: float) -> tuple[float, float, bool]:
    """(updates/s error, τ̄ error, meets the three goals the file can judge) of a simulated (rate, τ̄)."""
    ref, ref_tau = float(np.mean(cell.dist)), float(np.mean(cell.dist_tau))
    err = rate / ref - 1
    tau_err = 0.0 if ref_tau == tau == 0 else (tau - ref_tau) / ref_tau if ref_tau else math.inf
    return err, tau_err, abs(err) <= UPDATES_GOAL and abs(tau_err) <= TAU_GOAL and cell.ks <= KS_GOAL


def handling_from_round_trip(round_trip_s: float, latency_s: float, nbytes: float, bandwidth_Bps: float,
                             update_s: float) -> float:
    """The seconds a rank spends on a message it receives, from a round trip through ``dist``'s parameter-server
    loop at 2 ranks: a push of ``nbytes`` and its reply are two one-way transfers as the network model charges them
    (``latency_s`` + ``nbytes`` / ``bandwidth_Bps``, the slower link's), the server's update ``update_s``, and two
    messages handled — the server's of the push and the worker's of the reply; so half the rest (0 where the
    transfers and the update already take the whole round trip). Not how ``calibrate --network`` takes
    ``handling_us`` (the server's CPU time per push: :func:`simasgd.sim.network.handling_from_cpu`): a cell's
    round trip is what this script can read from a results file."""
    transfers = 2 * (latency_s + nbytes / bandwidth_Bps)
    return max(0.0, (round_trip_s - transfers - update_s) / 2)


def write_profile(base: str, net: dict[str, float] | None, handling_us: float | None,
                  store_us: float | None = None, gaps: dict[str, Any] | None = None) -> str:
    """A copy of the profile at ``base`` with ``net``'s figures in its ``[network]`` and ``handling_us``,
    ``store_round_trip_us`` and ``[network.server_loop.by_gap]`` (what waking costs) set (None: left out); its
    path."""
    from simasgd.machines import profile

    doc = profile.read(base).to_doc()
    table = dict(doc.get("network", {}))
    table.update(net or {})
    for key in ("handling_us", "store_round_trip_us"):
        table.pop(key, None)
    loop = dict(table.get("server_loop") or {})
    loop.pop("by_gap", None)
    if gaps is not None:
        loop["by_gap"] = gaps
    if loop:
        table["server_loop"] = loop
    if handling_us is not None:
        table["handling_us"] = handling_us
    if store_us is not None:
        table["store_round_trip_us"] = store_us
    doc["network"] = table
    fd, path = tempfile.mkstemp(suffix=".toml")
    os.close(fd)
    profile.write(doc, path)
    return path


def _update_s(cell: Cell, dim: int, profile_path: str) -> float:
    """The update of ``dim`` parameters as the simulator prices it for the cell (on the profile at the path)."""
    from simasgd.machines.machine import resolve
    from simasgd.sim.costs import Platform
    from simasgd.sim.primitives import Environment

    os.environ["SIMASGD_PROFILE"] = profile_path
    name, params = df.parse_algorithm(cell.spec)
    sc = df.scenario(name, cell.processes, dim, True, 400, params)
    return Platform(Environment(), sc, resolve(sc.machine), 0, dim=dim).server_update_s()


def store_from(cell: Cell, dim: int, profile_path: str) -> float:
    """``store_round_trip_us`` from a keuper cell's measured "after the gradient" medians (module docstring)."""
    if not cell.after_dist_s:
        raise SystemExit(f"{cell.spec} at {cell.processes}: no 'after the gradient' medians in the file")
    return max(0.0, float(np.median(cell.after_dist_s)) - _update_s(cell, dim, profile_path)) * 1e6


def handling_from(cell: Cell, dim: int, profile_path: str) -> float:
    """``handling_us`` from a 2-rank parameter-server cell's measured round trips (module docstring)."""
    from simasgd.machines.machine import resolve
    from simasgd.sim import network
    from simasgd.sim.costs import Platform
    from simasgd.sim.primitives import Environment

    if not cell.after_dist_s:
        raise SystemExit(f"{cell.spec} at {cell.processes}: no 'after the gradient' medians in the file")
    os.environ["SIMASGD_PROFILE"] = profile_path
    name, params = df.parse_algorithm(cell.spec)
    sc = df.scenario(name, cell.processes, dim, True, 400, params)
    links = network.resolve(sc.network)
    assert links is not None  # preset "this" on a profile with [network]
    update_s = Platform(Environment(), sc, resolve(sc.machine), 0, dim=dim).server_update_s()
    from executors.dist.world import message_buffer

    nbytes = message_buffer(np.float64, dim).nbytes
    rt = float(np.median(cell.after_dist_s))
    slower = min(links.bandwidth_Bps, links.server_bandwidth_Bps)
    return handling_from_round_trip(rt, links.latency_s, nbytes, slower, update_s) * 1e6


def _gaps(path: str) -> dict[str, Any] | None:
    """The profile's ``[network.server_loop.by_gap]`` as a table (None: not timed)."""
    from simasgd.machines import profile

    return ((profile.read(path).to_doc().get("network") or {}).get("server_loop") or {}).get("by_gap")


def cell_named(cells: list[Cell], name: str, results: Path) -> Cell:
    """The cell ``name`` (``algorithm[:params]:processes``, as ``--handling-from`` and ``--store-from`` name it)."""
    spec, _, p = name.rpartition(":")
    src = next((c for c in cells if c.spec == spec and c.processes == int(p)), None)
    if src is None:
        raise SystemExit(f"{results}: no cell {name}")
    return src


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--profile", required=True)
    ap.add_argument("--network-from-header", action="store_true")
    ap.add_argument("--handling-us", type=float, default=None)
    ap.add_argument("--handling-from", default=None, help="ALGORITHM:PROCESSES, e.g. param_server:2")
    ap.add_argument("--store-us", type=float, default=None)
    ap.add_argument("--store-from", default=None, help="ALGORITHM:PROCESSES, e.g. keuper:2")
    ap.add_argument("--wake-from", default=None, metavar="PROFILE", help="another profile's by_gap")
    ap.add_argument("--no-wake", action="store_true")
    ap.add_argument("--dim", type=int, default=4810)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    header, cells = parse(args.results.read_text())
    if args.network_from_header and header is None:
        raise SystemExit(f"{args.results}: no '[network]:' line")
    net = header.net if args.network_from_header and header is not None else None
    plain = write_profile(args.profile, net, None)
    own_gaps = _gaps(args.profile)
    as_run = write_profile(args.profile, net, None if header is None else header.handling_us,
                           gaps=own_gaps if header is not None and header.woken else None)
    as_run_dim = None if header is None else header.dim
    if args.handling_from:
        src = cell_named(cells, args.handling_from, args.results)
        handling = handling_from(src, args.dim, plain)
        how = (f"handling_us {handling:.1f} µs, from {args.handling_from}'s measured round trip "
               f"(median {np.median(src.after_dist_s) * 1e6:.0f} µs; that cell is the calibration)")
    else:
        from simasgd.machines import profile

        own = profile.read(args.profile).network
        given = args.handling_us if args.handling_us is not None else (None if own is None else own.handling_us)
        if given is None:
            raise SystemExit("no handling_us: give --handling-us or --handling-from, or a profile that has it")
        handling = float(given)
        how = f"handling_us {handling:.1f} µs"
    store = args.store_us
    if args.store_from:
        src = cell_named(cells, args.store_from, args.results)
        store = store_from(src, args.dim, plain)
        how += (f"; store_round_trip_us {store:.1f} µs, from {args.store_from}'s after-the-gradient medians "
                f"(median {np.median(src.after_dist_s) * 1e6:.0f} µs; that cell is its calibration)")
    elif store is None:
        from simasgd.machines import profile

        own = profile.read(args.profile).network
        store = None if own is None else own.store_round_trip_us
    if store is not None and not args.store_from:
        how += f"; store_round_trip_us {store:.1f} µs"
    gaps = None if args.no_wake else _gaps(args.wake_from) if args.wake_from else own_gaps
    if gaps is not None:
        w = network.wake_of(gaps)
        how += (f"; wake {w.wake_s * 1e6:.1f} µs past {w.after_s * 1e6:.1f} µs idle "
                f"({args.wake_from or args.profile}'s by_gap)")
    after = write_profile(args.profile, net, handling, store, gaps)
    lines = [f"{args.results.name} on {args.profile}{' (network from the file header)' if net else ''}; {how}", "",
             "| algorithm | processes | dist updates/s (mean) | the file's sim (re-run) | before: sim, sim/dist − 1 | "
             "after: sim, sim/dist − 1 | τ̄ dist / before / after | meets before / after |",
             "|---|---|---|---|---|---|---|---|"]
    met = [0, 0]
    ceiling = 0.0
    for c in cells:
        committed, _ = simulate(c, as_run_dim, as_run)
        b_rate, b_tau = simulate(c, args.dim, plain)
        a_rate, a_tau = simulate(c, args.dim, after)
        b_err, _, b_met = judge(c, b_rate, b_tau)
        a_err, _, a_met = judge(c, a_rate, a_tau)
        met[0] += b_met
        met[1] += a_met
        ceiling += c.ceiling or 0.0
        lines.append(f"| {c.spec} | {c.processes} | {np.mean(c.dist):.0f} | {np.mean(c.sim):.0f} ({committed:.0f}) | "
                     f"{b_rate:.0f}, {b_err:+.0%} | {a_rate:.0f}, {a_err:+.0%} | "
                     f"{np.mean(c.dist_tau):.2f} / {b_tau:.2f} / {a_tau:.2f} | "
                     f"{'yes' if b_met else 'no'} / {'yes' if a_met else 'no'} |")
        print(lines[-1], flush=True)
    lines += ["", f"cells {len(cells)}, ceiling {ceiling:.2f}: met before {met[0]}, after {met[1]} "
              f"({met[0] / ceiling if ceiling else math.nan:.2f} -> {met[1] / ceiling if ceiling else math.nan:.2f} "
              f"of the ceiling)"]
    print("\n".join([lines[0], lines[-1]]))
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")
    for path in (plain, as_run, after):
        os.unlink(path)


if __name__ == "__main__":
    main()
