"""The ``gpu`` backend's two modes in the simulator: workers resident on the device, and streams.

Each worker is one thread block (``[gpu] threads_per_worker`` threads) looping read → gradient →
update, as ``executors/gpu/kernels.py`` runs it. What the blocks share:

- **their SM**: worker ``w``'s block runs on SM ``w mod sms`` (the block scheduler hands a launch's
  blocks to the SMs in turn). Alone on its SM a block computes its gradient at
  ``block.gradient_flops_per_s`` (the workload's flops per block-second, measured per workload:
  ``simasgd.machines.profile.workload_key``);
  the blocks on one SM share its sustained rate ``efficiency × clock × fp32_lanes_per_sm × 2`` (at least
  a lone block's rate), each getting ``min(its own rate, the SM's rate × its share)``
  (:class:`simasgd.sim.gpu.SMs`, one per SM);
- **device memory**: a read (θ into the worker's copy: 2 vectors moved at ``block.copy_bytes_per_s``
  alone) and an update (the step over θ: θ, g and θ' moved, and the velocity in and out with momentum,
  at ``block.step_bytes_per_s`` alone) go through ``mem_bandwidth_gbs``, shared the same way;
- **the lock and CAS words**: mutex's spin lock and Leashed's CAS on the latest index are the sim
  algorithms' own primitives (a serialised critical section, retries), each access costing
  ``atomic_latency_s``; sync's round (a version per N gradients) computes at θ itself, no copy, and its
  step is split over the N blocks, each stepping 1/N of θ with the N gradients between two device-wide
  barriers (each an arrival and a release).

Staleness is not modelled: it follows from the order of the events, as on the CPU simulator (the
version read at the read, ``staleness = version − 1 − read_version``), with the workers of
``simasgd/sim/algorithms/`` unchanged.

Streams mode adds the host (Lopez et al. 2020 §IV-B, one attempt per launch): before each attempt the
worker's host thread holds the interpreter lock for ``host_launch_s`` (the prepared ``cuLaunchKernel``
call), then the launch reaches the device and its completion reaches the host in the rest of
``launch_latency_s``. The host threads share one lock (a SimPy resource, FIFO).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from simasgd.machines.profile_model import GpuBlockTable
from simasgd.sim.gpu import Gpu, GpuPlatform, SMs
from simasgd.spec import algorithms
from simasgd.spec.scenario import GpuConfig, Scenario

# A device-scope atomic's round trip (SM → L2 → SM) where the profile has none: the order of a
# microsecond on recent NVIDIA GPUs (an assumption; `atomic_latency_s` in [gpu.block] overrides it).
ATOMIC_LATENCY_S = 1e-6


@dataclass(frozen=True)
class BlockCosts:
    """A resident worker's rates alone on an idle GPU (the profile's ``[gpu.block]`` table)."""

    threads: int                                # threads per block the rates were measured at
    gradient_flops_per_s: Mapping[str, float]   # workload (profile.workload_key) → gradient flops per block-second
    copy_bytes_per_s: float                     # θ bytes one block copies per second (the read)
    step_bytes_per_s: float                     # θ bytes one block steps per second (the update)
    host_launch_s: float = 0.0                  # streams: the host's launch call, holding the interpreter lock
    atomic_latency_s: float = ATOMIC_LATENCY_S  # one device-scope atomic on a shared word
    gradient_cv: float | None = None            # a block's gradient time, attempt to attempt (None: [sim] gradient_cv)

    @staticmethod
    def from_table(table: GpuBlockTable | Mapping[str, Any]) -> BlockCosts:
        """The rates of a ``[gpu.block]`` table (as the profile holds it, or as the calibrator measures it)."""
        t = table if isinstance(table, GpuBlockTable) else GpuBlockTable.model_validate(dict(table))
        if t.threads is None or t.gradient_flops_per_s is None or t.copy_bytes_per_s is None \
                or t.step_bytes_per_s is None:
            missing = [k for k in ("threads", "gradient_flops_per_s", "copy_bytes_per_s", "step_bytes_per_s")
                       if getattr(t, k) is None]
            raise ValueError(f"[gpu.block] lacks {missing}")
        return BlockCosts(threads=int(t.threads),
                          gradient_flops_per_s={str(k): float(v) for k, v in t.gradient_flops_per_s.items()},
                          copy_bytes_per_s=float(t.copy_bytes_per_s), step_bytes_per_s=float(t.step_bytes_per_s),
                          host_launch_s=0.0 if t.host_launch_s is None else float(t.host_launch_s),
                          atomic_latency_s=ATOMIC_LATENCY_S if t.atomic_latency_s is None
                          else float(t.atomic_latency_s),
                          gradient_cv=None if t.gradient_cv is None else float(t.gradient_cv))


def block_costs(gpu: Gpu) -> BlockCosts | None:
    """The calibrated ``[gpu.block]`` table of the GPU's profile, or None (presets have none)."""
    table = None if gpu.profile is None or gpu.profile.gpu is None else gpu.profile.gpu.block
    return None if table is None else BlockCosts.from_table(table)


def sm_flops_per_s(gpu: Gpu) -> float:
    """One SM's sustained gradient rate: the profile's measured fraction of its fp32 peak."""
    return gpu.clock_ghz * 1e9 * gpu.fp32_lanes_per_sm * 2 * gpu.efficiency


def resident_max(gpu: Gpu, threads: int) -> int:
    """Blocks the GPU holds at once: SMs × blocks of ``threads`` an SM holds (threads only: registers and
    shared memory may allow fewer, as the backend's occupancy query says)."""
    return gpu.sms * max(1, gpu.threads_per_sm // threads)


class ResidentPlatform(GpuPlatform):
    """Resident blocks: :class:`simasgd.sim.costs.Platform`'s interface, each step priced as above."""

    def __init__(self, env: simpy.Environment, sc: Scenario, gpu: Gpu, costs: BlockCosts, run: int, dim: int,
                 itemsize: int, flops_per_sample: float, kind: str) -> None:
        super().__init__(env, sc, gpu, run, dim, itemsize, flops_per_sample, None, check=False)
        threads = (sc.gpu or GpuConfig()).threads_per_worker
        if threads != costs.threads:
            raise ValueError(f"[gpu] threads_per_worker = {threads}: the profile's [gpu.block] "
                             f"rates are for blocks of {costs.threads} threads; calibrate at this size")
        if kind not in costs.gradient_flops_per_s:
            raise ValueError(f"the profile's [gpu.block] has no gradient rate for workload {kind!r} (has "
                             f"{sorted(costs.gradient_flops_per_s)}): measure it with one resident worker")
        cap = resident_max(gpu, costs.threads)
        if self.n > cap:
            raise ValueError(f"{self.n} workers: the GPU holds {cap} resident blocks of {costs.threads} threads")
        self.costs = costs
        if costs.gradient_cv is not None:  # measured on this GPU: a block's own spread, not a CPU's default
            self.cv = costs.gradient_cv
        self.block_flops = costs.gradient_flops_per_s[kind]
        # An SM sustains at least what one block was measured computing on it alone: `efficiency` (a short
        # FMA kernel, its launch and synchronisation included) can fall below a lone block of a tuned kernel
        sm_rate = max(sm_flops_per_s(gpu), self.block_flops)
        self.grad_share = min(1.0, self.block_flops / sm_rate)
        self.sm_of = [w % gpu.sms for w in range(self.n)]
        self.sm_servers = {s: SMs(env, sm_rate) for s in set(self.sm_of)}
        bw = gpu.mem_bandwidth_gbs * 1e9
        self.device_mem = SMs(env, bw)
        self.copy_share = min(1.0, costs.copy_bytes_per_s / bw)
        self.step_share = min(1.0, costs.step_bytes_per_s / bw)
        # a step moves θ, g and θ' (3 vectors); with momentum the velocity too (2 more)
        self.step_vectors = 3.0 + (2.0 if sc.optimizer.momentum > 0 else 0.0)
        # A round of all the workers' gradients (sync): θ does not change while they are computed, so the
        # kernel computes them at θ itself (no copy), and the N blocks step a slice of θ each with the N
        # gradients, between two device-wide barriers.
        defn = algorithms.ALGORITHMS[sc.algorithm.name]
        self.rounds = (self.n > 1 and defn.rows.per == "gradient"
                       and defn.rows.per_version(sc.algorithm, self.n) == self.n)
        self.copy_pending = [False] * self.n
        self.builds_into = [False] * self.n
        self.fused_read = [False] * self.n
        self.cas_latency = [costs.atomic_latency_s] * self.n
        self.handoff_s = [costs.atomic_latency_s] * self.n  # the lock word's line moving to the next holder

    # --- device phases ---
    def _draw(self, w: int) -> float:
        return self.slow[w] * (self.rng[w].gamma(1 / self.cv ** 2, self.cv ** 2) if self.cv > 0 else 1.0)

    def _gradient(self, w: int) -> Any:
        if self.copy_pending[w]:  # Leashed's referenced vector, copied into the block's own first
            self.copy_pending[w] = False
            yield self._copy(w)
        yield self.sm_servers[self.sm_of[w]].run(self._draw(w) * self.grad_flops, self.grad_share)

    def _copy(self, w: int, part: float = 1.0) -> simpy.Event:
        return self.device_mem.run(2 * self.model_bytes * part, self.copy_share)

    def read(self, w: int, part: float = 1.0, seconds: float | None = None, first: bool = True) -> simpy.Event:
        if seconds is not None:
            return self.env.timeout(seconds)
        if self.fused_read[w] or self.rounds:  # the Lopez master reads the sum inside its step's pass
            return self.env.timeout(0.0)
        return self._copy(w, part)

    def update(self, w: int, part: float = 1.0, seconds: float | None = None, first: bool = True) -> simpy.Event:
        """The block's step over θ (or its ``part``)."""
        if seconds is not None:
            return self.env.timeout(seconds)
        if self.rounds:
            return self.env.process(self._round_update(part))
        if self.builds_into[w]:  # a lone Leashed worker too: the kernel always builds in a pool vector
            return self.update_into(w)
        return self._step(w, part)

    def _step(self, w: int, part: float = 1.0) -> simpy.Event:
        return self.device_mem.run(self.step_vectors * self.model_bytes * part, self.step_share)

    def _round_update(self, part: float) -> Any:
        """A round's step, done by all N blocks at once: each its 1/N of θ in and out (with the velocity)
        and of the N gradients, after a barrier and before the next (each an arrival and a release)."""
        yield self.env.timeout(2 * self.costs.atomic_latency_s)
        vectors = (self.n + self.step_vectors - 1) / self.n
        yield self.device_mem.run(vectors * self.model_bytes * part, self.step_share)
        yield self.env.timeout(2 * self.costs.atomic_latency_s)

    def update_into(self, w: int) -> simpy.Event:
        """θ_latest − η·g built in another vector of the pool: its lines come in as a copy's, then the step."""
        return self.env.process(self._update_into(w))

    def _update_into(self, w: int) -> Any:
        self.builds_into[w] = False
        yield self._copy(w)
        yield self._step(w)

    def touch(self, w: int) -> None:
        """Leashed's reference to the latest vector: the block copies it before its gradient, and builds its
        update in another vector of the pool."""
        self.copy_pending[w] = self.builds_into[w] = True

    def first_turn(self, w: int) -> simpy.Event | None:
        """A block is resident on its SM from the launch: no CPU to wait for."""
        return None

    def cycle_vectors(self, w: int, vectors: int) -> None:
        """A block's vectors live in the device's memory: no per-core caches for them to outgrow; nothing to set."""

    def fuses_read(self, w: int) -> None:
        """The master's step reads the sum in the same pass (``acc[i] · scale`` per element): no read."""
        self.fused_read[w] = True

    def atomic_adds(self, w: int, reader: int | None = None) -> simpy.Event:
        """Lopez's accumulation: a pass over the sum with an atomic add per element, priced as a step."""
        return self.update(w)

    def sync(self, w: int) -> simpy.Event:
        """A device-wide barrier: an arrival and a release, each an atomic on a shared word."""
        return self.env.timeout(2 * self.costs.atomic_latency_s)


class StreamsPlatform(ResidentPlatform):
    """Streams mode: the same block per attempt, launched by the worker's host thread under the shared
    interpreter lock. The attempt's start (read, or the gradient where there is no read) waits for it; its
    gradient or its update ends it (a Lopez master's attempt is one step). A lock-based worker's launch is
    priced at its read, inside the device lock, where the kernel would take the lock after it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.host_lock = simpy.Resource(self.env, capacity=1)
        self.launch_rest_s = max(0.0, self.gpu.launch_latency_s - self.costs.host_launch_s)
        self.launched = [False] * self.n

    def _launch(self, w: int) -> Any:
        with self.host_lock.request() as req:
            yield req
            yield self.env.timeout(self.costs.host_launch_s)
        yield self.env.timeout(self.launch_rest_s)

    def _launched_then(self, w: int, step: Any) -> Any:
        if not self.launched[w]:
            self.launched[w] = True
            yield from self._launch(w)
        yield step()

    def begin_attempt(self, w: int) -> None:
        """The attempt ended: the next step of this worker waits for a new launch."""
        self.launched[w] = False

    def read(self, w: int, part: float = 1.0, seconds: float | None = None, first: bool = True) -> simpy.Event:
        if not first:
            return super().read(w, part, seconds, first)
        return self.env.process(self._launched_then(w, lambda: super(StreamsPlatform, self).read(w, part, seconds)))

    def _gradient(self, w: int) -> Any:
        if not self.launched[w]:  # no read phase in this attempt: the launch precedes the gradient
            self.launched[w] = True
            yield from self._launch(w)
        yield from super()._gradient(w)
        self.begin_attempt(w)  # a round's worker that does not step (sync) launches again for its next

    def update(self, w: int, part: float = 1.0, seconds: float | None = None, first: bool = True) -> simpy.Event:
        done = super().update(w, part, seconds, first)
        done.callbacks.append(lambda _ev: self.begin_attempt(w))
        return done


def platform(env: simpy.Environment, sc: Scenario, gpu: Gpu, costs: BlockCosts, run: int, wl: Any,
             workload_key: str) -> ResidentPlatform:
    cls = StreamsPlatform if (sc.gpu or GpuConfig()).mode == "streams" else ResidentPlatform
    return cls(env, sc, gpu, costs, run, int(wl.dim), int(np.dtype(wl.dtype).itemsize), float(wl.flops_per_sample),
               workload_key)
