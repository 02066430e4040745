"""Calibrate this machine with micro-benchmarks and write the profile ``machine.preset = "this"`` reads.

Micro-benchmarks only — never the algorithm runs the profile will be compared with. Each table is one
module of this package (format: docs/profile.md):

=================================  ==========================================================
``[machine]``                      :mod:`.topology`, :mod:`.memory`, :mod:`.copies`, the gradients
``[gradient."<key>"]``             :mod:`.gradient` (numba), :mod:`.torch_gradient` (torch),
                                   :mod:`.steps` (steps in a cycle)
``[copy]``, ``[copy_by_size]``     :mod:`.copies`
``[locks]``, ``[cas]``             :mod:`.locks`
``[c2c]``                          :mod:`executors.c2c` (also probed by the cpu backend)
``[memory]``                       :mod:`.memory`
``[executor]``                     :mod:`.bookkeeping`
``[scheduler]``                    :mod:`.scheduler`
``[cache]``                        :mod:`.topology`
``[coherence]``                    :mod:`.coherence`
``[contention]``                   :mod:`.contention` (not used by the simulator yet)
``[tick]``                         :mod:`.tick`
``[peak]``                         :mod:`.peak` (not used by the simulator)
``[gpu]``                          :mod:`.gpu` (``simasgd calibrate --gpu``)
=================================  ==========================================================
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from executors import c2c
from executors.calibration import coherence as coh_mod
from executors.calibration.bookkeeping import bookkeeping_table
from executors.calibration.contention import contention
from executors.calibration.copies import copy_bandwidth, copy_by_size, copy_sizes
from executors.calibration.gradient import gradient_times
from executors.calibration.locks import PASS_ELEMENTS, add_pass_figures, cas_figures, lock_figures
from executors.calibration.memory import memory_latency
from executors.calibration.peak import peak_table
from executors.calibration.scheduler import scheduler, scheduler_params
from executors.calibration.tick import tick_table
from executors.calibration.topology import cache_levels, topology
from simasgd.machines import profile as _profile
from simasgd.machines.profile import workload_key
from simasgd.spec.scenario import WorkloadConfig

DEFAULT_WORKLOADS: list[dict[str, Any]] = [
    {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits", "batch_size": 16},
    {"model": "mlp", "layers": [784, 128, 128, 128, 10], "dataset": "synthetic", "batch_size": 16},
    {"model": "mlp", "layers": [784, 128, 128, 128, 10], "dataset": "synthetic", "batch_size": 64},
]


def calibrate(workloads: Sequence[Any] | None = None, quick: bool = False, seed: int = 0,
              base_dir: str | None = None, log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Measure everything; returns the profile as a dict (``write_profile`` saves it)."""
    t_start = time.monotonic()
    scale = 0.1 if quick else 1.0
    topo = topology()
    cfgs = list(workloads) if workloads is not None else [
        WorkloadConfig(**w) for w in (DEFAULT_WORKLOADS[:1] if quick else DEFAULT_WORKLOADS)]
    grads = {}
    for cfg in cfgs:
        log(f"gradient {workload_key(cfg)}")
        grads[workload_key(cfg)] = gradient_times(cfg, seed, base_dir, 4.0 * scale)
    log("copy bandwidth")
    biggest = max((g["dim"] for g in grads.values()), default=100_000)
    copy = copy_bandwidth(max(biggest * 8, 8 << 20 if not quick else 1 << 20), os.cpu_count() or 1, 3.0 * scale)
    log("locks")
    locks = lock_figures(int(100_000 * scale))
    log("memory latency")
    lat = memory_latency((256 << 20) if not quick else (16 << 20), int(2_000_000 * scale), seed)
    log("scheduler")
    sched = scheduler(2.0 * scale)
    machine_tables = _machine_tables(quick, log)
    log("arithmetic peak")
    peak = peak_table(quick)
    log("CAS")
    coh = machine_tables.get("coherence") or {}
    like = float(np.median(coh["c2c_ns"])) if coh.get("c2c_ns") else None
    locks = lock_table(locks, int(100_000 * scale), like)
    cas = c2c.measured(cas_figures, 0.5 * scale, like=like)  # two threads' CAS on one word move its line too
    cas.update(add_pass_figures(PASS_ELEMENTS, 10 if quick else 50))
    log("the executor's bookkeeping")
    books = bookkeeping_table(rounds=40 if not quick else 8)
    sched.update(machine_tables.pop("scheduler"))
    top = max(grads.values(), key=lambda g: g["flops_per_sample"] * g["batch_size"]) if grads else None
    mach = {
        "sockets": topo["sockets"], "cores_per_socket": topo["cores_per_socket"],
        "threads_per_core": topo["threads_per_core"],
        "local_latency_ns": lat, "remote_latency_ns": lat,  # one NUMA node: no remote memory to measure
        "mem_bandwidth_gbs": max(copy["gbs"]) / max(1, topo["sockets"]),
        "link_bandwidth_gbs": max(copy["gbs"]),
        "gflops_per_core": top["gflops"] if top else 1.0,
        "quantum_s": sched["quantum_s"] if math.isfinite(sched["quantum_s"]) else 4e-3,
        "context_switch_s": sched["context_switch_s"],
    }
    return {"machine": mach,
            "calibration": {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": quick,
                            "seconds": time.monotonic() - t_start, "numa_nodes": topo["numa_nodes"],
                            "cpu_count": os.cpu_count() or 1, "loadavg": list(os.getloadavg()),
                            "remote_latency": "measured" if topo["numa_nodes"] > 1 else "= local (one NUMA node)"},
            "gradient": grads, "copy": copy, "locks": locks, "cas": cas, "memory": {"latency_ns": lat},
            "scheduler": sched, "peak": peak, "executor": books, **_c2c_table(like, coh),
            **machine_tables}


def lock_table(locks: dict[str, Any], rounds: int, like: float | None) -> dict[str, Any]:
    """``[locks]``, measured again while its hand-off is not in the core-to-core probe's mode (``like``): the
    hand-off is a line moving between the same two CPUs, so one several times the probe's is a host that
    took a CPU away meanwhile, not the machine. Out of tries, the try closest to the probe's."""
    if c2c.same_mode(locks["handoff_s"] * 1e9, like):
        return locks
    assert like is not None  # same_mode holds without one
    tries = [locks]

    def fits(table: dict[str, Any]) -> bool:
        tries.append(table)
        return c2c.same_mode(table["handoff_s"] * 1e9, like)

    tries.append(c2c.measured(lock_figures, rounds, like=like, accept=fits))
    return min(tries, key=lambda t: abs(math.log(t["handoff_s"] * 1e9 / like)))


def _c2c_table(like: float | None, *tables: dict[str, Any]) -> dict[str, Any]:
    """``[c2c]``: the core-to-core hand-off latency the line-moving tables were measured at (:mod:`executors.c2c`):
    ``like``, the placement ``[coherence]`` was measured in, and every probe taken around ``tables``."""
    samples = [x for t in tables for x in t.get("c2c_ns") or []]
    return {"c2c": {"latency_ns": like, "samples_ns": samples}} if like is not None else {}


def _machine_tables(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """[cache], [copy_by_size], [coherence], [contention], [tick] and the kernel's scheduler parameters.

    Seconds in all (a tenth of that when quick): the copies and coherence the longest, then the tick.
    """
    scale = 0.1 if quick else 1.0
    cache = cache_levels()
    sizes = copy_sizes(cache, quick)
    log("copy bandwidth by size")
    by_size = copy_by_size(sizes, 2.5 * scale)
    # coherence only where A's lines can still sit in a cache (up to 2 x LLC): beyond, both read DRAM
    llc = max(cache["sizes_bytes"] or [16 << 20])
    top = min(max(2 * llc, 1 << 20), 64 << 20)
    log("coherence")
    coh = c2c.measured_rows(coh_mod.coherence, [s for s in sizes if 64 << 10 <= s <= top], 2.5 * scale,
                            dict(zip(by_size["sizes_bytes"], by_size["read_gbs"], strict=True)))  # in one placement
    log("contention")
    cont = contention(1 << 20, 40 if quick else 200)
    log("timer tick")
    tick = tick_table(max(0.2, 1.0 * scale))  # 250 periods of a 250 Hz timer
    return {"cache": cache, "copy_by_size": by_size, "coherence": coh, "contention": cont, "tick": tick,
            "scheduler": scheduler_params()}


def to_toml(profile: dict[str, Any]) -> str:
    return _profile.to_toml(profile)


def write_profile(profile: dict[str, Any], path: Path) -> Path:
    """``simasgd.machines.profile.write``: atomic, with the ``[profile]`` format table."""
    return _profile.write(profile, path)
