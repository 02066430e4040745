"""A push's round trip through ``dist``'s parameter server after the worker computed for a while.

    python benchmarks/dist_idle_gap.py [--senders 1 7] [--gaps-us 0 250 550 1000] [--out idle_gap_MACHINE.json]

``calibrate --network`` times the server loop with workers that push again as soon as a reply arrives. A ``dist``
worker computes its gradient first (about 550 µs on the 16-core entry's MLP), so the server's process and the
worker's wait on a socket for that long between messages. This runs the server loop of
:mod:`executors.dist.calibrate_network` (``param_server.serve``, one shard, the ranks pinned as the backend pins
them) with each worker spinning ``gap`` µs on its own CPU before each push, for every N senders and gap, and prints
per cell: the median round trip the workers saw, the pushes a second the server applied, and the server's CPU time
per push. A round trip that grows with the gap is time spent waking from idle (a guest's halted vCPU, cold
caches, the transport thread's wake-up). ``calibrate --network`` times the 1-sender rows itself
(``[network.server_loop.by_gap]``) and the simulator adds the wake they give to a message a rank takes after
idling (:func:`simasgd.sim.network.wake_from_gaps`); this sweep adds more senders and gaps.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # record, beside this file

import record

from executors.dist import calibrate_network as cn

SCHEMA, SCHEMA_VERSION = "idle_gap", 1


def gapped(n: int, gap_us: float, warm: int, rounds: int, cpus: list[int | None], transport: list[int]
           ) -> dict[str, Any]:
    """One cell: :func:`executors.dist.calibrate_network._queued_loop` with n workers spinning ``gap_us`` before a
    push, the ranks pinned; its figures in µs."""
    r = cn._spawn(n + 1, cn._queued_loop, (cn.LOOP_DIM, warm, rounds, gap_us * 1e-6), (cpus, transport),
                  deadline_s=120)
    return {"senders": n, "gap_us": gap_us, "round_trip_us": r["round_trip_s"] * 1e6,
            "round_trip_p90_us": r["round_trip_p90_s"] * 1e6, "messages_per_s": r["messages_per_s"],
            "cpu_per_message_us": r["cpu_per_message_s"] * 1e6,
            "main_cpu_per_message_us": r["main_cpu_per_message_s"] * 1e6}


def main() -> None:
    from executors.cpu import placement
    from executors.dist.backend import transport_cpus

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--senders", type=int, nargs="+", default=[1, 7])
    ap.add_argument("--gaps-us", type=float, nargs="+", default=[0, 250, 550, 1000])
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    rows = []
    print("| senders | gap µs | round trip µs (p90) | pushes/s | server CPU µs a push (main thread) |")
    for n in [n for n in a.senders if n + 1 <= len(allowed)]:
        cpus, _ = placement.plan(n + 1, "uma")
        for gap in a.gaps_us:
            r = gapped(n, gap, a.warm, a.rounds, cpus, transport_cpus(cpus, allowed))
            rows.append(r)
            print(f"| {n} | {gap:.0f} | {r['round_trip_us']:.0f} ({r['round_trip_p90_us']:.0f}) | "
                  f"{r['messages_per_s']:.0f} | {r['cpu_per_message_us']:.0f} ({r['main_cpu_per_message_us']:.0f}) |",
                  flush=True)
    if a.out is not None:  # a record (benchmarks/record.py): one per machine kind, the earlier ones in git
        record.write(a.out, SCHEMA, SCHEMA_VERSION, {"cpus": len(allowed), "dim": cn.LOOP_DIM, "warm": a.warm,
                                                      "rounds": a.rounds, "rows": rows})


if __name__ == "__main__":
    main()
