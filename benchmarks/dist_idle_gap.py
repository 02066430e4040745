"""A push's round trip through ``dist``'s parameter server after the worker computed for a while.

    python benchmarks/dist_idle_gap.py [--senders 1 7] [--gaps-us 0 250 550 1000] [--out idle_gap_MACHINE.json]

``calibrate --network`` times the server loop with workers that push again as soon as a reply arrives. A ``dist``
worker computes its gradient first (about 550 µs on the 16-core entry's MLP), so the server's process and the
worker's wait on a socket for that long between messages. This runs the server loop of
:mod:`executors.dist.calibrate_network` (``param_server.serve``, one shard, the ranks pinned as the backend pins
them) with each worker spinning ``gap`` µs on its own CPU before each push, for every N senders and gap, and prints
per cell: the median round trip the workers saw, the pushes a second the server applied, and the server's CPU time
per push. A round trip that grows with the gap while the server's CPU per push does not is time spent waking
from idle (a guest's halted vCPU, the transport thread's wake-up): what the network model's ``handling_us``,
measured at gap 0, leaves out.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # record, beside this file

import record

from executors.dist import calibrate_network as cn

SCHEMA, SCHEMA_VERSION = "idle_gap", 1


def _gapped_loop(rank: int, world: int, dim: int, warm: int, rounds: int, gap_s: float) -> dict[str, Any]:
    """:func:`executors.dist.calibrate_network._queued_loop` with each worker spinning ``gap_s`` before a push."""
    import torch
    import torch.distributed as dist

    from executors.dist import param_server as ps
    from simasgd.spec import loader

    n = world - 1
    first, last = warm * n, (warm + rounds) * n
    sc = loader.from_dict({"name": "idle-gap", "algorithm": {"name": "param_server"},
                           "workers": {"count": n}, "optimizer": {"lr": 1e-9},
                           "stop": {"max_updates": last, "max_time_s": 600.0}})
    me = cn._marked(sc, rank, n, first, last)
    theta = np.zeros(dim)
    cap = (warm + rounds) * n
    times = np.full(cap, np.nan)
    gap_ns = int(gap_s * 1e9)
    dist.barrier()
    if rank == 0:
        ps.serve(me, theta)
    else:
        g = np.full(dim, 1e-3)
        me.send(0, ps.PULL, rank - 1, size=dim)
        _, hdr = me.recv(0, theta, with_payload=(ps.OK,))
        i = k = 0
        while int(hdr[0]) == ps.OK:
            end = time.perf_counter_ns() + gap_ns
            while time.perf_counter_ns() < end:  # the gradient's place: this CPU busy, the server idle
                pass
            t0 = time.perf_counter_ns()
            me.send(0, ps.PUSH, rank - 1, i, payload=g)
            _, hdr = me.recv(0, theta, with_payload=(ps.OK,))
            if int(hdr[0]) != ps.OK:
                break
            if i >= warm and k < cap:
                times[k], k = (time.perf_counter_ns() - t0) * 1e-9, k + 1
            i += 1
    got = [torch.zeros(cap, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(got, torch.from_numpy(times))
    if rank != 0:
        return {}
    (w0, p0, t0), (w1, p1, t1) = me.marks[first], me.marks[last]
    pushes = last - first
    seen = torch.cat(got[1:]).numpy()
    return {"senders": n, "gap_us": gap_s * 1e6, "round_trip_us": float(np.nanmedian(seen)) * 1e6,
            "round_trip_p90_us": float(np.nanpercentile(seen, 90)) * 1e6,
            "messages_per_s": pushes / ((w1 - w0) * 1e-9),
            "cpu_per_message_us": (p1 - p0) * 1e-3 / pushes, "main_cpu_per_message_us": (t1 - t0) * 1e-3 / pushes}


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
            r = cn._spawn(n + 1, _gapped_loop, (cn.LOOP_DIM, a.warm, a.rounds, gap * 1e-6),
                          (cpus, transport_cpus(cpus, allowed)), deadline_s=120)
            rows.append(r)
            print(f"| {n} | {gap:.0f} | {r['round_trip_us']:.0f} ({r['round_trip_p90_us']:.0f}) | "
                  f"{r['messages_per_s']:.0f} | {r['cpu_per_message_us']:.0f} ({r['main_cpu_per_message_us']:.0f}) |",
                  flush=True)
    if a.out is not None:  # a record (benchmarks/record.py): one per machine kind, the earlier ones in git
        record.write(a.out, SCHEMA, SCHEMA_VERSION, {"cpus": len(allowed), "dim": cn.LOOP_DIM, "warm": a.warm,
                                                      "rounds": a.rounds, "rows": rows})


if __name__ == "__main__":
    main()
