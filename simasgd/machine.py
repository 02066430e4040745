"""Machines: presets, calibrated profiles, and where each worker runs.

The simulator builds its resources from a :class:`Machine`; the CPU executor
pins threads with the same :func:`place` so both mean the same thing by
``uma``, ``numa`` and ``os``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

from simasgd import gpus
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
    # The socket's clock and last-level cache (simasgd/sim/sockets.py); 0 / () = unknown, not modelled.
    base_ghz: float = 0.0             # the clock gflops_per_core is quoted at
    turbo_ghz: tuple[float, ...] = ()  # the clock with k busy cores on the socket, k = 1, 2, ...
    llc_mb: float = 0.0               # last-level cache per socket (MiB)
    l2_kb: float = 0.0                # a core's L2 (KiB): the GEMM packs its blocks to fit it
    llc_gbs: float = 0.0              # what one core copies to/from that cache (read + written bytes)
    llc_replacement: str = "random"   # "random" | "lru": the hit ratio of a footprint over capacity

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
    # The machine of the Ek 2021 study (thesis §4.1): 2 × Intel Xeon E5-2687W v2, from its public
    # specifications (Intel ARK) — 8 cores / 16 threads a socket, 3.4 GHz base, 4.0 GHz max turbo,
    # 25 MB L3 a socket, 256 KB L2 a core, 4 channels of DDR3-1866 (59.7 GB/s peak a socket), two QPI links at
    # 8 GT/s (16 GB/s each way each, 32 GB/s between the sockets). Derived, with the reason:
    # turbo bins 6/6/5/4/3/3/2/2 (the E5-2600 v2 specification update's table for this SKU, as
    # recalled: not verifiable offline); 44 GB/s sustained a socket (STREAM reaches ~75% of
    # DDR3 peak on Ivy Bridge-EP); 20 GFLOP/s a core at base clock (74% of the 8 double-precision
    # flops/cycle AVX peak, Eigen's GEMM at the MLP's shapes — an estimate); one core streams
    # ~10 GB/s from DRAM (between 7.1 GB/s, its 10 line-fill buffers of 64 B per ~90 ns, and 11.4,
    # the L2's 16 outstanding prefetches) and ~54 GB/s from L3 (16 B/cycle at
    # 3.4 GHz, half the 32 B/cycle ring port: an estimate). Latencies 90/150 ns: typical Intel MLC
    # figures for 2-socket Ivy Bridge-EP. The replacement policy of its L3 is adaptive and
    # undocumented; "lru" (a cliff once the socket's footprint overflows it) is what the thesis'
    # own Table 4.3 shows: 8 threads on one socket converge slower than 4 on it for every
    # algorithm, and 4 + 4 over two sockets faster — scenarios/ek2021/README.md gives both policies.
    # With these numbers S1's NUMA/UMA epoch-time ratio is 1.1-1.4, not the thesis' 1.6-1.8; no
    # value inside the physical ranges above closes it (benchmarks/ek_numa.md).
    Machine("xeon-e5-2687w-v2", 2, 8, 2, local_latency_ns=90, remote_latency_ns=150,
            mem_bandwidth_gbs=44, link_bandwidth_gbs=32, gflops_per_core=20,
            quantum_s=4e-3, context_switch_s=3e-6, core_bandwidth_gbs=10.0,
            base_ghz=3.4, turbo_ghz=(4.0, 4.0, 3.9, 3.8, 3.7, 3.7, 3.6, 3.6),
            llc_mb=25.0, l2_kb=256, llc_gbs=54.4, llc_replacement="lru"),
    # The CPU of the Lopez et al. 2020 study (§IV: an NVIDIA DGX-1, "2 × 20 cores Intel Xeon CPU E5-2698
    # v4 clocked at 2.2 GHz"), from Intel ARK's public specifications: 20 cores / 40 threads a socket,
    # 2.2 GHz base, 3.6 GHz max turbo, 50 MB L3 a socket, 256 KB L2 a core, 4 channels of DDR4-2400
    # (76.8 GB/s peak a socket), two QPI links at 9.6 GT/s (19.2 GB/s each way each: 38.4 between the
    # sockets). Derived, with the reason: 62 GB/s sustained a socket (STREAM reaches ~80% of DDR4 peak
    # on Broadwell-EP); 26 GFLOP/s a core (74% of the 16 double-precision flops/cycle AVX2-FMA peak at
    # base clock, the same ratio as the Ek preset: an estimate); ~10 GB/s streamed by one core from DRAM
    # (10 line-fill buffers over ~90 ns) and ~35 GB/s from L3 (16 B/cycle at 2.2 GHz: an estimate);
    # latencies 90/140 ns, typical Intel MLC figures for 2-socket Broadwell-EP. The turbo bins with k
    # busy cores are not public for this SKU beyond the 3.6 GHz maximum: not modelled (turbo_ghz = ()).
    Machine("xeon-e5-2698-v4", 2, 20, 2, local_latency_ns=90, remote_latency_ns=140,
            mem_bandwidth_gbs=62, link_bandwidth_gbs=38.4, gflops_per_core=26,
            quantum_s=4e-3, context_switch_s=3e-6, core_bandwidth_gbs=10.0,
            base_ghz=2.2, llc_mb=50.0, l2_kb=256, llc_gbs=35.2),
    Machine("laptop-2core", 1, 2, 1, local_latency_ns=80, remote_latency_ns=80,
            mem_bandwidth_gbs=20, link_bandwidth_gbs=20, gflops_per_core=15,
            quantum_s=4e-3, context_switch_s=3e-6),
)}

PROFILE_ENV = "SIMASGD_PROFILE"
DEFAULT_PROFILE = Path("profiles/this.toml")
# The machine of a scenario that names none when this machine has no calibrated profile.
FALLBACK_PRESET = "laptop-2core"
PROFILE_PRESETS = ("this", "this-gpu")  # the presets read from the calibrated profile


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
    st = path.stat()
    try:
        doc = _read_profile(str(path.resolve()), st.st_mtime_ns, st.st_size)
    except profile_format.ProfileError as e:
        raise MachineError(str(e)) from None
    keys = {f.name for f in fields(Machine)} - {"name", "profile"}
    m = doc.get("machine", {})
    missing = {k for k in keys if next(f for f in fields(Machine) if f.name == k).default is MISSING} - set(m)
    if missing:
        raise MachineError(f"{path}: [machine] lacks {sorted(missing)}")
    return Machine(name="this", profile=doc, **{k: m[k] for k in keys if k in m})


@functools.lru_cache(maxsize=8)
def _read_profile(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    """A profile parsed once per version of its file (a sweep simulates hundreds of runs on one profile; its
    gradient samples make parsing it cost more than a short run). The simulator only reads it."""
    return profile_format.read(Path(path))


def given_keys(cfg: MachineConfig) -> list[str]:
    """The machine keys a scenario sets besides ``preset``."""
    return [k for k in type(cfg).model_fields if k != "preset" and getattr(cfg, k) is not None]


def preset_of(cfg: MachineConfig) -> str:
    """The preset a scenario's machine starts from. A scenario without ``[machine]`` means this machine:
    its calibrated profile (``this``) when one exists, else ``laptop-2core``. Keys without a preset
    override ``laptop-2core``, never a profile: the profile's measured tables would not fit them."""
    if cfg.preset:
        return cfg.preset
    if given_keys(cfg) or not profile_path().is_file():
        return FALLBACK_PRESET
    return "this"


def simulated(cfg: MachineConfig) -> dict[str, Any]:
    """What a result records as the machine its run simulated (``metadata["machine"]``): ``name`` (the
    preset), ``source`` — ``"scenario"`` (its ``[machine]`` named it or set keys), ``"profile"`` (no
    ``[machine]``: this machine's calibrated profile) or ``"preset"`` (no ``[machine]`` and no profile:
    the fallback preset) — and ``profile`` (its path) for the presets read from the profile, or the path
    looked at in vain (``"preset"``), ``keys`` for keys the scenario set over the preset."""
    name, keys = preset_of(cfg), given_keys(cfg)
    out: dict[str, Any] = {"name": name,
                           "source": "scenario" if cfg.preset or keys else ("profile" if name == "this" else "preset")}
    if name in PROFILE_PRESETS or out["source"] == "preset":
        out["profile"] = str(profile_path())
    if keys:
        out["keys"] = keys
    return out


def describe(record: dict[str, Any] | None) -> str:
    """One line for :func:`simulated`'s record: the machine, and why it was that one."""
    if not record:
        return "machine: not recorded"
    name, source = record.get("name"), record.get("source")
    keys = f", with {', '.join(record['keys'])} set by the scenario" if record.get("keys") else ""
    if source == "profile":
        return f"machine: this (calibrated profile {record.get('profile')}; the scenario has no [machine])"
    if source == "preset":
        return (f"machine: {name} (preset; the scenario has no [machine] and there is no calibrated profile at "
                f"{record.get('profile')}: `simasgd calibrate` makes one)")
    where = f", calibrated profile {record['profile']}" if record.get("profile") else ""
    return f"machine: {name} (the scenario's [machine]{where}{keys})"


def resolve(cfg: MachineConfig) -> Machine:
    """The scenario's machine: :func:`preset_of`, with any keys the scenario gives overriding it."""
    name = preset_of(cfg)
    if name == "this":
        base = load_profile()
    elif name in PRESETS:
        base = PRESETS[name]
    elif is_gpu(cfg):
        raise MachineError(f"machine.preset = \"{name}\" is a GPU (machine kind \"gpu\", simasgd/sim/gpu.py): "
                           f"the sim backend models it; CPU presets: {', '.join([*PRESETS, 'this'])}")
    else:
        raise MachineError(f"machine.preset = \"{name}\": unknown preset; allowed: "
                           f"{', '.join([*PRESETS, 'this', *gpus.names()])}")
    given = {f.name: getattr(cfg, f.name) for f in fields(Machine)
             if hasattr(cfg, f.name) and f.name != "name" and getattr(cfg, f.name) is not None}
    return replace(base, **given) if given else base


def is_gpu(cfg: MachineConfig) -> bool:
    """The machine kind: a GPU preset (``v100``, ``h100``, ``this-gpu``: simasgd/sim/gpu.py) or a CPU machine."""
    return cfg.preset in gpus.names()


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
