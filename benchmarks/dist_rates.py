"""Message rate and bytes/s of every ``dist`` algorithm on loopback, beside the transport's own bandwidth.

    python benchmarks/dist_rates.py [--dim 4810] [--updates 400] [--calibrate]

Each (algorithm, process count 2–4) runs once with a workload whose gradient is a constant written
at once (:mod:`simasgd.numerics.workloads.constant`, ``dim`` float64 parameters: 4810 is the Wongpanich MLP,
a 38.5 KB message), so the run is all messages and bookkeeping: the backend's own ceiling. Printed
per cell (the median of ``--repeats`` runs): updates/s, messages/s (point to point; ``sync``'s
all-reduce counted as calls), bytes/s over all ranks, and the busiest rank's bytes in and out per
second against the point-to-point bandwidth ``calibrate --network`` measures (``--calibrate``:
measured first, in the same session).
The table in benchmarks/README_dist.md comes from this script.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from typing import Any

from executors.dist import backend
from executors.dist.world import SERVED
from simasgd.numerics.workloads.constant import ConstWorkload, const_grad, mean_loss
from simasgd.spec import loader

EXTRA: dict[str, dict[str, Any]] = {"backup": {"backup": 1}}


def scenario(algorithm: str, processes: int, updates: int) -> Any:
    servers = SERVED.get(algorithm, 1)
    workers = processes - servers
    return loader.from_dict({
        "name": f"rates-{algorithm}", "seed": 1, "workers": {"count": workers, "placement": "os"},
        "workload": {"model": "least_squares", "batch_size": 1},
        "algorithm": {"name": algorithm, **EXTRA.get(algorithm, {})},
        "optimizer": {"lr": 1e-6}, "stop": {"max_updates": updates, "max_time_s": 20.0, "eval_every_updates": updates},
        "cpu": {"pin": False, "join_timeout_s": 10.0}})


def one(algorithm: str, processes: int, dim: int, updates: int) -> dict[str, Any] | None:
    workers = processes - SERVED.get(algorithm, 1)
    if workers < (2 if algorithm in ("keuper", "backup") else 1):
        return None
    sc = scenario(algorithm, processes, updates)
    r = backend.run_workload(sc, 0, ConstWorkload(dim=dim, kernel=const_grad, loss_kernel=mean_loss))
    run = r.runs[0]
    ranks = r.metadata["ranks"]
    t = run.time_s
    sent = sum(m["bytes_sent"] for m in ranks) + sum(m.get("allreduce_bytes_ring", 0) for m in ranks)
    busiest = max(m["bytes_sent"] + m["bytes_received"] + 2 * m.get("allreduce_bytes_ring", 0) for m in ranks)
    msgs = run.extra["messages"] or run.extra.get("allreduce_calls", 0)
    return {"algorithm": algorithm, "processes": processes, "updates_per_s": run.updates / t,
            "messages_per_s": msgs / t, "MB_per_s": sent / t / 1e6, "busiest_MB_per_s": busiest / t / 1e6,
            "bytes_per_message": run.extra["bytes_per_message"], "collective": "allreduce_calls" in run.extra}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=4810)
    ap.add_argument("--updates", type=int, default=400)
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    link = None
    if args.calibrate:
        from executors.dist.calibrate_network import calibrate

        net = calibrate(quick=False)
        link = net["bandwidth_gbps"] * 1e9 / 8 / 1e6  # MB/s one way
        one_way = [round(x * 1e6, 1) for x in net["p2p"]["one_way_s"]]
        print(f"calibrate --network: latency {net['latency_us']:.1f} us, p2p {net['bandwidth_gbps']:.2f} Gb/s "
              f"({link:.0f} MB/s), server link {net['server_bandwidth_gbps']:.2f} Gb/s, one-way us by bytes "
              f"{dict(zip(net['p2p']['bytes'], one_way, strict=True))}, allreduce {net['allreduce']}, "
              f"server {net['server']}, loadavg {net['loadavg']}")
    print(f"\n{platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} CPUs, "
          f"{time.strftime('%Y-%m-%d')}, loadavg at start {os.getloadavg()[0]:.1f}, dim {args.dim} float64, "
          f"median of {args.repeats} runs\n")
    print("| algorithm | processes | updates/s | messages/s | MB/s (all ranks) | busiest rank MB/s in+out |"
          " bytes/message |" + (" busiest / link |" if link else ""))
    print("|---|---|---|---|---|---|---|" + ("---|" if link else ""))
    for a in ("sync", "param_server", "ssp", "backup", "easgd", "eawild", "keuper", "simuparallel"):
        for p in (2, 3, 4):
            runs = [one(a, p, args.dim, args.updates) for _ in range(args.repeats)]
            if runs[0] is None:
                continue
            row = {k: (sorted(r[k] for r in runs)[len(runs) // 2] if isinstance(runs[0][k], float) else runs[0][k])
                   for k in runs[0]}  # each figure's median over the repeats
            kind = " (all-reduce calls)" if row["collective"] else ""
            print(f"| {a} | {p} | {row['updates_per_s']:.0f} | {row['messages_per_s']:.0f}{kind} | "
                  f"{row['MB_per_s']:.1f} | {row['busiest_MB_per_s']:.1f} | {row['bytes_per_message']:.0f} |"
                  + (f" {row['busiest_MB_per_s'] / (2 * link):.1%} |" if link else ""), flush=True)


if __name__ == "__main__":
    main()
