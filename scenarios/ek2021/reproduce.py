"""Run the Ek 2021 S1 and S3 scenarios on the simulator (timing-only) and print markdown tables.

    .venv/bin/python scenarios/ek2021/reproduce.py [s1|s3|s3-leashed ...]

Each grid cell is one simulated run (run 0, the file's seed); warm-up (first
10 % of versions) discarded. Columns: simulated updates/s, mean / median /
90th-percentile staleness, the share of updates with τ = m − 1, the mean
staleness of workers on socket 0 and socket 1, and the dropped share.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from simasgd.machines.machine import place, resolve
from simasgd.sim import backend
from simasgd.spec import loader
from simasgd.sweep.grid import cells, from_table

HERE = Path(__file__).resolve().parent
FILES = {"s1": "s1_uma_numa.toml", "s3": "s3_staleness_batch.toml", "s3-leashed": "s3_leashed.toml"}
HEADER = ("| algorithm | placement | m | B | persistence | updates/s | mean τ | median τ | p90 τ | "
          "P(τ=m−1) | mean τ socket 0 | mean τ socket 1 | dropped |\n|" + "---|" * 13)


def row(path: Path, overrides: list[str]) -> str:
    sc = loader.load(path, overrides)
    r = backend.run_once(sc, 0)
    u = r.updates
    u = u[u.version > 0.1 * u.version.max()]
    ok = u[u.applied]
    tau = ok.staleness.to_numpy()
    m = sc.workers.count
    machine = resolve(sc.machine)
    spread = place(machine, m, "numa")
    sockets = np.array([machine.socket_of(c if c is not None else s)
                        for c, s in zip(place(machine, m, sc.workers.placement), spread, strict=False)])
    sock = sockets[ok.worker.to_numpy()]
    per_socket = [f"{tau[sock == s].mean():.2f}" if (sock == s).any() else "—" for s in (0, 1)]
    pers = sc.algorithm.persistence if sc.algorithm.name == "leashed" else None
    pers_s = "—" if pers is None else ("∞" if pers == float("inf") else str(int(pers)))
    span = ok.t_write.max() - ok.t_write.min()
    return (f"| {sc.algorithm.name} | {sc.workers.placement} | {m} | {sc.workload.batch_size} | {pers_s} | "
            f"{(len(ok) - 1) / span:,.0f} | {tau.mean():.2f} | {np.median(tau):.0f} | "
            f"{np.quantile(tau, 0.9):.0f} | {np.mean(tau == m - 1):.2f} | {per_socket[0]} | {per_socket[1]} | "
            f"{(~u.applied).mean():.3f} |")


def main(which: list[str]) -> None:
    for key in which or list(FILES):
        path = HERE / FILES[key]
        data = loader.read_toml(path)
        print(f"\n### {key} ({FILES[key]})\n\n{HEADER}")
        for cell in cells(from_table(data.get("sweep", {}).get("grid", {}))):
            print(row(path, cell.overrides()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
