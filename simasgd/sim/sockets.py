"""What the threads of one socket share besides memory bandwidth: the clock and the last-level cache.

Two mechanisms of a multi-socket machine, both from the preset's public
specifications (``simasgd/machines/machine.py`` says where each number comes from),
both only where a worker's gradient time is *derived* from the workload's
flops (a calibrated profile or ``[timing]`` already contains them):

**Turbo.** A core's clock depends on how many cores of its socket are busy:
Intel's turbo bins give one frequency per count of active cores
(``Machine.turbo_ghz[k-1]``). ``gflops_per_core`` is the sustained rate at the
base clock, so a gradient computed with ``k`` busy cores on the socket takes
``base_ghz / turbo_ghz[k-1]`` of its base-clock time. Every worker counts as
busy: it computes or spins on a lock; SMT siblings share one core.

**Last-level cache capacity.** A socket's L3 holds what its threads work on:
per worker a private model copy and a gradient (``2·d`` elements), the
activations and their deltas of one mini-batch, the mini-batch itself and
the GEMM's packed operand blocks (sized to the core's L2); plus the shared
model once. For Ek's MLP at B = 64 in double precision that is 3.65 MiB a
worker: 7 workers fill one 25 MiB L3 to 26.6 MiB, 8 to 30.2, 4 to 15.6.
When that footprint ``F`` exceeds the capacity ``C`` a fraction of the gradient's traffic misses and streams from DRAM
through the
socket's :class:`~simasgd.sim.memory.Bandwidth` (shared with the socket's
other misses, each stream at most what one core can pull). The hit ratio of
a footprint reused cyclically depends on the replacement policy, a physical
property of the cache (``Machine.llc_replacement``):

- ``random``: the steady state of random replacement over a uniformly reused
  footprint, ``h = min(1, C/F)``;
- ``lru``: least-recently-used over a cyclic footprint, ``h = 1`` while it
  fits and ``0`` once it does not (the LRU cliff).

The gradient's traffic to the cache is ``4·d`` elements (the weights read
forward and backward; the gradient written, a line fill and a write-back)
plus the mini-batch read twice (forward and the weight gradient); a read
writes the private copy (``2·d``), an update reads the gradient (``d``).
Their missing part streams from the socket's DRAM. Misses are not
overlapped with compute: the bound where the core stalls on each one.

The shared model lives in the home socket's L3: with random replacement at
that socket's hit ratio; under LRU it stays while its reuse distance — the
footprint over the 2k uses a cycle of the socket's k workers — fits, so the
private buffers thrash before it does. Workers there copy and update the hit
part at the L3's per-core rate ``llc_gbs`` (a fixed time: each core reads its
own slices) and the rest through DRAM; workers on other sockets move it over the link.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from simasgd.machines.machine import Machine
from simasgd.spec.scenario import WorkloadConfig


@dataclass(frozen=True)
class Footprint:
    private_bytes: float   # one worker's working set besides the shared model
    traffic_bytes: float   # what one gradient moves between the core and the last-level cache
    read_bytes: float      # a read's traffic to private buffers: the local copy written (fill + write-back)
    update_bytes: float    # an update's: the gradient read


def footprint(wl: WorkloadConfig, dim: int, itemsize: int, packing_bytes: float = 0.0) -> Footprint | None:
    """The working set of one worker of a dense model (mlp, linear); None for other workloads.

    ``packing_bytes``: the GEMM's packed operand blocks (BLAS and Eigen size them to the core's L2).
    """
    if wl.model == "mlp" and wl.layers:
        widths = list(wl.layers)
    elif wl.model == "linear" and wl.features:
        widths = [int(wl.features), 1]
    else:
        return None
    b = wl.batch_size
    batch = b * widths[0] * itemsize
    # each layer's pre-activation and output, and the gradient with respect to its input
    # (MiniDNN's FullyConnected keeps m_z, m_a and m_din: the first layer's is B × 784)
    activations = b * (2 * sum(widths[1:]) + sum(widths[:-1])) * itemsize
    model = dim * itemsize
    return Footprint(private_bytes=2 * model + activations + batch + packing_bytes,
                     traffic_bytes=4 * model + 2 * batch, read_bytes=2 * model, update_bytes=model)


def hit_ratio(footprint_bytes: float, capacity_bytes: float, replacement: str) -> float:
    if footprint_bytes <= capacity_bytes:
        return 1.0
    if replacement == "lru":
        return 0.0
    return capacity_bytes / footprint_bytes


@dataclass(frozen=True)
class SocketShares:
    """Per worker: its gradient's clock factor, the bytes each gradient misses, θ's L3 hit ratio."""

    slowdown: list[float]
    miss_bytes: list[float]
    own_miss: list[dict[int, float]]  # per worker: a read's (2) and an update's (3) private bytes that miss
    model_hit: list[float]         # 0 where the worker's socket is not θ's home
    footprint_bytes: list[float]   # per socket
    hit: list[float]               # per socket


def active_cores(machine: Machine, cpus: list[int | None], sockets: list[int]) -> list[int]:
    """Busy physical cores per socket: distinct pinned cores, or (unpinned) threads up to the core count."""
    pinned: dict[int, set[int]] = {}
    loose: Counter[int] = Counter()
    for cpu, s in zip(cpus, sockets, strict=False):
        if cpu is None:
            loose[s] += 1
        else:
            pinned.setdefault(s, set()).add(cpu % machine.cores)  # SMT siblings: one core
    return [min(machine.cores_per_socket, len(pinned.get(s, ())) + loose[s]) for s in range(machine.sockets)]


def turbo_factor(machine: Machine, active: int) -> float:
    """Base-clock time / time at the clock ``active`` busy cores of a socket run at (1 = no turbo data)."""
    if machine.base_ghz <= 0 or not machine.turbo_ghz or active <= 0:
        return 1.0
    ghz = machine.turbo_ghz[min(active, len(machine.turbo_ghz)) - 1]
    return machine.base_ghz / ghz


def shares(machine: Machine, cpus: list[int | None], sockets: list[int], fp: Footprint | None,
           model_bytes: float) -> SocketShares:
    n = len(sockets)
    active = active_cores(machine, cpus, sockets)
    slowdown = [turbo_factor(machine, active[s]) for s in sockets]
    per_socket = Counter(sockets)
    cap = machine.llc_mb * 2**20
    if fp is None or cap <= 0:
        return SocketShares(slowdown, [0.0] * n, [{}] * n, [0.0] * n, [0.0] * machine.sockets,
                            [1.0] * machine.sockets)
    used = [per_socket[s] * fp.private_bytes + (model_bytes if per_socket[s] else 0.0)
            for s in range(machine.sockets)]
    hit = [hit_ratio(f, cap, machine.llc_replacement) for f in used]
    miss = [(1.0 - hit[s]) * fp.traffic_bytes for s in sockets]
    own = [{2: (1.0 - hit[s]) * fp.read_bytes, 3: (1.0 - hit[s]) * fp.update_bytes} for s in sockets]
    # θ is touched twice a cycle by every worker of its home socket, so under LRU its reuse distance
    # (bytes touched between two uses) is the socket's footprint over those 2k uses, not all of it.
    k0 = per_socket[0]
    theta = hit[0] if machine.llc_replacement != "lru" or not k0 else hit_ratio(used[0] / (2 * k0), cap, "lru")
    model_hit = [theta if s == 0 else 0.0 for s in sockets]
    return SocketShares(slowdown, miss, own, model_hit, used, hit)
