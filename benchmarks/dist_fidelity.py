"""The simulator against ``dist`` on loopback, cell by cell: updates/s, staleness, and the ceiling of each cell.

    python benchmarks/dist_fidelity.py [--profile P] [--algorithms A,...|all] [--processes 2,4,8] [--repeats 3]
        [--pin] [--updates 400] [--warmup 1] [--out DIR]

Both sides run one scenario a cell: ``[network] preset = "this"`` (the profile's measured ``[network]``,
``simasgd calibrate --network``; measured first into ``--profile`` when that file lacks it), a deterministic
0.5 ms gradient (``timing.gradient`` for the simulator; for ``dist``, a kernel that busy-waits 0.5 ms,
:func:`half_ms`), a ``--dim``-parameter float64 model (4810: 38.5 KB messages; the simulator's is a least-squares
model of that many parameters, :func:`sim_workload`, so that its messages and updates are that size),
``--updates`` updates, at each process
count of ``--processes`` (servers included: ``param_server:shards=2`` has two, easgd and eawild a centre,
sync and keuper none; a cell with fewer workers than its algorithm needs is skipped, and said so). The
algorithms (``--algorithms``: registry names with ``:key=value`` parameters; default param_server, easgd and
sync) or ``all``: :data:`ALL`, every algorithm the goal names (param_server with 1 and 2 shards, easgd,
eawild, keuper, sync).

Each cell runs ``--repeats`` runs on each side (run r: its own seeds, the same on both), after ``--warmup``
untimed ``dist`` runs of 50 updates (the first runs of a process count started slow, benchmarks/README_dist.md).
It prints one line per run, then the cell: the ceiling — ``fidelity.self_prediction`` of the measured runs,
the share of them that, each taken as the prediction of the others, meets every goal of ``fidelity.GOALS``
(what a simulator that ran exactly like this machine would meet) — and whether the simulator's runs, pooled,
meet every goal against the measured runs pooled (``fidelity.meets``, the rule ``simasgd corpus score``
judges a cell by). The last lines sum them: cells met / the ceiling's sum, the issue's fraction (≥ 0.9 is the
goal). ``--pin`` puts rank r's main thread on a core of its own (``cpu.pin``, ``workers.placement = "uma"``,
the servers first) and gloo's threads on the CPUs no rank computes on (``executors.dist.backend.transport_cpus``),
the simulator's workers alike; each run's table row ends with the ranks' CPUs. ``--out DIR`` keeps every
cell's two results folders (``DIR/<algorithm>-<processes>/{sim,dist}``).

Under each run's row an indented line gives the transport threads' CPUs and the median time a row spends
after its gradient, on each side (an exchange, an all-reduce; for param_server the measured row ends when
the reply reaches the worker, the simulated one when the server applies the push): where the two differ,
that is the part of the cycle the network model gets wrong; then the measured gradient's median (the 0.5 ms
kernel and the Python around it) and when the first update was written (a run's start-up: its first pull and
first gradient in fresh processes), both in the measured updates/s and neither in the simulated.

``benchmarks/dist_fidelity_rescore.py`` scores a committed results file (these lines) against a profile offline.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from simasgd.numerics.workloads.constant import G

ALGORITHMS = "param_server,easgd,sync"
ALL = "param_server,param_server:shards=2,easgd,eawild,keuper,sync"  # --algorithms all: the goal's cells
WARMUP_UPDATES = 50


@njit(nogil=True, cache=True)
def half_ms(theta, X, y, idx, grad_out, shape):  # the kernels' signature
    until = A.now_ns() + 500_000
    while A.now_ns() < until:
        A.cpu_relax()
    for i in range(grad_out.shape[0]):
        grad_out[i] = G
    return 0.0


def parse_algorithm(spec: str) -> tuple[str, dict[str, Any]]:
    """``name[:key=value[:key=value...]]`` -> (name, parameters); each value read as ``-s`` reads one (a TOML
    value, else the text)."""
    from simasgd.spec.loader import parse_value

    name, *kvs = spec.split(":")
    params: dict[str, Any] = {}
    for kv in kvs:
        k, _, v = kv.partition("=")
        params[k] = parse_value(v)
    return name, params


def servers(name: str, params: dict[str, Any]) -> int:
    from executors.dist.world import SERVED

    return int(params.get("shards", 1)) if name == "param_server" else SERVED.get(name, 1)


def sim_workload(dim: int | None) -> dict[str, Any]:
    """The simulator's workload: least squares on synthetic rows of ``dim − 1`` features (``dim`` parameters with
    the bias: its messages and updates are the measured model's size; 64 rows, enough for a batch of 1); None:
    least squares on the digits (65 parameters, 520-byte messages), what a results file whose ``[network]:``
    line names no model size was simulated with (``dist_fidelity_rescore.py`` re-runs it so)."""
    base = {"model": "least_squares", "batch_size": 1}
    return base if dim is None else base | {"dataset": "synthetic", "features": dim - 1, "samples": 64}


def scenario(algorithm: str, processes: int, dim: int | None, pin: bool = False, updates: int = 400,
             params: dict[str, Any] | None = None) -> Any:
    from simasgd.spec import loader

    params = params or {}
    return loader.from_dict({
        "name": "dist-fidelity", "seed": 1,
        "workers": {"count": processes - servers(algorithm, params), "placement": "uma" if pin else "os"},
        "machine": {"preset": "xeon-e5-2687w-v2"},  # the simulator's CPU model; the network is measured
        "workload": sim_workload(dim), "algorithm": {"name": algorithm, **params},
        "optimizer": {"lr": 1e-6}, "timing": {"gradient": {"dist": "deterministic", "mean_s": 5e-4}},
        "network": {"preset": "this"}, "stop": {"max_updates": updates, "max_time_s": 20.0},
        "cpu": {"pin": pin}})


def too_few_workers(algorithm: str, params: dict[str, Any], processes: int) -> str | None:
    from simasgd.spec import algorithms

    workers = processes - servers(algorithm, params)
    need = max(1, algorithms.ALGORITHMS[algorithm].min_workers)
    return None if workers >= need else f"{workers} workers, {algorithm} needs {need}"


def outside_gradient_s(r: Any) -> float:
    """The median time a row spends between its gradient's end and its write (NaN where not recorded)."""
    u = r.updates
    d = (u["t_write"] - u["t_grad_end"]).to_numpy(float)
    d = d[np.isfinite(d)]
    return float(np.median(d)) if len(d) else math.nan


def gradient_s(r: Any) -> float:
    """The median of a run's gradients (``t_grad_end − t_grad_start``; NaN where not recorded)."""
    u = r.updates
    d = (u["t_grad_end"] - u["t_grad_start"]).to_numpy(float)
    d = d[np.isfinite(d)]
    return float(np.median(d)) if len(d) else math.nan


def first_write_s(r: Any) -> float:
    """When a run's first update was written, from its start (NaN without rows)."""
    t = r.updates["t_write"].to_numpy(float)
    return float(np.nanmin(t)) if len(t) else math.nan


def judge(sim: Any, real: Any, repeats: int) -> tuple[float | None, bool, dict[str, float]]:
    """(the ceiling: self-prediction of the measured runs; the simulator meets every goal; the point metrics)."""
    from simasgd.evaluation import fidelity

    pm = fidelity.point_metrics(*fidelity.run_stats(sim), *fidelity.run_stats(real))
    met = bool(fidelity.meets({k: np.array([pm[k]]) for k in fidelity.GOALS})[0])
    return fidelity.self_prediction(real, repeats), met, pm


def wake_words(net: dict[str, Any]) -> str:
    """The header's words on waking (``[network.server_loop.by_gap]``), or none where it was not timed."""
    from simasgd.sim.network import wake_of

    gaps = (net.get("server_loop") or {}).get("by_gap")
    if gaps is None:
        return ""
    w = wake_of(gaps)
    return f"wake {w.wake_s * 1e6:.1f} us past {w.after_s * 1e6:.1f} us idle over {len(gaps['gap_s']) - 1} gaps, "


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="profiles/this.toml")
    ap.add_argument("--algorithms", default=ALGORITHMS, help=f"comma-separated, name[:key=value...]; all: {ALL}")
    ap.add_argument("--dim", type=int, default=4810)
    ap.add_argument("--processes", default="2,4,8", help="comma-separated process counts (servers included)")
    ap.add_argument("--repeats", type=int, default=3, help="runs a cell on each side, each with its own seeds")
    ap.add_argument("--updates", type=int, default=400, help="updates a run")
    ap.add_argument("--warmup", type=int, default=1, help="untimed dist runs before a cell's first")
    ap.add_argument("--pin", action="store_true", help="rank r on a core of its own (placement uma)")
    ap.add_argument("--out", type=Path, default=None, help="keep each cell's results folders here")
    args = ap.parse_args()
    from executors.dist import backend
    from simasgd.machines import profile
    from simasgd.numerics.workloads.constant import ConstWorkload, mean_loss
    from simasgd.runs import backends
    from simasgd.runs.results import merge

    t_start = time.monotonic()
    doc = profile.read(args.profile).to_doc() if os.path.isfile(args.profile) else {}
    if "network" not in doc:
        from executors.dist.calibrate_network import calibrate

        doc["network"] = calibrate()
        profile.write(doc, args.profile)
    os.environ["SIMASGD_PROFILE"] = args.profile
    net = doc["network"]
    ar = net.get("allreduce") or {}
    handling = net.get("handling_us")
    print(f"[network]: latency {net['latency_us']:.0f} us, {net['bandwidth_gbps']:.1f} Gb/s, server "
          f"{net['server_bandwidth_gbps']:.2f} Gb/s, all-reduce measured at ranks {ar.get('ranks', [])}, "
          f"handling {'not measured' if handling is None else f'{handling:.1f} us'}, {wake_words(net)}"
          f"sim model {args.dim} "
          f"parameters, loadavg {os.getloadavg()[0]:.1f}, {len(os.sched_getaffinity(0))} CPUs")
    print("| algorithm | processes | run | sim updates/s | dist updates/s | sim / dist - 1 | sim τ̄ | dist τ̄ "
          "| ranks' CPUs |", flush=True)
    wl = ConstWorkload(dim=args.dim, kernel=half_ms, loss_kernel=mean_loss)
    cells: list[tuple[str, int, float | None, bool]] = []
    for spec in (ALL if args.algorithms == "all" else args.algorithms).split(","):
        name, params = parse_algorithm(spec)
        for p in map(int, args.processes.split(",")):
            why = too_few_workers(name, params, p)
            if why:
                print(f"| {spec} | {p} | skipped: {why} |", flush=True)
                continue
            sc = scenario(name, p, args.dim, args.pin, args.updates, params)
            for w in range(args.warmup):
                warm = scenario(name, p, args.dim, args.pin, WARMUP_UPDATES, params)
                backend.run_workload(warm, 1000 + w, wl)
            sims, reals = [], []
            for run in range(args.repeats):
                sim = backends.load("sim").run_once(sc, run)
                real = backend.run_workload(sc, run, wl)
                sims.append(sim)
                reals.append(real)
                s, r = sim.runs[0], real.runs[0]
                cpus = ",".join(map(str, real.metadata["placement"]["cpus"]))
                tcpus = _span(real.metadata["placement"].get("transport_cpus", []))
                print(f"| {spec} | {p} | {run} | {s.updates_per_s:.0f} | {r.updates_per_s:.0f} | "
                      f"{s.updates_per_s / r.updates_per_s - 1:+.0%} | {s.mean_staleness:.2f} | "
                      f"{r.mean_staleness:.2f} | {cpus} |", flush=True)
                print(f"    transport CPUs {tcpus or 'any'}; after the gradient, median: sim "
                      f"{outside_gradient_s(sim) * 1e6:.0f} µs, dist {outside_gradient_s(real) * 1e6:.0f} µs; "
                      f"dist gradient median {gradient_s(real) * 1e6:.0f} µs, first update at "
                      f"{first_write_s(real) * 1e3:.1f} ms", flush=True)
            sim_all, real_all = merge(sims), merge(reals)
            if args.out is not None:
                folder = args.out / f"{spec.replace(':', '-').replace('=', '')}-{p}"
                sim_all.save(folder / "sim")
                real_all.save(folder / "dist")
            ceiling, met, pm = judge(sim_all, real_all, args.repeats)
            cells.append((spec, p, ceiling, met))
            print(f"| {spec} | {p} | cell | ceiling {_share(ceiling)} | sim meets: {'yes' if met else 'no'} | "
                  f"updates/s {pm['updates_per_s_rel_err']:+.0%} | τ̄ {_pct(pm['mean_staleness_rel_err'])} | "
                  f"KS {pm['ks']:.2f} |", flush=True)
    ceil = sum(c for _, _, c, _ in cells if c is not None)
    met_n = sum(m for _, _, _, m in cells)
    print(f"[cells] {len(cells)}: ceiling (self-prediction, summed) {ceil:.2f}, simulator meets {met_n}"
          f" -> {met_n / ceil if ceil else math.nan:.2f} of the ceiling (goal >= 0.9); "
          f"{time.monotonic() - t_start:.0f} s", flush=True)


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.0%}"


def _span(cpus: list[int]) -> str:
    """``[8, 9, 10, 11]`` -> ``8-11``; runs joined by commas."""
    out, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


if __name__ == "__main__":
    main()
