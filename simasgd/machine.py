"""Machines: presets, calibrated profiles, and where each worker runs.

The simulator builds its resources from a :class:`Machine`; the CPU executor
pins threads with the same :func:`place` so both mean the same thing by
``uma``, ``numa`` and ``os``.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any, Sequence

from simasgd import profile as profile_format
from simasgd.scenario import MachineConfig


@dataclass(frozen=True)
class Machine:
    name: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    local_latency_ns: float
    remote_latency_ns: float
    mem_bandwidth_gbs: float      # per socket
    link_bandwidth_gbs: float     # between sockets
    gflops_per_core: float        # sustained, for deriving gradient times from a workload's flops
    quantum_s: float              # OS scheduler time slice
    context_switch_s: float
    profile: dict[str, Any] | None = None  # calibrated measurements ("this"), read by the simulator
    core_bandwidth_gbs: float = 10.0  # what one core can stream (copy loops), whatever the socket offers

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def hw_threads(self) -> int:
        return self.cores * self.threads_per_core

    def socket_of(self, cpu: int) -> int:
        """Socket of logical CPU ``cpu`` (cores numbered socket by socket, SMT siblings after all cores)."""
        return (cpu % self.cores) // self.cores_per_socket


PRESETS: dict[str, Machine] = {m.name: m for m in (
    # The machine of the Ek 2021 study: 2 × Xeon E5-2687W v2 (8 cores, 2-way SMT, 3.4 GHz).
    Machine("xeon-e5-2687w-v2", 2, 8, 2, local_latency_ns=90, remote_latency_ns=150,
            mem_bandwidth_gbs=40, link_bandwidth_gbs=16, gflops_per_core=20,
            quantum_s=4e-3, context_switch_s=3e-6),
    Machine("laptop-2core", 1, 2, 1, local_latency_ns=80, remote_latency_ns=80,
            mem_bandwidth_gbs=20, link_bandwidth_gbs=20, gflops_per_core=15,
            quantum_s=4e-3, context_switch_s=3e-6),
)}

PROFILE_ENV = "SIMASGD_PROFILE"
DEFAULT_PROFILE = Path("profiles/this.toml")


class MachineError(ValueError):
    pass


def profile_path() -> Path:
    return Path(os.environ.get(PROFILE_ENV, DEFAULT_PROFILE))


def load_profile(path: Path | None = None) -> Machine:
    """The calibrated machine written by ``simasgd calibrate`` (preset ``this``)."""
    path = path or profile_path()
    if not path.exists():
        raise MachineError(f"machine.preset = \"this\": no calibrated profile at {path}; "
                           f"run `simasgd calibrate --out {path}` first (or set {PROFILE_ENV})")
    try:
        doc = profile_format.read(path)
    except profile_format.ProfileError as e:
        raise MachineError(str(e)) from None
    keys = {f.name for f in fields(Machine)} - {"name", "profile"}
    m = doc.get("machine", {})
    missing = {k for k in keys if next(f for f in fields(Machine) if f.name == k).default is MISSING} - set(m)
    if missing:
        raise MachineError(f"{path}: [machine] lacks {sorted(missing)}")
    return Machine(name="this", profile=doc, **{k: m[k] for k in keys if k in m})


def resolve(cfg: MachineConfig) -> Machine:
    """A preset (default ``laptop-2core``), with any keys the scenario gives overriding it."""
    name = cfg.preset or "laptop-2core"
    if name == "this":
        base = load_profile()
    elif name in PRESETS:
        base = PRESETS[name]
    else:
        raise MachineError(f"machine.preset = \"{name}\": unknown preset; allowed: {', '.join([*PRESETS, 'this'])}")
    given = {f.name: getattr(cfg, f.name) for f in fields(Machine)
             if hasattr(cfg, f.name) and f.name != "name" and getattr(cfg, f.name) is not None}
    return replace(base, **given) if given else base


def place(machine: Machine, workers: int, placement: str | Sequence[int]) -> list[int | None]:
    """The logical CPU of each worker, or None where the OS decides (``os``).

    ``uma`` fills socket 0 first (physical cores, then SMT siblings), ``numa``
    alternates sockets; an explicit list is taken as given and cycled.
    """
    if placement == "os":
        return [None] * workers
    if not isinstance(placement, str):
        cpus = list(placement)
        bad = [c for c in cpus if c >= machine.hw_threads]
        if bad:
            raise MachineError(f"workers.placement: cores {bad} do not exist on {machine.name} "
                               f"(it has {machine.hw_threads} logical CPUs)")
        return [cpus[i % len(cpus)] for i in range(workers)]
    order = _fill_order(machine, alternate=(placement == "numa"))
    return [order[i % len(order)] for i in range(workers)]


def _fill_order(m: Machine, alternate: bool) -> list[int]:
    per_socket = [[s * m.cores_per_socket + c + t * m.cores for t in range(m.threads_per_core)
                   for c in range(m.cores_per_socket)] for s in range(m.sockets)]
    if not alternate:
        return [cpu for sock in per_socket for cpu in sock]
    return [per_socket[s][i] for i in range(len(per_socket[0])) for s in range(m.sockets)]
