"""A first look at the simulator against ``dist`` on loopback: updates/s and mean staleness.

    python benchmarks/dist_fidelity.py [--profile P] [--algorithms param_server,easgd,sync] [--processes 2,3,4]
        [--repeats N] [--pin]

Both sides run one scenario: ``[network] preset = "this"`` (the profile's measured ``[network]``,
``simasgd calibrate --network``; measured first into ``--profile`` when that file lacks it), a
deterministic 0.5 ms gradient (``timing.gradient`` for the simulator; for ``dist``, a kernel that
busy-waits 0.5 ms, :func:`half_ms`), a 4810-parameter float64 model (38.5 KB messages), 400 updates,
2–4 processes (``--processes``). It prints one line per cell and run (``--repeats``: runs 0..N-1, each its
own seeds on both sides); ``--pin`` puts rank r on a core of its own (``cpu.pin``, ``workers.placement =
"uma"``: socket 0's physical cores first, the dist backend's own placement), the simulator's workers
alike. It is not the fidelity protocol of the issue (KS, ``fidelity.self_prediction``), which needs a
quiet machine with a core per process.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from numba import njit

from executors import atomics as A
from simasgd.numerics.workloads.constant import G


@njit(nogil=True, cache=True)
def half_ms(theta, X, y, idx, grad_out, shape):  # the kernels' signature
    until = A.now_ns() + 500_000
    while A.now_ns() < until:
        A.cpu_relax()
    for i in range(grad_out.shape[0]):
        grad_out[i] = G
    return 0.0


def scenario(algorithm: str, processes: int, dim: int, pin: bool = False) -> Any:
    from executors.dist.world import SERVED
    from simasgd.spec import loader

    return loader.from_dict({
        "name": "dist-fidelity", "seed": 1,
        "workers": {"count": processes - SERVED.get(algorithm, 1), "placement": "uma" if pin else "os"},
        "machine": {"preset": "xeon-e5-2687w-v2"},  # the simulator's CPU model; the network is measured
        "workload": {"model": "least_squares", "batch_size": 1}, "algorithm": {"name": algorithm},
        "optimizer": {"lr": 1e-6}, "timing": {"gradient": {"dist": "deterministic", "mean_s": 5e-4}},
        "network": {"preset": "this"}, "stop": {"max_updates": 400, "max_time_s": 20.0},
        "cpu": {"pin": pin}})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="profiles/this.toml")
    ap.add_argument("--algorithms", default="param_server,easgd,sync")
    ap.add_argument("--dim", type=int, default=4810)
    ap.add_argument("--processes", default="2,3,4", help="comma-separated process counts (servers included)")
    ap.add_argument("--repeats", type=int, default=1, help="runs a cell, each with its own seeds")
    ap.add_argument("--pin", action="store_true", help="rank r on a core of its own (placement uma)")
    args = ap.parse_args()
    from executors.dist import backend
    from simasgd.machines import profile
    from simasgd.numerics.workloads.constant import ConstWorkload, mean_loss
    from simasgd.runs import backends

    doc = profile.read(args.profile).to_doc() if os.path.isfile(args.profile) else {}
    if "network" not in doc:
        from executors.dist.calibrate_network import calibrate

        doc["network"] = calibrate()
        profile.write(doc, args.profile)
    os.environ["SIMASGD_PROFILE"] = args.profile
    net = doc["network"]
    print(f"[network]: latency {net['latency_us']:.0f} us, {net['bandwidth_gbps']:.1f} Gb/s, server "
          f"{net['server_bandwidth_gbps']:.2f} Gb/s, loadavg {os.getloadavg()[0]:.1f}")
    print("| algorithm | processes | run | sim updates/s | dist updates/s | sim / dist - 1 | sim τ̄ | dist τ̄ "
          "| ranks' CPUs |", flush=True)
    for a in args.algorithms.split(","):
        for p in map(int, args.processes.split(",")):
            sc = scenario(a, p, args.dim, args.pin)
            for run in range(args.repeats):
                sim = backends.load("sim").run_once(sc, run).runs[0]
                real = backend.run_workload(sc, run, ConstWorkload(dim=args.dim, kernel=half_ms,
                                                                   loss_kernel=mean_loss))
                r = real.runs[0]
                cpus = ",".join(map(str, real.metadata["placement"]["cpus"]))
                print(f"| {a} | {p} | {run} | {sim.updates_per_s:.0f} | {r.updates_per_s:.0f} | "
                      f"{sim.updates_per_s / r.updates_per_s - 1:+.0%} | {sim.mean_staleness:.2f} | "
                      f"{r.mean_staleness:.2f} | {cpus} |", flush=True)


if __name__ == "__main__":
    main()
