"""Ek 2021 S1 on the simulator: NUMA against UMA placement at 7 and 8 threads, and which socket part makes it.

    PYTHONPATH=. python benchmarks/ek_numa.py [--updates N] [--variants NAME ...] [--out ek_numa.json]

The thesis (§3.2, §4.2, Fig. 4.2-4.3, discussed in §4.7 S1): 2 x Xeon E5-2687W v2, MLP
784-128-128-128-10 (MiniDNN, double), B = 64, eta = 0.005, mutex, rw-lock, HOGWILD! and Leashed-SGD
with 7 threads (UMA: all on socket 0; NUMA: 4 + 3) and 8 (8 / 4 + 4). Its metric: time to 2% of the
initial loss, split into average epoch time ("computational efficiency") and epochs to 2% ("statistical
efficiency"); "NUMA reaches 2%-convergence faster than UMA for all algorithms, both for seven and eight
threads. The speedup ... is between 60 and 80%. ... all speedup comes from computational efficiency."
So the number to compare is the epoch-time ratio UMA/NUMA, which is NUMA's updates/s over UMA's (an
epoch is N/B updates, ``rounds_per_epoch`` in the framework's executor): a timing-only simulation
(``[sim] numerics = false``) gives it.

Ablation: the socket model's three parts, each removed through the machine's own keys (no ``[sim]``
switch): turbo by busy cores (``turbo_ghz = []``: every core at the base clock whatever the load),
per-socket last-level cache (``llc_mb`` unbounded: every footprint fits), per-socket DRAM bandwidth
(``mem_bandwidth_gbs`` unbounded: a socket's streams never share it; one core's own limit stays).

The closed form beside it (``closed_form``) is the gradient phase alone, with no queueing: base-clock
time x ``base/turbo(k)`` plus the bytes a gradient misses in the socket's L3 at one core's DRAM rate;
and the socket's DRAM demand, to show whether its bandwidth can bind.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # record.py
import record  # noqa: E402

from simasgd.machines.machine import PRESETS, Machine, place  # noqa: E402
from simasgd.numerics.workloads.mlp import softmax_spec  # noqa: E402
from simasgd.sim import backend, sockets  # noqa: E402
from simasgd.spec import loader  # noqa: E402

SCHEMA, SCHEMA_VERSION = "ek_numa", 1
S1 = ROOT / "scenarios" / "ek2021" / "s1_uma_numa.toml"
PRESET = "xeon-e5-2687w-v2"
ALGORITHMS = ("mutex", "rwlock", "hogwild", "leashed")
THREADS = (7, 8)
THESIS = (1.6, 1.8)  # §4.7 S1: "between 60 and 80%" faster under NUMA, 7 and 8 threads, every algorithm
UNBOUNDED = 1e6  # MiB of L3 / GB/s of DRAM: more than any footprint or stream here needs

# Each variant: the machine keys it sets over the preset (``-s machine.KEY=VALUE``).
VARIANTS: dict[str, dict[str, Any]] = {
    "socket model (preset)": {},
    "no turbo by busy cores": {"turbo_ghz": []},
    "no L3 capacity limit": {"llc_mb": UNBOUNDED},
    "no per-socket DRAM limit": {"mem_bandwidth_gbs": UNBOUNDED},
    "turbo only": {"llc_mb": UNBOUNDED, "mem_bandwidth_gbs": UNBOUNDED},
    "L3 capacity only": {"turbo_ghz": [], "mem_bandwidth_gbs": UNBOUNDED},
    "DRAM bandwidth only": {"turbo_ghz": [], "llc_mb": UNBOUNDED},
    "none of the three": {"turbo_ghz": [], "llc_mb": UNBOUNDED, "mem_bandwidth_gbs": UNBOUNDED},
    # Ivy Bridge's L3 policy is adaptive and undocumented; the preset takes the LRU cliff (h = 0 once the
    # footprint overflows). Random replacement keeps h = C/F: 0.94 at 7 threads, 0.83 at 8.
    "L3 random replacement": {"llc_replacement": "random"},
    # What the size of the L3 effect depends on: the rate one core pulls its missed lines (the preset's
    # 10 GB/s; 7.1 = 10 line-fill buffers x 64 B per 90 ns, the demand-miss bound without prefetch).
    "L3 misses at 7.1 GB/s a core": {"core_bandwidth_gbs": 7.1},
    # The framework's build (CMakeLists.txt: -O3, no -march) gives Eigen SSE2 only: 4 double flops a cycle,
    # not AVX's 8, so 74% of peak is ~10 GFLOP/s at 3.4 GHz: the compute the misses are set against.
    "SSE2 compute (10 GFLOP/s a core)": {"gflops_per_core": 10},
}


def scenario_overrides(algorithm: str, placement: str, threads: int, machine: dict[str, Any],
                       updates: int) -> list[str]:
    keys = [f"machine.{k}={_toml(v)}" for k, v in machine.items()]
    return [f"algorithm.name={algorithm}", f"workers.placement={placement}", f"workers.count={threads}",
            f"stop.max_updates={updates}", "sim.numerics=false", *keys]


def _toml(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


def updates_per_s(overrides: list[str], warmup: float = 0.1) -> float:
    """Applied updates per simulated second, the first ``warmup`` share of versions discarded."""
    sc = loader.load(S1, overrides)
    u = backend.run_once(sc, 0).updates
    u = u[(u.version > warmup * u.version.max()) & u.applied]
    return (len(u) - 1) / float(u.t_write.max() - u.t_write.min())


@dataclass(frozen=True)
class Cell:
    algorithm: str
    threads: int
    uma: float   # updates/s
    numa: float

    @property
    def ratio(self) -> float:
        """UMA's epoch time over NUMA's: the thesis' computational-efficiency speed-up."""
        return self.numa / self.uma


def run_variant(machine: dict[str, Any], updates: int, algorithms: tuple[str, ...] = ALGORITHMS,
                threads: tuple[int, ...] = THREADS) -> list[Cell]:
    out = []
    for m in threads:
        for a in algorithms:
            rates = {p: updates_per_s(scenario_overrides(a, p, m, machine, updates)) for p in ("uma", "numa")}
            out.append(Cell(a, m, rates["uma"], rates["numa"]))
            print(f"  {a:8s} m={m}: UMA {rates['uma']:7,.0f}/s  NUMA {rates['numa']:7,.0f}/s  "
                  f"NUMA/UMA {out[-1].ratio:.2f}", flush=True)
    return out


def phase_table(updates: int, threads: int = 8) -> str:
    """Where a cycle goes, per placement and socket (preset): mean read, gradient and update phases (ms)."""
    import numpy as np

    from simasgd.evaluation import phases

    head = "| algorithm | placement | socket | read | gradient | update | cycle |\n|" + "---|" * 7
    rows = []
    m = PRESETS[PRESET]
    for a in ALGORITHMS:
        for p in ("uma", "numa"):
            sc = loader.load(S1, scenario_overrides(a, p, threads, {}, updates))
            ct = phases.cycle_table(backend.run_once(sc, 0).updates)
            where = np.array([m.socket_of(c) for c in place(m, threads, p) if c is not None])
            ct["socket"] = where[ct.worker.to_numpy()]
            for s, g in ct.groupby("socket"):
                ms = g[["read", "gradient", "update", "cycle"]].mean() * 1e3
                rows.append(f"| {a} | {p.upper()} | {s} | {ms['read']:.2f} | {ms['gradient']:.2f} | "
                            f"{ms['update']:.2f} | {ms['cycle']:.2f} |")
    return head + "\n" + "\n".join(rows)


def closed_form(m: Machine, threads: int, placement: str, batch: int = 64) -> dict[str, float]:
    """The gradient phase and the socket's DRAM demand per socket, with no queueing (see module doc)."""
    layers = [784, 128, 128, 128, 10]
    spec = softmax_spec(layers, "ek")
    from simasgd.spec.scenario import WorkloadConfig

    wl = WorkloadConfig(model="mlp", layers=layers, dataset="synthetic", batch_size=batch)
    fp = sockets.footprint(wl, spec.dim, 8, m.l2_kb * 1024)
    assert fp is not None
    cpus = place(m, threads, placement)
    where = [m.socket_of(c) for c in cpus if c is not None]
    shares = sockets.shares(m, list(cpus), where, fp, spec.dim * 8)
    base_s = spec.flops_per_sample * batch / (m.gflops_per_core * 1e9)
    rate = m.core_bandwidth_gbs * 1e9
    per_worker = []
    for w, s in enumerate(where):
        own = shares.own_miss[w].get(2, 0.0) + shares.own_miss[w].get(3, 0.0)
        t = base_s * shares.slowdown[w] + (shares.miss_bytes[w] + own) / rate
        per_worker.append((s, t, shares.miss_bytes[w] + own))
    busiest = max(set(where), key=where.count)
    ts = [t for s, t, _ in per_worker if s == busiest]
    missed = [b for s, _, b in per_worker if s == busiest]
    t_grad = sum(ts) / len(ts)
    return {"workers_on_busiest_socket": float(len(ts)),
            "footprint_mib": shares.footprint_bytes[busiest] / 2**20,
            "l3_hit": shares.hit[busiest],
            "clock_ghz": m.base_ghz / shares.slowdown[where.index(busiest)] if m.base_ghz else 0.0,
            "compute_ms": 1e3 * base_s * shares.slowdown[where.index(busiest)],
            "missed_mb_per_cycle": sum(missed) / len(missed) / 1e6,
            "cycle_ms": 1e3 * t_grad,
            "dram_demand_gbs": len(ts) * (sum(missed) / len(missed)) / t_grad / 1e9,
            "dram_gbs": m.mem_bandwidth_gbs}


def closed_form_table(m: Machine) -> str:
    head = ("| threads | placement | workers on the busiest socket | clock | footprint / 25 MiB L3 | L3 hit | "
            "compute | missed a cycle | compute + misses | socket DRAM demand / sustained |\n|" + "---|" * 10)
    rows = []
    for t in THREADS:
        for p in ("uma", "numa"):
            c = closed_form(m, t, p)
            rows.append(f"| {t} | {p.upper()} | {c['workers_on_busiest_socket']:.0f} | {c['clock_ghz']:.1f} GHz | "
                        f"{c['footprint_mib']:.1f} MiB | {c['l3_hit']:.0f} | {c['compute_ms']:.2f} ms | "
                        f"{c['missed_mb_per_cycle']:.2f} MB | {c['cycle_ms']:.2f} ms | "
                        f"{c['dram_demand_gbs']:.1f} / {c['dram_gbs']:.0f} GB/s |")
    return head + "\n" + "\n".join(rows)


def results_table(cells: list[Cell]) -> str:
    head = ("| algorithm | threads | UMA updates/s | NUMA updates/s | NUMA/UMA (simulated) | thesis |\n|"
            + "---|" * 6)
    rows = [f"| {c.algorithm} | {c.threads} | {c.uma:,.0f} | {c.numa:,.0f} | {c.ratio:.2f} | "
            f"{THESIS[0]:.1f}–{THESIS[1]:.1f} |" for c in cells]
    return head + "\n" + "\n".join(rows)


def ablation_table(by_variant: dict[str, list[Cell]]) -> str:
    head = "| variant | 7 threads: NUMA/UMA | 8 threads: NUMA/UMA | thesis |\n|" + "---|" * 4
    rows = []
    for name, cells in by_variant.items():
        span = []
        for t in THREADS:
            r = [c.ratio for c in cells if c.threads == t]
            span.append(f"{min(r):.2f}–{max(r):.2f}" if r else "—")
        rows.append(f"| {name} | {span[0]} | {span[1]} | {THESIS[0]:.1f}–{THESIS[1]:.1f} |")
    return head + "\n" + "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--updates", type=int, default=4000, help="updates a simulated run (default 4000)")
    p.add_argument("--variants", nargs="*", default=list(VARIANTS), help="which ablation rows (default: all)")
    p.add_argument("--out", type=Path, default=None, help="write the numbers as a JSON record here")
    args = p.parse_args(argv)
    print("## Closed form: the gradient phase with no queueing (preset)\n")
    print(closed_form_table(PRESETS[PRESET]) + "\n")
    by_variant: dict[str, list[Cell]] = {}
    for name in args.variants:
        print(f"{name}:", flush=True)
        by_variant[name] = run_variant(VARIANTS[name], args.updates)
    first = next(iter(by_variant))
    print(f"\n## Simulated, {first}\n\n{results_table(by_variant[first])}\n")
    print(f"## Ablation (range over {', '.join(ALGORITHMS)})\n\n{ablation_table(by_variant)}\n")
    print(f"## Where the cycle goes, 8 threads (preset; ms)\n\n{phase_table(args.updates)}\n")
    if args.out:
        payload = {"updates": args.updates, "preset": PRESET, "thesis_ratio": list(THESIS),
                   "variants": {n: {"machine": VARIANTS[n],
                                    "cells": [{"algorithm": c.algorithm, "threads": c.threads, "uma_per_s": c.uma,
                                               "numa_per_s": c.numa, "ratio": c.ratio} for c in cells]}
                                for n, cells in by_variant.items()}}
        record.write(args.out, SCHEMA, SCHEMA_VERSION, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
