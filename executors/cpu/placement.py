"""Where worker threads run: this machine's topology from /sys, and ``simasgd.machines.machine.place`` on it.

``machine.place`` numbers logical CPUs its own way (cores socket by socket,
SMT siblings after all cores); :func:`read_topology` builds that numbering's
map to the kernel's CPU ids, so ``uma``/``numa`` mean the same thing here as
in the simulator. A placement that cannot be honoured (``numa`` on one NUMA
node, CPUs outside this process's affinity) is said in a warning, not faked.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from simasgd.machines import machine as machines

SYS = Path("/sys/devices/system")


@dataclass(frozen=True)
class Topology:
    machine: machines.Machine
    cpu_map: list[int]          # place()'s logical index -> kernel CPU id
    numa_nodes: int
    allowed: frozenset[int] = field(default_factory=frozenset)


def parse_cpulist(text: str) -> list[int]:
    """``"0-3,8,10-11"`` -> [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _read(path: Path, default: str) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return default


def read_topology(root: Path = SYS) -> Topology:
    cpus = parse_cpulist(_read(root / "cpu" / "online", f"0-{(os.cpu_count() or 1) - 1}"))
    where: dict[int, tuple[int, int]] = {}
    for c in cpus:
        topo = root / "cpu" / f"cpu{c}" / "topology"
        where[c] = (int(_read(topo / "physical_package_id", "0")), int(_read(topo / "core_id", str(c))))
    packages = sorted({p for p, _ in where.values()})
    cores = {p: sorted({core for q, core in where.values() if q == p}) for p in packages}
    siblings = {key: sorted(c for c in cpus if where[c] == key) for key in set(where.values())}
    cps = max(len(v) for v in cores.values())
    tpc = max(len(v) for v in siblings.values())
    n_cores = len(packages) * cps
    cpu_map = [cpus[0]] * (n_cores * tpc)
    for s, p in enumerate(packages):
        for ci, core in enumerate(cores[p]):
            for t, c in enumerate(siblings[(p, core)]):
                cpu_map[s * cps + ci + t * n_cores] = c
    nodes = [n for n in (root / "node").glob("node[0-9]*") if parse_cpulist(_read(n / "cpulist", ""))]
    base = machines.PRESETS["laptop-2core"]
    m = replace(base, name="this-topology", sockets=len(packages), cores_per_socket=cps, threads_per_core=tpc)
    try:
        allowed = frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = frozenset(cpus)
    return Topology(m, cpu_map, max(1, len(nodes)), allowed)


def plan(workers: int, placement: str | Sequence[int], topo: Topology | None = None) -> tuple[list[int | None],
         list[str]]:
    """Kernel CPU id per worker (None: the OS decides) and any warnings about the placement."""
    topo = topo or read_topology()
    warnings: list[str] = []
    if placement == "os":
        return [None] * workers, warnings
    if not isinstance(placement, str):
        cpus = [int(c) for c in placement]
        bad = [c for c in cpus if c not in topo.allowed]
        if bad:
            raise machines.MachineError(f"workers.placement: CPUs {bad} are not available to this process "
                                        f"(allowed: {sorted(topo.allowed)})")
        return [cpus[i % len(cpus)] for i in range(workers)], warnings
    how = placement
    if placement == "numa" and topo.numa_nodes < 2:
        warnings.append(f"workers.placement = \"numa\" cannot be honoured: this machine has "
                        f"{topo.numa_nodes} NUMA node ({topo.machine.sockets} socket); threads placed as \"uma\"")
        how = "uma"
    chosen = [topo.cpu_map[i] for i in machines.place(topo.machine, workers, how) if i is not None]
    if any(c not in topo.allowed for c in chosen):
        allowed = sorted(topo.allowed)
        warnings.append(f"some CPUs of the {how!r} placement are outside this process's affinity; "
                        f"threads placed on the allowed CPUs {allowed} in turn")
        chosen = [allowed[i % len(allowed)] for i in range(workers)]
    if workers > len(topo.allowed):
        warnings.append(f"{workers} threads on {len(topo.allowed)} CPUs: oversubscribed (threads time-share cores)")
    return list(chosen), warnings
