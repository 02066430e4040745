"""Machines: presets, calibrated profiles, and where each worker runs.

The simulator builds its resources from a :class:`Machine`; the CPU executor
pins threads with the same :func:`place` so both mean the same thing by
``uma``, ``numa`` and ``os``.

A name in ``machine.preset`` is a preset (:data:`PRESETS`, each number's source
beside it in :data:`CITATIONS`: docs/reference/presets.md is generated from
them), ``this`` (this machine's calibrated profile), or a measured machine of
the fidelity corpus (:func:`corpus_machine`: its entry's calibrated profile,
read as the corpus scorer reads it).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

from simasgd.formats import corpus_file as corpus_files
from simasgd.machines import gpus
from simasgd.machines import profile as profile_format
from simasgd.machines.profile_model import Profile
from simasgd.machines.provenance import Cited
from simasgd.spec.scenario import MachineConfig


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
    profile: Profile | None = None  # calibrated measurements ("this"), read by the simulator
    core_bandwidth_gbs: float = 10.0  # what one core can stream (copy loops), whatever the socket offers
    # The socket's clock and last-level cache (simasgd/sim/sockets.py); 0 / () = unknown, not modelled.
    base_ghz: float = 0.0             # the clock gflops_per_core is quoted at
    turbo_ghz: tuple[float, ...] = ()  # the clock with k busy cores on the socket, k = 1, 2, ...
    llc_mb: float = 0.0               # last-level cache per socket (MiB)
    l2_kb: float = 0.0                # a core's L2 (KiB): the GEMM packs its blocks to fit it
    llc_gbs: float = 0.0              # what one core copies to/from that cache (read + written bytes)
    llc_replacement: str = "random"   # "random" | "lru": the hit ratio of a footprint over capacity
    # Every socket a node of a cluster: nodes share no memory (a worker's reads and updates are of its own node's,
    # simasgd/sim/nodes.py) and talk only through [network]; only the distributed algorithms run on it.
    nodes: bool = False

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def hw_threads(self) -> int:
        return self.cores * self.threads_per_core

    def socket_of(self, cpu: int) -> int:
        """Socket of logical CPU ``cpu`` (cores numbered socket by socket, SMT siblings after all cores)."""
        return (cpu % self.cores) // self.cores_per_socket


# Sources named more than once below. "Checked" means the figure was read in that document when the preset was
# written; "as recalled" means it was not (no copy at hand): the catalogue (docs/reference/presets.md) says which.
LUMI_C = ("LUMI user documentation, 'LUMI-C: the CPU partition' (docs.lumi-supercomputer.eu/hardware/lumic), "
          "checked")
MILAN_CORE = ("corpus entry amd_epyc_2vcpu (a 2-vCPU AMD EPYC guest under Firecracker, Zen 3 by its caches: 512 "
              "KiB L2, 32 MiB L3)")
ESTIMATE_GEMM = ("74% of the double-precision FMA peak at base clock (Eigen's GEMM at the MLP's shapes): the ratio "
                 "the xeon-e5-2687w-v2 preset takes, an estimate")
SCHEDULER = ("the Linux scheduler's slice and context switch as measured on " + MILAN_CORE + ": 3.97 ms, 2.37 µs "
             "(kernel 6.18, EEVDF) — the OS's figures, not the CPU's; taken for every preset that has no "
             "measurement of its own")
STREAM_80 = ("STREAM reaches ~80% of DDR4 peak (the ratio the xeon-e5-2698-v4 preset takes for Broadwell-EP): an "
             "estimate — no published STREAM figure for this SKU could be checked")
NOT_MODELLED = "not modelled (0 / empty)"

_CATALOGUE: tuple[tuple[Machine, Cited], ...] = (
    (Machine("xeon-e5-2687w-v2", 2, 8, 2, local_latency_ns=90, remote_latency_ns=150,
             mem_bandwidth_gbs=44, link_bandwidth_gbs=32, gflops_per_core=20,
             quantum_s=4e-3, context_switch_s=3e-6, core_bandwidth_gbs=10.0,
             base_ghz=3.4, turbo_ghz=(4.0, 4.0, 3.9, 3.8, 3.7, 3.7, 3.6, 3.6),
             llc_mb=25.0, l2_kb=256, llc_gbs=54.4, llc_replacement="lru"),
     Cited("The machine of the Ek 2021 study (thesis §4.1): 2 × Intel Xeon E5-2687W v2 (Ivy Bridge-EP).", {
         "sockets cores_per_socket threads_per_core base_ghz llc_mb l2_kb":
             "Intel ARK: 8 cores / 16 threads a socket, 3.4 GHz base, 25 MB L3 a socket, 256 KB L2 a core",
         "turbo_ghz": "4.0 GHz max turbo (Intel ARK); bins 6/6/5/4/3/3/2/2 with k busy cores from the E5-2600 v2 "
                      "specification update's table for this SKU, as recalled: not verifiable offline",
         "mem_bandwidth_gbs": "44 GB/s sustained a socket: 4 channels of DDR3-1866 are 59.7 GB/s peak (Intel ARK) "
                              "and STREAM reaches ~75% of DDR3 peak on Ivy Bridge-EP (an estimate)",
         "link_bandwidth_gbs": "two QPI links at 8 GT/s (Intel ARK): 16 GB/s each way each, 32 GB/s between the "
                               "sockets",
         "gflops_per_core": "20 GFLOP/s at base clock: 74% of the 8 double-precision flops/cycle AVX peak "
                            "(Eigen's GEMM at the MLP's shapes: an estimate)",
         "core_bandwidth_gbs": "~10 GB/s from DRAM: between 7.1 GB/s (its 10 line-fill buffers of 64 B per "
                               "~90 ns) and 11.4 (the L2's 16 outstanding prefetches): an estimate",
         "llc_gbs": "~54 GB/s from L3: 16 B/cycle at 3.4 GHz, half the 32 B/cycle ring port: an estimate",
         "local_latency_ns remote_latency_ns": "90 / 150 ns: typical Intel MLC figures for 2-socket Ivy Bridge-EP "
                                               "(not a measurement of this machine)",
         "llc_replacement": "the L3's adaptive policy is undocumented; \"lru\" (a cliff once the socket's footprint "
                            "overflows it) is what the thesis' own Table 4.3 shows: 8 threads on one socket "
                            "converge slower than 4 on it for every algorithm, and 4 + 4 over two sockets faster — "
                            "scenarios/ek2021/README.md gives both policies",
         "quantum_s context_switch_s": "4 ms, 3 µs: the scheduler figures the presets shared before any was "
                                       "measured (uncited); the measured corpus machine has 3.97 ms and 2.37 µs",
         "nodes": "one machine: the sockets share memory",
     }, notes="With these numbers S1's NUMA/UMA epoch-time ratio is 1.1-1.4, not the thesis' 1.6-1.8; no value "
               "inside the physical ranges above closes it (benchmarks/ek_numa.md).")),
    (Machine("xeon-e5-2698-v4", 2, 20, 2, local_latency_ns=90, remote_latency_ns=140,
             mem_bandwidth_gbs=62, link_bandwidth_gbs=38.4, gflops_per_core=26,
             quantum_s=4e-3, context_switch_s=3e-6, core_bandwidth_gbs=10.0,
             base_ghz=2.2, llc_mb=50.0, l2_kb=256, llc_gbs=35.2),
     Cited("The CPU of the Lopez et al. 2020 study (§IV: an NVIDIA DGX-1, \"2 × 20 cores Intel Xeon CPU E5-2698 "
           "v4 clocked at 2.2 GHz\"), Broadwell-EP.", {
               "sockets cores_per_socket threads_per_core base_ghz llc_mb l2_kb":
                   "Intel ARK: 20 cores / 40 threads a socket, 2.2 GHz base, 50 MB L3 a socket, 256 KB L2 a core",
               "turbo_ghz": "not modelled: the bins with k busy cores are not public for this SKU beyond the "
                            "3.6 GHz maximum (Intel ARK)",
               "mem_bandwidth_gbs": "62 GB/s sustained a socket: 4 channels of DDR4-2400 are 76.8 GB/s peak "
                                    "(Intel ARK) and STREAM reaches ~80% of DDR4 peak on Broadwell-EP (an estimate)",
               "link_bandwidth_gbs": "two QPI links at 9.6 GT/s (Intel ARK): 19.2 GB/s each way each, 38.4 between "
                                     "the sockets",
               "gflops_per_core": "26 GFLOP/s: 74% of the 16 double-precision flops/cycle AVX2-FMA peak at base "
                                  "clock, the same ratio as the Ek preset: an estimate",
               "core_bandwidth_gbs": "~10 GB/s from DRAM (10 line-fill buffers over ~90 ns): an estimate",
               "llc_gbs": "~35 GB/s from L3: 16 B/cycle at 2.2 GHz, an estimate",
               "local_latency_ns remote_latency_ns": "90 / 140 ns: typical Intel MLC figures for 2-socket "
                                                     "Broadwell-EP (not a measurement of this machine)",
               "llc_replacement": "the default (\"random\"): the policy is undocumented",
               "quantum_s context_switch_s": "4 ms, 3 µs: the scheduler figures the presets shared before any was "
                                             "measured (uncited)",
               "nodes": "one machine: the sockets share memory",
           })),
    (Machine("laptop-2core", 1, 2, 1, local_latency_ns=211, remote_latency_ns=211,
             mem_bandwidth_gbs=29.2, link_bandwidth_gbs=29.2, gflops_per_core=24.7,
             quantum_s=3.97e-3, context_switch_s=2.37e-6, core_bandwidth_gbs=27.7),
     Cited("The default machine (no [machine] and no calibrated profile): the hardware figures of a measured "
           "machine, " + MILAN_CORE + ", rounded to three digits — its calibrated profile's [machine] table. The "
           "name is historical; `machine.preset = \"amd_epyc_2vcpu\"` simulates that machine with all its "
           "measured tables.", {
               "sockets cores_per_socket threads_per_core": "the corpus entry's [machine] table: 1 socket, 2 "
                                                            "vCPUs (sysfs topology)",
               "local_latency_ns remote_latency_ns": "211 ns: the calibration's pointer chase over 256 MiB "
                                                     "([memory] latency_ns, through the guest's nested paging); "
                                                     "one NUMA node, so remote = local",
               "mem_bandwidth_gbs link_bandwidth_gbs": "29.2 GB/s: the calibration's [copy] (2 threads copying "
                                                       "8 MiB each, bytes read + written); one socket, so the "
                                                       "link is the same figure",
               "gflops_per_core": "24.7 GFLOP/s: the calibrated gradient's flops over its median time ([machine] "
                                  "gflops_per_core, the largest calibrated workload)",
               "quantum_s context_switch_s": "3.97 ms, 2.37 µs: [scheduler] (two spinning threads pinned to one "
                                             "CPU; sched_yield ping-pong), kernel 6.18 EEVDF",
               "core_bandwidth_gbs": "27.7 GB/s: the calibration's [copy] with one thread (bytes read + written), "
                                     "the figure the simulator takes for a calibrated machine's core "
                                     "(sim/profile_tables.profile_machine)",
               "base_ghz turbo_ghz llc_mb l2_kb llc_gbs llc_replacement":
                   NOT_MODELLED + ": a guest does not see its clocks, and the sockets model needs them; the "
                   "calibrated profile's own tables (simulated by `preset = \"amd_epyc_2vcpu\"`) time caches instead",
               "nodes": "one machine",
           }, notes="`tests/test_presets.py` holds these numbers to the corpus entry's.")),
    (Machine("epyc-7763-2s", 2, 64, 2, local_latency_ns=110, remote_latency_ns=200,
             mem_bandwidth_gbs=164, link_bandwidth_gbs=144, gflops_per_core=29.0,
             quantum_s=3.97e-3, context_switch_s=2.37e-6, core_bandwidth_gbs=12.8,
             base_ghz=2.45, l2_kb=512),
     Cited("A two-socket AMD EPYC 7763 'Milan' (Zen 3) server, 64 cores a socket: the node of LUMI-C and of "
           "Perlmutter's CPU partition.", {
               "sockets cores_per_socket threads_per_core base_ghz l2_kb":
                   LUMI_C + ": 2 × 64 cores, 2-way SMT, 2.45 GHz base, 512 KiB L2 a core",
               "turbo_ghz": "not modelled: AMD publishes the 3.5 GHz maximum boost (" + LUMI_C + ") but not the "
                            "clock with k busy cores",
               "llc_mb llc_gbs llc_replacement":
                   "not modelled: the 256 MiB L3 a socket is 8 slices of 32 MiB, each shared by one CCD's 8 cores "
                   "(" + LUMI_C + "), not the one cache shared by the socket's cores that simasgd/sim/sockets.py "
                   "models",
               "mem_bandwidth_gbs": "164 GB/s sustained a socket: 8 channels of DDR4-3200 are 204.8 GB/s peak a "
                                    "socket (" + LUMI_C + ") × 0.8, " + STREAM_80,
               "link_bandwidth_gbs": "144 GB/s each way: 4 xGMI links of 16 lanes at 18 GT/s, 36 GB/s each way "
                                     "each (AMD's 2-socket platform, as recalled: not verifiable offline; 36 GB/s "
                                     "a link is also the peak LUMI's documentation gives for the links of the Zen 3 "
                                     "'Trento' I/O die to its GPUs, checked)",
               "gflops_per_core": "29 GFLOP/s: 16 double-precision flops/cycle (AVX2 FMA, " + LUMI_C + ") × "
                                  "2.45 GHz = 39.2 peak, × 0.74 — " + ESTIMATE_GEMM,
               "core_bandwidth_gbs": "12.8 GB/s: one Zen 3 Milan core's copy from DRAM as measured on "
                                     + MILAN_CORE + " ([copy_by_size] at 128 MiB, bytes read + written; a "
                                     "virtual machine sharing its host)",
               "local_latency_ns remote_latency_ns": "110 / 200 ns: the order of magnitude reported for 2-socket "
                                                     "Zen 3 EPYC in NPS1 (AnandTech's Milan review measures it; "
                                                     "its figures could not be read here): an estimate",
               "quantum_s context_switch_s": SCHEDULER,
               "nodes": "one machine: the sockets share memory",
           })),
    (Machine("xeon-8380-2s", 2, 40, 2, local_latency_ns=90, remote_latency_ns=140,
             mem_bandwidth_gbs=164, link_bandwidth_gbs=67.2, gflops_per_core=54.5,
             quantum_s=3.97e-3, context_switch_s=2.37e-6, core_bandwidth_gbs=10.0,
             base_ghz=2.3, llc_mb=60.0, l2_kb=1280, llc_gbs=36.8),
     Cited("A two-socket Intel Xeon Platinum 8380 'Ice Lake-SP' server, 40 cores a socket.", {
               "sockets cores_per_socket threads_per_core base_ghz llc_mb":
                   "Intel ARK, Xeon Platinum 8380: 40 cores / 80 threads, 2.30 GHz base, 60 MB L3 a socket, as "
                   "recalled: not verifiable offline",
               "l2_kb": "1.25 MB L2 a core (Ice Lake-SP's Sunny Cove server core; Intel's 3rd Gen Xeon Scalable "
                        "architecture brief), as recalled: not verifiable offline",
               "turbo_ghz": "not modelled: Intel ARK gives the 3.40 GHz maximum turbo, not the clock with k busy "
                            "cores",
               "mem_bandwidth_gbs": "164 GB/s sustained a socket: 8 channels of DDR4-3200 (Intel ARK) are "
                                    "204.8 GB/s peak a socket, × 0.8 — " + STREAM_80,
               "link_bandwidth_gbs": "67.2 GB/s each way: 3 UPI links at 11.2 GT/s (Intel ARK), 22.4 GB/s each "
                                     "way each (2 bytes a transfer, the convention of the E5 presets' QPI)",
               "gflops_per_core": "54.5 GFLOP/s: 32 double-precision flops/cycle (two AVX-512 FMA units) × 2.3 GHz "
                                  "= 73.6 peak, × 0.74 — " + ESTIMATE_GEMM + "; AVX-512's lower license clock is "
                                  "not modelled",
               "core_bandwidth_gbs": "~10 GB/s from DRAM: as the E5 presets (Sunny Cove's 12 line-fill buffers over "
                                     "~100 ns give 7.7 GB/s, its L2 prefetcher more): an estimate",
               "llc_gbs": "~37 GB/s from L3: 16 B/cycle at 2.3 GHz, the E5 presets' rule: an estimate",
               "llc_replacement": "the default (\"random\"): the policy is undocumented",
               "local_latency_ns remote_latency_ns": "90 / 140 ns: the order of magnitude of Intel MLC figures for "
                                                     "2-socket Xeon Scalable: an estimate, not a measurement",
               "quantum_s context_switch_s": SCHEDULER,
               "nodes": "one machine: the sockets share memory",
           })),
    (Machine("dgx-h100-host", 2, 56, 2, local_latency_ns=110, remote_latency_ns=190,
             mem_bandwidth_gbs=225, link_bandwidth_gbs=128, gflops_per_core=47.4,
             quantum_s=3.97e-3, context_switch_s=2.37e-6, core_bandwidth_gbs=10.0,
             base_ghz=2.0, llc_mb=105.0, l2_kb=2048, llc_gbs=32.0),
     Cited("The host CPUs of an NVIDIA DGX H100 (8 × H100 SXM5 on NVLink 4 / NVSwitch): 2 × Intel Xeon Platinum "
           "8480C 'Sapphire Rapids', 56 cores a socket.", {
               "sockets cores_per_socket": "2 × Xeon Platinum 8480C, 56 cores each: the DGX H100 User Guide's "
                                           "hardware overview (as recalled), and NVIDIA's MLCommons system "
                                           "description of its 8 × H200 SXM node on the same host "
                                           "(host_processor_model_name \"Intel(R) Xeon(R) Platinum 8480C\", 56 "
                                           "cores, 2 a node: checked)",
               "threads_per_core": "2 (Hyper-Threading; Intel ARK for the 8480+, the public twin of the custom "
                                   "8480C), as recalled",
               "base_ghz turbo_ghz": "2.0 GHz base (DGX H100 User Guide: 2.0 / 2.9 / 3.8 GHz base / all-core / max "
                                     "turbo, as recalled); the clock with k busy cores between those two points is "
                                     "not public: turbo not modelled",
               "llc_mb l2_kb": "105 MB L3 a socket, 2 MB L2 a core (Intel ARK, Xeon Platinum 8480+; Golden Cove "
                               "server core), as recalled: not verifiable offline",
               "mem_bandwidth_gbs": "225 GB/s sustained a socket: the node's 2 TB are 32 DIMMs (the same MLCommons "
                                    "description: \"32x 64GB\", checked; DGX H100's 2 TB likewise) on 16 "
                                    "channels, two a channel, where Sapphire Rapids runs DDR5 at 4400 MT/s, not "
                                    "4800 (ai-hpc.org's "
                                    "STREAM guide for 2 × Xeon 8470: 32 DIMMs at DDR5-4400, checked): 8 × 4.4 GT/s "
                                    "× 8 B = 281.6 GB/s peak a socket, × 0.8 — STREAM reaches ~80% of peak (the "
                                    "ratio the DDR4 presets take): an estimate",
               "link_bandwidth_gbs": "128 GB/s each way: 4 UPI 2.0 links at 16 GT/s, 32 GB/s each way each (Intel "
                                     "ARK, 8480+), as recalled: not verifiable offline",
               "gflops_per_core": "47.4 GFLOP/s: 32 double-precision flops/cycle (two AVX-512 FMA units) × 2.0 GHz "
                                  "= 64 peak, × 0.74 — " + ESTIMATE_GEMM,
               "core_bandwidth_gbs": "~10 GB/s from DRAM, as the other Intel presets: an estimate",
               "llc_gbs": "~32 GB/s from L3: 16 B/cycle at 2.0 GHz, the E5 presets' rule: an estimate",
               "llc_replacement": "the default (\"random\"): the policy is undocumented",
               "local_latency_ns remote_latency_ns": "110 / 190 ns: the order of magnitude reported for 2-socket "
                                                     "Sapphire Rapids: an estimate, not a measurement",
               "quantum_s context_switch_s": SCHEDULER,
               "nodes": "one machine: the sockets share memory",
           }, notes="This is the node's CPU side only. The simulator's GPU machine (`h100`, simasgd/sim/gpu.py) is "
                    "one GPU: 8 GPUs sharing NVLink are not modelled. What can be run: the host's CPU threads "
                    "(this preset), one H100 whose streams share its SMs (`preset = \"h100\"`), and messages at "
                    "NVLink 4 rates between workers (`[network] preset = \"nvlink4\"`) — with `h100` that is "
                    "workers on ONE GPU's SMs talking at NVLink speed, not 8 GPUs.")),
    (Machine("cluster-1024", 1024, 1, 1, local_latency_ns=110, remote_latency_ns=110,
             mem_bandwidth_gbs=164, link_bandwidth_gbs=164, gflops_per_core=29.0,
             quantum_s=3.97e-3, context_switch_s=2.37e-6, core_bandwidth_gbs=12.8,
             base_ghz=2.45, llc_mb=32.0, l2_kb=512, nodes=True),
     Cited("1,024 nodes, one worker each: every socket is a node of its own (nodes = true), one core of an AMD "
           "EPYC 7763 — a LUMI-C node (2 × EPYC 7763, one 100 Gb/s NIC) of which a one-thread worker uses one "
           "core. Pair it with `[network] preset = \"100g_ib\"` or `\"100gbe\"` (100 Gb/s) or `\"25gbe\"`.", {
               "sockets cores_per_socket threads_per_core nodes":
                   "the model, not a datasheet: 1,024 nodes of one core each, so that every placement (uma, numa, "
                   "os, a list) puts each of 1,024 workers on its own node; nodes share no memory",
               "base_ghz l2_kb": LUMI_C + ": 2.45 GHz base, 512 KiB L2 a core",
               "turbo_ghz": "not modelled, as for epyc-7763-2s",
               "llc_mb": "32 MiB: the L3 of the CCD the worker's core sits on (" + LUMI_C + "), all its own with one "
                         "busy core on the node",
               "llc_gbs llc_replacement": "not modelled: no cache rate from L3 is cited for Zen 3 here",
               "mem_bandwidth_gbs": "164 GB/s: the sustained figure of the socket the worker runs on, as "
                                    "epyc-7763-2s (an estimate); one core draws at most core_bandwidth_gbs of it",
               "link_bandwidth_gbs remote_latency_ns": "not used: nodes share no memory (every worker's reads and "
                                                       "updates are of its own node's memory, "
                                                       "simasgd/sim/nodes.py); set equal to the local figures",
               "local_latency_ns": "110 ns, as epyc-7763-2s (an estimate)",
               "gflops_per_core core_bandwidth_gbs": "as epyc-7763-2s: 29 GFLOP/s (an estimate), 12.8 GB/s "
                                                     "(measured on a Milan core)",
               "quantum_s context_switch_s": SCHEDULER,
           }, notes="Only the distributed algorithms run on it (param_server, easgd, eawild, sync, backup, keuper, "
                    "simuparallel), over a `[network]`: without one, or for a shared-memory algorithm, the "
                    "simulator refuses the run (there is no memory shared between nodes). Modelled: each worker's "
                    "gradient on its node's core, its local steps through its node's memory, every message through "
                    "the NICs and the servers' links of simasgd/sim/network.py. Not modelled: the switch fabric "
                    "(no congestion inside it: a message waits only for the two NICs), the node's other cores "
                    "(idle), a server node's CPU (a push's update costs nothing on it).")),
)
PRESETS: dict[str, Machine] = {m.name: m for m, _ in _CATALOGUE}
CITATIONS: dict[str, Cited] = {m.name: c for m, c in _CATALOGUE}

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
    return from_profile(doc, "this", path)


def from_profile(profile: Profile, name: str, where: str | Path) -> Machine:
    """The machine a calibrated profile describes: its ``[machine]`` table's keys, and the profile itself for the
    simulator's tables. One function for ``this`` (:func:`load_profile`) and the corpus machines
    (:func:`corpus_machine`); ``where`` names the profile in errors."""
    keys = {f.name for f in fields(Machine)} - {"name", "profile"}
    m = machine_keys(profile)
    missing = {k for k in keys if next(f for f in fields(Machine) if f.name == k).default is MISSING} - set(m)
    if missing:
        raise MachineError(f"{where}: [machine] lacks {sorted(missing)}")
    return Machine(name=name, profile=profile, **{k: m[k] for k in keys if k in m})


def machine_keys(profile: Profile) -> dict[str, Any]:
    """The keys the profile's ``[machine]`` table gives (its calibrated ones and any other key of
    :class:`Machine`), None values left out."""
    return {} if profile.machine is None else profile.machine.model_dump(exclude_none=True)


CORPUS_ENV = "SIMASGD_CORPUS"
CORPUS_SUFFIX = corpus_files.SUFFIX


def corpus_folder() -> Path:
    """The fidelity corpus whose machines are presets by name: ``SIMASGD_CORPUS``, else this checkout's
    ``corpus/`` (else ``./corpus``). ``simasgd corpus`` reads the same folder by default."""
    if os.environ.get(CORPUS_ENV):
        return Path(os.environ[CORPUS_ENV])
    shipped = Path(__file__).resolve().parents[2] / "corpus"
    return shipped if shipped.is_dir() else Path("corpus")


def corpus_names() -> list[str]:
    """The measured machines of the corpus (each entry's file name, which is its name), each a preset: its
    calibrated profile simulated as ``this`` simulates this machine's."""
    folder = corpus_folder()
    if not folder.is_dir():
        return []
    return sorted(p.name[:-len(CORPUS_SUFFIX)] for p in folder.glob(f"*{CORPUS_SUFFIX}"))


def corpus_path(name: str) -> Path:
    return corpus_folder() / f"{name}{CORPUS_SUFFIX}"


def corpus_machine(name: str) -> Machine:
    """The corpus machine ``name``: its entry's calibrated profile as the corpus scorer simulates it — written
    as the profile file it would be (``profile.to_toml``) and read back as :func:`load_profile` reads one."""
    return _corpus_profile(name)[0]


def _corpus_profile(name: str) -> tuple[Machine, str]:
    """(the machine, the sha256 of its profile's text: what the scorer's profile file would hash to)."""
    path = corpus_path(name)
    if not path.is_file():
        raise MachineError(f"machine.preset = \"{name}\": no corpus entry {path}; corpus machines: "
                           f"{', '.join(corpus_names()) or 'none'}")
    st = path.stat()
    return _read_corpus(str(path.resolve()), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _read_corpus(path: str, mtime_ns: int, size: int) -> tuple[Machine, str]:
    """One corpus entry's machine, read once per version of its file (an entry is ~0.5 MB of gzipped cells)."""
    doc = corpus_files.read(Path(path), MachineError)
    name = Path(path).name[:-len(CORPUS_SUFFIX)]
    if doc.get("name") != name:
        raise MachineError(f"{path}: the entry is machine {doc.get('name')!r}, its file says {name!r}; rename the "
                           f"file {doc.get('name')}{CORPUS_SUFFIX}")
    text = profile_format.to_toml(doc["profile"])
    where = f"{path} (its profile)"
    try:
        profile = profile_format.loads(text, where)
    except profile_format.ProfileError as e:
        raise MachineError(str(e)) from None
    return from_profile(profile, name, where), hashlib.sha256(text.encode()).hexdigest()


def is_corpus(cfg: MachineConfig) -> bool:
    """The scenario's machine is a corpus machine by name (not a built-in preset, ``this`` or a GPU)."""
    name = preset_of(cfg)
    return name not in PRESETS and name not in PROFILE_PRESETS and name not in gpus.names() and name in corpus_names()


def profile_digest(cfg: MachineConfig) -> str | None:
    """The sha256 of the calibrated profile a run on ``cfg`` reads: this machine's file (``this``, ``this-gpu``),
    a corpus machine's profile text, or None (a preset)."""
    name = preset_of(cfg)
    if name in PROFILE_PRESETS:
        path = profile_path()
        return profile_format.digest(path) if path.is_file() else None
    if is_corpus(cfg):
        return _corpus_profile(name)[1]
    return None


def preset_names() -> list[str]:
    """Every name ``machine.preset`` takes: the CPU presets, ``this``, the corpus machines, the GPU presets."""
    return [*PRESETS, "this", *corpus_names(), *gpus.names()]


@functools.lru_cache(maxsize=8)
def _read_profile(path: str, mtime_ns: int, size: int) -> Profile:
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
    elif is_corpus(cfg):
        out["corpus"] = str(corpus_path(name))
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
    where = (f", calibrated profile {record['profile']}" if record.get("profile") else
             f", the calibrated profile of corpus entry {record['corpus']}" if record.get("corpus") else "")
    return f"machine: {name} (the scenario's [machine]{where}{keys})"


def resolve(cfg: MachineConfig) -> Machine:
    """The scenario's machine: :func:`preset_of`, with any keys the scenario gives overriding it. A name is a
    CPU preset, ``this`` (the calibrated profile), or a corpus machine (:func:`corpus_machine`)."""
    name = preset_of(cfg)
    if name == "this":
        base = load_profile()
    elif name in PRESETS:
        base = PRESETS[name]
    elif is_gpu(cfg):
        raise MachineError(f"machine.preset = \"{name}\" is a GPU (machine kind \"gpu\", simasgd/sim/gpu.py): "
                           f"the sim backend models it; CPU presets: {', '.join([*PRESETS, 'this', *corpus_names()])}")
    elif name in corpus_names():
        base = corpus_machine(name)
    else:
        measured = corpus_names()
        corpus = (f"; measured machines of the corpus {corpus_folder()}: {', '.join(measured)}" if measured else
                  f"; no measured machine in the corpus {corpus_folder()}")
        raise MachineError(f"machine.preset = \"{name}\": unknown preset; allowed: "
                           f"{', '.join([*PRESETS, 'this', *gpus.names()])}{corpus}")
    given = {f.name: getattr(cfg, f.name) for f in fields(Machine)
             if hasattr(cfg, f.name) and f.name != "name" and getattr(cfg, f.name) is not None}
    return replace(base, **given) if given else base


def check_nodes(m: Machine, algorithm: str, network: Any) -> None:
    """A cluster (``nodes``) shares no memory between its nodes: refuse, in one line, a run that would need it —
    no ``[network]`` (or ``preset = "none"`` without a bandwidth), or an algorithm that sends no message."""
    if not m.nodes:
        return
    from simasgd.spec.algorithms import NETWORKED

    if algorithm not in NETWORKED:
        raise MachineError(f"machine {m.name}: its nodes share no memory, and {algorithm} is a shared-memory "
                           f"algorithm; on a cluster run a distributed one: {', '.join(sorted(NETWORKED))}")
    if network is None or (network.preset == "none" and network.bandwidth_gbps is None):
        raise MachineError(f"machine {m.name}: its nodes share no memory; give the network they talk over "
                           f"([network] preset = \"100g_ib\", \"100gbe\", \"25gbe\", ...)")


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
